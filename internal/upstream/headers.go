package upstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Parameter headers (MCP 2026-07-28, SEP-2243). A tool's input schema may
// mark primitive arguments with x-mcp-header; a client then sends each such
// argument's value in an Mcp-Param-<name> header too, and the upstream
// refuses a call whose headers disagree with its body. The SDK's client
// sends them only for tools its own session has listed; a gateway session
// mostly has not (the list comes from the fleet's catalog), so the pool
// sets them from the tool definition it holds.

type paramHeadersKey struct{}

// withParamHeaders returns ctx carrying the Mcp-Param-* headers of a call
// with args of a tool whose input schema is schema (see headerSchema), if
// it has any.
func withParamHeaders(ctx context.Context, schema *schemaProp, args any) context.Context {
	if schema == nil {
		return ctx
	}
	h := paramHeaders(schema, args)
	if len(h) == 0 {
		return ctx
	}
	return context.WithValue(ctx, paramHeadersKey{}, h)
}

// addParamHeaders returns a tools/call request with the headers of
// withParamHeaders added (a copy: a RoundTripper leaves its request alone),
// keeping any the SDK set itself.
func addParamHeaders(req *http.Request) *http.Request {
	h, ok := req.Context().Value(paramHeadersKey{}).(map[string]string)
	if !ok || req.Header.Get("Mcp-Method") != "tools/call" {
		return req
	}
	out := req.Clone(req.Context())
	for k, v := range h {
		if out.Header.Get(k) == "" {
			out.Header.Set(k, v)
		}
	}
	return out
}

type schemaProp struct {
	Type       string                `json:"type"`
	Header     string                `json:"x-mcp-header"`
	Properties map[string]schemaProp `json:"properties"`
}

// maxHeaderDepth bounds the schema nesting walked.
const maxHeaderDepth = 8

// headerSchema returns the properties of tool's input schema when any of
// them names a header (x-mcp-header); nil when none does.
func headerSchema(tool *mcp.Tool) *schemaProp {
	raw, err := json.Marshal(tool.InputSchema)
	if err != nil || !strings.Contains(string(raw), "x-mcp-header") {
		return nil
	}
	var schema schemaProp
	if json.Unmarshal(raw, &schema) != nil {
		return nil
	}
	return &schema
}

// paramHeaders returns the Mcp-Param-* headers of a call with args of a
// tool whose input schema is schema.
func paramHeaders(schema *schemaProp, args any) map[string]string {
	var argsRaw json.RawMessage
	var err error
	switch a := args.(type) {
	case json.RawMessage:
		argsRaw = a
	default:
		if argsRaw, err = json.Marshal(a); err != nil {
			return nil
		}
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(argsRaw, &obj) != nil {
		return nil
	}
	out := map[string]string{}
	collectHeaders(schema.Properties, obj, out, 0)
	return out
}

func collectHeaders(props map[string]schemaProp, args map[string]json.RawMessage, out map[string]string, depth int) {
	if depth > maxHeaderDepth {
		return
	}
	for name, p := range props {
		v, ok := args[name]
		if !ok {
			continue
		}
		if p.Header != "" {
			if s, ok := paramHeaderValue(v); ok {
				out["Mcp-Param-"+p.Header] = s
			}
		}
		if len(p.Properties) > 0 {
			var sub map[string]json.RawMessage
			if json.Unmarshal(v, &sub) == nil {
				collectHeaders(p.Properties, sub, out, depth+1)
			}
		}
	}
}

// paramHeaderValue encodes a primitive argument as SEP-2243 says: integers in
// decimal, booleans as true/false, strings as they are when plain ASCII
// and otherwise as =?base64?…?=.
func paramHeaderValue(raw json.RawMessage) (string, bool) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "", false
	}
	switch x := v.(type) {
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53-1 {
			return "", false
		}
		return strconv.FormatInt(int64(x), 10), true
	case string:
		if needsBase64(x) {
			return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(x)) + "?=", true
		}
		return x, true
	}
	return "", false
}

func needsBase64(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == ' ' || s[0] == '\t' || s[len(s)-1] == ' ' || s[len(s)-1] == '\t' {
		return true
	}
	for _, c := range s {
		if c < 0x20 || c > 0x7e {
			return true
		}
	}
	return strings.HasPrefix(s, "=?base64?") && strings.HasSuffix(s, "?=")
}
