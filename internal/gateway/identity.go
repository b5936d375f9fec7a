package gateway

import (
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// maxForwardValue bounds one forwarded header value.
const maxForwardValue = 8 << 10

// agent is who a request comes from: its key, and its HTTP headers, of
// which a server may forward some.
type agent struct {
	key    *auth.Key
	header http.Header
}

// caller is who the gateway calls srv for: the key's principal, whose
// upstream sessions are its own, and the agent headers srv forwards (never
// a credential, a hop-by-hop header, or one the request's Connection header
// names). A forwarded value with control characters or longer than
// maxForwardValue is dropped: it would fail the upstream request, and an
// agent must not be able to make a call fail, or trip a breaker, that way.
func (a agent) caller(srv *registry.Server) upstream.Caller {
	c := upstream.Caller{Principal: a.key.Hash}
	if len(srv.ForwardHeaders) == 0 {
		return c
	}
	var hop []string
	for _, v := range a.header.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			hop = append(hop, http.CanonicalHeaderKey(strings.TrimSpace(f)))
		}
	}
	for _, name := range srv.ForwardHeaders {
		if registry.NeverForwarded(name) || slices.Contains(hop, name) {
			continue
		}
		for _, v := range a.header.Values(name) {
			if len(v) > maxForwardValue || strings.ContainsFunc(v, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }) {
				continue
			}
			if c.Header == nil {
				c.Header = http.Header{}
			}
			c.Header[name] = append(c.Header[name], v)
		}
	}
	return c
}

// sees reports whether the agent may see and call tool of srv: the
// server's allowed_tools and disallowed_tools, then the key's tool grants.
// A tool it may not see is, to it, a tool that does not exist.
func (a agent) sees(srv *registry.Server, tool string) bool {
	return srv.ToolAllowed(tool) && a.key.AllowsTool(srv.ID, tool)
}

// visible returns the tools of srv the agent may see.
func (a agent) visible(srv *registry.Server, tools []*mcp.Tool) []*mcp.Tool {
	out := make([]*mcp.Tool, 0, len(tools))
	for _, t := range tools {
		if a.sees(srv, t.Name) {
			out = append(out, t)
		}
	}
	return out
}
