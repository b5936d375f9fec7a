package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/mcpgate/mcpgate/internal/auth/authtest"
)

const testAudience = "https://gateway.example.com/mcp"

// clock is a settable time for the key cache's intervals.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newOAuth(t *testing.T, iss *authtest.Issuer, c *clock, mod func(*OAuthOptions)) *OAuth {
	t.Helper()
	opts := OAuthOptions{Issuer: iss.URL}
	if c != nil {
		opts.Now = c.now
	}
	if mod != nil {
		mod(&opts)
	}
	o, err := NewOAuth(opts)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// rejectedToken asserts err is a token rejection and returns its reason.
func rejectedToken(t *testing.T, err error) string {
	t.Helper()
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.Token {
		t.Fatalf("err = %v, want a token rejection", err)
	}
	return rej.Reason
}

func TestVerifyToken(t *testing.T) {
	iss := authtest.NewIssuer(t)
	o := newOAuth(t, iss, nil, nil)
	ctx := context.Background()
	aud := []string{testAudience}

	valid := iss.Token("alice", testAudience, "mcp:demo", "openid", "mcp:other")
	p, err := o.Verify(ctx, valid, aud)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindOAuth || p.Subject != "alice" || !slices.Equal(p.Servers, []string{"demo", "other"}) {
		t.Errorf("principal %+v, want oauth alice with servers demo, other", p)
	}
	if !strings.HasPrefix(p.ID, "oauth:") || len(p.ID) > MaxIDLen || strings.Contains(p.ID, "alice") {
		t.Errorf("ID %q: want oauth:<hash>, at most %d bytes, no subject", p.ID, MaxIDLen)
	}

	// An ES256 key works as well as RS256.
	ec := authtest.NewECKey(t, "ec-1")
	iss.SetKeys(iss.SigningKey(), ec)
	o = newOAuth(t, iss, nil, nil)
	if _, err := o.Verify(ctx, iss.SignWith(ec, map[string]any{"sub": "bob", "aud": testAudience}), aud); err != nil {
		t.Errorf("ES256 token: %v", err)
	}

	rsaKey := iss.SigningKey()
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weakKey := &authtest.Key{ID: "weak", Alg: jose.RS256, Private: weak}
	tests := []struct {
		name  string
		token string
		why   string
	}{
		{"no audience and no client", iss.Sign(map[string]any{"sub": "a"}), "aud"},
		{"no expiry", iss.Sign(map[string]any{"sub": "a", "aud": testAudience, "exp": nil}), "expiry"},
		{"no subject", iss.Sign(map[string]any{"aud": testAudience}), "subject"},
		{"ID token", iss.Sign(map[string]any{"sub": "a", "aud": testAudience, "token_use": "id"}), "access token"},
		{"garbage", "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln", "signature"},
	}
	why := map[string]string{
		"expired": "expired", "not yet valid": "not valid yet", "wrong issuer": "issuer", "wrong audience": "aud",
		"unknown kid": "unknown", "alg none": "algorithm", "HMAC with the public key": "algorithm", "tampered payload": "signature",
	}
	for name, tok := range iss.Hostile("mallory", testAudience) {
		if why[name] == "" {
			t.Fatalf("no expectation for hostile token %q", name)
		}
		tests = append(tests, struct{ name, token, why string }{name, tok, why[name]})
	}
	now := time.Now()
	iss.SetKeys(rsaKey, weakKey)
	o = newOAuth(t, iss, nil, nil)
	tests = append(tests, struct{ name, token, why string }{"RSA key under 2048 bits", iss.SignWith(weakKey, map[string]any{"sub": "a", "aud": testAudience}), "unknown"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := o.Verify(ctx, tt.token, aud)
			if why := rejectedToken(t, err); !strings.Contains(why, tt.why) {
				t.Errorf("reason %q, want it to mention %q", why, tt.why)
			}
		})
	}
	// A small clock skew is tolerated.
	if _, err := o.Verify(ctx, iss.Sign(map[string]any{"sub": "a", "aud": testAudience, "exp": now.Add(-10 * time.Second).Unix()}), aud); err != nil {
		t.Errorf("token expired 10 s ago: %v, want it accepted within the leeway", err)
	}
}

// tokenAt is a valid token at the clock's time.
func tokenAt(iss *authtest.Issuer, c *clock) string {
	return iss.Sign(map[string]any{"sub": "a", "aud": testAudience, "iat": c.now().Unix(), "exp": c.now().Add(5 * time.Minute).Unix()})
}

func TestTokenGrants(t *testing.T) {
	iss := authtest.NewIssuer(t)
	ctx := context.Background()
	aud := []string{testAudience}
	tests := []struct {
		name   string
		prefix string
		claims map[string]any
		want   []string
	}{
		{"scope string", "", map[string]any{"scope": "mcp:a mcp:b profile"}, []string{"a", "b"}},
		{"scp array (Okta)", "", map[string]any{"scp": []string{"mcp:a", "email"}}, []string{"a"}},
		{"scp string (Entra ID)", "", map[string]any{"scp": "mcp:a mcp:c"}, []string{"a", "c"}},
		{"roles (Entra ID app-only)", "mcp.", map[string]any{"roles": []string{"mcp.a", "Reader"}}, []string{"a"}},
		{"all servers", "", map[string]any{"scope": "mcp:*"}, []string{"*"}},
		{"invalid server ids grant nothing", "", map[string]any{"scope": "mcp: mcp:a-b mcp:../x mcp:"}, nil},
		{"custom prefix", "gw/", map[string]any{"scope": "gw/a mcp:b"}, []string{"a"}},
		{"scope of the wrong type", "", map[string]any{"scope": 42}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOAuth(t, iss, nil, func(o *OAuthOptions) { o.ScopePrefix = tt.prefix })
			claims := map[string]any{"sub": "s", "aud": testAudience}
			for k, v := range tt.claims {
				claims[k] = v
			}
			p, err := o.Verify(ctx, iss.Sign(claims), aud)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Servers, tt.want) {
				t.Errorf("servers %q, want %q", p.Servers, tt.want)
			}
		})
	}
}

func TestTokenAudience(t *testing.T) {
	iss := authtest.NewIssuer(t)
	ctx := context.Background()
	// Configured audiences replace the request's.
	o := newOAuth(t, iss, nil, func(o *OAuthOptions) { o.Audiences = []string{"api://gateway"} })
	if _, err := o.Verify(ctx, iss.Token("a", "api://gateway"), []string{testAudience}); err != nil {
		t.Errorf("configured audience: %v", err)
	}
	if _, err := o.Verify(ctx, iss.Token("a", testAudience), []string{testAudience}); err == nil {
		t.Error("the request's audience was accepted although one is configured")
	}
	// A token without aud (Cognito's) is accepted when its client_id is
	// an accepted audience, and only then.
	o = newOAuth(t, iss, nil, func(o *OAuthOptions) { o.Audiences = []string{"app-client-1"} })
	cognito := iss.Sign(map[string]any{"sub": "app-client-1", "client_id": "app-client-1", "token_use": "access", "scope": "mcp/*"})
	p, err := o.Verify(ctx, cognito, nil)
	if err != nil {
		t.Fatalf("Cognito-style token: %v", err)
	}
	if p.ClientID != "app-client-1" {
		t.Errorf("client id %q", p.ClientID)
	}
	other := iss.Sign(map[string]any{"sub": "x", "client_id": "app-client-2"})
	rejectedToken(t, func() error { _, err := o.Verify(ctx, other, nil); return err }())
	// With neither configured nor request audiences, nothing is accepted.
	o = newOAuth(t, iss, nil, nil)
	rejectedToken(t, func() error { _, err := o.Verify(ctx, iss.Token("a", testAudience), nil); return err }())
}

func TestKeyRotation(t *testing.T) {
	iss := authtest.NewIssuer(t)
	c := newClock()
	o := newOAuth(t, iss, c, nil)
	ctx := context.Background()
	aud := []string{testAudience}
	old := iss.SigningKey()
	if _, err := o.Verify(ctx, iss.Token("a", testAudience), aud); err != nil {
		t.Fatal(err)
	}
	if n := iss.JWKSFetches(); n != 1 {
		t.Fatalf("%d JWKS fetches after the first token, want 1", n)
	}
	// Many tokens, one fetch.
	for range 20 {
		if _, err := o.Verify(ctx, iss.Token("a", testAudience), aud); err != nil {
			t.Fatal(err)
		}
	}
	if n := iss.JWKSFetches(); n != 1 {
		t.Errorf("%d JWKS fetches after 21 tokens, want 1 (cached)", n)
	}

	// The issuer rotates: a new key signs, the old one is withdrawn.
	next := authtest.NewRSAKey(t, "key-2")
	iss.SetKeys(next)
	rotated := iss.Token("a", testAudience)
	c.advance(10 * time.Second)
	// Within a minute of the last fetch the new kid is not fetched: a
	// flood of unknown kids costs the issuer nothing.
	for range 50 {
		_, err := o.Verify(ctx, rotated, aud)
		rejectedToken(t, err)
	}
	if n := iss.JWKSFetches(); n != 1 {
		t.Errorf("%d JWKS fetches within the minute, want 1", n)
	}
	c.advance(time.Minute)
	if _, err := o.Verify(ctx, rotated, aud); err != nil {
		t.Fatalf("token of the rotated key a minute later: %v", err)
	}
	if n := iss.JWKSFetches(); n != 2 {
		t.Errorf("%d JWKS fetches, want 2", n)
	}
	// The withdrawn key no longer verifies anything.
	_, err := o.Verify(ctx, iss.SignWith(old, map[string]any{"sub": "a", "aud": testAudience}), aud)
	rejectedToken(t, err)

	// Keys older than MaxKeyAge are fetched again when a token comes.
	c.advance(DefaultMaxKeyAge)
	if _, err := o.Verify(ctx, tokenAt(iss, c), aud); err != nil {
		t.Fatal(err)
	}
	if n := iss.JWKSFetches(); n != 3 {
		t.Errorf("%d JWKS fetches after MaxKeyAge, want 3", n)
	}
}

func TestIssuerUnavailable(t *testing.T) {
	iss := authtest.NewIssuer(t)
	c := newClock()
	ctx := context.Background()
	aud := []string{testAudience}
	token := iss.Token("a", testAudience)

	// Down from the start: no key is known, so tokens cannot be checked.
	iss.SetDown(true)
	o := newOAuth(t, iss, c, nil)
	_, err := o.Verify(ctx, token, aud)
	var un *UnavailableError
	if !errors.As(err, &un) {
		t.Fatalf("err = %v, want UnavailableError", err)
	}
	fetches := iss.MetadataFetches()
	_, err = o.Verify(ctx, token, aud)
	if !errors.As(err, &un) || un.RetryAfter <= 0 || un.RetryAfter > failedFetchRetry {
		t.Errorf("second try: err = %v, want UnavailableError with a retry hint ≤ 5s", err)
	}
	if iss.MetadataFetches() != fetches {
		t.Error("a failed fetch was retried at once")
	}
	c.advance(failedFetchRetry)
	iss.SetDown(false)
	if _, err := o.Verify(ctx, token, aud); err != nil {
		t.Fatalf("issuer back: %v", err)
	}

	// Down again: cached keys still verify their tokens; a token whose
	// key is unknown cannot be checked, which is a 503, not a 401.
	iss.SetDown(true)
	c.advance(2 * time.Minute)
	if _, err := o.Verify(ctx, iss.Token("b", testAudience), aud); err != nil {
		t.Errorf("cached key with the issuer down: %v", err)
	}
	stranger := authtest.NewRSAKey(t, "new-key")
	c.advance(2 * time.Minute)
	_, err = o.Verify(ctx, iss.SignWith(stranger, map[string]any{"sub": "a", "aud": testAudience}), aud)
	if !errors.As(err, &un) {
		t.Errorf("unknown kid with the issuer down: err = %v, want UnavailableError", err)
	}
	// Keys past their age are kept while the issuer is down.
	c.advance(DefaultMaxKeyAge)
	if _, err := o.Verify(ctx, tokenAt(iss, c), aud); err != nil {
		t.Errorf("old cached key with the issuer down: %v", err)
	}
}

// TestConcurrentFirstFetch: many tokens arriving at once on a cold
// instance cause one fetch of the keys.
func TestConcurrentFirstFetch(t *testing.T) {
	iss := authtest.NewIssuer(t)
	o := newOAuth(t, iss, nil, nil)
	token := iss.Token("a", testAudience)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if _, err := o.Verify(context.Background(), token, []string{testAudience}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := iss.JWKSFetches(); n != 1 {
		t.Errorf("%d JWKS fetches, want 1", n)
	}
}

func TestDiscovery(t *testing.T) {
	ctx := context.Background()
	t.Run("RFC 8414 when there is no OpenID configuration", func(t *testing.T) {
		iss := authtest.NewIssuer(t)
		iss.SetMetadata(authtest.MetadataRFC8414)
		o := newOAuth(t, iss, nil, nil)
		if _, err := o.Verify(ctx, iss.Token("a", testAudience), []string{testAudience}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("JWKS URL configured: no discovery", func(t *testing.T) {
		iss := authtest.NewIssuer(t)
		o := newOAuth(t, iss, nil, func(o *OAuthOptions) { o.JWKSURL = iss.URL + "/jwks" })
		if _, err := o.Verify(ctx, iss.Token("a", testAudience), []string{testAudience}); err != nil {
			t.Fatal(err)
		}
		if n := iss.MetadataFetches(); n != 0 {
			t.Errorf("%d metadata fetches, want 0", n)
		}
	})
	t.Run("metadata naming another issuer", func(t *testing.T) {
		iss := authtest.NewIssuer(t)
		// The same server under another name: its metadata says
		// 127.0.0.1, not localhost.
		other := strings.Replace(iss.URL, "127.0.0.1", "localhost", 1)
		o, err := NewOAuth(OAuthOptions{Issuer: other})
		if err != nil {
			t.Fatal(err)
		}
		tok := iss.Sign(map[string]any{"sub": "a", "aud": testAudience, "iss": other})
		_, err = o.Verify(ctx, tok, []string{testAudience})
		var un *UnavailableError
		if !errors.As(err, &un) || !strings.Contains(err.Error(), "names issuer") {
			t.Errorf("err = %v, want the issuer mismatch reported as unavailable keys", err)
		}
	})
}

func TestOAuthOptions(t *testing.T) {
	for _, opts := range []OAuthOptions{
		{},
		{Issuer: "http://idp.example.com"},
		{Issuer: "https://user:pass@idp.example.com"},
		{Issuer: "https://idp.example.com", JWKSURL: "http://10.0.0.1/jwks"},
		{Issuer: "not a url"},
	} {
		if _, err := NewOAuth(opts); err == nil {
			t.Errorf("NewOAuth(%+v) accepted", opts)
		}
	}
	for _, opts := range []OAuthOptions{
		{Issuer: "https://login.microsoftonline.com/tenant/v2.0"},
		{Issuer: "http://127.0.0.1:9999", JWKSURL: "http://localhost:9999/jwks"},
	} {
		if _, err := NewOAuth(opts); err != nil {
			t.Errorf("NewOAuth(%+v): %v", opts, err)
		}
	}
}

// TestOAuthErrorsRedactURLs: an issuer or JWKS URL the gateway refuses,
// or fails to fetch, is named with its query values and userinfo redacted.
func TestOAuthErrorsRedactURLs(t *testing.T) {
	for _, opts := range []OAuthOptions{
		{Issuer: "https://user:s3cr3t@idp.example.com"},
		{Issuer: "https://idp.example.com", JWKSURL: "http://10.0.0.1/jwks?token=s3cr3t"},
	} {
		_, err := NewOAuth(opts)
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("NewOAuth(%+v): %v, want refused without the secret", opts, err)
		}
	}
	ln := httptest.NewServer(http.NotFoundHandler())
	gone := ln.URL
	ln.Close()
	token := authtest.NewIssuer(t).SignWith(authtest.NewRSAKey(t, "k1"), map[string]any{"sub": "a", "aud": testAudience})
	for _, opts := range []OAuthOptions{
		{Issuer: gone + "/?token=s3cr3t"},
		{Issuer: gone, JWKSURL: gone + "/jwks?token=s3cr3t"},
	} {
		o, err := NewOAuth(opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = o.Verify(context.Background(), token, []string{testAudience})
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "REDACTED") {
			t.Errorf("a failed fetch of %+v: %v, want an error without the secret", opts, err)
		}
	}
}

func TestMetadataURLs(t *testing.T) {
	got := metadataURLs("https://idp.example.com/tenant/v2.0/")
	want := []string{
		"https://idp.example.com/tenant/v2.0/.well-known/openid-configuration",
		"https://idp.example.com/.well-known/oauth-authorization-server/tenant/v2.0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("metadataURLs = %q, want %q", got, want)
	}
}

// TestAuthenticateTokensAndKeys: the Authenticator sends JWTs to OAuth
// and everything else to the keys table; without OAuth a JWT is a key.
func TestAuthenticateTokensAndKeys(t *testing.T) {
	iss := authtest.NewIssuer(t)
	o := newOAuth(t, iss, nil, nil)
	a := New(nil, "", Options{OAuth: o})
	req := func(h http.Header) Request { return Request{Header: h, Audiences: []string{testAudience}} }
	p, err := a.Authenticate(context.Background(), req(http.Header{"Authorization": {"Bearer " + iss.Token("alice", testAudience, "mcp:demo")}}))
	if err != nil || p.Kind != KindOAuth {
		t.Fatalf("token: %+v, %v", p, err)
	}
	// A token in X-Api-Key is a token too.
	p, err = a.Authenticate(context.Background(), req(http.Header{HeaderAPIKey: {iss.Token("alice", testAudience, "mcp:demo")}}))
	if err != nil || p.Kind != KindOAuth {
		t.Fatalf("token in X-Api-Key: %+v, %v", p, err)
	}
	_, err = a.Authenticate(context.Background(), req(http.Header{"Authorization": {"Bearer " + iss.Token("alice", "https://elsewhere/mcp")}}))
	rejectedToken(t, err)
}

// BenchmarkVerify measures checking one token with its key cached: the
// cost a token adds to a request, beside a key's cached lookup.
func BenchmarkVerify(b *testing.B) {
	iss := authtest.NewIssuer(b)
	ec := authtest.NewECKey(b, "ec")
	iss.SetKeys(iss.SigningKey(), ec)
	o, err := NewOAuth(OAuthOptions{Issuer: iss.URL})
	if err != nil {
		b.Fatal(err)
	}
	for name, tok := range map[string]string{
		"RS256": iss.Token("a", testAudience, "mcp:demo"),
		"ES256": iss.SignWith(ec, map[string]any{"sub": "a", "aud": testAudience, "scope": "mcp:demo"}),
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := o.Verify(context.Background(), tok, []string{testAudience}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestIDTokensRefused: an OpenID Connect ID token is not an access token,
// even when its aud is the client id that OAUTH_AUDIENCE names (the Entra
// recipe) and it carries roles that would grant servers. Access tokens of
// the usual shapes (RFC 9068's typ at+jwt, Entra's and Keycloak's typ JWT,
// Cognito's and Okta's without typ) still pass; other token types do not.
func TestIDTokensRefused(t *testing.T) {
	iss := authtest.NewIssuer(t)
	o := newOAuth(t, iss, nil, func(o *OAuthOptions) { o.Audiences = []string{"client-1"}; o.ScopePrefix = "mcp." })
	key := iss.SigningKey()
	access := map[string]any{"sub": "u1", "aud": "client-1", "roles": []string{"mcp.github"}}
	with := func(extra map[string]any) map[string]any {
		c := map[string]any{}
		for k, v := range access {
			c[k] = v
		}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	for _, tc := range []struct {
		name string
		typ  string
		c    map[string]any
		ok   bool
	}{
		{"access token, typ at+jwt", "at+jwt", access, true},
		{"access token, typ application/at+jwt", "application/at+jwt", access, true},
		{"access token, typ JWT", "JWT", access, true},
		{"access token, no typ", "", access, true},
		{"ID token with nonce", "JWT", with(map[string]any{"nonce": "n-1"}), false},
		{"ID token with at_hash", "JWT", with(map[string]any{"at_hash": "x"}), false},
		{"ID token with c_hash, no typ", "", with(map[string]any{"c_hash": "x"}), false},
		{"ID token with nonce, typ at+jwt", "at+jwt", with(map[string]any{"nonce": "n-1"}), false},
		{"Cognito ID token", "", with(map[string]any{"token_use": "id"}), false},
		{"logout token", "logout+jwt", access, false},
		{"security event token", "secevent+jwt", access, false},
	} {
		p, err := o.Verify(context.Background(), iss.SignTyped(key, tc.typ, tc.c), nil)
		switch {
		case tc.ok && (err != nil || !slices.Equal(p.Servers, []string{"github"})):
			t.Errorf("%s: %v, %v; want it accepted, granting github", tc.name, p, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: accepted, granting %v; want it refused", tc.name, p.Servers)
		case !tc.ok:
			rejectedToken(t, err)
		}
	}
}
