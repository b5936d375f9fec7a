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
// ("<server_id>-<tool>") without server_id.
func TestRESTParity(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "second", "url": h.demo.URL, "description": "the same demo, again"})
	h.server(map[string]any{"server_id": "gone", "url": "http://127.0.0.1:1/mcp"})
	limited := testkit.PutKey(t, h.env, "demo")

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
	if lr.ServerID != "" || len(lr.Unavailable) != 1 || lr.Unavailable[0].ServerID != "gone" || lr.Unavailable[0].Error.Code != fault.UpstreamError {
		t.Errorf("server_id %q, unavailable %+v; want gone's UPSTREAM_ERROR", lr.ServerID, lr.Unavailable)
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
