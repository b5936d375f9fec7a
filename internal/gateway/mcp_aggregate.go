package gateway

import (
	"context"
	"errors"
	"github.com/mcpgate/mcpgate/internal/clip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// ttlMs is the time left until expires, in whole milliseconds, never
// negative.
func ttlMs(expires time.Time) int {
	return int(max(time.Until(expires), 0).Milliseconds())
}

// serverTools is one server's tools, or why they could not be listed.
type serverTools struct {
	id    string
	srv   *registry.Server // nil for a misconfigured server
	tools []*mcp.Tool
	err   *fault.Error
	// expires is when the gateway lists the server again.
	expires time.Time
}

// allTools lists the tools of every server c may call (those of them c may
// see), ordered by server
// id, asking at most maxListConcurrency upstreams at once. A server whose
// listing fails, or whose item is invalid, is returned with its fault (and
// logged), and never hides the others' tools.
func (g *Gateway) allTools(ctx context.Context, c *caller) ([]serverTools, error) {
	servers, invalid, err := g.allowedServers(ctx, c.principal)
	if err != nil {
		return nil, err
	}
	out := make([]serverTools, len(servers), len(servers)+len(invalid))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxListConcurrency)
	for i, srv := range servers {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			lctx, cancel := g.boundedCtx(ctx, min(srv.Timeout, 10*time.Second))
			defer cancel()
			out[i].id, out[i].srv = srv.ID, srv
			ls, err := g.deps.Upstream.ToolListing(lctx, srv, c.upstream(srv))
			if err != nil {
				g.log.Warn("listing tools failed; its tools are left out", "request_id", recordFrom(ctx).id, "server_id", srv.ID, "error", err.Error())
				out[i].err = upstreamFault(srv, err)
				return
			}
			out[i].tools, out[i].expires = c.visible(srv, ls.Tools), ls.Expires
		})
	}
	wg.Wait()
	for _, inv := range invalid {
		g.log.Warn("invalid server item: its tools are left out", "request_id", recordFrom(ctx).id, "server_id", inv.ID, "error", inv.Error())
		out = append(out, serverTools{id: inv.ID, err: misconfigured(inv)})
	}
	slices.SortFunc(out, func(a, b serverTools) int { return strings.Compare(a.id, b.id) })
	return out, nil
}

// allowedServers lists the servers a principal may call, ordered by id,
// and, apart, those of them whose items are invalid.
func (g *Gateway) allowedServers(ctx context.Context, p *auth.Principal) ([]*registry.Server, []*registry.InvalidError, error) {
	var (
		out     []*registry.Server
		invalid []*registry.InvalidError
	)
	if p.AllowsAll() {
		servers, bad, err := g.deps.Registry.All(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range bad {
			var inv *registry.InvalidError
			if !errors.As(e, &inv) || registry.ValidateID(inv.ID) != nil {
				// An item without a usable server_id cannot be called
				// or named: the log is where it can be seen.
				g.log.Warn("invalid server item left out", "error", e.Error())
				continue
			}
			invalid = append(invalid, inv)
		}
		out = append(out, servers...)
	} else {
		for _, id := range p.Servers {
			srv, err := g.deps.Registry.Get(ctx, id)
			var inv *registry.InvalidError
			switch {
			case err == nil:
				out = append(out, srv)
			case errors.Is(err, registry.ErrNotFound):
			case errors.As(err, &inv):
				invalid = append(invalid, inv)
			default:
				return nil, nil, err
			}
		}
	}
	slices.SortFunc(out, func(a, b *registry.Server) int { return strings.Compare(a.ID, b.ID) })
	return out, invalid, nil
}

// resolveTool finds the server and upstream tool name a call names. On the
// aggregated endpoint, a server the caller may not call (FORBIDDEN) or that
// does not exist (NOT_FOUND) is an unknown tool to the agent, since its
// tool list never shows it; the fault's code still says which.
func (sc *mcpScope) resolveTool(ctx context.Context, name string) (*registry.Server, string, *fault.Error) {
	if sc.srv != nil {
		return sc.srv, name, nil
	}
	id, tool, ok := strings.Cut(name, ToolSeparator)
	if !ok || id == "" || tool == "" {
		return nil, "", fault.New(fault.NotFound, "unknown tool %q: tools here are named <server_id>%s<tool>", clip.String(name, clip.Name), ToolSeparator)
	}
	srv, ferr := sc.g.server(ctx, id)
	if ferr != nil {
		switch ferr.Code {
		case fault.NotFound, fault.Forbidden:
			return nil, "", fault.New(ferr.Code, "unknown tool %q", clip.String(name, clip.Name))
		}
		return nil, "", ferr
	}
	return srv, tool, nil
}

// noteTool records the server and tool a tools/call names, before it is
// resolved: on the aggregated endpoint, "<server_id>-<tool>" is split.
func (sc *mcpScope) noteTool(name string) {
	if sc.srv == nil {
		if id, tool, ok := strings.Cut(name, ToolSeparator); ok {
			sc.rec.serverID, name = clip.String(id, clip.Short), tool
		}
	}
	sc.rec.tool = clip.String(name, clip.Name)
}

// refuse answers a tools/call the caller got wrong (unknown tool, invalid
// arguments) with JSON-RPC invalid params, noting fe in the record.
func (sc *mcpScope) refuse(fe *fault.Error) error {
	sc.rec.fail(fe)
	return invalidParams("%s", fe.Message)
}
