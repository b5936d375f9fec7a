package openapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// BodyArg is the tool argument that carries an operation's JSON request
// body.
const BodyArg = "body"

// toolNamePattern is what MCP allows in a tool name.
var toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// methodOrder is the order of an operation's tools within one path.
var methodOrder = []string{
	http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete,
	http.MethodOptions, http.MethodHead, http.MethodPatch, http.MethodTrace,
	openapi3.MethodQuery,
}

// operation is what Call needs to turn a tool call into an HTTP request.
type operation struct {
	tool   string
	method string
	path   string // the path template, for messages
	base   string // server URL, no trailing slash
	parts  []pathPart
	params []*param
	body   *body
	// args maps every argument name to its parameter (nil for the body).
	args map[string]*param
	// argNames lists the argument names, sorted, for messages.
	argNames []string
}

// pathPart is a piece of a path template: an escaped literal, or a
// parameter's name.
type pathPart struct {
	lit   string
	param string
}

type param struct {
	name     string
	in       string
	required bool
	style    string
	explode  bool
	// keys are the property names an object value may have when its
	// members become query parameters of their own (form style,
	// exploded): no others are sent.
	keys []string
	// json sends the value JSON-encoded (a parameter with content
	// application/json instead of a schema).
	json bool
}

type body struct {
	mediaType string
	required  bool
}

// skipError is a reason to skip one operation, not to fail the document.
type skipError struct{ reason string }

func (e *skipError) Error() string { return e.reason }

func skip(format string, args ...any) error {
	return &skipError{reason: fmt.Sprintf(format, args...)}
}

// build maps doc's operations to tools. Every call goes to one origin: the
// base override's, else the document's top-level server's, which must be
// pinned's when pinned is set; an operation whose own servers are on
// another origin is skipped, so that the API's credentials and headers
// never go there.
func (a *API) build(doc *openapi3.T, specURL, baseOverride, pinned *url.URL) error {
	docBase := baseOverride
	if docBase == nil {
		var err error
		if docBase, err = resolveServers(doc.Servers, specURL); err != nil {
			return fmt.Errorf("servers: %w", err)
		}
	}
	if pinned != nil && !safeurl.SameOrigin(docBase, pinned) {
		return fmt.Errorf("%w: calls went to %s, the document now sends them to %s", ErrOriginChanged, originOf(pinned), originOf(docBase))
	}
	a.origin = docBase
	total := 0
	paths := doc.Paths.Keys()
	sort.Strings(paths)
	for _, path := range paths {
		item := doc.Paths.Value(path)
		if item == nil {
			continue
		}
		ops := item.Operations()
		for _, method := range sortedMethods(ops) {
			op := ops[method]
			where := method + " " + path
			base := docBase
			if baseOverride == nil {
				var servers openapi3.Servers
				switch {
				case op.Servers != nil && len(*op.Servers) > 0:
					servers = *op.Servers
				case len(item.Servers) > 0:
					servers = item.Servers
				}
				if servers != nil {
					u, err := resolveServers(servers, specURL)
					if err != nil {
						a.skipped = append(a.skipped, Skipped{Op: where, Reason: "servers: " + err.Error()})
						continue
					}
					if !safeurl.SameOrigin(u, docBase) {
						a.skipped = append(a.skipped, Skipped{Op: where, Reason: fmt.Sprintf(
							"servers: on %s, another origin than the API's (%s): its calls, and the API's credentials, go to one origin only", originOf(u), originOf(docBase))})
						continue
					}
					base = u
				}
			}
			tool, o, err := buildOperation(doc, method, path, item, op, newConverter(doc.IsOpenAPI30(), &total))
			if err != nil {
				var se *skipError
				if !errors.As(err, &se) && !isBudgetError(err) {
					return fmt.Errorf("%s: %w", where, err)
				}
				a.skipped = append(a.skipped, Skipped{Op: where, Reason: err.Error()})
				continue
			}
			if prev, dup := a.ops[tool.Name]; dup {
				return fmt.Errorf("%s and %s %s both map to tool %q", where, prev.method, prev.path, tool.Name)
			}
			if len(a.tools) >= maxTools {
				return fmt.Errorf("more than %d operations", maxTools)
			}
			o.base = strings.TrimSuffix(base.String(), "/")
			a.ops[tool.Name] = o
			a.tools = append(a.tools, tool)
		}
	}
	if a.tools == nil {
		a.tools = []*mcp.Tool{}
	}
	return nil
}

func sortedMethods(ops map[string]*openapi3.Operation) []string {
	methods := make([]string, 0, len(ops))
	for m := range ops {
		methods = append(methods, m)
	}
	rank := func(m string) int {
		if i := slices.Index(methodOrder, m); i >= 0 {
			return i
		}
		return len(methodOrder)
	}
	sort.Slice(methods, func(i, j int) bool {
		ri, rj := rank(methods[i]), rank(methods[j])
		if ri != rj {
			return ri < rj
		}
		return methods[i] < methods[j]
	})
	return methods
}

// resolveServers returns the URL of the first server, its variables
// replaced by their defaults and, if relative, resolved against the URL the
// document was fetched from. No servers means "/", as in the OpenAPI spec.
func resolveServers(servers openapi3.Servers, specURL *url.URL) (*url.URL, error) {
	raw := "/"
	if len(servers) > 0 && servers[0] != nil {
		s := servers[0]
		raw = s.URL
		for name, v := range s.Variables {
			if v != nil {
				raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
			}
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("server URL %q is not a valid URL", clip.String(safeurl.Redact(raw), clip.Message))
	}
	if !u.IsAbs() {
		if specURL == nil {
			if len(servers) == 0 {
				return nil, errors.New("the document names no server; set Options.BaseURL")
			}
			return nil, fmt.Errorf("server URL %q is relative and the document was read from a file; set Options.BaseURL", clip.String(safeurl.Redact(raw), clip.Message))
		}
		u = specURL.ResolveReference(u)
		u.RawQuery, u.Fragment = "", ""
	}
	if _, err := parseBaseURL(u.String()); err != nil {
		return nil, fmt.Errorf("server URL %q: %w", clip.String(safeurl.Redact(u.String()), clip.Message), err)
	}
	return u, nil
}

// buildOperation maps one operation to a tool. A *skipError or a schema
// budget error skips the operation; other errors fail the document.
func buildOperation(doc *openapi3.T, method, path string, item *openapi3.PathItem, op *openapi3.Operation, conv *converter) (*mcp.Tool, *operation, error) {
	name := op.OperationID
	if name == "" {
		return nil, nil, skip("no operationId")
	}
	if !toolNamePattern.MatchString(name) {
		return nil, nil, skip("operationId %q is not a valid MCP tool name (use 1 to 128 of A-Z a-z 0-9 _ . -)", clip.String(name, 140))
	}
	if method == http.MethodConnect {
		return nil, nil, skip("method CONNECT is not supported")
	}
	o := &operation{tool: name, method: method, path: path, args: map[string]*param{}}
	props := map[string]any{}
	var required []string

	for _, ref := range mergeParams(item.Parameters, op.Parameters) {
		p := ref.Value
		if p == nil {
			return nil, nil, skip("a parameter is unresolved")
		}
		if p.In == openapi3.ParameterInHeader && ignoredHeader(p.Name) {
			// The OpenAPI spec says such a definition "SHALL be ignored".
			continue
		}
		if p.In == openapi3.ParameterInCookie {
			return nil, nil, skip("parameter %q: cookie parameters are not supported", p.Name)
		}
		if prev, dup := o.args[p.Name]; dup {
			return nil, nil, skip("parameters %q in %s and in %s would be the same tool argument", p.Name, prev.in, p.In)
		}
		pp, schema, err := buildParam(p, conv)
		if err != nil {
			return nil, nil, err
		}
		o.params = append(o.params, pp)
		o.args[p.Name] = pp
		props[p.Name] = schema
		if pp.required {
			required = append(required, p.Name)
		}
	}

	if rb := op.RequestBody; rb != nil && rb.Value != nil {
		if _, clash := o.args[BodyArg]; clash {
			return nil, nil, skip("parameter %q clashes with the argument carrying the request body", BodyArg)
		}
		mt, media := jsonMedia(rb.Value.Content)
		if media == nil {
			return nil, nil, skip("request body types %s: only JSON request bodies are supported", strings.Join(contentTypes(rb.Value.Content), ", "))
		}
		schema, err := conv.convert(media.Schema)
		if err != nil {
			return nil, nil, err
		}
		if rb.Value.Description != "" {
			schema["description"] = rb.Value.Description
		}
		o.body = &body{mediaType: mt, required: rb.Value.Required}
		o.args[BodyArg] = nil
		props[BodyArg] = schema
		if rb.Value.Required {
			required = append(required, BodyArg)
		}
	}

	parts, err := parsePath(path, o.args)
	if err != nil {
		return nil, nil, err
	}
	o.parts = parts
	for n := range o.args {
		o.argNames = append(o.argNames, n)
	}
	sort.Strings(o.argNames)

	input := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		input["required"] = required
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, nil, skip("input schema: %v", err)
	}
	tool := &mcp.Tool{
		Name:        name,
		Description: description(method, path, op),
		InputSchema: json.RawMessage(raw),
		Annotations: annotations(method),
	}
	return tool, o, nil
}

// mergeParams returns the path item's parameters overridden by the
// operation's (same name and location), path item's first.
func mergeParams(pathParams, opParams openapi3.Parameters) openapi3.Parameters {
	var out openapi3.Parameters
	for _, ref := range pathParams {
		if ref == nil || ref.Value == nil || opParams.GetByInAndName(ref.Value.In, ref.Value.Name) == nil {
			out = append(out, ref)
		}
	}
	for _, ref := range opParams {
		if ref != nil {
			out = append(out, ref)
		}
	}
	return out
}

func ignoredHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Accept", "Content-Type", "Authorization":
		return true
	}
	return false
}

// buildParam checks that Call can send p and returns its property schema.
func buildParam(p *openapi3.Parameter, conv *converter) (*param, map[string]any, error) {
	sm, err := p.SerializationMethod()
	if err != nil {
		return nil, nil, skip("parameter %q: %v", p.Name, err)
	}
	ok := false
	switch p.In {
	case openapi3.ParameterInPath, openapi3.ParameterInHeader:
		ok = sm.Style == openapi3.SerializationSimple
	case openapi3.ParameterInQuery:
		switch sm.Style {
		case openapi3.SerializationForm, openapi3.SerializationSpaceDelimited,
			openapi3.SerializationPipeDelimited, openapi3.SerializationDeepObject:
			ok = true
		}
	}
	if !ok {
		return nil, nil, skip("parameter %q: style %q in %s is not supported", p.Name, sm.Style, p.In)
	}
	pp := &param{name: p.Name, in: p.In, required: p.Required, style: sm.Style, explode: sm.Explode}
	if p.In == openapi3.ParameterInQuery && sm.Style == openapi3.SerializationForm && sm.Explode && p.Schema != nil && p.Schema.Value != nil {
		pp.keys = slices.Sorted(maps.Keys(p.Schema.Value.Properties))
	}
	schemaRef := p.Schema
	if schemaRef == nil && len(p.Content) > 0 {
		_, media := jsonMedia(p.Content)
		if media == nil || len(p.Content) != 1 {
			return nil, nil, skip("parameter %q: content %s is not supported (only a single JSON media type)", p.Name, strings.Join(contentTypes(p.Content), ", "))
		}
		pp.json = true
		schemaRef = media.Schema
	}
	schema, err := conv.convert(schemaRef)
	if err != nil {
		return nil, nil, err
	}
	if p.Description != "" {
		schema["description"] = p.Description
	}
	if p.Deprecated {
		schema["deprecated"] = true
	}
	if _, has := schema["examples"]; !has && p.Example != nil {
		schema["examples"] = []any{p.Example}
	}
	return pp, schema, nil
}

// jsonMedia picks the JSON media type of content: application/json if
// listed, else the first (by name) application/*+json or */json one.
func jsonMedia(content openapi3.Content) (string, *openapi3.MediaType) {
	if mt := content["application/json"]; mt != nil {
		return "application/json", mt
	}
	for _, name := range contentTypes(content) {
		if isJSONType(name) && content[name] != nil {
			return name, content[name]
		}
	}
	return "", nil
}

func isJSONType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "/json")
}

func contentTypes(content openapi3.Content) []string {
	names := make([]string, 0, len(content))
	for name := range content {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// parsePath splits a path template into escaped literals and parameters,
// each of which must be a path parameter.
func parsePath(path string, args map[string]*param) ([]pathPart, error) {
	var parts []pathPart
	rest := path
	for rest != "" {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			parts = append(parts, pathPart{lit: escapeLiteral(rest)})
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, skip("path template has an unclosed '{'")
		}
		if i > 0 {
			parts = append(parts, pathPart{lit: escapeLiteral(rest[:i])})
		}
		name := rest[i+1 : i+j]
		if p := args[name]; p == nil || p.in != openapi3.ParameterInPath {
			return nil, skip("path template names {%s} but there is no path parameter %q", name, name)
		}
		parts = append(parts, pathPart{param: name})
		rest = rest[i+j+1:]
	}
	for _, p := range args {
		if p != nil && p.in == openapi3.ParameterInPath && !slices.Contains(parts, pathPart{param: p.name}) {
			return nil, skip("path parameter %q is not in the path template", p.name)
		}
	}
	return parts, nil
}

func escapeLiteral(s string) string { return (&url.URL{Path: s}).EscapedPath() }

func description(method, path string, op *openapi3.Operation) string {
	var parts []string
	if op.Deprecated {
		parts = append(parts, "Deprecated.")
	}
	if s := strings.TrimSpace(op.Summary); s != "" {
		parts = append(parts, s)
	}
	if d := strings.TrimSpace(op.Description); d != "" && d != strings.TrimSpace(op.Summary) {
		parts = append(parts, d)
	}
	if len(parts) == 0 || (len(parts) == 1 && op.Deprecated) {
		parts = append(parts, method+" "+path)
	}
	return strings.Join(parts, "\n\n")
}

// annotations maps HTTP method semantics (RFC 9110: safe, idempotent) to
// tool hints; nil where nothing maps cleanly.
func annotations(method string) *mcp.ToolAnnotations {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, openapi3.MethodQuery:
		return &mcp.ToolAnnotations{ReadOnlyHint: true}
	case http.MethodDelete:
		yes := true
		return &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true}
	case http.MethodPut:
		return &mcp.ToolAnnotations{IdempotentHint: true}
	}
	return nil
}
