package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// recorded is what the test API server received.
type recorded struct {
	Method string
	Path   string // escaped, as sent
	Query  string // raw, as sent
	Header http.Header
	Body   string
}

func record(r *http.Request) recorded {
	body, _ := io.ReadAll(r.Body)
	return recorded{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: string(body)}
}

// apiServer records each request on the returned channel, then answers
// with respond.
func apiServer(t *testing.T, respond http.HandlerFunc) (*httptest.Server, chan recorded) {
	t.Helper()
	reqs := make(chan recorded, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs <- record(r)
		respond(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, reqs
}

func jsonAnswer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// received returns the request the server got, failing if there is none.
func received(t *testing.T, reqs chan recorded) recorded {
	t.Helper()
	select {
	case r := <-reqs:
		return r
	default:
		t.Fatal("the server received no request")
		return recorded{}
	}
}

func noRequest(t *testing.T, reqs chan recorded) {
	t.Helper()
	select {
	case r := <-reqs:
		t.Errorf("the server received %s %s, want no request", r.Method, r.Path)
	default:
	}
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("got %d content items, want 1", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want *mcp.TextContent", res.Content[0])
	}
	return tc.Text
}

func TestCallBuildsRequest(t *testing.T) {
	srv, reqs := apiServer(t, jsonAnswer(200, `{}`))
	a := loadPetstore(t, srv, Options{})
	tests := []struct {
		name        string
		tool        string
		args        string
		method      string
		path        string
		query       string
		header      map[string]string // "" means absent
		body        string
		contentType string
	}{
		{
			name: "query and header params", tool: "listPets",
			args:   `{"limit": 5, "tags": ["a", "b c"], "status": "sold", "X-Request-ID": "r-1"}`,
			method: "GET", path: "/v1/pets", query: "limit=5&status=sold&tags=a&tags=b+c",
			header: map[string]string{"X-Request-Id": "r-1"},
		},
		{
			name: "no arguments", tool: "listPets", args: ``,
			method: "GET", path: "/v1/pets",
			header: map[string]string{"X-Request-Id": ""},
		},
		{
			name: "null arguments and null optional values", tool: "listPets", args: `{"limit": null}`,
			method: "GET", path: "/v1/pets",
		},
		{
			name: "path param escaped, non-exploded array", tool: "getPet",
			args:   `{"petId": "a/b c", "fields": ["name", "tag"]}`,
			method: "GET", path: "/v1/pets/a%2Fb%20c", query: "fields=name%2Ctag",
		},
		{
			name: "JSON body", tool: "createPet",
			args:   `{"body": {"name": "Rex", "tag": null}, "X-Request-ID": "r-2"}`,
			method: "POST", path: "/v1/pets",
			header: map[string]string{"X-Request-Id": "r-2"},
			body:   `{"name": "Rex", "tag": null}`, contentType: "application/json",
		},
		{
			name: "JSON body of a +json type", tool: "updatePet",
			args:   `{"petId": "7", "body": {"name": "Max"}}`,
			method: "PATCH", path: "/v1/pets/7",
			body: `{"name": "Max"}`, contentType: "application/merge-patch+json",
		},
		{
			name: "optional body left out", tool: "updatePet", args: `{"petId": "7"}`,
			method: "PATCH", path: "/v1/pets/7",
		},
		{
			name: "delete", tool: "deletePet", args: `{"petId": "7"}`,
			method: "DELETE", path: "/v1/pets/7",
		},
		{
			name: "deepObject", tool: "searchPets", args: `{"filter": {"size": "S", "color": "red"}}`,
			method: "GET", path: "/v1/search", query: "filter%5Bcolor%5D=red&filter%5Bsize%5D=S",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := a.Call(context.Background(), tt.tool, json.RawMessage(tt.args))
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			if res.IsError {
				t.Errorf("IsError = true, want false")
			}
			got := received(t, reqs)
			if got.Method != tt.method || got.Path != tt.path || got.Query != tt.query {
				t.Errorf("request = %s %s ? %s, want %s %s ? %s", got.Method, got.Path, got.Query, tt.method, tt.path, tt.query)
			}
			for k, v := range tt.header {
				if g := got.Header.Get(k); g != v {
					t.Errorf("header %s = %q, want %q", k, g, v)
				}
			}
			if g, w := got.Header.Get("Accept"), "application/json, */*;q=0.5"; g != w {
				t.Errorf("Accept = %q, want %q", g, w)
			}
			if got.Body != tt.body {
				t.Errorf("body = %q, want %q", got.Body, tt.body)
			}
			if g := got.Header.Get("Content-Type"); g != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", g, tt.contentType)
			}
		})
	}
}

func TestCallHeaderOption(t *testing.T) {
	srv, reqs := apiServer(t, jsonAnswer(503, `{"error": "down"}`))
	a := loadPetstore(t, srv, Options{Header: http.Header{
		"Authorization": {"Bearer s3cret-token"},
		"X-Request-ID":  {"fixed"},
	}})
	_, err := a.Call(context.Background(), "listPets", json.RawMessage(`{"X-Request-ID": "from-args", "status": "q-s3cret"}`))
	got := received(t, reqs)
	if g := got.Header.Get("Authorization"); g != "Bearer s3cret-token" {
		t.Errorf("Authorization = %q, want the configured one", g)
	}
	if g := got.Header.Values("X-Request-Id"); !reflect.DeepEqual(g, []string{"fixed"}) {
		t.Errorf("X-Request-ID = %q, want the configured value only", g)
	}
	if err == nil {
		t.Fatal("Call succeeded on HTTP 503")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q leaks a header or query value", err)
	}
}

func TestCallJSONResult(t *testing.T) {
	srv, reqs := apiServer(t, jsonAnswer(200, `{"id": 12345678901234567890, "name": "Rex"}`))
	a := loadPetstore(t, srv, Options{})
	res, err := a.Call(context.Background(), "getPet", json.RawMessage(`{"petId": "7"}`))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	received(t, reqs)
	if res.IsError {
		t.Error("IsError = true, want false")
	}
	if got, want := text(t, res), `{"id": 12345678901234567890, "name": "Rex"}`; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	want := map[string]any{"id": json.Number("12345678901234567890"), "name": "Rex"}
	if !reflect.DeepEqual(res.StructuredContent, want) {
		t.Errorf("structured content = %#v, want %#v", res.StructuredContent, want)
	}
}

func TestCallOtherResults(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00")
	tests := []struct {
		name        string
		respond     http.HandlerFunc
		text        string
		structured  any
		image       []byte
		wantIsError bool
	}{
		{
			name:    "JSON array: text only",
			respond: jsonAnswer(200, `[{"name": "Rex"}]`),
			text:    `[{"name": "Rex"}]`,
		},
		{
			name:    "JSON that does not decode: text only",
			respond: jsonAnswer(200, `{"name": `),
			text:    `{"name": `,
		},
		{
			name: "plain text",
			respond: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				io.WriteString(w, `{"not": "json by its type"}`)
			},
			text: `{"not": "json by its type"}`,
		},
		{
			name:    "empty 204",
			respond: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
			text:    "HTTP 204 No Content (empty body)",
		},
		{
			name: "image",
			respond: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "image/png")
				w.Write(png)
			},
			image: png,
		},
		{
			name: "binary",
			respond: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Write([]byte{0xff, 0xfe, 0x00})
			},
			text: "(binary response of 3 bytes, application/octet-stream, not shown)",
		},
		{
			name:        "4xx is a tool error",
			respond:     jsonAnswer(404, `{"message": "no such pet"}`),
			text:        "HTTP 404 Not Found\n\n{\"message\": \"no such pet\"}",
			wantIsError: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, reqs := apiServer(t, tt.respond)
			a := loadPetstore(t, srv, Options{})
			res, err := a.Call(context.Background(), "getPet", json.RawMessage(`{"petId": "7"}`))
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			received(t, reqs)
			if res.IsError != tt.wantIsError {
				t.Errorf("IsError = %v, want %v", res.IsError, tt.wantIsError)
			}
			if res.StructuredContent != nil {
				t.Errorf("structured content = %#v, want none", res.StructuredContent)
			}
			if tt.image != nil {
				img, ok := res.Content[0].(*mcp.ImageContent)
				if !ok || string(img.Data) != string(tt.image) || img.MIMEType != "image/png" {
					t.Errorf("content = %#v, want the PNG as image content", res.Content[0])
				}
				return
			}
			if got := text(t, res); got != tt.text {
				t.Errorf("text = %q, want %q", got, tt.text)
			}
		})
	}
}

func TestCall5xxIsInfrastructureError(t *testing.T) {
	for _, status := range []int{500, 502, 503} {
		srv, reqs := apiServer(t, jsonAnswer(status, `{"error": "overloaded"}`))
		a := loadPetstore(t, srv, Options{})
		res, err := a.Call(context.Background(), "getPet", json.RawMessage(`{"petId": "7"}`))
		received(t, reqs)
		var se *StatusError
		if !errors.As(err, &se) {
			t.Fatalf("HTTP %d: got result %v, error %v; want a *StatusError", status, res, err)
		}
		if se.StatusCode != status || se.Tool != "getPet" || se.Method != "GET" || se.Path != "/pets/{petId}" || !se.Infrastructure() {
			t.Errorf("HTTP %d: got %+v", status, se)
		}
		if string(se.Body) != `{"error": "overloaded"}` {
			t.Errorf("HTTP %d: body = %q", status, se.Body)
		}
		if res != nil {
			t.Errorf("HTTP %d: got a result besides the error", status)
		}
	}
}

// A 429 or 503 is the API pushing back, not the caller's problem: a
// *StatusError with its Retry-After.
func TestCallBackPressureCarriesRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		status int
		header string
		want   time.Duration
	}{{429, "3", 3 * time.Second}, {503, "2", 2 * time.Second}, {429, "", 0}, {502, "3", 0}} {
		srv, reqs := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
			if tt.header != "" {
				w.Header().Set("Retry-After", tt.header)
			}
			w.WriteHeader(tt.status)
		})
		a := loadPetstore(t, srv, Options{})
		_, err := a.Call(context.Background(), "getPet", json.RawMessage(`{"petId": "7"}`))
		received(t, reqs)
		var se *StatusError
		if !errors.As(err, &se) || se.StatusCode != tt.status || se.RetryAfter != tt.want {
			t.Errorf("HTTP %d, Retry-After %q: %v; want a *StatusError retrying after %v", tt.status, tt.header, err, tt.want)
		}
	}
}

func TestCallArgsErrors(t *testing.T) {
	srv, reqs := apiServer(t, jsonAnswer(200, `{}`))
	a := loadPetstore(t, srv, Options{})
	tests := []struct {
		name string
		tool string
		args string
		want []ArgProblem
	}{
		{"missing path param", "getPet", `{}`, []ArgProblem{{"petId", "required path parameter is missing"}}},
		{"null path param", "getPet", `{"petId": null}`, []ArgProblem{{"petId", "required path parameter is missing"}}},
		{"empty path param", "getPet", `{"petId": ""}`, []ArgProblem{{"petId", "path parameter must not be empty"}}},
		{"dot path param", "getPet", `{"petId": "."}`, []ArgProblem{{"petId", `path parameter must not be "." or ".."`}}},
		{"dot-dot path param", "deletePet", `{"petId": ".."}`, []ArgProblem{{"petId", `path parameter must not be "." or ".."`}}},
		{"missing body", "createPet", `{}`, []ArgProblem{{"body", "required request body is missing"}}},
		{"unknown argument", "getPet", `{"petid": "7", "petId": "7"}`, []ArgProblem{{"petid", "unknown argument (known: fields, petId)"}}},
		{"body fields flattened", "createPet", `{"name": "Rex"}`, []ArgProblem{
			{"name", "unknown argument (known: X-Request-ID, body)"},
			{"body", "required request body is missing"},
		}},
		{"not an object", "getPet", `["7"]`, []ArgProblem{{"", "arguments must be a JSON object"}}},
		{"not JSON", "getPet", `{"petId": `, []ArgProblem{{"", "arguments must be a JSON object"}}},
		{"nested array in query", "listPets", `{"tags": [["a"]]}`, []ArgProblem{{"tags", "array items and object values must be strings, numbers or booleans"}}},
		{"object in path", "getPet", `{"petId": {"a": {"b": 1}}}`, []ArgProblem{{"petId", "array items and object values must be strings, numbers or booleans"}}},
		{"header with newline", "listPets", `{"X-Request-ID": "a\r\nX-Evil: 1"}`, []ArgProblem{{"X-Request-ID", "header value must not contain control characters"}}},
		{"deepObject not an object", "searchPets", `{"filter": "red"}`, []ArgProblem{{"filter", "must be an object (deepObject style)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := a.Call(context.Background(), tt.tool, json.RawMessage(tt.args))
			var ae *ArgsError
			if !errors.As(err, &ae) {
				t.Fatalf("got result %v, error %v; want an *ArgsError", res, err)
			}
			if ae.Tool != tt.tool || !reflect.DeepEqual(ae.Problems, tt.want) {
				t.Errorf("got %s %+v, want %s %+v", ae.Tool, ae.Problems, tt.tool, tt.want)
			}
			noRequest(t, reqs)
		})
	}

	// The message names the argument, not its value.
	_, err := a.Call(context.Background(), "listPets", json.RawMessage(`{"X-Request-ID": "s3cret\n"}`))
	if got, want := err.Error(), `tool "listPets": invalid arguments: argument "X-Request-ID": header value must not contain control characters`; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

// TestCallSendsOnlyWhatIsDeclared: a caller cannot reach another path
// with dot segments, nor add query parameters the operation does not
// declare through an object whose members become parameters.
func TestCallSendsOnlyWhatIsDeclared(t *testing.T) {
	srv, reqs := apiServer(t, jsonAnswer(200, `{}`))
	spec := writeFile(t, "api.yaml", `
openapi: 3.0.3
info: {title: Users, version: "1"}
paths:
  /users/{id}/profile:
    get:
      operationId: getProfile
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - name: page
          in: query
          schema:
            type: object
            properties:
              size: {type: integer}
              cursor: {type: string}
        - name: extra
          in: query
          schema: {type: object}
      responses:
        '200': {description: ok}
`)
	a, err := Load(context.Background(), Source{Path: spec}, Options{BaseURL: srv.URL + "/api/v1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args string
		want []ArgProblem
	}{
		{`{"id": ".."}`, []ArgProblem{{"id", `path parameter must not be "." or ".."`}}},
		{`{"id": "."}`, []ArgProblem{{"id", `path parameter must not be "." or ".."`}}},
		{`{"id": "7", "page": {"size": 2, "admin": "true"}}`, []ArgProblem{{"page", `unknown key "admin" (known: cursor, size)`}}},
		{`{"id": "7", "extra": {"api_key": "x"}}`, []ArgProblem{{"extra", `unknown key "api_key" (the parameter declares no properties)`}}},
		{`{"id": "7", "admin": "true"}`, []ArgProblem{{"admin", "unknown argument (known: extra, id, page)"}}},
	} {
		_, err := a.Call(context.Background(), "getProfile", json.RawMessage(tc.args))
		var ae *ArgsError
		if !errors.As(err, &ae) || !reflect.DeepEqual(ae.Problems, tc.want) {
			t.Errorf("%s: got %v, want %+v", tc.args, err, tc.want)
		}
		noRequest(t, reqs)
	}
	// What is declared still goes through; values that look like dot
	// segments or query syntax are escaped.
	for _, tc := range []struct{ args, path, query string }{
		{`{"id": "7", "page": {"size": 2, "cursor": "a&admin=true"}}`, "/api/v1/users/7/profile", "cursor=a%26admin%3Dtrue&size=2"},
		{`{"id": "..%2F"}`, "/api/v1/users/..%252F/profile", ""},
		{`{"id": "a/../b"}`, "/api/v1/users/a%2F..%2Fb/profile", ""},
	} {
		if _, err := a.Call(context.Background(), "getProfile", json.RawMessage(tc.args)); err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		if got := received(t, reqs); got.Path != tc.path || got.Query != tc.query {
			t.Errorf("%s: sent %s ? %s, want %s ? %s", tc.args, got.Path, got.Query, tc.path, tc.query)
		}
	}
}

// TestCallLargeJSONBodyIsSentOnce: a JSON body past MaxStructuredBytes is
// text only, not text and structured content.
func TestCallLargeJSONBodyIsSentOnce(t *testing.T) {
	big := `{"data":"` + strings.Repeat("<", MaxStructuredBytes) + `"}`
	srv, reqs := apiServer(t, jsonAnswer(200, big))
	a := loadPetstore(t, srv, Options{MaxResponseBytes: 4 << 20})
	res, err := a.Call(context.Background(), "getPet", json.RawMessage(`{"petId": "7"}`))
	if err != nil {
		t.Fatal(err)
	}
	received(t, reqs)
	if text(t, res) != big || res.StructuredContent != nil {
		t.Errorf("got %d bytes of text and structured content %T, want the body once, as text", len(text(t, res)), res.StructuredContent)
	}
}

func TestCallUnknownTool(t *testing.T) {
	a := loadPetstore(t, nil, Options{})
	_, err := a.Call(context.Background(), "nope", nil)
	if !errors.Is(err, ErrUnknownTool) {
		t.Errorf("error = %v, want ErrUnknownTool", err)
	}
}

func TestCallTruncatesLargeResponse(t *testing.T) {
	body := `{"name":"` + strings.Repeat("é", 40) + `"}` // 9 bytes, then 2 per é
	srv, reqs := apiServer(t, jsonAnswer(200, body))
	a := loadPetstore(t, srv, Options{MaxResponseBytes: 16})
	res, err := a.Call(context.Background(), "getPet", json.RawMessage(`{"petId": "7"}`))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	received(t, reqs)
	// 16 bytes end inside an "é"; the partial character is dropped.
	want := body[:15] + "\n\n[response truncated: only its first 16 bytes are shown]"
	if got := text(t, res); got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	if res.StructuredContent != nil {
		t.Errorf("structured content = %#v, want none for a truncated body", res.StructuredContent)
	}
}

func TestCallContextCanceled(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	srv, reqs := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(started) })
		<-r.Context().Done()
	})
	a := loadPetstore(t, srv, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	res, err := a.Call(ctx, "getPet", json.RawMessage(`{"petId": "7"}`))
	var te *TransportError
	if !errors.As(err, &te) {
		t.Fatalf("got result %v, error %v; want a *TransportError", res, err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
	if te.Infrastructure() {
		t.Error("a canceled call counts as an infrastructure failure")
	}
	received(t, reqs)
}

func TestCallConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	a := loadPetstore(t, srv, Options{})
	_, err := a.Call(context.Background(), "listPets", json.RawMessage(`{"status": "s3cret"}`))
	var te *TransportError
	if !errors.As(err, &te) || !te.Infrastructure() {
		t.Fatalf("error = %v, want an infrastructure *TransportError", err)
	}
	if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), srv.URL) {
		t.Errorf("error %q repeats the request URL", err)
	}
}

func TestCallRedirects(t *testing.T) {
	other, otherReqs := apiServer(t, jsonAnswer(200, `{"where": "other"}`))
	srv, reqs := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/pets/same":
			http.Redirect(w, r, "/v1/pets/target", http.StatusTemporaryRedirect)
		case "/v1/pets/other":
			http.Redirect(w, r, other.URL+"/v1/pets/target", http.StatusTemporaryRedirect)
		default:
			jsonAnswer(200, `{"where": "target"}`)(w, r)
		}
	})
	a := loadPetstore(t, srv, Options{Header: http.Header{"Authorization": {"Bearer k"}}})

	res, err := a.Call(context.Background(), "getPet", json.RawMessage(`{"petId": "same"}`))
	if err != nil {
		t.Fatalf("same-host redirect: %v", err)
	}
	if got := text(t, res); got != `{"where": "target"}` {
		t.Errorf("same-host redirect: text = %q", got)
	}
	received(t, reqs)
	if got := received(t, reqs); got.Path != "/v1/pets/target" || got.Header.Get("Authorization") != "Bearer k" {
		t.Errorf("same-host redirect: second request %s with Authorization %q", got.Path, got.Header.Get("Authorization"))
	}

	_, err = a.Call(context.Background(), "getPet", json.RawMessage(`{"petId": "other"}`))
	var te *TransportError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "refused redirect") {
		t.Errorf("cross-host redirect: error = %v, want a refused redirect", err)
	}
	received(t, reqs)
	noRequest(t, otherReqs)
}

// TestMCPServer serves the tools from an MCP server and calls one through
// an MCP client, in memory: the SDK accepts the tools as they are.
func TestMCPServer(t *testing.T) {
	srv, reqs := apiServer(t, jsonAnswer(200, `{"name": "Rex"}`))
	a := loadPetstore(t, srv, Options{})
	server := mcp.NewServer(&mcp.Implementation{Name: "petstore"}, nil)
	for _, tool := range a.Tools() {
		server.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return a.Call(ctx, req.Params.Name, req.Params.Arguments)
		})
	}
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	if got := len(list.Tools); got != len(a.Tools()) {
		t.Errorf("listed %d tools, want %d", got, len(a.Tools()))
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "getPet", Arguments: map[string]any{"petId": "7"}})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if got := received(t, reqs); got.Path != "/v1/pets/7" {
		t.Errorf("path = %q, want /v1/pets/7", got.Path)
	}
	if !reflect.DeepEqual(res.StructuredContent, map[string]any{"name": "Rex"}) {
		t.Errorf("structured content = %#v", res.StructuredContent)
	}
}
