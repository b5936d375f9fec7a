package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"golang.org/x/sync/singleflight"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
	"github.com/mcpgate/mcpgate/internal/secret"
)

// Credentials are added to upstream requests by an http.RoundTripper of
// their own, wrapped around the pool's transport: forwarded agent headers,
// then static headers, then the server's credential, each set only on
// requests to the upstream's own origin (never to another host an upstream
// redirects or points to). After a 401 or 403 the credential's secret is
// read once more, and the request is sent again only if the value changed
// (a rotation); otherwise the refusal is the answer.

// Caller is who an upstream request is made for.
type Caller struct {
	// Principal identifies the agent, e.g. its key's hash. Sessions, tool
	// lists and server info are never shared between principals: a
	// stateful upstream's state for one agent never reaches another.
	Principal string
	// Header holds the agent's request headers to forward: those the
	// server's forward_headers name (NeverForwarded ones are dropped
	// again here).
	Header http.Header
}

// Secrets resolves secret references.
type Secrets interface {
	Resolve(ctx context.Context, ref secret.Ref) (string, error)
	Refresh(ctx context.Context, ref secret.Ref, stale string) (string, error)
}

var _ Secrets = (*secret.Resolver)(nil)

// CredentialError means the gateway could not produce a server's
// credential (a secret that cannot be read, a token endpoint that refuses);
// the request was not sent. It never holds a secret value.
type CredentialError struct {
	ServerID string
	Err      error
}

func (e *CredentialError) Error() string {
	return fmt.Sprintf("credential for server %s: %v", e.ServerID, e.Err)
}

func (e *CredentialError) Unwrap() error { return e.Err }

// ErrReservedSecret refuses a server credential that is a secret the
// gateway keeps for itself: whoever writes the servers table could have it
// sent to any host.
var ErrReservedSecret = errors.New("the credential is a secret the gateway keeps for itself (the request-state key); give the upstream a secret of its own")

// Reserved is a secret the gateway keeps for itself, such as the key that
// seals request states: no server's credential may refer to it or hold its
// value. Only a digest of the value is kept.
type Reserved struct {
	ref secret.Ref
	sum [sha256.Size]byte
}

// Reserve returns the secret ref, whose value is value, as Reserved.
func Reserve(ref secret.Ref, value string) Reserved {
	return Reserved{ref: ref, sum: sha256.Sum256([]byte(strings.TrimSpace(value)))}
}

// refused checks a credential's reference and, once read, its value ("" for
// not yet) against the reserved secrets.
func refused(reserved []Reserved, ref secret.Ref, value string) error {
	var sum [sha256.Size]byte
	if value != "" {
		sum = sha256.Sum256([]byte(strings.TrimSpace(value)))
	}
	for _, r := range reserved {
		if sameSecret(r.ref, ref) || value != "" && subtle.ConstantTimeCompare(sum[:], r.sum[:]) == 1 {
			return ErrReservedSecret
		}
	}
	return nil
}

// sameSecret reports whether two references name one secret: one kind and
// name, a Secrets Manager secret also by its ARN (whose name part may end
// in the six characters Secrets Manager appends), whatever JSON key.
func sameSecret(a, b secret.Ref) bool {
	if a.Kind != b.Kind {
		return false
	}
	if a.Name == b.Name {
		return true
	}
	if a.Kind != secret.SecretsManager {
		return false
	}
	an, bn := smName(a.Name), smName(b.Name)
	return an == bn || trimSuffix6(an) == bn || an == trimSuffix6(bn)
}

// smName is a Secrets Manager secret's name, from its ARN if it is one.
func smName(s string) string {
	if _, name, ok := strings.Cut(s, ":secret:"); ok && strings.HasPrefix(s, "arn:") {
		return name
	}
	return s
}

// trimSuffix6 drops the "-XXXXXX" Secrets Manager appends to a name in an
// ARN.
func trimSuffix6(name string) string {
	if i := len(name) - 7; i > 0 && name[i] == '-' {
		return name[:i]
	}
	return name
}

// credential adds one server identity's headers and credential.
type credential struct {
	serverID string
	auth     *registry.Auth
	static   map[string]string
	forward  []string
	secrets  Secrets
	reserved []Reserved
	sigv4    *sigV4
	token    *tokenSource
	log      *slog.Logger
}

type sigV4 struct {
	creds   aws.CredentialsProvider
	service string
	region  string
	signer  *v4.Signer
}

// newCredential builds srv's credential.
func (p *Pool) newCredential(srv *registry.Server) *credential {
	c := &credential{
		serverID: srv.ID, auth: srv.Auth, static: srv.StaticHeaders, forward: srv.ForwardHeaders,
		secrets: p.secrets, reserved: p.reserved, log: p.log,
	}
	if a := srv.Auth; a != nil {
		switch a.Type {
		case registry.AuthSigV4:
			region := a.Region
			if region == "" {
				region = p.awsRegion
			}
			c.sigv4 = &sigV4{creds: p.awsCreds, service: a.Service, region: region, signer: v4.NewSigner()}
		case registry.AuthOAuth2:
			c.token = &tokenSource{
				cfg: clientcredentials.Config{
					ClientID: a.ClientID, TokenURL: a.TokenURL,
					Scopes: strings.Fields(a.Scope),
					// RFC 6749 2.3.1: servers must accept HTTP Basic; one
					// style means one request per attempt.
					AuthStyle: oauth2.AuthStyleInHeader,
				},
				secretRef: a.Secret, secrets: p.secrets, reserved: p.reserved, serverID: srv.ID, now: time.Now,
				// A token request carries the client secret: it never
				// follows a redirect.
				client: &http.Client{
					Transport:     p.clientFor(srv).Transport,
					CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
				},
			}
			if a.Audience != "" {
				c.token.cfg.EndpointParams = url.Values{"audience": {a.Audience}}
			}
		}
	}
	return c
}

// credTransport applies a credential to the requests of one upstream.
type credTransport struct {
	base http.RoundTripper
	cred *credential
	// origin, if set, is the only origin (scheme, host, port) the
	// credential goes to.
	origin *url.URL
}

type credentialKey struct{}

// withCredential marks a context whose requests are an OpenAPI server's
// API calls, which carry the credential (its document's fetch does not).
func withCredential(ctx context.Context) context.Context {
	return context.WithValue(ctx, credentialKey{}, true)
}

type forwardKey struct{}

// withForward puts the caller's headers to forward in ctx.
func withForward(ctx context.Context, h http.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return context.WithValue(ctx, forwardKey{}, h)
}

func (t *credTransport) applies(req *http.Request) bool {
	return t.origin == nil || safeurl.SameOrigin(req.URL, t.origin)
}

func (t *credTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.applies(req) {
		return t.base.RoundTrip(req)
	}
	out, used, err := t.cred.prepare(req)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	resp, err := t.base.RoundTrip(out)
	if err != nil || (resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden) || used == "" {
		return resp, err
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return resp, nil // cannot be sent again
	}
	changed, rerr := t.cred.refresh(req.Context(), used)
	if rerr != nil || !changed {
		t.cred.log.Warn("upstream refused the gateway's credential", "server_id", t.cred.serverID, "status", resp.StatusCode,
			"credential", string(t.cred.auth.Type), "reread", errText(rerr, "unchanged"))
		return resp, nil
	}
	t.cred.log.Info("upstream refused the gateway's credential; sending again with the value read anew", "server_id", t.cred.serverID, "status", resp.StatusCode)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		if retry.Body, err = req.GetBody(); err != nil {
			return nil, fmt.Errorf("send again: %w", err)
		}
	}
	out, _, err = t.cred.prepare(retry)
	if err != nil {
		return nil, err
	}
	return t.base.RoundTrip(out)
}

func errText(err error, none string) string {
	if err == nil {
		return none
	}
	return err.Error()
}

// prepare returns a copy of req with the forwarded and static headers and
// the credential, and the secret value or token it used ("" for none, or
// one that cannot be refreshed).
func (c *credential) prepare(req *http.Request) (*http.Request, string, error) {
	out := req.Clone(req.Context())
	if fwd, _ := req.Context().Value(forwardKey{}).(http.Header); fwd != nil {
		for _, name := range c.forward {
			if vs := fwd.Values(name); len(vs) > 0 && !registry.NeverForwarded(name) {
				out.Header[name] = append([]string(nil), vs...)
			}
		}
	}
	for name, v := range c.static {
		out.Header.Set(name, v)
	}
	a := c.auth
	if a == nil {
		return out, "", nil
	}
	ctx := req.Context()
	fail := func(err error) (*http.Request, string, error) {
		return nil, "", &CredentialError{ServerID: c.serverID, Err: err}
	}
	if a.Type != registry.AuthSigV4 && c.secrets == nil {
		return fail(errors.New("the gateway has no secret resolver configured"))
	}
	if err := refused(c.reserved, a.Secret, ""); a.Type != registry.AuthSigV4 && err != nil {
		return fail(err)
	}
	switch a.Type {
	case registry.AuthSigV4:
		if err := c.sigv4.sign(ctx, out); err != nil {
			return fail(err)
		}
		return out, "", nil
	case registry.AuthOAuth2:
		tok, err := c.token.token(ctx)
		if err != nil {
			return fail(err)
		}
		out.Header.Set("Authorization", "Bearer "+tok)
		return out, tok, nil
	}
	v, err := c.secrets.Resolve(ctx, a.Secret)
	if err != nil {
		return fail(err)
	}
	if err := refused(c.reserved, a.Secret, v); err != nil {
		return fail(err)
	}
	hv, err := headerValue(a, v)
	if err != nil {
		return fail(err)
	}
	out.Header.Set(a.Header, hv)
	return out, v, nil
}

// headerValue renders a secret value as its header's value.
func headerValue(a *registry.Auth, v string) (string, error) {
	v = strings.TrimSpace(v)
	if strings.ContainsFunc(v, clip.IsControl) {
		return "", fmt.Errorf("the value of %s contains control characters, which cannot go in a header", a.Secret)
	}
	switch a.Type {
	case registry.AuthBearer:
		return "Bearer " + v, nil
	case registry.AuthBasic:
		if !strings.Contains(v, ":") {
			return "", fmt.Errorf("the value of %s must be user:password for basic auth", a.Secret)
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(v)), nil
	}
	return v, nil
}

// refresh re-reads the credential after the upstream refused used, and
// reports whether there is a different one to try.
func (c *credential) refresh(ctx context.Context, used string) (bool, error) {
	if c.auth.Type == registry.AuthOAuth2 {
		tok, err := c.token.refresh(ctx, used)
		return err == nil && tok != used, err
	}
	v, err := c.secrets.Refresh(ctx, c.auth.Secret, used)
	if err == nil {
		err = refused(c.reserved, c.auth.Secret, v)
	}
	return err == nil && v != used, err
}

// sign signs req for AWS with the gateway's own credentials, last, over
// every header set so far.
func (s *sigV4) sign(ctx context.Context, req *http.Request) error {
	if s.creds == nil {
		return errors.New("aws_sigv4: the gateway has no AWS credentials configured")
	}
	if s.region == "" {
		return errors.New("aws_sigv4: no region (set auth.region or AWS_REGION)")
	}
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("aws_sigv4: get AWS credentials: %w", err)
	}
	sum := sha256.New()
	if req.Body != nil && req.Body != http.NoBody {
		var body io.ReadCloser = req.Body
		if req.GetBody != nil {
			if body, err = req.GetBody(); err != nil {
				return fmt.Errorf("aws_sigv4: read body: %w", err)
			}
			_, err = io.Copy(sum, body)
			body.Close()
		} else {
			var buf bytes.Buffer
			_, err = io.Copy(io.MultiWriter(sum, &buf), body)
			body.Close()
			data := buf.Bytes()
			req.Body = io.NopCloser(bytes.NewReader(data))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		}
		if err != nil {
			return fmt.Errorf("aws_sigv4: read body: %w", err)
		}
	}
	req.Header.Del("Authorization")
	return s.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum.Sum(nil)), s.service, s.region, time.Now())
}

// tokenSource holds one OAuth 2.0 client-credentials token, fetched by one
// caller for all and replaced shortly before it expires.
type tokenSource struct {
	cfg       clientcredentials.Config // without the secret
	secretRef secret.Ref
	secrets   Secrets
	reserved  []Reserved
	client    *http.Client
	serverID  string
	now       func() time.Time
	group     singleflight.Group

	mu      sync.Mutex
	tok     string
	expiry  time.Time // zero: unknown, kept until refused
	fetched time.Time
}

// Token endpoint bounds.
const (
	tokenTimeout  = 10 * time.Second
	tokenFloor    = time.Second
	maxEarly      = 30 * time.Second
	maxTokenBytes = 16 << 10
)

// token returns a token that is not about to expire.
func (ts *tokenSource) token(ctx context.Context) (string, error) {
	ts.mu.Lock()
	tok, ok := ts.tok, ts.usable()
	ts.mu.Unlock()
	if ok {
		return tok, nil
	}
	return ts.fetch(ctx, func() bool { return ts.usable() })
}

// usable reports whether the held token may still be sent; ts.mu is held.
func (ts *tokenSource) usable() bool {
	if ts.tok == "" {
		return false
	}
	if ts.expiry.IsZero() {
		return true
	}
	early := min(maxEarly, ts.expiry.Sub(ts.fetched)/5)
	return ts.now().Before(ts.expiry.Add(-early))
}

// refresh replaces a token the upstream refused, unless another caller
// already has, or one was fetched within tokenFloor.
func (ts *tokenSource) refresh(ctx context.Context, used string) (string, error) {
	good := func() bool {
		return ts.tok != "" && (ts.tok != used || ts.now().Sub(ts.fetched) < tokenFloor)
	}
	ts.mu.Lock()
	tok, ok := ts.tok, good()
	ts.mu.Unlock()
	if ok {
		return tok, nil
	}
	return ts.fetch(ctx, good)
}

// fetch gets a new token once for every concurrent caller, unless good
// says the held one will do (checked with ts.mu held).
func (ts *tokenSource) fetch(ctx context.Context, good func() bool) (string, error) {
	ch := ts.group.DoChan("token", func() (any, error) {
		ts.mu.Lock()
		if good() {
			tok := ts.tok
			ts.mu.Unlock()
			return tok, nil
		}
		ts.mu.Unlock()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenTimeout)
		defer cancel()
		tok, err := ts.request(fctx)
		if err != nil {
			return nil, err
		}
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.tok, ts.fetched, ts.expiry = tok.AccessToken, ts.now(), time.Time{}
		switch {
		case tok.ExpiresIn > 0:
			ts.expiry = ts.fetched.Add(time.Duration(tok.ExpiresIn) * time.Second)
		case !tok.Expiry.IsZero():
			ts.expiry = ts.fetched.Add(time.Until(tok.Expiry))
		}
		return ts.tok, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", r.Err
		}
		return r.Val.(string), nil
	case <-ctx.Done():
		return "", fmt.Errorf("wait for an OAuth token: %w", ctx.Err())
	}
}

// request asks the token endpoint for a token. A client secret it refuses
// is read once more (rotation) and, if changed, tried again.
func (ts *tokenSource) request(ctx context.Context) (*oauth2.Token, error) {
	sec, err := ts.secrets.Resolve(ctx, ts.secretRef)
	if err == nil {
		err = refused(ts.reserved, ts.secretRef, sec)
	}
	if err != nil {
		return nil, err
	}
	tok, err := ts.exchange(ctx, sec)
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode == http.StatusUnauthorized {
		if fresh, ferr := ts.secrets.Refresh(ctx, ts.secretRef, sec); ferr == nil && fresh != sec && refused(ts.reserved, ts.secretRef, fresh) == nil {
			tok, err = ts.exchange(ctx, fresh)
		}
	}
	if err != nil {
		return nil, tokenError(err)
	}
	if tok.AccessToken == "" || len(tok.AccessToken) > maxTokenBytes ||
		strings.ContainsFunc(tok.AccessToken, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, errors.New("the token endpoint returned no usable access token")
	}
	return tok, nil
}

func (ts *tokenSource) exchange(ctx context.Context, clientSecret string) (*oauth2.Token, error) {
	cfg := ts.cfg
	cfg.ClientSecret = strings.TrimSpace(clientSecret)
	return cfg.Token(context.WithValue(ctx, oauth2.HTTPClient, ts.client))
}

// tokenError describes a failed token request without the endpoint's
// answer body, which could echo what was sent.
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		if re.ErrorCode != "" {
			return fmt.Errorf("token endpoint answered HTTP %d, error %q", status, clip.String(re.ErrorCode, clip.Short))
		}
		return fmt.Errorf("token endpoint answered HTTP %d", status)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("token endpoint: %w", ue.Err)
	}
	return fmt.Errorf("token endpoint: %w", err)
}
