package upstream

import "github.com/mcpgate/mcpgate/internal/registry"

// newAPIKey sends the secret as it is in the auth's header, X-Api-Key
// unless it names another (registry.AuthAPIKey).
func newAPIKey(p *Pool, srv *registry.Server) provider {
	return p.secretHeader(srv.Auth, nil)
}
