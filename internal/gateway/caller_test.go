package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/auth/authtest"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// iamTestHeader stands in, in these in-process tests, for the IAM caller
// that Lambda's request context carries under AWS_IAM.
const iamTestHeader = "X-Test-Iam-Caller"

// idHarness is a gateway accepting keys, tokens from a local issuer, and
// IAM callers.
type idHarness struct {
	*harness
	iss *authtest.Issuer
}

func newIDHarness(t *testing.T, oauth func(*auth.OAuthOptions), grants string) *idHarness {
	t.Helper()
	h := newHarness(t)
	iss := authtest.NewIssuer(t)
	opts := auth.OAuthOptions{Issuer: iss.URL}
	if oauth != nil {
		oauth(&opts)
	}
	o, err := auth.NewOAuth(opts)
	if err != nil {
		t.Fatal(err)
	}
	g, err := auth.ParseIAMGrants(grants)
	if err != nil {
		t.Fatal(err)
	}
	pool := upstream.New(upstream.Options{AllowLocal: true})
	t.Cleanup(pool.Close)
	var base string
	gw, err := New(Deps{
		Auth:     auth.New(h.env.Client, h.env.Tables.Keys, auth.Options{OAuth: o, IAM: g}),
		Registry: registry.New(h.env.Client, h.env.Tables.Servers, registry.Options{CacheTTL: -1}),
		Limiter:  lease.New(h.env.Client, h.env.Tables.Leases, lease.Options{}),
		Upstream: pool,
	}, Options{
		Logger:    slog.New(slog.NewJSONHandler(h.logs, nil)),
		PublicURL: func(*http.Request) string { return base },
		IAMCaller: func(r *http.Request) string { return r.Header.Get(iamTestHeader) },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	base, h.url = srv.URL, srv.URL
	return &idHarness{harness: h, iss: iss}
}

// send makes a request with the given headers.
func (h *harness) send(method, path string, hdr http.Header, body string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header = hdr.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

const (
	echoCall    = `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`
	mcpToolList = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
)

func bearerHeader(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

// logRecords returns the request records the gateway logged.
func (h *harness) logRecords() []map[string]any {
	var out []map[string]any
	for line := range bytes.SplitSeq([]byte(h.logs.String()), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

func TestOAuthTokens(t *testing.T) {
	h := newIDHarness(t, nil, "")
	mcpAud := h.url + "/mcp"
	prm := h.url + metadataPath

	tok := h.iss.Token("alice@example.com", mcpAud, "mcp:demo", "openid")
	if r := h.send("POST", "/mcp-rest/tools/call", bearerHeader(tok), echoCall); r.status != 200 {
		t.Fatalf("valid token: %d %s", r.status, r.body)
	}
	if r := h.send("POST", "/mcp/demo", bearerHeader(tok), mcpToolList); r.status != 200 || !strings.Contains(string(r.body), `"echo"`) {
		t.Fatalf("valid token on /mcp/demo: %d %s", r.status, r.body)
	}
	recs := h.logRecords()
	last := recs[len(recs)-1]
	if p, _ := last["principal"].(string); !strings.HasPrefix(p, "oauth:") || last["sub"] != "alice@example.com" {
		t.Errorf("log record %v: want principal oauth:<hash> and sub", last)
	}
	if strings.Contains(h.logs.String(), tok) || strings.Contains(h.logs.String(), strings.Split(tok, ".")[2]) {
		t.Fatal("the token appears in the logs")
	}

	t.Run("no credentials", func(t *testing.T) {
		for path, want := range map[string]string{
			"/mcp/demo":            `Bearer resource_metadata="` + prm + `/mcp/demo", scope="mcp:demo"`,
			"/mcp":                 `Bearer resource_metadata="` + prm + `/mcp"`,
			"/mcp-rest/tools/call": `Bearer resource_metadata="` + prm + `"`,
		} {
			r := h.send("POST", path, nil, echoCall)
			h.expectFault(r, 401, fault.Unauthorized)
			if got := r.header.Get("WWW-Authenticate"); got != want {
				t.Errorf("%s: WWW-Authenticate = %q, want %q", path, got, want)
			}
		}
	})

	t.Run("refused tokens", func(t *testing.T) {
		for name, bad := range h.iss.Hostile("mallory", mcpAud) {
			r := h.send("POST", "/mcp-rest/tools/call", bearerHeader(bad), echoCall)
			if r.status != 401 {
				t.Errorf("%s: status %d %s, want 401", name, r.status, r.body)
				continue
			}
			h.expectFault(r, 401, fault.Unauthorized)
			want := `Bearer resource_metadata="` + prm + `", error="invalid_token"`
			if got := r.header.Get("WWW-Authenticate"); got != want {
				t.Errorf("%s: WWW-Authenticate = %q, want %q", name, got, want)
			}
		}
	})

	t.Run("missing scope", func(t *testing.T) {
		other := h.iss.Token("bob", mcpAud, "mcp:other")
		for _, tc := range []struct{ path, body, prm string }{
			{"/mcp-rest/tools/call", echoCall, prm},
			{"/mcp/demo", mcpToolList, prm + "/mcp/demo"},
		} {
			r := h.send("POST", tc.path, bearerHeader(other), tc.body)
			d := h.expectFault(r, 403, fault.Forbidden)
			want := `Bearer error="insufficient_scope", scope="mcp:demo", resource_metadata="` + tc.prm + `"`
			if got := r.header.Get("WWW-Authenticate"); got != want {
				t.Errorf("%s: WWW-Authenticate = %q, want %q", tc.path, got, want)
			}
			if !strings.Contains(d.Message, "mcp:demo") {
				t.Errorf("%s: message %q does not name the scope", tc.path, d.Message)
			}
		}
		// On the aggregated endpoint a server not granted is not listed.
		r := h.send("POST", "/mcp", bearerHeader(other), mcpToolList)
		if r.status != 200 || strings.Contains(string(r.body), "demo-") {
			t.Errorf("/mcp with scope mcp:other lists %s", r.body)
		}
	})

	t.Run("audience of one server", func(t *testing.T) {
		// A token asked for the resource <base>/mcp/demo (RFC 8707) is
		// good there and nowhere else.
		scoped := h.iss.Token("carol", h.url+"/mcp/demo", "mcp:*")
		if r := h.send("POST", "/mcp/demo", bearerHeader(scoped), mcpToolList); r.status != 200 {
			t.Errorf("/mcp/demo: %d %s", r.status, r.body)
		}
		h.expectFault(h.send("POST", "/mcp-rest/tools/call", bearerHeader(scoped), echoCall), 401, fault.Unauthorized)
		h.expectFault(h.send("POST", "/mcp", bearerHeader(scoped), mcpToolList), 401, fault.Unauthorized)
	})
}

func TestProtectedResourceMetadata(t *testing.T) {
	h := newIDHarness(t, nil, "")
	for path, want := range map[string]map[string]any{
		metadataPath:                {"resource": h.url, "scopes_supported": []any{"mcp:*"}},
		metadataPath + "/mcp":       {"resource": h.url + "/mcp", "scopes_supported": []any{"mcp:*"}},
		metadataPath + "/mcp/demo":  {"resource": h.url + "/mcp/demo", "scopes_supported": []any{"mcp:demo"}},
		metadataPath + "/mcp/nope9": {"resource": h.url + "/mcp/nope9", "scopes_supported": []any{"mcp:nope9"}},
	} {
		r := h.send("GET", path, nil, "")
		if r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		var doc map[string]any
		if err := json.Unmarshal(r.body, &doc); err != nil {
			t.Fatal(err)
		}
		want["authorization_servers"] = []any{h.iss.URL}
		want["bearer_methods_supported"] = []any{"header"}
		for k, v := range want {
			if got, _ := json.Marshal(doc[k]); string(got) != mustJSON(v) {
				t.Errorf("%s: %s = %s, want %s", path, k, got, mustJSON(v))
			}
		}
		if r.header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("%s: not readable cross-origin", path)
		}
	}
	h.expectFault(h.send("GET", metadataPath+"/mcp/a-b", nil, ""), 404, fault.NotFound)
	h.expectFault(h.send("GET", metadataPath+"/other", nil, ""), 404, fault.NotFound)
	h.expectFault(h.send("POST", metadataPath, nil, "{}"), 405, fault.MethodNotAllowed)

	// Without an issuer there is no metadata, and 401s say nothing of it.
	plain := newHarness(t)
	plain.expectFault(plain.send("GET", metadataPath+"/mcp", nil, ""), 404, fault.NotFound)
	r := plain.send("POST", "/mcp", nil, mcpToolList)
	if got := r.header.Get("WWW-Authenticate"); r.status != 401 || got != `Bearer realm="mcpgate"` {
		t.Errorf("keys only: %d, WWW-Authenticate %q", r.status, got)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestKeysBesideTokens: the same gateway takes keys in any of the three
// headers, and tokens, and refuses a request whose headers disagree.
func TestKeysBesideTokens(t *testing.T) {
	h := newIDHarness(t, nil, "")
	tok := h.iss.Token("alice", h.url+"/mcp", "mcp:*")
	for name, hdr := range map[string]http.Header{
		"Authorization":                   bearerHeader(h.key),
		"X-Api-Key":                       {"X-Api-Key": {h.key}},
		"x-litellm-api-key":               {"X-Litellm-Api-Key": {"Bearer " + h.key}},
		"the same key in two headers":     {"Authorization": {"Bearer " + h.key}, "X-Api-Key": {h.key}},
		"token":                           bearerHeader(tok),
		"token in x-litellm-api-key":      {"X-Litellm-Api-Key": {"Bearer " + tok}},
		"SigV4 header and X-Api-Key, IAM": {"Authorization": {"AWS4-HMAC-SHA256 Credential=x"}, "X-Api-Key": {h.key}, iamTestHeader: {"arn:aws:iam::123456789012:user/ci"}},
	} {
		if r := h.send("POST", "/mcp-rest/tools/call", hdr, echoCall); r.status != 200 {
			t.Errorf("%s: %d %s", name, r.status, r.body)
		}
	}
	other := testkit.PutKey(t, h.env, "*")
	for name, hdr := range map[string]http.Header{
		"two keys":                     {"Authorization": {"Bearer " + h.key}, "X-Api-Key": {other}},
		"a token and a key":            {"Authorization": {"Bearer " + tok}, "X-Api-Key": {h.key}},
		"SigV4 header without AWS_IAM": {"Authorization": {"AWS4-HMAC-SHA256 Credential=x"}, "X-Api-Key": {h.key}},
		"x-litellm-api-key, wrong key": {"X-Litellm-Api-Key": {"Bearer " + auth.NewKey()}},
	} {
		h.expectFault(h.send("POST", "/mcp-rest/tools/call", hdr, echoCall), 401, fault.Unauthorized)
		_ = name
	}
	// Each principal is logged as what it is.
	kinds := map[string]bool{}
	for _, rec := range h.logRecords() {
		if p, ok := rec["principal"].(string); ok {
			kinds[strings.SplitN(p, ":", 2)[0]] = true
		}
	}
	if !kinds["key"] || !kinds["oauth"] {
		t.Errorf("principals logged: %v, want key and oauth", kinds)
	}
	if strings.Contains(h.logs.String(), h.key) || strings.Contains(h.logs.String(), tok) {
		t.Fatal("a credential appears in the logs")
	}
}

func TestAuthUnavailable(t *testing.T) {
	h := newIDHarness(t, nil, "")
	h.iss.SetDown(true)
	r := h.send("POST", "/mcp-rest/tools/call", bearerHeader(h.iss.Token("alice", h.url+"/mcp", "mcp:*")), echoCall)
	h.expectFault(r, 503, fault.AuthUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	// Keys do not depend on the issuer.
	if r := h.send("POST", "/mcp-rest/tools/call", bearerHeader(h.key), echoCall); r.status != 200 {
		t.Errorf("key with the issuer down: %d %s", r.status, r.body)
	}
}

// TestKeyRotationThroughGateway: tokens of a key the issuer starts using
// are accepted once the gateway fetches its keys again.
func TestKeyRotationThroughGateway(t *testing.T) {
	h := newIDHarness(t, func(o *auth.OAuthOptions) { o.RefetchInterval = 1 }, "")
	aud := h.url + "/mcp"
	if r := h.send("POST", "/mcp-rest/tools/call", bearerHeader(h.iss.Token("a", aud, "mcp:*")), echoCall); r.status != 200 {
		t.Fatalf("before rotation: %d %s", r.status, r.body)
	}
	old := h.iss.SigningKey()
	h.iss.SetKeys(authtest.NewECKey(t, "key-2"))
	if r := h.send("POST", "/mcp-rest/tools/call", bearerHeader(h.iss.Token("a", aud, "mcp:*")), echoCall); r.status != 200 {
		t.Fatalf("after rotation: %d %s", r.status, r.body)
	}
	stale := h.iss.SignWith(old, map[string]any{"sub": "a", "aud": aud, "scope": "mcp:*"})
	h.expectFault(h.send("POST", "/mcp-rest/tools/call", bearerHeader(stale), echoCall), 401, fault.Unauthorized)
}

func TestIAMCaller(t *testing.T) {
	const alice = "arn:aws:sts::123456789012:assumed-role/agents/alice"
	h := newIDHarness(t, nil, "arn:aws:sts::123456789012:assumed-role/agents/*=demo")
	sig := "AWS4-HMAC-SHA256 Credential=AKIA/20261202/us-east-1/lambda/aws4_request, SignedHeaders=host, Signature=0"
	iam := func(arn string) http.Header { return http.Header{"Authorization": {sig}, iamTestHeader: {arn}} }

	if r := h.send("POST", "/mcp-rest/tools/call", iam(alice), echoCall); r.status != 200 {
		t.Fatalf("granted IAM caller without a key: %d %s", r.status, r.body)
	}
	last := h.logRecords()[len(h.logRecords())-1]
	if p, _ := last["principal"].(string); !strings.HasPrefix(p, "iam:") || last["iam_caller"] != alice {
		t.Errorf("log record %v: want principal iam:<hash> and iam_caller", last)
	}
	h.server(map[string]any{"server_id": "other", "url": h.demo.URL})
	h.expectFault(h.send("POST", "/mcp-rest/tools/call", iam(alice), `{"server_id":"other","name":"echo"}`), 403, fault.Forbidden)
	h.expectFault(h.send("POST", "/mcp-rest/tools/call", iam("arn:aws:iam::123456789012:user/eve"), echoCall), 401, fault.Unauthorized)

	// With a key, the key decides; the IAM caller is logged beside it.
	withKey := iam("arn:aws:iam::123456789012:user/eve")
	withKey.Set("X-Api-Key", h.key)
	if r := h.send("POST", "/mcp-rest/tools/call", withKey, echoCall); r.status != 200 {
		t.Fatalf("IAM caller with a key: %d %s", r.status, r.body)
	}
	last = h.logRecords()[len(h.logRecords())-1]
	if p, _ := last["principal"].(string); !strings.HasPrefix(p, "key:") || last["iam_caller"] != "arn:aws:iam::123456789012:user/eve" {
		t.Errorf("log record %v: want the key's principal and the iam_caller", last)
	}
}

// TestToolGrants: a key whose item lists tools sees and calls only those.
func TestToolGrants(t *testing.T) {
	h := newHarness(t)
	key := auth.NewKey()
	_, err := h.env.Client.PutItem(t.Context(), &dynamodb.PutItemInput{
		TableName: aws.String(h.env.Tables.Keys),
		Item: map[string]types.AttributeValue{
			store.KeyHashAttr: &types.AttributeValueMemberS{Value: auth.HashKey(key)},
			auth.AttrServers:  &types.AttributeValueMemberSS{Value: []string{"demo"}},
			auth.AttrTools:    &types.AttributeValueMemberSS{Value: []string{"demo/echo", "demo/fail_*"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := h.do("GET", "/mcp-rest/tools/list?server_id=demo", key, "", nil)
	var lr ListResponse
	if err := json.Unmarshal(r.body, &lr); err != nil {
		t.Fatal(err)
	}
	var listedTools []*mcp.Tool
	for _, t := range lr.Tools {
		listedTools = append(listedTools, t.Tool)
	}
	if got := toolNames(listedTools); !slices.Equal(got, []string{"echo", "fail_tool"}) {
		t.Errorf("REST list: %v, want echo and fail_tool", got)
	}
	if r := h.call(key, echoCall); r.status != 200 {
		t.Errorf("granted tool: %d %s", r.status, r.body)
	}
	// A tool not granted is, to the key, a tool that does not exist.
	h.expectFault(h.call(key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":0}}`), 404, fault.NotFound)

	for _, path := range []string{"/mcp", "/mcp/demo"} {
		cs := h.connect(path, key, "2025-11-25", nil)
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		prefix := ""
		if path == "/mcp" {
			prefix = "demo-"
		}
		if got := toolNames(res.Tools); !slices.Equal(got, []string{prefix + "echo", prefix + "fail_tool"}) {
			t.Errorf("%s list: %v", path, got)
		}
		_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: prefix + "slow_tool", Arguments: map[string]any{"ms": 0}})
		// The same answer as for a tool the server does not have.
		if err == nil || !strings.Contains(err.Error(), `has no tool "slow_tool"`) {
			t.Errorf("%s: call of a tool not granted: %v, want an unknown tool", path, err)
		}
	}
	if n := h.demo.Stats().Calls; n != 0 {
		t.Errorf("the upstream saw %d calls of a tool not granted", n)
	}
}

// TestLeaseHolder: a lease carries its caller's kind (one letter) and 64
// bits of its full hash, starting with the hex of its logged ID; a
// principal of a team carries its team's label, the same for every key and
// token of the team, while its own item (a key's limits) keeps its own.
func TestLeaseHolder(t *testing.T) {
	full := func(kind, hex string) string { return kind + ":" + hex + strings.Repeat("0", 64-len(hex)) }
	for _, tc := range []struct {
		p          *auth.Principal
		want, self string
	}{
		{nil, "-", ""},
		{&auth.Principal{ID: "key:1a2b3c4d5e6f", StateKey: full("key", "1a2b3c4d5e6f7a8b9c")}, "k:1a2b3c4d5e6f7a8b", "k:1a2b3c4d5e6f7a8b"},
		{&auth.Principal{ID: "oauth:0f1e2d3c4b5a", StateKey: full("oauth", "0f1e2d3c4b5a69788796")}, "o:0f1e2d3c4b5a6978", "o:0f1e2d3c4b5a6978"},
		{&auth.Principal{ID: "iam:9a8b7c6d5e4f", StateKey: full("iam", "9a8b7c6d5e4f3a2b1c")}, "i:9a8b7c6d5e4f3a2b", "i:9a8b7c6d5e4f3a2b"},
		// sha256("platform") begins d294fcce0cc88587.
		{&auth.Principal{ID: "key:1a2b3c4d5e6f", StateKey: full("key", "1a2b3c4d5e6f7a8b9c"), Team: "platform"}, "t:d294fcce0cc88587", "k:1a2b3c4d5e6f7a8b"},
		{&auth.Principal{ID: "oauth:0f1e2d3c4b5a", StateKey: full("oauth", "0f1e2d3c4b5a69788796"), Team: "platform"}, "t:d294fcce0cc88587", "o:0f1e2d3c4b5a6978"},
	} {
		if got := leaseHolder(tc.p); got != tc.want {
			t.Errorf("leaseHolder(%+v) = %q, want %q", tc.p, got, tc.want)
		}
		if tc.p != nil {
			if got := principalLabel(tc.p); got != tc.self {
				t.Errorf("principalLabel(%+v) = %q, want %q", tc.p, got, tc.self)
			}
			if got := leaseHolder(tc.p); len(got) != 2+labelHex || len(got) > lease.MaxHolder {
				t.Errorf("label %q: %d bytes, want %d", got, len(got), 2+labelHex)
			}
		}
	}
	// Two keys whose logged IDs agree, and whose hashes differ past them,
	// have labels of their own.
	a := &auth.Principal{ID: "key:1a2b3c4d5e6f", StateKey: full("key", "1a2b3c4d5e6f0000")}
	b := &auth.Principal{ID: "key:1a2b3c4d5e6f", StateKey: full("key", "1a2b3c4d5e6f0001")}
	if leaseHolder(a) == leaseHolder(b) {
		t.Errorf("keys that differ in bit 64 share the label %q", leaseHolder(a))
	}
}

// TestNarrowGrantsGetToolsOnly: tool grants cannot say which resources,
// prompts or completions go with the tools they grant, so on
// /mcp/{server_id} a key granted only some tools of a server is refused
// them (and initialize does not offer them), before any upstream request;
// a key granted every tool, by no grants or by <server_id>/*, gets them.
func TestNarrowGrantsGetToolsOnly(t *testing.T) {
	h := newHarness(t)
	var relayed atomic.Int32
	s := mcp.NewServer(&mcp.Implementation{Name: "wiki", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{"home"}}}, nil
		},
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if strings.HasPrefix(method, "resources/") || strings.HasPrefix(method, "prompts/") || method == "completion/complete" {
				relayed.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	obj := &jsonschema.Schema{Type: "object"}
	for _, name := range []string{"read_page", "write_page"} {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
	}
	s.AddResource(&mcp.Resource{URI: "wiki://admin-notes", Name: "admin-notes"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "wiki://admin-notes", Text: "SECRET-NOTES"}}}, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "summarize"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "summarize"}}}}, nil
	})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(up.Close)
	h.server(map[string]any{"server_id": "wiki", "url": up.URL})

	reader := testkit.PutKeyWithTools(t, h.env, []string{"wiki"}, []string{"wiki/read_*"})
	whole := testkit.PutKeyWithTools(t, h.env, []string{"wiki"}, []string{"wiki/*"})
	ctx := t.Context()
	try := func(cs *mcp.ClientSession) map[string]error {
		_, list := cs.ListResources(ctx, nil)
		_, read := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "wiki://admin-notes"})
		_, prompts := cs.ListPrompts(ctx, nil)
		_, prompt := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize"})
		_, complete := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "summarize"}, Argument: mcp.CompleteParamsArgument{Name: "a", Value: "h"}})
		return map[string]error{"resources/list": list, "resources/read": read, "prompts/list": prompts, "prompts/get": prompt, "completion/complete": complete}
	}

	cs := h.connect("/mcp/wiki", reader, "2025-11-25", nil)
	if caps := cs.InitializeResult().Capabilities; caps.Resources != nil || caps.Prompts != nil || caps.Completions != nil {
		t.Errorf("initialize offers a narrow key resources %v, prompts %v, completions %v", caps.Resources, caps.Prompts, caps.Completions)
	}
	for method, err := range try(cs) {
		if err == nil || !strings.Contains(err.Error(), "granted only some tools") {
			t.Errorf("narrow key, %s: %v; want it refused", method, err)
		}
	}
	if n := relayed.Load(); n != 0 {
		t.Errorf("%d requests of a narrow key reached the upstream", n)
	}
	if res, rpcErr := h.callMCP("/mcp/wiki", reader, "read_page"); rpcErr != nil || res.IsError {
		t.Errorf("narrow key, granted tool: %v %v", res, rpcErr)
	}
	for name, key := range map[string]string{"no grants": h.key, "wiki/*": whole} {
		cs := h.connect("/mcp/wiki", key, "2025-11-25", nil)
		if caps := cs.InitializeResult().Capabilities; caps.Resources == nil || caps.Prompts == nil || caps.Completions == nil {
			t.Errorf("%s: initialize offers resources %v, prompts %v, completions %v; want all", name, caps.Resources, caps.Prompts, caps.Completions)
		}
		for method, err := range try(cs) {
			if err != nil {
				t.Errorf("%s, %s: %v", name, method, err)
			}
		}
	}
}
