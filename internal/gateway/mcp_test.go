package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// bearer adds the Authorization header to every request.
type bearer struct {
	key  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.base.RoundTrip(r)
}

// connect opens an SDK client session to the gateway's MCP endpoint path.
func (h *harness) connect(path, key, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	h.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, opts)
	t := &mcp.StreamableClientTransport{
		Endpoint:             h.url + path,
		HTTPClient:           &http.Client{Transport: bearer{key: key, base: http.DefaultTransport}},
		DisableStandaloneSSE: true,
	}
	cs, err := c.Connect(context.Background(), t, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		h.t.Fatalf("connect %s (%s): %v", path, version, err)
	}
	h.t.Cleanup(func() { cs.Close() })
	return cs
}

var protocolVersions = []string{"2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

func toolNames(tools []*mcp.Tool) []string {
	var names []string
	for _, t := range tools {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

func firstText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) == 0 {
		t.Fatalf("empty content: %+v", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T, want text", res.Content[0])
	}
	return tc.Text
}

func TestMCPAggregated(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "second", "url": h.demo.URL})
	for _, v := range protocolVersions {
		t.Run(v, func(t *testing.T) {
			h := &harness{t: t, env: h.env, demo: h.demo, url: h.url, key: h.key, logs: h.logs}
			cs := h.connect("/mcp", h.key, v, nil)
			res, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"demo-echo", "demo-fail_tool", "demo-slow_tool", "second-echo", "second-fail_tool", "second-slow_tool"}
			if got := toolNames(res.Tools); !slices.Equal(got, want) {
				t.Errorf("tools = %v, want %v", got, want)
			}
			call, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "second-echo", Arguments: map[string]any{"text": "via " + v}})
			if err != nil {
				t.Fatal(err)
			}
			if got := firstText(t, call); got != "via "+v {
				t.Errorf("echo = %q", got)
			}
			if err := cs.Ping(context.Background(), nil); err != nil && v < "2026-07-28" {
				t.Errorf("ping: %v", err)
			}
		})
	}
}

func TestMCPAggregatedHonoursKeyScope(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "second", "url": h.demo.URL})
	limited := testkit.PutKey(t, h.env, "second")
	cs := h.connect("/mcp", limited, "", nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range toolNames(res.Tools) {
		if !strings.HasPrefix(name, "second-") {
			t.Errorf("limited key sees %s", name)
		}
	}
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "demo-echo", Arguments: map[string]any{"text": "x"}})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("call outside the key's scope: err = %v, want invalid params (unknown tool)", err)
	}
}

func TestMCPPassthrough(t *testing.T) {
	h := newHarness(t)
	for _, v := range protocolVersions {
		t.Run(v, func(t *testing.T) {
			h := &harness{t: t, env: h.env, demo: h.demo, url: h.url, key: h.key, logs: h.logs}
			cs := h.connect("/mcp/demo", h.key, v, nil)
			if init := cs.InitializeResult(); init == nil || init.ServerInfo == nil || init.ServerInfo.Name != "demo-upstream" {
				t.Errorf("initialize result = %+v, want the upstream's server info", init)
			}
			res, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := toolNames(res.Tools); !slices.Equal(got, []string{"echo", "fail_tool", "slow_tool"}) {
				t.Errorf("tools = %v", got)
			}
			call, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fail_tool"})
			if err != nil {
				t.Fatal(err)
			}
			if !call.IsError {
				t.Error("fail_tool's isError was lost")
			}
		})
	}
}

func TestMCPProtocolErrors(t *testing.T) {
	h := newHarness(t)
	cs := h.connect("/mcp", h.key, "", nil)
	for _, name := range []string{"nosuch-tool", "noseparator", "demo-no_such_tool"} {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name})
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("call %q: err = %v, want JSON-RPC invalid params", name, err)
		}
	}
}

func TestMCPCapacityIsAToolError(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "on_limit": "shed"})
	cs := h.connect("/mcp", h.key, "", nil)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "demo-slow_tool", Arguments: map[string]any{"ms": 30000, "gate": "g"}})
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.demo.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "demo-slow_tool", Arguments: map[string]any{"ms": 0}})
	if err != nil {
		t.Fatalf("shed call: protocol error %v, want an isError result", err)
	}
	if !res.IsError {
		t.Fatalf("shed call: %+v, want isError", res)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var body fault.Body
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Code != fault.AtCapacity || !body.Error.Retryable || body.Error.RetryAfterMS <= 0 {
		t.Errorf("structured content = %s, want AT_CAPACITY, retryable, retry_after_ms", b)
	}
	h.demo.OpenGate("g")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestMCPStreamsProgress(t *testing.T) {
	h := newHarness(t)
	started := make(chan string, 10)
	cs := h.connect("/mcp/demo", h.key, "2025-11-25", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if req.Params.ProgressToken == "tok-1" {
				started <- req.Params.Message
			}
		},
	})
	params := &mcp.CallToolParams{Name: "slow_tool", Arguments: map[string]any{"ms": 60000, "gate": "g"}}
	params.SetProgressToken("tok-1")
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), params)
		done <- err
	}()
	// The tool holds until the gate opens, and the gate opens only once
	// its first progress notification reached the agent: it was streamed
	// while the call ran.
	select {
	case msg := <-started:
		if msg != "started" {
			t.Errorf("first progress message %q, want started", msg)
		}
	case err := <-done:
		t.Fatalf("call ended before any progress reached the agent: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no progress within a minute")
	}
	h.demo.OpenGate("g")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestMCPHTTPLevel(t *testing.T) {
	h := newHarness(t)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	post := func(path, key, body string, hdr map[string]string) response {
		req, _ := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, header: resp.Header, body: b}
	}

	r := post("/mcp", "", init, nil)
	if r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("no key: %d %q, want 401 with WWW-Authenticate", r.status, r.header.Get("WWW-Authenticate"))
	}
	limited := testkit.PutKey(t, h.env, "other")
	if r := post("/mcp/demo", limited, init, nil); r.status != 403 {
		t.Errorf("key without access: %d, want 403", r.status)
	}
	if r := post("/mcp/nope", h.key, init, nil); r.status != 404 {
		t.Errorf("unknown server: %d, want 404", r.status)
	}
	r = post("/mcp", h.key, init, nil)
	if r.status != 200 || r.header.Get("Mcp-Session-Id") != "" {
		t.Errorf("initialize: %d, session %q; want 200 and no session", r.status, r.header.Get("Mcp-Session-Id"))
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("initialize answered with %q, want application/json", ct)
	}
	batch := `[` + init + `]`
	r = post("/mcp", h.key, batch, map[string]string{"MCP-Protocol-Version": "2025-11-25"})
	if r.status != 400 || !strings.Contains(string(r.body), "batch") {
		t.Errorf("batch on 2025-11-25: %d %s, want 400 naming batches", r.status, r.body)
	}
	r = post("/mcp", h.key, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{"MCP-Protocol-Version": "1999-01-01"})
	if r.status != 400 {
		t.Errorf("invalid protocol version: %d, want 400", r.status)
	}
	r = post("/mcp", h.key, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, map[string]string{"MCP-Protocol-Version": "2025-11-25"})
	if r.status != 202 {
		t.Errorf("notification: %d, want 202", r.status)
	}
	r = post("/mcp", h.key, `{"jsonrpc":"2.0","id":3,"method":"no/such/method"}`, map[string]string{"MCP-Protocol-Version": "2025-11-25"})
	if !strings.Contains(string(r.body), "-32601") {
		t.Errorf("unknown method: %d %s, want JSON-RPC -32601", r.status, r.body)
	}
	r = post("/mcp", h.key, `{"jsonrpc":"2.0","id":4,"method":`, nil)
	if !strings.Contains(string(r.body), "-32700") && r.status != 400 {
		t.Errorf("malformed JSON: %d %s, want a parse error", r.status, r.body)
	}
	big := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"demo-echo","arguments":{"text":"` + strings.Repeat("x", 5000) + `"}}}`
	if r := post("/mcp", h.key, big, map[string]string{"MCP-Protocol-Version": "2025-11-25"}); r.status != 413 {
		t.Errorf("huge params: %d, want 413", r.status)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		r := h.do(m, "/mcp", h.key, "", nil)
		if r.status != 405 {
			t.Errorf("%s /mcp: %d, want 405", m, r.status)
		}
	}
}

// Tool lists carry caching hints (SEP-2549): private on /mcp, whose list
// depends on the key; the upstream's scope on /mcp/{id}; and the time left
// before the gateway lists the upstream again, within its TTL.
func TestCachingHints(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ path, scope string }{
		{"/mcp", "private"},
		{"/mcp/demo", "public"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			cs := h.connect(tc.path, h.key, "2026-07-28", nil)
			res, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			max := int(upstream.DefaultToolsTTL.Milliseconds())
			if res.CacheScope != tc.scope || res.TTLMs <= 0 || res.TTLMs > max {
				t.Errorf("cacheScope %q, ttlMs %d; want %q and 0 < ttlMs <= %d", res.CacheScope, res.TTLMs, tc.scope, max)
			}
		})
	}
}
