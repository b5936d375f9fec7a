package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"io"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
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
// protocol version.
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

// knownMethods are the methods the SDK's server dispatches; it answers any
// other with a bare HTTP 400, so the gateway answers those itself.
var knownMethods = map[string]bool{
	"initialize": true, "ping": true, "server/discover": true,
	"tools/list": true, "tools/call": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"resources/subscribe": true, "resources/unsubscribe": true, "subscriptions/listen": true,
	"prompts/list": true, "prompts/get": true,
	"completion/complete": true, "logging/setLevel": true,
	"notifications/initialized": true, "notifications/cancelled": true,
	"notifications/progress": true, "notifications/roots/list_changed": true,
}

// narrowedMethods are relayed on /mcp/{server_id} only to a caller whose
// grants cover every tool of the server (auth.Principal.AllowsAllTools):
// a server's resources, prompts and completions are not tools, and no tool
// grant says which of them a narrower caller may use.
var narrowedMethods = map[string]bool{
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"prompts/list": true, "prompts/get": true, "completion/complete": true,
}

// peeked is what the gateway reads of an MCP request before the SDK does.
type peeked struct {
	method   string
	id       json.RawMessage
	name     string
	progress bool
	batch    bool
}

func peek(body []byte) peeked {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return peeked{batch: true}
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
			Meta struct {
				ProgressToken any `json:"progressToken"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return peeked{}
	}
	return peeked{method: msg.Method, id: msg.ID, name: msg.Params.Name, progress: msg.Params.Meta.ProgressToken != nil}
}

// messageDepth is how deep a tools/call message nests its arguments
// (message, params, arguments).
const messageDepth = 3

// writeRPCError answers the request id with a JSON-RPC error outside the
// SDK: a protocol error, answered 200 as the SDK answers its own, its data
// carrying the gateway's error detail.
func writeRPCError(w http.ResponseWriter, id json.RawMessage, code int64, fe *fault.Error) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	writeRPC(w, http.StatusOK, "", rpcResponse{JSONRPC: "2.0", ID: id, Error: rpcErrorObject{Code: code, Message: fe.Message, Data: fe.Detail()}})
}

// serveMCP serves POST /mcp (every server the caller may use, tools named
// "<server_id>-<tool>") and POST /mcp/{server_id} (one upstream, passed
// through).
func (g *Gateway) serveMCP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sc := &mcpScope{g: g, caller: callerFrom(ctx), rec: recordFrom(ctx), protocol: r.Header.Get("MCP-Protocol-Version")}
	if dl, ok := ctx.Deadline(); ok {
		sc.deadline = dl
	}
	if id := r.PathValue("server_id"); id != "" {
		srv, ferr := g.server(ctx, id)
		if ferr != nil {
			writeFault(w, r, ferr)
			return
		}
		sc.srv = srv
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeFault(w, r, fault.New(fault.PayloadTooLarge, "request body is larger than %d bytes", g.maxBody))
			return
		}
		writeFault(w, r, fault.Wrap(err, fault.BadRequest, "cannot read the request body"))
		return
	}
	p := peek(body)
	if p.batch {
		// Whatever the protocol version: every message would need its own
		// key check, slot, log record and deadline, and a batch would fan
		// out unbounded behind one request.
		writeFault(w, r, fault.New(fault.BadRequest, "JSON-RPC batches are not supported: send one message per request"))
		return
	}
	if depth(body) > g.maxDepth+messageDepth {
		// Refused here rather than by the SDK (whose own bound is a bare
		// HTTP 400), as a tool call's arguments would be.
		sc.rec.method = clip.String(p.method, clip.Short)
		if p.method == "tools/call" {
			sc.noteTool(p.name)
		}
		sc.rec.code, sc.rec.outcome = fault.BadRequest, "error"
		writeRPCError(w, p.id, jsonrpc.CodeInvalidParams, fault.New(fault.BadRequest, "arguments are nested more than %d deep", g.maxDepth))
		return
	}
	if p.method != "" && !knownMethods[p.method] {
		sc.rec.method = clip.String(p.method, clip.Short)
		sc.rec.code, sc.rec.outcome = fault.NotFound, "error"
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
		fe := fault.New(fault.NotFound, "method %q not found", clip.String(p.method, clip.Short))
		if len(p.id) == 0 {
			p.id = json.RawMessage("null")
		}
		writeRPC(w, status, "", rpcResponse{JSONRPC: "2.0", ID: p.id, Error: rpcErrorObject{Code: jsonrpc.CodeMethodNotFound, Message: fe.Message, Data: fe.Detail()}})
		return
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
		sc.rec.code, sc.rec.cause, sc.rec.outcome = fe.Code, fe.Cause, "error"
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
	g        *Gateway
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
// the request's log record and caller, and nothing else. The SDK keeps the
// agent's protocol version in its handler context, and the upstream client
// would read it from there: the upstream session must negotiate its own.
func (sc *mcpScope) scoped(handler context.Context) (context.Context, context.CancelFunc) {
	ctx := context.WithValue(context.Background(), recordCtx, sc.rec)
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
			instructions = info.Instructions
			if info.ServerInfo != nil {
				impl = &mcp.Implementation{Name: info.ServerInfo.Name, Title: info.ServerInfo.Title, Version: info.ServerInfo.Version}
			}
		}
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
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		// The SDK runs handlers on goroutines of its own, out of reach of
		// the HTTP server's recovery: a panic here would end the process.
		defer func() {
			if p := recover(); p != nil {
				sc.g.log.Error("panic in MCP handler", "request_id", sc.rec.id, "method", method, "panic", p, "stack", string(debug.Stack()))
				sc.rec.code, sc.rec.outcome = fault.Internal, "error"
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
		}
		if sc.srv == nil {
			return next(ctx, method, req)
		}
		if narrowedMethods[method] && !sc.caller.principal.AllowsAllTools(sc.srv.ID) {
			// Tool grants cannot say which resources, prompts or
			// completions go with the tools they grant: a caller granted
			// part of a server gets its tools only.
			fe := fault.New(fault.Forbidden, "%s is refused: this caller is granted only some tools of server %q", method, sc.srv.ID)
			sc.rec.code, sc.rec.outcome = fe.Code, "error"
			data, _ := json.Marshal(fe.Detail())
			return nil, &jsonrpc.Error{Code: rpcCode(fe.Code), Message: fe.Message, Data: data}
		}
		hctx := ctx // the SDK's: it carries the request id and the agent's log level
		ctx, cancel := sc.scoped(ctx)
		defer cancel()
		switch method {
		case "resources/list":
			return relay(ctx, sc, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListResourcesResult, error) {
				p := valueOf(req.(*mcp.ListResourcesRequest).Params)
				p.Meta = forwardMeta(p.Meta)
				return cs.ListResources(ctx, &p)
			})
		case "resources/templates/list":
			return relay(ctx, sc, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListResourceTemplatesResult, error) {
				p := valueOf(req.(*mcp.ListResourceTemplatesRequest).Params)
				p.Meta = forwardMeta(p.Meta)
				return cs.ListResourceTemplates(ctx, &p)
			})
		case "resources/read":
			return relay(ctx, sc, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ReadResourceResult, error) {
				p := valueOf(req.(*mcp.ReadResourceRequest).Params)
				p.Meta = forwardMeta(p.Meta)
				return cs.ReadResource(ctx, &p)
			})
		case "prompts/list":
			return relay(ctx, sc, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListPromptsResult, error) {
				p := valueOf(req.(*mcp.ListPromptsRequest).Params)
				p.Meta = forwardMeta(p.Meta)
				return cs.ListPrompts(ctx, &p)
			})
		case "prompts/get":
			return relay(ctx, sc, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.GetPromptResult, error) {
				p := valueOf(req.(*mcp.GetPromptRequest).Params)
				p.Meta = forwardMeta(p.Meta)
				return cs.GetPrompt(ctx, &p)
			})
		case "completion/complete":
			return relay(ctx, sc, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.CompleteResult, error) {
				p := valueOf(req.(*mcp.CompleteRequest).Params)
				p.Meta = forwardMeta(p.Meta)
				return cs.Complete(ctx, &p)
			})
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

// relay runs one non-tool request on an upstream session. It takes no
// slot: only tool calls count against the cap.
func relay[R mcp.Result](ctx context.Context, sc *mcpScope, fn func(context.Context, *mcp.ClientSession) (R, error)) (mcp.Result, error) {
	cctx, cancel := sc.g.boundedCtx(ctx, sc.srv.Timeout)
	defer cancel()
	var res R
	err := sc.g.deps.Upstream.Do(cctx, sc.srv, sc.caller.upstream(sc.srv), nil, func(ctx context.Context, cs *mcp.ClientSession) error {
		var err error
		res, err = fn(ctx, cs)
		return err
	})
	if err != nil {
		return nil, sc.rpcError(upstreamFault(sc.srv, err), err)
	}
	sc.rec.outcome = "ok"
	sc.settleResult(res)
	return res, nil
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
	sc.rec.code, sc.rec.cause, sc.rec.outcome = fe.Code, fe.Cause, "error"
	var ue *upstream.Error
	if errors.As(err, &ue) && ue.Kind == upstream.KindRPC {
		return ue.RPC
	}
	data, _ := json.Marshal(fe.Detail())
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

// forwardMeta drops protocol-level _meta keys, keeping the caller's own
// (such as progressToken).
func forwardMeta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := mcp.Meta{}
	for k, v := range m {
		if !strings.HasPrefix(k, metaPrefix) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
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
		res := &mcp.ListToolsResult{Tools: sc.caller.visible(sc.srv, ls.Tools)}
		res.TTLMs, res.CacheScope = ttlMs(ls.Expires), ls.Scope
		if sc.caller.principal.Tools != nil {
			// Narrowed by the caller's own tool grants.
			res.CacheScope = cachePrivate
		}
		sc.settle(&res.Cacheable)
		return res, nil
	}
	all, err := sc.g.allTools(ctx, sc.caller)
	if err != nil {
		fe := fault.Wrap(err, fault.StoreUnavailable, "cannot read the server registry right now").WithRetryAfter(storeRetryAfter)
		return nil, sc.rpcError(fe, err)
	}
	tools := []*mcp.Tool{}
	for _, st := range all {
		for _, t := range st.tools {
			c := *t
			c.Name = st.srv.ID + ToolSeparator + t.Name
			tools = append(tools, &c)
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
	return res, nil
}

// ttlMs is the time left until expires, in whole milliseconds, never
// negative.
func ttlMs(expires time.Time) int {
	return int(max(time.Until(expires), 0).Milliseconds())
}

// serverTools is one server's tools, or why they could not be listed.
type serverTools struct {
	srv   *registry.Server
	tools []*mcp.Tool
	err   *fault.Error
	// expires is when the gateway lists the server again.
	expires time.Time
}

// allTools lists the tools of every server c may call (those of them c may
// see), ordered by server
// id, asking at most maxListConcurrency upstreams at once. A server whose
// listing fails is returned with its fault (and logged), and never hides
// the others' tools.
func (g *Gateway) allTools(ctx context.Context, c *caller) ([]serverTools, error) {
	servers, err := g.allowedServers(ctx, c.principal)
	if err != nil {
		return nil, err
	}
	out := make([]serverTools, len(servers))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxListConcurrency)
	for i, srv := range servers {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			lctx, cancel := g.boundedCtx(ctx, min(srv.Timeout, 10*time.Second))
			defer cancel()
			out[i].srv = srv
			ls, err := g.deps.Upstream.ToolListing(lctx, srv, c.upstream(srv))
			if err != nil {
				g.log.Warn("listing tools failed; its tools are left out", "request_id", recordFrom(ctx).id, "server_id", srv.ID, "error", err.Error())
				out[i].err = upstreamFault(srv, err)
				return
			}
			out[i].tools, out[i].expires = c.visible(srv, ls.Tools), ls.Expires
		})
	}
	wg.Wait()
	return out, nil
}

// allowedServers lists the servers a principal may call, ordered by id.
func (g *Gateway) allowedServers(ctx context.Context, p *auth.Principal) ([]*registry.Server, error) {
	var out []*registry.Server
	if p.AllowsAll() {
		servers, invalid, err := g.deps.Registry.All(ctx)
		if err != nil {
			return nil, err
		}
		for _, e := range invalid {
			g.log.Warn("invalid server item left out", "error", e.Error())
		}
		out = append(out, servers...)
	} else {
		for _, id := range p.Servers {
			srv, err := g.deps.Registry.Get(ctx, id)
			switch {
			case err == nil:
				out = append(out, srv)
			case errors.Is(err, registry.ErrNotFound):
			case errors.As(err, new(*registry.InvalidError)):
				g.log.Warn("invalid server item left out", "server_id", id, "error", err.Error())
			default:
				return nil, err
			}
		}
	}
	slices.SortFunc(out, func(a, b *registry.Server) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// resolveTool finds the server and upstream tool name a call names. On the
// aggregated endpoint, a server the caller may not call (FORBIDDEN) or that
// does not exist (NOT_FOUND) is an unknown tool to the agent, since its
// tool list never shows it; the fault's code still says which.
func (sc *mcpScope) resolveTool(ctx context.Context, name string) (*registry.Server, string, *fault.Error) {
	if sc.srv != nil {
		return sc.srv, name, nil
	}
	id, tool, ok := strings.Cut(name, ToolSeparator)
	if !ok || id == "" || tool == "" {
		return nil, "", fault.New(fault.NotFound, "unknown tool %q: tools here are named <server_id>%s<tool>", clip.String(name, clip.Name), ToolSeparator)
	}
	srv, ferr := sc.g.server(ctx, id)
	if ferr != nil {
		switch ferr.Code {
		case fault.NotFound, fault.Forbidden:
			return nil, "", fault.New(ferr.Code, "unknown tool %q", clip.String(name, clip.Name))
		}
		return nil, "", ferr
	}
	return srv, tool, nil
}

// noteTool records the server and tool a tools/call names, before it is
// resolved: on the aggregated endpoint, "<server_id>-<tool>" is split.
func (sc *mcpScope) noteTool(name string) {
	if sc.srv == nil {
		if id, tool, ok := strings.Cut(name, ToolSeparator); ok {
			sc.rec.serverID, name = clip.String(id, clip.Short), tool
		}
	}
	sc.rec.tool = clip.String(name, clip.Name)
}

// refuse answers a tools/call the caller got wrong (unknown tool, invalid
// arguments) with JSON-RPC invalid params, noting fe in the record.
func (sc *mcpScope) refuse(fe *fault.Error) error {
	sc.rec.code, sc.rec.cause, sc.rec.outcome = fe.Code, fe.Cause, "error"
	return invalidParams("%s", fe.Message)
}

// callTool answers tools/call: hctx is the SDK's handler context (for
// notifications to the agent), ctx the scoped one for upstream work.
func (sc *mcpScope) callTool(hctx, ctx context.Context, req *mcp.CallToolRequest) (mcp.Result, error) {
	p := req.Params
	sc.noteTool(p.Name)
	if ferr := validToolName(p.Name); ferr != nil {
		return nil, sc.refuse(ferr)
	}
	srv, tool, ferr := sc.resolveTool(ctx, p.Name)
	if ferr != nil {
		switch ferr.Code {
		case fault.NotFound, fault.Forbidden:
			return nil, sc.refuse(ferr)
		}
		return toolError(sc.rec, ferr), nil
	}
	sc.rec.tool = clip.String(tool, clip.Name)
	args, ferr := sc.g.arguments(p.Arguments)
	if ferr != nil {
		return nil, sc.refuse(ferr)
	}
	params := &mcp.CallToolParams{Meta: forwardMeta(p.Meta), Name: tool, Arguments: args,
		InputResponses: p.InputResponses, RequestState: p.RequestState}
	cl := client{principal: principalOf(sc.caller.principal), protocol: sc.protocol, mrtr: sc.protocol >= protocolMRTR, caps: clientFromCaps(p.Meta[mcp.MetaKeyClientCapabilities])}
	var l *upstream.Listener
	if sc.stream {
		l = relayNotifications(hctx, req)
		// A 2026-07-28 upstream logs only at the level the request names;
		// the agent's own level is applied when relaying.
		if params.Meta == nil {
			params.Meta = mcp.Meta{}
		}
		params.Meta[mcp.MetaKeyLogLevel] = "debug"
	}
	res, fe := sc.g.roundTrip(ctx, srv, params, cl, l)
	if re, ok := specError(fe); ok {
		// The protocol's own errors (a header mismatch, a missing client
		// capability) reach the client as they are.
		sc.rec.code, sc.rec.cause, sc.rec.outcome = fe.Code, fe.Cause, "error"
		return nil, re
	}
	if fe == nil {
		var out mcp.Result
		out, fe = sc.g.encodeResult(srv, res)
		if fe == nil {
			return out, nil
		}
		sc.rec.outcome = ""
	}
	switch {
	case errors.Is(fe.Cause, errSchema):
		// Input validation: a tool execution error, as the upstream's own
		// SDK reports it, so the model can correct its arguments.
		return toolError(sc.rec, fe), nil
	case fe.Code == fault.NotFound || fe.Code == fault.BadRequest:
		// Unknown tool, or arguments the gateway or the upstream
		// refused: the caller's mistake, a protocol error.
		return nil, sc.refuse(fe)
	}
	return toolError(sc.rec, fe), nil
}

// toolError reports a gateway failure as a tool result with isError, its
// structured content carrying the same code, retryable and retry_after_ms as
// the REST route's error body.
func toolError(rec *record, fe *fault.Error) *mcp.CallToolResult {
	rec.code, rec.cause, rec.outcome = fe.Code, fe.Cause, "error"
	d := fe.Detail()
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s: %s", d.Code, d.Message)}},
		StructuredContent: fault.Body{Error: d},
	}
}

// relayNotifications forwards the upstream's progress and log messages for
// this call to the agent, on the call's own response stream: ctx is the
// call's, which tells the SDK which stream.
func relayNotifications(ctx context.Context, req *mcp.CallToolRequest) *upstream.Listener {
	ss := req.Session
	token := req.Params.GetProgressToken()
	return &upstream.Listener{
		Progress: func(_ context.Context, p *mcp.ProgressNotificationParams) {
			if token == nil {
				return
			}
			_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: p.Progress, Total: p.Total, Message: p.Message,
			})
		},
		Log: func(_ context.Context, p *mcp.LoggingMessageParams) {
			_ = ss.Log(ctx, p)
		},
	}
}

// valueOf copies a request's params; a request may omit them.
func valueOf[P any](p *P) P {
	if p == nil {
		var zero P
		return zero
	}
	return *p
}
