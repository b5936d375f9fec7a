package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type harness struct {
	t    *testing.T
	env  *storetest.Env
	demo *testkit.Demo
	url  string
	key  string // may call every server
	logs *syncBuffer
	gw   *Gateway
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, Options{})
}

// newHarnessWith is newHarness with opts for the gateway (its logger,
// body limit and origins are the harness's).
func newHarnessWith(t *testing.T, opts Options) *harness {
	t.Helper()
	return newTracedHarness(t, opts, nil)
}

// newTracedHarness is newHarnessWith whose gateway makes its spans with tr
// (nil: tracing off).
func newTracedHarness(t *testing.T, opts Options, tr Tracer) *harness {
	t.Helper()
	return newHarnessDeps(t, opts, func(d *Deps, _ *storetest.Env) { d.Tracer = tr })
}

// newHarnessDeps is newHarnessWith whose gateway's deps extra completes
// (given the harness's store; its pool and limiter are the harness's).
func newHarnessDeps(t *testing.T, opts Options, extra func(*Deps, *storetest.Env)) *harness {
	t.Helper()
	env := storetest.NewEnv(t)
	demo := testkit.StartDemo(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Logger, opts.AllowedOrigins = log, []string{"https://console.example.com"}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 4096
	}
	pool := upstream.New(upstream.Options{AllowLocal: true, Logger: log, Secrets: secret.New(secret.Options{Getenv: os.Getenv})})
	t.Cleanup(pool.Close)
	deps := Deps{
		Auth:     auth.New(env.Client, env.Tables.Keys, auth.Options{}),
		Registry: registry.New(env.Client, env.Tables.Servers, registry.Options{CacheTTL: -1}),
		Limiter:  lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond}),
		Upstream: pool,
	}
	if extra != nil {
		extra(&deps, env)
	}
	g, err := New(deps, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		// Exchanges left open are closed before the upstream goes.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	h := &harness{t: t, env: env, demo: demo, url: srv.URL, logs: logs, gw: g}
	h.key = testkit.PutKey(t, env, "*")
	h.server(map[string]any{"server_id": "demo", "url": demo.URL})
	return h
}

// drain waits until every call cut off before its upstream answered has
// given its slot back.
func (h *harness) drain() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n := h.gw.Drain(ctx); n != 0 {
		h.t.Fatalf("%d exchanges still open after 30s", n)
	}
}

func (h *harness) server(doc map[string]any) {
	h.t.Helper()
	testkit.PutServer(h.t, h.env, doc)
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// fault reads the error detail of an answer in either shape: the REST
// body {"error": {...}}, or, on the MCP routes, a JSON-RPC error whose data
// is the detail.
func (r response) fault(t *testing.T) fault.Detail {
	t.Helper()
	var rpc struct {
		JSONRPC string `json:"jsonrpc"`
		Error   struct {
			Data fault.Detail `json:"data"`
		} `json:"error"`
	}
	if json.Unmarshal(r.body, &rpc) == nil && rpc.JSONRPC == "2.0" {
		return rpc.Error.Data
	}
	var b fault.Body
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return b.Error
}

func (h *harness) do(method, path, key, contentType string, body io.Reader) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (h *harness) call(key, body string) response {
	h.t.Helper()
	return h.do(http.MethodPost, "/mcp-rest/tools/call", key, "application/json", strings.NewReader(body))
}

func (h *harness) expectFault(r response, status int, code fault.Code) fault.Detail {
	h.t.Helper()
	if r.status != status {
		h.t.Fatalf("status = %d, want %d (body %s)", r.status, status, r.body)
	}
	d := r.fault(h.t)
	if d.Code != code {
		h.t.Fatalf("code = %s, want %s (message %q)", d.Code, code, d.Message)
	}
	if d.Retryable != code.Retryable() {
		h.t.Errorf("retryable = %v for %s", d.Retryable, code)
	}
	return d
}

func TestHealthNeedsNoKey(t *testing.T) {
	h := newHarness(t)
	r := h.do(http.MethodGet, "/health", "", "", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"ok"`) {
		t.Fatalf("health: %d %s", r.status, r.body)
	}
}

func TestCallEcho(t *testing.T) {
	h := newHarness(t)
	r := h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"hello"}}`)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var res struct {
		Content []struct{ Type, Text string }
		IsError bool
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 || res.Content[0].Text != "hello" || res.IsError {
		t.Errorf("result = %s", r.body)
	}
	if r.header.Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id")
	}
}

func TestToolErrorIsAResult(t *testing.T) {
	h := newHarness(t)
	r := h.call(h.key, `{"server_id":"demo","name":"fail_tool"}`)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"isError":true`) {
		t.Fatalf("fail_tool: %d %s, want 200 with isError", r.status, r.body)
	}
}

func TestList(t *testing.T) {
	h := newHarness(t)
	r := h.do(http.MethodGet, "/mcp-rest/tools/list?server_id=demo", h.key, "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var lr ListResponse
	if err := json.Unmarshal(r.body, &lr); err != nil {
		t.Fatal(err)
	}
	if lr.ServerID != "demo" || len(lr.Tools) != 3 || lr.Tools[0].ServerID != "demo" || lr.Tools[0].MCPInfo.ServerID != "demo" {
		t.Errorf("list = %s", r.body)
	}
	h.expectFault(h.do(http.MethodGet, "/mcp-rest/tools/list?server_id=nope", h.key, "", nil), 404, fault.NotFound)
}

func TestAuth(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "other", "url": h.demo.URL})
	limited := testkit.PutKey(t, h.env, "other")
	echo := `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`

	h.expectFault(h.call("", echo), 401, fault.Unauthorized)
	h.expectFault(h.call(auth.NewKey(), echo), 401, fault.Unauthorized)
	h.expectFault(h.call("short", echo), 401, fault.Unauthorized)
	h.expectFault(h.call(limited, echo), 403, fault.Forbidden)
	// A key without access learns nothing of which servers exist.
	h.expectFault(h.call(limited, `{"server_id":"nope","name":"echo"}`), 403, fault.Forbidden)
	if r := h.call(limited, `{"server_id":"other","name":"echo","arguments":{"text":"x"}}`); r.status != 200 {
		t.Errorf("limited key on its own server: %d %s", r.status, r.body)
	}
	for _, k := range []string{h.key, limited} {
		if strings.Contains(h.logs.String(), k) {
			t.Fatal("a key appears in the logs")
		}
	}
}

func TestBadInput(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name, contentType, body string
		status                  int
		code                    fault.Code
		mention                 string
	}{
		{"malformed", "application/json", `{"server_id":`, 400, fault.BadRequest, "truncated"},
		{"syntax", "application/json", `{"server_id" "demo"}`, 400, fault.BadRequest, "malformed"},
		{"empty", "application/json", ``, 400, fault.BadRequest, "empty"},
		{"array", "application/json", `[1,2]`, 400, fault.BadRequest, "object"},
		{"trailing", "application/json", `{"server_id":"demo","name":"echo"} {}`, 400, fault.BadRequest, "after"},
		{"unknown field", "application/json", `{"server_id":"demo","name":"echo","extra":1}`, 400, fault.BadRequest, "extra"},
		{"wrong type id", "application/json", `{"server_id":5,"name":"echo"}`, 400, fault.BadRequest, "server_id"},
		{"wrong type name", "application/json", `{"server_id":"demo","name":["echo"]}`, 400, fault.BadRequest, "name"},
		{"arguments not object", "application/json", `{"server_id":"demo","name":"echo","arguments":[1]}`, 400, fault.BadRequest, "arguments"},
		{"no server", "application/json", `{"name":"echo"}`, 400, fault.BadRequest, "server_id"},
		{"no name", "application/json", `{"server_id":"demo"}`, 400, fault.BadRequest, "name"},
		{"control char name", "application/json", `{"server_id":"demo","name":"ec\u0000ho"}`, 400, fault.BadRequest, "name"},
		{"content type", "text/plain", `{"server_id":"demo","name":"echo"}`, 400, fault.BadRequest, "Content-Type"},
		{"oversized", "application/json", `{"server_id":"demo","name":"echo","arguments":{"text":"` + strings.Repeat("x", 5000) + `"}}`, 413, fault.PayloadTooLarge, "larger"},
		{"unknown server", "application/json", `{"server_id":"nope","name":"echo"}`, 404, fault.NotFound, "nope"},
		{"bad server id", "application/json", `{"server_id":"../etc","name":"echo"}`, 404, fault.NotFound, "server"},
		{"unknown tool", "application/json", `{"server_id":"demo","name":"no_such_tool"}`, 404, fault.NotFound, "no_such_tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &harness{t: t, env: h.env, demo: h.demo, url: h.url, key: h.key, logs: h.logs}
			r := h.do(http.MethodPost, "/mcp-rest/tools/call", h.key, tt.contentType, strings.NewReader(tt.body))
			d := h.expectFault(r, tt.status, tt.code)
			if !strings.Contains(d.Message, tt.mention) {
				t.Errorf("message %q does not mention %q", d.Message, tt.mention)
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	h := newHarness(t)
	r := h.do(http.MethodGet, "/mcp-rest/tools/call", h.key, "", nil)
	h.expectFault(r, 405, fault.MethodNotAllowed)
	if r.header.Get("Allow") != "POST" {
		t.Errorf("Allow = %q, want POST", r.header.Get("Allow"))
	}
	h.expectFault(h.do(http.MethodGet, "/nowhere", h.key, "", nil), 404, fault.NotFound)
}

func TestMisconfiguredServer(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "broken", "url": h.demo.URL, "max_concurrent_requests": "two"})
	d := h.expectFault(h.call(h.key, `{"server_id":"broken","name":"echo"}`), 502, fault.Misconfigured)
	if strings.Contains(d.Message, "two") {
		t.Errorf("message leaks item detail: %q", d.Message)
	}
	if !strings.Contains(h.logs.String(), "max_concurrent_requests") {
		t.Error("the log does not name the bad attribute")
	}
}

func TestShedAnswersAtCapacity(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "on_limit": "shed"})
	held := make(chan response, 1)
	go func() {
		held <- h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":30000,"gate":"g"}}`)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.demo.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r := h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":0}}`)
	d := h.expectFault(r, 429, fault.AtCapacity)
	if r.header.Get("Retry-After") == "" || d.RetryAfterMS <= 0 {
		t.Errorf("no retry hint: header %q, body %+v", r.header.Get("Retry-After"), d)
	}
	h.demo.OpenGate("g")
	if r := <-held; r.status != 200 {
		t.Fatalf("held call: %d %s", r.status, r.body)
	}
	if n := testkit.LeaseCount(t, h.env, "demo", lease.LeasesAttr); n != 0 {
		t.Errorf("%d leases left", n)
	}
}

func TestQueueTimeout(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "queue_timeout": 0.3})
	held := make(chan response, 1)
	go func() {
		held <- h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":30000,"gate":"g"}}`)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.demo.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r := h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":0}}`)
	h.expectFault(r, 429, fault.QueueTimeout)
	if r.header.Get("Retry-After") == "" {
		t.Error("QUEUE_TIMEOUT without Retry-After")
	}
	h.demo.OpenGate("g")
	<-held
}

func TestUpstreamTimeoutReleasesTheSlot(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "timeout": 0.3})
	h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":30000}}`), 504, fault.UpstreamTimeout)
	// The slot is given back once the upstream has stopped the call.
	h.drain()
	if n := testkit.LeaseCount(t, h.env, "demo", lease.LeasesAttr); n != 0 {
		t.Errorf("%d leases left after the timeout", n)
	}
	// The slot is free again.
	if r := h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`); r.status != 200 {
		t.Errorf("call after timeout: %d %s", r.status, r.body)
	}
}

func TestUpstreamUnavailable(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "gone", "url": "http://127.0.0.1:1/mcp"})
	h.expectFault(h.call(h.key, `{"server_id":"gone","name":"echo"}`), 502, fault.UpstreamError)
}

func TestStoreUnavailable(t *testing.T) {
	env := storetest.NewEnv(t)
	g, err := New(Deps{
		Auth:     auth.New(env.Client, "no-such-keys-table", auth.Options{}),
		Registry: registry.New(env.Client, env.Tables.Servers, registry.Options{}),
		Limiter:  lease.New(env.Client, env.Tables.Leases, lease.Options{}),
		Upstream: upstream.New(upstream.Options{AllowLocal: true}),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/mcp-rest/tools/call", strings.NewReader(`{"server_id":"demo","name":"echo"}`))
	req.Header.Set("Authorization", "Bearer "+auth.NewKey())
	g.Handler().ServeHTTP(rec, req)
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), string(fault.StoreUnavailable)) {
		t.Fatalf("got %d %s, want 503 STORE_UNAVAILABLE", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "no-such-keys-table") {
		t.Errorf("internal detail in the body: %s", rec.Body)
	}
}

func TestUncappedServerTakesNoLease(t *testing.T) {
	h := newHarness(t)
	for _, cap := range []any{nil, 0, -1} {
		doc := map[string]any{"server_id": "demo", "url": h.demo.URL}
		if cap != nil {
			doc["max_concurrent_requests"] = cap
		}
		h.server(doc)
		if r := h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`); r.status != 200 {
			t.Fatalf("cap %v: %d %s", cap, r.status, r.body)
		}
	}
	out, err := h.env.Client.Scan(context.Background(), scanInput(h.env.Tables.Leases))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 0 {
		t.Errorf("uncapped calls wrote %d lease items", len(out.Items))
	}
}

func scanInput(table string) *dynamodb.ScanInput {
	return &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)}
}

func TestOrigin(t *testing.T) {
	h := newHarness(t)
	body := `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`
	for origin, want := range map[string]int{
		"":                            200, // agents and CLIs send none
		"https://console.example.com": 200, // trusted
		"https://evil.example.net":    403,
		h.url:                         200, // same origin
	} {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/mcp-rest/tools/call", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+h.key)
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Origin %q: status %d, want %d", origin, resp.StatusCode, want)
		}
	}
}

func TestSSEUpstream(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "old", "url": h.demo.SSEURL, "transport": "sse", "max_concurrent_requests": 1})
	r := h.call(h.key, `{"server_id":"old","name":"echo","arguments":{"text":"over sse"}}`)
	if r.status != 200 || !strings.Contains(string(r.body), "over sse") {
		t.Fatalf("call over SSE: %d %s\n%s", r.status, r.body, h.logs)
	}
	cs := h.connect("/mcp/old", h.key, "", nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(res.Tools) != 3 {
		t.Fatalf("list over SSE: %v %+v", err, res)
	}
}

func TestOpenAPIServer(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "api", "transport": "openapi", "spec_url": h.demo.SpecURL, "max_concurrent_requests": 1,
		"breaker": map[string]any{"failure_threshold": 2, "recovery_timeout": 60}})
	r := h.do(http.MethodGet, "/mcp-rest/tools/list?server_id=api", h.key, "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"slow_api"`) || !strings.Contains(string(r.body), `"echo_api"`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if r := h.call(h.key, `{"server_id":"api","name":"echo_api","arguments":{"body":{"text":"via openapi"}}}`); r.status != 200 || !strings.Contains(string(r.body), "via openapi") {
		t.Errorf("echo_api: %d %s", r.status, r.body)
	}
	if r := h.call(h.key, `{"server_id":"api","name":"slow_api","arguments":{"ms":1}}`); r.status != 200 || !strings.Contains(string(r.body), "in_flight_at_entry") {
		t.Errorf("slow_api: %d %s", r.status, r.body)
	}
	h.expectFault(h.call(h.key, `{"server_id":"api","name":"echo_api","arguments":{"nope":1}}`), 400, fault.BadRequest)
	h.expectFault(h.call(h.key, `{"server_id":"api","name":"no_such_op"}`), 404, fault.NotFound)
	// 5xx answers are infrastructure failures: they open the breaker.
	for range 2 {
		h.expectFault(h.call(h.key, `{"server_id":"api","name":"fail_api"}`), 502, fault.UpstreamError)
	}
	h.expectFault(h.call(h.key, `{"server_id":"api","name":"fail_api"}`), 503, fault.CircuitOpen)
	// Through MCP, aggregated and passthrough.
	cs := h.connect("/mcp/api", h.key, "", nil)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo_api", Arguments: map[string]any{"body": map[string]any{"text": "mcp"}}})
	if err != nil || res.IsError {
		t.Fatalf("MCP call: %v %+v", err, res)
	}
	if _, err := cs.ListResources(context.Background(), nil); err == nil {
		t.Error("an OpenAPI server listed resources")
	}
	// A spec that cannot be used makes the server misconfigured.
	h.server(map[string]any{"server_id": "badspec", "transport": "openapi", "spec_url": h.demo.URL})
	h.expectFault(h.call(h.key, `{"server_id":"badspec","name":"x"}`), 502, fault.Misconfigured)
}
