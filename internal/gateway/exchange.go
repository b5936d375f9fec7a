package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// A call's exchange with its upstream is kept apart from the answer to the
// agent. When the call is cut off (its timeout, the request's deadline, the
// caller gone, shutdown), the agent is answered at once, the upstream is told
// to stop, and the exchange goes on in the background, keeping (and
// renewing) the call's lease, until the upstream is known to have stopped
// working on the call or the server's cancel_grace runs out. Only then is the
// slot given back.

// Causes with which an exchange's context ends.
var (
	// errGraceOver: the server's cancel_grace (or the request's deadline)
	// ran out before the upstream was known to stop.
	errGraceOver = errors.New("cancel grace over")
	// errShutdown: the gateway is shutting down.
	errShutdown = errors.New("gateway shutting down")
	// errNoSlot: a cut-off call that holds no slot is not waited for.
	errNoSlot = errors.New("the call holds no slot")
)

// flight is one call's exchange with its upstream, from the gateway's side.
type flight struct {
	g   *Gateway
	srv *registry.Server
	// tool is the tool called, as the upstream knows it.
	tool string
	rec  record // the request's id and tool, copied: the request's own record is done with when it answers
	// leases are the call's places: the server's first, if it has one,
	// then its principal's own (a key's max_parallel_requests).
	leases []*lease.Lease
	// capped: a lease holds a place under a cap (not only the breaker's).
	capped bool
	up     *upstream.Exchange
	// ctx is the exchange's: it keeps the request's values but neither its
	// cancellation nor its deadline, and ends at the end of the grace, when
	// the lease is lost, or when abort is called.
	ctx       context.Context
	abort     context.CancelCauseFunc
	release   []func() // contexts and the lease guard, undone when the flight closes
	hold      time.Duration
	cut       atomic.Bool // the agent was answered first: renewals hold long
	answered  time.Time
	closeOnce sync.Once
	// span is the exchange's CLIENT span; nil when tracing is off.
	span ExchangeSpan
}

// startFlight sends the call to the upstream in an exchange that may outlive
// the request: until callEnd plus the server's cancel_grace, but never past
// the request's deadline less the answer reserve.
func (g *Gateway) startFlight(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams, l *upstream.Listener, leases []*lease.Lease, hold time.Duration, callEnd time.Time) *flight {
	rec := recordFrom(ctx)
	end := callEnd.Add(srv.CancelGrace)
	if by := g.callBy(ctx); !by.IsZero() && by.Before(end) {
		end = by
	}
	base, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	xctx, cancel := context.WithDeadlineCause(base, end, errGraceOver)
	f := &flight{g: g, srv: srv, tool: params.Name, rec: record{id: rec.id, tool: rec.tool, principal: rec.principal}, leases: leases, abort: abort, hold: hold,
		release: []func(){cancel, func() { abort(nil) }}}
	for _, ls := range leases {
		f.capped = f.capped || ls.TakesPlace()
		// Each lease is kept for the exchange; losing one stops it.
		var stop func()
		xctx, stop = ls.KeepAlive(xctx, end, f.renewHold, func(err error) {
			g.log.Warn("lease lost; stopping the call", "request_id", rec.id, "server_id", srv.ID, "lease", ls.ID(), "error", err.Error())
		})
		f.release = append([]func(){stop}, f.release...)
	}
	if t := g.deps.Tracer; t != nil {
		if params.Meta == nil {
			params.Meta = mcp.Meta{}
		}
		xctx, f.span = t.Exchange(xctx, CallInfo{RequestID: rec.id, ServerID: srv.ID, Tool: params.Name, Principal: rec.principal}, srv, params.Meta)
	}
	f.ctx = xctx
	g.flights.add(f)
	rec.sent = true
	f.up = g.deps.Upstream.Start(xctx, srv, callerFrom(ctx).upstream(srv), params, l)
	return f
}

// graceFrom ends the exchange the server's cancel_grace after t, if its
// own end (its call's end plus the grace) is later.
func (f *flight) graceFrom(t time.Time) {
	timer := time.AfterFunc(time.Until(t.Add(f.srv.CancelGrace)), func() { f.abort(errGraceOver) })
	f.release = append(f.release, func() { timer.Stop() })
}

// renewHold is the hold each renewal of the lease asks for: the call's own
// while the agent waits; once the call was cut off, the longest a lease is
// taken for, as the upstream is then known to be still working on it.
func (f *flight) renewHold() time.Duration {
	if f.cut.Load() {
		return f.g.maxHold
	}
	return f.hold
}

// close waits until the upstream is known to have stopped working on the
// call, or the exchange's context ends (its grace ran out, its lease was
// lost, the gateway shuts down); then it closes the exchange and gives the
// slot back, telling the breaker outcome, and runs then (if any) with how
// the upstream was known to stop, "" if it was not, which it returns. The
// exchange counts as open (Drain waits for it) until then has run, so
// that what then logs and counts is written before a draining process
// goes.
func (f *flight) close(outcome lease.Outcome, then func(upstream.Stop)) upstream.Stop {
	var how upstream.Stop
	f.closeOnce.Do(func() {
		select {
		case <-f.up.Stopped():
		case <-f.ctx.Done():
		}
		how = f.up.StoppedBy()
		f.up.Close()
		for _, fn := range f.release {
			fn()
		}
		for i, ls := range f.leases {
			o := outcome
			if i > 0 {
				o = lease.Abandoned // a principal's own lease has no breaker
			}
			f.g.finish(f.ctx, ls, o, &f.rec)
		}
		if then != nil {
			then(how)
		}
		f.g.flights.remove(f)
	})
	return how
}

// closeNow is close without waiting: it ends the exchange at once, for
// cause.
func (f *flight) closeNow(outcome lease.Outcome, cause error) upstream.Stop {
	f.abort(cause)
	return f.close(outcome, nil)
}

// background lets f go on after the agent was answered: the upstream is
// told to stop, and the flight closes once it has stopped, or at the end of
// its grace.
func (g *Gateway) background(f *flight, outcome lease.Outcome) {
	f.cut.Store(true)
	f.answered = time.Now()
	f.up.Stop()
	go f.close(outcome, func(how upstream.Stop) { g.closed(f, how, time.Since(f.answered)) })
}

// closed logs and counts a flight closed after its agent was answered.
func (g *Gateway) closed(f *flight, how upstream.Stop, held time.Duration) {
	attrs := []any{"request_id", f.rec.id, "server_id", f.srv.ID, "tool", f.rec.tool, "held_ms", held.Milliseconds()}
	if len(f.leases) > 0 {
		attrs = append(attrs, "lease", f.leases[0].ID())
	}
	if how == "" {
		cause := context.Cause(f.ctx)
		if cause == nil {
			cause = errShutdown
		}
		g.log.Warn("upstream not known to have stopped a cut-off call; its slot is freed and the cap may be exceeded",
			append(attrs, "cause", cause.Error())...)
	} else {
		g.log.Info("upstream stopped a cut-off call; its slot is freed", append(attrs, "stopped_by", string(how))...)
	}
	leaseID := ""
	if len(f.leases) > 0 {
		leaseID = f.leases[0].ID()
	}
	if f.span != nil {
		f.span.Closed(how, held)
	}
	g.obs.ExchangeClosed(f.ctx, ExchangeEnd{CallInfo: CallInfo{RequestID: f.rec.id, ServerID: f.srv.ID, Tool: f.rec.tool, Principal: f.rec.principal},
		Held: held, StoppedBy: how, LeaseID: leaseID})
}

// flights are the calls' exchanges still open: waiting for their answers,
// or outliving them.
type flights struct {
	mu   sync.Mutex
	open map[*flight]struct{}
	idle chan struct{} // closed while none is open
}

func (fs *flights) add(f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.open == nil {
		fs.open = map[*flight]struct{}{}
	}
	if len(fs.open) == 0 {
		fs.idle = make(chan struct{})
	}
	fs.open[f] = struct{}{}
}

func (fs *flights) remove(f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.open, f)
	if len(fs.open) == 0 && fs.idle != nil {
		close(fs.idle)
		fs.idle = nil
	}
}

// snapshot returns the open flights and a channel closed once none is.
func (fs *flights) snapshot() ([]*flight, <-chan struct{}) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.open) == 0 {
		done := make(chan struct{})
		close(done)
		return nil, done
	}
	out := make([]*flight, 0, len(fs.open))
	for f := range fs.open {
		out = append(out, f)
	}
	return out, fs.idle
}

// drainRelease bounds the wait, after Drain closed the exchanges left, for
// their slots to be given back.
const drainRelease = releaseTimeout + time.Second

// Open is how many calls' exchanges with their upstreams are open: waiting
// for an answer, or outliving the answer to their agents.
func (g *Gateway) Open() int {
	open, _ := g.flights.snapshot()
	return len(open)
}

// Drain waits until every call's exchange is closed: answered, or, for one
// that outlived its answer, its upstream stopped or its grace ran out, and
// its slot given back and its end logged and counted. When
// ctx ends first, it closes those left at once, each freeing its slot,
// logged and counted as possibly exceeding the cap, waits (briefly) for
// their slots to be given back, and returns how many it closed. Calls still
// waiting for their answers are not cut off: Shutdown does that.
func (g *Gateway) Drain(ctx context.Context) int {
	open, idle := g.flights.snapshot()
	if len(open) == 0 {
		return 0
	}
	select {
	case <-idle:
		return 0
	case <-ctx.Done():
	}
	open, idle = g.flights.snapshot()
	for _, f := range open {
		f.abort(errShutdown)
	}
	t := time.NewTimer(drainRelease)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
	return len(open)
}

// Shutdown cuts off every call still waiting for its upstream (its agent is
// answered UPSTREAM_TIMEOUT at once) and drains the exchanges, as Drain does:
// what a gateway process does before it exits, so its slots are given back.
// Calls arriving after it are cut off at once.
func (g *Gateway) Shutdown(ctx context.Context) int {
	g.stopOnce.Do(func() { close(g.stopping) })
	return g.Drain(ctx)
}
