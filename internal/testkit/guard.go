package testkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Guard stands an upstream behind a credential, as a real one would: every
// request that Check refuses is answered HTTP 401, except GET /openapi.json
// (documents are public). It records every request's headers.
type Guard struct {
	next http.Handler

	mu       sync.Mutex
	check    func(*http.Request, []byte) bool
	seen     []Seen
	accepted int
	refused  int
}

// Seen is a request a Guard saw.
type Seen struct {
	Method, Path string
	Header       http.Header
	// Refused says the Guard answered 401.
	Refused bool
}

// NewGuard wraps next; check sees each request and its body.
func NewGuard(next http.Handler, check func(r *http.Request, body []byte) bool) *Guard {
	return &Guard{next: next, check: check}
}

// SetCheck replaces the check, e.g. after a rotation.
func (g *Guard) SetCheck(check func(r *http.Request, body []byte) bool) {
	g.mu.Lock()
	g.check = check
	g.mu.Unlock()
}

// Counts returns how many requests were let through and refused.
func (g *Guard) Counts() (accepted, refused int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.accepted, g.refused
}

// Seen returns every request seen, in order.
func (g *Guard) Seen() []Seen {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Seen, len(g.seen))
	for i, s := range g.seen {
		out[i] = s
		out[i].Header = s.Header.Clone()
	}
	return out
}

// Carrying lists the requests seen that carried value in a header, as
// "METHOD /path Header".
func (g *Guard) Carrying(value string) []string {
	var out []string
	for _, s := range g.Seen() {
		for name, vs := range s.Header {
			if strings.Contains(strings.Join(vs, "\n"), value) {
				out = append(out, s.Method+" "+s.Path+" "+name)
			}
		}
	}
	return out
}

func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	r.Body = io.NopCloser(bytes.NewReader(body))
	g.mu.Lock()
	g.seen = append(g.seen, Seen{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()})
	check := g.check
	g.mu.Unlock()
	if !(r.Method == http.MethodGet && r.URL.Path == "/openapi.json") && (check == nil || !check(r, body)) {
		g.mu.Lock()
		g.refused++
		g.seen[len(g.seen)-1].Refused = true
		g.mu.Unlock()
		w.Header().Set("WWW-Authenticate", `Bearer realm="upstream"`)
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	g.mu.Lock()
	g.accepted++
	g.mu.Unlock()
	g.next.ServeHTTP(w, r)
}

// StartGuardedDemo runs a demo upstream behind a Guard on loopback.
func StartGuardedDemo(t testing.TB, check func(*http.Request, []byte) bool) (*Demo, *Guard) {
	t.Helper()
	d := StartDemo(t)
	g := NewGuard(d.Handler(), check)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	d.URL, d.SSEURL, d.SpecURL = srv.URL+"/mcp", srv.URL+"/sse", srv.URL+"/openapi.json"
	return d, g
}

// AgentRequest sends body to url as an agent would, with its key in every
// header an agent may carry one in (Authorization, X-Api-Key,
// x-litellm-api-key, a cookie: none may reach an upstream), the MCP
// request headers and extra; it returns the status and body.
func AgentRequest(t testing.TB, method, url, key, body string, extra http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("X-Litellm-Api-Key", key)
	req.Header.Set("Cookie", "session="+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	for k, vs := range extra {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// VerifySigV4 checks that r carries an AWS Signature Version 4 made with
// creds for service and region, by signing the same request again with the
// SDK's signer: the headers r's signature names, its body and its time.
func VerifySigV4(r *http.Request, body []byte, creds aws.Credentials, service, region string) error {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return errors.New("no AWS4-HMAC-SHA256 Authorization header")
	}
	var signed []string
	for part := range strings.SplitSeq(rest, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "SignedHeaders="); ok {
			signed = strings.Split(v, ";")
		}
	}
	if len(signed) == 0 {
		return errors.New("no SignedHeaders")
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("X-Amz-Date: %w", err)
	}
	again, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	again.Header = http.Header{}
	for _, h := range signed {
		switch h {
		case "host":
		case "content-length":
			again.ContentLength = r.ContentLength
		default:
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), service, region, at); err != nil {
		return err
	}
	if got := again.Header.Get("Authorization"); got != auth {
		return fmt.Errorf("signature does not verify:\n got  %s\n want %s", auth, got)
	}
	return nil
}

// TokenEndpoint is an OAuth 2.0 token endpoint for the client credentials
// grant on loopback: it issues numbered tokens that expire, by its own
// clock, after Lifetime.
type TokenEndpoint struct {
	// URL is the token endpoint.
	URL string

	mu       sync.Mutex
	nonce    string // makes tokens unique to this endpoint
	clientID string
	secret   string
	lifetime time.Duration
	now      func() time.Time
	issued   map[string]time.Time
	requests int
	params   []map[string]string
}

// StartTokenEndpoint runs a token endpoint that accepts clientID and
// secret (in a Basic header or the form), issuing tokens for lifetime by
// the clock now (nil: time.Now).
func StartTokenEndpoint(t testing.TB, clientID, secret string, lifetime time.Duration, now func() time.Time) *TokenEndpoint {
	t.Helper()
	if now == nil {
		now = time.Now
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	e := &TokenEndpoint{nonce: hex.EncodeToString(b), clientID: clientID, secret: secret, lifetime: lifetime, now: now, issued: map[string]time.Time{}}
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(srv.Close)
	e.URL = srv.URL + "/oauth/token"
	return e
}

func (e *TokenEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	id, sec, ok := r.BasicAuth()
	if !ok {
		id, sec = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests++
	e.params = append(e.params, map[string]string{"scope": r.PostForm.Get("scope"), "audience": r.PostForm.Get("audience"), "grant_type": r.PostForm.Get("grant_type")})
	w.Header().Set("Content-Type", "application/json")
	if r.PostForm.Get("grant_type") != "client_credentials" || id != e.clientID || sec != e.secret {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
		return
	}
	tok := fmt.Sprintf("at-%s-%d", e.nonce, len(e.issued)+1)
	e.issued[tok] = e.now().Add(e.lifetime)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": tok, "token_type": "Bearer", "expires_in": int(e.lifetime / time.Second),
	})
}

// SetSecret changes the client secret the endpoint accepts.
func (e *TokenEndpoint) SetSecret(s string) { e.mu.Lock(); e.secret = s; e.mu.Unlock() }

// Revoke makes every token issued so far invalid.
func (e *TokenEndpoint) Revoke() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.issued {
		e.issued[k] = time.Time{}
	}
}

// Valid reports whether token was issued and has not expired.
func (e *TokenEndpoint) Valid(token string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.issued[token]
	return ok && e.now().Before(exp)
}

// BearerValid checks a request's "Authorization: Bearer" token.
func (e *TokenEndpoint) BearerValid(r *http.Request, _ []byte) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && e.Valid(tok)
}

// Issued returns every token issued.
func (e *TokenEndpoint) Issued() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.issued))
	for tok := range e.issued {
		out = append(out, tok)
	}
	return out
}

// Requests returns how many token requests were made.
func (e *TokenEndpoint) Requests() int { e.mu.Lock(); defer e.mu.Unlock(); return e.requests }

// LastParams returns the scope, audience and grant_type of the last
// token request.
func (e *TokenEndpoint) LastParams() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.params) == 0 {
		return nil
	}
	return e.params[len(e.params)-1]
}
