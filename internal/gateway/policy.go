package gateway

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// call is one request for an upstream on its way through admission — a
// tool call, or a request relayed to a server (resources/read,
// prompts/get, completion/complete) — what it asks for, worked out before
// any check, and the places it took.
type call struct {
	srv *registry.Server
	// tool names the tool called; "" for a relayed request, which asks
	// for no tool's cap, bucket or breaker.
	tool string
	// params are a tool call's; nil for a relayed request.
	params  *mcp.CallToolParams
	rec     *record
	timeout time.Duration
	// req is what the call asks of the server's lease item, and capped
	// whether it asks at all (see leaseRequest).
	req    lease.Request
	capped bool
	// counted: the call is observed (its tool is known to exist, so it
	// may name a metric dimension); start is when that began.
	counted bool
	start   time.Time
	// leases are the places taken, the server's first; ls is the
	// server's place under its cap, nil when it took none.
	leases []*lease.Lease
	ls     *lease.Lease
}

// check is one step of the policy a call passes before it asks for a
// place: a refusal, or nil to let it on.
type check struct {
	name string
	// counted: from this check on, a refusal is a call in the metrics.
	counted bool
	run     func(g *Gateway, ctx context.Context, c *call) *fault.Error
}

// policy is the ordered list of checks before a call takes any place (its
// principal's, the server's): a new refusal that needs no lease is one
// more entry here. The refusals the lease store decides (caps, queues,
// breakers, rate limits) are asked for in the lease request and come
// back from admit.
var policy = []check{
	// The tool exists, the caller may see it (the server's allowed and
	// disallowed tools, the caller's tool grants), its arguments fit.
	{name: "tool", run: func(g *Gateway, ctx context.Context, c *call) *fault.Error { return g.tool(ctx, c.srv, c.params) }},
	{name: "shutdown", run: (*Gateway).notStopping},
	// The call's worst case fits in one request.
	{name: "budget", counted: true, run: func(g *Gateway, _ context.Context, c *call) *fault.Error {
		return g.budgetFault(c.srv, c.tool, c.timeout, c.req, c.capped)
	}},
}

// newCall works out what a call of params on srv asks for.
func (g *Gateway) newCall(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams) *call {
	c := &call{srv: srv, tool: params.Name, params: params, rec: recordFrom(ctx), timeout: srv.TimeoutFor(params.Name)}
	c.req, c.capped = g.leaseRequest(ctx, srv, c.tool, c.timeout)
	return c
}

// newRelay works out what a request relayed to srv asks for: the
// server's timeout, and a place as a tool call's but for a tool's own
// cap, bucket and breaker.
func (g *Gateway) newRelay(ctx context.Context, srv *registry.Server) *call {
	c := &call{srv: srv, rec: recordFrom(ctx), timeout: srv.Timeout}
	c.req, c.capped = g.leaseRequest(ctx, srv, "", c.timeout)
	return c
}

// checkPolicy runs the policy's checks in order, until one refuses.
func (g *Gateway) checkPolicy(ctx context.Context, c *call) *fault.Error {
	for _, ch := range policy {
		if ch.counted && !c.counted {
			c.counted, c.start = true, time.Now()
		}
		if ferr := ch.run(g, ctx, c); ferr != nil {
			return ferr
		}
	}
	if !c.counted {
		c.counted, c.start = true, time.Now()
	}
	return nil
}

// notStopping refuses a call once the gateway is shutting down.
func (g *Gateway) notStopping(_ context.Context, c *call) *fault.Error {
	select {
	case <-g.stopping:
		return fault.New(fault.UpstreamTimeout, "the gateway is shutting down: the call to server %q was not sent", c.srv.ID)
	default:
		return nil
	}
}

// info is the call as its observer knows it.
func (c *call) info() CallInfo {
	return CallInfo{RequestID: c.rec.id, ServerID: c.srv.ID, Tool: c.tool, Principal: c.rec.principal}
}
