package upstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// sweepEvery is how often idle sessions, tool lists and server info of
// every upstream and principal are checked for age.
const sweepEvery = time.Minute

type session struct {
	cs       *mcp.ClientSession
	cancel   context.CancelFunc
	lastUsed time.Time
	// seen is the session's own requests' exchange: the HTTP+SSE
	// transport's event stream, which carries every call's answer.
	seen *traffic
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
		if r := originRefusal(hc); r != nil {
			// The SDK may report only that the session closed.
			err = r
		}
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
