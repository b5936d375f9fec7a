package gateway

import (
	"bytes"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// The REST route writes a result's encoding as it is: byte for byte what
// encoding/json writes for it (writeJSON), markup and all, with no second
// pass over it.
func TestEncodedAnswerIsWhatEncodingJSONWrites(t *testing.T) {
	g, err := New(Deps{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := &registry.Server{ID: "demo"}
	results := []*mcp.CallToolResult{
		{Content: []mcp.Content{}},
		{Content: []mcp.Content{&mcp.TextContent{Text: "<b>a & b</b>\n\t\"quoted\" \u2028 é"}}, IsError: true},
		{
			Content: []mcp.Content{
				&mcp.TextContent{Text: "x", Meta: mcp.Meta{"k": "<v>"}, Annotations: &mcp.Annotations{Priority: 0.5}},
				&mcp.ImageContent{MIMEType: "image/png", Data: []byte{0, 1, 2, '<'}},
				&mcp.AudioContent{MIMEType: "audio/wav"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///a?b=<c>", Text: "&"}},
				&mcp.ResourceLink{URI: "https://example.com/<x>", Name: "link"},
			},
			StructuredContent: map[string]any{"html": "<p>", "n": 1.5, "list": []any{"&", nil, true}},
			Meta:              mcp.Meta{"trace": "<id>"},
		},
	}
	for i, res := range results {
		body, ferr := g.encodeAnswer(srv, res)
		if ferr != nil {
			t.Fatalf("result %d: %v", i, ferr)
		}
		fast := httptest.NewRecorder()
		writeEncoded(fast, 200, body)
		enc, ferr := g.encodeResult(srv, res)
		if ferr != nil {
			t.Fatalf("result %d: %v", i, ferr)
		}
		slow := httptest.NewRecorder()
		writeJSON(slow, 200, enc)
		if !bytes.Equal(fast.Body.Bytes(), slow.Body.Bytes()) {
			t.Errorf("result %d:\nwritten  %s\nencoding/json %s", i, fast.Body, slow.Body)
		}
		for _, h := range []string{"Content-Type", "Cache-Control"} {
			if fast.Header().Get(h) != slow.Header().Get(h) {
				t.Errorf("result %d: %s %q, encoding/json's %q", i, h, fast.Header().Get(h), slow.Header().Get(h))
			}
		}
	}
}
