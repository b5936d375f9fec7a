package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/secret/secrettest"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// checkVars is env's environment plus the moto endpoints, with local
// upstreams allowed (the test upstreams run on loopback).
func checkVars(env *storetest.Env, s *secrettest.Server) map[string]string {
	v := vars(env)
	v["ALLOW_LOCAL_UPSTREAMS"] = "on"
	for _, kv := range s.Vars() {
		k, val, _ := strings.Cut(kv, "=")
		v[k] = val
	}
	return v
}

func TestServersCheck(t *testing.T) {
	env := storetest.NewEnv(t)
	s := secrettest.Shared(t)
	good := secrettest.Name("good")
	s.PutSecret(t, good, "FAKESECRET-check-token")
	other := secrettest.Name("other")
	s.PutSecret(t, other, "FAKESECRET-refused-token")
	d, _ := testkit.StartGuardedDemo(t, func(r *http.Request, _ []byte) bool {
		return r.Header.Get("Authorization") == "Bearer FAKESECRET-check-token"
	})
	put := func(doc map[string]any) { testkit.PutServer(t, env, doc) }
	put(map[string]any{"server_id": "good", "url": d.URL, "auth": map[string]any{"type": "bearer", "secret": "secretsmanager:" + good}, "disallowed_tools": []any{"fail_tool"}})
	put(map[string]any{"server_id": "api", "transport": "openapi", "spec_url": d.SpecURL, "auth": map[string]any{"type": "bearer", "secret": "secretsmanager:" + good}})
	put(map[string]any{"server_id": "missing", "url": d.URL, "auth": map[string]any{"type": "bearer", "secret": "secretsmanager:" + secrettest.Name("absent")}})
	put(map[string]any{"server_id": "refused", "url": d.URL, "auth": map[string]any{"type": "bearer", "secret": "secretsmanager:" + other}})
	put(map[string]any{"server_id": "bare", "url": d.URL})
	put(map[string]any{"server_id": "broken", "url": d.URL, "auth": map[string]any{"type": "bearer", "secret": "FAKESECRET-literal"}})
	v := checkVars(env, s)

	r := runWith(t, v, "", "servers", "check", "good").ok(t)
	for _, want := range []string{
		"item:       ok (url " + d.URL,
		"credential: ok (bearer, secret secretsmanager:" + good + " read; value not shown)",
		"initialize: ok (demo-upstream 1.0.0, protocol ",
		"tools/list: ok (3 tools, 1 hidden by allowed_tools/disallowed_tools)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check good does not say %q:\n%s", want, r.stdout)
		}
	}
	r = runWith(t, v, "", "servers", "check", "api").ok(t)
	if !strings.Contains(r.stdout, `initialize: ok (OpenAPI document "demo-api" read`) {
		t.Errorf("check api:\n%s", r.stdout)
	}
	for _, c := range []struct{ id, out, err string }{
		{"missing", "credential: FAILED: bearer: read from Secrets Manager", "its secret secretsmanager:"},
		{"refused", "initialize: FAILED: ", "the upstream could not be initialized"},
		{"bare", "initialize: FAILED: ", "the upstream could not be initialized"},
		{"broken", "item:       INVALID: auth.secret: is not a reference", "is invalid"},
	} {
		r := runWith(t, v, "", "servers", "check", c.id)
		r.fails(t, 1, c.err)
		if !strings.Contains(r.stdout, c.out) {
			t.Errorf("check %s does not say %q:\n%s", c.id, c.out, r.stdout)
		}
		if strings.Contains(r.stdout+r.stderr, "FAKESECRET") {
			t.Errorf("check %s printed a secret value:\n%s%s", c.id, r.stdout, r.stderr)
		}
	}
	runWith(t, v, "", "servers", "check", "nope").fails(t, 1, `server "nope" not found`)
}

func TestServersPutAndSetValidateIdentity(t *testing.T) {
	env := storetest.NewEnv(t)
	literal := writeFile(t, "s.json", `{"server_id":"gh","url":"https://x.example/mcp","auth":{"type":"bearer","secret":"ghp_FAKESECRET"}}`)
	r := mcpgate(t, env, "servers", "put", literal)
	r.fails(t, 1, "auth.secret: is not a reference (a secret value never goes here")
	if strings.Contains(r.stderr, "FAKESECRET") {
		t.Errorf("put repeated the literal secret:\n%s", r.stderr)
	}
	good := writeFile(t, "g.json", `{"server_id":"gh","url":"https://x.example/mcp","auth":{"type":"bearer","secret":"ssm:/mcpgate/gh"}}`)
	mcpgate(t, env, "servers", "put", good).ok(t)
	mcpgate(t, env, "servers", "set", "gh", `auth={"type":"api_key","secret":"env:GH","header":"Content-Type"}`).
		fails(t, 1, "auth.header: Content-Type is set by HTTP or MCP itself")
	mcpgate(t, env, "servers", "set", "gh", `forward_headers=["X-Api-Key"]`).
		fails(t, 1, "forward_headers: X-Api-Key is never forwarded")
	mcpgate(t, env, "servers", "set", "gh", `auth={"type":"oauth2_client_credentials","client_id":"c","secret":"env:X"}`).
		fails(t, 1, "auth.token_url: missing")
	mcpgate(t, env, "servers", "set", "gh", `allowed_tools=["read_*"]`, `static_headers={"X-Team":"a"}`).ok(t)
	r = mcpgate(t, env, "servers", "get", "gh").ok(t)
	if !strings.Contains(r.stdout, `"secret": "ssm:/mcpgate/gh"`) || !strings.Contains(r.stdout, `"read_*"`) {
		t.Errorf("get:\n%s", r.stdout)
	}
}
