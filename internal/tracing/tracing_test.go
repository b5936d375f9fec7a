package tracing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/awssign"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// recorded is a Tracing whose spans end in an SDK span recorder.
func recorded(t *testing.T) (*Tracing, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &Tracing{tp: tp, tr: tp.Tracer(ScopeName)}, rec
}

// clearEnv unsets every variable tracing and the exporter read.
func clearEnv(t *testing.T) {
	for _, k := range append(EnvVars, "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_BSP_SCHEDULE_DELAY") {
		t.Setenv(k, "")
	}
}

func TestFromEnvOff(t *testing.T) {
	for _, v := range []string{"", "none", " None "} {
		clearEnv(t)
		t.Setenv("OTEL_TRACES_EXPORTER", v)
		tr, err := FromEnv(context.Background())
		if err != nil || tr != nil {
			t.Errorf("OTEL_TRACES_EXPORTER=%q: %v, %v; want off (nil, nil)", v, tr, err)
		}
		// Off is a nil *Tracing, whose Flush and Shutdown do nothing.
		if err := tr.Flush(context.Background()); err != nil {
			t.Errorf("Flush of nil: %v", err)
		}
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown of nil: %v", err)
		}
	}
}

func TestFromEnvRefused(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, `OTEL_TRACES_EXPORTER="jaeger": the gateway exports otlp or none`},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, "otlp or none"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": the gateway exports http/protobuf only`},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json"`},
	} {
		clearEnv(t)
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		tr, err := FromEnv(context.Background())
		if err == nil || tr != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, %v; want an error saying %q", c.env, tr, err, c.want)
		}
	}
}

// TestFromEnvOTLP: with otlp and an endpoint, spans are exported over
// OTLP/HTTP protobuf to it, the traces-specific protocol winning.
func TestFromEnvOTLP(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	clearEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc") // the traces one wins
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k1")
	t.Setenv("OTEL_SERVICE_NAME", "svc-under-test")
	tr, err := FromEnv(context.Background())
	if err != nil || tr == nil {
		t.Fatalf("FromEnv: %v, %v", tr, err)
	}
	_, end := tr.Request(context.Background(), http.Header{}, gateway.TraceMeta{}, gateway.RequestStart{Method: "tools/list", Route: "/mcp"})
	end(gateway.RequestEnd{Outcome: "ok", Status: 200})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("nothing exported")
	}
	r := got[0]
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("X-Collector-Key") != "k1" {
		t.Errorf("export: %s %s, Content-Type %q, key %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("X-Collector-Key"))
	}
	if !bytes.Contains(bodies[0], []byte("svc-under-test")) || !bytes.Contains(bodies[0], []byte("tools/list")) {
		t.Errorf("exported body lacks the service name or the span's name")
	}
}

func TestXrayHost(t *testing.T) {
	for host, want := range map[string]string{
		"xray.eu-west-1.amazonaws.com": "eu-west-1",
		"xray.amazonaws.com":           "",
		"xray.eu-west-1.example.com":   "",
		"otel.eu-west-1.amazonaws.com": "",
		"xray.a.b.amazonaws.com":       "",
	} {
		if got := xrayHost(host); got != want {
			t.Errorf("xrayHost(%q) = %q, want %q", host, got, want)
		}
	}
}

const (
	agentHeader = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	agentMeta   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// TestIncomingContext: the SERVER span's parent is params._meta's
// traceparent, else the headers'; an invalid value is ignored.
func TestIncomingContext(t *testing.T) {
	for _, c := range []struct {
		name   string
		header string
		meta   string
		parent string // traceparent of the parent, "" for a root
	}{
		{"headers only", agentHeader, "", agentHeader},
		{"meta only", "", agentMeta, agentMeta},
		{"meta wins", agentHeader, agentMeta, agentMeta},
		{"invalid meta: headers", agentHeader, "00-not-a-trace-01", agentHeader},
		{"zero meta trace id: headers", agentHeader, "00-00000000000000000000000000000000-00f067aa0ba902b7-01", agentHeader},
		{"invalid header, no meta: root", "garbage", "", ""},
		{"both invalid: root", "00-xyz", "ff-" + agentMeta[3:], ""},
		{"none: root", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, rec := recorded(t)
			h := http.Header{}
			if c.header != "" {
				h.Set("Traceparent", c.header)
				h.Set("Tracestate", "from=header")
			}
			_, end := tr.Request(context.Background(), h, gateway.TraceMeta{Traceparent: c.meta, Tracestate: "from=meta"}, gateway.RequestStart{Method: "tools/call", Target: "s-t"})
			end(gateway.RequestEnd{})
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans", len(spans))
			}
			s := spans[0]
			if s.SpanKind() != trace.SpanKindServer || s.Name() != "tools/call s-t" {
				t.Errorf("span %q kind %v", s.Name(), s.SpanKind())
			}
			p := s.Parent()
			if c.parent == "" {
				if p.IsValid() {
					t.Errorf("parent %v, want a root", p)
				}
				return
			}
			parts := strings.Split(c.parent, "-")
			if p.TraceID().String() != parts[1] || p.SpanID().String() != parts[2] || !p.IsRemote() {
				t.Errorf("parent %s/%s, want %s", p.TraceID(), p.SpanID(), c.parent)
			}
			if s.SpanContext().TraceID() != p.TraceID() {
				t.Errorf("span in trace %s, not its parent's", s.SpanContext().TraceID())
			}
			wantState := map[string]string{agentHeader: "from=header", agentMeta: "from=meta"}[c.parent]
			if got := p.TraceState().String(); got != wantState {
				t.Errorf("parent's tracestate %q, want %q (from the same place as its traceparent)", got, wantState)
			}
		})
	}
}

// TestInject: the gateway's trace context replaces the agent's that
// forward_headers copied; without a span nothing is set.
func TestInject(t *testing.T) {
	tr, _ := recorded(t)
	ctx, span := tr.tr.Start(context.Background(), "x")
	defer span.End()
	h := http.Header{}
	h.Set("Traceparent", agentHeader)
	h.Add("traceparent", agentMeta)
	h.Set("Tracestate", "agent=1")
	h.Set("X-Other", "kept")
	tr.Inject(ctx, h)
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if got := h.Values("Traceparent"); len(got) != 1 || got[0] != want {
		t.Errorf("traceparent %q, want only %q", got, want)
	}
	if got := h.Values("Tracestate"); len(got) != 0 {
		t.Errorf("tracestate %q: the agent's, kept", got)
	}
	if h.Get("X-Other") != "kept" {
		t.Error("another header was removed")
	}

	h = http.Header{}
	tr.Inject(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("no span, yet headers set: %v", h)
	}
}

// TestSendMeta: a relayed request's CLIENT span is named in its _meta, the
// HTTP request sent within it makes no span of its own and carries the
// same context, and a JSON-RPC error's code is its error.type.
func TestSendMeta(t *testing.T) {
	tr, rec := recorded(t)
	pctx, parent := tr.tr.Start(context.Background(), "server")
	srv := &registry.Server{ID: "s1", URL: "https://up.example:8443/mcp", Transport: "http"}
	meta := mcp.Meta{"progressToken": "p"}
	ctx, end := tr.Send(pctx, "prompts/get", srv, meta)
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
	req2, hend := tr.Start(req)
	tr.Inject(req2.Context(), req2.Header)
	hend(&http.Response{StatusCode: 200}, nil)
	end(&jsonrpc.Error{Code: -32602, Message: "bad"})
	parent.End()
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the CLIENT span and its parent only", len(spans))
	}
	cl := spans[0]
	want := "00-" + cl.SpanContext().TraceID().String() + "-" + cl.SpanContext().SpanID().String() + "-01"
	if meta["traceparent"] != want || meta["progressToken"] != "p" {
		t.Errorf("_meta %v, want traceparent %s beside the caller's keys", meta, want)
	}
	if got := req2.Header.Get("Traceparent"); got != want {
		t.Errorf("header traceparent %q, want %q", got, want)
	}
	if cl.Name() != "prompts/get" || cl.SpanKind() != trace.SpanKindClient || cl.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %q kind %v parent %v", cl.Name(), cl.SpanKind(), cl.Parent().SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range cl.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range map[string]string{"mcp.method.name": "prompts/get", "mcpgate.server_id": "s1", "server.address": "up.example", "server.port": "8443", "error.type": "-32602"} {
		if attrs[k] != v {
			t.Errorf("%s = %q, want %q", k, attrs[k], v)
		}
	}
}

// TestAdmissionSpan: a granted admission's span, the SERVER span's child,
// carries the wait and the queue position beside it; a call that took no
// place says so.
func TestAdmissionSpan(t *testing.T) {
	tr, rec := recorded(t)
	ctx, endReq := tr.Request(context.Background(), http.Header{}, gateway.TraceMeta{}, gateway.RequestStart{Method: "tools/call", Target: "work"})
	c := gateway.CallInfo{RequestID: "gw1", ServerID: "s1", Tool: "work"}
	tr.Admission(ctx, c)(gateway.AdmissionEnd{Lease: &lease.Lease{Waited: 1500 * time.Millisecond, QueuedBehind: 3, InFlight: 2}})
	tr.Admission(ctx, c)(gateway.AdmissionEnd{})
	endReq(gateway.RequestEnd{})
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	for i, want := range []map[string]string{
		{"mcpgate.admission": "granted", "mcpgate.queue.wait_ms": "1500", "mcpgate.queue.position": "3", "mcpgate.in_flight": "2", "mcpgate.server_id": "s1"},
		{"mcpgate.admission": "uncapped", "mcpgate.queue.position": "", "mcpgate.queue.wait_ms": ""},
	} {
		s := spans[i]
		if s.Name() != "admission s1" || s.Parent().SpanID() != spans[2].SpanContext().SpanID() {
			t.Errorf("span %q, parent %v: want admission s1, the SERVER span's child", s.Name(), s.Parent().SpanID())
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		for k, v := range want {
			if attrs[k] != v {
				t.Errorf("%s: %s = %q, want %q", want["mcpgate.admission"], k, attrs[k], v)
			}
		}
	}
}

// TestNoSecretsInSpans: every kind of span, made from inputs full of
// secrets, carries none of them.
func TestNoSecretsInSpans(t *testing.T) {
	const secret = "SECRET-c0ffee"
	tr, rec := recorded(t)
	h := http.Header{}
	h.Set("Authorization", "Bearer "+secret)
	h.Set("X-Api-Key", secret)
	h.Set("Traceparent", agentHeader)
	h.Set("Baggage", "user="+secret)
	ctx, endReq := tr.Request(context.Background(), h, gateway.TraceMeta{}, gateway.RequestStart{
		Method: "tools/call", Target: "s1-work", Protocol: "2025-11-25", RequestID: "7", Route: "/mcp", GatewayID: "gw1"})
	srv := &registry.Server{ID: "s1", URL: "https://user:" + secret + "@up.example/mcp/" + secret + "?token=" + secret, Transport: "http",
		StaticHeaders: map[string]string{"X-Key": secret}}
	c := gateway.CallInfo{RequestID: "gw1", ServerID: "s1", Tool: "work"}
	endAdm := tr.Admission(ctx, c)
	endAdm(gateway.AdmissionEnd{Fault: fault.New(fault.AtCapacity, "busy %s", secret).WithRetryAfter(time.Second)})
	endAdm2 := tr.Admission(ctx, c)
	endAdm2(gateway.AdmissionEnd{})
	meta := mcp.Meta{"arguments": secret}
	xctx, x := tr.Exchange(ctx, c, srv, meta)
	_ = xctx
	x.CutOff(fault.New(fault.UpstreamTimeout, "late %s", secret), true)
	x.Closed(upstream.Stop(""), 3*time.Second)
	sctx, endSend := tr.Send(ctx, "resources/read", srv, mcp.Meta{})
	_ = sctx
	endSend(errors.New("dial " + srv.URL + ": refused"))
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"arguments":{"k":"`+secret+`"}}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Mcp-Method", "initialize")
	_, endHTTP := tr.Start(req)
	endHTTP(nil, errors.New("post "+srv.URL+": "+secret))
	endReq(gateway.RequestEnd{ServerID: "s1", Tool: "work", Outcome: "error", Code: fault.UpstreamTimeout, Status: 504})

	spans := rec.Ended()
	if len(spans) < 7 {
		t.Fatalf("%d spans, want 7", len(spans))
	}
	for _, s := range spans {
		var all []string
		all = append(all, s.Name(), s.Status().Description)
		for _, kv := range s.Attributes() {
			all = append(all, string(kv.Key), kv.Value.String())
		}
		for _, e := range s.Events() {
			all = append(all, e.Name)
			for _, kv := range e.Attributes {
				all = append(all, kv.Value.String())
			}
		}
		for _, l := range s.Links() {
			for _, kv := range l.Attributes {
				all = append(all, kv.Value.String())
			}
		}
		for _, v := range all {
			if strings.Contains(v, secret) || strings.Contains(v, "Bearer") || strings.Contains(v, "token=") {
				t.Errorf("span %q carries %q", s.Name(), v)
			}
		}
	}
}

// TestRequestSpanEscapesWhatTheRequestChose: the method, tool, server,
// protocol and JSON-RPC id a request chose are recorded escaped, in the
// span's name and its attributes.
func TestRequestSpanEscapesWhatTheRequestChose(t *testing.T) {
	tr, rec := recorded(t)
	const bad = "\x1b]0;pwn\x07\u202eKO\u009b2J\x7f\n"
	_, end := tr.Request(context.Background(), http.Header{}, gateway.TraceMeta{}, gateway.RequestStart{
		Method: "tools/call", Target: "demo-" + bad, Protocol: bad, RequestID: bad, Route: "/mcp", GatewayID: "gw1"})
	end(gateway.RequestEnd{ServerID: "demo" + bad, Tool: bad, Outcome: "error", Code: fault.BadRequest, Status: 400})
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	all := []string{s.Name()}
	for _, kv := range s.Attributes() {
		all = append(all, kv.Value.String())
	}
	for _, v := range all {
		if strings.ContainsFunc(v, clip.IsEscaped) {
			t.Errorf("span %q records %q unescaped", s.Name(), v)
		}
	}
	if want := "tools/call demo-" + clip.Escape(bad); s.Name() != want {
		t.Errorf("span name %q, want %q", s.Name(), want)
	}
}

// TestSigV4Transport: a request to X-Ray's endpoint is signed for the
// xray service in its region, and its body still arrives whole.
func TestSigV4Transport(t *testing.T) {
	var gotAuth, gotDate, gotHash string
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotDate, gotHash = r.Header.Get("Authorization"), r.Header.Get("X-Amz-Date"), r.Header.Get("X-Amz-Security-Token")
		gotBody, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret-key", SessionToken: "session-token"}, nil
	})
	hc := &http.Client{Transport: &awssign.Transport{Signer: awssign.New(creds, "xray", "eu-west-1")}}
	body := bytes.Repeat([]byte("spans\x00\x01"), 1000)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/traces", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	shape := regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/\d{8}/eu-west-1/xray/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$`)
	m := shape.FindStringSubmatch(gotAuth)
	if m == nil {
		t.Fatalf("Authorization %q, not a SigV4 signature for xray in eu-west-1", gotAuth)
	}
	for _, hdr := range []string{"host", "x-amz-date", "content-type"} {
		if !strings.Contains(";"+m[1]+";", ";"+hdr+";") {
			t.Errorf("signed headers %q lack %s", m[1], hdr)
		}
	}
	if gotDate == "" || gotHash != "session-token" {
		t.Errorf("X-Amz-Date %q, X-Amz-Security-Token %q", gotDate, gotHash)
	}
	if !bytes.Equal(gotBody, body) {
		t.Errorf("body: %d bytes arrived, want %d", len(gotBody), len(body))
	}

	// Credentials that fail: the request fails, unsent.
	hc = &http.Client{Transport: &awssign.Transport{Signer: awssign.New(
		aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return aws.Credentials{}, errors.New("no role") }),
		"xray", "eu-west-1")}}
	gotAuth = ""
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/v1/traces", bytes.NewReader(body))
	if _, err := hc.Do(req); err == nil || gotAuth != "" {
		t.Errorf("failing credentials: err %v, request sent %v", err, gotAuth != "")
	}
}

// TestTaskSpanLinksToItsCreator: the trace context Current gives of the
// request that created a task, brought back from the task's record, makes
// the worker's span a new trace's root linked to that request's span; a
// stored context that is not W3C trace context, or over its bounds, makes
// no link.
func TestTaskSpanLinksToItsCreator(t *testing.T) {
	tr, rec := recorded(t)
	const agent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := http.Header{}
	h.Set("Traceparent", agent)
	h.Set("Tracestate", "agent=1")
	ctx, end := tr.Request(context.Background(), h, gateway.TraceMeta{}, gateway.RequestStart{Method: "tools/call", Target: "slow"})
	creating := trace.SpanContextFromContext(ctx)
	stored := tr.Current(ctx)
	end(gateway.RequestEnd{Outcome: "ok"})
	if want := "00-" + creating.TraceID().String() + "-" + creating.SpanID().String() + "-01"; stored.Traceparent != want || stored.Tracestate != "agent=1" {
		t.Fatalf("Current = %+v, want traceparent %s and the agent's tracestate", stored, want)
	}
	if got := tr.Current(context.Background()); got != (gateway.TraceMeta{}) {
		t.Errorf("Current of a context without a span = %+v, want empty", got)
	}
	// The worker runs elsewhere: its context knows nothing of the request.
	wctx, wend := tr.Task(context.Background(), stored, gateway.CallInfo{RequestID: "task-x", ServerID: "s", Tool: "slow"})
	_, cl := tr.Exchange(wctx, gateway.CallInfo{RequestID: "task-x", ServerID: "s", Tool: "slow"}, &registry.Server{ID: "s", URL: "http://127.0.0.1:1/mcp"}, mcp.Meta{})
	cl.Answered(nil, false)
	wend(gateway.RequestEnd{Outcome: "ok"})
	var worker, exchange sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch {
		case s.Name() == "task tools/call slow":
			worker = s
		case s.SpanKind() == trace.SpanKindClient:
			exchange = s
		}
	}
	if worker == nil || exchange == nil {
		t.Fatalf("spans ended: %d, no worker or exchange span", len(rec.Ended()))
	}
	if worker.Parent().IsValid() || worker.SpanContext().TraceID() == creating.TraceID() {
		t.Errorf("worker span: parent %v, trace %v; want a new root", worker.Parent(), worker.SpanContext().TraceID())
	}
	links := worker.Links()
	if len(links) != 1 || links[0].SpanContext.TraceID() != creating.TraceID() || links[0].SpanContext.SpanID() != creating.SpanID() {
		t.Errorf("worker span's links %+v, want one to the creating span %v/%v", links, creating.TraceID(), creating.SpanID())
	}
	if exchange.Parent().SpanID() != worker.SpanContext().SpanID() {
		t.Errorf("the run's exchange is not the worker span's child")
	}
	for _, bad := range []gateway.TraceMeta{
		{},
		{Traceparent: "not trace context"},
		{Traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{Traceparent: stored.Traceparent, Tracestate: strings.Repeat("v", maxTracestate+1)},
		{Traceparent: stored.Traceparent + strings.Repeat("0", 128)},
	} {
		rec.Reset()
		_, end := tr.Task(context.Background(), bad, gateway.CallInfo{ServerID: "s", Tool: "slow"})
		end(gateway.RequestEnd{})
		if s := rec.Ended(); len(s) != 1 || len(s[0].Links()) != 0 || s[0].Parent().IsValid() {
			t.Errorf("link %+v: spans %d, want one root span with no link", bad, len(s))
		}
	}
}

// TestTaskLinkFromHostileHeaders: what a task's record keeps of the
// request that made it comes from the gateway's own span, whatever the
// agent sent: a malformed traceparent gives a new trace (a valid
// traceparent of the gateway's), a tracestate of 32 long members is not
// kept past the record's bound, and a traceparent of megabytes is not
// kept at all.
func TestTaskLinkFromHostileHeaders(t *testing.T) {
	tr, _ := recorded(t)
	var members []string
	for i := range 32 {
		members = append(members, fmt.Sprintf("k%d=%s", i, strings.Repeat("v", 200)))
	}
	for _, h := range []http.Header{
		{"Traceparent": {"00-" + strings.Repeat("f", 1<<20)}},
		{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "Tracestate": {strings.Join(members, ",")}},
		{"Traceparent": {"zz-\x00\xff"}, "Tracestate": {strings.Repeat("=", 1<<16)}},
	} {
		ctx, end := tr.Request(context.Background(), h, gateway.TraceMeta{}, gateway.RequestStart{Method: "tools/call", Target: "slow"})
		m := tr.Current(ctx)
		end(gateway.RequestEnd{Outcome: "ok"})
		sc := trace.SpanContextFromContext(ctx)
		if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; m.Traceparent != want || len(m.Tracestate) > maxTracestate {
			t.Errorf("Current after headers of %d bytes = traceparent %.80q, tracestate of %d bytes; want the gateway's span %s and at most %d bytes",
				len(h.Get("Traceparent"))+len(h.Get("Tracestate")), m.Traceparent, len(m.Tracestate), want, maxTracestate)
		}
	}
}
