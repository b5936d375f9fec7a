package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// TestBatchesRefusedInProcess sends batches concurrently to the in-process
// handler; run with -race, it also shows that no batch item ever runs (a
// batch once ran its items at once, racing on the request's record).
func TestBatchesRefusedInProcess(t *testing.T) {
	h := newHarness(t)
	items := make([]string, 20)
	for i := range items {
		items[i] = `{"jsonrpc":"2.0","id":` + strings.Repeat("1", 1+i%3) + `,"method":"tools/call","params":{"name":"demo-echo","arguments":{"text":"x"}}}`
	}
	batch := "[" + strings.Join(items, ",") + "]"
	var wg sync.WaitGroup
	for _, version := range []string{"", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"} {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, h.url+"/mcp", strings.NewReader(batch))
			req.Header.Set("Authorization", "Bearer "+h.key)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if version != "" {
				req.Header.Set("MCP-Protocol-Version", version)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var body struct {
				Error struct{ Code int } `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != http.StatusBadRequest || body.Error.Code != -32600 {
				t.Errorf("batch, version %q: %d, JSON-RPC %d; want 400 and -32600", version, resp.StatusCode, body.Error.Code)
			}
		})
	}
	wg.Wait()
}

func TestCallOutcome(t *testing.T) {
	rpc := func(code int64) error {
		return &upstream.Error{Kind: upstream.KindRPC, RPC: &jsonrpc.Error{Code: code}}
	}
	timeout := &upstream.Error{Kind: upstream.KindTimeout}
	for _, tc := range []struct {
		name        string
		err         error
		lost, short bool
		want        lease.Outcome
	}{
		{"success", nil, false, false, lease.Success},
		{"lease lost", errors.New("x"), true, false, lease.Abandoned},
		{"lease lost at the timeout", timeout, true, false, lease.Abandoned},
		{"caller went away", &upstream.Error{Kind: upstream.KindCanceled}, false, false, lease.Abandoned},
		{"HTTP 400", &upstream.Error{Kind: upstream.KindRejected, Status: 400}, false, false, lease.Abandoned},
		{"answer too large", &upstream.Error{Kind: upstream.KindTooLarge}, false, false, lease.Abandoned},
		{"invalid params", rpc(jsonrpc.CodeInvalidParams), false, false, lease.Abandoned},
		{"timeout", timeout, false, false, lease.Failure},
		{"request deadline before the tool's timeout", timeout, false, true, lease.Abandoned},
		{"unreachable, request deadline short", &upstream.Error{Kind: upstream.KindUnavailable}, false, true, lease.Failure},
		{"HTTP 5xx, 408", &upstream.Error{Kind: upstream.KindUnavailable, Status: 502}, false, false, lease.Failure},
		{"HTTP 503 without Retry-After", &upstream.Error{Kind: upstream.KindUnavailable, Status: 503}, false, false, lease.Failure},
		{"HTTP 429: back-pressure", &upstream.Error{Kind: upstream.KindUnavailable, Status: 429}, false, false, lease.Overloaded},
		{"HTTP 503 with Retry-After: back-pressure", &upstream.Error{Kind: upstream.KindUnavailable, Status: 503, RetryAfter: time.Second}, false, false, lease.Overloaded},
		{"JSON-RPC rate limited: back-pressure", rpc(upstream.CodeRateLimited), false, false, lease.Overloaded},
		{"internal error", rpc(jsonrpc.CodeInternalError), false, false, lease.Failure},
		{"method not found", rpc(jsonrpc.CodeMethodNotFound), false, false, lease.Success},
	} {
		if got := callOutcome(tc.err, tc.lost, tc.short); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestArgumentDepth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`{}`, 1},
		{`{"a":[1,{"b":"[[[{{{"}]}`, 3},
		{`{"a":"\"[{"}`, 1},
		{`{"a":"\\","b":[[]]}`, 3},
	} {
		if got := depth([]byte(tc.in)); got != tc.want {
			t.Errorf("depth(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestEncodedResultMatchesTheSDK: the gateway's encoding of a result is
// the SDK's, value for value, without the HTML escaping.
func TestEncodedResultMatchesTheSDK(t *testing.T) {
	size := int64(3)
	res := &mcp.CallToolResult{
		Meta: mcp.Meta{"k": "<v>"},
		Content: []mcp.Content{
			&mcp.TextContent{Text: "a <b> & c", Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}}},
			&mcp.TextContent{},
			&mcp.ImageContent{Data: []byte("\x89PNG<"), MIMEType: "image/png"},
			&mcp.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"},
			&mcp.ResourceLink{URI: "file:///x?a=<1>", Name: "x", Size: &size},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///y", Text: "<html>", MIMEType: "text/html"}},
		},
		StructuredContent: map[string]any{"html": "<p>&amp;</p>", "n": 1.5},
		IsError:           true,
	}
	want, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := newEncodedResult(res)
	if err != nil {
		t.Fatal(err)
	}
	got, err := marshalPlain(enc) // as the SDK does: through MarshalJSON, without escaping
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	_ = json.Unmarshal(want, &w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("encoded\n%s\nSDK\n%s", got, want)
	}
	if !strings.Contains(string(got), `"a <b> & c"`) || !strings.Contains(string(got), `"<html>"`) || !strings.Contains(string(got), `"<p>&amp;</p>"`) {
		t.Errorf("content is HTML-escaped: %s", enc.content)
	}
	if len(got) >= len(want) {
		t.Errorf("encoded %d bytes, the SDK %d: want fewer", len(got), len(want))
	}
}

// TestDuplicateArgumentKeys: arguments naming one key twice are refused
// before the upstream is called, on REST and MCP alike. The schema check
// (and a request state's digest) would read the last value and pass
// /srv/x, while the upstream received the raw arguments with both.
func TestDuplicateArgumentKeys(t *testing.T) {
	h := newHarness(t)
	var calls atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "files", Version: "1"}, nil)
	schema := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{
		"path": {Type: "string", Pattern: "^/srv/"},
		"opts": {Type: "object"},
	}}
	s.AddTool(&mcp.Tool{Name: "read", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "read"}}}, nil
	})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(up.Close)
	h.server(map[string]any{"server_id": "files", "url": up.URL})

	for _, args := range []string{
		`{"path":"/etc/passwd","path":"/srv/x"}`,
		`{"path":"/srv/x","opts":{"a":1,"a":2}}`,
		`{"path":"/etc/passwd","p\u0061th":"/srv/x"}`,
		`{"PATH":"/etc/passwd","path":"/srv/x"}`,
	} {
		r := h.call(h.key, `{"server_id":"files","name":"read","arguments":`+args+`}`)
		h.expectFault(r, http.StatusBadRequest, fault.BadRequest)
		r = h.send(http.MethodPost, "/mcp/files", bearerHeader(h.key),
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":`+args+`}}`)
		var rpc struct {
			Error *struct{ Code int } `json:"error"`
		}
		// The answer may come as one server-sent event.
		body := r.body
		if _, data, ok := strings.Cut(string(body), "data: "); ok {
			body = []byte(data)
		}
		if err := json.Unmarshal(body, &rpc); err != nil || rpc.Error == nil || rpc.Error.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("MCP %s: %d %s; want JSON-RPC -32602", args, r.status, r.body)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the upstream was called %d times", n)
	}
	// Distinct keys still pass.
	if r := h.call(h.key, `{"server_id":"files","name":"read","arguments":{"path":"/srv/x","opts":{"a":{"a":1},"b":[{"a":1},{"a":2}]}}}`); r.status != http.StatusOK || calls.Load() != 1 {
		t.Errorf("distinct keys: %d %s", r.status, r.body)
	}
}
