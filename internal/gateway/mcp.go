package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// mcpError writes a JSON-RPC error outside the SDK, for requests refused
// before they reach it.
func mcpError(w http.ResponseWriter, status int, code int64, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error":   map[string]any{"code": code, "message": msg},
	})
}

// serveMCP serves POST /mcp (every server the key may use, tools named
// "<server_id>-<tool>") and POST /mcp/{server_id} (one upstream, passed
// through).
func (g *Gateway) serveMCP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	k := keyFrom(ctx)
	sc := &mcpScope{g: g, key: k, rec: recordFrom(ctx), protocol: r.Header.Get("MCP-Protocol-Version")}
	if dl, ok := ctx.Deadline(); ok {
		sc.deadline = dl
	}
	if id := r.PathValue("server_id"); id != "" {
		srv, ferr := g.server(ctx, k, id)
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
			mcpError(w, http.StatusRequestEntityTooLarge, jsonrpc.CodeInvalidRequest, fmt.Sprintf("request body is larger than %d bytes", g.maxBody))
			return
		}
		mcpError(w, http.StatusBadRequest, jsonrpc.CodeParseError, "cannot read the request body")
		return
	}
	p := peek(body)
	if p.batch && batchesRemoved(r.Header.Get("MCP-Protocol-Version")) {
		mcpError(w, http.StatusBadRequest, jsonrpc.CodeInvalidRequest, "JSON-RPC batches are not supported since protocol version 2025-06-18; send one message per request")
		return
	}
	if p.method != "" && !knownMethods[p.method] {
		sc.rec.tool = truncate(p.method, 64)
		if len(p.id) == 0 || string(p.id) == "null" {
			// An unknown notification: nothing to answer.
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if sc.protocol >= protocolMRTR {
			// From 2026-07-28 an unknown method is also HTTP 404.
			w.WriteHeader(http.StatusNotFound)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"jsonrpc": "2.0",
			"id":      p.id,
			"error":   map[string]any{"code": jsonrpc.CodeMethodNotFound, "message": fmt.Sprintf("method %q not found", truncate(p.method, 64))},
		})
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	sc.rec.outcome = ""
	if p.method != "" {
		sc.rec.tool = truncate(p.method, 64)
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
	h.ServeHTTP(w, r.WithContext(context.WithValue(ctx, mcpServerKey{}, srv)))
}

// batchesRemoved reports whether the protocol version forbids batches
// (2025-06-18 and later). A request without the header is taken as
// 2025-03-26, which allowed them.
func batchesRemoved(version string) bool { return version >= "2025-06-18" }

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
	key      *auth.Key
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
	srv, tool, err := sc.resolveTool(ctx, name)
	if err != nil {
		return
	}
	lctx, cancel := sc.g.boundedCtx(ctx, srv.Timeout)
	defer cancel()
	t, err := sc.g.deps.Upstream.Tool(lctx, srv, tool)
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
// the request's log record, and nothing else. The SDK keeps the agent's
// protocol version in its handler context, and the upstream client would
// read it from there: the upstream session must negotiate its own.
func (sc *mcpScope) scoped(handler context.Context) (context.Context, context.CancelFunc) {
	ctx := context.WithValue(context.Background(), recordCtx, sc.rec)
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
			info, err := sc.g.deps.Upstream.Info(ictx, sc.srv)
			cancel()
			if err != nil {
				return nil, upstreamFault(sc.srv, err)
			}
			caps = passthroughCapabilities(info.Capabilities)
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
			// Answered here, never relayed: upstream sessions are pooled
			// and shared by every agent, and a 2026-07-28 upstream keeps no
			// level between requests. Streamed calls ask the upstream for
			// every level, and this request's session filters (Log).
			r, ok := req.(*mcp.ServerRequest[*mcp.SetLoggingLevelParams])
			if ok && r.Params != nil && !slices.Contains(logLevels, r.Params.Level) {
				return nil, invalidParams("unknown log level %q", truncate(string(r.Params.Level), 32))
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
	err := sc.g.deps.Upstream.Do(cctx, sc.srv, nil, func(ctx context.Context, cs *mcp.ClientSession) error {
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
	srv, _, err := sc.resolveTool(ctx, name)
	if err != nil {
		return false
	}
	ictx, cancel := sc.g.boundedCtx(ctx, min(srv.Timeout, 10*time.Second))
	defer cancel()
	info, err := sc.g.deps.Upstream.Info(ictx, srv)
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
		ls, err := sc.g.deps.Upstream.ToolListing(lctx, sc.srv)
		if err != nil {
			return nil, sc.rpcError(upstreamFault(sc.srv, err), err)
		}
		sc.rec.outcome = "ok"
		res := &mcp.ListToolsResult{Tools: ls.Tools}
		res.TTLMs, res.CacheScope = ttlMs(ls.Expires), ls.Scope
		sc.settle(&res.Cacheable)
		return res, nil
	}
	servers, err := sc.g.allowedServers(ctx, sc.key)
	if err != nil {
		fe := fault.Wrap(err, fault.StoreUnavailable, "cannot read the server registry right now").WithRetryAfter(storeRetryAfter)
		return nil, sc.rpcError(fe, err)
	}
	lists := make([][]*mcp.Tool, len(servers))
	expires := make([]time.Time, len(servers))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxListConcurrency)
	for i, srv := range servers {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			lctx, cancel := sc.g.boundedCtx(ctx, min(srv.Timeout, 10*time.Second))
			defer cancel()
			ls, err := sc.g.deps.Upstream.ToolListing(lctx, srv)
			if err != nil {
				// One unreachable upstream must not hide the others' tools.
				sc.g.log.Warn("listing tools failed; its tools are left out", "request_id", sc.rec.id, "server_id", srv.ID, "error", err.Error())
				return
			}
			expires[i] = ls.Expires
			named := make([]*mcp.Tool, len(ls.Tools))
			for j, t := range ls.Tools {
				c := *t
				c.Name = srv.ID + ToolSeparator + t.Name
				named[j] = &c
			}
			lists[i] = named
		})
	}
	wg.Wait()
	all := []*mcp.Tool{}
	for _, l := range lists {
		all = append(all, l...)
	}
	sc.rec.outcome = "ok"
	// The list depends on the key's grants: private, and fresh as long as
	// its soonest-expiring part.
	res := &mcp.ListToolsResult{Tools: all}
	res.TTLMs = int(sc.g.deps.Upstream.MaxTTL().Milliseconds())
	for _, e := range expires {
		if !e.IsZero() {
			res.TTLMs = min(res.TTLMs, ttlMs(e))
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

// allowedServers lists the servers a key may call, ordered by id.
func (g *Gateway) allowedServers(ctx context.Context, k *auth.Key) ([]*registry.Server, error) {
	var out []*registry.Server
	if k.AllowsAll() {
		servers, invalid, err := g.deps.Registry.All(ctx)
		if err != nil {
			return nil, err
		}
		for _, e := range invalid {
			g.log.Warn("invalid server item left out", "error", e.Error())
		}
		out = append(out, servers...)
	} else {
		for _, id := range k.Servers {
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

// resolveTool finds the server and upstream tool name a call names.
func (sc *mcpScope) resolveTool(ctx context.Context, name string) (*registry.Server, string, error) {
	if sc.srv != nil {
		return sc.srv, name, nil
	}
	id, tool, ok := strings.Cut(name, ToolSeparator)
	if !ok || id == "" || tool == "" {
		return nil, "", invalidParams("unknown tool %q: tools here are named <server_id>%s<tool>", truncate(name, 128), ToolSeparator)
	}
	srv, ferr := sc.g.server(ctx, sc.key, id)
	if ferr != nil {
		switch ferr.Code {
		case fault.NotFound, fault.Forbidden:
			// The key's tool list never shows it: to the agent it does
			// not exist.
			return nil, "", invalidParams("unknown tool %q", truncate(name, 128))
		}
		return nil, "", ferr
	}
	return srv, tool, nil
}

// callTool answers tools/call: hctx is the SDK's handler context (for
// notifications to the agent), ctx the scoped one for upstream work.
func (sc *mcpScope) callTool(hctx, ctx context.Context, req *mcp.CallToolRequest) (mcp.Result, error) {
	p := req.Params
	if ferr := validToolName(p.Name); ferr != nil {
		return nil, invalidParams("%s", ferr.Message)
	}
	srv, tool, err := sc.resolveTool(ctx, p.Name)
	if err != nil {
		var fe *fault.Error
		if errors.As(err, &fe) {
			return toolError(sc.rec, fe), nil
		}
		return nil, err
	}
	args, ferr := arguments(p.Arguments)
	if ferr != nil {
		return nil, invalidParams("%s", ferr.Message)
	}
	params := &mcp.CallToolParams{Meta: forwardMeta(p.Meta), Name: tool, Arguments: args,
		InputResponses: p.InputResponses, RequestState: p.RequestState}
	c := client{principal: principalOf(sc.key), protocol: sc.protocol, mrtr: sc.protocol >= protocolMRTR, caps: clientFromCaps(p.Meta[mcp.MetaKeyClientCapabilities])}
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
	res, fe := sc.g.roundTrip(ctx, srv, params, c, l)
	if re, ok := specError(fe); ok {
		// The protocol's own errors (a header mismatch, a missing client
		// capability) reach the client as they are.
		sc.rec.code, sc.rec.cause, sc.rec.outcome = fe.Code, fe.Cause, "error"
		return nil, re
	}
	if fe != nil {
		switch fe.Code {
		case fault.NotFound, fault.BadRequest:
			// Unknown tool, or arguments the upstream rejected: the
			// caller's mistake, a protocol error.
			sc.rec.code, sc.rec.cause, sc.rec.outcome = fe.Code, fe.Cause, "error"
			return nil, invalidParams("%s", fe.Message)
		}
		return toolError(sc.rec, fe), nil
	}
	return res, nil
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
