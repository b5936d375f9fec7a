package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// DefaultMaxResultBytes is the default for Options.MaxResultBytes.
const DefaultMaxResultBytes = 16 << 20

// The SDK encodes tool results with encoding/json's HTML escaping: every
// <, > and & of a text becomes six bytes (\u003c), so a result of markup
// grows up to six times on its way out. The gateway encodes the bulk of a
// result, its content and structured content, once and without that
// escaping, checks the size, and lets the SDK encode only the small rest
// (_meta, isError, resultType, which the SDK may still change after the
// handler returns).

// encodedResult is a tool result whose content and structured content are
// already encoded; it marshals as the same JSON the SDK would write, less
// the HTML escaping.
type encodedResult struct {
	*mcp.CallToolResult
	content    json.RawMessage
	structured json.RawMessage // nil: none
	// typed: answered to a 2026-07-28 request, so it carries a resultType
	// ("complete" unless it has one).
	typed bool
}

// encodeResult encodes res for the answer, or says it is too large to
// send: over MaxResultBytes once encoded.
func (g *Gateway) encodeResult(srv *registry.Server, res *mcp.CallToolResult) (*encodedResult, *fault.Error) {
	out, err := newEncodedResult(res)
	if err != nil {
		return nil, fault.Wrap(err, fault.UpstreamError, "server %q answered with a result the gateway cannot encode", srv.ID)
	}
	if n := len(out.content) + len(out.structured); int64(n) > g.maxResult {
		return nil, fault.New(fault.UpstreamError, "server %q answered with a result larger than the gateway sends (%d bytes)", srv.ID, g.maxResult)
	}
	return out, nil
}

// encodeAnswer is encodeResult written out whole, as the REST route answers
// it: the JSON encoding/json would write for the encodedResult, which is
// already compact and escapes no HTML, so that encoding/json need not scan
// and copy the whole result once more to check it.
func (g *Gateway) encodeAnswer(srv *registry.Server, res *mcp.CallToolResult) ([]byte, *fault.Error) {
	out, ferr := g.encodeResult(srv, res)
	if ferr != nil {
		return nil, ferr
	}
	body, err := out.MarshalJSON()
	if err != nil {
		return nil, fault.Wrap(err, fault.UpstreamError, "server %q answered with a result the gateway cannot encode", srv.ID)
	}
	return body, nil
}

// writeEncoded writes body, one JSON value already encoded, as writeJSON
// writes a value: with its content type, no-store, and a newline after it.
func writeEncoded(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func newEncodedResult(res *mcp.CallToolResult) (*encodedResult, error) {
	items := make([]any, len(res.Content))
	for i, c := range res.Content {
		items[i] = contentWire(c)
	}
	out := &encodedResult{CallToolResult: res}
	var err error
	if out.content, err = marshalPlain(items); err != nil {
		return nil, fmt.Errorf("encode content: %w", err)
	}
	if res.StructuredContent != nil {
		if out.structured, err = marshalPlain(res.StructuredContent); err != nil {
			return nil, fmt.Errorf("encode structured content: %w", err)
		}
	}
	return out, nil
}

// MarshalJSON writes the result: the SDK's encoding of everything but the
// content and structured content, with those two spliced in.
func (r *encodedResult) MarshalJSON() ([]byte, error) {
	shell := *r.CallToolResult
	shell.Content, shell.StructuredContent = nil, nil
	head, err := shell.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(head, &fields); err != nil {
		return nil, err
	}
	delete(fields, "content")
	delete(fields, "structuredContent")
	if _, ok := fields["resultType"]; r.typed && !ok {
		fields["resultType"] = json.RawMessage(`"` + resultTypeComplete + `"`)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range fields {
			if !yield(k) {
				return
			}
		}
	})
	var b bytes.Buffer
	b.Grow(len(head) + len(r.content) + len(r.structured) + 40)
	b.WriteString(`{"content":`)
	b.Write(r.content)
	if r.structured != nil {
		b.WriteString(`,"structuredContent":`)
		b.Write(r.structured)
	}
	for _, k := range names {
		key, _ := json.Marshal(k)
		b.WriteByte(',')
		b.Write(key)
		b.WriteByte(':')
		b.Write(fields[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// contentWire returns the wire form of the content types that carry bulk
// (text, image, audio, embedded resource), for encoding without HTML
// escaping; other content encodes itself.
func contentWire(c mcp.Content) any {
	type media struct {
		Type        string           `json:"type"`
		MIMEType    string           `json:"mimeType"`
		Data        []byte           `json:"data"`
		Meta        mcp.Meta         `json:"_meta,omitempty"`
		Annotations *mcp.Annotations `json:"annotations,omitempty"`
	}
	nonNil := func(b []byte) []byte {
		if b == nil {
			return []byte{}
		}
		return b
	}
	switch c := c.(type) {
	case *mcp.TextContent:
		return struct {
			Type        string           `json:"type"`
			Text        string           `json:"text"`
			Meta        mcp.Meta         `json:"_meta,omitempty"`
			Annotations *mcp.Annotations `json:"annotations,omitempty"`
		}{"text", c.Text, c.Meta, c.Annotations}
	case *mcp.ImageContent:
		return media{"image", c.MIMEType, nonNil(c.Data), c.Meta, c.Annotations}
	case *mcp.AudioContent:
		return media{"audio", c.MIMEType, nonNil(c.Data), c.Meta, c.Annotations}
	case *mcp.EmbeddedResource:
		return struct {
			Type        string                `json:"type"`
			Resource    *mcp.ResourceContents `json:"resource,omitempty"`
			Meta        mcp.Meta              `json:"_meta,omitempty"`
			Annotations *mcp.Annotations      `json:"annotations,omitempty"`
		}{"resource", c.Resource, c.Meta, c.Annotations}
	}
	return c
}

// marshalPlain is json.Marshal without HTML escaping.
func marshalPlain(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
