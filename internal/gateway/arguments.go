package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/mcpgate/mcpgate/internal/clip"
	"strings"
	"sync"
	"unicode"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// A tool call's arguments are checked before the call costs anything
// upstream or in the store: their size (the request body's bound), their
// nesting depth, and then the tool's own input schema, as the upstream
// listed it. A refusal is BAD_REQUEST (JSON-RPC -32602 on MCP) and takes
// no slot.

// DefaultMaxArgumentDepth is the default for Options.MaxArgumentDepth.
const DefaultMaxArgumentDepth = 64

// maxSchemaMessage bounds the schema validation error relayed to a caller.
const maxSchemaMessage = 300

// arguments checks that raw is a JSON object (or absent, or null) nested
// at most MaxArgumentDepth deep.
func (g *Gateway) arguments(raw json.RawMessage) (any, *fault.Error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return map[string]any{}, nil
	}
	if trimmed[0] != '{' {
		return nil, fault.New(fault.BadRequest, "arguments must be a JSON object")
	}
	if depth(trimmed) > g.maxDepth {
		return nil, fault.New(fault.BadRequest, "arguments are nested more than %d deep", g.maxDepth)
	}
	if k, ok := duplicateKey(trimmed); ok {
		return nil, fault.New(fault.BadRequest, "arguments repeat the key %q in one object", clip.String(k, clip.Short))
	}
	return json.RawMessage(trimmed), nil
}

// duplicateKey returns a key that one object of data (valid JSON or not)
// names twice, if any: the gateway checks the arguments against the tool's
// input schema and binds request states to them as a decoder reads them,
// keeping the last of two values, while the upstream's decoder may keep
// the first or both. Keys count as one when they differ only in case,
// as Go's decoder matches struct fields. Malformed JSON is left to the
// schema check and the SDK to refuse.
func duplicateKey(data []byte) (string, bool) {
	type frame struct {
		keys map[string]bool // nil in an array
		key  bool            // the next string is a key
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		top := len(stack) - 1
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
			top--
		default:
			if top >= 0 && stack[top].keys != nil && stack[top].key {
				k := foldKey(tok.(string))
				if stack[top].keys[k] {
					return tok.(string), true
				}
				stack[top].keys[k] = true
				stack[top].key = false
				continue
			}
		}
		// A value ended: in an object, a key comes next.
		if top >= 0 && stack[top].keys != nil {
			stack[top].key = true
		}
		if top < 0 {
			return "", false
		}
	}
}

// foldKey maps s to one form per class of strings equal under Unicode case
// folding (strings.EqualFold): each rune becomes the least of its orbit.
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// depth returns how deep objects and arrays nest in data, valid JSON,
// without decoding it.
func depth(data []byte) int {
	d, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			d++
			deepest = max(deepest, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return deepest
}

// schemas caches the resolved input schema of each tool called, by server
// and tool name, until the upstream lists a new version of the tool.
type schemas struct {
	mu sync.Mutex
	m  map[string]schemaEntry
}

type schemaEntry struct {
	tool *mcp.Tool            // the tool the schema was resolved from
	rs   *jsonschema.Resolved // nil: the schema cannot be checked here
}

// maxSchemas bounds the cache; past it, it starts over.
const maxSchemas = 10000

// resolved returns t's resolved input schema, or nil when it cannot be
// used (it refers to other documents, or does not parse): then the
// upstream alone judges the arguments, as it would without the gateway.
func (g *Gateway) resolved(srv *registry.Server, t *mcp.Tool) *jsonschema.Resolved {
	key := srv.ID + "\x00" + t.Name
	c := &g.schemas
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && e.tool == t {
		return e.rs
	}
	e = schemaEntry{tool: t}
	var err error
	e.rs, err = resolveSchema(t.InputSchema)
	if err != nil {
		g.log.Warn("a tool's input schema cannot be checked; its arguments go to the upstream unchecked",
			"server_id", srv.ID, "tool", clip.String(t.Name, clip.Name), "error", err.Error())
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxSchemas {
		c.m = map[string]schemaEntry{}
	}
	c.m[key] = e
	c.mu.Unlock()
	return e.rs
}

func resolveSchema(schema any) (*jsonschema.Resolved, error) {
	if schema == nil {
		return nil, nil
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
}

// checkArguments validates a call's arguments (as arguments returned them)
// against tool t's input schema.
func (g *Gateway) checkArguments(srv *registry.Server, t *mcp.Tool, args any) *fault.Error {
	rs := g.resolved(srv, t)
	if rs == nil {
		return nil
	}
	var instance any = map[string]any{}
	if raw, ok := args.(json.RawMessage); ok {
		if err := json.Unmarshal(raw, &instance); err != nil {
			return fault.New(fault.BadRequest, "arguments are not valid JSON")
		}
	}
	if err := rs.Validate(instance); err != nil {
		return fault.Wrap(errSchema, fault.BadRequest, "arguments do not match the input schema of tool %q: %s", clip.String(t.Name, clip.Name), clip.String(err.Error(), maxSchemaMessage))
	}
	return nil
}

// errSchema marks arguments the tool's input schema refuses. On MCP they
// are a tool execution error (a result with isError), as an MCP server
// reports input validation errors so that the model can correct its call;
// on REST, BAD_REQUEST.
var errSchema = errors.New("arguments do not match the tool's input schema")
