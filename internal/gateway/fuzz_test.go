package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// Fuzz targets for request decoding. They use small in-memory fakes for
// the key check and the registry (pure logic; the store is not what is
// being fuzzed) and a real demo upstream on loopback. Run longer with
// `make fuzz`.

type fakeAuth struct{}

func (fakeAuth) Authenticate(context.Context, auth.Request) (*auth.Principal, error) {
	return (&auth.Key{Hash: "0123456789abcdef", Servers: []string{auth.AllServers}}).Principal(), nil
}

func (fakeAuth) OAuth() *auth.OAuth { return nil }

type fakeRegistry struct{ srv *registry.Server }

func (f fakeRegistry) Get(_ context.Context, id string) (*registry.Server, error) {
	if id == f.srv.ID {
		return f.srv, nil
	}
	return nil, registry.ErrNotFound
}

func (f fakeRegistry) All(context.Context) ([]*registry.Server, []error, error) {
	return []*registry.Server{f.srv}, nil, nil
}

func fuzzHandler(f *testing.F) http.Handler {
	demo := httptest.NewServer(demoupstream.New().Handler())
	f.Cleanup(demo.Close)
	pool := upstream.New(upstream.Options{AllowLocal: true})
	f.Cleanup(pool.Close)
	srv := &registry.Server{ID: "demo", URL: demo.URL + "/mcp", Transport: registry.TransportHTTP,
		Timeout: registry.DefaultTimeout, OnLimit: registry.PolicyQueue}
	g, err := New(Deps{Auth: fakeAuth{}, Registry: fakeRegistry{srv}, Upstream: pool}, Options{MaxBodyBytes: 64 << 10})
	if err != nil {
		f.Fatal(err)
	}
	return g.Handler()
}

// checkAnswer fails on a panic-turned-500 or an answer that is not JSON
// where JSON is promised.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 && rec.Code != http.StatusBadGateway && rec.Code != http.StatusGatewayTimeout {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct == "application/json" && rec.Body.Len() > 0 && !json.Valid(bytes.TrimSpace(rec.Body.Bytes())) {
		t.Fatalf("invalid JSON answer: %q", rec.Body)
	}
}

func FuzzMCPRequest(f *testing.F) {
	h := fuzzHandler(f)
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo-echo","arguments":{"text":"hi"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"demo-echo","arguments":[1]}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":7}}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"s","method":"no/such"}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"demo-echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"resources/list"}`,
		`{"jsonrpc":"2.0","id":8,"method":"prompts/get"}`,
		`{"jsonrpc":"2.0","id":9,"method":"resources/read","params":null}`,
		`{"jsonrpc":"2.0","id":10,"method":"completion/complete"}`,
		`{"jsonrpc":"2.0","id":11,"method":"logging/setLevel","params":{"level":"loud"}}`,
		`{"jsonrpc":"2.0","id":12,"method":"resources/subscribe","params":{"uri":"x"}}`,
		`{"jsonrpc":`, `null`, `"x"`, ``,
	} {
		f.Add([]byte(seed), "2025-11-25", false)
		f.Add([]byte(seed), "", true)
	}
	f.Fuzz(func(t *testing.T, body []byte, version string, passthrough bool) {
		path := "/mcp"
		if passthrough {
			path = "/mcp/demo"
		}
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer fuzz-key-0123456789")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if version != "" {
			req.Header.Set("MCP-Protocol-Version", version)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, rec)
	})
}

func FuzzRESTCall(f *testing.F) {
	h := fuzzHandler(f)
	for _, seed := range []string{
		`{"server_id":"demo","name":"echo","arguments":{"text":"hi"}}`,
		`{"server_id":"demo","name":"echo","arguments":null}`,
		`{"server_id":5}`, `{"server_id":"demo","name":"echo","extra":1}`, `[]`, `{}`, `{"a"`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/mcp-rest/tools/call", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer fuzz-key-0123456789")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, rec)
	})
}
