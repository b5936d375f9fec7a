package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/secret"
)

// The server item's identity attributes: how the gateway authenticates to
// the upstream, which headers it sends, and which tools it shows.
const (
	attrAuth            = "auth"
	attrStaticHeaders   = "static_headers"
	attrForwardHeaders  = "forward_headers"
	attrAllowedTools    = "allowed_tools"
	attrDisallowedTools = "disallowed_tools"
)

// AuthType is how the gateway authenticates to an upstream.
type AuthType string

// The auth types.
const (
	// AuthBearer sends "Authorization: Bearer <secret>".
	AuthBearer AuthType = "bearer"
	// AuthAPIKey sends the secret in a header, X-API-Key by default.
	AuthAPIKey AuthType = "api_key"
	// AuthBasic sends "Authorization: Basic ..." of a "user:password" secret.
	AuthBasic AuthType = "basic"
	// AuthHeader sends the secret as is in the named header.
	AuthHeader AuthType = "header"
	// AuthSigV4 signs each request with the gateway's own AWS credentials.
	AuthSigV4 AuthType = "aws_sigv4"
	// AuthOAuth2 sends a token obtained with the OAuth 2.0 client
	// credentials grant.
	AuthOAuth2 AuthType = "oauth2_client_credentials"
)

// DefaultAPIKeyHeader is the header of an api_key credential without one.
const DefaultAPIKeyHeader = "X-Api-Key"

// Auth is an upstream's credential. Secret values are never held here,
// only their references.
type Auth struct {
	// Type says how the credential is sent.
	Type AuthType
	// Secret is where the credential's value is kept: the token, key,
	// user:password, header value, or the OAuth client secret. Unset for
	// aws_sigv4.
	Secret secret.Ref
	// Header is the header an api_key or header credential is sent in, in
	// canonical form.
	Header string
	// Service and Region are what aws_sigv4 signs for; an empty Region
	// means the gateway's own.
	Service, Region string
	// TokenURL, ClientID, Scope and Audience configure the OAuth 2.0 client
	// credentials grant.
	TokenURL, ClientID, Scope, Audience string
}

// authSpec is one auth type's part of the auth map: the fields it may
// have, and how those of its own are read (type and secret are read for
// every type that has them). A new auth type is its constant and its entry
// in authSpecs here, and its provider in package upstream.
type authSpec struct {
	fields []string
	read   func(ap *parser, a *Auth)
}

// authSpecs holds every auth type's spec.
var authSpecs = map[AuthType]authSpec{
	AuthBearer: {[]string{"type", "secret"}, (*parser).authorization},
	AuthAPIKey: {[]string{"type", "secret", "header"}, func(ap *parser, a *Auth) { ap.authHeader(a, DefaultAPIKeyHeader) }},
	AuthBasic:  {[]string{"type", "secret"}, (*parser).authorization},
	AuthHeader: {[]string{"type", "header", "secret"}, func(ap *parser, a *Auth) { ap.authHeader(a, "") }},
	AuthSigV4:  {[]string{"type", "service", "region"}, (*parser).sigV4},
	AuthOAuth2: {[]string{"type", "token_url", "client_id", "secret", "scope", "audience"}, (*parser).oauth2},
}

// AuthTypes lists the auth types, sorted.
func AuthTypes() []AuthType {
	out := make([]AuthType, 0, len(authSpecs))
	for t := range authSpecs {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Limits on the identity attributes.
const (
	maxHeaders     = 32
	maxHeaderValue = 4096
	maxPatterns    = 256
	maxPattern     = 128
	maxOAuthField  = 1024
)

// credentialHeaders carry an agent's or the gateway's credentials: never
// forwarded from an agent, never a static header (a credential belongs in
// auth, as a reference).
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "X-Litellm-Api-Key"}

// reservedHeaders are set by HTTP and MCP themselves (hop-by-hop headers,
// framing, content negotiation, MCP's own): never forwarded, never static,
// never an auth header.
var reservedHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Host", "Content-Length", "Content-Type", "Content-Encoding", "Accept", "Accept-Encoding", "Expect",
	"Last-Event-Id",
}

// reservedPrefixes are header name prefixes of the same kind: MCP's own
// (Mcp-Session-Id, Mcp-Protocol-Version, ...) and SigV4's.
var reservedPrefixes = []string{"Mcp-", "X-Amz-"}

func reserved(canonical string) bool {
	if slices.Contains(reservedHeaders, canonical) {
		return true
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(canonical, p) {
			return true
		}
	}
	return false
}

// NeverForwarded reports whether an agent's header must never reach an
// upstream, whatever forward_headers says: credentials (the agent's own
// never go upstream), hop-by-hop and framing headers, and MCP's own.
func NeverForwarded(name string) bool {
	c := http.CanonicalHeaderKey(name)
	return slices.Contains(credentialHeaders, c) || reserved(c)
}

// headerToken matches a header name; validHeaderName also bounds its
// length (a counted repetition would compile to that many copies).
var headerToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

func validHeaderName(h string) bool { return len(h) <= 128 && headerToken.MatchString(h) }

// ToolAllowed reports whether the server's allowed_tools and
// disallowed_tools let agents see and call tool.
func (s *Server) ToolAllowed(tool string) bool {
	if len(s.AllowedTools) > 0 && !slices.ContainsFunc(s.AllowedTools, func(p string) bool { return MatchGlob(p, tool) }) {
		return false
	}
	return !slices.ContainsFunc(s.DisallowedTools, func(p string) bool { return MatchGlob(p, tool) })
}

// MatchGlob reports whether name matches pattern, in which '*' stands for
// any run of characters (none included) and '?' for any one; every other
// character stands for itself.
func MatchGlob(pattern, name string) bool {
	p, n := []rune(pattern), []rune(name)
	pi, ni := 0, 0
	star, mark := -1, 0
	for ni < len(n) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == n[ni]):
			pi++
			ni++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ni
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			ni = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// ValidPattern checks a tool glob: 1 to 128 printable characters.
func ValidPattern(p string) error {
	if p == "" || len(p) > maxPattern || strings.ContainsFunc(p, clip.IsControl) {
		return fmt.Errorf("is not a tool pattern (1 to %d printable characters; * and ? are wildcards)", maxPattern)
	}
	return nil
}

// auth reads auth: {"type": ..., ...}.
func (p *parser) auth(name string) *Auth {
	ap, ok := p.sub(name)
	if !ok {
		return nil
	}
	defer p.merge(ap)
	a := &Auth{Type: AuthType(ap.str("type", true))}
	spec, ok := authSpecs[a.Type]
	if !ok {
		if a.Type != "" {
			types := make([]string, 0, len(authSpecs))
			for _, t := range AuthTypes() {
				types = append(types, string(t))
			}
			ap.fail("type", fmt.Sprintf("%q is not an auth type: use one of %s", clip.String(string(a.Type), 40), strings.Join(types, ", ")))
		}
		return nil
	}
	ap.unknown(spec.fields...)
	if slices.Contains(spec.fields, "secret") {
		a.Secret = ap.ref("secret")
	}
	spec.read(ap, a)
	return a
}

// authorization: bearer, basic and oauth2_client_credentials credentials
// go in the Authorization header.
func (p *parser) authorization(a *Auth) { a.Header = "Authorization" }

// authHeader reads the header an api_key or header credential goes in:
// def if the map names none, required if def is "".
func (p *parser) authHeader(a *Auth, def string) {
	h := p.str("header", def == "")
	if h == "" {
		h = def
	}
	if h != "" {
		if err := validAuthHeader(h); err != nil {
			p.fail("header", err.Error())
		}
		a.Header = http.CanonicalHeaderKey(h)
	}
}

// sigV4 reads what aws_sigv4 signs for.
func (p *parser) sigV4(a *Auth) {
	a.Service = p.str("service", true)
	a.Region = p.str("region", false)
	if a.Service != "" && !validAWSName(a.Service) {
		p.fail("service", "is not an AWS service signing name (e.g. lambda, execute-api, bedrock-agentcore)")
	}
	if a.Region != "" && !validAWSName(a.Region) {
		p.fail("region", "is not an AWS region name (e.g. eu-west-1)")
	}
}

// oauth2 reads the client credentials grant's settings.
func (p *parser) oauth2(a *Auth) {
	a.Header = "Authorization"
	a.TokenURL = p.str("token_url", true)
	if a.TokenURL != "" {
		if err := validateURL(a.TokenURL); err != nil {
			p.fail("token_url", err.Error())
		}
	}
	a.ClientID = p.str("client_id", true)
	a.Scope = p.str("scope", false)
	a.Audience = p.str("audience", false)
	for _, f := range []struct{ name, v string }{{"client_id", a.ClientID}, {"scope", a.Scope}, {"audience", a.Audience}} {
		if len(f.v) > maxOAuthField || strings.ContainsFunc(f.v, clip.IsControl) {
			p.fail(f.name, fmt.Sprintf("must be at most %d printable characters", maxOAuthField))
		}
	}
}

var awsName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

func validAWSName(s string) bool { return len(s) <= 64 && awsName.MatchString(s) }

// validAuthHeader checks the header an api_key or header credential goes
// in.
func validAuthHeader(h string) error {
	if !validHeaderName(h) {
		return fmt.Errorf("%q is not a header name", clip.String(h, clip.Short))
	}
	if reserved(http.CanonicalHeaderKey(h)) {
		return fmt.Errorf("%s is set by HTTP or MCP itself and cannot carry a credential", http.CanonicalHeaderKey(h))
	}
	return nil
}

// ref reads a secret reference. A value that is not a reference is
// rejected without being repeated: it may be the secret itself.
func (p *parser) ref(name string) secret.Ref {
	if _, ok := p.item[name]; !ok {
		p.fail(name, "missing (a reference: "+secret.Syntax+")")
		return secret.Ref{}
	}
	v, ok := p.item[name].(*types.AttributeValueMemberS)
	if !ok {
		p.fail(name, "must be of type S (a reference: "+secret.Syntax+")")
		return secret.Ref{}
	}
	r, err := secret.ParseRef(v.Value)
	if err != nil {
		p.fail(name, err.Error())
	}
	return r
}

// staticHeaders reads static_headers: header names to literal values.
func (p *parser) staticHeaders(name string, a *Auth) map[string]string {
	hp, ok := p.sub(name)
	if !ok {
		return nil
	}
	defer p.merge(hp)
	if len(hp.item) > maxHeaders {
		hp.fail("", fmt.Sprintf("more than %d headers", maxHeaders))
		return nil
	}
	out := make(map[string]string, len(hp.item))
	for _, h := range sortedKeys(hp.item) {
		c := http.CanonicalHeaderKey(h)
		v := hp.str(h, false)
		switch {
		case !validHeaderName(h):
			hp.fail(clip.String(h, clip.Short), "is not a header name")
		case slices.Contains(credentialHeaders, c):
			hp.fail(h, "carries a credential: put it in auth, as a secret reference, never as a literal")
		case reserved(c):
			hp.fail(h, "is set by HTTP or MCP itself")
		case a != nil && a.Header == c:
			hp.fail(h, "is the header auth sets")
		case len(v) > maxHeaderValue || !clip.HeaderValue(v):
			hp.fail(h, fmt.Sprintf("value must be at most %d bytes without control characters", maxHeaderValue))
		case out[c] != "":
			hp.fail(h, "given twice (header names are case-insensitive)")
		default:
			out[c] = v
		}
	}
	return out
}

// forwardHeaders reads the agent headers to copy upstream.
func (p *parser) forwardHeaders(name string, a *Auth, static map[string]string) []string {
	list, ok := p.strings(name)
	if !ok {
		return nil
	}
	if len(list) > maxHeaders {
		p.fail(name, fmt.Sprintf("more than %d headers", maxHeaders))
		return nil
	}
	var out []string
	for _, h := range list {
		c := http.CanonicalHeaderKey(h)
		switch {
		case !validHeaderName(h):
			p.fail(name, fmt.Sprintf("%q is not a header name", clip.String(h, clip.Short)))
		case slices.Contains(credentialHeaders, c):
			p.fail(name, fmt.Sprintf("%s is never forwarded: an agent's credential must not reach an upstream (give the upstream its own in auth)", c))
		case reserved(c):
			p.fail(name, fmt.Sprintf("%s is set by HTTP or MCP itself and is never forwarded", c))
		case a != nil && a.Header == c:
			p.fail(name, fmt.Sprintf("%s is the header auth sets", c))
		case static[c] != "":
			p.fail(name, fmt.Sprintf("%s is also a static header", c))
		case slices.Contains(out, c):
		default:
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// patterns reads a list of tool globs. An empty list is refused: it would
// hide every tool (allowed_tools) or nothing (disallowed_tools), and either
// is better said by removing the attribute.
func (p *parser) patterns(name string) []string {
	list, ok := p.strings(name)
	if !ok {
		return nil
	}
	switch {
	case len(list) == 0:
		p.fail(name, "lists no pattern (remove the attribute to show every tool)")
		return nil
	case len(list) > maxPatterns:
		p.fail(name, fmt.Sprintf("more than %d patterns", maxPatterns))
		return nil
	}
	for _, pat := range list {
		if err := ValidPattern(pat); err != nil {
			p.fail(name, fmt.Sprintf("%q %v", clip.String(pat, clip.Short), err))
			return nil
		}
	}
	slices.Sort(list)
	return slices.Compact(list)
}

// strings reads a list (L of S, or SS) of strings.
func (p *parser) strings(name string) ([]string, bool) {
	switch v := p.item[name].(type) {
	case nil:
		return nil, false
	case *types.AttributeValueMemberSS:
		return slices.Clone(v.Value), true
	case *types.AttributeValueMemberL:
		out := make([]string, 0, len(v.Value))
		for _, e := range v.Value {
			s, ok := e.(*types.AttributeValueMemberS)
			if !ok {
				p.fail(name, "must list strings, got "+typeName(e))
				return nil, true
			}
			out = append(out, s.Value)
		}
		return out, true
	default:
		p.fail(name, "must be of type L (a list of strings), got "+typeName(v))
		return nil, true
	}
}

func sortedKeys(m map[string]types.AttributeValue) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// IdentityHash is IdentityKey hashed: the hex of the first 16 bytes of its
// SHA-256, as session, tool-list and credential caches and request states
// name the upstream. Every call of a server needs it several times: a
// Server the Registry returns (shared by every call until the cache
// refreshes, and never changed) carries it computed once, when its item was
// read; any other Server computes it on each call.
func (s *Server) IdentityHash() string {
	if s.identity != "" {
		return s.identity
	}
	return hashIdentity(s.IdentityKey())
}

func hashIdentity(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

// IdentityKey identifies everything about the server that decides how the
// gateway appears to the upstream (URL, transport, credential reference,
// headers), without any secret value: requests and sessions made with one
// identity are never reused for another.
func (s *Server) IdentityKey() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s%s", s.Transport, s.URL, s.SpecURL, s.SpecPath)
	if a := s.Auth; a != nil {
		b.WriteString("\x00auth")
		a.identity(&b)
	}
	for _, h := range sortedHeaderNames(s.StaticHeaders) {
		fmt.Fprintf(&b, "\x00static %s=%s", h, s.StaticHeaders[h])
	}
	fmt.Fprintf(&b, "\x00forward %s", strings.Join(s.ForwardHeaders, ","))
	if s.AllowLocal {
		b.WriteString("\x00local")
	}
	return b.String()
}

// identity writes every field of a, in the order Auth declares them, each
// after a space: a field added to Auth is part of the identity without
// being named here. (For the fields Auth has had since identity keys were
// first kept, in catalogs and request states, the key is what it was.)
func (a *Auth) identity(b *strings.Builder) {
	v := reflect.ValueOf(a).Elem()
	for i := range v.NumField() {
		fmt.Fprintf(b, " %v", v.Field(i).Interface())
	}
}

func sortedHeaderNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
