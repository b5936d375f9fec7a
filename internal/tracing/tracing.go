// Package tracing exports OpenTelemetry spans of the gateway's requests
// and calls, following the OpenTelemetry semantic conventions for MCP: a
// SERVER span per agent request, a child span for each tool call's
// admission, a CLIENT span per upstream exchange and per other upstream
// HTTP request, and, for a cut-off call, a span of its background wait
// until the upstream stopped, linked to the call's CLIENT span.
//
// It is configured by the standard OpenTelemetry environment and is off
// unless OTEL_TRACES_EXPORTER=otlp: then FromEnv returns nil and the
// gateway makes no span, starts no goroutine and checks only for nil.
//
// What goes in a span is chosen, never copied: methods, tool and server
// ids, codes, durations, lease ids. Never a key, a token, a credential, a
// request state, arguments or results, nor a URL but its host. What a
// request chose (its method, the tool and server it names, its JSON-RPC
// id, its protocol version) is escaped with clip.Escape before it is
// recorded.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// ScopeName is the instrumentation scope of the gateway's spans.
const ScopeName = "github.com/mcpgate/mcpgate"

// Attribute keys: the MCP semantic conventions' (mcpconv in the Go
// semconv packages defines only metrics), the gateway's own under mcpgate.
const (
	keyMethod      = attribute.Key("mcp.method.name")
	keyProtocol    = attribute.Key("mcp.protocol.version")
	keyRPCID       = attribute.Key("jsonrpc.request.id")
	keyTool        = attribute.Key("gen_ai.tool.name")
	keyOperation   = attribute.Key("gen_ai.operation.name")
	keyErrorType   = attribute.Key("error.type")
	keyRoute       = attribute.Key("http.route")
	keyStatus      = attribute.Key("http.response.status_code")
	keyHTTPMethod  = attribute.Key("http.request.method")
	keyAddress     = attribute.Key("server.address")
	keyPort        = attribute.Key("server.port")
	keyRequestID   = attribute.Key("mcpgate.request_id")
	keyServerID    = attribute.Key("mcpgate.server_id")
	keyOutcome     = attribute.Key("mcpgate.outcome")
	keyAdmission   = attribute.Key("mcpgate.admission")
	keyWaitMs      = attribute.Key("mcpgate.queue.wait_ms")
	keyQueuePos    = attribute.Key("mcpgate.queue.position")
	keyInFlight    = attribute.Key("mcpgate.in_flight")
	keyLease       = attribute.Key("mcpgate.lease_id")
	keyRetryAfter  = attribute.Key("mcpgate.retry_after_ms")
	keyStoppedBy   = attribute.Key("mcpgate.stopped_by")
	keyHeldMs      = attribute.Key("mcpgate.held_ms")
	keyTransport   = attribute.Key("mcpgate.transport")
	keyBackground  = attribute.Key("mcpgate.background")
	defaultService = "mcpgate"
)

// EnvVars are the variables of the environment tracing reads itself
// (besides those the OpenTelemetry SDK reads).
var EnvVars = []string{
	"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
}

// Tracing makes the gateway's spans and exports them over OTLP/HTTP.
type Tracing struct {
	tp   *sdktrace.TracerProvider
	tr   trace.Tracer
	prop propagation.TraceContext
}

var (
	_ gateway.Tracer       = (*Tracing)(nil)
	_ upstream.HTTPTracer  = (*Tracing)(nil)
	_ gateway.ExchangeSpan = (*exchangeSpan)(nil)
)

// FromEnv returns the tracing the OTEL_* environment asks for, nil when
// OTEL_TRACES_EXPORTER is unset or none. The exporter reads
// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT and
// _COMPRESSION; the provider OTEL_TRACES_SAMPLER[_ARG] and the span
// limits; the resource OTEL_SERVICE_NAME (default mcpgate) and
// OTEL_RESOURCE_ATTRIBUTES. An endpoint on AWS X-Ray
// (https://xray.<region>.amazonaws.com/v1/traces) is sent SigV4-signed
// with the function's credentials.
func FromEnv(ctx context.Context) (*Tracing, error) {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))); v {
	case "", "none":
		return nil, nil
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: the gateway exports otlp or none", v)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			if v != "http/protobuf" {
				return nil, fmt.Errorf("%s=%q: the gateway exports http/protobuf only", k, v)
			}
			break
		}
	}
	var opts []otlptracehttp.Option
	if ep := endpoint(); ep != nil && xrayHost(ep.Hostname()) != "" {
		hc, err := sigv4Client(ctx, xrayHost(ep.Hostname()))
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithHTTPClient(hc))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", defaultService)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{tp: tp, tr: tp.Tracer(ScopeName)}, nil
}

// endpoint is the traces endpoint the environment names, nil if none.
func endpoint() *url.URL {
	raw := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if raw == "" {
		raw = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || raw == "" {
		return nil
	}
	return u
}

// xrayHost returns the region of an X-Ray OTLP endpoint's host, "" for
// any other host.
func xrayHost(host string) string {
	rest, ok := strings.CutPrefix(host, "xray.")
	if !ok {
		return ""
	}
	region, ok := strings.CutSuffix(rest, ".amazonaws.com")
	if !ok || region == "" || strings.Contains(region, ".") {
		return ""
	}
	return region
}

// Flush exports the spans ended so far: under Lambda, before the
// invocation ends.
func (t *Tracing) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown flushes and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Request starts an agent request's SERVER span. Its parent is the
// agent's trace context: params._meta's first (the agent's own, end to
// end), else the HTTP headers'.
func (t *Tracing) Request(ctx context.Context, h http.Header, meta gateway.TraceMeta, r gateway.RequestStart) (context.Context, func(gateway.RequestEnd)) {
	parent := ctx
	if meta.Traceparent != "" {
		parent = t.prop.Extract(ctx, propagation.MapCarrier{"traceparent": meta.Traceparent, "tracestate": meta.Tracestate})
	}
	if !trace.SpanContextFromContext(parent).IsValid() {
		parent = t.prop.Extract(ctx, propagation.HeaderCarrier(h))
	}
	name := r.Method
	if name == "" {
		name = "mcp"
	}
	if r.Target != "" {
		name += " " + r.Target
	}
	// The request chose these before any was validated.
	attrs := []attribute.KeyValue{text(keyRequestID, r.GatewayID), text(keyRoute, r.Route)}
	if r.Method != "" {
		attrs = append(attrs, text(keyMethod, r.Method))
	}
	if r.Protocol != "" {
		attrs = append(attrs, text(keyProtocol, r.Protocol))
	}
	if r.RequestID != "" {
		attrs = append(attrs, text(keyRPCID, r.RequestID))
	}
	if r.Method == "tools/call" && r.Target != "" {
		attrs = append(attrs, text(keyTool, r.Target), keyOperation.String("execute_tool"))
	}
	ctx, span := t.tr.Start(parent, clip.Escape(name), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return ctx, func(e gateway.RequestEnd) {
		if e.ServerID != "" {
			span.SetAttributes(text(keyServerID, e.ServerID))
		}
		if e.Outcome != "" {
			span.SetAttributes(keyOutcome.String(e.Outcome))
		}
		if e.Status != 0 {
			span.SetAttributes(keyStatus.Int(e.Status))
		}
		endWith(span, e)
	}
}

// endWith ends a request's or a task's span with its error, if any.
func endWith(span trace.Span, e gateway.RequestEnd) {
	switch {
	case e.Code != "":
		span.SetAttributes(keyErrorType.String(string(e.Code)))
		span.SetStatus(codes.Error, string(e.Code))
	case e.Outcome == "tool_error":
		span.SetAttributes(keyErrorType.String("tool_error"))
		span.SetStatus(codes.Error, "tool_error")
	}
	span.End()
}

// Admission starts the span of a call's admission.
func (t *Tracing) Admission(ctx context.Context, c gateway.CallInfo) func(gateway.AdmissionEnd) {
	_, span := t.tr.Start(ctx, "admission "+c.ServerID, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(keyServerID.String(c.ServerID), keyTool.String(c.Tool), keyRequestID.String(c.RequestID)))
	return func(e gateway.AdmissionEnd) {
		switch {
		case e.Fault != nil:
			span.SetAttributes(keyAdmission.String("refused"), keyErrorType.String(string(e.Fault.Code)))
			if ra := e.Fault.RetryAfter; ra > 0 {
				span.SetAttributes(keyRetryAfter.Int64(ra.Milliseconds()))
			}
			span.SetStatus(codes.Error, string(e.Fault.Code))
		case e.Lease != nil:
			// Its place in the queue: how many callers were ahead of it
			// when it joined (0: none, or it never queued).
			span.SetAttributes(keyAdmission.String("granted"), keyWaitMs.Int64(e.Lease.Waited.Milliseconds()),
				keyQueuePos.Int(e.Lease.QueuedBehind), keyInFlight.Int(e.Lease.InFlight), keyLease.String(e.Lease.ID()))
		default:
			span.SetAttributes(keyAdmission.String("uncapped"))
		}
		span.End()
	}
}

// text is the attribute k with a value a request chose: escaped
// (clip.Escape), since a collector's UI or an operator's terminal shows it.
// The other spans' strings are the gateway's own or ids and names it
// validated (a server's id, a tool name validToolName accepted).
func text(k attribute.Key, v string) attribute.KeyValue { return k.String(clip.Escape(v)) }

// inExchange marks a context in a CLIENT span of an MCP request (a tool
// call's exchange, a request Send traces): its HTTP requests need no span
// of their own, and carry that one's trace context.
type inExchange struct{}

// Exchange starts the CLIENT span of a call sent upstream and puts its
// trace context in the call's params._meta.
func (t *Tracing) Exchange(ctx context.Context, c gateway.CallInfo, srv *registry.Server, meta mcp.Meta) (context.Context, gateway.ExchangeSpan) {
	attrs := []attribute.KeyValue{keyMethod.String("tools/call"), keyTool.String(c.Tool), keyOperation.String("execute_tool"),
		keyServerID.String(c.ServerID), keyRequestID.String(c.RequestID), keyTransport.String(string(srv.Transport))}
	attrs = append(attrs, addressOf(srv.URL)...)
	ctx, span := t.tr.Start(ctx, "tools/call "+c.Tool, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	t.inject(ctx, meta)
	return context.WithValue(ctx, inExchange{}, true), &exchangeSpan{t: t, span: span, c: c}
}

// Send starts the CLIENT span of an MCP request sent upstream outside a
// tool call, named after its method, and puts its trace context in the
// request's params._meta (meta).
func (t *Tracing) Send(ctx context.Context, method string, srv *registry.Server, meta mcp.Meta) (context.Context, func(error)) {
	attrs := []attribute.KeyValue{keyMethod.String(method), keyServerID.String(srv.ID), keyTransport.String(string(srv.Transport))}
	attrs = append(attrs, addressOf(srv.URL)...)
	ctx, span := t.tr.Start(ctx, method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	t.inject(ctx, meta)
	return context.WithValue(ctx, inExchange{}, true), func(err error) {
		if err != nil {
			code := errorType(err)
			var re *jsonrpc.Error
			if errors.As(err, &re) {
				// The MCP conventions' error.type of a JSON-RPC error: its code.
				code = strconv.FormatInt(re.Code, 10)
			}
			span.SetAttributes(keyErrorType.String(code))
			span.SetStatus(codes.Error, code)
		}
		span.End()
	}
}

// maxTracestate bounds the tracestate a task's record may bring back: the
// record's own bound (tasks.MaxTracestateBytes).
const maxTracestate = 512

// Current is the trace context of ctx's span, empty when it has none.
func (t *Tracing) Current(ctx context.Context) gateway.TraceMeta {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return gateway.TraceMeta{}
	}
	carrier := propagation.MapCarrier{}
	t.prop.Inject(ctx, carrier)
	m := gateway.TraceMeta{Traceparent: carrier["traceparent"], Tracestate: carrier["tracestate"]}
	if len(m.Tracestate) > maxTracestate {
		m.Tracestate = ""
	}
	return m
}

// Task starts the span of a task's run: a new trace's root, linked to the
// span that created the task. The link comes from a stored record: it is
// parsed as W3C trace context (a traceparent that is not one, or a
// tracestate over its bound, is no link; a tracestate that does not parse
// is dropped).
func (t *Tracing) Task(ctx context.Context, link gateway.TraceMeta, c gateway.CallInfo) (context.Context, func(gateway.RequestEnd)) {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(keyMethod.String("tools/call"), text(keyTool, c.Tool), keyOperation.String("execute_tool"),
			text(keyServerID, c.ServerID), text(keyRequestID, c.RequestID))}
	if sc, ok := linkOf(link); ok {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := t.tr.Start(ctx, clip.Escape("task tools/call "+c.Tool), opts...)
	return ctx, func(e gateway.RequestEnd) {
		if e.Outcome != "" {
			span.SetAttributes(keyOutcome.String(e.Outcome))
		}
		endWith(span, e)
	}
}

// linkOf is the span context a task's record names, if it is valid W3C
// trace context within its bounds.
func linkOf(m gateway.TraceMeta) (trace.SpanContext, bool) {
	if m.Traceparent == "" || len(m.Traceparent) > 128 || len(m.Tracestate) > maxTracestate {
		return trace.SpanContext{}, false
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": m.Traceparent, "tracestate": m.Tracestate}))
	if !sc.IsValid() {
		return trace.SpanContext{}, false
	}
	return sc, true
}

// inject sets ctx's trace context in a request's params._meta.
func (t *Tracing) inject(ctx context.Context, meta mcp.Meta) {
	carrier := propagation.MapCarrier{}
	t.prop.Inject(ctx, carrier)
	for k, v := range carrier {
		meta[k] = v
	}
}

// addressOf is server.address and server.port of an upstream URL: never
// its path or query, which may hold a token.
func addressOf(raw string) []attribute.KeyValue {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil
	}
	out := []attribute.KeyValue{keyAddress.String(u.Hostname())}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if p, err := strconv.Atoi(port); err == nil {
		out = append(out, keyPort.Int(p))
	}
	return out
}

type exchangeSpan struct {
	t    *Tracing
	span trace.Span
	c    gateway.CallInfo
	// bg is the cut-off call's background wait; nil until then.
	bg trace.Span
}

func (x *exchangeSpan) Answered(f *fault.Error, isError bool) {
	switch {
	case f != nil:
		x.span.SetAttributes(keyErrorType.String(string(f.Code)))
		x.span.SetStatus(codes.Error, string(f.Code))
	case isError:
		x.span.SetAttributes(keyErrorType.String("tool_error"))
		x.span.SetStatus(codes.Error, "tool_error")
	}
	x.span.End()
}

func (x *exchangeSpan) CutOff(f *fault.Error, background bool) {
	code := string(fault.UpstreamTimeout)
	if f != nil {
		code = string(f.Code)
	}
	x.span.SetAttributes(keyErrorType.String(code), keyBackground.Bool(background))
	x.span.SetStatus(codes.Error, code)
	x.span.End()
	if !background {
		return
	}
	// The wait outlives the agent's request: its own trace, linked to the
	// call's CLIENT span (and so to the agent's trace).
	_, x.bg = x.t.tr.Start(context.Background(), "background wait tools/call "+x.c.Tool,
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithLinks(trace.Link{SpanContext: x.span.SpanContext()}),
		trace.WithAttributes(keyServerID.String(x.c.ServerID), keyTool.String(x.c.Tool), keyRequestID.String(x.c.RequestID)))
}

func (x *exchangeSpan) Closed(how upstream.Stop, held time.Duration) {
	if x.bg == nil {
		return
	}
	x.bg.SetAttributes(keyHeldMs.Int64(held.Milliseconds()))
	if how == "" {
		x.bg.SetAttributes(keyErrorType.String("not_stopped"))
		x.bg.SetStatus(codes.Error, "upstream not known to have stopped")
	} else {
		x.bg.SetAttributes(keyStoppedBy.String(string(how)))
	}
	x.bg.End()
}

// Start starts the CLIENT span of an upstream HTTP request outside a tool
// call's exchange (listing tools, initializing a session, relaying).
func (t *Tracing) Start(req *http.Request) (*http.Request, func(*http.Response, error)) {
	if req.Context().Value(inExchange{}) != nil {
		return req, func(*http.Response, error) {}
	}
	method := req.Header.Get("Mcp-Method")
	name := req.Method
	attrs := []attribute.KeyValue{keyHTTPMethod.String(req.Method)}
	if method != "" {
		name = method
		attrs = append(attrs, keyMethod.String(method))
	}
	attrs = append(attrs, addressOf(req.URL.Scheme+"://"+req.URL.Host)...)
	ctx, span := t.tr.Start(req.Context(), name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return req.WithContext(ctx), func(resp *http.Response, err error) {
		switch {
		case err != nil:
			span.SetAttributes(keyErrorType.String(errorType(err)))
			span.SetStatus(codes.Error, "request failed")
		default:
			span.SetAttributes(keyStatus.Int(resp.StatusCode))
			if resp.StatusCode >= 400 {
				span.SetAttributes(keyErrorType.String(strconv.Itoa(resp.StatusCode)))
				span.SetStatus(codes.Error, "")
			}
		}
		span.End()
	}
}

// errorType names an error by its kind, never its text (which may quote
// a URL).
func errorType(err error) string {
	var ne net.Error
	switch {
	case err == context.Canceled:
		return "canceled"
	case err == context.DeadlineExceeded:
		return "timeout"
	case asNetError(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "_OTHER"
}

// Inject sets ctx's trace context in h, replacing any there.
func (t *Tracing) Inject(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	h.Del("Traceparent")
	h.Del("Tracestate")
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}
