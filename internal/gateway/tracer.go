package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// Tracer makes the spans of agent requests and of the tool calls they
// make (internal/tracing implements it with OpenTelemetry). Deps.Tracer is
// nil when tracing is off: then the gateway does nothing more than check
// for nil. Its methods run on the call path and must not block; what they
// are given never includes a credential, a request state or arguments.
type Tracer interface {
	// Request starts the SERVER span of one agent request: a JSON-RPC
	// message on the MCP routes, a REST call. Its parent is the agent's
	// trace context, from the message's params._meta (meta; empty if
	// none) or, failing that, from h (traceparent, tracestate). The
	// context returned carries the span; end is called once, when it is
	// answered.
	Request(ctx context.Context, h http.Header, meta TraceMeta, r RequestStart) (_ context.Context, end func(RequestEnd))
	// Admission starts the span of a call's admission (its rate limits,
	// its wait in the queue, its grant or refusal).
	Admission(ctx context.Context, c CallInfo) (end func(AdmissionEnd))
	// Exchange starts the CLIENT span of a call sent to its upstream, and
	// sets the span's traceparent (and tracestate) in meta, which the call
	// sends as its params._meta. The context returned carries the span:
	// the upstream's HTTP requests carry it as headers.
	Exchange(ctx context.Context, c CallInfo, srv *registry.Server, meta mcp.Meta) (context.Context, ExchangeSpan)
	// Send starts the CLIENT span of a request relayed to srv (the
	// relays: resources, prompts, completions) and sets the span's
	// traceparent (and tracestate) in meta, the request's params._meta;
	// the request's HTTP requests, sent with the context returned, carry
	// it as headers. end is called once with the request's outcome. It is
	// upstream.HTTPTracer's Send, which the upstream pool calls for the
	// tools/list it sends.
	Send(ctx context.Context, method string, srv *registry.Server, meta mcp.Meta) (_ context.Context, end func(error))
	// Current is the trace context of ctx's span (its traceparent and
	// tracestate), empty when it has none: what a task's record keeps of
	// the request that created it.
	Current(ctx context.Context) TraceMeta
	// Task starts the span of a task's run by its worker: the root of a
	// trace of its own (the run outlives the request that created the
	// task, and may be in another process), linked to the span that
	// created the task (link, as Current gave it; no link when it is
	// empty or not valid W3C trace context). The context returned carries
	// the span; end is called once, when the run has ended.
	Task(ctx context.Context, link TraceMeta, c CallInfo) (_ context.Context, end func(RequestEnd))
}

// TraceMeta is the trace context an agent put in params._meta (SEP-414).
type TraceMeta struct {
	Traceparent, Tracestate string
}

// RequestStart is what is known of a request when its span starts.
type RequestStart struct {
	// Method is the JSON-RPC method (tools/call for a REST call), Target
	// the tool or server it names, "" when none.
	Method, Target string
	// Protocol is the MCP-Protocol-Version asked for; RequestID the
	// JSON-RPC id ("" for a notification or a REST call).
	Protocol, RequestID string
	// Route is the HTTP route's pattern (/mcp/{server_id}, never the
	// path a request named); GatewayID the gateway's request id.
	Route, GatewayID string
}

// RequestEnd is how a request ended, from its log record.
type RequestEnd struct {
	ServerID, Tool string
	// Outcome is ok, tool_error or error; Code the gateway's code when it
	// refused or failed.
	Outcome string
	Code    fault.Code
	Status  int
}

// AdmissionEnd is how a call's admission ended: its place, or its refusal.
type AdmissionEnd struct {
	Lease *lease.Lease // nil when it took no place under a cap
	Fault *fault.Error // nil when admitted
}

// ExchangeSpan is the span of one call's exchange with its upstream.
type ExchangeSpan interface {
	// Answered: the upstream answered (isError: with a tool error), or
	// failed with f.
	Answered(f *fault.Error, isError bool)
	// CutOff: the agent was answered first, with f; the exchange goes on
	// in the background (background is false when it is closed at once).
	CutOff(f *fault.Error, background bool)
	// Closed: a cut-off call's exchange is closed, the upstream known to
	// have stopped (how) or not ("").
	Closed(how upstream.Stop, held time.Duration)
}

// traceKeys are the _meta keys and headers of trace context (W3C Trace
// Context and Baggage). The agent's are never forwarded: upstreams get the
// gateway's own, naming its CLIENT span.
var traceKeys = []string{"traceparent", "tracestate", "baggage"}

// traceKey reports whether the _meta key k is the trace key name. Trace
// keys are compared ignoring case, as header names are, both to read the
// agent's trace context and to keep it from the upstream: TRACEPARENT is
// traceparent, and Baggage is never forwarded.
func traceKey(k, name string) bool { return strings.EqualFold(k, name) }

// traceREST wraps a REST route's handler in the request's SERVER span,
// whose target is, for a call, the tool its body names, as on the MCP
// routes.
func (g *Gateway) traceREST(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.deps.Tracer == nil {
			h(w, r)
			return
		}
		rec := recordFrom(r.Context())
		var target string
		if method == "tools/call" {
			target = g.peekToolName(r)
		}
		ctx, end := g.deps.Tracer.Request(r.Context(), r.Header, TraceMeta{},
			RequestStart{Method: method, Target: clip.String(target, clip.Name), Route: r.Pattern, GatewayID: rec.id})
		sw := &statusWriter{ResponseWriter: w}
		defer func() { end(rec.traceEnd(sw.status)) }()
		h(sw, r.WithContext(ctx))
	}
}

// peekToolName reads the name a REST call's body gives its tool, "" when
// it gives none or the body is over the limit, and puts back what it read
// for the handler, which reads the body as if untouched (and refuses it
// if it is over the limit: at most one byte more is read here).
func (g *Gateway) peekToolName(r *http.Request) string {
	head, err := io.ReadAll(io.LimitReader(r.Body, g.maxBody+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	if err != nil || int64(len(head)) > g.maxBody {
		return ""
	}
	var body struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(head, &body) != nil {
		return ""
	}
	return body.Name
}

func (rec *record) traceEnd(status int) RequestEnd {
	return RequestEnd{ServerID: rec.serverID, Tool: rec.tool, Outcome: rec.outcome, Code: rec.code, Status: status}
}

// rpcID is a JSON-RPC id as jsonrpc.request.id gives it: a string's
// value, a number's digits, "" for none.
func rpcID(id json.RawMessage) string {
	var s string
	if json.Unmarshal(id, &s) == nil {
		return s
	}
	if len(id) == 0 || string(id) == "null" {
		return ""
	}
	return string(id)
}
