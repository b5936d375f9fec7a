package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/fault"
)

// TestDoubleSlashPaths: "${GatewayUrl}/mcp" with a base URL ending in "/"
// is "//mcp"; it is served as "/mcp", not redirected (curl and most POST
// clients do not follow), with the same authentication.
func TestDoubleSlashPaths(t *testing.T) {
	h := newHarness(t)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, key, body string, hdr map[string]string) response {
		t.Helper()
		req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, header: resp.Header, body: b}
	}

	if r := do(http.MethodGet, "//health", "", "", nil); r.status != 200 {
		t.Errorf("GET //health: %d %s", r.status, r.body)
	}
	echo := `{"server_id":"demo","name":"echo","arguments":{"text":"slashes"}}`
	if r := do(http.MethodPost, "//mcp-rest//tools/call", h.key, echo, nil); r.status != 200 || !strings.Contains(string(r.body), "slashes") {
		t.Errorf("POST //mcp-rest//tools/call: %d %s", r.status, r.body)
	}
	h.expectFault(do(http.MethodPost, "//mcp-rest/tools/call", "", echo, nil), 401, fault.Unauthorized)
	h.expectFault(do(http.MethodPost, "//mcp", "", `{}`, nil), 401, fault.Unauthorized)
	// An escaped slash is not a separator: the server id "a//b" is refused,
	// not read as a path.
	h.expectFault(do(http.MethodPost, "/mcp/a%2F%2Fb", h.key, `{}`, nil), 404, fault.NotFound)

	version := map[string]string{"MCP-Protocol-Version": "2025-11-25"}
	for path, tool := range map[string]string{"//mcp": "demo-echo", "//mcp//demo": "echo"} {
		call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"text":"via ` + path + `"}}}`
		r := do(http.MethodPost, path, h.key, call, version)
		if r.status != 200 || !strings.Contains(string(r.body), "via "+path) {
			t.Errorf("MCP tools/call through %s: %d %s", path, r.status, r.body)
		}
	}
}
