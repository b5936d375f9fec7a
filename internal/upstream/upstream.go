// Package upstream calls upstream MCP servers with the official MCP Go SDK,
// over streamable HTTP or SSE, and keeps their client sessions for reuse
// across calls (and across warm Lambda invocations).
//
// A session serves one call at a time: a failure of one call's transport
// breaks only that session, and notifications the upstream sends during a
// call reach that call alone. Idle sessions are kept per upstream identity
// (URL, credential, headers) and per principal (the agent a call is made
// for): a stateful upstream's state for one agent never reaches another. A
// broken session is closed and replaced by the next call, never fatal.
//
// Each server's credential is added by a transport layer of its own (see
// credential.go): the agent's credentials never go upstream. Servers of
// transport openapi are plain HTTP APIs called through package openapi.
//
// Tool lists are reused for Options.ToolsTTL, or the upstream's smaller
// ttlMs. A list the upstream gives every caller alike is fetched on a
// session of the gateway's own, on which no agent calls tools, and, for
// limited servers, shared by the fleet through a Catalog; a list it marks
// private is fetched and kept per principal. What one upstream can make the
// gateway read is bounded (see limits.go).
//
// A tool call is an Exchange: its caller may stop waiting for it, tell the
// upstream to stop (Stop) in every way the upstream's protocol allows
// without losing the late answer, and learn when the upstream is known to
// have stopped working on the call (Stopped).
package upstream

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// Defaults for Options.
const (
	DefaultMaxIdle     = 8
	DefaultIdleTimeout = 5 * time.Minute
	DefaultToolsTTL    = 30 * time.Second
	// maxTools bounds how many tools one upstream may list.
	maxTools = 2000
	// toolsRefreshFloor is the least time between two tool-list refreshes
	// caused by calls naming unknown tools.
	toolsRefreshFloor = time.Second
	// sweepEvery is how often idle sessions, tool lists and server info
	// of every upstream and principal are checked for age.
	sweepEvery = time.Minute
	// maxCredentials bounds the server credentials held (one per server
	// identity); past it they are dropped and rebuilt on use.
	maxCredentials = 1024
)

// Options configures a Pool. The zero value means defaults.
type Options struct {
	// HTTPClient sends the requests to upstreams. Nil means a client with
	// pooled keep-alive connections and MaxResponseBytes enforced, which
	// refuses to connect to loopback and link-local addresses (see
	// AllowLocal); a client of your own decides where it connects.
	HTTPClient *http.Client
	// AllowLocal lets every server's requests reach loopback and
	// link-local addresses (safeurl.LocalAddr): for local development and
	// tests, whose upstreams run on this host. Otherwise only a server
	// whose item sets allow_local may, and never a server an OpenAPI
	// document names.
	AllowLocal bool
	// Reserved are secrets the gateway keeps for itself (the request-state
	// key): a server whose credential refers to one, or whose credential's
	// value is one, is misconfigured, and nothing is sent.
	Reserved []Reserved
	// MaxResponseBytes bounds each upstream HTTP response body (one
	// streamable-HTTP POST, or one SSE stream) and each server-sent event.
	// An answer past it fails with a *LimitError. Zero means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// MaxListBytes bounds one upstream's tool list, all pages together.
	// Zero means DefaultMaxListBytes.
	MaxListBytes int64
	// MaxListPages bounds the pages of one upstream's tool list. Zero
	// means DefaultMaxListPages.
	MaxListPages int
	// MaxIdle is how many idle sessions are kept per upstream.
	MaxIdle int
	// IdleTimeout closes sessions unused for that long.
	IdleTimeout time.Duration
	// ToolsTTL is the longest an upstream's tool list is reused (by the
	// whole fleet, with a Catalog). An upstream's own smaller ttlMs
	// shortens it; a ttlMs of 0 or none at all means ToolsTTL.
	ToolsTTL time.Duration
	// Catalog, if not nil, shares the tool lists of limited servers (see
	// registry.Server.Limited) across the fleet: a list is read from it,
	// and only the instance it elects lists the upstream.
	Catalog Catalog
	// CatalogCheck is how often an instance holding a fresh list re-reads
	// the catalog's head, so that an invalidation reaches it. Zero means
	// DefaultCatalogCheck.
	CatalogCheck time.Duration
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Version is reported as the gateway's client version.
	Version string
	// Secrets resolves the secret references of servers' credentials; nil
	// means a server whose auth needs a secret cannot be called.
	Secrets Secrets
	// AWSCredentials sign requests to aws_sigv4 servers: the gateway's own
	// AWS identity (the function's role). Nil means such servers cannot be
	// called.
	AWSCredentials aws.CredentialsProvider
	// AWSRegion is the region aws_sigv4 signs for when a server names none.
	AWSRegion string
}

// DefaultCatalogCheck is the default for Options.CatalogCheck.
const DefaultCatalogCheck = 5 * time.Second

// Catalog shares upstreams' tool lists across the fleet (package catalog).
type Catalog interface {
	Load(ctx context.Context, id, endpoint, have string, fetch func(context.Context) (catalog.Fetched, error)) (catalog.Entry, error)
	Invalidate(ctx context.Context, id string) error
}

var _ Catalog = (*catalog.Catalog)(nil)

// Pool holds client sessions to upstream servers.
type Pool struct {
	client *mcp.Client
	// http sends requests for servers that may not reach local
	// addresses, local for those that may (allow_local, or AllowLocal).
	http, local *http.Client
	maxIdle     int
	idleTTL     time.Duration
	toolsTTL    time.Duration
	catalog     Catalog
	check       time.Duration
	log         *slog.Logger
	maxResp     int64
	maxList     int64
	maxPages    int

	secrets    Secrets
	reserved   []Reserved
	allowLocal bool
	awsCreds   aws.CredentialsProvider
	awsRegion  string

	mu    sync.Mutex
	idle  map[string][]*session // by session key, newest last
	tools map[string]*toolList  // by session key
	info  map[string]infoEntry  // by session key: the upstream's last initialize result
	apis  map[string]*apiEntry  // by identity key: OpenAPI-backed servers' documents
	gens  map[string]*lists     // by identity key: tool lists' invalidations
	// coalesce is the least time between two invalidations of one
	// upstream's lists (listChangedEvery).
	coalesce time.Duration
	creds    map[string]*credential // by identity key
	swept    time.Time
	// listeners routes notifications received on a session to its call.
	listeners sync.Map // *mcp.ClientSession → *Listener
	closed    bool
	connects  atomic.Int64
}

type session struct {
	cs       *mcp.ClientSession
	cancel   context.CancelFunc
	lastUsed time.Time
	// seen is the session's own requests' exchange: the HTTP+SSE
	// transport's event stream, which carries every call's answer.
	seen *traffic
}

type toolList struct {
	mu      sync.Mutex
	tools   map[string]*mcp.Tool
	ordered []*mcp.Tool
	fetched time.Time
	// failed is when the last refresh failed, with err: a failing
	// upstream is asked again at most every toolsRefreshFloor.
	failed time.Time
	err    error
	// version is the catalog version held; scope the upstream's
	// cacheScope; expires when the list must be listed again; reuse until
	// when this instance uses it without looking at the catalog.
	version string
	scope   string
	expires time.Time
	reuse   time.Time
	// private: a list every caller would share turned out private
	// (cacheScope); until expires, each caller lists on its own session.
	private bool
	// gen is the upstream's list generation the list was renewed in: an
	// invalidation since makes it stale.
	gen int64
}

// Listing is an upstream's tool list and how long it may be reused.
type Listing struct {
	Tools []*mcp.Tool
	// Scope is the upstream's cacheScope, "public" or "private".
	Scope string
	// Expires is when the gateway lists the upstream again.
	Expires time.Time
}

// Listener receives the notifications an upstream sends while a call runs.
type Listener struct {
	// Progress receives notifications/progress.
	Progress func(context.Context, *mcp.ProgressNotificationParams)
	// Log receives notifications/message.
	Log func(context.Context, *mcp.LoggingMessageParams)
}

// New returns a Pool.
func New(opts Options) *Pool {
	p := &Pool{
		http:      opts.HTTPClient,
		maxIdle:   opts.MaxIdle,
		idleTTL:   opts.IdleTimeout,
		toolsTTL:  opts.ToolsTTL,
		log:       opts.Logger,
		maxResp:   opts.MaxResponseBytes,
		maxList:   opts.MaxListBytes,
		maxPages:  opts.MaxListPages,
		idle:      map[string][]*session{},
		tools:     map[string]*toolList{},
		info:      map[string]infoEntry{},
		apis:      map[string]*apiEntry{},
		gens:      map[string]*lists{},
		coalesce:  listChangedEvery,
		creds:     map[string]*credential{},
		secrets:   opts.Secrets,
		awsCreds:  opts.AWSCredentials,
		awsRegion: opts.AWSRegion,
		catalog:   opts.Catalog,
		check:     opts.CatalogCheck,
	}
	if p.maxResp <= 0 {
		p.maxResp = DefaultMaxResponseBytes
	}
	if p.maxList <= 0 {
		p.maxList = DefaultMaxListBytes
	}
	if p.maxPages <= 0 {
		p.maxPages = DefaultMaxListPages
	}
	p.local = p.http
	if p.http == nil {
		p.http, p.local = NewHTTPClient(p.maxResp, opts.AllowLocal), NewHTTPClient(p.maxResp, true)
		if opts.AllowLocal {
			p.local = p.http
		}
	}
	p.reserved, p.allowLocal = opts.Reserved, opts.AllowLocal
	if p.maxIdle <= 0 {
		p.maxIdle = DefaultMaxIdle
	}
	if p.idleTTL <= 0 {
		p.idleTTL = DefaultIdleTimeout
	}
	if p.toolsTTL <= 0 {
		p.toolsTTL = DefaultToolsTTL
	}
	if p.check <= 0 {
		p.check = DefaultCatalogCheck
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	p.client = mcp.NewClient(&mcp.Implementation{Name: "mcpgate", Version: version}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		// The gateway relays results as they are; it cannot answer an
		// upstream's requests for input on an agent's behalf.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			if l := p.listener(req.Session); l != nil && l.Progress != nil {
				l.Progress(ctx, req.Params)
			}
		},
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			if l := p.listener(req.Session); l != nil && l.Log != nil {
				l.Log(ctx, req.Params)
			}
		},
	})
	return p
}

func (p *Pool) listener(cs *mcp.ClientSession) *Listener {
	if v, ok := p.listeners.Load(cs); ok {
		return v.(*Listener)
	}
	return nil
}

// Connects is how many sessions the pool has opened.
func (p *Pool) Connects() int64 { return p.connects.Load() }

// NewHTTPClient returns an HTTP client for upstream calls: keep-alive
// connections pooled per host, and every response body cut off after limit
// bytes. It has no overall timeout: each call's context bounds it. Unless
// allowLocal, it refuses to connect to loopback and link-local addresses,
// checked on the address dialed, after DNS.
func NewHTTPClient(limit int64, allowLocal bool) *http.Client {
	return &http.Client{Transport: &limitTransport{base: newTransport(allowLocal), limit: limit}}
}

// newTransport returns a transport pooling keep-alive connections per
// host, refusing local addresses unless allowLocal.
func newTransport(allowLocal bool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 90 * time.Second
	t.ResponseHeaderTimeout = 0
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if !allowLocal {
		d.Control = safeurl.RefuseLocal
	}
	t.DialContext = d.DialContext
	return t
}

// clientFor is the HTTP client of srv's requests: one that may reach local
// addresses only if srv may.
func (p *Pool) clientFor(srv *registry.Server) *http.Client {
	if srv.AllowLocal {
		return p.local
	}
	return p.http
}

// limitTransport caps response bodies.
type limitTransport struct {
	base  http.RoundTripper
	limit int64
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = addParamHeaders(req)
	if x := exchangeFrom(req.Context()); x != nil {
		if err := x.sendingHTTP(req); err != nil {
			return nil, err
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	ex := trafficFrom(req.Context())
	ex.seen(req, resp)
	if ex != nil && ex.stream && req.Method == http.MethodGet {
		// An HTTP+SSE session's stream: bounded per request it serves.
		resp.Body = &limitedBody{rc: resp.Body, left: math.MaxInt64, ex: ex, stream: true}
	} else {
		resp.Body = &limitedBody{rc: resp.Body, left: t.limit, ex: ex}
	}
	tapEvents(req, resp)
	return resp, nil
}

// ErrResponseTooLarge is returned when an upstream response exceeds the
// configured limit.
var ErrResponseTooLarge = errors.New("upstream response too large")

type limitedBody struct {
	rc   io.ReadCloser
	left int64
	ex   *traffic // told when the limit is passed
	// stream: an HTTP+SSE session's stream, whose bytes ex counts per
	// request (traffic.spendStream).
	stream bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// Exactly at the limit: fine if the body ends here.
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		if b.ex != nil {
			b.ex.tooLarge.Store(true)
		}
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.stream {
		if !b.ex.spendStream(n) {
			return n, ErrResponseTooLarge
		}
		return n, err
	}
	if !b.ex.spend(n) {
		return n, ErrResponseTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// identityKey names how the gateway appears to srv's upstream (URL,
// transport, credential, headers), without any secret value.
func identityKey(srv *registry.Server) string {
	sum := sha256.Sum256([]byte(srv.IdentityKey()))
	return hex.EncodeToString(sum[:16])
}

// sessionKey names the sessions, tool list and info of srv as seen by
// one principal.
func sessionKey(srv *registry.Server, c Caller) string {
	return identityKey(srv) + " " + c.Principal
}

// credential returns srv's credential, built once per identity so that
// OAuth tokens outlive sessions.
func (p *Pool) credential(srv *registry.Server) *credential {
	key := identityKey(srv)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.creds[key]; ok {
		return c
	}
	if len(p.creds) >= maxCredentials {
		clear(p.creds)
	}
	c := p.newCredential(srv)
	p.creds[key] = c
	return c
}

// empty reports whether the credential adds nothing to requests.
func (c *credential) empty() bool {
	return c.provider == nil && len(c.static) == 0 && len(c.forward) == 0
}

// sessionClient is the HTTP client of srv's MCP sessions: the pool's, held
// to srv's origin (a redirect or an SSE endpoint elsewhere is refused
// before anything is sent), with srv's credential added to its requests.
func (p *Pool) sessionClient(srv *registry.Server) (*http.Client, error) {
	origin, err := url.Parse(srv.URL)
	if err != nil {
		return nil, fmt.Errorf("server url: %w", err)
	}
	hc := p.clientFor(srv)
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	if cred := p.credential(srv); !cred.empty() {
		base = &credTransport{base: base, cred: cred, origin: origin}
	}
	c := *hc
	c.Transport = &originGuard{base: base, origin: origin}
	return &c, nil
}

// Close closes every idle session. Sessions in use close when returned.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = map[string][]*session{}
	for _, l := range p.gens {
		l.mu.Lock()
		if l.timer != nil && l.timer.Stop() {
			l.timer = nil
		}
		l.mu.Unlock()
	}
	p.mu.Unlock()
	for _, list := range idle {
		for _, s := range list {
			s.close()
		}
	}
}

// checkout returns an idle session of c's for srv or connects a new one.
func (p *Pool) checkout(ctx context.Context, srv *registry.Server, c Caller) (*session, bool, error) {
	key := sessionKey(srv, c)
	now := time.Now()
	var stale []*session
	var got *session
	p.mu.Lock()
	stale = p.sweepLocked(now)
	list := p.idle[key]
	for len(list) > 0 {
		s := list[len(list)-1]
		list = list[:len(list)-1]
		if now.Sub(s.lastUsed) > p.idleTTL {
			stale = append(stale, s)
			continue
		}
		got = s
		break
	}
	p.idle[key] = list
	p.mu.Unlock()
	for _, s := range stale {
		go s.close()
	}
	if got != nil {
		return got, true, nil
	}
	s, err := p.connect(ctx, srv, c)
	if err != nil {
		return nil, false, err
	}
	return s, false, nil
}

// sweepLocked, at most once per sweepEvery, forgets what no call has used
// for long, of every upstream and principal: it returns the stale idle
// sessions to close and drops old tool lists and info. p.mu is held.
func (p *Pool) sweepLocked(now time.Time) []*session {
	if now.Sub(p.swept) < sweepEvery {
		return nil
	}
	p.swept = now
	var stale []*session
	for key, list := range p.idle {
		keep := list[:0]
		for _, s := range list {
			if now.Sub(s.lastUsed) > p.idleTTL {
				stale = append(stale, s)
			} else {
				keep = append(keep, s)
			}
		}
		if len(keep) == 0 {
			delete(p.idle, key)
		} else {
			p.idle[key] = keep
		}
	}
	old := max(p.toolsTTL, p.idleTTL)
	for key, e := range p.info {
		if now.Sub(e.fetched) > old {
			delete(p.info, key)
		}
	}
	for key, tl := range p.tools {
		if !tl.mu.TryLock() {
			continue // in use
		}
		if now.Sub(tl.fetched) > old {
			delete(p.tools, key)
		}
		tl.mu.Unlock()
	}
	for key, l := range p.gens {
		if !l.mu.TryLock() {
			continue
		}
		if !l.running && l.timer == nil && now.Sub(l.last) > old {
			// A list renewed in its generation is then taken for stale:
			// listed once more, never reused wrongly.
			delete(p.gens, key)
		}
		l.mu.Unlock()
	}
	return stale
}

// connect opens a session to srv. The session outlives the call that
// opened it, so it is connected in a context of its own (the SSE transport
// ties its event stream to that context); ctx bounds only the handshake.
func (p *Pool) connect(ctx context.Context, srv *registry.Server, c Caller) (*session, error) {
	hc, err := p.sessionClient(srv)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", srv.ID, err)
	}
	var t mcp.Transport
	switch srv.Transport {
	case registry.TransportSSE:
		t = &mcp.SSEClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxEventSize: int(p.maxResp)}
	default:
		t = &mcp.StreamableClientTransport{
			Endpoint:             srv.URL,
			HTTPClient:           hc,
			DisableStandaloneSSE: true,
			MaxRetries:           -1,
			MaxEventSize:         int(p.maxResp),
		}
	}
	p.connects.Add(1)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The session outlives this call: none of its budget applies.
	sctx, seen := withTraffic(withBudget(sctx, 0))
	if srv.Transport == registry.TransportSSE {
		seen.stream = true
		seen.attach(nil, p.maxResp)
	}
	// A stream the session keeps open (the SSE transport's) may carry
	// notifications/tools/list_changed.
	sctx = withListChanged(sctx, func() { p.InvalidateTools(srv) }, false)
	stop := context.AfterFunc(ctx, cancel)
	cs, err := p.client.Connect(sctx, t, nil)
	if !stop() {
		// ctx ended during the handshake.
		if err == nil {
			_ = cs.Close()
		}
		cancel()
		return nil, fmt.Errorf("connect to %s: %w", srv.ID, ctx.Err())
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("connect to %s: %w", srv.ID, err)
	}
	if res := cs.InitializeResult(); res != nil {
		p.mu.Lock()
		p.info[sessionKey(srv, c)] = infoEntry{res: res, fetched: time.Now()}
		p.mu.Unlock()
		// Before 2026-07-28 the log level is the session's, and a session
		// serves many calls in turn: ask for every level once; each call
		// relays what its agent's level lets through. (From 2026-07-28 on,
		// a call names its level in _meta.)
		if res.Capabilities != nil && res.Capabilities.Logging != nil && res.ProtocolVersion < "2026-07-28" {
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				p.log.Debug("upstream refused logging/setLevel; its log messages are not relayed", "server_id", srv.ID, "error", err.Error())
			}
		}
	}
	return &session{cs: cs, cancel: cancel, seen: seen}, nil
}

// close ends the session and its context.
func (s *session) close() {
	_ = s.cs.Close()
	s.cancel()
}

// checkin returns a healthy session to c's idle list, or closes it.
func (p *Pool) checkin(srv *registry.Server, c Caller, s *session, healthy bool) {
	if healthy {
		s.lastUsed = time.Now()
		key := sessionKey(srv, c)
		p.mu.Lock()
		if !p.closed && len(p.idle[key]) < p.maxIdle {
			p.idle[key] = append(p.idle[key], s)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	go s.close()
}

// healthy reports whether a session that returned err may be reused: after
// success, a JSON-RPC error answer or a cancelled call (the SDK retires the
// call and tells the upstream), yes; after a transport failure, no.
func healthy(err error) bool {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var rpcErr *jsonrpc.Error
	return errors.As(err, &rpcErr) && !localCode(rpcErr.Code)
}

// Do runs fn with a session of c's to srv, exclusive for the call. If the
// upstream no longer knows a reused session (it restarted), the request was
// not processed, and fn runs once more on a new session. l, if not nil,
// receives the upstream's notifications while fn runs.
func (p *Pool) Do(ctx context.Context, srv *registry.Server, c Caller, l *Listener, fn func(context.Context, *mcp.ClientSession) error) error {
	return p.do(ctx, srv, c, l, nil, fn)
}

// do is Do for the call of exchange x (nil for other requests): x sees its
// call's HTTP requests, and decides whether the session is kept.
func (p *Pool) do(ctx context.Context, srv *registry.Server, c Caller, l *Listener, x *Exchange, fn func(context.Context, *mcp.ClientSession) error) error {
	if srv.Transport == registry.TransportOpenAPI {
		return &Error{Kind: KindRPC, ServerID: srv.ID, RPC: errNotMCP, Err: errNotMCP}
	}
	ctx = withForward(ctx, c.Header)
	for attempt := 0; ; attempt++ {
		s, reused, err := p.checkout(ctx, srv, c)
		if err != nil {
			return p.classify(ctx, srv, err)
		}
		ctx, ex := withTraffic(ctx)
		fctx := withListChanged(ctx, func() { p.InvalidateTools(srv) }, true)
		if l != nil {
			if srv.Transport == registry.TransportSSE {
				// The old transport carries every message on one stream
				// not tied to this call: the SDK's handlers relay them.
				p.listeners.Store(s.cs, l)
			} else {
				fctx = withListener(fctx, l)
			}
		}
		if x != nil {
			fctx = withExchange(fctx, x)
		}
		if s.seen.stream {
			// The answer, and all the upstream sends meanwhile, come on
			// the session's stream: they count against this request.
			s.seen.attach(ex, p.maxResp)
		}
		err = fn(fctx, s.cs)
		if s.seen.stream {
			s.seen.attach(nil, p.maxResp)
		}
		if l != nil {
			p.listeners.Delete(s.cs)
		}
		if s.seen.tooLarge.Load() {
			ex.tooLarge.Store(true)
		}
		if s.seen.stream && (ex.tooLarge.Load() || ex.overBudget.Load()) {
			// The stream was cut: the session is of no more use.
			err = cmp.Or(err, error(ErrResponseTooLarge))
		}
		p.checkin(srv, c, s, healthy(err) && (x == nil || !x.discarding()))
		if err != nil && reused && attempt == 0 && errors.Is(err, mcp.ErrSessionMissing) && ctx.Err() == nil {
			p.log.Debug("upstream lost its session; reconnecting", "server_id", srv.ID)
			continue
		}
		if err != nil {
			return p.classify(ctx, srv, err)
		}
		return nil
	}
}

// Tools returns srv's tools as c sees them (see ToolListing).
func (p *Pool) Tools(ctx context.Context, srv *registry.Server, c Caller) ([]*mcp.Tool, error) {
	ls, err := p.ToolListing(ctx, srv, c)
	if err != nil {
		return nil, err
	}
	return ls.Tools, nil
}

// MaxTTL is the longest the gateway reuses an upstream's list.
func (p *Pool) MaxTTL() time.Duration { return p.toolsTTL }

// listingPrincipal is the principal of the gateway's own sessions, on
// which the tool lists shared by every caller are fetched: no agent's call
// ever runs on them, so such a list reflects no agent's session state. An
// agent's principal ("key:…", "oauth:…", "iam:…") never takes this form.
const listingPrincipal = "mcpgate:lists"

// ToolListing returns srv's tools as c sees them, and how long they may be
// reused. A list the upstream gives every caller alike (cacheScope public,
// or none) is fetched on a session of the gateway's own, never an agent's,
// and kept for every caller: this instance's copy while it is fresh, else
// the fleet's catalog (for limited servers), else the upstream. A list the
// upstream marks private, and the list of a server that forwards callers'
// headers, is fetched on c's own session and kept for c alone, never in the
// catalog (which learns only that the list is private). A failing upstream
// is asked again at most every toolsRefreshFloor.
func (p *Pool) ToolListing(ctx context.Context, srv *registry.Server, c Caller) (*Listing, error) {
	if srv.Transport == registry.TransportOpenAPI {
		api, err := p.openAPI(ctx, srv)
		if err != nil {
			return nil, err
		}
		return &Listing{Tools: api.Tools(), Scope: "public", Expires: time.Now().Add(p.toolsTTL)}, nil
	}
	tl, err := p.listFor(ctx, srv, c, "")
	if err != nil {
		return nil, err
	}
	defer tl.mu.Unlock()
	return &Listing{Tools: tl.ordered, Scope: tl.scope, Expires: tl.expires}, nil
}

// listChangedEvery is the least time between two invalidations of one
// upstream's lists that its notifications/tools/list_changed cause.
const listChangedEvery = 5 * time.Second

// lists is what the pool knows of the tool lists of one upstream identity:
// a generation that invalidations advance (a list renewed in an older one
// is stale), and the coalescing of the upstream's invalidations.
type lists struct {
	gen atomic.Int64

	mu      sync.Mutex
	srv     *registry.Server // the latest item seen for the identity
	last    time.Time        // when the last invalidation started
	running bool             // the catalog's invalidation is being written
	pending bool             // another notification came since
	timer   *time.Timer      // a trailing invalidation is due
}

// listsOf returns the list state of srv's upstream identity.
func (p *Pool) listsOf(srv *registry.Server) *lists { return held(p, p.gens, identityKey(srv)) }

// held returns m[key], made if absent; p.mu guards m.
func held[T any](p *Pool, m map[string]*T, key string) *T {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := m[key]
	if !ok {
		v = new(T)
		m[key] = v
	}
	return v
}

// InvalidateTools makes srv's lists stale here (every caller's) and in the
// catalog, after the upstream said it changed. Invalidations are coalesced
// per upstream, however many notifications arrive: the first runs at once,
// at most one is written to the catalog at a time and one per
// listChangedEvery, and notifications meanwhile cause one more at the end
// of that time. Each notification costs a lock and a comparison, never a
// goroutine or a store write of its own.
func (p *Pool) InvalidateTools(srv *registry.Server) {
	l := p.listsOf(srv)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.srv = srv
	if l.running || l.timer != nil {
		l.pending = true
		return
	}
	if wait := p.coalesce - time.Since(l.last); wait > 0 {
		l.pending = true
		l.timer = time.AfterFunc(wait, func() { p.trailing(l) })
		return
	}
	p.invalidateLocked(l)
}

// trailing runs the invalidation due after notifications were coalesced.
func (p *Pool) trailing(l *lists) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	if l.pending && !l.running {
		p.invalidateLocked(l)
	}
}

// invalidateLocked makes l's lists stale here at once and, for a
// catalogued server, in the catalog in the background; l.mu is held.
func (p *Pool) invalidateLocked(l *lists) {
	l.last, l.pending = time.Now(), false
	l.gen.Add(1)
	srv := l.srv
	if !p.catalogued(srv) {
		return
	}
	l.running = true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.catalog.Invalidate(ctx, srv.ID); err != nil {
			p.log.Warn("invalidating the tool catalog failed", "server_id", srv.ID, "error", err.Error())
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.running = false
		if l.pending && l.timer == nil {
			wait := max(p.coalesce-time.Since(l.last), 0)
			l.timer = time.AfterFunc(wait, func() { p.trailing(l) })
		}
	}()
}

type infoEntry struct {
	res     *mcp.InitializeResult
	fetched time.Time
}

// Info returns what srv said of itself when a session of c's last
// connected to it (capabilities, server info, instructions), connecting if
// none has within ToolsTTL.
func (p *Pool) Info(ctx context.Context, srv *registry.Server, c Caller) (*mcp.InitializeResult, error) {
	if srv.Transport == registry.TransportOpenAPI {
		api, err := p.openAPI(ctx, srv)
		if err != nil {
			return nil, err
		}
		return openAPIInfo(api, srv), nil
	}
	key := sessionKey(srv, c)
	p.mu.Lock()
	e, ok := p.info[key]
	p.mu.Unlock()
	if ok && time.Since(e.fetched) < p.toolsTTL {
		return e.res, nil
	}
	var res *mcp.InitializeResult
	err := p.Do(ctx, srv, c, nil, func(ctx context.Context, cs *mcp.ClientSession) error {
		res = cs.InitializeResult()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, &Error{Kind: KindUnavailable, ServerID: srv.ID, Err: errors.New("session has no initialize result")}
	}
	p.mu.Lock()
	p.info[key] = infoEntry{res: res, fetched: time.Now()}
	p.mu.Unlock()
	return res, nil
}

// ErrUnknownTool means the upstream does not list a tool of that name.
var ErrUnknownTool = errors.New("unknown tool")

// Tool returns srv's tool named name, as c sees the list (see
// ToolListing). A name missing from a list older than a second triggers one
// refresh, so a tool added upstream is found without waiting for the list
// to expire; with a catalog, that refresh reads the catalog and leaves the
// upstream alone, so that callers naming unknown tools cannot make the
// fleet list the upstream.
func (p *Pool) Tool(ctx context.Context, srv *registry.Server, c Caller, name string) (*mcp.Tool, error) {
	if srv.Transport == registry.TransportOpenAPI {
		return p.openAPITool(ctx, srv, name)
	}
	tl, err := p.listFor(ctx, srv, c, name)
	if err != nil {
		return nil, err
	}
	defer tl.mu.Unlock()
	if t, ok := tl.tools[name]; ok {
		return t, nil
	}
	return nil, ErrUnknownTool
}

// cachedTool returns srv's tool named name from the list this instance
// holds for c, if it holds one.
func (p *Pool) cachedTool(srv *registry.Server, c Caller, name string) *mcp.Tool {
	for _, key := range []string{identityKey(srv), sessionKey(srv, c)} {
		p.mu.Lock()
		tl := p.tools[key]
		p.mu.Unlock()
		if tl == nil {
			continue
		}
		tl.mu.Lock()
		t := tl.tools[name]
		tl.mu.Unlock()
		if t != nil {
			return t
		}
	}
	return nil
}

// listFor returns, locked, the list c sees of srv, renewed if it is stale,
// or if it lacks name (when not empty) and is older than toolsRefreshFloor.
// The list every caller shares is looked at first; once it turns out
// private, c's own is used instead.
func (p *Pool) listFor(ctx context.Context, srv *registry.Server, c Caller, name string) (*toolList, error) {
	if len(srv.ForwardHeaders) == 0 {
		shared := p.toolList(identityKey(srv))
		shared.mu.Lock()
		if err := p.renew(ctx, srv, Caller{Principal: listingPrincipal}, shared, name, true); err != nil {
			shared.mu.Unlock()
			return nil, err
		}
		if !shared.private {
			return shared, nil
		}
		shared.mu.Unlock()
	}
	own := p.toolList(sessionKey(srv, c))
	own.mu.Lock()
	if err := p.renew(ctx, srv, c, own, name, false); err != nil {
		own.mu.Unlock()
		return nil, err
	}
	return own, nil
}

// catalogued reports whether srv's shared list is kept in the fleet's
// catalog: for limited servers (an unlimited one causes no store traffic).
func (p *Pool) catalogued(srv *registry.Server) bool {
	return p.catalog != nil && srv.Limited()
}

func (p *Pool) toolList(key string) *toolList { return held(p, p.tools, key) }

// renew brings tl up to date (see listFor), from the catalog (shared lists
// only) or from the upstream, asked on who's session; tl.mu is held. A
// failure of the upstream is kept in tl, so it is asked again at most every
// toolsRefreshFloor.
func (p *Pool) renew(ctx context.Context, srv *registry.Server, who Caller, tl *toolList, name string, shared bool) error {
	gen := p.listsOf(srv).gen.Load()
	if (tl.ordered != nil || tl.private) && time.Now().Before(tl.reuse) && tl.gen == gen {
		if name == "" || tl.private || tl.tools[name] != nil || time.Since(tl.fetched) < toolsRefreshFloor {
			return nil
		}
		tl.reuse = time.Time{}
	}
	if tl.err != nil && time.Since(tl.failed) < toolsRefreshFloor {
		return tl.err
	}
	err := p.renewTools(ctx, srv, who, tl, shared)
	if err == nil {
		// The generation read before renewing: an invalidation that came
		// meanwhile leaves the list stale.
		tl.gen = gen
	}
	if err != nil && ctx.Err() == nil {
		tl.failed, tl.err = time.Now(), err
	} else if err == nil {
		tl.err = nil
	}
	return err
}

func (p *Pool) renewTools(ctx context.Context, srv *registry.Server, who Caller, tl *toolList, shared bool) error {
	now := time.Now()
	if !shared || !p.catalogued(srv) {
		f, err := p.fetchTools(ctx, srv, who)
		if err != nil {
			return err
		}
		tl.set(f.list, f.scope, now.Add(f.ttl), now.Add(f.ttl), "", shared)
		return nil
	}
	var fetchErr error
	e, err := p.catalog.Load(ctx, srv.ID, identityKey(srv), tl.version, func(ctx context.Context) (catalog.Fetched, error) {
		f, err := p.fetchTools(ctx, srv, who)
		if err != nil {
			fetchErr = err
			return catalog.Fetched{}, err
		}
		if f.scope == catalog.ScopePrivate {
			// Never shared: the fleet learns only that it is private.
			return catalog.Fetched{Scope: f.scope, TTL: f.ttl}, nil
		}
		data, err := json.Marshal(f.list)
		if err != nil {
			return catalog.Fetched{}, fmt.Errorf("encode the tools of %s: %w", srv.ID, err)
		}
		return catalog.Fetched{Data: data, Scope: f.scope, TTL: f.ttl}, nil
	})
	if err != nil && e.Data == nil && e.Version == "" {
		if fetchErr != nil {
			return fetchErr
		}
		if ctx.Err() != nil {
			return err
		}
		// The catalog cannot be read: a store outage must not stop tool
		// calls. Keep this instance's copy a little longer, or list the
		// upstream as if there were no catalog.
		p.log.Warn("tool catalog unavailable; listing without it", "server_id", srv.ID, "error", err.Error())
		if tl.ordered != nil || tl.private {
			tl.reuse = now.Add(p.check)
			return nil
		}
		f, err := p.fetchTools(ctx, srv, who)
		if err != nil {
			return err
		}
		tl.set(f.list, f.scope, now.Add(f.ttl), now.Add(p.check), "", true)
		return nil
	}
	if err != nil {
		// Listed, but not shared: this instance keeps its copy.
		p.log.Warn("tool list not shared with the fleet", "server_id", srv.ID, "error", err.Error())
	}
	reuse := now.Add(p.check)
	if e.Expires.Before(reuse) {
		reuse = e.Expires
	}
	if e.Stale {
		reuse = now.Add(catalog.DefaultPoll * 4)
	}
	switch {
	case e.Scope == catalog.ScopePrivate:
		tl.set(nil, e.Scope, e.Expires, reuse, e.Version, true)
		return nil
	case e.Data == nil:
		// This instance holds that version already.
		tl.set(tl.ordered, e.Scope, e.Expires, reuse, e.Version, true)
		return nil
	}
	if int64(len(e.Data)) > p.maxList {
		return &Error{Kind: KindTooLarge, ServerID: srv.ID, Err: &LimitError{What: "tool list", Limit: p.maxList}}
	}
	var list []*mcp.Tool
	if err := json.Unmarshal(e.Data, &list); err != nil {
		return &Error{Kind: KindUnavailable, ServerID: srv.ID, Err: fmt.Errorf("decode the catalog's tools: %w", err)}
	}
	list = slices.DeleteFunc(list, func(t *mcp.Tool) bool { return t == nil })
	tl.set(list, e.Scope, e.Expires, reuse, e.Version, true)
	return nil
}

// set records a renewed list and how long it lasts. A shared list the
// upstream marked private is not kept: tl only says it is private, and
// each caller lists on its own session.
func (tl *toolList) set(list []*mcp.Tool, scope string, expires, reuse time.Time, version string, shared bool) {
	if scope != catalog.ScopePrivate {
		scope = "public"
	}
	tl.private = shared && scope == catalog.ScopePrivate
	if tl.private || list == nil {
		list = []*mcp.Tool{}
	}
	tl.ordered, tl.tools = list, index(list)
	if tl.private {
		tl.ordered, tl.tools = nil, nil
	}
	tl.scope, tl.expires, tl.reuse, tl.version, tl.fetched = scope, expires, reuse, version, time.Now()
}

func index(list []*mcp.Tool) map[string]*mcp.Tool {
	m := make(map[string]*mcp.Tool, len(list))
	for _, t := range list {
		m[t.Name] = t
	}
	return m
}

// fetched is one tools/list of an upstream.
type fetched struct {
	list  []*mcp.Tool
	scope string
	ttl   time.Duration
}

// fetchTools lists the upstream's tools, every page, with c's session,
// within the pool's bounds on pages, bytes and tools, and how long it says
// the list may be reused (capped by ToolsTTL; none or 0 means ToolsTTL). On
// the wire, the pages' bytes count against the bound as they come
// (streamable HTTP); the tools' size counts too, for the HTTP+SSE
// transport, whose answers come on the session's own stream.
func (p *Pool) fetchTools(ctx context.Context, srv *registry.Server, c Caller) (fetched, error) {
	var f fetched
	err := p.Do(withBudget(ctx, p.maxList), srv, c, nil, func(ctx context.Context, cs *mcp.ClientSession) error {
		f = fetched{ttl: p.toolsTTL, scope: "public"}
		size := int64(0)
		params := &mcp.ListToolsParams{}
		for page := 0; ; page++ {
			if page == p.maxPages {
				return &LimitError{What: "tool list pages", Limit: int64(p.maxPages)}
			}
			res, err := cs.ListTools(ctx, params)
			if err != nil {
				return err
			}
			if res.TTLMs > 0 {
				f.ttl = min(f.ttl, time.Duration(res.TTLMs)*time.Millisecond)
			}
			if res.CacheScope == "private" {
				f.scope = "private"
			}
			for _, t := range res.Tools {
				if t == nil {
					continue
				}
				if size += int64(toolSize(t)); size > p.maxList {
					return &LimitError{What: "tool list", Limit: p.maxList}
				}
				if len(f.list) == maxTools {
					return &LimitError{What: "tools", Limit: maxTools}
				}
				f.list = append(f.list, t)
			}
			if res.NextCursor == "" {
				return nil
			}
			params = &mcp.ListToolsParams{Cursor: res.NextCursor}
		}
	})
	if f.list == nil {
		f.list = []*mcp.Tool{}
	}
	return f, err
}
