package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/gatewaylog"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Defaults of Options.
const (
	DefaultInterval    = time.Second
	DefaultReadTimeout = 3 * time.Second
	DefaultHistory     = 10 * time.Minute
	DefaultCallsWindow = 15 * time.Minute
	// DefaultLogGroupEvery is how often a log group is read (CloudWatch
	// Logs' FilterLogEvents has a low request quota).
	DefaultLogGroupEvery = 5 * time.Second
)

// Options configures a Console. Store is required; the zero value of every
// other field means its default.
type Options struct {
	// Store is the gateway's tables, read and written with the operator's
	// credentials.
	Store *fleet.Store
	// Where names the stack for people ("stack mcpgate in eu-west-1", "local
	// store at http://127.0.0.1:8000").
	Where string
	// Operator names who acts, in every audit record (the STS caller's ARN
	// when deployed, the OS user locally). Required for actions.
	Operator string
	// Audit receives the record of every action; nil refuses every action
	// (the console is then read-only, and says so).
	Audit Auditor
	// LogFile or LogGroup (read through Logs) is the gateway's log, for the
	// Calls screen and the refusals of the Fleet screen; neither: none.
	LogFile  string
	LogGroup string
	Logs     gatewaylog.LogsAPI
	// AuditLog reads the audit records back for the Calls screen (nil:
	// not shown).
	AuditLog AuditReader
	// Upstream configures the upstream client that "test connection" uses
	// (a new one per test, so nothing is cached between tests).
	Upstream upstream.Options
	// Stack is the CLI's --stack, for the commands the console shows.
	Stack string
	// DashboardURL links the deployed stack's CloudWatch dashboard, if any.
	DashboardURL string
	// Interval is how often the store is read (DefaultInterval);
	// ReadTimeout bounds one reading (DefaultReadTimeout); History is how
	// far back the charts go (DefaultHistory); CallsWindow how far back the
	// Calls screen's figures go (DefaultCallsWindow).
	Interval, ReadTimeout, History, CallsWindow time.Duration
	// LogGroupEvery is how often a log group is read
	// (DefaultLogGroupEvery).
	LogGroupEvery time.Duration
	// Token is the per-run token; empty means a new random one.
	Token string
	// Log receives the console's own diagnostics; nil discards them.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Console is one run of the console.
type Console struct {
	o     Options
	admin *lease.Admin
	pages map[string]*pageTemplate
	poll  *poller
	token string
	// addr is the address served ("127.0.0.1:8123"): the only Host
	// accepted, and the origin state-changing requests must come from.
	addr string
}

// New returns a Console of o's stack. Start its reading with Run.
func New(o Options) (*Console, error) {
	if o.Store == nil || o.Store.DB == nil {
		return nil, errors.New("console: no store")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.CallsWindow <= 0 {
		o.CallsWindow = DefaultCallsWindow
	}
	if o.LogGroupEvery <= 0 {
		o.LogGroupEvery = DefaultLogGroupEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Token == "" {
		o.Token = rand.Text() + rand.Text()
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{o: o, admin: lease.NewAdmin(o.Store.DB, o.Store.Tables.Leases), pages: pages, token: o.Token}
	c.poll = newPoller(&c.o)
	return c, nil
}

// Listen opens the console's listener on addr, which must be a loopback
// address ("" means 127.0.0.1 and a free port).
func Listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("console: address %q: %w", addr, err)
	}
	if !Loopback(host) {
		return nil, fmt.Errorf("console: %q is not a loopback address: the console serves this machine only (use 127.0.0.1, ::1 or localhost)", host)
	}
	return net.Listen("tcp", addr)
}

// Loopback reports whether host (an IP address or "localhost") is a
// loopback address.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.IsLoopback()
}

// URL is the address to open, with the run's token, for a console served
// on ln.
func (c *Console) URL(ln net.Listener) string {
	return "http://" + ln.Addr().String() + "/?token=" + c.token
}

// Serve reads the stack and serves the console on ln until ctx ends.
func (c *Console) Serve(ctx context.Context, ln net.Listener) error {
	c.addr = ln.Addr().String()
	go c.poll.run(ctx)
	srv := &http.Server{
		Handler:           c.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// Handler is the console's HTTP handler (Serve sets the address it
// accepts).
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.page("fleet"))
	mux.HandleFunc("GET /live/fleet", c.live("fleet"))
	mux.HandleFunc("GET /servers/{id}", c.page("server"))
	mux.HandleFunc("GET /live/servers/{id}", c.live("server"))
	mux.HandleFunc("GET /keys", c.page("keys"))
	mux.HandleFunc("GET /live/keys", c.live("keys"))
	mux.HandleFunc("GET /calls", c.page("calls"))
	mux.HandleFunc("GET /live/calls", c.live("calls"))
	mux.HandleFunc("GET /api/fleet", c.apiFleet)
	mux.HandleFunc("POST /servers/{id}/pause", c.action(c.pause))
	mux.HandleFunc("POST /servers/{id}/resume", c.action(c.resume))
	mux.HandleFunc("POST /servers/{id}/breakers/reset", c.action(c.resetBreaker))
	mux.HandleFunc("POST /servers/{id}/leases/release", c.action(c.release))
	mux.HandleFunc("POST /servers/{id}/cap", c.action(c.setCap))
	mux.HandleFunc("POST /servers/{id}/edit", c.action(c.edit))
	mux.HandleFunc("POST /servers/{id}/test", c.action(c.testConnection))
	mux.HandleFunc("POST /keys/create", c.action(c.createKey))
	mux.HandleFunc("POST /keys/revoke", c.action(c.revokeKey))
	return c.guard(mux)
}

// cookieName holds the per-run token in the browser.
const cookieName = "mcpgate_console"

// guard lets through only requests for the console's own address that
// carry the run's token, and state-changing ones only from its own
// origin; it sets the headers every answer carries.
func (c *Console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if c.addr != "" && r.Host != c.addr {
			http.Error(w, "console: wrong host (the console answers its own address only)", http.StatusMisdirectedRequest)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && r.URL.Path == "/" {
			if !c.tokenOK(t) {
				c.denied(w, http.StatusForbidden)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, "/", http.StatusSeeOther) // the token leaves the address bar
			return
		}
		ck, err := r.Cookie(cookieName)
		if err != nil || !c.tokenOK(ck.Value) {
			if strings.HasPrefix(r.URL.Path, "/static/") && r.Method == http.MethodGet {
				next.ServeHTTP(w, r) // the stylesheet of the page that says so
				return
			}
			c.denied(w, http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if r.Header.Get("Origin") != "http://"+r.Host || r.Header.Get("Sec-Fetch-Site") != "" && r.Header.Get("Sec-Fetch-Site") != "same-origin" {
				http.Error(w, "console: refused: a change must come from the console's own page (Origin)", http.StatusForbidden)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		}
		next.ServeHTTP(w, r)
	})
}

func (c *Console) tokenOK(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(c.token)) == 1
}

func (c *Console) denied(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = c.pages["denied"].t.ExecuteTemplate(w, "layout", &pageData{Title: "Not signed in", Page: "denied", NoNav: true})
}
