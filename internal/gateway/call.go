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
	"github.com/mcpgate/mcpgate/internal/metrics"
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
		return nil, fault.Wrap(err, fault.StoreUnavailable, "cannot read the server registry right now").WithRetryAfter(storeRetryAfter)
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
func (g *Gateway) callTool(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams, l *upstream.Listener) (res *mcp.CallToolResult, ferr *fault.Error) {
	rec := recordFrom(ctx)
	rec.tool = truncate(params.Name, 128)
	if ferr := g.tool(ctx, srv, params.Name); ferr != nil {
		return nil, ferr
	}
	// From here the tool is known to exist: it may name a metric
	// dimension without letting callers create unbounded ones.
	start := time.Now()
	var ls *lease.Lease
	defer func() { g.emitCall(rec.id, srv, params.Name, start, ls, res, ferr) }()
	timeout := srv.TimeoutFor(params.Name)
	req, capped := g.leaseRequest(ctx, srv, params.Name, timeout)
	if capped {
		var err error
		ls, err = g.deps.Limiter.Acquire(ctx, req)
		if err != nil {
			ferr := acquireFault(srv, params.Name, err)
			if ferr.Code != fault.StoreUnavailable || srv.OnStoreError != registry.StoreAllow || ctx.Err() != nil {
				return nil, ferr
			}
			// The server prefers an uncapped call to none.
			g.log.Warn("lease store failed; calling without a slot (on_store_error allow)",
				"request_id", rec.id, "server_id", srv.ID, "tool", rec.tool, "error", err.Error())
			rec.uncapped = true
			ls = nil
		} else {
			rec.waited = ls.Waited
			rec.leaseID = ls.ID()
		}
	}
	callEnd := time.Now().Add(timeout)
	if by := g.callBy(ctx); !by.IsZero() && by.Before(callEnd) {
		callEnd = by
	}
	if ls != nil && req.Hold >= timeout {
		// The lease was taken for the whole call: the call ends when the
		// lease says, Margin before it expires.
		callEnd = ls.CallDeadline
	}
	callCtx, cancel := context.WithDeadline(ctx, callEnd)
	defer cancel()
	stopGuard := func() {}
	if ls != nil {
		callCtx, stopGuard = g.guard(callCtx, ls, callEnd, req.Hold)
	}
	res, err := g.deps.Upstream.CallTool(callCtx, srv, params, l)
	lost := errors.Is(context.Cause(callCtx), errLeaseLost)
	stopGuard()

	if err != nil {
		ferr = upstreamFault(srv, err)
		if lost {
			ferr = fault.Wrap(err, fault.StoreUnavailable, "the call to server %q was stopped: its slot could not be kept", srv.ID).
				WithRetryAfter(storeRetryAfter)
		}
	}
	if ls != nil {
		g.finish(ctx, ls, callOutcome(err, lost))
	}
	if ferr != nil {
		return nil, ferr
	}
	rec.outcome = "ok"
	if res.IsError {
		rec.outcome = "tool_error"
	}
	return res, nil
}

// leaseRequest says which slots a call of tool on srv takes and whether it
// takes a lease at all: for the server's cap, the tool's cap, or the
// tool's breaker. A call with none of those causes no store traffic.
func (g *Gateway) leaseRequest(ctx context.Context, srv *registry.Server, tool string, timeout time.Duration) (lease.Request, bool) {
	var slots []lease.Slot
	if srv.Capped() {
		slots = append(slots, lease.Slot{Attr: lease.ServerAttr, Cap: srv.MaxConcurrent})
	}
	if c := srv.ToolCap(tool); c > 0 {
		slots = append(slots, lease.Slot{Attr: lease.ToolAttr(tool), Cap: c})
	}
	var br *lease.Breaker
	if srv.Breaker.Covers(tool) {
		br = &lease.Breaker{Name: tool, Threshold: srv.Breaker.FailureThreshold, Recovery: srv.Breaker.RecoveryTimeout}
		if len(slots) == 0 {
			// No cap: the lease only carries the breaker.
			slots = append(slots, lease.Slot{Attr: lease.ServerAttr})
		}
	}
	if len(slots) == 0 {
		return lease.Request{}, false
	}
	wait := time.Duration(0)
	if srv.OnLimit == registry.PolicyQueue {
		wait = srv.QueueTimeout
	}
	return lease.Request{
		Key:     srv.ID,
		Slots:   slots,
		Hold:    min(timeout, g.maxHold),
		CallBy:  g.callBy(ctx),
		Wait:    wait,
		Breaker: br,
	}, true
}

// errLeaseLost cancels a call whose lease could not be renewed.
var errLeaseLost = errors.New("lease lost")

// guard bounds a call by its lease. When the call may outlast the lease, it
// renews the lease halfway through each hold, and cancels the call (cause
// errLeaseLost) if the lease is gone or cannot be renewed before it
// lapses: no call runs on an expired lease. The returned stop function ends
// the renewals and waits for them.
func (g *Gateway) guard(ctx context.Context, ls *lease.Lease, callEnd time.Time, hold time.Duration) (context.Context, func()) {
	if !ls.CallDeadline.Before(callEnd) {
		// The lease covers the whole call: nothing to renew.
		return ctx, func() {}
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := ls.CallDeadline
		for {
			t := time.NewTimer(time.Until(deadline.Add(-hold / 2)))
			select {
			case <-callCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			for {
				left := time.Until(callEnd)
				if left <= 0 {
					return
				}
				rctx, rcancel := context.WithDeadline(context.WithoutCancel(callCtx), deadline)
				err := ls.Renew(rctx, min(hold, left))
				rcancel()
				if err == nil {
					deadline = ls.CallDeadline
					break
				}
				if errors.Is(err, lease.ErrNotHeld) || !time.Now().Before(deadline) {
					g.log.Warn("lease lost; stopping the call", "server_id", ls.Key(), "lease", ls.ID(), "error", err.Error())
					cancel(errLeaseLost)
					return
				}
				// A store hiccup: try again soon, while the lease holds.
				select {
				case <-callCtx.Done():
					return
				case <-time.After(min(200*time.Millisecond, time.Until(deadline))):
				}
			}
		}
	}()
	return callCtx, func() { cancel(nil); <-done }
}

// callOutcome says what a call that returned err tells its breaker. A call
// cut off by the caller going away, or by a lost lease, tells nothing about
// the upstream's health.
func callOutcome(err error, lost bool) lease.Outcome {
	var ue *upstream.Error
	switch {
	case err == nil:
		return lease.Success
	case lost || errors.As(err, &ue) && ue.Kind == upstream.KindCanceled:
		return lease.Abandoned
	case errors.As(err, &ue) && ue.Infrastructure():
		return lease.Failure
	}
	return lease.Success
}

// finish gives the slot back even if the client has gone away, reporting
// the call's outcome to the breaker. A lease already gone (expired and
// purged) is logged: its call outlived it.
func (g *Gateway) finish(ctx context.Context, ls *lease.Lease, outcome lease.Outcome) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	rec := recordFrom(ctx)
	tr, err := ls.Finish(rctx, outcome)
	if err != nil {
		g.log.Warn("release failed; the lease will expire on its own",
			"request_id", rec.id, "server_id", ls.Key(), "lease", ls.ID(),
			"expiry", ls.Expiry, "error", err.Error())
	}
	if tr != lease.NoTransition {
		rec.breaker = string(tr)
		g.log.Warn("circuit breaker "+string(tr), "request_id", rec.id, "server_id", ls.Key(), "tool", rec.tool)
		from, to := "closed", "open"
		switch tr {
		case lease.Closed:
			from, to = "half_open", "closed"
		case lease.Reopened:
			from = "half_open"
		}
		_ = g.deps.Metrics.BreakerTransition(ls.Key(), rec.tool, from, to)
	}
}

// storeStatsEvery is how often the limiter's counters are emitted.
const storeStatsEvery = time.Minute

// emitCall writes the call's EMF record and, once a minute, the limiter's
// store counters since the last time.
func (g *Gateway) emitCall(requestID string, srv *registry.Server, tool string, start time.Time, ls *lease.Lease, res *mcp.CallToolResult, ferr *fault.Error) {
	m := g.deps.Metrics
	if m == nil {
		return
	}
	c := metrics.Call{ServerID: srv.ID, Tool: tool, Latency: time.Since(start), Outcome: "ok", RequestID: requestID}
	if ls != nil {
		c.QueueWait, c.LeaseID = ls.Waited, ls.ID()
		c.InFlightAfterAcquire, c.InFlightKnown = ls.InFlight, true
	}
	switch {
	case ferr != nil:
		c.Outcome = string(ferr.Code)
		c.Shed = ferr.Code == fault.AtCapacity
		c.QueueTimeout = ferr.Code == fault.QueueTimeout
		c.CircuitOpen = ferr.Code == fault.CircuitOpen
		c.StoreError = ferr.Code == fault.StoreUnavailable
		c.UpstreamTimeout = ferr.Code == fault.UpstreamTimeout
		c.UpstreamError = ferr.Code == fault.UpstreamError
	case res != nil && res.IsError:
		c.Outcome = "tool_error"
	}
	_ = m.Call(c)

	if g.deps.Limiter == nil {
		return
	}
	g.statsMu.Lock()
	defer g.statsMu.Unlock()
	now := time.Now()
	if g.statsAt.IsZero() {
		g.statsAt, g.statsLast = now, g.deps.Limiter.Stats()
		return
	}
	if now.Sub(g.statsAt) < storeStatsEvery {
		return
	}
	cur := g.deps.Limiter.Stats()
	last := g.statsLast
	g.statsAt, g.statsLast = now, cur
	_ = m.StoreStats(metrics.StoreStats{
		Calls:        (cur.Acquired + cur.Shed + cur.WaitTimeouts + cur.CircuitOpen) - (last.Acquired + last.Shed + last.WaitTimeouts + last.CircuitOpen),
		Writes:       cur.Writes - last.Writes,
		FailedWrites: cur.FailedWrites - last.FailedWrites,
		Reads:        cur.Reads - last.Reads,
	})
}

func acquireFault(srv *registry.Server, tool string, err error) *fault.Error {
	var full *lease.FullError
	var wt *lease.WaitTimeoutError
	var open *lease.CircuitOpenError
	switch {
	case errors.As(err, &open):
		return fault.New(fault.CircuitOpen, "the circuit breaker for tool %q of server %q is open", truncate(tool, 128), srv.ID).
			WithRetryAfter(open.RetryAfter)
	case errors.As(err, &full) && full.Attr != lease.ServerAttr:
		return fault.New(fault.AtCapacity, "tool %q of server %q is at capacity (%d calls in flight)", truncate(tool, 128), srv.ID, full.Cap).
			WithRetryAfter(full.RetryAfter)
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
		return fault.Wrap(err, fault.StoreUnavailable, "cannot take a slot on server %q right now", srv.ID).
			WithRetryAfter(storeRetryAfter)
	}
}

// storeRetryAfter is the hint given with STORE_UNAVAILABLE.
const storeRetryAfter = time.Second

// maxUpstreamMessage bounds the upstream error text relayed to a client.
const maxUpstreamMessage = 512

func upstreamFault(srv *registry.Server, err error) *fault.Error {
	var ue *upstream.Error
	var se *upstream.SpecError
	if errors.As(err, &se) {
		return fault.Wrap(err, fault.Misconfigured, "server %q is misconfigured: its OpenAPI document cannot be used; ask an admin to check the log", srv.ID)
	}
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
		if ue.RPC.Code == jsonrpc.CodeInvalidParams || specCode(ue.RPC.Code) {
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
