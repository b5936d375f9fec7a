package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// loadPetstore loads testdata/petstore.yaml with calls sent to srv's /v1.
func loadPetstore(t *testing.T, srv *httptest.Server, opts Options) *API {
	t.Helper()
	if srv != nil {
		opts.BaseURL = srv.URL + "/v1"
	}
	a, err := Load(context.Background(), Source{Path: "testdata/petstore.yaml"}, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return a
}

func toolNames(tools []*mcp.Tool) []string {
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	return names
}

func findTool(t *testing.T, a *API, name string) *mcp.Tool {
	t.Helper()
	for _, tl := range a.Tools() {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q among %v", name, toolNames(a.Tools()))
	return nil
}

// assertJSON fails unless got marshals to the same JSON value as want.
func assertJSON(t *testing.T, got any, want string) {
	t.Helper()
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var g, w any
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("unmarshal got: %v", err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("unmarshal want: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got JSON\n%s\nwant\n%s", raw, want)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadFileToolsAndSkipped(t *testing.T) {
	a := loadPetstore(t, nil, Options{})
	if got, want := a.Title(), "Petstore"; got != want {
		t.Errorf("Title() = %q, want %q", got, want)
	}
	wantNames := []string{"listPets", "createPet", "getPet", "deletePet", "updatePet", "searchPets"}
	if got := toolNames(a.Tools()); !reflect.DeepEqual(got, wantNames) {
		t.Errorf("tools = %v, want %v", got, wantNames)
	}
	wantSkipped := []Skipped{
		{Op: "POST /pets/{petId}/photo", Reason: "no operationId"},
		{Op: "GET /stores/{storeId}/inventory", Reason: `operationId "store inventory" is not a valid MCP tool name (use 1 to 128 of A-Z a-z 0-9 _ . -)`},
		{Op: "POST /uploads", Reason: "request body types multipart/form-data: only JSON request bodies are supported"},
	}
	if got := a.Skipped(); !reflect.DeepEqual(got, wantSkipped) {
		t.Errorf("skipped = %+v\nwant %+v", got, wantSkipped)
	}
}

func TestInputSchemas(t *testing.T) {
	a := loadPetstore(t, nil, Options{})
	tests := []struct {
		tool string
		want string
	}{
		{"listPets", `{
			"type": "object",
			"additionalProperties": false,
			"properties": {
				"limit": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 100, "default": 20,
					"description": "How many pets to return at most."},
				"tags": {"type": "array", "items": {"type": "string"}},
				"status": {"type": "string", "enum": ["available", "pending", "sold"],
					"description": "The pet's status in the store."},
				"X-Request-ID": {"type": "string", "format": "uuid", "description": "Correlates logs."}
			}
		}`},
		// The body is nested under "body"; readOnly id is left out, also
		// from required; nullable becomes a null type; the recursive
		// parent $ref stops.
		{"createPet", `{
			"type": "object",
			"additionalProperties": false,
			"properties": {
				"X-Request-ID": {"type": "string", "format": "uuid", "description": "Correlates logs."},
				"body": {
					"type": "object",
					"description": "The pet to add.",
					"required": ["name"],
					"properties": {
						"name": {"type": "string", "minLength": 1, "examples": ["Rex"]},
						"tag": {"type": ["string", "null"]},
						"status": {"type": "string", "enum": ["available", "pending", "sold"],
							"description": "The pet's status in the store."},
						"parent": {"$comment": "recursive schema #/components/schemas/Pet not expanded"}
					}
				}
			},
			"required": ["body"]
		}`},
		// Path-level parameter merged with the operation's.
		{"getPet", `{
			"type": "object",
			"additionalProperties": false,
			"properties": {
				"petId": {"type": "string", "description": "The pet's id."},
				"fields": {"type": "array", "items": {"type": "string"}}
			},
			"required": ["petId"]
		}`},
		// An optional body is not required.
		{"updatePet", `{
			"type": "object",
			"additionalProperties": false,
			"properties": {
				"petId": {"type": "string", "description": "The pet's id."},
				"body": {"type": "object", "properties": {"name": {"type": "string"}, "tag": {"type": ["string", "null"]}}}
			},
			"required": ["petId"]
		}`},
		{"searchPets", `{
			"type": "object",
			"additionalProperties": false,
			"properties": {
				"filter": {"type": "object", "properties": {"color": {"type": "string"}, "size": {"type": "string"}}}
			}
		}`},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			assertJSON(t, findTool(t, a, tt.tool).InputSchema, tt.want)
		})
	}
}

func TestToolDescriptionsAndAnnotations(t *testing.T) {
	a := loadPetstore(t, nil, Options{})
	yes := true
	tests := []struct {
		tool string
		desc string
		ann  *mcp.ToolAnnotations
	}{
		{"listPets", "List pets\n\nReturns the pets, optionally filtered.", &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{"createPet", "Create a pet", nil},
		{"updatePet", "Changes some fields of a pet.", nil},
		{"deletePet", "Deprecated.\n\nDelete a pet", &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true}},
		{"searchPets", "GET /search", &mcp.ToolAnnotations{ReadOnlyHint: true}},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			tl := findTool(t, a, tt.tool)
			if tl.Description != tt.desc {
				t.Errorf("description = %q, want %q", tl.Description, tt.desc)
			}
			if !reflect.DeepEqual(tl.Annotations, tt.ann) {
				t.Errorf("annotations = %+v, want %+v", tl.Annotations, tt.ann)
			}
		})
	}
}

func TestLoadURL(t *testing.T) {
	spec, err := os.ReadFile("testdata/items31.json")
	if err != nil {
		t.Fatal(err)
	}
	var got recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/specs/items.json" {
			w.Header().Set("Content-Type", "application/json")
			w.Write(spec)
			return
		}
		got = record(r)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"name":"widget"}`))
	}))
	defer srv.Close()

	a, err := Load(context.Background(), Source{URL: srv.URL + "/specs/items.json"}, Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := toolNames(a.Tools()), []string{"createItem", "getItem"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tools = %v, want %v", got, want)
	}
	// OpenAPI 3.1 schemas: type arrays, numeric exclusiveMinimum, const,
	// examples.
	assertJSON(t, findTool(t, a, "getItem").InputSchema, `{
		"type": "object",
		"additionalProperties": false,
		"properties": {
			"itemId": {"type": "integer", "exclusiveMinimum": 0},
			"X-Tenant": {"type": "string"}
		},
		"required": ["itemId", "X-Tenant"]
	}`)
	assertJSON(t, findTool(t, a, "createItem").InputSchema, `{
		"type": "object",
		"additionalProperties": false,
		"properties": {
			"body": {
				"type": "object",
				"required": ["name"],
				"properties": {
					"name": {"type": "string", "examples": ["widget"]},
					"note": {"type": ["string", "null"]},
					"kind": {"const": "item"}
				}
			}
		},
		"required": ["body"]
	}`)

	// The relative server "/api" is resolved against the spec's URL.
	res, err := a.Call(context.Background(), "getItem", json.RawMessage(`{"itemId": 7, "X-Tenant": "acme"}`))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if res.IsError {
		t.Errorf("IsError = true, want false")
	}
	if got.Method != http.MethodGet || got.Path != "/api/items/7" || got.Header.Get("X-Tenant") != "acme" {
		t.Errorf("request = %s %s X-Tenant=%q, want GET /api/items/7 X-Tenant=\"acme\"", got.Method, got.Path, got.Header.Get("X-Tenant"))
	}
}

func TestLoadYAMLFromURL(t *testing.T) {
	spec, err := os.ReadFile("testdata/petstore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(spec)
	}))
	defer srv.Close()
	a, err := Load(context.Background(), Source{URL: srv.URL + "/openapi.yaml"}, Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := len(a.Tools()); got != 6 {
		t.Errorf("got %d tools, want 6", got)
	}
	// The document's absolute server, variables at their defaults.
	if got, want := a.ops["getPet"].base, "https://petstore.example.com/v1"; got != want {
		t.Errorf("base URL = %q, want %q", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big.yaml":
			w.Write([]byte("openapi: 3.0.3\n" + strings.Repeat("# padding\n", 100)))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	const head = "openapi: 3.0.3\ninfo: {title: t, version: '1'}\n"
	tests := []struct {
		name string
		src  Source
		opts Options
		is   error  // if set, errors.Is must hold
		want string // the error must contain this
	}{
		{name: "swagger 2.0", src: Source{Path: "testdata/swagger2.yaml"}, is: ErrUnsupportedVersion, want: "Swagger 2.0"},
		{name: "broken", src: Source{Path: "testdata/broken.yaml"}, want: "not valid JSON or YAML"},
		{name: "invalid", src: Source{Path: "testdata/invalid.yaml"}, want: `invalid document: invalid paths: invalid path /pets/{petId}: invalid operation GET: path parameter "petId" must be required`},
		{name: "unknown version", src: Source{Path: writeFile(t, "v4.yaml", "openapi: 4.0.0\ninfo: {title: t, version: '1'}\npaths: {}\n")}, is: ErrUnsupportedVersion, want: `"4.0.0"`},
		{name: "not openapi", src: Source{Path: writeFile(t, "x.json", `{"hello": "world"}`)}, want: "no openapi version"},
		{name: "duplicate operationId", src: Source{Path: writeFile(t, "dup.yaml", head+`paths:
  /a: {get: {operationId: same, responses: {'200': {description: ok}}}}
  /b: {get: {operationId: same, responses: {'200': {description: ok}}}}
`)}, opts: Options{BaseURL: "http://api.test"}, want: `same operation id "same"`},
		{name: "external ref", src: Source{Path: writeFile(t, "ext.yaml", head+`paths:
  /a:
    get:
      operationId: a
      parameters: [{$ref: 'other.yaml#/components/parameters/X'}]
      responses: {'200': {description: ok}}
`)}, opts: Options{BaseURL: "http://api.test"}, want: "disallowed external reference"},
		{name: "missing file", src: Source{Path: "testdata/nope.yaml"}, is: os.ErrNotExist},
		{name: "file too large", src: Source{Path: "testdata/petstore.yaml"}, opts: Options{MaxSpecBytes: 64}, want: "larger than 64 bytes"},
		{name: "URL too large", src: Source{URL: srv.URL + "/big.yaml"}, opts: Options{MaxSpecBytes: 100}, want: "larger than 100 bytes"},
		{name: "URL not found", src: Source{URL: srv.URL + "/missing.yaml"}, want: "HTTP 404"},
		{name: "URL scheme", src: Source{URL: "file:///etc/passwd"}, want: "scheme must be http or https"},
		{name: "no source", src: Source{}, want: "neither a URL nor a path"},
		{name: "two sources", src: Source{URL: srv.URL, Path: "testdata/petstore.yaml"}, want: "both a URL and a path"},
		{name: "relative server from file", src: Source{Path: "testdata/items31.json"}, want: `server URL "/api" is relative and the document was read from a file; set Options.BaseURL`},
		{name: "no servers from file", src: Source{Path: writeFile(t, "nosrv.yaml", head+"paths:\n  /a: {get: {operationId: a, responses: {'200': {description: ok}}}}\n")}, want: "names no server; set Options.BaseURL"},
		{name: "base URL with query", src: Source{Path: "testdata/petstore.yaml"}, opts: Options{BaseURL: "http://api.test/?key=x"}, want: "base URL: must not have a query"},
		{name: "base URL with credentials", src: Source{Path: "testdata/petstore.yaml"}, opts: Options{BaseURL: "http://u:p@api.test/"}, want: "base URL: must not carry credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Load(context.Background(), tt.src, tt.opts)
			if err == nil {
				t.Fatalf("Load succeeded with %d tools, want an error", len(a.Tools()))
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestSkippedOperations(t *testing.T) {
	doc := `openapi: 3.0.3
info: {title: t, version: '1'}
paths:
  /cookie:
    get:
      operationId: withCookie
      parameters: [{name: session, in: cookie, schema: {type: string}}]
      responses: {'200': {description: ok}}
  /matrix/{id}:
    get:
      operationId: withMatrix
      parameters: [{name: id, in: path, required: true, style: matrix, schema: {type: string}}]
      responses: {'200': {description: ok}}
  /clash/{id}:
    get:
      operationId: withClash
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: id, in: query, schema: {type: string}}
      responses: {'200': {description: ok}}
  /body:
    post:
      operationId: withBodyParam
      parameters: [{name: body, in: query, schema: {type: string}}]
      requestBody: {content: {application/json: {schema: {type: object}}}}
      responses: {'200': {description: ok}}
  /content:
    get:
      operationId: withXMLParam
      parameters: [{name: q, in: query, content: {application/xml: {schema: {type: object}}}}]
      responses: {'200': {description: ok}}
  /fine:
    get:
      operationId: fine
      parameters:
        - {name: Authorization, in: header, schema: {type: string}}
        - {name: q, in: query, content: {application/json: {schema: {type: object}}}}
      responses: {'200': {description: ok}}
`
	a, err := Load(context.Background(), Source{Path: writeFile(t, "skips.yaml", doc)}, Options{BaseURL: "http://api.test"})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := []Skipped{
		{Op: "POST /body", Reason: `parameter "body" clashes with the argument carrying the request body`},
		{Op: "GET /clash/{id}", Reason: `parameters "id" in path and in query would be the same tool argument`},
		{Op: "GET /content", Reason: `parameter "q": content application/xml is not supported (only a single JSON media type)`},
		{Op: "GET /cookie", Reason: `parameter "session": cookie parameters are not supported`},
		{Op: "GET /matrix/{id}", Reason: `parameter "id": style "matrix" in path is not supported`},
	}
	if got := a.Skipped(); !reflect.DeepEqual(got, want) {
		t.Errorf("skipped =\n%+v\nwant\n%+v", got, want)
	}
	if got := toolNames(a.Tools()); !reflect.DeepEqual(got, []string{"fine"}) {
		t.Fatalf("tools = %v, want [fine]", got)
	}
	// The Authorization header parameter is ignored, as the spec says.
	assertJSON(t, a.Tools()[0].InputSchema, `{
		"type": "object",
		"additionalProperties": false,
		"properties": {"q": {"type": "object"}}
	}`)
}

func TestSchemaBudget(t *testing.T) {
	// Each level refers to the next twice: 2^15 schema objects inlined.
	var b strings.Builder
	b.WriteString("openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /a:\n    post:\n      operationId: big\n      requestBody: {content: {application/json: {schema: {$ref: '#/components/schemas/L0'}}}}\n      responses: {'200': {description: ok}}\ncomponents:\n  schemas:\n")
	for i := 0; i < 15; i++ {
		b.WriteString("    L" + strconv.Itoa(i) + ": {type: object, properties: {a: {$ref: '#/components/schemas/L" + strconv.Itoa(i+1) + "'}, b: {$ref: '#/components/schemas/L" + strconv.Itoa(i+1) + "'}}}\n")
	}
	b.WriteString("    L15: {type: string}\n")
	a, err := Load(context.Background(), Source{Path: writeFile(t, "big.yaml", b.String())}, Options{BaseURL: "http://api.test"})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(a.Tools()) != 0 || len(a.Skipped()) != 1 || !strings.Contains(a.Skipped()[0].Reason, "more than 10000 schema objects") {
		t.Errorf("tools %v, skipped %+v; want the operation skipped for its schema size", toolNames(a.Tools()), a.Skipped())
	}
}

// Every call goes to one origin: operations whose own servers name another
// are skipped (others on the same origin keep their path), and a reload
// pinned to an origin refuses a document that moved.
func TestOneOrigin(t *testing.T) {
	ok := `responses: {'200': {description: ok}}`
	doc := "openapi: 3.0.3\ninfo: {title: t, version: '1'}\nservers: [{url: 'http://api.test/v1'}]\npaths:\n" +
		"  /a: {get: {operationId: a, " + ok + "}}\n" +
		"  /b: {get: {operationId: b, servers: [{url: 'http://API.test:80/v2'}], " + ok + "}}\n" +
		"  /c: {get: {operationId: c, servers: [{url: 'http://evil.test/x'}], " + ok + "}}\n" +
		"  /d: {servers: [{url: 'https://api.test/v1'}], get: {operationId: d, " + ok + "}}\n"
	path := writeFile(t, "origins.yaml", doc)
	a, err := Load(context.Background(), Source{Path: path}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Origin() != "http://api.test" {
		t.Errorf("origin %q, want http://api.test", a.Origin())
	}
	var names []string
	for _, tool := range a.Tools() {
		names = append(names, tool.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("tools %v, want a and b (c and d are on other origins)", names)
	}
	for _, s := range a.Skipped() {
		if !strings.Contains(s.Reason, "another origin") {
			t.Errorf("skipped %s: %s", s.Op, s.Reason)
		}
	}
	if len(a.Skipped()) != 2 {
		t.Errorf("skipped %v, want c and d", a.Skipped())
	}
	if _, err := Load(context.Background(), Source{Path: path}, Options{Origin: "http://api.test"}); err != nil {
		t.Errorf("reload on the same origin: %v", err)
	}
	if _, err := Load(context.Background(), Source{Path: path}, Options{Origin: "http://old.test"}); !errors.Is(err, ErrOriginChanged) {
		t.Errorf("reload pinned elsewhere: %v, want ErrOriginChanged", err)
	}
}
