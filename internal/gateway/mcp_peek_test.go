package gateway

import (
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestPeekReadsAsTheSDKDoes: the gateway's pre-parse reads a message's
// members by their exact names, as the SDK does, reads trace keys ignoring
// case, and finds a member named twice (in any case) in the message, its
// params or params._meta.
func TestPeekReadsAsTheSDKDoes(t *testing.T) {
	for _, tc := range []struct {
		name, body       string
		method, id, tool string
		traceparent      string
		progress, batch  bool
		repeated         string
	}{
		{name: "plain", body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"demo-echo","_meta":{"progressToken":1,"traceparent":"tp"}}}`,
			method: "tools/call", id: "7", tool: "demo-echo", traceparent: "tp", progress: true},
		{name: "null progress", body: `{"id":"a","method":"ping","params":{"_meta":{"progressToken":null}}}`, method: "ping", id: `"a"`},
		{name: "case-variant method alone is not the method", body: `{"id":1,"Method":"tools/call","params":{"Name":"x"}}`, id: "1"},
		{name: "case-variant trace keys are read", body: `{"id":1,"method":"tools/list","params":{"_meta":{"TRACEPARENT":"tp","TraceState":"ts"}}}`,
			method: "tools/list", id: "1", traceparent: "tp"},
		{name: "case-variant method", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"ping","params":{}}`, id: "1", method: "tools/call", repeated: "Method"},
		{name: "exact duplicate", body: `{"id":1,"method":"ping","method":"tools/call"}`, id: "1", method: "tools/call", repeated: "method"},
		{name: "repeated id echoes none", body: `{"id":1,"ID":2,"method":"ping"}`, method: "ping", repeated: "ID"},
		{name: "in params", body: `{"id":1,"method":"tools/call","params":{"name":"demo-echo","NAME":"demo-fail_tool"}}`, id: "1", method: "tools/call", tool: "demo-echo", repeated: "NAME"},
		{name: "in _meta", body: `{"id":1,"method":"tools/call","params":{"name":"t","_meta":{"traceparent":"a","TRACEPARENT":"b"}}}`, id: "1", method: "tools/call", tool: "t", traceparent: "b", repeated: "TRACEPARENT"},
		{name: "Unicode case folding", body: `{"id":1,"method":"x","params":{"K":1,"\u212a":2}}`, id: "1", method: "x", repeated: "\u212a"},
		{name: "arguments are checked elsewhere", body: `{"id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1,"A":2}}}`, id: "1", method: "tools/call", tool: "t"},
		{name: "batch", body: ` [{"id":1,"method":"ping"}]`, batch: true},
		{name: "not JSON", body: `{"id":1,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := peek([]byte(tc.body))
			if p.method != tc.method || string(p.id) != tc.id || p.name != tc.tool || p.trace.Traceparent != tc.traceparent ||
				p.progress != tc.progress || p.batch != tc.batch || p.repeated != tc.repeated {
				t.Errorf("peek(%s) = method %q id %q name %q traceparent %q progress %v batch %v repeated %q\nwant method %q id %q name %q traceparent %q progress %v batch %v repeated %q",
					tc.body, p.method, p.id, p.name, p.trace.Traceparent, p.progress, p.batch, p.repeated,
					tc.method, tc.id, tc.tool, tc.traceparent, tc.progress, tc.batch, tc.repeated)
			}
		})
	}
}

// TestForwardMetaDropsEverySpelling: no spelling of a trace key or of the
// protocol's reserved prefix is forwarded upstream; the caller's own keys
// are.
func TestForwardMetaDropsEverySpelling(t *testing.T) {
	in := mcp.Meta{
		"traceparent": "a", "TRACEPARENT": "b", "Tracestate": "c", "Baggage": "secret=s3cr3t", "BAGGAGE": "x",
		"io.modelcontextprotocol/protocolVersion": "2026-07-28", "IO.ModelContextProtocol/clientCapabilities": map[string]any{},
		"progressToken": 1, "example.com/note": "kept", "traceparent-ish": "kept",
	}
	out := forwardMeta(in)
	got := slices.Sorted(func(yield func(string) bool) {
		for k := range out {
			if !yield(k) {
				return
			}
		}
	})
	if want := []string{"example.com/note", "progressToken", "traceparent-ish"}; !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
	for _, v := range out {
		if s, ok := v.(string); ok && strings.Contains(s, "s3cr3t") {
			t.Errorf("baggage forwarded: %v", out)
		}
	}
}
