package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// panicRegistry is a registry with a bug: every lookup panics.
type panicRegistry struct{}

func (panicRegistry) Get(context.Context, string) (*registry.Server, error) { panic("registry bug") }
func (panicRegistry) All(context.Context) ([]*registry.Server, []error, error) {
	panic("registry bug")
}

// TestErrorShapes sends every kind of failing request the routes answer
// and checks each answer's shape: on the REST routes (and any other path
// outside /mcp) the fault body; on /mcp and /mcp/{server_id} a JSON-RPC
// error response whose data is that body's error object; a JSON content
// type, the code's status, and Retry-After with every retry hint.
func TestErrorShapes(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "shed", "url": h.demo.URL, "max_concurrent_requests": 1, "on_limit": "shed"})
	h.server(map[string]any{"server_id": "queue", "url": h.demo.URL, "max_concurrent_requests": 1, "queue_timeout": 0.2})
	h.server(map[string]any{"server_id": "slow", "url": h.demo.URL, "timeout": 0.2})
	h.server(map[string]any{"server_id": "gone", "url": "http://127.0.0.1:1/mcp"})
	h.server(map[string]any{"server_id": "fragile", "url": h.demo.URL, "timeout": 0.2, "breaker": map[string]any{"failure_threshold": 1}})
	h.server(map[string]any{"server_id": "bad", "url": h.demo.URL, "max_concurrent_requests": "two"})
	limited := testkit.PutKey(t, h.env, "demo")

	// Hold the only place of "shed" and of "queue".
	for _, id := range []string{"shed", "queue"} {
		go h.call(h.key, `{"server_id":"`+id+`","name":"slow_tool","arguments":{"ms":60000,"gate":"held"}}`)
	}
	waitInFlight(t, h, 2)
	t.Cleanup(func() { h.demo.OpenGate("held") })
	// One infrastructure failure opens fragile's breaker.
	h.expectFault(h.call(h.key, `{"server_id":"fragile","name":"slow_tool","arguments":{"ms":5000}}`), 504, fault.UpstreamTimeout)

	// Two gateways with a fault of their own: a keys table that does not
	// exist (the store fails), and a registry that panics (a bug).
	broken := func(keys string, reg Registry) string {
		g, err := New(Deps{
			Auth:     auth.New(h.env.Client, keys, auth.Options{}),
			Registry: reg,
			Limiter:  lease.New(h.env.Client, h.env.Tables.Leases, lease.Options{}),
			Upstream: upstream.New(upstream.Options{AllowLocal: true}),
		}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g.Handler())
		t.Cleanup(srv.Close)
		return srv.URL
	}
	storeDown := broken("no-such-keys-table", registry.New(h.env.Client, h.env.Tables.Servers, registry.Options{}))
	buggy := broken(h.env.Tables.Keys, panicRegistry{})

	const (
		init      = `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
		list      = `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`
		call      = `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`
		mcpAccept = "application/json, text/event-stream"
	)
	type req struct {
		base         string // "" = the harness's gateway
		method, path string
		key          string
		contentType  string
		accept       string
		version      string // MCP-Protocol-Version
		origin       string
		extra        map[string]string
		body         string
	}
	rest := func(path, key, body string) req {
		return req{method: http.MethodPost, path: path, key: key, contentType: "application/json", body: body}
	}
	mcpReq := func(path, key, body string) req {
		return req{method: http.MethodPost, path: path, key: key, contentType: "application/json", accept: mcpAccept, version: "2025-11-25", body: body}
	}
	with := func(r req, f func(*req)) req { f(&r); return r }
	huge := strings.Repeat("x", 5000)

	for _, tc := range []struct {
		name    string
		req     req
		status  int
		code    fault.Code
		rpc     int64 // the JSON-RPC error code on /mcp; 0 for the REST shape
		message string
	}{
		// REST routes.
		{"rest no route", req{method: http.MethodGet, path: "/nowhere", key: h.key}, 404, fault.NotFound, 0, "no route"},
		{"rest wrong method", req{method: http.MethodGet, path: "/mcp-rest/tools/call", key: h.key}, 405, fault.MethodNotAllowed, 0, ""},
		{"rest no key", rest("/mcp-rest/tools/call", "", call), 401, fault.Unauthorized, 0, "missing credentials"},
		{"rest unknown key", rest("/mcp-rest/tools/call", "mcpg_nope", call), 401, fault.Unauthorized, 0, ""},
		{"rest key without access", rest("/mcp-rest/tools/call", limited, `{"server_id":"shed","name":"echo"}`), 403, fault.Forbidden, 0, ""},
		{"rest foreign origin", with(rest("/mcp-rest/tools/call", h.key, call), func(r *req) { r.origin = "https://evil.example" }), 403, fault.Forbidden, 0, "cross-origin"},
		{"rest body too large", rest("/mcp-rest/tools/call", h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"`+huge+`"}}`), 413, fault.PayloadTooLarge, 0, ""},
		{"rest malformed JSON", rest("/mcp-rest/tools/call", h.key, `{"server_id":`), 400, fault.BadRequest, 0, ""},
		{"rest wrong content type", with(rest("/mcp-rest/tools/call", h.key, call), func(r *req) { r.contentType = "text/plain" }), 400, fault.BadRequest, 0, "Content-Type"},
		{"rest no tool name", rest("/mcp-rest/tools/call", h.key, `{"server_id":"demo"}`), 400, fault.BadRequest, 0, ""},
		{"rest unknown server", rest("/mcp-rest/tools/call", h.key, `{"server_id":"nope","name":"echo"}`), 404, fault.NotFound, 0, ""},
		{"rest unknown tool", rest("/mcp-rest/tools/call", h.key, `{"server_id":"demo","name":"nope"}`), 404, fault.NotFound, 0, ""},
		{"rest misconfigured server", rest("/mcp-rest/tools/call", h.key, `{"server_id":"bad","name":"echo"}`), 502, fault.Misconfigured, 0, ""},
		{"rest at capacity", rest("/mcp-rest/tools/call", h.key, `{"server_id":"shed","name":"echo","arguments":{"text":"x"}}`), 429, fault.AtCapacity, 0, ""},
		{"rest queue timeout", rest("/mcp-rest/tools/call", h.key, `{"server_id":"queue","name":"echo","arguments":{"text":"x"}}`), 429, fault.QueueTimeout, 0, ""},
		{"rest upstream timeout", rest("/mcp-rest/tools/call", h.key, `{"server_id":"slow","name":"slow_tool","arguments":{"ms":5000}}`), 504, fault.UpstreamTimeout, 0, ""},
		{"rest upstream error", rest("/mcp-rest/tools/call", h.key, `{"server_id":"gone","name":"echo"}`), 502, fault.UpstreamError, 0, ""},
		{"rest circuit open", rest("/mcp-rest/tools/call", h.key, `{"server_id":"fragile","name":"slow_tool","arguments":{"ms":0}}`), 503, fault.CircuitOpen, 0, ""},
		{"rest list unknown server", req{method: http.MethodGet, path: "/mcp-rest/tools/list?server_id=nope", key: h.key}, 404, fault.NotFound, 0, ""},
		{"rest store unavailable", with(rest("/mcp-rest/tools/call", auth.NewKey(), call), func(r *req) { r.base = storeDown }), 503, fault.StoreUnavailable, 0, ""},
		{"rest internal", with(rest("/mcp-rest/tools/call", h.key, call), func(r *req) { r.base = buggy }), 500, fault.Internal, 0, "internal error"},

		// The MCP endpoint.
		{"mcp no key", mcpReq("/mcp", "", init), 401, fault.Unauthorized, jsonrpc.CodeInvalidRequest, ""},
		{"mcp unknown key", mcpReq("/mcp", "mcpg_nope", init), 401, fault.Unauthorized, jsonrpc.CodeInvalidRequest, ""},
		{"mcp key without access", mcpReq("/mcp/shed", limited, init), 403, fault.Forbidden, jsonrpc.CodeInvalidRequest, ""},
		{"mcp foreign origin", with(mcpReq("/mcp", h.key, init), func(r *req) { r.origin = "https://evil.example" }), 403, fault.Forbidden, jsonrpc.CodeInvalidRequest, ""},
		{"mcp unknown server", mcpReq("/mcp/nope", h.key, init), 404, fault.NotFound, jsonrpc.CodeInvalidRequest, ""},
		{"mcp misconfigured server", mcpReq("/mcp/bad", h.key, init), 502, fault.Misconfigured, jsonrpc.CodeInternalError, ""},
		{"mcp no route", mcpReq("/mcp/demo/extra", h.key, init), 404, fault.NotFound, jsonrpc.CodeInvalidRequest, ""},
		{"mcp GET", req{method: http.MethodGet, path: "/mcp", key: h.key, accept: "text/event-stream"}, 405, fault.MethodNotAllowed, jsonrpc.CodeInvalidRequest, ""},
		{"mcp DELETE", req{method: http.MethodDelete, path: "/mcp", key: h.key}, 405, fault.MethodNotAllowed, jsonrpc.CodeInvalidRequest, ""},
		{"mcp accepts only JSON", with(mcpReq("/mcp", h.key, list), func(r *req) { r.accept = "application/json" }), 400, fault.BadRequest, jsonrpc.CodeInvalidRequest, "Accept"},
		{"mcp no Accept", with(mcpReq("/mcp", h.key, list), func(r *req) { r.accept = "" }), 400, fault.BadRequest, jsonrpc.CodeInvalidRequest, "Accept"},
		{"mcp unsupported version", with(mcpReq("/mcp", h.key, list), func(r *req) { r.version = "1999-01-01" }), 400, fault.BadRequest, jsonrpc.CodeInvalidRequest, "protocol version"},
		{"mcp wrong content type", with(mcpReq("/mcp", h.key, list), func(r *req) { r.contentType = "text/plain" }), 415, fault.BadRequest, jsonrpc.CodeInvalidRequest, "Content-Type"},
		{"mcp body too large", mcpReq("/mcp", h.key, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"demo-echo","arguments":{"text":"`+huge+`"}}}`), 413, fault.PayloadTooLarge, jsonrpc.CodeInvalidRequest, ""},
		{"mcp malformed JSON", mcpReq("/mcp", h.key, `{"jsonrpc":"2.0","id":7,"method":`), 400, fault.BadRequest, jsonrpc.CodeInvalidRequest, ""},
		{"mcp empty body", mcpReq("/mcp", h.key, ""), 400, fault.BadRequest, jsonrpc.CodeInvalidRequest, ""},
		{"mcp batch", mcpReq("/mcp", h.key, "["+list+"]"), 400, fault.BadRequest, jsonrpc.CodeInvalidRequest, "batch"},
		{"mcp Last-Event-ID on POST", with(mcpReq("/mcp", h.key, list), func(r *req) { r.extra = map[string]string{"Last-Event-ID": "1"} }), 400, fault.BadRequest, jsonrpc.CodeInvalidRequest, ""},
		{"mcp header disagrees with body", with(mcpReq("/mcp", h.key, `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`), func(r *req) {
			r.version = "2026-07-28"
			r.extra = map[string]string{"Mcp-Method": "tools/call"}
		}), 400, fault.BadRequest, -32020, ""},
		{"mcp store unavailable", with(mcpReq("/mcp", auth.NewKey(), list), func(r *req) { r.base = storeDown }), 503, fault.StoreUnavailable, jsonrpc.CodeInternalError, ""},
		{"mcp internal", with(mcpReq("/mcp/demo", h.key, init), func(r *req) { r.base = buggy }), 500, fault.Internal, jsonrpc.CodeInternalError, "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.req.base
			if base == "" {
				base = h.url
			}
			var body io.Reader
			if tc.req.body != "" {
				body = strings.NewReader(tc.req.body)
			}
			r, err := http.NewRequest(tc.req.method, base+tc.req.path, body)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range map[string]string{"Content-Type": tc.req.contentType, "Accept": tc.req.accept,
				"MCP-Protocol-Version": tc.req.version, "Origin": tc.req.origin} {
				if v != "" {
					r.Header.Set(k, v)
				}
			}
			if tc.req.key != "" {
				r.Header.Set("Authorization", "Bearer "+tc.req.key)
			}
			for k, v := range tc.req.extra {
				r.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d; body %s", resp.StatusCode, tc.status, raw)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q, want application/json; body %s", ct, raw)
			}
			var detail fault.Detail
			if tc.rpc == 0 {
				var b struct {
					Error *fault.Detail `json:"error"`
				}
				if err := json.Unmarshal(raw, &b); err != nil || b.Error == nil {
					t.Fatalf("not the REST error shape: %s (%v)", raw, err)
				}
				detail = *b.Error
			} else {
				var b struct {
					JSONRPC string `json:"jsonrpc"`
					Error   *struct {
						Code    int64         `json:"code"`
						Message string        `json:"message"`
						Data    *fault.Detail `json:"data"`
					} `json:"error"`
				}
				var fields map[string]json.RawMessage
				_ = json.Unmarshal(raw, &fields)
				if _, hasID := fields["id"]; json.Unmarshal(raw, &b) != nil || !hasID || b.JSONRPC != "2.0" || b.Error == nil || b.Error.Data == nil {
					t.Fatalf("not a JSON-RPC error with the gateway's data: %s", raw)
				}
				// The request's id is echoed whenever it could be read:
				// from a whole message, or the start of one too large.
				wantID := "null"
				if json.Valid([]byte(tc.req.body)) && peekID(strings.NewReader(tc.req.body)) != nil || tc.name == "mcp body too large" {
					wantID = "7"
				}
				if got := string(fields["id"]); got != wantID {
					t.Errorf("id %s, want %s: %s", got, wantID, raw)
				}
				if b.Error.Code != tc.rpc {
					t.Errorf("JSON-RPC code %d, want %d: %s", b.Error.Code, tc.rpc, raw)
				}
				if b.Error.Message == "" {
					t.Errorf("no JSON-RPC message: %s", raw)
				}
				detail = *b.Error.Data
			}
			if detail.Code != tc.code || detail.Message == "" || detail.Retryable != tc.code.Retryable() {
				t.Errorf("error %+v, want code %s, a message and retryable %v: %s", detail, tc.code, tc.code.Retryable(), raw)
			}
			if tc.message != "" && !strings.Contains(detail.Message, tc.message) {
				t.Errorf("message %q does not mention %q", detail.Message, tc.message)
			}
			if (detail.RetryAfterMS > 0) != (resp.Header.Get("Retry-After") != "") {
				t.Errorf("retry_after_ms %d but Retry-After %q", detail.RetryAfterMS, resp.Header.Get("Retry-After"))
			}
			if strings.Contains(string(raw), "registry bug") || strings.Contains(string(raw), "no-such-keys-table") {
				t.Errorf("internal detail in the answer: %s", raw)
			}
			// JSON for clients that read JSON: no HTML escaping, so the
			// 401's "<key>" reads as written.
			for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
				if strings.Contains(string(raw), esc) {
					t.Errorf("the answer HTML-escapes (%s): %s", esc, raw)
				}
			}
			if tc.code == fault.Unauthorized && tc.req.key == "" && !strings.Contains(string(raw), "Authorization: Bearer <") {
				t.Errorf("the 401 does not say how to send a key, as written: %s", raw)
			}
		})
	}
}
