package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/secret/secrettest"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	secrettest.StopShared()
	storetest.StopShared()
	os.Exit(code)
}

// server parses a server item written as JSON, as an admin would.
func server(t *testing.T, doc map[string]any) *registry.Server {
	t.Helper()
	raw, _ := json.Marshal(doc)
	_, srv, err := registry.ItemFromJSON(raw)
	if err != nil {
		t.Fatalf("server item: %v", err)
	}
	return srv
}

var sigCreds = aws.Credentials{AccessKeyID: "AKIDLOCAL", SecretAccessKey: "local-signing-key", Source: "test"}

// credPool is a pool whose secrets come from moto and whose AWS identity
// is sigCreds.
func credPool(t *testing.T, opts secret.Options) *Pool {
	t.Helper()
	p := New(Options{
		AllowLocal:     true,
		Secrets:        secrettest.Shared(t).Resolver(opts),
		AWSCredentials: credentials.StaticCredentialsProvider{Value: sigCreds},
		AWSRegion:      "eu-west-1",
	})
	t.Cleanup(p.Close)
	return p
}

// authCase is one auth type: how to configure it and what the upstream
// checks.
type authCase struct {
	name  string
	auth  func(t *testing.T, s *secrettest.Server) map[string]any
	check func(r *http.Request, body []byte) bool
}

func authCases(tokens *testkit.TokenEndpoint) []authCase {
	const value = "FAKESECRET-upstream-token-1"
	put := func(t *testing.T, s *secrettest.Server, v string) string {
		name := secrettest.Name("cred")
		s.PutSecret(t, name, v)
		return "secretsmanager:" + name
	}
	return []authCase{
		{"bearer", func(t *testing.T, s *secrettest.Server) map[string]any {
			return map[string]any{"type": "bearer", "secret": put(t, s, value)}
		}, func(r *http.Request, _ []byte) bool { return r.Header.Get("Authorization") == "Bearer "+value }},
		{"api_key", func(t *testing.T, s *secrettest.Server) map[string]any {
			return map[string]any{"type": "api_key", "secret": put(t, s, value+"\n")}
		}, func(r *http.Request, _ []byte) bool { return r.Header.Get("X-API-Key") == value }},
		{"api_key header", func(t *testing.T, s *secrettest.Server) map[string]any {
			name := "/" + secrettest.Name("param")
			s.PutParameter(t, name, value)
			return map[string]any{"type": "api_key", "secret": "ssm:" + name, "header": "X-Subscription-Token"}
		}, func(r *http.Request, _ []byte) bool { return r.Header.Get("X-Subscription-Token") == value }},
		{"basic", func(t *testing.T, s *secrettest.Server) map[string]any {
			name := secrettest.Name("basic")
			s.PutSecret(t, name, `{"username": "gw", "credentials": "gw:`+value+`"}`)
			return map[string]any{"type": "basic", "secret": "secretsmanager:" + name + "#credentials"}
		}, func(r *http.Request, _ []byte) bool {
			u, pw, ok := r.BasicAuth()
			return ok && u == "gw" && pw == value
		}},
		{"header", func(t *testing.T, s *secrettest.Server) map[string]any {
			return map[string]any{"type": "header", "header": "Authorization", "secret": put(t, s, "token "+value)}
		}, func(r *http.Request, _ []byte) bool { return r.Header.Get("Authorization") == "token "+value }},
		{"aws_sigv4", func(*testing.T, *secrettest.Server) map[string]any {
			return map[string]any{"type": "aws_sigv4", "service": "lambda"}
		}, func(r *http.Request, body []byte) bool {
			return testkit.VerifySigV4(r, body, sigCreds, "lambda", "eu-west-1") == nil
		}},
		{"oauth2_client_credentials", func(t *testing.T, s *secrettest.Server) map[string]any {
			return map[string]any{"type": "oauth2_client_credentials", "token_url": tokens.URL, "client_id": "gateway",
				"secret": put(t, s, "FAKESECRET-client-secret"), "scope": "tools.read tools.call", "audience": "https://upstream.example"}
		}, tokens.BearerValid},
	}
}

// TestEachAuthType: for every auth type, an MCP upstream and an OpenAPI
// backend that refuse requests without the right credential answer the
// gateway once the server's auth is set, and refuse it without.
func TestEachAuthType(t *testing.T) {
	s := secrettest.Shared(t)
	tokens := testkit.StartTokenEndpoint(t, "gateway", "FAKESECRET-client-secret", time.Hour, nil)
	for _, c := range authCases(tokens) {
		t.Run(c.name, func(t *testing.T) {
			d, g := testkit.StartGuardedDemo(t, c.check)
			auth := c.auth(t, s)
			p := credPool(t, secret.Options{})
			mcpSrv := server(t, map[string]any{"server_id": "guarded", "url": d.URL, "auth": auth})
			apiSrv := server(t, map[string]any{"server_id": "guarded_api", "transport": "openapi", "spec_url": d.SpecURL, "auth": auth})
			ctx := context.Background()

			res, err := p.CallTool(ctx, mcpSrv, Caller{Principal: "a"}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}, nil)
			if err != nil || res.IsError || text(t, res) != "hi" {
				t.Fatalf("MCP call with the credential: %v %+v", err, res)
			}
			res, err = p.CallTool(ctx, apiSrv, Caller{Principal: "a"}, &mcp.CallToolParams{Name: "echo_api", Arguments: map[string]any{"body": map[string]any{"text": "hi"}}}, nil)
			if err != nil || res.IsError {
				t.Fatalf("OpenAPI call with the credential: %v %+v", err, res)
			}
			if _, refused := g.Counts(); refused != 0 {
				t.Fatalf("the upstream refused %d requests made with the credential", refused)
			}
			if p := tokens.LastParams(); c.name == "oauth2_client_credentials" && (p["scope"] != "tools.read tools.call" || p["audience"] != "https://upstream.example") {
				t.Errorf("token request params %v, want the server's scope and audience", p)
			}

			// The same upstream, without auth: refused.
			bare := New(Options{AllowLocal: true})
			defer bare.Close()
			_, err = bare.CallTool(ctx, server(t, map[string]any{"server_id": "guarded", "url": d.URL}), Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}, nil)
			var ue *Error
			if !errors.As(err, &ue) {
				t.Fatalf("MCP call without the credential: %v, want a failure", err)
			}
			res, err = bare.CallTool(ctx, server(t, map[string]any{"server_id": "guarded_api", "transport": "openapi", "spec_url": d.SpecURL}), Caller{}, &mcp.CallToolParams{Name: "echo_api", Arguments: map[string]any{"body": map[string]any{"text": "hi"}}}, nil)
			if err != nil || !res.IsError || !strings.Contains(text(t, res), "401") {
				t.Fatalf("OpenAPI call without the credential: %v %+v, want the API's 401", err, res)
			}
		})
	}
}

// TestRotation: the secret changes in Secrets Manager and the upstream
// takes only the new value; the gateway's cached value is refused (401), it
// reads the secret again, and the call succeeds.
func TestRotation(t *testing.T) {
	s := secrettest.Shared(t)
	name := secrettest.Name("rotating")
	s.PutSecret(t, name, "FAKESECRET-v1")
	current := "FAKESECRET-v1"
	var mu sync.Mutex
	d, g := testkit.StartGuardedDemo(t, func(r *http.Request, _ []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		return r.Header.Get("Authorization") == "Bearer "+current
	})
	auth := map[string]any{"type": "bearer", "secret": "secretsmanager:" + name}
	p := credPool(t, secret.Options{})
	mcpSrv := server(t, map[string]any{"server_id": "rot", "url": d.URL, "auth": auth})
	apiSrv := server(t, map[string]any{"server_id": "rot_api", "transport": "openapi", "spec_url": d.SpecURL, "auth": auth})
	ctx := context.Background()
	call := func() error {
		if _, err := p.CallTool(ctx, mcpSrv, Caller{Principal: "a"}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil); err != nil {
			return err
		}
		res, err := p.CallTool(ctx, apiSrv, Caller{Principal: "a"}, &mcp.CallToolParams{Name: "echo_api", Arguments: map[string]any{"body": map[string]any{"text": "x"}}}, nil)
		if err == nil && res.IsError {
			err = errors.New(text(t, res))
		}
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	s.RotateSecret(t, name, "FAKESECRET-v2")
	mu.Lock()
	current = "FAKESECRET-v2"
	mu.Unlock()
	_, before := g.Counts()
	if err := call(); err != nil {
		t.Fatalf("call after rotation: %v", err)
	}
	if _, refused := g.Counts(); refused-before != 1 {
		t.Errorf("after rotation %d requests were refused, want 1 (the first, with the old value; the secret is then read again)", refused-before)
	}
	if err := call(); err != nil {
		t.Fatalf("call with the new value: %v", err)
	}

	// A value the upstream refuses and that has not changed: one re-read,
	// no second request, and the call fails.
	mu.Lock()
	current = "FAKESECRET-v3-not-in-secrets-manager"
	mu.Unlock()
	seen := len(g.Seen())
	if err := call(); err == nil {
		t.Fatal("call with a refused, unchanged value succeeded")
	}
	posts := 0
	for _, r := range g.Seen()[seen:] {
		if r.Refused && r.Method == http.MethodPost {
			posts++
		}
	}
	if posts != 1 {
		t.Errorf("a refused unchanged value was sent %d times, want 1", posts)
	}
}

// TestOAuthTokens: concurrent first calls fetch one token, which is reused
// until shortly before it expires and then replaced; a token the upstream
// refuses is replaced at once.
func TestOAuthTokens(t *testing.T) {
	s := secrettest.Shared(t)
	clk := &testClock{now: time.Unix(1_800_000_000, 0)}
	tokens := testkit.StartTokenEndpoint(t, "gateway", "FAKESECRET-client", 100*time.Second, clk.Now)
	name := secrettest.Name("client")
	s.PutSecret(t, name, "FAKESECRET-client")
	d, _ := testkit.StartGuardedDemo(t, tokens.BearerValid)
	p := credPool(t, secret.Options{})
	srv := server(t, map[string]any{"server_id": "oauth", "transport": "openapi", "spec_url": d.SpecURL, "auth": map[string]any{
		"type": "oauth2_client_credentials", "token_url": tokens.URL, "client_id": "gateway", "secret": "secretsmanager:" + name,
	}})
	p.credential(srv).provider.(*oauth2Token).token.now = clk.Now
	ctx := context.Background()
	call := func() {
		t.Helper()
		res, err := p.CallTool(ctx, srv, Caller{}, &mcp.CallToolParams{Name: "echo_api", Arguments: map[string]any{"body": map[string]any{"text": "x"}}}, nil)
		if err != nil || res.IsError {
			t.Errorf("call: %v %+v", err, res)
		}
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(call)
	}
	wg.Wait()
	if n := tokens.Requests(); n != 1 {
		t.Fatalf("10 concurrent first calls made %d token requests, want 1", n)
	}
	clk.Advance(79 * time.Second) // 100 s tokens are replaced 20 s early
	call()
	if n := tokens.Requests(); n != 1 {
		t.Fatalf("a token with 21 s left was replaced (%d requests)", n)
	}
	clk.Advance(2 * time.Second)
	call()
	if n := tokens.Requests(); n != 2 {
		t.Fatalf("a token with 19 s left was not replaced (%d requests, want 2)", n)
	}
	tokens.Revoke()
	clk.Advance(2 * time.Second) // past the refresh floor
	call()
	if n := tokens.Requests(); n != 3 {
		t.Fatalf("a refused token was not replaced (%d requests, want 3)", n)
	}
	// The client secret rotated: the endpoint refuses the old one, which is
	// read again.
	s.RotateSecret(t, name, "FAKESECRET-client-2")
	tokens.SetSecret("FAKESECRET-client-2")
	tokens.Revoke()
	clk.Advance(2 * time.Second)
	call()
	if n := tokens.Requests(); n != 5 {
		t.Errorf("after the client secret rotated: %d token requests in all, want 5 (the old secret refused once, then the new one)", n)
	}
}

// TestCredentialStaysWithItsOrigin: an upstream that redirects elsewhere
// never makes the gateway send its credential or headers there (a
// session's client refuses another origin before anything is sent, and
// the credential layer would not add them there anyway).
func TestCredentialStaysWithItsOrigin(t *testing.T) {
	var mu sync.Mutex
	var elsewhere []http.Header
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		elsewhere = append(elsewhere, r.Header.Clone())
		mu.Unlock()
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer other.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	t.Setenv("STAYS_TOKEN", "FAKESECRET-stays")
	p := New(Options{AllowLocal: true, Secrets: secret.New(secret.Options{Getenv: os.Getenv})})
	defer p.Close()
	srv := server(t, map[string]any{"server_id": "hop", "url": redirect.URL + "/mcp",
		"auth":            map[string]any{"type": "api_key", "secret": "env:STAYS_TOKEN"},
		"static_headers":  map[string]any{"X-Team": "FAKESECRET-team"},
		"forward_headers": []any{"X-Tenant"},
	})
	_, err := p.CallTool(context.Background(), srv, Caller{Header: http.Header{"X-Tenant": {"FAKESECRET-tenant"}}}, &mcp.CallToolParams{Name: "echo"}, nil)
	if err == nil {
		t.Fatal("call through a redirect to a server that is not MCP succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, h := range elsewhere {
		for name, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, "FAKESECRET") {
					t.Errorf("another origin received %s: %s", name, v)
				}
			}
		}
	}
}

// TestForwardHeaders: the headers a server forwards reach the upstream,
// static headers too; a credential header never does, even if asked to.
func TestForwardHeaders(t *testing.T) {
	d, g := testkit.StartGuardedDemo(t, func(*http.Request, []byte) bool { return true })
	p := New(Options{AllowLocal: true})
	defer p.Close()
	srv := server(t, map[string]any{"server_id": "fwd", "url": d.URL, "static_headers": map[string]any{"X-Team": "platform"}, "forward_headers": []any{"X-Tenant"}})
	// An item cannot forward Authorization; a Server built by hand still
	// does not.
	srv.ForwardHeaders = append(srv.ForwardHeaders, "Authorization", "Cookie")
	c := Caller{Principal: "a", Header: http.Header{"X-Tenant": {"acme"}, "Authorization": {"Bearer FAKESECRET-agent"}, "Cookie": {"s=FAKESECRET"}}}
	if _, err := p.CallTool(context.Background(), srv, c, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil); err != nil {
		t.Fatal(err)
	}
	for _, seen := range g.Seen() {
		h := seen.Header
		if h.Get("X-Tenant") != "acme" || h.Get("X-Team") != "platform" {
			t.Errorf("upstream request without the forwarded and static headers: %v", h)
		}
		if h.Get("Authorization") != "" || h.Get("Cookie") != "" {
			t.Errorf("an agent credential reached the upstream: %v", h)
		}
	}
}

// TestSessionsPerPrincipal: two principals never share a session.
func TestSessionsPerPrincipal(t *testing.T) {
	_, _, srv := demoServer(t, registry.TransportHTTP)
	p := New(Options{AllowLocal: true})
	defer p.Close()
	ctx := context.Background()
	for _, who := range []string{"a", "b", "a", "b"} {
		if _, err := p.CallTool(ctx, srv, Caller{Principal: who}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.Connects(); n != 2 {
		t.Errorf("two principals, two calls each: %d sessions opened, want 2 (one each, reused)", n)
	}
}

// TestCredentialErrors: a credential that cannot be produced fails the
// call before anything is sent, naming no value.
func TestCredentialErrors(t *testing.T) {
	d, g := testkit.StartGuardedDemo(t, func(*http.Request, []byte) bool { return true })
	s := secrettest.Shared(t)
	notBasic := secrettest.Name("notbasic")
	s.PutSecret(t, notBasic, "FAKESECRET-without-colon")
	p := credPool(t, secret.Options{})
	for _, auth := range []map[string]any{
		{"type": "bearer", "secret": "secretsmanager:" + secrettest.Name("missing")},
		{"type": "basic", "secret": "secretsmanager:" + notBasic},
		{"type": "bearer", "secret": "env:UNSET_IN_THIS_TEST"},
	} {
		for _, doc := range []map[string]any{
			{"server_id": "bad", "url": d.URL, "auth": auth},
			{"server_id": "bad_api", "transport": "openapi", "spec_url": d.SpecURL, "auth": auth},
		} {
			_, err := p.CallTool(context.Background(), server(t, doc), Caller{}, &mcp.CallToolParams{Name: "echo_api", Arguments: map[string]any{"body": map[string]any{"text": "x"}}}, nil)
			var ue *Error
			if !errors.As(err, &ue) || ue.Kind != KindCredential {
				t.Errorf("%v: %v, want a KindCredential error", auth, err)
				continue
			}
			if strings.Contains(err.Error(), "FAKESECRET") {
				t.Errorf("error shows the value: %v", err)
			}
		}
	}
	for _, seen := range g.Seen() {
		if seen.Path != "/openapi.json" {
			t.Errorf("%s %s reached the upstream without its credential", seen.Method, seen.Path)
		}
	}
}

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// TestSweepForgetsIdlePrincipals: what a principal no longer uses (idle
// sessions, server info, tool lists) is dropped, so the pool's memory is
// bounded by the principals active within the idle timeout. A server's tool
// list is one for every caller (the upstream sees the gateway's credential),
// listed on a session of the gateway's own: four sessions in all.
func TestSweepForgetsIdlePrincipals(t *testing.T) {
	_, _, srv := demoServer(t, registry.TransportHTTP)
	p := New(Options{AllowLocal: true, IdleTimeout: time.Minute})
	defer p.Close()
	ctx := context.Background()
	for _, who := range []string{"a", "b", "c"} {
		if _, err := p.Info(ctx, srv, Caller{Principal: who}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Tools(ctx, srv, Caller{Principal: who}); err != nil {
			t.Fatal(err)
		}
	}
	count := func() (int, int, int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.idle), len(p.tools), len(p.info)
	}
	if i, tl, in := count(); i != 4 || tl != 1 || in != 4 {
		t.Fatalf("after three principals: %d idle lists, %d tool lists, %d infos; want 4, 1, 4", i, tl, in)
	}
	p.mu.Lock()
	stale := p.sweepLocked(time.Now().Add(sweepEvery + 10*time.Minute))
	p.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
	if i, tl, in := count(); i != 0 || tl != 0 || in != 0 || len(stale) != 4 {
		t.Errorf("after the idle timeout: %d idle lists, %d tool lists, %d infos, %d sessions closed; want 0, 0, 0, 4", i, tl, in, len(stale))
	}
}

// TestCredentialWithoutMeans: a pool built without a secret resolver or
// AWS credentials fails such servers' calls as KindCredential, and sends
// nothing.
func TestCredentialWithoutMeans(t *testing.T) {
	d, g := testkit.StartGuardedDemo(t, func(*http.Request, []byte) bool { return true })
	p := New(Options{AllowLocal: true})
	defer p.Close()
	for _, auth := range []map[string]any{
		{"type": "bearer", "secret": "env:X"},
		{"type": "oauth2_client_credentials", "token_url": "http://127.0.0.1:1/token", "client_id": "c", "secret": "env:X"},
		{"type": "aws_sigv4", "service": "lambda"},
	} {
		_, err := p.CallTool(context.Background(), server(t, map[string]any{"server_id": "s", "url": d.URL, "auth": auth}), Caller{}, &mcp.CallToolParams{Name: "echo"}, nil)
		var ue *Error
		if !errors.As(err, &ue) || ue.Kind != KindCredential {
			t.Errorf("%v: %v, want a KindCredential error", auth["type"], err)
		}
	}
	if n := len(g.Seen()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

// TestReservedSecretNeverSent: a secret the gateway keeps for itself (the
// request-state key) is refused as any server's credential, by reference
// or by value (another reference holding it), for every auth type that
// sends a secret, OAuth client secrets included; nothing is sent.
func TestReservedSecretNeverSent(t *testing.T) {
	t.Setenv("MCPGATE_TEST_STATE_KEY", "the-state-key-value-0123456789abcdef")
	t.Setenv("MCPGATE_TEST_STATE_COPY", "the-state-key-value-0123456789abcdef\n")
	d, g := testkit.StartGuardedDemo(t, func(*http.Request, []byte) bool { return true })
	tokens := testkit.StartTokenEndpoint(t, "c", "the-state-key-value-0123456789abcdef", time.Minute, nil)
	ref, _ := secret.ParseRef("env:MCPGATE_TEST_STATE_KEY")
	p := New(Options{AllowLocal: true, Secrets: secret.New(secret.Options{Getenv: os.Getenv}),
		Reserved: []Reserved{Reserve(ref, "the-state-key-value-0123456789abcdef")}})
	defer p.Close()
	for name, auth := range map[string]map[string]any{
		"bearer":       {"type": "bearer", "secret": "env:MCPGATE_TEST_STATE_KEY"},
		"header, copy": {"type": "header", "header": "X-Token", "secret": "env:MCPGATE_TEST_STATE_COPY"},
		"oauth2":       {"type": "oauth2_client_credentials", "token_url": tokens.URL, "client_id": "c", "secret": "env:MCPGATE_TEST_STATE_KEY"},
		"oauth2, copy": {"type": "oauth2_client_credentials", "token_url": tokens.URL, "client_id": "c", "secret": "env:MCPGATE_TEST_STATE_COPY"},
	} {
		_, err := p.CallTool(context.Background(), server(t, map[string]any{"server_id": "s", "url": d.URL, "auth": auth}), Caller{}, &mcp.CallToolParams{Name: "echo"}, nil)
		if !errors.Is(err, ErrReservedSecret) {
			t.Errorf("%s: %v, want ErrReservedSecret", name, err)
		}
	}
	if n := len(g.Seen()); n != 0 || tokens.Requests() != 0 {
		t.Errorf("%d upstream requests and %d token requests were sent", n, tokens.Requests())
	}
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"secretsmanager:mcpgate/state", "secretsmanager:mcpgate/state#k", true},
		{"secretsmanager:mcpgate/state", "secretsmanager:arn:aws:secretsmanager:eu-west-1:123456789012:secret:mcpgate/state-AbCdEf", true},
		{"secretsmanager:arn:aws:secretsmanager:eu-west-1:123456789012:secret:mcpgate/state-AbCdEf", "secretsmanager:mcpgate/state", true},
		{"secretsmanager:mcpgate/state", "secretsmanager:mcpgate/stateful", false},
		{"ssm:/mcpgate/state", "secretsmanager:/mcpgate/state", false},
	} {
		a, _ := secret.ParseRef(tc.a)
		b, _ := secret.ParseRef(tc.b)
		if got := sameSecret(a, b); got != tc.same {
			t.Errorf("sameSecret(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}
