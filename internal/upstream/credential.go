package upstream

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/mcpgate/mcpgate/internal/clip"
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

// Caller is who an upstream request is made for: the gateway's caller (the
// agent), as far as the pool needs to know it. The server's identity
// (registry.Server.IdentityKey) is the gateway's side, never the caller's.
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
	static   map[string]string
	forward  []string
	// provider adds the server's auth; nil for none.
	provider provider
	log      *slog.Logger
	// trace, if not nil, puts the gateway's trace context in requests.
	trace HTTPTracer
}

// A provider adds one auth type's credential to requests. Each auth type
// has one, in a file of its own (auth_<type>.go), made by the function
// providers holds for the type; the server's identity key, which decides
// what it shares, is every field of its parsed auth
// (registry.Server.IdentityKey).
type provider interface {
	// apply sets the credential on req, a copy of the caller's, and returns
	// the secret value or token it used: "" for none, or one that cannot
	// be refreshed.
	apply(ctx context.Context, req *http.Request) (string, error)
	// refresh reads the credential anew after the upstream refused the
	// value used, and reports whether there is a different one to try.
	refresh(ctx context.Context, used string) (bool, error)
	// kind names the credential in logs: its auth type.
	kind() registry.AuthType
}

// providers makes, per auth type, a server's provider.
var providers = map[registry.AuthType]func(p *Pool, srv *registry.Server) provider{
	registry.AuthBearer: newBearer,
	registry.AuthAPIKey: newAPIKey,
	registry.AuthBasic:  newBasic,
	registry.AuthHeader: newHeader,
	registry.AuthSigV4:  newSigV4,
	registry.AuthOAuth2: newOAuth2,
}

// newCredential builds srv's credential.
func (p *Pool) newCredential(srv *registry.Server) *credential {
	c := &credential{serverID: srv.ID, static: srv.StaticHeaders, forward: srv.ForwardHeaders, log: p.log, trace: p.trace}
	if a := srv.Auth; a != nil {
		if newProvider, ok := providers[a.Type]; ok {
			c.provider = newProvider(p, srv)
		} else {
			c.provider = unknownAuth(a.Type)
		}
	}
	return c
}

// unknownAuth is the provider of an auth type that has none: it sends
// nothing. (A parsed server's auth type always has one.)
type unknownAuth registry.AuthType

func (u unknownAuth) kind() registry.AuthType { return registry.AuthType(u) }

func (u unknownAuth) apply(context.Context, *http.Request) (string, error) {
	return "", fmt.Errorf("the gateway cannot send credentials of auth type %q", string(u))
}

func (u unknownAuth) refresh(context.Context, string) (bool, error) { return false, nil }

// secretOf is a credential's secret: its reference, read with the pool's
// resolver and checked against the reserved secrets.
type secretOf struct {
	ref      secret.Ref
	secrets  Secrets
	reserved []Reserved
}

func (p *Pool) secretOf(ref secret.Ref) *secretOf {
	return &secretOf{ref: ref, secrets: p.secrets, reserved: p.reserved}
}

// usable checks, before anything is read, that the secret can be read and
// is not a reserved one.
func (s *secretOf) usable() error {
	if s.secrets == nil {
		return errors.New("the gateway has no secret resolver configured")
	}
	return refused(s.reserved, s.ref, "")
}

// read returns the secret's value.
func (s *secretOf) read(ctx context.Context) (string, error) {
	v, err := s.secrets.Resolve(ctx, s.ref)
	if err == nil {
		err = refused(s.reserved, s.ref, v)
	}
	if err != nil {
		return "", err
	}
	return v, nil
}

// reread returns the secret's value read anew, after stale was refused.
func (s *secretOf) reread(ctx context.Context, stale string) (string, error) {
	v, err := s.secrets.Refresh(ctx, s.ref, stale)
	if err == nil {
		err = refused(s.reserved, s.ref, v)
	}
	return v, err
}

// secretHeader sends a secret's value in a header, as render makes it
// (nil: as it is): the bearer, api_key, basic and header providers.
type secretHeader struct {
	typ    registry.AuthType
	header string
	secret *secretOf
	// render gets the value trimmed, without control characters.
	render func(v string) (string, error)
}

func (p *Pool) secretHeader(a *registry.Auth, render func(string) (string, error)) *secretHeader {
	return &secretHeader{typ: a.Type, header: a.Header, secret: p.secretOf(a.Secret), render: render}
}

func (s *secretHeader) kind() registry.AuthType { return s.typ }

func (s *secretHeader) apply(ctx context.Context, req *http.Request) (string, error) {
	if err := s.secret.usable(); err != nil {
		return "", err
	}
	v, err := s.secret.read(ctx)
	if err != nil {
		return "", err
	}
	hv := strings.TrimSpace(v)
	if strings.ContainsFunc(hv, clip.IsControl) {
		return "", fmt.Errorf("the value of %s contains control characters, which cannot go in a header", s.secret.ref)
	}
	if s.render != nil {
		if hv, err = s.render(hv); err != nil {
			return "", err
		}
	}
	req.Header.Set(s.header, hv)
	return v, nil
}

func (s *secretHeader) refresh(ctx context.Context, used string) (bool, error) {
	v, err := s.secret.reread(ctx, used)
	return err == nil && v != used, err
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
			"credential", string(t.cred.provider.kind()), "reread", errText(rerr, "unchanged"))
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
			if vs := fwd.Values(name); len(vs) > 0 && !registry.NeverForwarded(name) && !traceHeader(name) {
				out.Header[name] = append([]string(nil), vs...)
			}
		}
	}
	for name, v := range c.static {
		out.Header.Set(name, v)
	}
	if c.trace != nil {
		// Neither forwarded nor static headers replace the gateway's own
		// trace context.
		c.trace.Inject(req.Context(), out.Header)
	}
	if c.provider == nil {
		return out, "", nil
	}
	used, err := c.provider.apply(req.Context(), out)
	if err != nil {
		return nil, "", &CredentialError{ServerID: c.serverID, Err: err}
	}
	return out, used, nil
}

// refresh re-reads the credential after the upstream refused used, and
// reports whether there is a different one to try.
func (c *credential) refresh(ctx context.Context, used string) (bool, error) {
	return c.provider.refresh(ctx, used)
}

// traceHeader reports whether name is a trace context header (W3C Trace
// Context, Baggage): the agent's are never forwarded, the gateway sends
// its own.
func traceHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Traceparent", "Tracestate", "Baggage":
		return true
	}
	return false
}
