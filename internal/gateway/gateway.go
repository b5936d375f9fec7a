// Package gateway is the gateway's HTTP surface: authentication, the MCP
// and REST routes (and the OAuth protected-resource metadata), and the one
// call path every tool call takes: look the server up,
// take a place in its fleet-wide semaphore, call the upstream within a
// deadline that ends before the lease, give the place back, answer.
//
// The invariant the call path keeps: a place goes back only when the
// upstream is known to have stopped working on the call. The agent is
// answered when the upstream answers or when the call is cut off (its
// timeout, the request's deadline, the caller gone, shutdown), whichever is
// first; a cut-off call's exchange with the upstream goes on in the
// background, holding and renewing its lease, until the upstream's answer
// arrives, a stateful session acknowledges the cancellation, or the request
// is closed on a server declared stops_on_close; at the latest when the
// server's cancel_grace ends, and then the place is freed anyway, logged and
// counted (CapMayBeExceeded). Drain and Shutdown wait for those exchanges;
// under Lambda an internal extension keeps the invocation alive for them.
//
// The same http.Handler is served under Lambda (through the Function URL),
// as a local HTTP server, and in tests.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	// DefaultServerShare is the default for Options.ServerConcurrencyShare.
	DefaultServerShare = 0.5
)

// Authenticator finds the principal of a request.
type Authenticator interface {
	Authenticate(ctx context.Context, req auth.Request) (*auth.Principal, error)
	// OAuth returns the token settings, or nil when only keys are accepted.
	OAuth() *auth.OAuth
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

// Limiter takes calls' places in the lease store.
type Limiter interface {
	Acquire(ctx context.Context, req lease.Request) (*lease.Lease, error)
	// Stats are its store counters since it started.
	Stats() lease.Stats
}

// Upstreams reach the servers' upstreams: their tools, and calls to them.
type Upstreams interface {
	Tool(ctx context.Context, srv *registry.Server, c upstream.Caller, name string) (*mcp.Tool, error)
	Tools(ctx context.Context, srv *registry.Server, c upstream.Caller) ([]*mcp.Tool, error)
	ToolListing(ctx context.Context, srv *registry.Server, c upstream.Caller) (*upstream.Listing, error)
	Info(ctx context.Context, srv *registry.Server, c upstream.Caller) (*mcp.InitializeResult, error)
	Do(ctx context.Context, srv *registry.Server, c upstream.Caller, l *upstream.Listener, fn func(context.Context, *mcp.ClientSession) error) error
	// Start sends a tool call in an exchange that may outlive the request.
	Start(ctx context.Context, srv *registry.Server, c upstream.Caller, params *mcp.CallToolParams, l *upstream.Listener) *upstream.Exchange
	// MaxTTL is the longest the gateway keeps a tool listing.
	MaxTTL() time.Duration
	// TaskRequest sends tasks/get, tasks/update or tasks/cancel for the
	// upstream's task id, declaring the tasks extension.
	TaskRequest(ctx context.Context, srv *registry.Server, c upstream.Caller, method, id string, inputResponses json.RawMessage) (json.RawMessage, error)
}

var (
	_ Limiter   = (*lease.Limiter)(nil)
	_ Upstreams = (*upstream.Pool)(nil)
)

// Deps are the gateway's collaborators, built once per process.
type Deps struct {
	Auth     Authenticator
	Registry Registry
	// Limiter is nil when no call takes a place.
	Limiter  Limiter
	Upstream Upstreams
	// Metrics receives one EMF record per tool call and per breaker
	// change; nil emits none.
	Metrics *metrics.Emitter
	// Observer is told of every call besides Metrics (tracing, say); nil:
	// none.
	Observer CallObserver
	// Tracer makes spans of requests and calls; nil: tracing is off.
	Tracer Tracer
	// TaskStore keeps the records of MCP tasks; nil: the gateway offers no
	// tasks (the tasks extension is neither advertised nor relayed).
	TaskStore TaskStore
	// Tasks runs the tasks the gateway makes itself (tools whose item sets
	// task_support); nil: it makes none, and relays upstreams' tasks only
	// (with a TaskStore).
	Tasks TaskEngine
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
	// RequestTimeout is the longest one request may run: under Lambda the
	// function's timeout. A tool call whose worst case (its timeout, the
	// time it may wait for a slot, and AnswerReserve) does not fit is
	// refused with SERVER_MISCONFIGURED before it takes a slot, rather than
	// cut off by the deadline halfway. Zero means unknown: no check.
	RequestTimeout time.Duration
	// Logger receives one record per request; nil discards them.
	Logger *slog.Logger
	// Version is reported by /health.
	Version string
	// RequestID returns the id of the request being served, for example
	// the Lambda request id; nil or "" means a random one.
	RequestID func(*http.Request) string
	// MaxArgumentDepth bounds how deep a tool call's arguments may nest;
	// deeper ones are refused before the call takes a slot. Zero means
	// DefaultMaxArgumentDepth.
	MaxArgumentDepth int
	// MaxResultBytes bounds a tool result as the gateway sends it (its
	// content and structured content, encoded); a larger one is answered
	// with UPSTREAM_ERROR. Zero means DefaultMaxResultBytes.
	MaxResultBytes int64
	// AllowedOrigins are browser origins (scheme://host[:port]) trusted to
	// call the gateway cross-origin. A request whose Origin is neither one
	// of them nor the gateway's own is refused with 403, against DNS
	// rebinding and cross-site requests; requests without Origin (agents,
	// CLIs) are not affected.
	AllowedOrigins []string
	// PublicURL returns the gateway's public base URL (scheme://host[:port],
	// no trailing slash) as callers reach it: the base of the OAuth
	// resource URLs and of the token audiences accepted by default. nil
	// derives it from the request's Host header, which the client chooses:
	// set it wherever tokens are accepted.
	PublicURL func(*http.Request) string
	// IAMCaller returns the caller's ARN when the Function URL's auth type
	// is AWS_IAM and Lambda has checked its signature; nil or "" means no
	// IAM caller. It must read Lambda's request context, never a header.
	IAMCaller func(*http.Request) string
	// FunctionConcurrency is how many requests the function serves at
	// once, fleet-wide (under Lambda, its reserved concurrency); zero means
	// unknown. With it, each server gets a bulkhead: its calls in flight
	// plus its waiting callers never take more than ServerConcurrencyShare
	// of it, so one slow or flooded server cannot take the function from
	// the others.
	FunctionConcurrency int
	// ServerConcurrencyShare is the share of FunctionConcurrency one
	// server may take, in (0, 1]; zero means DefaultServerShare. At 1 no
	// bulkhead applies: Lambda's own limit is the server's.
	ServerConcurrencyShare float64
	// RequestStates seals the state of multi-round-trip tool calls; every
	// instance of a fleet must use the same key. Nil means a random key of
	// this process: a client's retry then completes only on this instance.
	RequestStates *roundtrip.Sealer
}

// Gateway serves the routes.
type Gateway struct {
	deps Deps
	// polls remembers the gateway tasks' records its tasks/get read, for
	// polls faster than their interval.
	polls     *taskPolls
	maxBody   int64
	maxDepth  int
	maxResult int64
	schemas   schemas
	reserve   time.Duration
	maxHold   time.Duration
	// bulkhead is the most calls in flight plus waiting callers one server
	// may have, from the function's concurrency; 0: none.
	bulkhead int
	maxReq   time.Duration
	log      *slog.Logger
	version  string
	reqID    func(*http.Request) string
	public   func(*http.Request) string
	iam      func(*http.Request) string
	mcp      mcpHandlers
	origins  *http.CrossOriginProtection
	states   *roundtrip.Sealer
	// obs is told what happens to calls: the metrics, and Deps.Observer.
	obs observers
	// flights are the calls' exchanges that outlived their answers.
	flights flights
	// pauses are the upstreams' pauses of calls that take no lease, kept
	// on this instance by server and principal (see pause).
	pauses localPauses
	// stopping is closed by Shutdown: calls still waiting for their
	// upstreams are cut off.
	stopping chan struct{}
	stopOnce sync.Once
}

// New returns a Gateway. It fails only on an invalid AllowedOrigins entry.
func New(deps Deps, opts Options) (*Gateway, error) {
	g := &Gateway{
		deps:      deps,
		maxBody:   opts.MaxBodyBytes,
		maxDepth:  opts.MaxArgumentDepth,
		maxResult: opts.MaxResultBytes,
		reserve:   opts.AnswerReserve,
		maxHold:   opts.MaxLeaseHold,
		maxReq:    opts.RequestTimeout,
		log:       opts.Logger,
		version:   opts.Version,
		reqID:     opts.RequestID,
		stopping:  make(chan struct{}),
		public:    opts.PublicURL,
		iam:       opts.IAMCaller,
		states:    opts.RequestStates,
		polls:     newTaskPolls(pollEntries, pollBytes),
	}
	if l, ok := deps.Limiter.(*lease.Limiter); ok && l == nil {
		// A nil *lease.Limiter is no limiter.
		deps.Limiter = nil
		g.deps.Limiter = nil
	}
	if deps.Metrics != nil {
		m := &metricsObserver{em: deps.Metrics}
		if deps.Limiter != nil {
			m.stats = deps.Limiter.Stats
		}
		g.obs = append(g.obs, m)
	}
	if deps.Observer != nil {
		g.obs = append(g.obs, deps.Observer)
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
	if g.maxDepth <= 0 {
		g.maxDepth = DefaultMaxArgumentDepth
	}
	if g.maxResult <= 0 {
		g.maxResult = DefaultMaxResultBytes
	}
	if g.reserve <= 0 {
		g.reserve = DefaultAnswerReserve
	}
	if g.maxHold <= 0 {
		g.maxHold = DefaultMaxLeaseHold
	}
	g.bulkhead = Bulkhead(opts.FunctionConcurrency, opts.ServerConcurrencyShare)
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
		writeFault(w, r, fault.New(fault.Forbidden, "cross-origin request from %q refused", clip.String(r.Header.Get("Origin"), 100)))
	}))
	return g, nil
}

// Bulkhead is the most calls in flight plus waiting callers one server may
// have, when the function serves concurrency requests at once and one
// server may take share of them (DefaultServerShare when 0): at least 1;
// 0 (none) when the concurrency is unknown or the share is 1 or more.
func Bulkhead(concurrency int, share float64) int {
	if share <= 0 {
		share = DefaultServerShare
	}
	if concurrency <= 0 || share >= 1 {
		return 0
	}
	return max(int(float64(concurrency)*share), 1)
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
		{path: metadataPath, public: true, methods: map[string]http.HandlerFunc{http.MethodGet: g.resourceMetadata}},
		{path: metadataPath + "/mcp", public: true, methods: map[string]http.HandlerFunc{http.MethodGet: g.resourceMetadata}},
		{path: metadataPath + "/mcp/{server_id}", public: true, methods: map[string]http.HandlerFunc{http.MethodGet: g.resourceMetadata}},
		{path: "/mcp-rest/tools/call", methods: map[string]http.HandlerFunc{http.MethodPost: g.traceREST("tools/call", g.restCall)}},
		{path: "/mcp-rest/tools/list", methods: map[string]http.HandlerFunc{http.MethodGet: g.traceREST("tools/list", g.restList)}},
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
		writeFault(w, r, fault.New(fault.NotFound, "no route %s %s", r.Method, clip.String(r.URL.Path, 100)))
	}))
	return g.observe(g.origins.Handler(collapseSlashes(mux)))
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
		writeFault(w, r, fault.New(fault.MethodNotAllowed, "%s is not allowed here", clip.String(r.Method, 20)))
	})
}

func (g *Gateway) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": g.version})
}

type ctxKey int

const (
	callerCtx ctxKey = iota
	recordCtx
)

// record is what the access log says of one request; handlers fill it in.
// A request carries at most one tool call (JSON-RPC batches are refused),
// so a tool call's record is its audit record: who (principal, client_ip), which
// server and tool, and how it ended (outcome, code).
type record struct {
	id        string
	principal *auth.Principal // who called: never a key or token
	clientIP  string
	method    string          // the JSON-RPC method, on the MCP routes
	rpcID     json.RawMessage // the JSON-RPC request's id, once read: error answers echo it
	bodyRead  bool            // the MCP request's body was read (rpcID holds its id, if any)
	serverID  string
	tool      string // the tool called: the upstream's name for it
	outcome   string
	code      fault.Code
	cause     error
	message   string // the refusal's message, logged when it has no cause
	waited    time.Duration
	leaseID   string
	breaker   string // a breaker transition this request caused
	uncapped  bool   // the store failed and the call went without a slot
	sent      bool   // the tool call was handed to the upstream
}

// callAttrs appends to attrs what the log says of the call the record
// describes: server, tool, outcome, code, wait, lease, breaker, and why a
// refusal was made — its internal cause, or else what the caller was told
// (a malformed body, a missing field).
func (rec *record) callAttrs(attrs []any) []any {
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
	} else if rec.code != "" && rec.message != "" {
		attrs = append(attrs, "error", rec.message)
	}
	return attrs
}

// fail notes that the request failed with fe: its code and cause, and the
// outcome "error".
func (rec *record) fail(fe *fault.Error) {
	rec.code, rec.cause, rec.message, rec.outcome = fe.Code, fe.Cause, fe.Message, "error"
}

func recordFrom(ctx context.Context) *record {
	if rec, ok := ctx.Value(recordCtx).(*record); ok {
		return rec
	}
	return &record{}
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
		rec := &record{clientIP: clientIP(r)}
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
					writeFault(sw, r.WithContext(ctx), fault.New(fault.Internal, "internal error"))
				}
			}
			attrs := []any{
				"request_id", rec.id,
				"method", r.Method,
				"path", clip.String(r.URL.Path, clip.Message),
				"status", sw.status,
				"duration_ms", time.Since(start).Milliseconds(),
			}
			attrs = append(attrs, rec.principal.LogAttrs()...)
			if rec.clientIP != "" {
				attrs = append(attrs, "client_ip", rec.clientIP)
			}
			if rec.method != "" {
				attrs = append(attrs, "mcp_method", rec.method)
			}
			attrs = rec.callAttrs(attrs)
			level := slog.LevelInfo
			if sw.status >= 500 {
				level = slog.LevelWarn
			}
			g.log.Log(ctx, level, "request", attrs...)
		}()
		next.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// clientIP is the address the request came from: under Lambda, the
// Function URL's source IP (which lambdaurl puts in RemoteAddr), elsewhere
// the peer's address. Forwarding headers are not trusted: anyone can send
// them.
func clientIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return clip.String(r.RemoteAddr, clip.Short)
}

func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
