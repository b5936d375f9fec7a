package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// Defaults for OAuthOptions.
const (
	// DefaultScopePrefix starts the scopes that grant servers: "mcp:<id>"
	// grants server id, "mcp:*" every server.
	DefaultScopePrefix = "mcp:"
	// DefaultLeeway is the clock skew tolerated on exp, nbf and iat.
	DefaultLeeway = 30 * time.Second
	// DefaultRefetchInterval is the shortest time between two fetches of
	// the issuer's keys, however many unknown key ids arrive.
	DefaultRefetchInterval = time.Minute
	// DefaultMaxKeyAge is how long fetched keys are used before they are
	// fetched again (if that fails, they are kept).
	DefaultMaxKeyAge = time.Hour
)

// allowedAlgorithms are the only token signature algorithms accepted:
// never "none", never HMAC (whose key would be the issuer's public key).
var allowedAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256}

const (
	maxSubjectLen  = 64
	maxScopes      = 256
	maxAudiences   = 16
	fetchTimeout   = 5 * time.Second
	maxFetchBytes  = 1 << 20
	maxSigningKeys = 64
	// failedFetchRetry is how soon a failed fetch is retried while no key
	// at all is known.
	failedFetchRetry = 5 * time.Second
)

// OAuthOptions configures token validation. Issuer is required; for the
// other fields the zero value means the default.
type OAuthOptions struct {
	// Issuer is the authorization server's issuer identifier
	// (OAUTH_ISSUER). A token's iss must equal it. Its metadata, at
	// /.well-known/openid-configuration or else RFC 8414's
	// /.well-known/oauth-authorization-server, names the signing keys.
	Issuer string
	// Audiences are the accepted aud values (OAUTH_AUDIENCE). Empty means
	// the gateway's own resource URLs, given per request. A token without
	// aud (as Amazon Cognito issues) is accepted when its client_id is one
	// of them.
	Audiences []string
	// JWKSURL is where the signing keys are (OAUTH_JWKS_URL); empty means
	// the jwks_uri of the issuer's metadata.
	JWKSURL string
	// ScopePrefix starts the scopes (scope, scp, or Entra ID's roles) that
	// grant servers (OAUTH_SCOPE_PREFIX); empty means DefaultScopePrefix.
	ScopePrefix string
	// Leeway is the clock skew tolerated on exp, nbf and iat; zero means
	// DefaultLeeway.
	Leeway time.Duration
	// RefetchInterval is the shortest time between two fetches of the
	// keys; zero means DefaultRefetchInterval. While no key is known, a
	// failed fetch is retried after 5 s.
	RefetchInterval time.Duration
	// MaxKeyAge is how long keys are used before being fetched again;
	// zero means DefaultMaxKeyAge.
	MaxKeyAge time.Duration
	// HTTPClient fetches metadata and keys; nil means a client with a 5 s
	// timeout. Redirects must stay on https (or loopback).
	HTTPClient *http.Client
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// OAuth validates access tokens from one issuer: the gateway as an OAuth
// 2.1 resource server. Keys are cached per instance.
type OAuth struct {
	issuer    string
	audiences []string
	prefix    string
	leeway    time.Duration
	now       func() time.Time
	keys      *keySet
}

// NewOAuth checks opts and returns an OAuth. No request is made until the
// first token arrives.
func NewOAuth(opts OAuthOptions) (*OAuth, error) {
	if opts.Issuer == "" {
		return nil, errors.New("oauth: the issuer is required")
	}
	if err := checkFetchURL(opts.Issuer); err != nil {
		return nil, fmt.Errorf("oauth: issuer: %w", err)
	}
	if opts.JWKSURL != "" {
		if err := checkFetchURL(opts.JWKSURL); err != nil {
			return nil, fmt.Errorf("oauth: JWKS URL: %w", err)
		}
	}
	if len(opts.Audiences) > maxAudiences {
		return nil, fmt.Errorf("oauth: at most %d audiences", maxAudiences)
	}
	o := &OAuth{
		issuer:    opts.Issuer,
		audiences: slices.Clone(opts.Audiences),
		prefix:    cmpOr(opts.ScopePrefix, DefaultScopePrefix),
		leeway:    cmpOr(opts.Leeway, DefaultLeeway),
		now:       opts.Now,
	}
	if o.now == nil {
		o.now = time.Now
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: fetchTimeout}
	}
	redirect := client.CheckRedirect
	c := *client
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := checkFetchURL(req.URL.String()); err != nil {
			return err
		}
		if redirect != nil {
			return redirect(req, via)
		}
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		return nil
	}
	o.keys = &keySet{
		issuer:   opts.Issuer,
		jwksURL:  opts.JWKSURL,
		client:   &c,
		interval: cmpOr(opts.RefetchInterval, DefaultRefetchInterval),
		maxAge:   cmpOr(opts.MaxKeyAge, DefaultMaxKeyAge),
		now:      o.now,
	}
	return o, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Issuer is the trusted issuer, as the protected-resource metadata names it.
func (o *OAuth) Issuer() string { return o.issuer }

// Scope is the scope that grants serverID ("*" for every server).
func (o *OAuth) Scope(serverID string) string { return o.prefix + serverID }

// Audiences are the configured audiences; empty means the resource URLs.
func (o *OAuth) Audiences() []string { return slices.Clone(o.audiences) }

// Fetches is how many times keys or metadata were requested from the
// issuer, for tests and metrics.
func (o *OAuth) Fetches() int64 { return o.keys.fetches.Load() }

// tokenClaims are the claims read beside the registered ones.
type tokenClaims struct {
	Scope scopeList `json:"scope"`
	Scp   scopeList `json:"scp"`
	// Roles are Entra ID's application roles: what an app-only (client
	// credentials) token carries instead of scp.
	Roles    scopeList `json:"roles"`
	ClientID string    `json:"client_id"`
	Azp      string    `json:"azp"`
	TokenUse string    `json:"token_use"`
	// Nonce, AtHash and CHash are claims of OpenID Connect ID tokens alone
	// (OpenID Connect Core 1.0, 2 and 3.x.2.11): present in any form, they
	// mark a token that is not an access token.
	Nonce  json.RawMessage `json:"nonce"`
	AtHash json.RawMessage `json:"at_hash"`
	CHash  json.RawMessage `json:"c_hash"`
}

// idToken reports whether the claims are an OpenID Connect ID token's.
func (c *tokenClaims) idToken() bool {
	return c.Nonce != nil || c.AtHash != nil || c.CHash != nil || (c.TokenUse != "" && c.TokenUse != "access")
}

// accessTokenType reports whether a token's typ header allows it to be an
// access token: RFC 9068's "at+jwt" (or "application/at+jwt"), and the
// generic "JWT" or none at all, which many issuers write on access tokens
// and ID tokens alike (those are told apart by their claims). Any other
// type ("logout+jwt", "secevent+jwt", …) is another kind of token.
func accessTokenType(h jose.Header) bool {
	typ, _ := h.ExtraHeaders[jose.HeaderType].(string)
	switch strings.TrimPrefix(strings.ToLower(typ), "application/") {
	case "", "jwt", "at+jwt":
		return true
	}
	return false
}

// scopeList reads a space-separated string or an array of strings (Okta's
// scp is an array, Entra ID's a string); anything else grants nothing.
type scopeList []string

func (s *scopeList) UnmarshalJSON(b []byte) error {
	var str string
	if json.Unmarshal(b, &str) == nil {
		*s = strings.Fields(str)
	} else {
		var list []string
		if json.Unmarshal(b, &list) != nil {
			return nil
		}
		*s = list
	}
	if len(*s) > maxScopes {
		*s = (*s)[:maxScopes]
	}
	return nil
}

func invalidToken(reason string, err error) *RejectedError {
	return &RejectedError{Reason: reason, Token: true, Err: err}
}

// Verify checks an access token and returns its principal. audiences are
// accepted when no audience is configured. It returns a *RejectedError for
// a token that is not valid here, or an *UnavailableError when the
// issuer's keys cannot be had and none cached verifies the token.
func (o *OAuth) Verify(ctx context.Context, raw string, audiences []string) (*Principal, error) {
	tok, err := jwt.ParseSigned(raw, allowedAlgorithms)
	if err != nil {
		return nil, invalidToken("the token is malformed or not signed with an allowed algorithm (RS256, ES256)", err)
	}
	if len(tok.Headers) != 1 {
		return nil, invalidToken("the token must have exactly one signature", nil)
	}
	h := tok.Headers[0]
	if !accessTokenType(h) {
		return nil, invalidToken("the token is not an access token (its typ header)", nil)
	}
	keys, err := o.keys.get(ctx, h.KeyID, jose.SignatureAlgorithm(h.Algorithm))
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, invalidToken("the token's signing key is unknown to the issuer", nil)
	}
	var std jwt.Claims
	var extra tokenClaims
	verified := false
	for _, k := range keys {
		if tok.Claims(k.Key, &std, &extra) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, invalidToken("the token's signature does not verify", nil)
	}
	if std.Expiry == nil {
		return nil, invalidToken("the token has no expiry (exp)", nil)
	}
	if std.Subject == "" {
		return nil, invalidToken("the token has no subject (sub)", nil)
	}
	err = std.ValidateWithLeeway(jwt.Expected{Issuer: o.issuer, Time: o.now()}, o.leeway)
	switch {
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return nil, invalidToken("the token's issuer is not trusted here", err)
	case errors.Is(err, jwt.ErrExpired):
		return nil, invalidToken("the token has expired", err)
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return nil, invalidToken("the token is not valid yet", err)
	case err != nil:
		return nil, invalidToken("the token's claims are not valid", err)
	}
	accepted := o.audiences
	if len(accepted) == 0 {
		accepted = audiences
	}
	clientID := extra.ClientID
	if clientID == "" {
		clientID = extra.Azp
	}
	if !audienceOK(std.Audience, clientID, accepted) {
		return nil, invalidToken("the token is not meant for this resource (aud)", nil)
	}
	if extra.idToken() {
		// An ID token says who signed in to a client; it grants nothing
		// here, even where its aud is an accepted client id.
		return nil, invalidToken("the token is an ID token, not an access token", nil)
	}
	p := &Principal{
		Kind:     KindOAuth,
		ID:       principalID(KindOAuth, std.Issuer, std.Subject),
		StateKey: stateKey(KindOAuth, std.Issuer, std.Subject),
		Subject:  clean(std.Subject, maxSubjectLen),
		ClientID: clean(clientID, maxSubjectLen),
	}
	for _, s := range slices.Concat(extra.Scope, extra.Scp, extra.Roles) {
		id, ok := strings.CutPrefix(s, o.prefix)
		if ok && (id == AllServers || registry.ValidateID(id) == nil) {
			p.Servers = append(p.Servers, id)
		}
	}
	slices.Sort(p.Servers)
	p.Servers = slices.Compact(p.Servers)
	return p, nil
}

// audienceOK: a token with aud must name an accepted audience; one
// without (Cognito's access tokens) must have been issued to an accepted
// client.
func audienceOK(aud jwt.Audience, clientID string, accepted []string) bool {
	if len(accepted) == 0 {
		return false
	}
	if len(aud) > 0 {
		return slices.ContainsFunc(accepted, aud.Contains)
	}
	return clientID != "" && slices.Contains(accepted, clientID)
}

// checkFetchURL accepts https URLs, and http ones only on loopback (for
// local issuers in development and tests).
func checkFetchURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL", safeurl.Redact(raw))
	}
	if u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("%q must be an absolute https URL without userinfo or fragment", safeurl.Redact(raw))
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%q must use https (http only on loopback)", safeurl.Redact(raw))
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
