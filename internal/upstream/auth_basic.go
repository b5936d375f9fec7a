package upstream

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// newBasic sends "Authorization: Basic ..." of a "user:password" secret
// (registry.AuthBasic).
func newBasic(p *Pool, srv *registry.Server) provider {
	ref := srv.Auth.Secret
	return p.secretHeader(srv.Auth, func(v string) (string, error) {
		if !strings.Contains(v, ":") {
			return "", fmt.Errorf("the value of %s must be user:password for basic auth", ref)
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(v)), nil
	})
}
