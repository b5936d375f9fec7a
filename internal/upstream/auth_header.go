package upstream

import "github.com/mcpgate/mcpgate/internal/registry"

// newHeader sends the secret as it is in the header the auth names
// (registry.AuthHeader).
func newHeader(p *Pool, srv *registry.Server) provider {
	return p.secretHeader(srv.Auth, nil)
}
