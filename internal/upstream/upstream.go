// Package upstream calls upstream MCP servers with the official MCP Go SDK,
// over streamable HTTP or SSE, and keeps their client sessions for reuse
// across calls (and across warm Lambda invocations).
//
// A session serves one call at a time: a failure of one call's transport
// breaks only that session, and notifications the upstream sends during a
// call reach that call alone. Idle sessions are kept per upstream, a broken
// one is closed and replaced by the next call, never fatal.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// Defaults for Options.
const (
	DefaultMaxIdle          = 8
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultToolsTTL         = 30 * time.Second
	DefaultMaxResponseBytes = 16 << 20
	// maxTools bounds how many tools one upstream may list.
	maxTools = 2000
	// toolsRefreshFloor is the least time between two tool-list refreshes
	// caused by calls naming unknown tools.
	toolsRefreshFloor = time.Second
)

// Options configures a Pool. The zero value means defaults.
type Options struct {
	// HTTPClient sends the requests to upstreams. Nil means a client with
	// pooled keep-alive connections and MaxResponseBytes enforced.
	HTTPClient *http.Client
	// MaxResponseBytes bounds each upstream HTTP response body (one
	// streamable-HTTP POST, or one SSE stream). Zero means the default.
	MaxResponseBytes int64
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
	// CancelGrace is how long a call whose context ended waits, at most,
	// for its cancellation to reach the upstream before returning, so the
	// caller frees the call's slot only once the upstream was told to
	// stop. Zero means DefaultCancelGrace.
	CancelGrace time.Duration
}

// DefaultCancelGrace is the default for Options.CancelGrace.
const DefaultCancelGrace = time.Second

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
	client   *mcp.Client
	http     *http.Client
	maxIdle  int
	idleTTL  time.Duration
	toolsTTL time.Duration
	grace    time.Duration
	catalog  Catalog
	check    time.Duration
	log      *slog.Logger

	mu    sync.Mutex
	idle  map[string][]*session // by endpoint key, newest last
	tools map[string]*toolList  // by endpoint key
	info  map[string]infoEntry  // by endpoint key: the upstream's last initialize result
	apis  map[string]*apiEntry  // by endpoint key: OpenAPI-backed servers' documents
	// listeners routes notifications received on a session to its call.
	listeners sync.Map // *mcp.ClientSession → *Listener
	closed    bool
	connects  atomic.Int64
}

type session struct {
	cs       *mcp.ClientSession
	cancel   context.CancelFunc
	lastUsed time.Time
}

type toolList struct {
	mu      sync.Mutex
	tools   map[string]*mcp.Tool
	ordered []*mcp.Tool
	fetched time.Time
	// version is the catalog version held; scope the upstream's
	// cacheScope; expires when the list must be listed again; reuse until
	// when this instance uses it without looking at the catalog.
	version string
	scope   string
	expires time.Time
	reuse   time.Time
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
		http:     opts.HTTPClient,
		maxIdle:  opts.MaxIdle,
		idleTTL:  opts.IdleTimeout,
		toolsTTL: opts.ToolsTTL,
		grace:    opts.CancelGrace,
		catalog:  opts.Catalog,
		check:    opts.CatalogCheck,
		log:      opts.Logger,
		idle:     map[string][]*session{},
		tools:    map[string]*toolList{},
		info:     map[string]infoEntry{},
		apis:     map[string]*apiEntry{},
	}
	if p.http == nil {
		limit := opts.MaxResponseBytes
		if limit <= 0 {
			limit = DefaultMaxResponseBytes
		}
		p.http = NewHTTPClient(limit)
	}
	if p.maxIdle <= 0 {
		p.maxIdle = DefaultMaxIdle
	}
	if p.idleTTL <= 0 {
		p.idleTTL = DefaultIdleTimeout
	}
	if p.toolsTTL <= 0 {
		p.toolsTTL = DefaultToolsTTL
	}
	if p.grace <= 0 {
		p.grace = DefaultCancelGrace
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
// bytes. It has no overall timeout: each call's context bounds it.
func NewHTTPClient(limit int64) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 90 * time.Second
	t.ResponseHeaderTimeout = 0
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Transport: &limitTransport{base: t, limit: limit}}
}

// limitTransport caps response bodies.
type limitTransport struct {
	base  http.RoundTripper
	limit int64
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = addParamHeaders(req)
	resp, err := t.base.RoundTrip(req)
	watchCancel(req, err)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.limit}
	tapEvents(req, resp)
	return resp, nil
}

// ErrResponseTooLarge is returned when an upstream response exceeds the
// configured limit.
var ErrResponseTooLarge = errors.New("upstream response too large")

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

func endpointKey(srv *registry.Server) string {
	if srv.Transport == registry.TransportOpenAPI {
		return string(srv.Transport) + " " + srv.SpecURL + srv.SpecPath + " " + srv.URL
	}
	return string(srv.Transport) + " " + srv.URL
}

// Close closes every idle session. Sessions in use close when returned.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = map[string][]*session{}
	p.mu.Unlock()
	for _, list := range idle {
		for _, s := range list {
			s.close()
		}
	}
}

// checkout returns an idle session for srv or connects a new one.
func (p *Pool) checkout(ctx context.Context, srv *registry.Server) (*session, bool, error) {
	key := endpointKey(srv)
	now := time.Now()
	var stale []*session
	var got *session
	p.mu.Lock()
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
	s, err := p.connect(ctx, srv)
	if err != nil {
		return nil, false, err
	}
	return s, false, nil
}

// connect opens a session to srv. The session outlives the call that
// opened it, so it is connected in a context of its own (the SSE transport
// ties its event stream to that context); ctx bounds only the handshake.
func (p *Pool) connect(ctx context.Context, srv *registry.Server) (*session, error) {
	var t mcp.Transport
	switch srv.Transport {
	case registry.TransportSSE:
		t = &mcp.SSEClientTransport{Endpoint: srv.URL, HTTPClient: p.http}
	default:
		t = &mcp.StreamableClientTransport{
			Endpoint:             srv.URL,
			HTTPClient:           p.http,
			DisableStandaloneSSE: true,
			MaxRetries:           -1,
		}
	}
	p.connects.Add(1)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// A stream the session keeps open (the SSE transport's) may carry
	// notifications/tools/list_changed.
	sctx = withListChanged(sctx, func() { p.InvalidateTools(srv) })
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
		p.info[endpointKey(srv)] = infoEntry{res: res, fetched: time.Now()}
		p.mu.Unlock()
		// Before 2026-07-28 the log level is the session's, and a session
		// serves every agent in turn: ask for every level once; each call
		// relays what its agent's level lets through. (From 2026-07-28 on,
		// a call names its level in _meta.)
		if res.Capabilities != nil && res.Capabilities.Logging != nil && res.ProtocolVersion < "2026-07-28" {
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				p.log.Debug("upstream refused logging/setLevel; its log messages are not relayed", "server_id", srv.ID, "error", err.Error())
			}
		}
	}
	return &session{cs: cs, cancel: cancel}, nil
}

// close ends the session and its context.
func (s *session) close() {
	_ = s.cs.Close()
	s.cancel()
}

// checkin returns a healthy session to the idle list, or closes it.
func (p *Pool) checkin(srv *registry.Server, s *session, healthy bool) {
	if healthy {
		s.lastUsed = time.Now()
		key := endpointKey(srv)
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

// Do runs fn with a session to srv, exclusive for the call. If the upstream
// no longer knows a reused session (it restarted), the request was not
// processed, and fn runs once more on a new session. l, if not nil,
// receives the upstream's notifications while fn runs.
func (p *Pool) Do(ctx context.Context, srv *registry.Server, l *Listener, fn func(context.Context, *mcp.ClientSession) error) error {
	if srv.Transport == registry.TransportOpenAPI {
		return &Error{Kind: KindRPC, ServerID: srv.ID, RPC: errNotMCP, Err: errNotMCP}
	}
	for attempt := 0; ; attempt++ {
		s, reused, err := p.checkout(ctx, srv)
		if err != nil {
			return classify(ctx, srv, err)
		}
		fctx := withListChanged(ctx, func() { p.InvalidateTools(srv) })
		if l != nil {
			if srv.Transport == registry.TransportSSE {
				// The old transport carries every message on one stream
				// not tied to this call: the SDK's handlers relay them.
				p.listeners.Store(s.cs, l)
			} else {
				fctx = withListener(fctx, l)
			}
		}
		err = fn(fctx, s.cs)
		if l != nil {
			p.listeners.Delete(s.cs)
		}
		p.checkin(srv, s, healthy(err))
		if err != nil && reused && attempt == 0 && errors.Is(err, mcp.ErrSessionMissing) && ctx.Err() == nil {
			p.log.Debug("upstream lost its session; reconnecting", "server_id", srv.ID)
			continue
		}
		if err != nil {
			return classify(ctx, srv, err)
		}
		return nil
	}
}

// CallTool calls a tool on srv. A tool's own failure is a result with
// IsError set, not an error.
//
// When ctx ends first, CallTool returns once the upstream has received the
// call's cancellation (or after CancelGrace): a caller that frees a slot
// on return frees it only after the upstream was told to stop.
func (p *Pool) CallTool(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams, l *Listener) (*mcp.CallToolResult, error) {
	if srv.Transport == registry.TransportOpenAPI {
		return p.callOpenAPI(ctx, srv, params)
	}
	var res *mcp.CallToolResult
	wctx, watch := withCancelWatch(withParamHeaders(ctx, p.cachedTool(srv, params.Name), params.Arguments))
	err := p.Do(wctx, srv, l, func(ctx context.Context, cs *mcp.ClientSession) error {
		var err error
		res, err = cs.CallTool(ctx, params)
		return err
	})
	if err != nil && ctx.Err() != nil {
		t := time.NewTimer(p.grace)
		select {
		case <-watch.sent:
		case <-t.C:
		}
		t.Stop()
	}
	return res, err
}

// Tools returns srv's tools (see ToolListing).
func (p *Pool) Tools(ctx context.Context, srv *registry.Server) ([]*mcp.Tool, error) {
	ls, err := p.ToolListing(ctx, srv)
	if err != nil {
		return nil, err
	}
	return ls.Tools, nil
}

// MaxTTL is the longest the gateway reuses an upstream's list.
func (p *Pool) MaxTTL() time.Duration { return p.toolsTTL }

// ToolListing returns srv's tools and how long they may be reused: from
// this instance's copy while it is fresh, else from the fleet's catalog,
// else from the upstream.
func (p *Pool) ToolListing(ctx context.Context, srv *registry.Server) (*Listing, error) {
	if srv.Transport == registry.TransportOpenAPI {
		api, err := p.openAPI(ctx, srv)
		if err != nil {
			return nil, err
		}
		return &Listing{Tools: api.Tools(), Scope: "public", Expires: time.Now().Add(p.toolsTTL)}, nil
	}
	tl := p.toolList(srv)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.ordered == nil || !time.Now().Before(tl.reuse) {
		if err := p.refreshTools(ctx, srv, tl); err != nil {
			return nil, err
		}
	}
	return &Listing{Tools: tl.ordered, Scope: tl.scope, Expires: tl.expires}, nil
}

// InvalidateTools drops srv's list here and in the catalog, after the
// upstream said it changed.
func (p *Pool) InvalidateTools(srv *registry.Server) {
	tl := p.toolList(srv)
	tl.mu.Lock()
	tl.reuse = time.Time{}
	tl.mu.Unlock()
	if p.catalog == nil || !srv.Limited() {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.catalog.Invalidate(ctx, srv.ID); err != nil {
			p.log.Warn("invalidating the tool catalog failed", "server_id", srv.ID, "error", err.Error())
		}
	}()
}

type infoEntry struct {
	res     *mcp.InitializeResult
	fetched time.Time
}

// Info returns what srv said of itself when a session last connected to it
// (capabilities, server info, instructions), connecting if no session has
// within ToolsTTL.
func (p *Pool) Info(ctx context.Context, srv *registry.Server) (*mcp.InitializeResult, error) {
	if srv.Transport == registry.TransportOpenAPI {
		api, err := p.openAPI(ctx, srv)
		if err != nil {
			return nil, err
		}
		return openAPIInfo(api, srv), nil
	}
	key := endpointKey(srv)
	p.mu.Lock()
	e, ok := p.info[key]
	p.mu.Unlock()
	if ok && time.Since(e.fetched) < p.toolsTTL {
		return e.res, nil
	}
	var res *mcp.InitializeResult
	err := p.Do(ctx, srv, nil, func(ctx context.Context, cs *mcp.ClientSession) error {
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

// Tool returns srv's tool named name. A name missing from a list older than
// a second triggers one refresh, so a tool added upstream is found without
// waiting for the list to expire; with a catalog, that refresh reads the
// catalog and leaves the upstream alone, so that callers naming unknown
// tools cannot make the fleet list the upstream.
func (p *Pool) Tool(ctx context.Context, srv *registry.Server, name string) (*mcp.Tool, error) {
	if srv.Transport == registry.TransportOpenAPI {
		return p.openAPITool(ctx, srv, name)
	}
	tl := p.toolList(srv)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.ordered != nil && time.Now().Before(tl.reuse) {
		if t, ok := tl.tools[name]; ok {
			return t, nil
		}
		if time.Since(tl.fetched) < toolsRefreshFloor {
			return nil, ErrUnknownTool
		}
		tl.reuse = time.Time{}
	}
	if err := p.refreshTools(ctx, srv, tl); err != nil {
		return nil, err
	}
	if t, ok := tl.tools[name]; ok {
		return t, nil
	}
	return nil, ErrUnknownTool
}

// cachedTool returns srv's tool named name from this instance's list, if
// it holds one.
func (p *Pool) cachedTool(srv *registry.Server, name string) *mcp.Tool {
	tl := p.toolList(srv)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.tools[name]
}

func (p *Pool) toolList(srv *registry.Server) *toolList {
	key := endpointKey(srv)
	p.mu.Lock()
	defer p.mu.Unlock()
	tl, ok := p.tools[key]
	if !ok {
		tl = &toolList{}
		p.tools[key] = tl
	}
	return tl
}

// refreshTools renews srv's list, from the catalog or the upstream; tl.mu
// is held.
func (p *Pool) refreshTools(ctx context.Context, srv *registry.Server, tl *toolList) error {
	now := time.Now()
	if p.catalog == nil || !srv.Limited() {
		// An unlimited server causes no store traffic: each instance
		// lists it for itself.
		f, err := p.fetchTools(ctx, srv)
		if err != nil {
			return err
		}
		tl.set(f.scope, now.Add(f.ttl), now.Add(f.ttl), "")
		tl.ordered, tl.tools = f.list, index(f.list)
		return nil
	}
	var fetchErr error
	e, err := p.catalog.Load(ctx, srv.ID, endpointKey(srv), tl.version, func(ctx context.Context) (catalog.Fetched, error) {
		f, err := p.fetchTools(ctx, srv)
		if err != nil {
			fetchErr = err
			return catalog.Fetched{}, err
		}
		data, err := json.Marshal(f.list)
		if err != nil {
			return catalog.Fetched{}, fmt.Errorf("encode the tools of %s: %w", srv.ID, err)
		}
		return catalog.Fetched{Data: data, Scope: f.scope, TTL: f.ttl}, nil
	})
	if err != nil && e.Data == nil && e.Version == "" {
		if fetchErr != nil || ctx.Err() != nil {
			return err
		}
		// The catalog cannot be read: a store outage must not stop tool
		// calls. Keep this instance's copy a little longer, or list the
		// upstream as if there were no catalog.
		p.log.Warn("tool catalog unavailable; listing without it", "server_id", srv.ID, "error", err.Error())
		if tl.ordered != nil {
			tl.reuse = now.Add(p.check)
			return nil
		}
		f, err := p.fetchTools(ctx, srv)
		if err != nil {
			return err
		}
		tl.ordered, tl.tools = f.list, index(f.list)
		tl.set(f.scope, now.Add(f.ttl), now.Add(p.check), "")
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
	if e.Data == nil {
		// This instance holds that version already.
		tl.set(e.Scope, e.Expires, reuse, e.Version)
		return nil
	}
	var list []*mcp.Tool
	if err := json.Unmarshal(e.Data, &list); err != nil {
		return &Error{Kind: KindUnavailable, ServerID: srv.ID, Err: fmt.Errorf("decode the catalog's tools: %w", err)}
	}
	list = slices.DeleteFunc(list, func(t *mcp.Tool) bool { return t == nil })
	tl.ordered, tl.tools = list, index(list)
	tl.set(e.Scope, e.Expires, reuse, e.Version)
	return nil
}

// set records when a list was renewed and how long it lasts.
func (tl *toolList) set(scope string, expires, reuse time.Time, version string) {
	if scope != "private" {
		scope = "public"
	}
	tl.scope, tl.expires, tl.reuse, tl.version, tl.fetched = scope, expires, reuse, version, time.Now()
	if tl.ordered == nil {
		tl.ordered = []*mcp.Tool{}
	}
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

// fetchTools lists the upstream's tools, every page, and how long it says
// the list may be reused (capped by ToolsTTL; none or 0 means ToolsTTL).
func (p *Pool) fetchTools(ctx context.Context, srv *registry.Server) (fetched, error) {
	f := fetched{ttl: p.toolsTTL, scope: "public"}
	err := p.Do(ctx, srv, nil, func(ctx context.Context, cs *mcp.ClientSession) error {
		f = fetched{ttl: p.toolsTTL, scope: "public"}
		params := &mcp.ListToolsParams{}
		for {
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
				if len(f.list) >= maxTools {
					return fmt.Errorf("upstream lists more than %d tools", maxTools)
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
