package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// startOldUpstream starts an MCP server that speaks 2025-11-25 at most (its
// results carry no resultType), with a tool that answers, one that fails as
// a tool, a prompt, a resource and completions.
func startOldUpstream(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "old", Version: "1"}, &mcp.ServerOptions{
		SupportedProtocolVersions: []string{"2025-11-25"},
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{"a"}}}, nil
		},
	})
	s.AddTool(&mcp.Tool{Name: "hello", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello <world>"}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "oops", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "failed"}}}, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "greet"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}}, nil
	})
	s.AddResource(&mcp.Resource{URI: "test://doc", Name: "doc"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://doc", Text: "text"}}}, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestResultsCarryResultType sends a 2026-07-28 request of every kind to
// /mcp/{server_id} and /mcp, in front of an upstream that speaks
// 2025-11-25: every result carries resultType "complete" (the gateway's
// own isError results too), and every error echoes its request's id. An
// earlier version's client gets no resultType.
func TestResultsCarryResultType(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "old", "url": startOldUpstream(t)})
	h.server(map[string]any{"server_id": "gone", "url": "http://127.0.0.1:1/mcp"})

	post := func(t *testing.T, version, path string, id int, method, params string) map[string]json.RawMessage {
		t.Helper()
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + version + `","io.modelcontextprotocol/clientCapabilities":{}}`
		if params == "" {
			params = "{" + meta + "}"
		} else {
			params = "{" + meta + "," + params + "}"
		}
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
		r, _ := http.NewRequest(http.MethodPost, h.url+path, bytes.NewReader([]byte(body)))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("MCP-Protocol-Version", version)
		r.Header.Set("Authorization", "Bearer "+h.key)
		if version >= "2026-07-28" {
			// SEP-2243: the method, and the name a call, a prompt or a
			// read is about, ride in headers too.
			r.Header.Set("Mcp-Method", method)
			var p struct{ Name, URI string }
			_ = json.Unmarshal([]byte(params), &p)
			if n := p.Name + p.URI; n != "" {
				r.Header.Set("Mcp-Name", n)
			}
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.HasPrefix(raw, []byte("event:")) {
			// A stream (the upstream may log): its one answer.
			for line := range bytes.Lines(raw) {
				if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok && bytes.Contains(d, []byte(`"id"`)) {
					raw = d
				}
			}
		}
		var msg map[string]json.RawMessage
		if err := json.Unmarshal(raw, &msg); err != nil {
			t.Fatalf("%s %s: not one JSON message (HTTP %d): %s", method, path, resp.StatusCode, raw)
		}
		if got := string(msg["id"]); got != fmt.Sprint(id) {
			t.Errorf("%s %s: id %s, want %d: %s", method, path, got, id, raw)
		}
		return msg
	}
	resultType := func(msg map[string]json.RawMessage) (string, bool) {
		var res map[string]json.RawMessage
		if json.Unmarshal(msg["result"], &res) != nil {
			return "", false
		}
		var rt string
		_, has := res["resultType"]
		_ = json.Unmarshal(res["resultType"], &rt)
		return rt, has
	}

	type req struct{ path, method, params string }
	results := []req{
		{"/mcp/old", "tools/call", `"name":"hello","arguments":{}`},
		{"/mcp/old", "tools/call", `"name":"oops","arguments":{}`},
		{"/mcp/gone", "tools/call", `"name":"anything","arguments":{}`}, // the gateway's own isError
		{"/mcp/old", "tools/list", ""},
		{"/mcp/old", "prompts/list", ""},
		{"/mcp/old", "prompts/get", `"name":"greet"`},
		{"/mcp/old", "resources/list", ""},
		{"/mcp/old", "resources/read", `"uri":"test://doc"`},
		{"/mcp/old", "completion/complete", `"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"x","value":""}`},
		{"/mcp/old", "server/discover", ""},
		{"/mcp", "tools/call", `"name":"old-hello","arguments":{}`},
		{"/mcp", "tools/call", `"name":"gone-anything","arguments":{}`},
		{"/mcp", "tools/list", ""},
	}
	for i, r := range results {
		t.Run(r.path+" "+r.method, func(t *testing.T) {
			msg := post(t, "2026-07-28", r.path, 100+i, r.method, r.params)
			if _, ok := msg["result"]; !ok {
				t.Fatalf("no result: %s", msg["error"])
			}
			if rt, _ := resultType(msg); rt != "complete" {
				t.Errorf("resultType %q, want complete: %s", rt, msg["result"])
			}
			// The same request of a 2025-11-25 client gets none.
			old := post(t, "2025-11-25", r.path, 200+i, r.method, r.params)
			if _, has := resultType(old); has && r.method != "server/discover" {
				t.Errorf("a 2025-11-25 request got a resultType: %s", old["result"])
			}
		})
	}
	// Errors echo the request's id (post checks it).
	for i, r := range []req{
		{"/mcp/old", "tools/call", `"name":"nope","arguments":{}`},
		{"/mcp/nope", "tools/list", ""},
		{"/mcp/old", "no/such/method", ""},
	} {
		t.Run("error "+r.path+" "+r.method, func(t *testing.T) {
			if msg := post(t, "2026-07-28", r.path, 300+i, r.method, r.params); msg["error"] == nil {
				t.Errorf("no error: %s", msg["result"])
			}
		})
	}
}
