package gateway

import (
	"github.com/mcpgate/mcpgate/internal/clip"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// maxForwardValue bounds one forwarded header value.
const maxForwardValue = 8 << 10

// upstream is who the gateway calls srv for: the caller's principal, whose
// upstream sessions are its own, and the request headers srv forwards
// (never a credential, a hop-by-hop header, or one the request's
// Connection header names). A forwarded value with control characters or
// longer than maxForwardValue is dropped: it would fail the upstream
// request, and a caller must not be able to make a call fail, or trip a
// breaker, that way.
func (c *caller) upstream(srv *registry.Server) upstream.Caller {
	if c == nil || c.principal == nil {
		return upstream.Caller{}
	}
	uc := upstream.Caller{Principal: c.principal.StateKey}
	if len(srv.ForwardHeaders) == 0 {
		return uc
	}
	var hop []string
	for _, v := range c.header.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			hop = append(hop, http.CanonicalHeaderKey(strings.TrimSpace(f)))
		}
	}
	for _, name := range srv.ForwardHeaders {
		if registry.NeverForwarded(name) || slices.Contains(hop, name) {
			continue
		}
		for _, v := range c.header.Values(name) {
			if len(v) > maxForwardValue || strings.ContainsFunc(v, clip.IsHeaderControl) {
				continue
			}
			if uc.Header == nil {
				uc.Header = http.Header{}
			}
			uc.Header[name] = append(uc.Header[name], v)
		}
	}
	return uc
}

// sees reports whether the caller may see and call tool of srv: the
// server's allowed_tools and disallowed_tools, then the principal's tool
// grants. A tool it may not see is, to it, a tool that does not exist.
func (c *caller) sees(srv *registry.Server, tool string) bool {
	return c != nil && c.principal != nil && srv.ToolAllowed(tool) && c.principal.AllowsTool(srv.ID, tool)
}

// visible returns the tools of srv the caller may see.
func (c *caller) visible(srv *registry.Server, tools []*mcp.Tool) []*mcp.Tool {
	out := make([]*mcp.Tool, 0, len(tools))
	for _, t := range tools {
		if c.sees(srv, t.Name) {
			out = append(out, t)
		}
	}
	return out
}
