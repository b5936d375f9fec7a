package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// queueRetryAfter is the hint given with QUEUE_TIMEOUT.
const queueRetryAfter = time.Second

// server returns the server the key may call, or the fault to answer.
func (g *Gateway) server(ctx context.Context, k *auth.Key, id string) (*registry.Server, *fault.Error) {
	rec := recordFrom(ctx)
	rec.serverID = truncate(id, 64)
	// Access is checked first, so a key learns nothing about servers it
	// may not call.
	if !k.Allows(id) {
		return nil, fault.New(fault.Forbidden, "this key may not call server %q", truncate(id, 64))
	}
	srv, err := g.deps.Registry.Get(ctx, id)
	var inv *registry.InvalidError
	switch {
	case err == nil:
		return srv, nil
	case errors.Is(err, registry.ErrNotFound):
		return nil, fault.New(fault.NotFound, "unknown server %q", truncate(id, 64))
	case errors.As(err, &inv):
		// Admins see the detail in the log; the caller learns the server
		// cannot be used until it is fixed.
		return nil, fault.Wrap(err, fault.Misconfigured, "server %q is misconfigured; ask an admin to check its item", id)
	default:
		return nil, fault.Wrap(err, fault.StoreUnavailable, "cannot read the server registry right now")
	}
}

// callBy is the latest instant an upstream call may end for a request with
// ctx: the request deadline less the answer reserve, or zero if none.
func (g *Gateway) callBy(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl.Add(-g.reserve)
	}
	return time.Time{}
}

// tool checks that srv has the named tool, before any slot is taken.
func (g *Gateway) tool(ctx context.Context, srv *registry.Server, name string) *fault.Error {
	lctx, cancel := g.boundedCtx(ctx, srv.Timeout)
	defer cancel()
	_, err := g.deps.Upstream.Tool(lctx, srv, name)
	if errors.Is(err, upstream.ErrUnknownTool) {
		return fault.New(fault.NotFound, "server %q has no tool %q", srv.ID, truncate(name, 128))
	}
	if err != nil {
		return upstreamFault(srv, err)
	}
	return nil
}

// boundedCtx bounds ctx by d and by the request's call deadline.
func (g *Gateway) boundedCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(d)
	if by := g.callBy(ctx); !by.IsZero() && by.Before(deadline) {
		deadline = by
	}
	return context.WithDeadline(ctx, deadline)
}

// callTool runs one tool call through the semaphore. A tool's own failure
// is a result with IsError; every other failure is a fault.
func (g *Gateway) callTool(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams, l *upstream.Listener) (*mcp.CallToolResult, *fault.Error) {
	rec := recordFrom(ctx)
	rec.tool = truncate(params.Name, 128)
	if ferr := g.tool(ctx, srv, params.Name); ferr != nil {
		return nil, ferr
	}

	var ls *lease.Lease
	callCtx, cancel := g.boundedCtx(ctx, srv.Timeout)
	defer cancel()
	if slots := slotsFor(srv); len(slots) > 0 {
		wait := time.Duration(0)
		if srv.OnLimit == registry.PolicyQueue {
			wait = srv.QueueTimeout
		}
		var err error
		ls, err = g.deps.Limiter.Acquire(ctx, lease.Request{
			Key:    srv.ID,
			Slots:  slots,
			Hold:   srv.Timeout,
			CallBy: g.callBy(ctx),
			Wait:   wait,
		})
		if err != nil {
			return nil, acquireFault(srv, err)
		}
		rec.waited = ls.Waited
		rec.leaseID = ls.ID()
		cancel()
		callCtx, cancel = context.WithDeadline(ctx, ls.CallDeadline)
		defer cancel()
	}
	res, err := g.deps.Upstream.CallTool(callCtx, srv, params, l)
	if ls != nil {
		g.release(ctx, ls)
	}
	if err != nil {
		return nil, upstreamFault(srv, err)
	}
	rec.outcome = "ok"
	if res.IsError {
		rec.outcome = "tool_error"
	}
	return res, nil
}

// release gives the slot back even if the client has gone away. A lease
// already gone (expired and purged) is logged: its call outlived it.
func (g *Gateway) release(ctx context.Context, ls *lease.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := ls.Release(rctx); err != nil {
		g.log.Warn("release failed; the lease will expire on its own",
			"request_id", recordFrom(ctx).id, "server_id", ls.Key(), "lease", ls.ID(),
			"expiry", ls.Expiry, "error", err.Error())
	}
}

// slotsFor lists the semaphore slots a call to srv takes.
func slotsFor(srv *registry.Server) []lease.Slot {
	if !srv.Capped() {
		return nil
	}
	return []lease.Slot{{Attr: lease.ServerAttr, Cap: srv.MaxConcurrent}}
}

func acquireFault(srv *registry.Server, err error) *fault.Error {
	var full *lease.FullError
	var wt *lease.WaitTimeoutError
	switch {
	case errors.As(err, &full):
		return fault.New(fault.AtCapacity, "server %q is at capacity (%d calls in flight)", srv.ID, full.Cap).
			WithRetryAfter(full.RetryAfter)
	case errors.As(err, &wt):
		return fault.New(fault.QueueTimeout, "no slot on server %q within %v", srv.ID, wt.Waited.Round(time.Millisecond)).
			WithRetryAfter(queueRetryAfter)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fault.Wrap(err, fault.QueueTimeout, "the request ended while waiting for a slot on server %q", srv.ID).
			WithRetryAfter(queueRetryAfter)
	default:
		return fault.Wrap(err, fault.StoreUnavailable, "cannot take a slot on server %q right now", srv.ID)
	}
}

// maxUpstreamMessage bounds the upstream error text relayed to a client.
const maxUpstreamMessage = 512

func upstreamFault(srv *registry.Server, err error) *fault.Error {
	var ue *upstream.Error
	if !errors.As(err, &ue) {
		return fault.Wrap(err, fault.UpstreamError, "server %q failed", srv.ID)
	}
	switch ue.Kind {
	case upstream.KindTimeout:
		return fault.Wrap(err, fault.UpstreamTimeout, "server %q did not answer in time", srv.ID)
	case upstream.KindCanceled:
		return fault.Wrap(err, fault.UpstreamTimeout, "the request ended before server %q answered", srv.ID)
	case upstream.KindRPC:
		// The upstream's own answer to the caller's request: relay it.
		msg := truncate(ue.RPC.Message, maxUpstreamMessage)
		if ue.RPC.Code == jsonrpc.CodeInvalidParams {
			return fault.Wrap(err, fault.BadRequest, "server %q rejected the call: %s", srv.ID, msg)
		}
		return fault.Wrap(err, fault.UpstreamError, "server %q answered with error %d: %s", srv.ID, ue.RPC.Code, msg)
	default:
		return fault.Wrap(err, fault.UpstreamError, "server %q is unavailable", srv.ID)
	}
}

// writeFault writes e and notes it in the request's log record.
func writeFault(w http.ResponseWriter, r *http.Request, e *fault.Error) {
	rec := recordFrom(r.Context())
	rec.code = e.Code
	rec.cause = e.Cause
	if rec.outcome == "" {
		rec.outcome = "error"
	}
	fault.WriteHTTP(w, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
