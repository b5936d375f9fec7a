// Package authtest runs a minimal OAuth 2.1 authorization server on
// loopback for tests: signing keys generated per test, its metadata (OpenID
// Connect and RFC 8414), a JWKS, and a token endpoint for the client
// credentials grant. Tokens are signed with go-jose.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Metadata says which metadata documents the issuer serves.
type Metadata int

const (
	// MetadataBoth serves OpenID Connect discovery and RFC 8414 metadata.
	MetadataBoth Metadata = iota
	// MetadataRFC8414 serves only /.well-known/oauth-authorization-server.
	MetadataRFC8414
)

// Key is one signing key of the issuer.
type Key struct {
	ID  string
	Alg jose.SignatureAlgorithm
	// Private is the key's private half (*rsa.PrivateKey or
	// *ecdsa.PrivateKey).
	Private crypto.Signer
}

// Public is the key as the JWKS publishes it.
func (k *Key) Public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.Private.Public(), KeyID: k.ID, Algorithm: string(k.Alg), Use: "sig"}
}

// NewRSAKey generates a 2048-bit RS256 key.
func NewRSAKey(t testing.TB, id string) *Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{ID: id, Alg: jose.RS256, Private: k}
}

// NewECKey generates a P-256 ES256 key.
func NewECKey(t testing.TB, id string) *Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{ID: id, Alg: jose.ES256, Private: k}
}

// Issuer is the authorization server. URL is its issuer identifier.
type Issuer struct {
	URL string
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	keys      []*Key // published; the first signs
	metadata  Metadata
	down      bool
	clients   map[string]string // client id → secret
	lastToken map[string]any    // claims of the last token issued

	jwksFetches atomic.Int64
	mdFetches   atomic.Int64
	tokens      atomic.Int64
}

// NewIssuer starts an issuer with one RS256 key ("key-1"), serving until
// the test ends.
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	iss := &Issuer{t: t, clients: map[string]string{}}
	iss.keys = []*Key{NewRSAKey(t, "key-1")}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", iss.serveMetadata(false))
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", iss.serveMetadata(true))
	mux.HandleFunc("GET /jwks", iss.serveJWKS)
	mux.HandleFunc("POST /token", iss.serveToken)
	iss.srv = httptest.NewServer(iss.gate(mux))
	t.Cleanup(iss.srv.Close)
	iss.URL = iss.srv.URL
	return iss
}

// gate answers 503 to everything while the issuer is down.
func (iss *Issuer) gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		iss.mu.Lock()
		down := iss.down
		iss.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// SetDown makes every request fail (true) or work again (false).
func (iss *Issuer) SetDown(down bool) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.down = down
}

// SetMetadata chooses the metadata documents served.
func (iss *Issuer) SetMetadata(m Metadata) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.metadata = m
}

// SetKeys replaces the published keys; the first signs from now on.
func (iss *Issuer) SetKeys(keys ...*Key) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.keys = keys
}

// SigningKey is the key that signs new tokens.
func (iss *Issuer) SigningKey() *Key {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	return iss.keys[0]
}

// JWKSFetches is how many times the JWKS was requested.
func (iss *Issuer) JWKSFetches() int64 { return iss.jwksFetches.Load() }

// MetadataFetches is how many metadata documents were requested.
func (iss *Issuer) MetadataFetches() int64 { return iss.mdFetches.Load() }

// TokensIssued is how many tokens the token endpoint gave out.
func (iss *Issuer) TokensIssued() int64 { return iss.tokens.Load() }

// LastToken is the claims of the token the token endpoint issued last.
func (iss *Issuer) LastToken() map[string]any {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	return iss.lastToken
}

// AddClient registers a confidential client for the client credentials
// grant.
func (iss *Issuer) AddClient(id, secret string) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.clients[id] = secret
}

func (iss *Issuer) serveMetadata(rfc8414 bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		iss.mdFetches.Add(1)
		iss.mu.Lock()
		m := iss.metadata
		iss.mu.Unlock()
		if m == MetadataRFC8414 && !rfc8414 {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, map[string]any{
			"issuer":                                iss.URL,
			"jwks_uri":                              iss.URL + "/jwks",
			"authorization_endpoint":                iss.URL + "/authorize",
			"token_endpoint":                        iss.URL + "/token",
			"response_types_supported":              []string{"code"},
			"grant_types_supported":                 []string{"client_credentials", "authorization_code"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
			"code_challenge_methods_supported":      []string{"S256"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	}
}

func (iss *Issuer) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	iss.jwksFetches.Add(1)
	iss.mu.Lock()
	set := jose.JSONWebKeySet{}
	for _, k := range iss.keys {
		set.Keys = append(set.Keys, k.Public())
	}
	iss.mu.Unlock()
	writeJSON(w, set)
}

// serveToken implements the client credentials grant (RFC 6749 §4.4) with
// RFC 8707 resource indicators: the token's aud is the resource asked for.
func (iss *Issuer) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	iss.mu.Lock()
	want, known := iss.clients[id]
	iss.mu.Unlock()
	if !known || secret != want {
		tokenError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	if r.PostForm.Get("grant_type") != "client_credentials" {
		tokenError(w, http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	claims := map[string]any{
		"sub":       id,
		"client_id": id,
		"scope":     r.PostForm.Get("scope"),
	}
	if res := r.PostForm.Get("resource"); res != "" {
		claims["aud"] = res
	}
	tok := iss.Sign(claims)
	iss.mu.Lock()
	iss.lastToken = claims
	iss.mu.Unlock()
	iss.tokens.Add(1)
	writeJSON(w, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 300, "scope": claims["scope"]})
}

func tokenError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Sign returns a token with claims, signed by the signing key. iss, iat,
// and exp (5 minutes) are added unless claims sets them (a nil value
// leaves the claim out).
func (iss *Issuer) Sign(claims map[string]any) string {
	return iss.SignWith(iss.SigningKey(), claims)
}

// SignWith is Sign with a given key (which the issuer may not publish).
func (iss *Issuer) SignWith(k *Key, claims map[string]any) string {
	iss.t.Helper()
	return iss.SignTyped(k, "at+jwt", claims)
}

// SignTyped is SignWith with the header's typ ("" leaves it out): an ID
// token's "JWT", say, where Sign writes RFC 9068's "at+jwt".
func (iss *Issuer) SignTyped(k *Key, typ string, claims map[string]any) string {
	iss.t.Helper()
	now := time.Now()
	full := map[string]any{"iss": iss.URL, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
	for name, v := range claims {
		if v == nil {
			delete(full, name)
			continue
		}
		full[name] = v
	}
	payload, err := json.Marshal(full)
	if err != nil {
		iss.t.Fatal(err)
	}
	return iss.compact(k.Alg, k.Private, k.ID, typ, payload)
}

// compact signs payload with key under alg, naming kid and typ, in compact
// form.
func (iss *Issuer) compact(alg jose.SignatureAlgorithm, key any, kid, typ string, payload []byte) string {
	iss.t.Helper()
	opts := (&jose.SignerOptions{}).WithHeader(jose.HeaderKey("kid"), kid)
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		iss.t.Fatal(err)
	}
	sig, err := signer.Sign(payload)
	if err != nil {
		iss.t.Fatal(err)
	}
	out, err := sig.CompactSerialize()
	if err != nil {
		iss.t.Fatal(err)
	}
	return out
}

// Token is a valid token for sub with audience aud and scopes.
func (iss *Issuer) Token(sub, aud string, scopes ...string) string {
	return iss.Sign(map[string]any{"sub": sub, "aud": aud, "scope": strings.Join(scopes, " ")})
}

// String names the issuer in test output.
func (iss *Issuer) String() string { return fmt.Sprintf("issuer %s", iss.URL) }

// Hostile returns tokens for sub and aud that a resource server must
// refuse, by name: expired, not yet valid, from another issuer, for
// another audience, signed by an unpublished key, "alg: none",
// HMAC-signed with the issuer's public key as the secret, and a payload
// changed after signing (to grant every server).
func (iss *Issuer) Hostile(sub, aud string) map[string]string {
	iss.t.Helper()
	now := time.Now()
	key := iss.SigningKey()
	claims := func(extra map[string]any) map[string]any {
		c := map[string]any{"iss": iss.URL, "sub": sub, "aud": aud, "scope": "mcp:*", "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	segment := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			iss.t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	parts := func(tok string) []string { return strings.Split(tok, ".") }

	der, err := x509.MarshalPKIXPublicKey(key.Private.Public())
	if err != nil {
		iss.t.Fatal(err)
	}
	payload, _ := json.Marshal(claims(nil))
	hmac := iss.compact(jose.HS256, der, key.ID, "at+jwt", payload)
	valid := parts(iss.Sign(claims(map[string]any{"scope": "mcp:nothing"})))
	return map[string]string{
		"expired":                  iss.Sign(claims(map[string]any{"iat": now.Add(-time.Hour).Unix(), "exp": now.Add(-10 * time.Minute).Unix()})),
		"not yet valid":            iss.Sign(claims(map[string]any{"nbf": now.Add(10 * time.Minute).Unix()})),
		"wrong issuer":             iss.Sign(claims(map[string]any{"iss": "https://evil.example.com"})),
		"wrong audience":           iss.Sign(claims(map[string]any{"aud": "https://other.example.com/mcp"})),
		"unknown kid":              iss.SignWith(NewRSAKey(iss.t, "not-published"), claims(nil)),
		"alg none":                 segment(map[string]any{"alg": "none", "typ": "JWT", "kid": key.ID}) + "." + segment(claims(nil)) + ".",
		"HMAC with the public key": hmac,
		"tampered payload":         valid[0] + "." + segment(claims(nil)) + "." + valid[2],
	}
}
