package upstream

import "github.com/mcpgate/mcpgate/internal/registry"

// newBearer sends "Authorization: Bearer <secret>" (registry.AuthBearer).
func newBearer(p *Pool, srv *registry.Server) provider {
	return p.secretHeader(srv.Auth, func(v string) (string, error) { return "Bearer " + v, nil })
}
