package upstream

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// maxCredentials bounds the server credentials held (one per server
// identity); past it they are dropped and rebuilt on use.
const maxCredentials = 1024

// credential returns srv's credential, built once per identity so that
// OAuth tokens outlive sessions.
func (p *Pool) credential(srv *registry.Server) *credential {
	key := identityKey(srv)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.creds[key]; ok {
		return c
	}
	if len(p.creds) >= maxCredentials {
		clear(p.creds)
	}
	c := p.newCredential(srv)
	p.creds[key] = c
	return c
}

// empty reports whether the credential adds nothing to requests.
func (c *credential) empty() bool {
	return c.provider == nil && len(c.static) == 0 && len(c.forward) == 0
}

// sessionClient is the HTTP client of srv's MCP sessions: the pool's, held
// to srv's origin (a redirect or an SSE endpoint elsewhere is refused
// before anything is sent), with srv's credential added to its requests.
func (p *Pool) sessionClient(srv *registry.Server) (*http.Client, error) {
	origin, err := url.Parse(srv.URL)
	if err != nil {
		return nil, fmt.Errorf("server url: %w", err)
	}
	hc := p.clientFor(srv)
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	if cred := p.credential(srv); !cred.empty() {
		base = &credTransport{base: base, cred: cred, origin: origin}
	}
	c := *hc
	c.Transport = &originGuard{base: base, origin: origin, trace: p.trace}
	return &c, nil
}
