package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"io"
	"net/http"
	"strings"
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

// server returns the server the caller may call, or the fault to answer.
func (g *Gateway) server(ctx context.Context, id string) (*registry.Server, *fault.Error) {
	rec := recordFrom(ctx)
	rec.serverID = clip.String(id, clip.Short)
	// Access is checked first, so a caller learns nothing about servers
	// it may not call.
	if p := principalFrom(ctx); p == nil || !p.Allows(id) {
		return nil, g.forbidden(ctx, id)
	}
	srv, err := g.deps.Registry.Get(ctx, id)
	var inv *registry.InvalidError
	switch {
	case err == nil:
		return srv, nil
	case errors.Is(err, registry.ErrNotFound):
		return nil, fault.New(fault.NotFound, "unknown server %q", clip.String(id, clip.Short))
	case errors.As(err, &inv):
		return nil, misconfigured(inv)
	default:
		return nil, fault.Wrap(err, fault.StoreUnavailable, "cannot read the server registry right now").WithRetryAfter(storeRetryAfter)
	}
}

// misconfigured is the fault of a server whose item is invalid, for a call
// and for a listing alike. Admins see what is wrong in the log (and with
// mcpgate servers get); the caller learns the server cannot be used until
// it is fixed.
func misconfigured(inv *registry.InvalidError) *fault.Error {
	return fault.Wrap(inv, fault.Misconfigured, "server %q is misconfigured; ask an admin to check its item", clip.String(inv.ID, clip.Short))
}

// callBy is the latest instant an upstream call may end for a request with
// ctx: the request deadline less the answer reserve, or zero if none.
func (g *Gateway) callBy(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl.Add(-g.reserve)
	}
	return time.Time{}
}

// tool checks that srv has the named tool, that the caller may see it and
// that the call's arguments fit its input schema, before any slot is
// taken. A tool the caller may not see (the server's allowed_tools and
// disallowed_tools, the caller's tool grants) is answered as one that does
// not exist, before any upstream request.
func (g *Gateway) tool(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams) *fault.Error {
	// Made only when answered: formatting it is most of a known tool's
	// check.
	unknown := func() *fault.Error {
		return fault.New(fault.NotFound, "server %q has no tool %q", srv.ID, clip.String(params.Name, clip.Name))
	}
	c := callerFrom(ctx)
	if !c.sees(srv, params.Name) {
		return unknown()
	}
	lctx, cancel := g.boundedCtx(ctx, srv.Timeout)
	defer cancel()
	t, err := g.deps.Upstream.Tool(lctx, srv, c.upstream(srv), params.Name)
	if errors.Is(err, upstream.ErrUnknownTool) {
		return unknown()
	}
	if err != nil {
		return upstreamFault(srv, err)
	}
	return g.checkArguments(srv, t, params.Arguments)
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
//
// The agent is answered when the upstream answers or the call is cut off
// (its timeout, the request's deadline, the caller gone, shutdown),
// whichever comes first. A cut-off call's slot is not given back then: its
// exchange goes on in the background until the upstream is known to have
// stopped working on it, or the server's cancel_grace runs out.
//
// An upstream that answers a call declaring the tasks extension with a task
// gives that task (and an empty result): its place is given back as for any
// answer.
func (g *Gateway) callTool(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams, l *upstream.Listener) (res *mcp.CallToolResult, task *upstream.Task, ferr *fault.Error) {
	c := g.newCall(ctx, srv, params)
	c.rec.tool = clip.String(params.Name, clip.Name)
	defer func() {
		if c.counted {
			g.obs.Finished(ctx, CallEnd{CallInfo: c.info(), Server: srv, Latency: time.Since(c.start), Lease: c.ls, Result: res, Fault: ferr})
		}
	}()
	if ferr := g.checkPolicy(ctx, c); ferr != nil {
		return nil, nil, ferr
	}
	if ferr := g.take(ctx, c); ferr != nil {
		return nil, nil, ferr
	}
	callEnd, short := g.callEnd(ctx, c)
	f := g.startFlight(ctx, srv, params, l, c.leases, c.req.Hold, callEnd)
	if cut := g.await(ctx, f, callEnd); cut != nil {
		return nil, nil, g.cutOff(f, cut, short)
	}
	res, ferr = g.settle(f, c.rec, short)
	if ferr == nil {
		task = f.up.Task()
	}
	return res, task, ferr
}

// take takes the call's places (see admit) and tells the observer of the
// server's.
func (g *Gateway) take(ctx context.Context, c *call) *fault.Error {
	var end func(AdmissionEnd)
	if t := g.deps.Tracer; t != nil {
		end = t.Admission(ctx, c.info())
	}
	leases, ferr := g.admit(ctx, c.srv, c.tool, c.req, c.capped, c.timeout)
	if ferr != nil {
		if end != nil {
			end(AdmissionEnd{Fault: ferr})
		}
		return ferr
	}
	c.leases = leases
	if end != nil {
		var ls *lease.Lease
		if len(leases) > 0 && c.capped {
			ls = leases[0]
		}
		end(AdmissionEnd{Lease: ls})
	}
	if len(leases) > 0 && c.capped {
		c.ls = leases[0]
		c.rec.waited = c.ls.Waited
		c.rec.leaseID = c.ls.ID()
		g.obs.Acquired(ctx, c.info(), c.ls)
		g.obs.Waited(ctx, c.info(), c.ls.Waited)
	}
	return nil
}

// callEnd is when the call is cut off: its timeout from now, sooner if the
// request's deadline says so (short: a call it cuts off says nothing of the
// upstream), or when a lease taken for the whole call says, Margin before
// it expires.
func (g *Gateway) callEnd(ctx context.Context, c *call) (end time.Time, short bool) {
	end = time.Now().Add(c.timeout)
	if by := g.callBy(ctx); !by.IsZero() && by.Before(end) {
		end, short = by, true
	}
	for _, l := range c.leases {
		if c.req.Hold >= c.timeout && l.CallDeadline.Before(end) {
			end = l.CallDeadline
		}
	}
	return end, short
}

// await waits for the upstream's answer or the call's cut-off, whichever
// is first, and returns why the call was cut off, nil if it was answered.
func (g *Gateway) await(ctx context.Context, f *flight, callEnd time.Time) error {
	timer := time.NewTimer(time.Until(callEnd))
	defer timer.Stop()
	var cut error
	select {
	case <-f.up.Done():
		return nil
	case <-timer.C:
		cut = context.DeadlineExceeded
	case <-ctx.Done():
		cut = ctx.Err()
	case <-g.stopping:
		cut = errShutdown
	}
	select {
	case <-f.up.Done():
		// The answer came at the same instant: it wins.
		return nil
	default:
		return cut
	}
}

// settle classifies an answered call's result, and closes its exchange
// (or leaves it in the background when its connection broke).
func (g *Gateway) settle(f *flight, rec *record, short bool) (*mcp.CallToolResult, *fault.Error) {
	res, ferr, closing := g.answer(f, rec, short)
	closing()
	return res, ferr
}

// answer classifies an answered call's result; closing closes its
// exchange, giving its slot back (a no-op when the exchange was left in the
// background, its connection broken). The upstream has answered, so it has
// stopped working on the call: what the caller does with the result may go
// on while closing runs.
func (g *Gateway) answer(f *flight, rec *record, short bool) (res *mcp.CallToolResult, ferr *fault.Error, closing func()) {
	srv := f.srv
	res, err := f.up.Result()
	var ue *upstream.Error
	if errors.As(err, &ue) && ue.RetryAfter > 0 {
		g.pause(f.ctx, srv, f.tool, f.leases, ue.RetryAfter, rec)
	}
	lost := errors.Is(context.Cause(f.ctx), lease.ErrLeaseLost)
	if err != nil {
		ferr = upstreamFault(srv, err)
		if lost {
			ferr = fault.Wrap(err, fault.StoreUnavailable, "the call to server %q was stopped: its slot could not be kept", srv.ID).
				WithRetryAfter(storeRetryAfter)
		}
	}
	if f.span != nil {
		f.span.Answered(ferr, res != nil && res.IsError)
	}
	outcome := callOutcome(err, lost, short)
	if f.up.Broken() && f.capped {
		// Its connection broke after the call was sent: the upstream may go
		// on with it, so its place is kept, as a cut-off call's is, for
		// the server's cancel_grace from now.
		f.graceFrom(time.Now())
		g.background(f, outcome)
		return nil, ferr, func() {}
	}
	closing = func() {
		f.close(outcome, func(how upstream.Stop) {
			if how == "" {
				// The exchange ended without the upstream known to stop (its
				// lease lost, or the gateway draining) while it had the call.
				g.closed(f, how, 0)
			}
		})
	}
	if ferr != nil {
		return nil, ferr, closing
	}
	rec.outcome = "ok"
	if res.IsError {
		rec.outcome = "tool_error"
	}
	return res, nil, closing
}

// admit takes the places a call needs before it is sent: one under its
// principal's own limit (a key's max_parallel_requests), then one on the
// server (its caps, its queue, its breaker). It returns the leases, the
// server's first, none when the call needs none or goes without (the
// server's on_store_error allow), or the fault to answer. A principal's
// lease is given back if the server refuses the call.
func (g *Gateway) admit(ctx context.Context, srv *registry.Server, tool string, req lease.Request, capped bool, timeout time.Duration) ([]*lease.Lease, *fault.Error) {
	rec := recordFrom(ctx)
	var leases []*lease.Lease
	if kr, ok := g.principalRequest(ctx, timeout); ok {
		kl, err := g.deps.Limiter.Acquire(ctx, kr)
		if err != nil {
			ferr := principalFault(err)
			if ferr.Code != fault.StoreUnavailable || srv.OnStoreError != registry.StoreAllow || ctx.Err() != nil {
				return nil, ferr
			}
			g.log.Warn("lease store failed; calling without the key's limit (on_store_error allow)",
				"request_id", rec.id, "server_id", srv.ID, "tool", rec.tool, "error", err.Error())
			rec.uncapped = true
		} else {
			leases = append(leases, kl)
		}
	}
	giveBack := func() {
		// The call is not made: its principal's place, and its token,
		// go back.
		for _, l := range leases {
			g.finish(ctx, l, lease.Unused, rec)
		}
	}
	if !capped {
		if ferr := g.paused(ctx, srv, tool); ferr != nil {
			giveBack()
			return nil, ferr
		}
		return leases, nil
	}
	ls, err := g.deps.Limiter.Acquire(ctx, req)
	if err != nil {
		ferr := acquireFault(srv, tool, err)
		if ferr.Code != fault.StoreUnavailable || srv.OnStoreError != registry.StoreAllow || ctx.Err() != nil {
			giveBack()
			return nil, ferr
		}
		// The server prefers an uncapped call to none.
		g.log.Warn("lease store failed; calling without a slot (on_store_error allow)",
			"request_id", rec.id, "server_id", srv.ID, "tool", rec.tool, "error", err.Error())
		rec.uncapped = true
		return leases, nil
	}
	return append([]*lease.Lease{ls}, leases...), nil
}

// cutOff answers a call cut off for cause before its upstream answered, and
// leaves its exchange to close in the background.
func (g *Gateway) cutOff(f *flight, cause error, short bool) *fault.Error {
	kind := upstream.KindCanceled
	if errors.Is(cause, context.DeadlineExceeded) {
		kind = upstream.KindTimeout
	}
	err := &upstream.Error{Kind: kind, ServerID: f.srv.ID, Err: cause}
	ferr := upstreamFault(f.srv, err)
	if errors.Is(cause, errShutdown) {
		ferr = fault.Wrap(err, fault.UpstreamTimeout, "the gateway is shutting down: the call to server %q was stopped before it answered", f.srv.ID)
	}
	outcome := callOutcome(err, false, short)
	if f.span != nil {
		f.span.CutOff(ferr, f.capped)
	}
	if !f.capped {
		// No place under a cap to keep (at most the breaker's lease,
		// which learns the outcome now): nothing to wait for.
		f.closeNow(outcome, errNoSlot)
		return ferr
	}
	g.background(f, outcome)
	return ferr
}

// leaseRequest says what a call of tool on srv asks of the server's lease
// item, and whether it asks at all: a place under the server's cap (the
// smaller of max_concurrent_requests and its bulkhead, its share of the
// function's concurrency), the tool's cap or the principal's cap, and its
// breaker (which alone takes no place); its buckets; how long its
// upstream may pause it (max_pause), and whether a pause stops the tool
// alone (an OpenAPI server's operations are endpoints of their own). A
// request relayed to the server (tool "") asks for what a tool call does
// but a tool's cap, bucket and breaker. A call with none of those causes
// no store traffic.
func (g *Gateway) leaseRequest(ctx context.Context, srv *registry.Server, tool string, timeout time.Duration) (lease.Request, bool) {
	capacity, queued := srv.MaxConcurrent, srv.MaxQueued
	if queued == 0 {
		queued = registry.DefaultMaxQueued
	}
	if b := g.bulkhead; b > 0 {
		// Its calls in flight and its waiting callers together never
		// take more than its share of the function's concurrency.
		if capacity == 0 || capacity > b {
			capacity = b
		}
		queued = min(queued, b-capacity)
	}
	var br *lease.Breaker
	if tool != "" && srv.Breaker.Covers(tool) {
		br = &lease.Breaker{Name: tool, Threshold: srv.Breaker.FailureThreshold, Recovery: srv.Breaker.RecoveryTimeout}
	}
	holder := leaseHolder(principalFrom(ctx))
	req := lease.Request{
		Key:          srv.ID,
		Cap:          capacity,
		Tool:         tool,
		ToolCap:      srv.ToolCap(tool),
		PrincipalCap: srv.MaxPerPrincipal,
		MaxQueued:    queued,
		Hold:         min(timeout, g.maxHold),
		CallBy:       g.callBy(ctx),
		Breaker:      br,
		Holder:       holder,
		MaxPause:     min(srv.MaxPause, lease.MaxPause),
		PauseTool:    srv.Transport == registry.TransportOpenAPI,
	}
	if tool == "" {
		req.ToolCap = 0
	}
	if srv.RPMLimit > 0 {
		req.Rates = append(req.Rates, lease.Rate{Name: "server", PerMinute: srv.RPMLimit})
	}
	if srv.RPMPerPrincipal > 0 {
		req.Rates = append(req.Rates, lease.Rate{Name: "principal:" + holder, PerMinute: srv.RPMPerPrincipal})
	}
	if n := srv.Tools[tool].RPMLimit; n > 0 && tool != "" {
		req.Rates = append(req.Rates, lease.Rate{Name: "tool:" + tool, PerMinute: n})
	}
	if srv.Adaptive && capacity > 0 {
		// The server's ceiling, or its bulkhead's when lower.
		req.Adaptive = &lease.Adaptive{Min: min(srv.AdaptiveMin, capacity)}
	}
	if srv.OnLimit == registry.PolicyQueue {
		req.Wait = srv.QueueTimeout
	}
	return req, req.TakesPlace() || br != nil || len(req.Rates) > 0
}

// principalRequest is what a call asks of its principal's own lease item
// (its key's max_parallel_requests and rpm_limit), and whether it asks:
// never waiting. These are the key's own, team or not: the item is keyed
// by the principal's ID and its leases carry its own label.
func (g *Gateway) principalRequest(ctx context.Context, timeout time.Duration) (lease.Request, bool) {
	p := principalFrom(ctx)
	if p == nil || p.MaxParallel <= 0 && p.RPMLimit <= 0 {
		return lease.Request{}, false
	}
	req := lease.Request{Key: p.ID, Cap: p.MaxParallel, Hold: min(timeout, g.maxHold), CallBy: g.callBy(ctx), Holder: principalLabel(p)}
	if p.RPMLimit > 0 && ctx.Value(taskRunKey{}) == nil { // a task's was charged when it was made
		req.Rates = []lease.Rate{{Name: "key", PerMinute: p.RPMLimit}}
	}
	return req, true
}

// labelHex is how many hex characters of a hash a lease label keeps: 64
// bits, so that two principals share a label (and with it caps, buckets,
// gates and queue places) only by a collision that even billions of
// principals make unlikely. Every byte is paid for in every write of the
// item, for every lease and ticket: no more.
const labelHex = 16

// leaseHolder is the label a lease carries for its caller on a server's
// item: what fair shares, per-principal caps and buckets, gates and queue
// places count, and what operators see in mcpgate status. A principal of a
// team is its team's: "t:" and the first 16 hex characters of the SHA-256
// of the team's name, so every key and token of the team counts as one
// principal. Any other is its own (principalLabel).
func leaseHolder(p *auth.Principal) string {
	if p == nil {
		return "-"
	}
	if p.Team != "" {
		sum := sha256.Sum256([]byte(p.Team))
		return "t:" + hex.EncodeToString(sum[:])[:labelHex]
	}
	return principalLabel(p)
}

// principalLabel is a principal's own label: the first letter of its kind
// and the first 16 hex characters of its full hash (StateKey), which start
// with those of its logged ID: "k:1a2b3c4d5e6f7a8b" for the key logged as
// "key:1a2b3c4d5e6f" ("o:" for oauth, "i:" for iam).
func principalLabel(p *auth.Principal) string {
	kind, id, ok := strings.Cut(p.StateKey, ":")
	if !ok || kind == "" || len(id) < labelHex {
		// A principal made without its full hash: a hash of what it has.
		sum := sha256.Sum256([]byte(p.ID + "\x00" + p.StateKey))
		return "x:" + hex.EncodeToString(sum[:])[:labelHex]
	}
	return kind[:1] + ":" + id[:labelHex]
}

// callOutcome says what a call that returned err tells its breaker and an
// adaptive limit: a 429, a 503 with Retry-After or a rate-limit error is
// back-pressure (Overloaded), which never counts towards the breaker. A call
// cut off by a lost lease, by the request's own deadline before the tool's
// timeout (short), or that failed because of its own request (the caller
// went away, the upstream refused the arguments, the answer was too large),
// tells nothing about the upstream's health: one caller must not be able to
// open the breaker for every other.
func callOutcome(err error, lost, short bool) lease.Outcome {
	var ue *upstream.Error
	switch {
	case err == nil:
		return lease.Success
	case lost || errors.As(err, &ue) && (ue.AboutRequest() || ue.Kind == upstream.KindCredential || short && ue.Kind == upstream.KindTimeout):
		// A call without its credential never reached the upstream.
		return lease.Abandoned
	case errors.As(err, &ue) && ue.Overloaded():
		// Back-pressure: the upstream is alive and asks for fewer calls.
		return lease.Overloaded
	case errors.As(err, &ue) && ue.Infrastructure():
		return lease.Failure
	}
	return lease.Success
}

// finish gives the slot back even if the client has gone away, reporting
// the call's outcome to the breaker and any transition in rec. A lease
// already gone (expired and purged) is logged: its call outlived it.
func (g *Gateway) finish(ctx context.Context, ls *lease.Lease, outcome lease.Outcome, rec *record) (released bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	tr, err := ls.Finish(rctx, outcome)
	if err != nil {
		g.log.Warn("release failed; the lease will expire on its own",
			"request_id", rec.id, "server_id", ls.Key(), "lease", ls.ID(),
			"expiry", ls.Expiry, "error", err.Error())
	}
	if tr != lease.NoTransition {
		rec.breaker = string(tr)
		g.log.Warn("circuit breaker "+strings.ReplaceAll(string(tr), "_", " "), "request_id", rec.id, "server_id", ls.Key(), "tool", rec.tool)
		from, to := "closed", "open"
		switch tr {
		case lease.Closed:
			from, to = "half_open", "closed"
		case lease.Reopened:
			from = "half_open"
		case lease.OpenedForPrincipal:
			to = "open_for_principal"
		}
		g.obs.BreakerChanged(ctx, BreakerChange{CallInfo: CallInfo{RequestID: rec.id, ServerID: ls.Key(), Tool: rec.tool, Principal: rec.principal}, From: from, To: to})
	}
	return err == nil
}

func acquireFault(srv *registry.Server, tool string, err error) *fault.Error {
	var full *lease.FullError
	var wt *lease.WaitTimeoutError
	var open *lease.CircuitOpenError
	var rl *lease.RateLimitedError
	switch {
	case errors.As(err, &rl):
		what := fmt.Sprintf("server %q", srv.ID)
		switch {
		case strings.HasPrefix(rl.Name, "principal:"):
			what = fmt.Sprintf("this caller's calls to server %q", srv.ID)
		case strings.HasPrefix(rl.Name, "tool:"):
			what = fmt.Sprintf("tool %q of server %q", clip.String(tool, clip.Name), srv.ID)
		}
		return fault.New(fault.RateLimited, "%s may take %d calls a minute; a call may pass again in %v", what, rl.PerMinute, rl.RetryAfter.Round(time.Millisecond)).
			WithRetryAfter(rl.RetryAfter)
	case errors.As(err, &open):
		if open.Principal {
			return fault.New(fault.CircuitOpen, "the circuit breaker for tool %q of server %q is open for this caller: its own recent calls failed", clip.String(tool, clip.Name), srv.ID).
				WithRetryAfter(open.RetryAfter)
		}
		return fault.New(fault.CircuitOpen, "the circuit breaker for tool %q of server %q is open", clip.String(tool, clip.Name), srv.ID).
			WithRetryAfter(open.RetryAfter)
	case errors.As(err, &full):
		what := fmt.Sprintf("server %q", srv.ID)
		switch full.What {
		case "tool":
			what = fmt.Sprintf("tool %q of server %q", clip.String(tool, clip.Name), srv.ID)
		case "principal":
			what = fmt.Sprintf("this caller's share of server %q", srv.ID)
		}
		var f *fault.Error
		switch full.Reason {
		case lease.QueueFull:
			f = fault.New(fault.AtCapacity, "server %q has %d callers waiting, as many as it queues (%d of %d calls in flight)", srv.ID, full.Waiting, full.InUse, full.Cap)
		case lease.Paused:
			f = pausedFault(srv, tool, full.RetryAfter)
		case lease.QueuedAhead:
			f = fault.New(fault.AtCapacity, "%s has %d callers queued ahead (%d of %d calls in flight)", what, full.Waiting, full.InUse, full.Cap)
		default:
			f = fault.New(fault.AtCapacity, "%s is at capacity (%d of %d calls in flight)", what, full.InUse, full.Cap)
		}
		return f.WithReason(full.Reason).WithRetryAfter(full.RetryAfter)
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

// principalFault is the refusal of a call past its key's
// max_parallel_requests, or the store failing to say.
func principalFault(err error) *fault.Error {
	var full *lease.FullError
	var rl *lease.RateLimitedError
	if errors.As(err, &rl) {
		return fault.New(fault.RateLimited, "this key may make %d calls a minute (rpm_limit); a call may pass again in %v", rl.PerMinute, rl.RetryAfter.Round(time.Millisecond)).
			WithRetryAfter(rl.RetryAfter)
	}
	if errors.As(err, &full) {
		return fault.New(fault.AtCapacity, "this key has %d of its %d calls in flight (max_parallel_requests)", full.InUse, full.Cap).
			WithReason("key_parallel").WithRetryAfter(full.RetryAfter)
	}
	return fault.Wrap(err, fault.StoreUnavailable, "cannot check this key's calls in flight right now").WithRetryAfter(storeRetryAfter)
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
	if errors.Is(err, upstream.ErrReservedSecret) {
		return fault.Wrap(err, fault.Misconfigured, "server %q is misconfigured: its credential is a secret the gateway keeps for itself; ask an admin to give it its own", srv.ID)
	}
	if !errors.As(err, &ue) {
		return fault.Wrap(err, fault.UpstreamError, "server %q failed", srv.ID)
	}
	switch ue.Kind {
	case upstream.KindTimeout:
		return fault.Wrap(err, fault.UpstreamTimeout, "server %q did not answer in time", srv.ID)
	case upstream.KindCanceled:
		return fault.Wrap(err, fault.UpstreamTimeout, "the request ended before server %q answered", srv.ID)
	case upstream.KindTooLarge:
		var le *upstream.LimitError
		if errors.As(err, &le) {
			return fault.Wrap(err, fault.UpstreamError, "server %q answered with more than the gateway takes: %s", srv.ID, le.Error())
		}
		return fault.Wrap(err, fault.UpstreamError, "server %q answered with more than the gateway takes", srv.ID)
	case upstream.KindRejected:
		switch ue.Status {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong,
			http.StatusUnprocessableEntity, http.StatusRequestHeaderFieldsTooLarge:
			return fault.Wrap(err, fault.BadRequest, "server %q refused the request as invalid (HTTP %d)", srv.ID, ue.Status)
		}
		return fault.Wrap(err, fault.UpstreamError, "server %q refused the request (HTTP %d)", srv.ID, ue.Status)
	case upstream.KindCredential:
		return fault.Wrap(err, fault.UpstreamError, "the gateway could not get its credential for server %q; ask an admin to check the server's auth (the log says why)", srv.ID)
	case upstream.KindRPC:
		// The upstream's own answer to the caller's request: relay it.
		msg := clip.String(ue.RPC.Message, maxUpstreamMessage)
		if ue.RPC.Code == upstream.CodeRateLimited {
			return fault.Wrap(err, fault.RateLimited, "server %q is rate limiting: %s", srv.ID, msg).WithRetryAfter(time.Second)
		}
		if ue.RPC.Code == jsonrpc.CodeInvalidParams || specCode(ue.RPC.Code) {
			return fault.Wrap(err, fault.BadRequest, "server %q rejected the call: %s", srv.ID, msg)
		}
		return fault.Wrap(err, fault.UpstreamError, "server %q answered with error %d: %s", srv.ID, ue.RPC.Code, msg)
	default:
		if ue.Overloaded() && ue.RetryAfter > 0 {
			d, what := pauseFor(srv, ue.RetryAfter), "to it"
			if srv.Transport == registry.TransportOpenAPI {
				what = "of this operation"
			}
			return fault.Wrap(err, fault.UpstreamError, "server %q is overloaded (HTTP %d) and asked for a pause: this caller's calls %s wait %v", srv.ID, ue.Status, what, d.Round(time.Millisecond)).
				WithRetryAfter(d)
		}
		return fault.Wrap(err, fault.UpstreamError, "server %q is unavailable", srv.ID).WithRetryAfter(ue.RetryAfter)
	}
}

// writeFault writes e in the route's error shape (see errshape.go) and
// notes it in the request's log record.
func writeFault(w http.ResponseWriter, r *http.Request, e *fault.Error) {
	rec := recordFrom(r.Context())
	// Unlike record.fail, an outcome the handler already chose stands.
	rec.code = e.Code
	rec.cause, rec.message = e.Cause, e.Message
	if rec.outcome == "" {
		rec.outcome = "error"
	}
	if isMCPPath(r.URL.Path) {
		if !rec.bodyRead && r.Body != nil {
			// Refused before its body was read (its credentials, its
			// origin, its route): the answer still echoes its id, read
			// from at most the body's first bytes, so a caller refused
			// costs no more than that.
			rec.bodyRead = true
			rec.rpcID = peekID(io.LimitReader(r.Body, maxUnauthenticatedPeek))
		}
		writeRPCFault(w, rec.rpcID, rpcCode(e.Code), e)
		return
	}
	fault.WriteHTTP(w, e)
}

// writeJSON writes v as JSON, without HTML escaping (which would make
// every <, > and & six bytes: the answer is JSON, never HTML).
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
