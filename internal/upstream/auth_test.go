package upstream

import (
	"testing"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// TestEveryAuthTypeHasAProvider: an auth type the registry accepts is one
// the pool can send, named in logs as itself.
func TestEveryAuthTypeHasAProvider(t *testing.T) {
	p := New(Options{})
	defer p.Close()
	for _, typ := range registry.AuthTypes() {
		newProvider, ok := providers[typ]
		if !ok {
			t.Errorf("auth type %s has no provider", typ)
			continue
		}
		srv := &registry.Server{ID: "s", URL: "https://upstream.example/mcp", Auth: &registry.Auth{Type: typ}}
		if got := newProvider(p, srv).kind(); got != typ {
			t.Errorf("the provider of %s names itself %s", typ, got)
		}
	}
	if len(providers) != len(registry.AuthTypes()) {
		t.Errorf("%d providers for %d auth types", len(providers), len(registry.AuthTypes()))
	}
}
