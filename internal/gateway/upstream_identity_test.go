package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// guarded puts a guard that lets everything through in front of the
// harness's demo upstream, and returns it with the new upstream URLs.
func (h *harness) guarded(check func(*http.Request, []byte) bool) (*testkit.Guard, string, string) {
	h.t.Helper()
	g := testkit.NewGuard(h.demo.Handler(), check)
	srv := httptest.NewServer(g)
	h.t.Cleanup(srv.Close)
	return g, srv.URL + "/mcp", srv.URL + "/openapi.json"
}

func (h *harness) listREST(key, id string) []string {
	h.t.Helper()
	r := h.do(http.MethodGet, "/mcp-rest/tools/list?server_id="+id, key, "", nil)
	if r.status != http.StatusOK {
		h.t.Fatalf("list %s: %d %s", id, r.status, r.body)
	}
	var lr ListResponse
	if err := json.Unmarshal(r.body, &lr); err != nil {
		h.t.Fatal(err)
	}
	tools := make([]*mcp.Tool, len(lr.Tools))
	for i, t := range lr.Tools {
		tools[i] = t.Tool
	}
	return toolNames(tools)
}

func (h *harness) listMCP(path, key string) []string {
	h.t.Helper()
	res, err := h.connect(path, key, "2025-11-25", nil).ListTools(context.Background(), nil)
	if err != nil {
		h.t.Fatalf("tools/list %s: %v", path, err)
	}
	return toolNames(res.Tools)
}

// callMCP calls a tool over MCP and returns the JSON-RPC error, if any.
func (h *harness) callMCP(path, key, tool string) (*mcp.CallToolResult, *jsonrpc.Error) {
	h.t.Helper()
	res, err := h.connect(path, key, "2025-11-25", nil).CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return nil, rpcErr
	}
	if err != nil {
		h.t.Fatalf("tools/call %s %s: %v", path, tool, err)
	}
	return res, nil
}

// leaseItemExists reports whether any call ever took a slot of id.
func (h *harness) leaseItemExists(id string) bool {
	h.t.Helper()
	out, err := h.env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(h.env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: id}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return len(out.Item) > 0
}

// TestToolFilters: a tool the server's lists hide is absent from every
// tools list and answered exactly as an unknown tool, before any upstream
// request or slot.
func TestToolFilters(t *testing.T) {
	h := newHarness(t)
	g, url, specURL := h.guarded(func(*http.Request, []byte) bool { return true })
	h.server(map[string]any{"server_id": "filtered", "url": url, "max_concurrent_requests": 1,
		"allowed_tools": []any{"echo*", "slow_*", "fail_*"}, "disallowed_tools": []any{"slow_tool", "fail_?ool"}})
	h.server(map[string]any{"server_id": "filtered_api", "transport": "openapi", "spec_url": specURL, "max_concurrent_requests": 1,
		"disallowed_tools": []any{"slow_api", "fail_api"}})

	// Lists, on every route.
	if got := h.listREST(h.key, "filtered"); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("REST list = %v, want [echo]", got)
	}
	if got := h.listREST(h.key, "filtered_api"); !slices.Equal(got, []string{"echo_api"}) {
		t.Errorf("REST list of the OpenAPI server = %v, want [echo_api]", got)
	}
	if got := h.listMCP("/mcp/filtered", h.key); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("/mcp/filtered tools/list = %v, want [echo]", got)
	}
	all := h.listMCP("/mcp", h.key)
	for _, want := range []string{"filtered-echo", "filtered_api-echo_api", "demo-slow_tool"} {
		if !slices.Contains(all, want) {
			t.Errorf("/mcp tools/list %v lacks %s", all, want)
		}
	}
	for _, hidden := range []string{"filtered-slow_tool", "filtered-fail_tool", "filtered_api-slow_api", "filtered_api-fail_api"} {
		if slices.Contains(all, hidden) {
			t.Errorf("/mcp tools/list shows hidden %s", hidden)
		}
	}

	// Calls: as an unknown tool, with no upstream request and no slot.
	before := len(g.Seen())
	unknownREST := h.expectFault(h.call(h.key, `{"server_id":"filtered","name":"no_such_tool"}`), 404, fault.NotFound)
	for _, c := range []struct{ server, tool string }{{"filtered", "slow_tool"}, {"filtered", "fail_tool"}, {"filtered_api", "slow_api"}} {
		d := h.expectFault(h.call(h.key, `{"server_id":"`+c.server+`","name":"`+c.tool+`","arguments":{"ms":1}}`), 404, fault.NotFound)
		if want := strings.ReplaceAll(strings.ReplaceAll(unknownREST.Message, "no_such_tool", c.tool), `"filtered"`, `"`+c.server+`"`); d.Message != want {
			t.Errorf("REST call of hidden %s: %q, want the unknown-tool answer %q", c.tool, d.Message, want)
		}
	}
	_, unknownMCP := h.callMCP("/mcp/filtered", h.key, "no_such_tool")
	for _, c := range []struct{ path, tool, name string }{
		{"/mcp/filtered", "slow_tool", "slow_tool"}, {"/mcp", "filtered-fail_tool", "fail_tool"},
	} {
		_, rpcErr := h.callMCP(c.path, h.key, c.tool)
		if rpcErr == nil || rpcErr.Code != unknownMCP.Code || rpcErr.Message != strings.ReplaceAll(unknownMCP.Message, "no_such_tool", c.name) {
			t.Errorf("MCP call of hidden %s on %s: %v, want the unknown-tool answer %v", c.tool, c.path, rpcErr, unknownMCP)
		}
	}
	for _, s := range g.Seen()[before:] {
		if s.Method == http.MethodPost {
			t.Errorf("a call to a hidden tool reached the upstream: %s %s", s.Method, s.Path)
		}
	}
	if h.leaseItemExists("filtered") || h.leaseItemExists("filtered_api") {
		t.Error("a call to a hidden tool took a slot")
	}

	// The visible tool works.
	if r := h.call(h.key, `{"server_id":"filtered","name":"echo","arguments":{"text":"ok"}}`); r.status != http.StatusOK {
		t.Errorf("visible tool: %d %s", r.status, r.body)
	}
}

// TestKeyToolGrants: a key's tools grants narrow what it sees and calls.
func TestKeyToolGrants(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "other", "url": h.demo.URL, "disallowed_tools": []any{"fail_tool"}})
	key := testkit.PutKeyWithTools(t, h.env, []string{"*"}, []string{"demo/echo", "*/fail_*"})
	if got := h.listREST(key, "demo"); !slices.Equal(got, []string{"echo", "fail_tool"}) {
		t.Errorf("REST list demo = %v, want [echo fail_tool]", got)
	}
	// The server's own lists still apply: other hides fail_tool.
	if got := h.listREST(key, "other"); len(got) != 0 {
		t.Errorf("REST list other = %v, want none", got)
	}
	if got := h.listMCP("/mcp", key); !slices.Equal(got, []string{"demo-echo", "demo-fail_tool"}) {
		t.Errorf("/mcp tools/list = %v, want [demo-echo demo-fail_tool]", got)
	}
	if got := h.listMCP("/mcp/demo", key); !slices.Equal(got, []string{"echo", "fail_tool"}) {
		t.Errorf("/mcp/demo tools/list = %v", got)
	}
	h.expectFault(h.call(key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":1}}`), 404, fault.NotFound)
	if _, rpcErr := h.callMCP("/mcp", key, "demo-slow_tool"); rpcErr == nil || rpcErr.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("MCP call of an ungranted tool: %v, want invalid params", rpcErr)
	}
	if r := h.call(key, `{"server_id":"demo","name":"echo","arguments":{"text":"ok"}}`); r.status != http.StatusOK {
		t.Errorf("granted tool: %d %s", r.status, r.body)
	}
	// The full key still sees everything.
	if got := h.listREST(h.key, "demo"); len(got) != 3 {
		t.Errorf("a key without grants sees %v", got)
	}
}

// TestSessionsAreNotSharedAcrossKeys: with a stateful upstream, what one
// key's session remembers, another key can never recall.
func TestSessionsAreNotSharedAcrossKeys(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "stateful", "url": testkit.StartStateful(t)})
	alice, bob := testkit.PutKey(t, h.env, "stateful"), testkit.PutKey(t, h.env, "stateful")
	const private = "alice-private-token-123"
	recall := func(key string) string {
		r := h.call(key, `{"server_id":"stateful","name":"recall"}`)
		if r.status != http.StatusOK {
			t.Fatalf("recall: %d %s", r.status, r.body)
		}
		return string(r.body)
	}
	if r := h.call(alice, `{"server_id":"stateful","name":"remember","arguments":{"v":"`+private+`"}}`); r.status != http.StatusOK {
		t.Fatalf("remember: %d %s", r.status, r.body)
	}
	if got := recall(bob); strings.Contains(got, private) {
		t.Fatalf("bob recalled alice's value over REST: %s", got)
	}
	if res, rpcErr := h.callMCP("/mcp/stateful", bob, "recall"); rpcErr != nil || strings.Contains(firstText(t, res), private) {
		t.Fatalf("bob recalled alice's value over MCP: %v %v", res, rpcErr)
	}
	// Alice's own session keeps it: the state is hers, not lost.
	if got := recall(alice); !strings.Contains(got, private) {
		t.Errorf("alice did not recall her own value: %s", got)
	}
}

// TestAgentCredentialsNeverGoUpstream: the agent's Authorization, X-Api-Key
// and Cookie never reach the upstream, on any route; the server's own
// credential, static headers and forwarded headers do.
func TestAgentCredentialsNeverGoUpstream(t *testing.T) {
	h := newHarness(t)
	t.Setenv("UPSTREAM_TOKEN_FOR_TEST", "FAKESECRET-upstream")
	g, url, specURL := h.guarded(func(r *http.Request, _ []byte) bool {
		return r.Header.Get("Authorization") == "Bearer FAKESECRET-upstream"
	})
	identity := map[string]any{
		"auth":            map[string]any{"type": "bearer", "secret": "env:UPSTREAM_TOKEN_FOR_TEST"},
		"static_headers":  map[string]any{"X-Team": "platform"},
		"forward_headers": []any{"X-Tenant", "Traceparent"},
	}
	h.server(map[string]any{"server_id": "up", "url": url, "auth": identity["auth"], "static_headers": identity["static_headers"], "forward_headers": identity["forward_headers"]})
	h.server(map[string]any{"server_id": "up_api", "transport": "openapi", "spec_url": specURL, "auth": identity["auth"], "static_headers": identity["static_headers"], "forward_headers": identity["forward_headers"]})

	send := func(method, path, body string) {
		t.Helper()
		if status, b := testkit.AgentRequest(t, method, h.url+path, h.key, body, http.Header{"X-Tenant": {"acme"}}); status != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, status, b)
		}
	}
	send(http.MethodPost, "/mcp-rest/tools/call", `{"server_id":"up","name":"echo","arguments":{"text":"x"}}`)
	send(http.MethodPost, "/mcp-rest/tools/call", `{"server_id":"up_api","name":"echo_api","arguments":{"body":{"text":"x"}}}`)
	send(http.MethodGet, "/mcp-rest/tools/list?server_id=up", "")
	send(http.MethodPost, "/mcp/up", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
	send(http.MethodPost, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up_api-echo_api","arguments":{"body":{"text":"x"}}}}`)

	seen := g.Seen()
	if len(seen) < 5 {
		t.Fatalf("the upstream saw %d requests", len(seen))
	}
	if got := g.Carrying(h.key); len(got) > 0 {
		t.Errorf("the agent's key reached the upstream: %v", got)
	}
	calls := 0
	for _, s := range seen {
		if s.Refused {
			t.Errorf("the upstream refused %s %s", s.Method, s.Path)
		}
		if s.Method == http.MethodPost {
			calls++
			if s.Header.Get("X-Team") != "platform" || s.Header.Get("X-Tenant") != "acme" {
				t.Errorf("%s %s lacks the static or forwarded header: %v", s.Method, s.Path, s.Header)
			}
		}
	}
	if calls == 0 {
		t.Error("no POST reached the upstream")
	}
}

// TestCredentialFailureIsReported: a server whose secret cannot be read
// answers UPSTREAM_ERROR naming no value, and nothing is sent upstream.
func TestCredentialFailureIsReported(t *testing.T) {
	h := newHarness(t)
	g, url, _ := h.guarded(func(*http.Request, []byte) bool { return true })
	h.server(map[string]any{"server_id": "nocred", "url": url, "auth": map[string]any{"type": "bearer", "secret": "env:MCPGATE_TEST_UNSET_VARIABLE"}})
	d := h.expectFault(h.call(h.key, `{"server_id":"nocred","name":"echo","arguments":{"text":"x"}}`), 502, fault.UpstreamError)
	if !strings.Contains(d.Message, "credential") {
		t.Errorf("message %q does not say the credential failed", d.Message)
	}
	if n := len(g.Seen()); n != 0 {
		t.Errorf("%d requests reached the upstream without the credential", n)
	}
}

// TestForwardedHeaderValues: only the headers a server forwards are
// passed on, never a credential, one named by Connection, or a value that
// would break the upstream request.
func TestForwardedHeaderValues(t *testing.T) {
	srv := &registry.Server{ID: "s", ForwardHeaders: []string{"Authorization", "Traceparent", "X-Tenant", "X-Trace"}}
	c := &caller{principal: &auth.Principal{StateKey: "key:h"}, header: http.Header{
		"Authorization": {"Bearer agent-key"},
		"X-Tenant":      {"acme", "bad\x00value", strings.Repeat("x", maxForwardValue+1)},
		"Traceparent":   {"00-abc-def-01"},
		"X-Trace":       {"t"},
		"Connection":    {"keep-alive, X-Trace"},
		"X-Other":       {"not forwarded"},
	}}
	got := c.upstream(srv)
	want := http.Header{"X-Tenant": {"acme"}, "Traceparent": {"00-abc-def-01"}}
	if got.Principal != "key:h" || !reflect.DeepEqual(got.Header, want) {
		t.Errorf("caller = %+v, want principal h and headers %v", got, want)
	}
}
