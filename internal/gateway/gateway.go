// Package gateway is the gateway's HTTP surface: authentication, the REST
// routes, and the one call path every tool call takes: look the server up,
// take a place in its fleet-wide semaphore, call the upstream within a
// deadline that ends before the lease, give the place back, answer.
//
// The same http.Handler is served under Lambda (through the Function URL),
// as a local HTTP server, and in tests.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/roundtrip"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// Defaults for Options.
const (
	DefaultMaxBodyBytes = 1 << 20
	// DefaultAnswerReserve is the time kept, before the request deadline,
	// to release the slot and answer after the upstream call ends.
	DefaultAnswerReserve = 500 * time.Millisecond
	// releaseTimeout bounds the release write, which runs even when the
	// client has gone away.
	releaseTimeout = 2 * time.Second
	// DefaultMaxLeaseHold is the default for Options.MaxLeaseHold.
	DefaultMaxLeaseHold = 30 * time.Second
)

// Authenticator checks a request's Authorization header.
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (*auth.Key, error)
}

// Registry finds server definitions.
type Registry interface {
	Get(ctx context.Context, id string) (*registry.Server, error)
	All(ctx context.Context) ([]*registry.Server, []error, error)
}

var (
	_ Authenticator = (*auth.Authenticator)(nil)
	_ Registry      = (*registry.Registry)(nil)
)

// Deps are the gateway's collaborators, built once per process.
type Deps struct {
	Auth     Authenticator
	Registry Registry
	Limiter  *lease.Limiter
	Upstream *upstream.Pool
	// Metrics receives one EMF record per tool call and per breaker
	// change; nil emits none.
	Metrics *metrics.Emitter
}

// Options configures a Gateway. The zero value means defaults.
type Options struct {
	// MaxBodyBytes bounds request bodies; zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// AnswerReserve is kept before the request deadline to release the
	// slot and answer; zero means DefaultAnswerReserve.
	AnswerReserve time.Duration
	// MaxLeaseHold is the longest a lease is taken for; a call allowed to
	// run longer renews its lease while it runs. A shorter hold gives a
	// crashed instance's slot back sooner. Zero means DefaultMaxLeaseHold.
	MaxLeaseHold time.Duration
	// Logger receives one record per request; nil discards them.
	Logger *slog.Logger
	// Version is reported by /health.
	Version string
	// RequestID returns the id of the request being served, for example
	// the Lambda request id; nil or "" means a random one.
	RequestID func(*http.Request) string
	// AllowedOrigins are browser origins (scheme://host[:port]) trusted to
	// call the gateway cross-origin. A request whose Origin is neither one
	// of them nor the gateway's own is refused with 403, against DNS
	// rebinding and cross-site requests; requests without Origin (agents,
	// CLIs) are not affected.
	AllowedOrigins []string
	// RequestStates seals the state of multi-round-trip tool calls; every
	// instance of a fleet must use the same key. Nil means a random key of
	// this process: a client's retry then completes only on this instance.
	RequestStates *roundtrip.Sealer
}

// Gateway serves the routes.
type Gateway struct {
	deps    Deps
	maxBody int64
	reserve time.Duration
	maxHold time.Duration
	log     *slog.Logger
	version string
	reqID   func(*http.Request) string
	mcp     mcpHandlers
	origins *http.CrossOriginProtection
	states  *roundtrip.Sealer
	// storeStats is when the limiter's counters were last emitted, and
	// what they were.
	statsMu   sync.Mutex
	statsAt   time.Time
	statsLast lease.Stats
}

// New returns a Gateway. It fails only on an invalid AllowedOrigins entry.
func New(deps Deps, opts Options) (*Gateway, error) {
	g := &Gateway{
		deps:    deps,
		maxBody: opts.MaxBodyBytes,
		reserve: opts.AnswerReserve,
		maxHold: opts.MaxLeaseHold,
		log:     opts.Logger,
		version: opts.Version,
		reqID:   opts.RequestID,
		states:  opts.RequestStates,
	}
	if g.states == nil {
		secret := make([]byte, roundtrip.MinSecretBytes)
		_, _ = rand.Read(secret)
		states, err := roundtrip.New(secret, roundtrip.Options{})
		if err != nil {
			return nil, err
		}
		g.states = states
	}
	if g.maxBody <= 0 {
		g.maxBody = DefaultMaxBodyBytes
	}
	if g.reserve <= 0 {
		g.reserve = DefaultAnswerReserve
	}
	if g.maxHold <= 0 {
		g.maxHold = DefaultMaxLeaseHold
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.version == "" {
		g.version = "dev"
	}
	g.mcp = g.newMCPHandlers()
	g.origins = http.NewCrossOriginProtection()
	for _, o := range opts.AllowedOrigins {
		if err := g.origins.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("allowed origin %q: %w", o, err)
		}
	}
	g.origins.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeFault(w, r, fault.New(fault.Forbidden, "cross-origin request from %q refused", truncate(r.Header.Get("Origin"), 100)))
	}))
	return g, nil
}

// route is one path and the handlers of its methods.
type route struct {
	path    string
	methods map[string]http.HandlerFunc
	// public routes need no key.
	public bool
}

func (g *Gateway) routes() []route {
	return []route{
		{path: "/health", public: true, methods: map[string]http.HandlerFunc{http.MethodGet: g.health}},
		{path: "/mcp-rest/tools/call", methods: map[string]http.HandlerFunc{http.MethodPost: g.restCall}},
		{path: "/mcp-rest/tools/list", methods: map[string]http.HandlerFunc{http.MethodGet: g.restList}},
		{path: "/mcp", methods: map[string]http.HandlerFunc{http.MethodPost: g.serveMCP}},
		{path: "/mcp/{server_id}", methods: map[string]http.HandlerFunc{http.MethodPost: g.serveMCP}},
	}
}

// Handler returns the gateway's http.Handler.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range g.routes() {
		var h http.Handler = methods(r.methods)
		if !r.public {
			h = g.authenticate(h)
		}
		mux.Handle(r.path, h)
	}
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeFault(w, r, fault.New(fault.NotFound, "no route %s %s", r.Method, truncate(r.URL.Path, 100)))
	}))
	return g.observe(g.origins.Handler(mux))
}

// methods dispatches on the HTTP method, answering 405 with an Allow header.
func methods(m map[string]http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := m[r.Method]; ok {
			h(w, r)
			return
		}
		allow := make([]string, 0, len(m))
		for method := range m {
			allow = append(allow, method)
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeFault(w, r, fault.New(fault.MethodNotAllowed, "%s is not allowed here", truncate(r.Method, 20)))
	})
}

func (g *Gateway) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": g.version})
}

type ctxKey int

const (
	keyCtx ctxKey = iota
	recordCtx
)

// record is what the access log says of one request; handlers fill it in.
type record struct {
	id       string
	key      string // the key's hash prefix, never the key
	serverID string
	tool     string
	outcome  string
	code     fault.Code
	cause    error
	waited   time.Duration
	leaseID  string
	breaker  string // a breaker transition this request caused
	uncapped bool   // the store failed and the call went without a slot
}

func recordFrom(ctx context.Context) *record {
	if rec, ok := ctx.Value(recordCtx).(*record); ok {
		return rec
	}
	return &record{}
}

func keyFrom(ctx context.Context) *auth.Key {
	k, _ := ctx.Value(keyCtx).(*auth.Key)
	return k
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush passes flushes through, for streamed responses.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe assigns a request id, recovers panics, and logs one record per
// request.
func (g *Gateway) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &record{}
		if g.reqID != nil {
			rec.id = g.reqID(r)
		}
		if rec.id == "" {
			rec.id = newRequestID()
		}
		sw := &statusWriter{ResponseWriter: w}
		sw.Header().Set("X-Request-Id", rec.id)
		ctx := context.WithValue(r.Context(), recordCtx, rec)
		defer func() {
			if p := recover(); p != nil {
				g.log.Error("panic", "request_id", rec.id, "panic", p, "stack", string(debug.Stack()))
				rec.code = fault.Internal
				if sw.status == 0 {
					writeFault(sw, r, fault.New(fault.Internal, "internal error"))
				}
			}
			attrs := []any{
				"request_id", rec.id,
				"method", r.Method,
				"path", truncate(r.URL.Path, 200),
				"status", sw.status,
				"duration_ms", time.Since(start).Milliseconds(),
			}
			if rec.key != "" {
				attrs = append(attrs, "key", rec.key)
			}
			if rec.serverID != "" {
				attrs = append(attrs, "server_id", rec.serverID)
			}
			if rec.tool != "" {
				attrs = append(attrs, "tool", rec.tool)
			}
			if rec.outcome != "" {
				attrs = append(attrs, "outcome", rec.outcome)
			}
			if rec.code != "" {
				attrs = append(attrs, "code", rec.code)
			}
			if rec.waited > 0 {
				attrs = append(attrs, "wait_ms", rec.waited.Milliseconds())
			}
			if rec.leaseID != "" {
				attrs = append(attrs, "lease", rec.leaseID)
			}
			if rec.breaker != "" {
				attrs = append(attrs, "breaker", rec.breaker)
			}
			if rec.uncapped {
				attrs = append(attrs, "uncapped", true)
			}
			if rec.cause != nil {
				attrs = append(attrs, "error", rec.cause.Error())
			}
			level := slog.LevelInfo
			if sw.status >= 500 {
				level = slog.LevelWarn
			}
			g.log.Log(ctx, level, "request", attrs...)
		}()
		next.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// authenticate requires a valid bearer key and puts it in the context.
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, ferr := g.authKey(r)
		if ferr != nil {
			if ferr.Code == fault.Unauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="mcpgate"`)
			}
			writeFault(w, r, ferr)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyCtx, k)))
	})
}

func (g *Gateway) authKey(r *http.Request) (*auth.Key, *fault.Error) {
	k, err := g.deps.Auth.Authenticate(r.Context(), r.Header.Get("Authorization"))
	switch {
	case err == nil:
		recordFrom(r.Context()).key = k.Hash[:12]
		return k, nil
	case err == auth.ErrNoKey:
		return nil, fault.New(fault.Unauthorized, "missing bearer key: send Authorization: Bearer <key>")
	case err == auth.ErrBadKey:
		return nil, fault.New(fault.Unauthorized, "unknown or malformed key")
	default:
		return nil, fault.Wrap(err, fault.StoreUnavailable, "cannot check the key right now").WithRetryAfter(storeRetryAfter)
	}
}

func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
