package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestRESTParity: as in LiteLLM, GET /mcp-rest/tools/list without
// server_id lists the tools of every server the key may call, each with
// its server, and POST /mcp-rest/tools/call routes a prefixed name
// ("<server_id>-<tool>") without server_id. A server that cannot be
// listed, because its upstream is down or its item is invalid, is in
// "unavailable" with the fault a call to it gets, and hides no other.
func TestRESTParity(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "second", "url": h.demo.URL, "description": "the same demo, again"})
	h.server(map[string]any{"server_id": "gone", "url": "http://127.0.0.1:1/mcp"})
	// Written by hand, past the CLI's check: a URL without its scheme.
	h.server(map[string]any{"server_id": "broken", "url": "127.0.0.1:9201/mcp"})
	limited := testkit.PutKey(t, h.env, "demo")
	limitedBroken := testkit.PutKey(t, h.env, "demo", "broken")

	list := func(key string) ListResponse {
		t.Helper()
		r := h.do(http.MethodGet, "/mcp-rest/tools/list", key, "", nil)
		if r.status != http.StatusOK {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		var lr ListResponse
		if err := json.Unmarshal(r.body, &lr); err != nil {
			t.Fatal(err)
		}
		return lr
	}
	lr := list(h.key)
	var got []string
	for _, tl := range lr.Tools {
		if tl.MCPInfo.ServerID != tl.ServerID || tl.MCPInfo.ServerName != tl.ServerID || tl.Tool.InputSchema == nil {
			t.Errorf("tool %+v lacks its server or schema", tl)
		}
		got = append(got, tl.ServerID+"/"+tl.Tool.Name)
	}
	slices.Sort(got)
	want := []string{"demo/echo", "demo/fail_tool", "demo/slow_tool", "second/echo", "second/fail_tool", "second/slow_tool"}
	if !slices.Equal(got, want) {
		t.Errorf("all tools = %v, want %v", got, want)
	}
	if lr.ServerID != "" || len(lr.Unavailable) != 2 ||
		lr.Unavailable[0].ServerID != "broken" || lr.Unavailable[0].Error.Code != fault.Misconfigured ||
		lr.Unavailable[1].ServerID != "gone" || lr.Unavailable[1].Error.Code != fault.UpstreamError {
		t.Errorf("server_id %q, unavailable %+v; want broken's SERVER_MISCONFIGURED and gone's UPSTREAM_ERROR", lr.ServerID, lr.Unavailable)
	}
	// The reason is the one a call to the server gets; the log says what
	// is wrong with the item, for admins.
	callErr := h.expectFault(h.call(h.key, `{"server_id":"broken","name":"echo"}`), 502, fault.Misconfigured)
	if len(lr.Unavailable) == 0 || callErr != lr.Unavailable[0].Error {
		t.Errorf("a call to broken answers %+v; the listing says %+v", callErr, lr.Unavailable)
	}
	if logs := h.logs.String(); !strings.Contains(logs, `"server_id":"broken"`) || !strings.Contains(logs, "url: has no scheme") {
		t.Errorf("the log does not say what is wrong with broken:\n%s", logs)
	}
	// A key granted the server by name sees it the same way.
	if lr := list(limitedBroken); len(lr.Unavailable) != 1 || lr.Unavailable[0].ServerID != "broken" || lr.Unavailable[0].Error.Code != fault.Misconfigured {
		t.Errorf("key for demo and broken: unavailable %+v, want broken's SERVER_MISCONFIGURED", lr.Unavailable)
	}
	for _, tl := range list(limited).Tools {
		if tl.ServerID != "demo" {
			t.Errorf("a key for demo only lists %s/%s", tl.ServerID, tl.Tool.Name)
		}
	}

	r := h.call(h.key, `{"name":"second-echo","arguments":{"text":"routed"}}`)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "routed") {
		t.Errorf("prefixed call: %d %s", r.status, r.body)
	}
	h.expectFault(h.call(limited, `{"name":"second-echo","arguments":{"text":"x"}}`), 403, fault.Forbidden)
	h.expectFault(h.call(h.key, `{"name":"nope-echo"}`), 404, fault.NotFound)
	h.expectFault(h.call(h.key, `{"name":"echo"}`), 400, fault.BadRequest)
	h.expectFault(h.call(h.key, `{"name":"-echo"}`), 400, fault.BadRequest)
	// With server_id, the name is the upstream's own, as before.
	if r := h.call(h.key, `{"server_id":"second","name":"echo","arguments":{"text":"plain"}}`); r.status != http.StatusOK {
		t.Errorf("call with server_id: %d %s", r.status, r.body)
	}
}

// TestEveryRefusalIsLoggedWithItsReason: each refused request's log record
// carries its code and an error saying why, also when the refusal has no
// internal cause (a body the gateway will not read), so `mcpgate refusals`
// shows the reason beside the code.
func TestEveryRefusalIsLoggedWithItsReason(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "broken", "url": "localhost:9201"})
	json := "application/json"
	tests := []struct {
		name   string
		do     func() response
		code   fault.Code
		reason string
	}{
		{"unknown field", func() response { return h.call(h.key, `{"server_id":"demo","name":"echo","argumentz":{}}`) }, fault.BadRequest, `unknown field "argumentz"`},
		{"malformed JSON", func() response { return h.call(h.key, `{"server_id":"demo",`) }, fault.BadRequest, "request body is truncated JSON"},
		{"bad JSON", func() response { return h.call(h.key, `{"server_id" "demo"}`) }, fault.BadRequest, "malformed JSON at byte"},
		{"missing server_id", func() response { return h.call(h.key, `{"name":"echo"}`) }, fault.BadRequest, "server_id is required"},
		{"missing name", func() response { return h.call(h.key, `{"server_id":"demo"}`) }, fault.BadRequest, "name (the tool to call) is required"},
		{"wrong content type", func() response {
			return h.do(http.MethodPost, "/mcp-rest/tools/call", h.key, "text/plain", strings.NewReader(`{}`))
		}, fault.BadRequest, "Content-Type must be application/json"},
		{"unknown server", func() response { return h.call(h.key, `{"server_id":"nope","name":"echo"}`) }, fault.NotFound, `unknown server "nope"`},
		{"unknown tool", func() response { return h.call(h.key, `{"server_id":"demo","name":"nope"}`) }, fault.NotFound, `server "demo" has no tool "nope"`},
		{"misconfigured server", func() response { return h.call(h.key, `{"server_id":"broken","name":"echo"}`) }, fault.Misconfigured, "url: has no scheme"},
		{"no key", func() response { return h.call("", `{"server_id":"demo","name":"echo"}`) }, fault.Unauthorized, ""},
		{"unknown route", func() response { return h.do(http.MethodGet, "/nope", h.key, "", nil) }, fault.NotFound, ""},
		{"wrong method", func() response { return h.do(http.MethodDelete, "/mcp-rest/tools/call", h.key, json, nil) }, fault.MethodNotAllowed, ""},
		// MCP: a refusal of the SDK's own, and one of the gateway's.
		{"mcp without Accept", func() response {
			return h.do(http.MethodPost, "/mcp", h.key, json, strings.NewReader(mcpToolList))
		}, fault.BadRequest, "Accept must contain"},
		{"mcp unknown tool", func() response {
			return h.send(http.MethodPost, "/mcp", bearerHeader(h.key), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo-nope","arguments":{}}}`)
		}, fault.NotFound, `has no tool "nope"`},
	}
	ids := map[string]int{}
	for i, tt := range tests {
		r := tt.do()
		if r.status < 400 && !strings.Contains(string(r.body), `"error"`) {
			t.Fatalf("%s: %d %s, want a refusal", tt.name, r.status, r.body)
		}
		ids[r.header.Get("X-Request-Id")] = i
	}
	seen := map[int]bool{}
	for _, rec := range h.logRecords() {
		i, ok := ids[rec["request_id"].(string)]
		if !ok {
			continue
		}
		seen[i] = true
		tt := tests[i]
		msg, _ := rec["error"].(string)
		if rec["code"] != string(tt.code) || msg == "" || !strings.Contains(msg, tt.reason) {
			t.Errorf("%s: logged code %v, error %q; want %s with an error saying %q", tt.name, rec["code"], msg, tt.code, tt.reason)
		}
	}
	for i, tt := range tests {
		if !seen[i] {
			t.Errorf("%s: no request record", tt.name)
		}
	}
}
