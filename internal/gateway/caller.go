package gateway

import (
	"context"
	"errors"
	"github.com/mcpgate/mcpgate/internal/clip"
	"net/http"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// metadataPath is the route of the OAuth protected resource metadata (RFC
// 9728); the metadata of resource <base>/mcp is at metadataPath + "/mcp".
const metadataPath = "/.well-known/oauth-protected-resource"

// The words for "who" in the call path, each meaning one thing:
//
//   - caller: the agent making a request to the gateway (this type; as the
//     upstream pool sees it, upstream.Caller).
//   - principal: a caller once authenticated (auth.Principal): its id in
//     logs and leases, its grants and limits.
//   - client: the MCP client software or HTTP client on the caller's side
//     (client_ip, client capabilities), never an identity.
//   - holder: the lease package's word for the principal a lease is for,
//     which it knows only by a short label (leaseHolder).
//
// "Identity" means the gateway's own identity towards an upstream
// (registry.Server.IdentityKey), never the caller's.

// caller is who makes a request, and which protected resource it asks for.
type caller struct {
	principal *auth.Principal
	// header is the request's: a server may forward some of it upstream.
	header http.Header
	// base is the gateway's public base URL, as this request reached it.
	base string
	// resource is the path of the route's protected resource: "/mcp",
	// "/mcp/<server_id>", or "" for the gateway as a whole (REST).
	resource string
}

// callerFrom returns the request's caller; nil before authentication.
func callerFrom(ctx context.Context) *caller {
	c, _ := ctx.Value(callerCtx).(*caller)
	return c
}

// principalFrom returns the request's principal; nil before
// authentication.
func principalFrom(ctx context.Context) *auth.Principal {
	if c := callerFrom(ctx); c != nil {
		return c.principal
	}
	return nil
}

// metadataURL is where the caller's resource is described (RFC 9728).
func (c *caller) metadataURL() string { return c.base + metadataPath + c.resource }

// audiences are the token audiences accepted by default: the gateway's MCP
// endpoint, the gateway itself, and the route's own resource.
func (c *caller) audiences() []string {
	if c.base == "" {
		// No known public URL: only configured audiences can match.
		return nil
	}
	out := []string{c.base + "/mcp", c.base}
	if strings.HasPrefix(c.resource, "/mcp/") {
		out = append(out, c.base+c.resource)
	}
	return out
}

// publicURL is the gateway's base URL for r.
func (g *Gateway) publicURL(r *http.Request) string {
	if g.public != nil {
		return strings.TrimSuffix(g.public(r), "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// resourcePath is the protected resource a route serves.
func resourcePath(r *http.Request) string {
	switch {
	case r.URL.Path == "/mcp":
		return "/mcp"
	case strings.HasPrefix(r.URL.Path, "/mcp/"):
		if id := r.PathValue("server_id"); registry.ValidateID(id) == nil {
			return "/mcp/" + id
		}
		return "/mcp"
	}
	return ""
}

// authenticate requires valid credentials and puts the caller in the
// context.
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &caller{base: g.publicURL(r), resource: resourcePath(r), header: r.Header}
		req := auth.Request{Header: r.Header, Audiences: c.audiences()}
		if g.iam != nil {
			req.IAMCaller = g.iam(r)
		}
		p, err := g.deps.Auth.Authenticate(r.Context(), req)
		if err != nil {
			writeFault(w, r, g.authFault(c, err))
			return
		}
		c.principal = p
		recordFrom(r.Context()).principal = p
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerCtx, c)))
	})
}

// authFault is the answer to a failed authentication.
func (g *Gateway) authFault(c *caller, err error) *fault.Error {
	var rej *auth.RejectedError
	var un *auth.UnavailableError
	switch {
	case errors.As(err, &rej):
		return fault.Wrap(err, fault.Unauthorized, "%s", rej.Reason).WithChallenge(g.challenge(c, rej.Token))
	case errors.Is(err, auth.ErrNoCredentials):
		msg := "missing credentials: send Authorization: Bearer <key> or X-Api-Key: <key>"
		if g.deps.Auth.OAuth() != nil {
			msg = "missing credentials: send Authorization: Bearer <access token or key>, or X-Api-Key: <key>"
		}
		return fault.New(fault.Unauthorized, "%s", msg).WithChallenge(g.challenge(c, false))
	case errors.As(err, &un):
		return fault.Wrap(err, fault.AuthUnavailable, "cannot check the access token right now: the keys of its issuer are unavailable").
			WithRetryAfter(max(un.RetryAfter, time.Second))
	default:
		return fault.Wrap(err, fault.StoreUnavailable, "cannot check the key right now").WithRetryAfter(storeRetryAfter)
	}
}

// challenge is the WWW-Authenticate value of a 401: where the resource's
// metadata is, the scope it needs where the route names a server, and
// whether a token was refused.
func (g *Gateway) challenge(c *caller, invalidToken bool) string {
	o := g.deps.Auth.OAuth()
	if o == nil {
		return `Bearer realm="mcpgate"`
	}
	parts := []string{`resource_metadata="` + c.metadataURL() + `"`}
	if id, ok := strings.CutPrefix(c.resource, "/mcp/"); ok {
		parts = append(parts, `scope="`+o.Scope(id)+`"`)
	}
	if invalidToken {
		parts = append(parts, `error="invalid_token"`)
	}
	return "Bearer " + strings.Join(parts, ", ")
}

// forbidden is the answer to a principal that may not call server id. A
// token is told which scope it lacks (RFC 6750 insufficient_scope), so
// that its client can ask for it.
func (g *Gateway) forbidden(ctx context.Context, id string) *fault.Error {
	c, o := callerFrom(ctx), g.deps.Auth.OAuth()
	if c == nil || c.principal == nil || c.principal.Kind != auth.KindOAuth || o == nil || registry.ValidateID(id) != nil {
		who := "key"
		if c != nil && c.principal != nil && c.principal.Kind == auth.KindIAM {
			who = "IAM caller"
		}
		return fault.New(fault.Forbidden, "this %s may not call server %q", who, clip.String(id, clip.Short))
	}
	scope := o.Scope(id)
	return fault.New(fault.Forbidden, "this token's scopes do not grant server %q: it needs scope %s", id, scope).
		WithChallenge(`Bearer error="insufficient_scope", scope="` + scope + `", resource_metadata="` + c.metadataURL() + `"`)
}

// resourceMetadata serves the protected resource metadata (RFC 9728) of
// the gateway ("/.well-known/oauth-protected-resource"), of its MCP
// endpoint (".../mcp") and of one server's passthrough (".../mcp/<id>"):
// the resource's URL, the issuer as its authorization server, the scopes
// that grant it, and that tokens go in the Authorization header. It is
// public, reads no store, and says nothing of which servers exist.
func (g *Gateway) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	o := g.deps.Auth.OAuth()
	if o == nil {
		writeFault(w, r, fault.New(fault.NotFound, "this gateway accepts no OAuth tokens (OAUTH_ISSUER is not set)"))
		return
	}
	base := g.publicURL(r)
	resource, scope := base, o.Scope(auth.AllServers)
	switch rest := strings.TrimPrefix(r.URL.Path, metadataPath); {
	case rest == "/mcp":
		resource = base + "/mcp"
	case strings.HasPrefix(rest, "/mcp/"):
		id := r.PathValue("server_id")
		if registry.ValidateID(id) != nil {
			writeFault(w, r, fault.New(fault.NotFound, "no protected resource %q", clip.String(rest, 100)))
			return
		}
		resource, scope = base+"/mcp/"+id, o.Scope(id)
	}
	recordFrom(r.Context()).outcome = "ok"
	w.Header().Set("Access-Control-Allow-Origin", "*")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_ = fault.JSONEncoder(w).Encode(map[string]any{
		"resource":                 resource,
		"authorization_servers":    []string{o.Issuer()},
		"scopes_supported":         []string{scope},
		"bearer_methods_supported": []string{"header"},
		"resource_name":            "mcpgate",
	})
}
