package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"io"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// ToolSeparator joins a server id and a tool name in the aggregated MCP
// endpoint: "<server_id>-<tool>". Server ids cannot contain it, so the name
// splits back at its first occurrence and two servers' tools never collide.
const ToolSeparator = "-"

// maxListConcurrency bounds the upstreams asked at once for their tools.
const maxListConcurrency = 8

// metaPrefix marks _meta keys that belong to the protocol itself; they are
// never forwarded, since the gateway's upstream session speaks its own
// protocol version. It is compared ignoring case (ownMetaKey).
const metaPrefix = "io.modelcontextprotocol/"

type mcpServerKey struct{}

// mcpHandlers are the SDK's streamable HTTP handlers, stateless: one answers
// with application/json, the other may stream text/event-stream.
type mcpHandlers struct {
	json, stream *mcp.StreamableHTTPHandler
}

func (g *Gateway) newMCPHandlers() mcpHandlers {
	get := func(r *http.Request) *mcp.Server {
		s, _ := r.Context().Value(mcpServerKey{}).(*mcp.Server)
		return s
	}
	opts := func(jsonResponse bool) *mcp.StreamableHTTPOptions {
		return &mcp.StreamableHTTPOptions{
			Stateless:           true,
			JSONResponse:        jsonResponse,
			MaxRequestBodyBytes: g.maxBody,
		}
	}
	return mcpHandlers{
		json:   mcp.NewStreamableHTTPHandler(get, opts(true)),
		stream: mcp.NewStreamableHTTPHandler(get, opts(false)),
	}
}

// serveMCP serves POST /mcp (every server the caller may use, tools named
// "<server_id>-<tool>") and POST /mcp/{server_id} (one upstream, passed
// through).
func (g *Gateway) serveMCP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sc := &mcpScope{g: g, base: context.WithoutCancel(ctx), caller: callerFrom(ctx), rec: recordFrom(ctx), protocol: r.Header.Get("MCP-Protocol-Version")}
	if dl, ok := ctx.Deadline(); ok {
		sc.deadline = dl
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
	sc.rec.bodyRead = true
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			// Its id, when it came before the limit, is echoed.
			sc.rec.rpcID = peekID(bytes.NewReader(body))
			writeFault(w, r, fault.New(fault.PayloadTooLarge, "request body is larger than %d bytes", g.maxBody))
			return
		}
		writeFault(w, r, fault.Wrap(err, fault.BadRequest, "cannot read the request body"))
		return
	}
	p := peek(body)
	// From here on, an error answer echoes the request's id.
	sc.rec.rpcID = validID(p.id)
	if id := r.PathValue("server_id"); id != "" {
		srv, ferr := g.server(ctx, id)
		if ferr != nil {
			writeFault(w, r, ferr)
			return
		}
		sc.srv = srv
	}
	if p.batch {
		// Whatever the protocol version: every message would need its own
		// key check, slot, log record and deadline, and a batch would fan
		// out unbounded behind one request.
		writeFault(w, r, fault.New(fault.BadRequest, "JSON-RPC batches are not supported: send one message per request"))
		return
	}
	if p.repeated != "" {
		// Before anything reads it: the gateway and the SDK could each
		// read a different member (see peek).
		writeFault(w, r, fault.New(fault.BadRequest, "the message names %q twice (names are compared ignoring case): send each member once", clip.String(p.repeated, clip.Short)))
		return
	}
	if t := g.deps.Tracer; t != nil {
		target := p.name
		if target == "" && sc.srv != nil {
			target = sc.srv.ID
		}
		var end func(RequestEnd)
		ctx, end = t.Request(ctx, r.Header, p.trace, RequestStart{Method: clip.String(p.method, clip.Short), Target: clip.String(target, clip.Name),
			Protocol: clip.String(sc.protocol, clip.Short), RequestID: clip.String(rpcID(p.id), clip.Short), Route: r.Pattern, GatewayID: sc.rec.id})
		sw := &statusWriter{ResponseWriter: w}
		w = sw
		r = r.WithContext(ctx)
		sc.base = context.WithoutCancel(ctx)
		defer func() { end(sc.rec.traceEnd(sw.status)) }()
	}
	if depth(body) > g.maxDepth+messageDepth {
		// Refused here rather than by the SDK (whose own bound is a bare
		// HTTP 400), as a tool call's arguments would be.
		sc.rec.method = clip.String(p.method, clip.Short)
		if p.method == "tools/call" {
			sc.noteTool(p.name)
		}
		// A protocol error, answered 200 as the SDK answers its own.
		fe := fault.New(fault.BadRequest, "arguments are nested more than %d deep", g.maxDepth)
		sc.rec.fail(fe)
		writeRPCError(w, http.StatusOK, "", p.id, jsonrpc.CodeInvalidParams, fe.Message, fe.Detail())
		return
	}
	if p.method != "" && !knownMethods[p.method] && !(taskMethods[p.method] && g.tasksOn()) {
		sc.rec.method = clip.String(p.method, clip.Short)
		fe := fault.New(fault.NotFound, "method %q not found", clip.String(p.method, clip.Short))
		sc.rec.fail(fe)
		if len(p.id) == 0 || string(p.id) == "null" {
			// An unknown notification: nothing to answer.
			w.WriteHeader(http.StatusAccepted)
			return
		}
		status := http.StatusOK
		if sc.protocol >= protocolMRTR {
			// From 2026-07-28 an unknown method is also HTTP 404.
			status = http.StatusNotFound
		}
		writeRPCError(w, status, "", p.id, jsonrpc.CodeMethodNotFound, fe.Message, fe.Detail())
		return
	}
	if taskMethods[p.method] && g.tasksOn() && sc.protocol >= protocolMRTR {
		// A tasks/ request names its task in Mcp-Name too (SEP-2663), as
		// the SDK checks other names (SEP-2243): before the request is
		// read further.
		if err := checkTaskName(r.Header, p.taskID); err != nil {
			sc.rec.method = clip.String(p.method, clip.Short)
			sc.rec.fail(fault.New(fault.BadRequest, "%s", err.Error()))
			writeRPCError(w, http.StatusBadRequest, "", p.id, mcp.CodeHeaderMismatch, err.Error(), nil)
			return
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	sc.rec.outcome = ""
	if p.method != "" {
		sc.rec.method = clip.String(p.method, clip.Short)
	}

	srv, err := sc.newServer(ctx, p.method)
	if err != nil {
		writeFault(w, r, fault.As(err))
		return
	}
	if p.method == "tools/call" && sc.protocol >= protocolMRTR {
		sc.declareTool(ctx, srv, p.name)
	}
	h := g.mcp.json
	if p.method == "tools/call" && acceptsEventStream(r) && (p.progress || sc.upstreamLogs(ctx, p.name)) {
		h = g.mcp.stream
		sc.stream = true
	}
	// The SDK answers its own refusals in plain text: sdkAnswer rewrites
	// them into the gateway's MCP error shape.
	aw := &sdkAnswer{ResponseWriter: w}
	h.ServeHTTP(aw, r.WithContext(context.WithValue(ctx, mcpServerKey{}, srv)))
	if fe := aw.finish(p.id); fe != nil {
		sc.rec.fail(fe)
	}
}

func acceptsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// mcpScope is one MCP request: who asks, and (passthrough) which upstream.
type mcpScope struct {
	g *Gateway
	// base holds the HTTP request's values (its log record, its caller,
	// whatever observers attach), without its cancellation.
	base     context.Context
	caller   *caller
	srv      *registry.Server // nil on the aggregated endpoint
	rec      *record
	deadline time.Time
	stream   bool
	// protocol is the request's MCP-Protocol-Version header.
	protocol string
}

// declareTool adds the upstream tool a tools/call names to the request's
// server, so that the SDK checks the request's Mcp-Param-* headers against
// the tool's x-mcp-header annotations (SEP-2243) as the upstream itself
// would. A tool the gateway cannot find or the SDK cannot take is left
// out: the call then fails or is checked upstream.
func (sc *mcpScope) declareTool(ctx context.Context, s *mcp.Server, name string) {
	if validToolName(name) != nil {
		return
	}
	srv, tool, ferr := sc.resolveTool(ctx, name)
	if ferr != nil || !sc.caller.sees(srv, tool) {
		return
	}
	lctx, cancel := sc.g.boundedCtx(ctx, srv.Timeout)
	defer cancel()
	t, err := sc.g.deps.Upstream.Tool(lctx, srv, sc.caller.upstream(srv), tool)
	if err != nil {
		return
	}
	c := *t
	c.Name = name
	defer func() {
		// AddTool panics on a schema it cannot take; such an upstream
		// tool is still callable, its headers checked upstream.
		if p := recover(); p != nil {
			sc.g.log.Debug("tool left out of header validation", "server_id", srv.ID, "tool", tool, "reason", fmt.Sprint(p))
		}
	}()
	s.AddTool(&c, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("unreachable: tools/call is answered by the gateway's middleware")
	})
}

// scoped returns the context upstream work runs in: cancelled with the
// SDK's handler context, bounded by the HTTP request's deadline, carrying
// the HTTP request's values (its log record, its caller), not the
// handler's. The SDK keeps the agent's protocol version in its handler
// context, and the upstream client would read it from there: the upstream
// session must negotiate its own.
func (sc *mcpScope) scoped(handler context.Context) (context.Context, context.CancelFunc) {
	ctx := context.WithValue(sc.base, recordCtx, sc.rec)
	ctx = context.WithValue(ctx, callerCtx, sc.caller)
	var cancel context.CancelFunc
	if !sc.deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, sc.deadline)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	stop := context.AfterFunc(handler, cancel)
	return ctx, func() { stop(); cancel() }
}

// newServer builds the MCP server for one request: it has no features of
// its own; a receiving middleware answers every method from the upstreams.
func (sc *mcpScope) newServer(ctx context.Context, method string) (*mcp.Server, error) {
	impl := &mcp.Implementation{Name: "mcpgate", Version: sc.g.version}
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}
	var instructions string
	if sc.srv != nil {
		caps = passthroughCapabilities(nil)
		if method == "initialize" || method == "server/discover" {
			ictx, cancel := sc.g.boundedCtx(ctx, sc.srv.Timeout)
			info, err := sc.g.deps.Upstream.Info(ictx, sc.srv, sc.caller.upstream(sc.srv))
			cancel()
			if err != nil {
				return nil, upstreamFault(sc.srv, err)
			}
			caps = passthroughCapabilities(info.Capabilities)
			if !sc.caller.principal.AllowsAllTools(sc.srv.ID) {
				caps.Resources, caps.Prompts, caps.Completions = nil, nil, nil
			}
			if method == "server/discover" && sc.offersTasks(ctx) {
				caps.Extensions = map[string]any{tasksExtension: map[string]any{}}
			}
			instructions = info.Instructions
			if info.ServerInfo != nil {
				impl = &mcp.Implementation{Name: info.ServerInfo.Name, Title: info.ServerInfo.Title, Version: info.ServerInfo.Version}
			}
		}
	}
	if sc.srv == nil && method == "server/discover" && sc.offersTasks(ctx) {
		caps.Extensions = map[string]any{tasksExtension: map[string]any{}}
	}
	s := mcp.NewServer(impl, &mcp.ServerOptions{
		Capabilities: caps, Instructions: instructions,
		// Results the SDK answers itself (empty lists on /mcp) are as
		// private as the rest of the aggregated endpoint.
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			if sc.srv == nil {
				c.CacheScope = cachePrivate
			}
		},
		// A stateless gateway can deliver no resources/updated
		// notification: it accepts (un)subscriptions as a stateless SDK
		// server does, without advertising them.
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	if sc.g.tasksOn() {
		registerTaskMethods(s)
	}
	s.AddReceivingMiddleware(sc.middleware)
	return s, nil
}

// passthroughCapabilities mirrors an upstream's capabilities, minus what a
// stateless gateway cannot deliver (change notifications, subscriptions).
// With nil it advertises every feature the gateway can relay.
func passthroughCapabilities(up *mcp.ServerCapabilities) *mcp.ServerCapabilities {
	if up == nil {
		return &mcp.ServerCapabilities{
			Tools:       &mcp.ToolCapabilities{},
			Resources:   &mcp.ResourceCapabilities{},
			Prompts:     &mcp.PromptCapabilities{},
			Completions: &mcp.CompletionCapabilities{},
			Logging:     &mcp.LoggingCapabilities{},
		}
	}
	c := &mcp.ServerCapabilities{Completions: up.Completions, Logging: up.Logging, Experimental: up.Experimental}
	if up.Tools != nil {
		c.Tools = &mcp.ToolCapabilities{}
	}
	if up.Resources != nil {
		c.Resources = &mcp.ResourceCapabilities{}
	}
	if up.Prompts != nil {
		c.Prompts = &mcp.PromptCapabilities{}
	}
	return c
}

func (sc *mcpScope) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	answer := sc.answer(next)
	if sc.protocol < protocolMRTR {
		return answer
	}
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := answer(ctx, method, req)
		return withResultType(res), err
	}
}

// answer answers one method's request: tools from the gateway's own call
// path, the rest relayed to the request's server or left to the SDK.
func (sc *mcpScope) answer(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		// The SDK runs handlers on goroutines of its own, out of reach of
		// the HTTP server's recovery: a panic here would end the process.
		defer func() {
			if p := recover(); p != nil {
				sc.g.log.Error("panic in MCP handler", "request_id", sc.rec.id, "method", method, "panic", p, "stack", string(debug.Stack()))
				// The record keeps whatever cause the handler noted.
				sc.rec.fail(fault.Wrap(sc.rec.cause, fault.Internal, "internal error"))
				res, err = nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "internal error"}
			}
		}()
		switch method {
		case "tools/list":
			ctx, cancel := sc.scoped(ctx)
			defer cancel()
			return sc.listTools(ctx, req.(*mcp.ListToolsRequest))
		case "tools/call":
			uctx, cancel := sc.scoped(ctx)
			defer cancel()
			return sc.callTool(ctx, uctx, req.(*mcp.CallToolRequest))
		case "tasks/get", "tasks/update", "tasks/cancel":
			ctx, cancel := sc.scoped(ctx)
			defer cancel()
			return sc.taskRequest(ctx, method, req)
		}
		if sc.srv == nil {
			return next(ctx, method, req)
		}
		if relays[method] != nil && !sc.caller.principal.AllowsAllTools(sc.srv.ID) {
			// Tool grants cannot say which resources, prompts or
			// completions go with the tools they grant: a caller granted
			// part of a server gets its tools only.
			fe := fault.New(fault.Forbidden, "%s is refused: this caller is granted only some tools of server %q", method, sc.srv.ID)
			sc.rec.fail(fe)
			data, _ := fault.MarshalJSON(fe.Detail())
			return nil, &jsonrpc.Error{Code: rpcCode(fe.Code), Message: fe.Message, Data: data}
		}
		hctx := ctx // the SDK's: it carries the request id and the agent's log level
		ctx, cancel := sc.scoped(ctx)
		defer cancel()
		if relay := relays[method]; relay != nil {
			return relay(ctx, sc, method, req)
		}
		switch method {
		case "logging/setLevel":
			// Answered here, never relayed: an upstream session serves
			// many requests in turn, and a 2026-07-28 upstream keeps no
			// level between requests. Streamed calls ask the upstream for
			// every level, and this request's session filters (Log).
			r, ok := req.(*mcp.ServerRequest[*mcp.SetLoggingLevelParams])
			if ok && r.Params != nil && !slices.Contains(logLevels, r.Params.Level) {
				return nil, invalidParams("unknown log level %q", clip.String(string(r.Params.Level), 32))
			}
		}
		return next(hctx, method, req)
	}
}

// relayFunc answers one method's request from the request's server.
type relayFunc func(ctx context.Context, sc *mcpScope, method string, req mcp.Request) (mcp.Result, error)

// relays are the methods relayed to the server of /mcp/{server_id} as
// they come, but for the gateway's own _meta keys. A server's resources,
// prompts and completions are not tools, and no tool grant says which of
// them a narrower caller may use: these are relayed only to a caller whose
// grants cover every tool of the server (auth.Principal.AllowsAllTools).
// Those that ask the upstream to do work for the agent (admitted) go
// through admission as tool calls do; the lists do not.
var relays = map[string]relayFunc{
	"resources/list":           relayed((*mcp.ClientSession).ListResources),
	"resources/templates/list": relayed((*mcp.ClientSession).ListResourceTemplates),
	"resources/read":           relayed((*mcp.ClientSession).ReadResource),
	"prompts/list":             relayed((*mcp.ClientSession).ListPrompts),
	"prompts/get":              relayed((*mcp.ClientSession).GetPrompt),
	"completion/complete":      relayed((*mcp.ClientSession).Complete),
}

// admitted are the relayed methods that take the caller's and the
// server's limits (relayAdmitted).
var admitted = map[string]bool{"resources/read": true, "prompts/get": true, "completion/complete": true}

// relayed makes the relayFunc of the session method send: it sends a copy
// of the request's params without the gateway's own _meta keys; traced,
// with the trace context of the request's CLIENT span in their place.
func relayed[P any, PP interface {
	*P
	mcp.Params
}, R mcp.Result](send func(*mcp.ClientSession, context.Context, PP) (R, error)) relayFunc {
	return func(ctx context.Context, sc *mcpScope, method string, req mcp.Request) (mcp.Result, error) {
		in, _ := req.GetParams().(PP)
		p := valueOf((*P)(in))
		pp := PP(&p)
		meta := forwardMeta(pp.GetMeta())
		pp.SetMeta(meta)
		return relay(ctx, sc, admitted[method], func(ctx context.Context, cs *mcp.ClientSession) (R, error) {
			t := sc.g.deps.Tracer
			if t == nil {
				return send(cs, ctx, pp)
			}
			// A span per attempt (Do may send again on a new session),
			// each naming its own in _meta.
			m := maps.Clone(meta)
			if m == nil {
				m = mcp.Meta{}
			}
			pp.SetMeta(m)
			ctx, end := t.Send(ctx, method, sc.srv, m)
			res, err := send(cs, ctx, pp)
			end(err)
			return res, err
		})
	}
}

// relay runs one non-tool request on an upstream session; if admit, once
// admitted as a tool call is (call.go): the key's own limits, and a place
// on the server — its cap, queue, buckets, adaptive limit and pauses — but
// no tool's cap, bucket or breaker. The place is given back when the
// upstream answers or the request is cut off, with the outcome a tool
// call's would have.
func relay[R mcp.Result](ctx context.Context, sc *mcpScope, admit bool, fn func(context.Context, *mcp.ClientSession) (R, error)) (mcp.Result, error) {
	g, srv := sc.g, sc.srv
	var res R
	send := func(ctx context.Context) error {
		return g.deps.Upstream.Do(ctx, srv, sc.caller.upstream(srv), nil, func(ctx context.Context, cs *mcp.ClientSession) error {
			var err error
			res, err = fn(ctx, cs)
			return err
		})
	}
	var err error
	if admit && srv.Transport != registry.TransportOpenAPI {
		err = g.relayAdmitted(ctx, srv, send)
	} else {
		// A list, bounded by the server's timeout; or a server that is
		// not an MCP server, which refuses at once.
		cctx, cancel := g.boundedCtx(ctx, srv.Timeout)
		defer cancel()
		err = send(cctx)
	}
	var refused *fault.Error
	switch {
	case errors.As(err, &refused):
		return nil, sc.rpcError(refused, err)
	case err != nil:
		return nil, sc.rpcError(upstreamFault(srv, err), err)
	}
	sc.rec.outcome = "ok"
	sc.settleResult(res)
	return res, nil
}

// relayAdmitted sends a request relayed to srv once admitted, keeping its
// places for as long as send runs, and gives them back with its outcome.
// It returns send's error, or the *fault.Error that refused or stopped the
// request.
func (g *Gateway) relayAdmitted(ctx context.Context, srv *registry.Server, send func(context.Context) error) error {
	c := g.newRelay(ctx, srv)
	if ferr := g.notStopping(ctx, c); ferr != nil {
		return ferr
	}
	if ferr := g.budgetFault(srv, "", c.timeout, c.req, c.capped); ferr != nil {
		return ferr
	}
	if ferr := g.take(ctx, c); ferr != nil {
		return ferr
	}
	end, short := g.callEnd(ctx, c)
	sctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var stops []func()
	for _, ls := range c.leases {
		var stop func()
		sctx, stop = ls.KeepAlive(sctx, end, func() time.Duration { return c.req.Hold }, func(err error) {
			g.log.Warn("lease lost; stopping the request", "request_id", c.rec.id, "server_id", srv.ID, "lease", ls.ID(), "error", err.Error())
		})
		stops = append(stops, stop)
	}
	c.rec.sent = true
	err := send(sctx)
	lost := errors.Is(context.Cause(sctx), lease.ErrLeaseLost)
	for _, stop := range stops {
		stop()
	}
	var ue *upstream.Error
	if errors.As(err, &ue) && ue.RetryAfter > 0 {
		g.pause(ctx, srv, "", c.leases, ue.RetryAfter, c.rec)
	}
	outcome := callOutcome(err, lost, short)
	for _, ls := range c.leases {
		o := outcome
		if ls.Key() != srv.ID {
			o = lease.Abandoned // a principal's own lease has no gate to tell
		}
		g.finish(ctx, ls, o, c.rec)
	}
	if lost && err != nil {
		return fault.Wrap(err, fault.StoreUnavailable, "the request to server %q was stopped: its slot could not be kept", srv.ID).
			WithRetryAfter(storeRetryAfter)
	}
	return err
}

// settleResult fixes the caching hints of a relayed result that has them.
func (sc *mcpScope) settleResult(r mcp.Result) {
	switch r := r.(type) {
	case *mcp.ListResourcesResult:
		sc.settle(&r.Cacheable)
	case *mcp.ListResourceTemplatesResult:
		sc.settle(&r.Cacheable)
	case *mcp.ReadResourceResult:
		sc.settle(&r.Cacheable)
	case *mcp.ListPromptsResult:
		sc.settle(&r.Cacheable)
	}
}

// rpcError turns a failure of a non-tool request into a JSON-RPC error: the
// upstream's own error as it was, anything else as an internal error whose
// data carries the gateway's code.
func (sc *mcpScope) rpcError(fe *fault.Error, err error) error {
	sc.rec.fail(fe)
	var ue *upstream.Error
	if errors.As(err, &ue) && ue.Kind == upstream.KindRPC {
		return ue.RPC
	}
	data, _ := fault.MarshalJSON(fe.Detail())
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fe.Message, Data: data}
}

// The cacheScope values of SEP-2549.
const (
	cachePublic  = "public"
	cachePrivate = "private"
)

// settle fixes a relayed result's caching hints: the upstream's TTL, capped
// by the longest the gateway itself reuses an upstream's answers; its scope,
// public unless the upstream said private.
func (sc *mcpScope) settle(c *mcp.Cacheable) {
	c.TTLMs = min(max(c.TTLMs, 0), int(sc.g.deps.Upstream.MaxTTL().Milliseconds()))
	if c.CacheScope != cachePrivate {
		c.CacheScope = cachePublic
	}
	if sc.srv == nil {
		c.CacheScope = cachePrivate
	}
}

// forwardMeta drops protocol-level _meta keys and the agent's trace
// context (the gateway sends its own), keeping the caller's own (such as
// progressToken).
func forwardMeta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := mcp.Meta{}
	for k, v := range m {
		if !ownMetaKey(k) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// ownMetaKey reports whether the _meta key k is one the gateway never
// forwards: the protocol's own (metaPrefix) or trace context (traceKeys),
// compared ignoring case, so that no spelling of them reaches an upstream.
func ownMetaKey(k string) bool {
	if len(k) >= len(metaPrefix) && strings.EqualFold(k[:len(metaPrefix)], metaPrefix) {
		return true
	}
	return slices.ContainsFunc(traceKeys, func(name string) bool { return traceKey(k, name) })
}

// logLevels are the levels of logging/setLevel, least severe first.
var logLevels = []mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// upstreamLogs reports whether the upstream a tools/call names declares
// logging, so that the call is answered with a stream that can carry its
// log messages.
func (sc *mcpScope) upstreamLogs(ctx context.Context, name string) bool {
	srv, tool, ferr := sc.resolveTool(ctx, name)
	if ferr != nil || !sc.caller.sees(srv, tool) {
		return false
	}
	ictx, cancel := sc.g.boundedCtx(ctx, min(srv.Timeout, 10*time.Second))
	defer cancel()
	info, err := sc.g.deps.Upstream.Info(ictx, srv, sc.caller.upstream(srv))
	return err == nil && info.Capabilities != nil && info.Capabilities.Logging != nil
}

func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

func (sc *mcpScope) listTools(ctx context.Context, req *mcp.ListToolsRequest) (mcp.Result, error) {
	if req.Params != nil && req.Params.Cursor != "" {
		return nil, invalidParams("unknown cursor: every tool is listed on the first page")
	}
	if sc.srv != nil {
		lctx, cancel := sc.g.boundedCtx(ctx, sc.srv.Timeout)
		defer cancel()
		ls, err := sc.g.deps.Upstream.ToolListing(lctx, sc.srv, sc.caller.upstream(sc.srv))
		if err != nil {
			return nil, sc.rpcError(upstreamFault(sc.srv, err), err)
		}
		sc.rec.outcome = "ok"
		visible := sc.caller.visible(sc.srv, ls.Tools)
		res := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, len(visible))}
		for i, t := range visible {
			res.Tools[i] = upstream.Listed(t)
		}
		res.TTLMs, res.CacheScope = ttlMs(ls.Expires), ls.Scope
		if sc.caller.principal.Tools != nil {
			// Narrowed by the caller's own tool grants.
			res.CacheScope = cachePrivate
		}
		sc.settle(&res.Cacheable)
		if sc.listsExecution() {
			return withExecution(res, sc.g.modes(ctx, sc.srv, sc.caller, visible)), nil
		}
		return res, nil
	}
	all, err := sc.g.allTools(ctx, sc.caller)
	if err != nil {
		fe := fault.Wrap(err, fault.StoreUnavailable, "cannot read the server registry right now").WithRetryAfter(storeRetryAfter)
		return nil, sc.rpcError(fe, err)
	}
	tools := []*mcp.Tool{}
	var modes map[string]taskMode
	if sc.listsExecution() {
		modes = map[string]taskMode{}
	}
	for _, st := range all {
		var own map[string]taskMode
		if modes != nil && st.srv != nil {
			own = sc.g.modes(ctx, st.srv, sc.caller, st.tools)
		}
		for _, t := range st.tools {
			c := *upstream.Listed(t)
			c.Name = st.id + ToolSeparator + t.Name
			tools = append(tools, &c)
			if modes != nil {
				modes[c.Name] = own[t.Name]
			}
		}
	}
	sc.rec.outcome = "ok"
	// The list depends on the caller's grants: private, and fresh as long
	// as its soonest-expiring part.
	res := &mcp.ListToolsResult{Tools: tools}
	res.TTLMs = int(sc.g.deps.Upstream.MaxTTL().Milliseconds())
	for _, st := range all {
		if !st.expires.IsZero() {
			res.TTLMs = min(res.TTLMs, ttlMs(st.expires))
		}
	}
	sc.settle(&res.Cacheable)
	if modes != nil {
		return withExecution(res, modes), nil
	}
	return res, nil
}
