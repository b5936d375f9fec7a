package registry

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/secret"
)

func l(v ...string) types.AttributeValue {
	out := make([]types.AttributeValue, len(v))
	for i, e := range v {
		out[i] = s(e)
	}
	return &types.AttributeValueMemberL{Value: out}
}

func authOf(kv ...string) types.AttributeValue {
	mm := map[string]types.AttributeValue{}
	for i := 0; i < len(kv); i += 2 {
		mm[kv[i]] = s(kv[i+1])
	}
	return m(mm)
}

func TestParseAuthTypes(t *testing.T) {
	sm := secret.Ref{Kind: secret.SecretsManager, Name: "mcpgate/tok"}
	cases := []struct {
		auth types.AttributeValue
		want Auth
	}{
		{authOf("type", "bearer", "secret", "secretsmanager:mcpgate/tok"), Auth{Type: AuthBearer, Secret: sm, Header: "Authorization"}},
		{authOf("type", "api_key", "secret", "secretsmanager:mcpgate/tok"), Auth{Type: AuthAPIKey, Secret: sm, Header: "X-Api-Key"}},
		{authOf("type", "api_key", "secret", "secretsmanager:mcpgate/tok", "header", "x-subscription-token"), Auth{Type: AuthAPIKey, Secret: sm, Header: "X-Subscription-Token"}},
		{authOf("type", "basic", "secret", "ssm:/mcpgate/basic"), Auth{Type: AuthBasic, Secret: secret.Ref{Kind: secret.SSM, Name: "/mcpgate/basic"}, Header: "Authorization"}},
		{authOf("type", "header", "header", "Authorization", "secret", "env:TOKEN"), Auth{Type: AuthHeader, Secret: secret.Ref{Kind: secret.Env, Name: "TOKEN"}, Header: "Authorization"}},
		{authOf("type", "aws_sigv4", "service", "lambda"), Auth{Type: AuthSigV4, Service: "lambda"}},
		{authOf("type", "aws_sigv4", "service", "execute-api", "region", "eu-west-1"), Auth{Type: AuthSigV4, Service: "execute-api", Region: "eu-west-1"}},
		{authOf("type", "oauth2_client_credentials", "token_url", "https://idp.example.com/token", "client_id", "gw",
			"secret", "secretsmanager:mcpgate/tok", "scope", "read write", "audience", "https://api.example.com"),
			Auth{Type: AuthOAuth2, Secret: sm, Header: "Authorization", TokenURL: "https://idp.example.com/token", ClientID: "gw", Scope: "read write", Audience: "https://api.example.com"}},
	}
	for _, c := range cases {
		srv, err := Parse(with("auth", c.auth))
		if err != nil {
			t.Errorf("%v: %v", c.want.Type, err)
			continue
		}
		if !reflect.DeepEqual(*srv.Auth, c.want) {
			t.Errorf("got %+v, want %+v", *srv.Auth, c.want)
		}
	}
}

func TestParseIdentityErrors(t *testing.T) {
	cases := []struct {
		name string
		kv   []any
		want string
	}{
		{"no type", []any{"auth", authOf("secret", "env:X")}, "auth.type: missing"},
		{"unknown type", []any{"auth", authOf("type", "kerberos")}, `auth.type: "kerberos" is not an auth type: use one of api_key, aws_sigv4, basic, bearer, header, oauth2_client_credentials`},
		{"literal secret", []any{"auth", authOf("type", "bearer", "secret", "ghp_FAKESECRET")}, "auth.secret: is not a reference"},
		{"literal with colon", []any{"auth", authOf("type", "basic", "secret", "admin:FAKESECRET")}, "auth.secret: is not a reference"},
		{"no secret", []any{"auth", authOf("type", "bearer")}, "auth.secret: missing (a reference: secretsmanager:"},
		{"field of another type", []any{"auth", authOf("type", "bearer", "secret", "env:X", "service", "lambda")}, "auth.service: unknown attribute (known: type, secret)"},
		{"header without name", []any{"auth", authOf("type", "header", "secret", "env:X")}, "auth.header: missing"},
		{"reserved auth header", []any{"auth", authOf("type", "api_key", "secret", "env:X", "header", "Content-Type")}, "auth.header: Content-Type is set by HTTP or MCP itself"},
		{"bad auth header", []any{"auth", authOf("type", "header", "secret", "env:X", "header", "X Bad")}, `auth.header: "X Bad" is not a header name`},
		{"sigv4 without service", []any{"auth", authOf("type", "aws_sigv4")}, "auth.service: missing"},
		{"sigv4 bad region", []any{"auth", authOf("type", "aws_sigv4", "service", "lambda", "region", "EU WEST")}, "auth.region: is not an AWS region name"},
		{"oauth2 without token_url", []any{"auth", authOf("type", "oauth2_client_credentials", "client_id", "c", "secret", "env:X")}, "auth.token_url: missing"},
		{"oauth2 bad token_url", []any{"auth", authOf("type", "oauth2_client_credentials", "token_url", "ftp://x/token", "client_id", "c", "secret", "env:X")}, "auth.token_url: scheme must be http or https"},
		{"oauth2 without client_id", []any{"auth", authOf("type", "oauth2_client_credentials", "token_url", "https://x/token", "secret", "env:X")}, "auth.client_id: missing"},
		{"auth not a map", []any{"auth", s("bearer")}, "auth: must be of type M"},
		{"static credential", []any{"static_headers", m(map[string]types.AttributeValue{"authorization": s("Bearer FAKESECRET")})}, "static_headers.authorization: carries a credential: put it in auth"},
		{"static reserved", []any{"static_headers", m(map[string]types.AttributeValue{"Mcp-Session-Id": s("x")})}, "static_headers.Mcp-Session-Id: is set by HTTP or MCP itself"},
		{"static auth header", []any{"auth", authOf("type", "api_key", "secret", "env:X", "header", "X-Token"), "static_headers", m(map[string]types.AttributeValue{"x-token": s("x")})}, "static_headers.x-token: is the header auth sets"},
		{"static control", []any{"static_headers", m(map[string]types.AttributeValue{"X-Team": s("a\r\nX-Evil: 1")})}, "static_headers.X-Team: value must be at most 4096 bytes without control characters"},
		{"static not string", []any{"static_headers", m(map[string]types.AttributeValue{"X-Team": n("1")})}, "static_headers.X-Team: must be of type S"},
		{"forward authorization", []any{"forward_headers", l("authorization")}, "forward_headers: Authorization is never forwarded: an agent's credential must not reach an upstream"},
		{"forward cookie", []any{"forward_headers", l("Cookie")}, "forward_headers: Cookie is never forwarded"},
		{"forward api key", []any{"forward_headers", l("x-api-key")}, "forward_headers: X-Api-Key is never forwarded"},
		{"forward litellm key", []any{"forward_headers", l("x-litellm-api-key")}, "forward_headers: X-Litellm-Api-Key is never forwarded"},
		{"forward hop-by-hop", []any{"forward_headers", l("Connection")}, "forward_headers: Connection is set by HTTP or MCP itself and is never forwarded"},
		{"forward also static", []any{"forward_headers", l("X-Team"), "static_headers", m(map[string]types.AttributeValue{"X-Team": s("a")})}, "forward_headers: X-Team is also a static header"},
		{"forward not list", []any{"forward_headers", s("X-Team")}, "forward_headers: must be of type L"},
		{"empty allowed", []any{"allowed_tools", l()}, "allowed_tools: lists no pattern"},
		{"bad pattern", []any{"disallowed_tools", l("ok", "")}, `disallowed_tools: "" is not a tool pattern`},
	}
	for _, c := range cases {
		_, err := Parse(with(c.kv...))
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not say %q", c.name, err, c.want)
		}
		if strings.Contains(err.Error(), "FAKESECRET") {
			t.Errorf("%s: error shows a secret value: %v", c.name, err)
		}
	}
}

func TestParseHeadersAndFilters(t *testing.T) {
	srv, err := Parse(with(
		"static_headers", m(map[string]types.AttributeValue{"x-team": s("platform"), "User-Agent": s("mcpgate")}),
		"forward_headers", l("x-request-tenant", "X-Request-Tenant", "traceparent"),
		"allowed_tools", l("read_*", "search"),
		"disallowed_tools", &types.AttributeValueMemberSS{Value: []string{"read_secret*"}},
	))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"X-Team": "platform", "User-Agent": "mcpgate"}; !reflect.DeepEqual(srv.StaticHeaders, want) {
		t.Errorf("StaticHeaders = %v, want %v", srv.StaticHeaders, want)
	}
	if want := []string{"Traceparent", "X-Request-Tenant"}; !reflect.DeepEqual(srv.ForwardHeaders, want) {
		t.Errorf("ForwardHeaders = %v, want %v", srv.ForwardHeaders, want)
	}
	for tool, want := range map[string]bool{
		"read_wiki": true, "search": true, "read_secret_notes": false, "write_wiki": false, "searching": false,
	} {
		if got := srv.ToolAllowed(tool); got != want {
			t.Errorf("ToolAllowed(%q) = %v, want %v", tool, got, want)
		}
	}
	plain, _ := Parse(base())
	if !plain.ToolAllowed("anything") {
		t.Error("a server without filters hides a tool")
	}
}

func TestMatchGlob(t *testing.T) {
	for _, c := range []struct {
		p, n string
		want bool
	}{
		{"*", "", true}, {"*", "anything/at all", true}, {"a*", "abc", true}, {"a*", "ba", false},
		{"*_admin", "drop_admin", true}, {"*_admin", "admin", false}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false}, {"exact", "exact", true}, {"exact", "exactly", false},
		{"**", "x", true}, {"ü*", "über", true}, {"[a]", "a", false}, {"[a]", "[a]", true},
	} {
		if got := MatchGlob(c.p, c.n); got != c.want {
			t.Errorf("MatchGlob(%q, %q) = %v, want %v", c.p, c.n, got, c.want)
		}
	}
}

func TestIdentityKey(t *testing.T) {
	a, _ := Parse(with("auth", authOf("type", "bearer", "secret", "env:A")))
	a2, _ := Parse(with("auth", authOf("type", "bearer", "secret", "env:A")))
	b, _ := Parse(with("auth", authOf("type", "bearer", "secret", "env:B")))
	c, _ := Parse(with("auth", authOf("type", "bearer", "secret", "env:A"), "static_headers", m(map[string]types.AttributeValue{"X-Team": s("a")})))
	plain, _ := Parse(base())
	if a.IdentityKey() != a2.IdentityKey() {
		t.Error("the same identity has two keys")
	}
	for _, other := range []*Server{b, c, plain} {
		if other.IdentityKey() == a.IdentityKey() {
			t.Errorf("%+v and %+v share an identity key", a, other)
		}
	}
}

func TestIdentityBounds(t *testing.T) {
	many := map[string]types.AttributeValue{}
	for i := range maxHeaders + 1 {
		many["X-H"+strings.Repeat("a", i)] = s("v")
	}
	pats := make([]string, maxPatterns+1)
	for i := range pats {
		pats[i] = "p" + strings.Repeat("x", i%100)
	}
	for _, c := range []struct {
		kv   []any
		want string
	}{
		{[]any{"static_headers", m(many)}, "static_headers: more than 32 headers"},
		{[]any{"static_headers", m(map[string]types.AttributeValue{"X-Big": s(strings.Repeat("v", maxHeaderValue+1))})}, "static_headers.X-Big: value must be at most 4096 bytes"},
		{[]any{"allowed_tools", l(pats...)}, "allowed_tools: more than 256 patterns"},
		{[]any{"disallowed_tools", l(strings.Repeat("p", maxPattern+1))}, "is not a tool pattern (1 to 128"},
		{[]any{"auth", authOf("type", "oauth2_client_credentials", "token_url", "https://x/t", "client_id", strings.Repeat("c", maxOAuthField+1), "secret", "env:X")}, "auth.client_id: must be at most 1024"},
	} {
		if _, err := Parse(with(c.kv...)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// TestIdentityKeyStable: identity keys are kept (a catalog's endpoint, a
// sealed request state's upstream), so the key of an auth is what it has
// always been.
func TestIdentityKeyStable(t *testing.T) {
	srv, err := Parse(with("auth", authOf("type", "oauth2_client_credentials", "token_url", "https://idp.example.com/token",
		"client_id", "gw", "secret", "secretsmanager:mcpgate/tok#k", "scope", "read", "audience", "api")))
	if err != nil {
		t.Fatal(err)
	}
	a := srv.Auth
	want := fmt.Sprintf("%s %s %s%s", srv.Transport, srv.URL, srv.SpecURL, srv.SpecPath) +
		"\x00auth oauth2_client_credentials secretsmanager:mcpgate/tok#k Authorization   https://idp.example.com/token gw read api" +
		"\x00forward "
	if got := srv.IdentityKey(); got != want {
		t.Errorf("IdentityKey() = %q, want %q (%+v)", got, want, *a)
	}
}

// TestIdentityKeyEveryAuthField: two auths that differ in any one field
// have different identity keys.
func TestIdentityKeyEveryAuthField(t *testing.T) {
	srv, _ := Parse(base())
	srv.Auth = &Auth{}
	key := srv.IdentityKey()
	v := reflect.ValueOf(srv.Auth).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		before := reflect.ValueOf(f.Interface())
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Struct: // secret.Ref
			f.Set(reflect.ValueOf(secret.Ref{Kind: secret.Env, Name: "X"}))
		default:
			t.Fatalf("Auth.%s is a %s: give it a value here", v.Type().Field(i).Name, f.Kind())
		}
		if srv.IdentityKey() == key {
			t.Errorf("Auth.%s is not part of the identity key", v.Type().Field(i).Name)
		}
		f.Set(before)
	}
}
