package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Acquire takes a place for req in one conditional write, unless callers
// waiting on the key come first. When it finds no place it fails with
// *FullError or, if req.Wait is positive, puts a ticket in the queue and
// waits until the item shows it is its turn and it takes the place, until
// req.Wait passes (*WaitTimeoutError), or until ctx ends. A breaker shut
// for the caller refuses it (*CircuitOpenError); a bucket of its with no
// token refuses a caller that has not queued (*RateLimitedError).
func (l *Limiter) Acquire(ctx context.Context, req Request) (*Lease, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	if !req.holds() {
		return l.charge(ctx, req)
	}
	a := &attempt{l: l, req: req, start: time.Now(), b: l.board(req.Key), look: overdueLook, lookRank: -1}
	a.me = asker{id: l.newLeaseID(), label: req.Holder, tool: req.Tool, toolCap: req.ToolCap, rates: req.Rates}
	if req.Breaker != nil {
		a.me.breaker = req.Breaker.Name
	}
	for _, r := range req.Rates {
		if r.Name == "tool:"+req.Tool {
			a.me.toolRPM = r.PerMinute
		}
	}
	ls, err := a.run(ctx)
	if err != nil {
		a.leave(ctx)
		return nil, err
	}
	ls.Waited, ls.since, ls.QueuedBehind = time.Since(a.start), time.Now(), a.behind
	l.stats.acquired.Add(1)
	if ls.Probe() {
		l.stats.probes.Add(1)
	}
	return ls, nil
}

// attempt is the state of one Acquire.
type attempt struct {
	l     *Limiter
	req   Request
	b     *board
	me    asker
	start time.Time
	// n is its ticket's number while it waits (0: it has none); joined is
	// set once a join was sent whose outcome was unknown, or that landed.
	n      int64
	joined bool
	// task: the attempt is a task's (Enqueue's join, a worker's Claim):
	// its ticket is in the tasks map, and it never waits.
	task   bool
	taskID string
	// behind is how many callers were ahead of it when it last joined.
	behind int
	// unsure are the expiries its takes whose outcome was unknown would
	// have set, each (a later take, judged while an earlier one was still
	// in flight, may be refused while the earlier lands late).
	unsure []int64
	// asked is when the last request of this attempt was sent; look is
	// the next wait of a waiter whose place is late.
	asked time.Time
	look  time.Duration
	// lookBy is when it reads the item at the latest, whatever news from
	// its process came meanwhile (zero: after its next wait's look).
	lookBy time.Time
	// own is the last item this attempt's own requests were answered
	// with: what a refusal is judged from.
	own *view
	// turnSince is, for each ticket whose turn had come before this
	// caller's at its looks, when it first saw so: past its claim window,
	// still there with its turn come, its caller is presumed gone.
	turnSince map[string]time.Time
	// lookRank is its rank at its last look (-1: none yet): a place
	// expected anew starts its back-off again only once it moved up.
	lookRank int
	// failures counts the store errors in a row while it waits; takeErrs
	// the takes in a row that met one.
	failures int
	takeErrs int
}

func (a *attempt) now() int64 { return a.l.clock().UnixMilli() }

func (a *attempt) rules(v *view) rules {
	return rulesOf(a.req.capIn(v), a.req.PrincipalCap, a.req.Rates)
}

// gateAttrs are the gates an admission of r is conditioned on.
func (r *Request) gateAttrs() []string {
	out := []string{PauseAttr}
	if r.Tool != "" {
		out = append(out, PauseAttrPrefix+r.Tool)
	}
	if r.Breaker != nil {
		out = append(out, BreakerAttr(r.Breaker.Name))
	}
	return out
}

func (a *attempt) run(ctx context.Context) (*Lease, error) {
	waitUntil := a.waitEnd()
	if dl, ok := ctx.Deadline(); ok && dl.Before(waitUntil) {
		waitUntil = dl
	}
	// A recent view showing a queue or a gate saves a first write that
	// would fail.
	v := a.b.recent(recentView)
	if v != nil && len(v.queue) == 0 && len(v.gates) == 0 && v.hold == 0 {
		v = nil
	}
	eager := 0
	for {
		now := a.now()
		if v != nil {
			if exp, ok := v.leases[a.me.id]; ok {
				return a.lease(ctx, exp, v)
			}
			if !v.hasMaps {
				if err := a.l.create(ctx, a.req.Key); err != nil {
					return nil, err
				}
				v = nil
				continue
			}
			if t := v.ticketFor(a.me.id); t != nil {
				a.n, a.joined = t.n, true
			} else if a.n != 0 {
				// Its ticket is gone: presumed gone itself after its turn
				// came and went, or purged past its deadline.
				a.n = 0
			}
			err := refusal(v.gatesOf(a.req.Tool, a.me.breaker), a.me.label, now, v.hold)
			var open *CircuitOpenError
			refuse := errors.As(err, &open) || err != nil && a.req.Wait <= 0
			rl := rateLimited(v, a.req.Rates, now)
			if (refuse || a.n == 0 && rl != nil) && v != a.own {
				// A refusal is judged from an answer of its own: another
				// request's, from this process, may be out of date.
				if v, err = a.l.read(ctx, a.req.Key); err != nil {
					return nil, err
				}
				a.own = v
				continue
			}
			if refuse {
				a.l.stats.refused(err)
				return nil, err
			}
			if a.n == 0 && rl != nil {
				a.l.stats.rateLimited.Add(1)
				return nil, rl
			}
			if a.mustPurge(v, now) {
				// Stale entries its own write would count and could not
				// all remove: a write of their own first.
				nv, progress, err := a.l.purgeAll(ctx, a.req.Key, v)
				if err != nil {
					return nil, err
				}
				a.own = nv
				if !progress {
					if err := a.pause(ctx, jitter(writeMinBackoff), waitUntil); err != nil {
						return nil, err
					}
				}
				v = nv
				continue
			}
		}
		served, h, bypass := a.decide(v, now)
		if !served && slices.ContainsFunc(h.ahead, func(t *ticket) bool { return t.task }) {
			// Tasks whose turn comes before this caller's: their workers
			// must be started (or started again) for its own to come.
			a.l.startDue(ctx, a.req.Key, v, a.rules(v))
		}
		var err error
		switch {
		case served && eager < maxEager:
			eager++
			var ls *Lease
			if ls, v, err = a.take(ctx, v, h, bypass, now); ls != nil {
				return ls, err
			}
			a.own = v
			if err == nil {
				continue
			}
			// A store error: a waiter keeps its ticket, as below.
		case served:
			// The item keeps changing under it: look again shortly.
			v, err = a.wait(ctx, v, jitter(2*writeMinBackoff), waitUntil)
		case a.req.Wait <= 0:
			a.l.stats.shed.Add(1)
			return nil, a.full(v, now, len(h.ahead) > 0, "")
		case a.n == 0 && a.req.MaxQueued <= 0:
			a.l.stats.shed.Add(1)
			return nil, a.full(v, now, false, QueueFull)
		case a.n == 0 && !time.Now().Before(waitUntil):
			// Its wait is over before it joined (its last write was slow):
			// a ticket would be stale at birth.
			a.l.stats.waitTimeouts.Add(1)
			return nil, &WaitTimeoutError{Waited: time.Since(a.start)}
		case a.n == 0 && v != nil:
			v, err = a.join(ctx, v)
			a.own = v
		case v == nil:
			v, err = a.l.read(ctx, a.req.Key)
			a.own = v
		default:
			v, err = a.wait(ctx, v, a.nextLook(v, now, h.ahead), waitUntil)
		}
		eager = 0
		if err != nil && a.joined && storeError(err) && time.Now().Before(waitUntil) {
			// A store error while it waits: look again shortly, rather
			// than give up its place in the queue.
			for err != nil {
				a.failures++
				if err := a.pause(ctx, jitter(min(writeMaxBackoff<<min(a.failures, 3), a.l.maxLook)), waitUntil); err != nil {
					return nil, err
				}
				v, err = a.l.read(ctx, a.req.Key)
				a.own = v
			}
			a.failures = 0
			continue
		}
		if err != nil {
			return nil, err
		}
		a.failures = 0
	}
}

// storeError reports whether err is the store failing (rather than the
// protocol refusing, or the caller's own context ending).
func storeError(err error) bool {
	var full *FullError
	var wt *WaitTimeoutError
	var open *CircuitOpenError
	var rl *RateLimitedError
	return !errors.As(err, &full) && !errors.As(err, &wt) && !errors.As(err, &open) && !errors.As(err, &rl) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// pause waits d, or until the wait's end or ctx's.
func (a *attempt) pause(ctx context.Context, d time.Duration, until time.Time) error {
	if d = min(d, time.Until(until)); d <= 0 {
		a.l.stats.waitTimeouts.Add(1)
		return &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("lease: waiting for %s: %w", a.req.Key, ctx.Err())
	case <-t.C:
		return nil
	}
}

// decide says whether it is this caller's turn in v at now (with no view,
// an uncontended caller assumes it is) and what the walk handed out; when
// callers whose turn came before its own have had it at its looks for
// their claim window (ClaimWindow past the look period their tickets
// announce) without taking their places, they are presumed gone (bypass)
// and the places go on as if they were not there — one after another, so
// D dead waiters before it cost it their D claim windows at most.
func (a *attempt) decide(v *view, now int64) (bool, handout, []*ticket) {
	if v == nil {
		return a.n == 0 && !a.joined, handout{}, nil
	}
	skip := map[string]bool{}
	since := map[string]time.Time{}
	var bypass []*ticket
	for {
		h := v.walk(now, &a.me, a.rules(v), skip)
		more := false
		for _, t := range h.ahead {
			if t.task {
				// A task's ticket is never presumed gone: its task lives
				// until its deadline, and its worker is started (and
				// started again, StartTimeout on) by whoever sees its
				// turn come (see Options.OnTaskStart). But while its last
				// start has gone unclaimed for StartTimeout (no worker can
				// come: invocations throttled, the worker failing before
				// it claims), the callers behind it pass it: it keeps its
				// ticket and number, and the take is conditioned on that
				// start (a worker's claim, or a new start, fails it).
				if t.started > 0 && now-t.started >= StartTimeout.Milliseconds() {
					skip[t.id] = true
					bypass = append(bypass, t)
					more = true
				}
				continue
			}
			at, ok := a.turnSince[t.id]
			if !ok {
				at = time.Now()
			}
			since[t.id] = at
			if time.Since(at) >= claimWindow(t) {
				skip[t.id] = true
				bypass = append(bypass, t)
				more = true
			}
		}
		if !more {
			a.turnSince = since
			if !h.served {
				bypass = nil
			}
			return h.served, h, bypass
		}
	}
}

// mustPurge reports whether v shows stale entries that this caller's next
// write would count and could not remove itself (in a set it adds to), or
// more than one write removes.
func (a *attempt) mustPurge(v *view, now int64) bool {
	own := a.ownSets()
	for _, s := range own {
		if members := v.sets[s]; len(members) > v.liveIn(now, members) {
			return true
		}
	}
	for _, t := range v.staleTickets(now) {
		if t.label == a.me.label {
			return true
		}
	}
	return newUpdate().purge(v, now, "", "").more
}

// ownSets are the sets a lease of this attempt is a member of: its
// principal's, and its tool's when the tool is capped.
func (a *attempt) ownSets() []string {
	out := []string{PrincipalAttr(a.me.label)}
	if a.req.ToolCap > 0 {
		out = append(out, ToolAttr(a.req.Tool))
	}
	return out
}

// rateAttrs are the attributes of the buckets the caller takes tokens from.
func (a *attempt) rateAttrs() []string {
	var out []string
	for _, r := range a.req.Rates {
		out = append(out, RateAttr(r.Name))
	}
	return out
}

// purgeAll removes what v shows stale, in one write of its own. It reports
// whether the write landed.
func (l *Limiter) purgeAll(ctx context.Context, key string, v *view) (*view, bool, error) {
	u := newUpdate()
	now := l.clock().UnixMilli()
	u.purge(v, now, "", "")
	if len(u.conds) == 0 {
		return v, false, nil
	}
	u.ttl(now)
	l.stats.purged.Add(1)
	nv, err := l.write(ctx, key, u, nil)
	if errors.Is(err, errCondition) {
		return nv, false, nil
	}
	return nv, err == nil, err
}

// take makes the conditional write that gives this caller a place: its
// lease in leases and its sets, its tokens, its ticket (if any) out, and
// the tickets of bypass — callers presumed gone — out, purging what v
// shows stale. It leaves room in every cap and bucket for the callers
// whose turn comes before it (h.ahead), which may not have taken their
// places yet: two callers that each see themselves next after those never
// take the same one. It returns the lease, or the item as it is now when
// the write found it was not this caller's turn after all.
func (a *attempt) take(ctx context.Context, v *view, h handout, bypass []*ticket, now int64) (*Lease, *view, error) {
	hold := a.req.hold(time.Now())
	if hold <= 0 {
		return nil, nil, &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	// The write is made for now, the instant its turn was judged at (its
	// purge, gates, buckets and expiry alike): judged at one instant and
	// made for a later one, a caller unblocked by time alone in between (a
	// gate's time passing, a lease lapsing, a token coming) could be
	// passed with no condition to catch it. The expiry may be a little
	// early by the time the write lands: only safer.
	exp := now + (hold + a.l.margin).Milliseconds()
	id := a.me.id
	u := newUpdate()
	p := u.purge(v, now, id, a.me.label, append(append(a.ownSets(), WaitingAttr(a.me.label)), append(a.rateAttrs(), a.req.gateAttrs()...)...)...)
	rs := a.l.rulesFor(a.req, v)
	for _, r := range a.req.Rates {
		tat := int64(0)
		if v != nil {
			tat = v.rates[RateAttr(r.Name)]
		} else if lv, _, _ := a.b.latest(); lv != nil {
			tat = lv.rates[RateAttr(r.Name)] // only chooses the form of the charge, which its condition checks
		}
		u.charge(r, tat, now, countIf(h.ahead, func(t *ticket) bool {
			return slices.ContainsFunc(rs.buckets(t), func(b Rate) bool { return b.Name == r.Name })
		}))
	}
	lp := u.path(LeasesAttr, id)
	u.set(lp, u.num(exp))
	u.cond("attribute_not_exists(" + lp + ")")
	a.capConds(u, v, p.leases, len(h.ahead))
	if tc := a.req.ToolCap; tc > 0 {
		tp := u.path(ToolAttr(a.req.Tool))
		u.add(tp, id)
		u.cond("(attribute_not_exists(" + tp + ") OR size(" + tp + ") < " + u.num(int64(tc-countIf(h.ahead, func(t *ticket) bool { return t.tool == a.req.Tool && t.toolCap > 0 }))) + ")")
	}
	// Its principal's set: where it stands in the queue depends on how
	// many places its principal holds, so with other principals waiting,
	// that must be as it saw; so must it be for the principal's cap. With
	// no view, it knows of no queue (and checks there is none), and its
	// principal must have room.
	pp := u.path(PrincipalAttr(a.me.label))
	u.add(pp, id)
	mixed := v != nil && (a.req.ToolCap > 0 || slices.ContainsFunc(v.queue, func(t *ticket) bool {
		return t.id != id && v.waits(t, now) && (t.label != a.me.label || t.toolCap > 0)
	}))
	if v != nil && (a.req.PrincipalCap > 0 || mixed) {
		if members := v.sets[PrincipalAttr(a.me.label)]; len(members) == 0 {
			u.cond("attribute_not_exists(" + pp + ")")
		} else {
			u.cond("size(" + pp + ") = " + u.num(int64(len(members))))
		}
	} else if v == nil && a.req.PrincipalCap > 0 {
		u.cond("(attribute_not_exists(" + pp + ") OR size(" + pp + ") < " + u.num(int64(a.req.PrincipalCap)) + ")")
	}
	if v != nil && slices.ContainsFunc(v.queue, func(t *ticket) bool {
		return t.id != id && t.label == a.me.label && v.waits(t, now)
	}) && slices.ContainsFunc(v.queue, func(t *ticket) bool {
		return t.label != a.me.label && v.waits(t, now)
	}) {
		// The place it takes ranks its principal's other callers waiting
		// after those of other principals who held as many: whose turn
		// it is changes for the callers behind them, as when a place is
		// freed, and freed tells the takes judged before.
		u.count(u.path(FreedAttr), 1)
	}
	switch {
	case a.n != 0 && a.task:
		// A task's claim keeps its ticket, claimed by the lease of its id:
		// the lease's release removes both; its lapse leaves the ticket
		// waiting again, so that a worker that ends before its call is
		// made does not lose its task.
		u.cond(u.path(TasksAttr, id) + " = " + u.num(a.n))
	case a.n != 0:
		u.removeTicket(id, a.me.label, a.n, a.task)
	default:
		u.cond("attribute_not_exists("+u.path(QueueAttr, id)+")", "attribute_not_exists("+u.path(TicketsAttr, id)+")")
		if v == nil {
			u.cond("size("+u.path(QueueAttr)+") = "+u.num(0), "size("+u.path(TasksAttr)+") = "+u.num(0))
		}
	}
	if v != nil {
		if a.n == 0 {
			// A newcomer, the newest caller: nobody joined since it
			// looked who might come before it (a newer ticket may: its
			// principal may hold fewer places). A waiter's turn is judged
			// at its look, which is after its own join: callers that
			// joined since then come after it, as they would had its
			// take landed at once.
			u.cond(u.eqOrAbsent(u.path(SeqAttr), v.seq))
		}
		if mixed || a.req.PrincipalCap > 0 || h.passed {
			// No place was freed and no ticket left that might change
			// whose turn it is. When every caller waiting is of its own
			// principal and none waits for a capped tool, they are served
			// by ticket number alone, and a place freed only makes more
			// room — unless one before it was passed over (a bucket or a
			// gate held it back), which a release may unblock.
			u.cond(u.eqOrAbsent(u.path(FreedAttr), v.freed))
		}
	}
	for _, t := range bypass {
		if t.task {
			u.cond(u.path(TicketsAttr, t.id, ticketStarted) + " = " + u.num(t.started))
			continue
		}
		u.removeTicket(t.id, t.label, t.n, t.task)
		u.count(u.path(FreedAttr), 1)
	}
	u.admit(a.req.gateAttrs(), a.me.label, id, exp, now, h.probes, v)
	u.ttl(exp)
	// A take is judged from v at now: sent again later, it could land on a
	// turn that has passed (a lease lapsing meanwhile lets a blocked caller
	// go first). It is sent once; after a store error the caller looks
	// again and judges anew, finding its lease if the take landed after
	// all.
	u.judged = true
	a.asked = time.Now()
	wctx := ctx
	if v != nil {
		wctx = context.WithValue(ctx, judgedKey{}, v.seq)
	}
	nv, err := a.l.write(wctx, a.req.Key, u, func() { a.unsure = append(a.unsure, exp) })
	if err == nil {
		a.n = 0
		ls, err := a.lease(ctx, exp, nv)
		return ls, nil, err
	}
	if errors.Is(err, errCondition) {
		a.takeErrs = 0
		return nil, nv, nil // not landed, unless the item shows it did (the caller's loop looks)
	}
	// Look again, until an answer or the budget of errors in a row is
	// spent.
	for {
		if a.takeErrs++; a.takeErrs >= writeAttempts || !storeError(err) || ctx.Err() != nil {
			return nil, nil, err
		}
		if perr := a.pause(ctx, backoff(a.takeErrs), time.Now().Add(writeMaxBackoff)); perr != nil {
			return nil, nil, perr
		}
		var rv *view
		if rv, err = a.l.read(ctx, a.req.Key); err == nil {
			return nil, rv, nil
		}
	}
}

// rulesFor is rulesOf for req as v shows the key.
func (l *Limiter) rulesFor(req Request, v *view) rules {
	return rulesOf(req.capIn(v), req.PrincipalCap, req.Rates)
}

// judgedKey carries in a take's context the seq of the view it was judged
// from (which the fault simulation checks).
type judgedKey struct{}

// lease completes the acquire with the lease the item shows this attempt
// holding, expiring at exp. A place with no time left for the call is
// given back.
func (a *attempt) lease(ctx context.Context, exp int64, v *view) (*Lease, error) {
	localNow := time.Now()
	deadline := localNow.Add(time.UnixMilli(exp).Sub(a.l.clock()) - a.l.margin)
	if !a.req.CallBy.IsZero() && a.req.CallBy.Before(deadline) {
		deadline = a.req.CallBy
	}
	ls := a.l.newLease(a.req, a.me.id)
	ls.task = a.task // its release removes the task's ticket with it
	ls.exps, ls.Expiry, ls.CallDeadline = []int64{exp}, time.UnixMilli(exp), deadline
	ls.InFlight, ls.Limit, ls.round = v.liveLeases(a.now()), a.req.capIn(v), v.round
	if a.req.ToolCap > 0 {
		ls.tool = a.req.Tool
	}
	for _, g := range a.req.gateAttrs() {
		for _, key := range []string{gateAll, a.me.label} {
			if e := v.gates[g].entry(key); e.probe == a.me.id {
				ls.probes = append(ls.probes, gateRef{g, key})
			}
		}
	}
	if !deadline.After(localNow) {
		_, _ = ls.Finish(ctx, Unused)
		return nil, &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	return ls, nil
}

// newLease is a lease of req with id, before its place is known.
func (l *Limiter) newLease(req Request, id string) *Lease {
	ls := &Lease{l: l, key: req.Key, id: id, breaker: req.Breaker, label: req.Holder, rates: req.Rates,
		ceiling: req.Cap, adaptive: req.Adaptive, principalCap: req.PrincipalCap, toolName: req.Tool, maxPause: req.MaxPause,
		pauseGate: pauseAttr(req.Tool, req.PauseTool), noPlace: !req.holds()}
	if ls.maxPause <= 0 {
		ls.maxPause = MaxPause
	}
	return ls
}

// join puts this caller's ticket in the queue: its number from seq, its
// deadline, and the tool, cap and rate it waits for, on condition that the
// queue has room (leaving its reserve to other principals when this one
// already has callers or tasks waiting: claimed tickets, tasks running,
// and lapsed ones wait no more), and that the caller neither waits nor
// holds a place already. It charges nothing. A join refused for room is
// that one failed write: nothing of it is left to take back.
func (a *attempt) join(ctx context.Context, v *view) (*view, error) {
	now := a.now()
	id := a.me.id
	// Others' clocks may be ahead of this one by up to Margin: the ticket
	// lives that much past its caller's own deadline, so that nobody takes
	// it for gone while its caller still waits.
	deadline := now + time.Until(a.waitEnd()).Milliseconds() + a.l.margin.Milliseconds()
	wp := WaitingAttr(a.me.label)
	u := newUpdate()
	p := u.purge(v, now, id, a.me.label, wp)
	kind := kindAttr(a.task)
	sp, qp, tp := u.path(SeqAttr), u.path(kind, id), u.path(TicketsAttr, id)
	next := "if_not_exists(" + sp + ", " + u.num(0) + ") + " + u.num(1)
	u.set(sp, next)
	u.set(qp, next)
	info := map[string]types.AttributeValue{ticketLabel: &types.AttributeValueMemberS{Value: a.me.label}, ticketDeadline: number(deadline)}
	if !a.task {
		// Its look period at the rank it joins at (the newest): it looks
		// at least that often while it waits, and is presumed gone only
		// ClaimWindow past it.
		info[ticketLook] = number(a.lookPeriod(v.before(now, &a.me), max(a.req.capIn(v), 1)).Milliseconds())
	}
	if a.req.Tool != "" {
		info[ticketTool] = &types.AttributeValueMemberS{Value: a.req.Tool}
	}
	if a.req.ToolCap > 0 {
		info[ticketToolCap] = number(int64(a.req.ToolCap))
	}
	if a.me.toolRPM > 0 {
		info[ticketToolRPM] = number(int64(a.me.toolRPM))
	}
	if a.task {
		info[ticketTaskID] = &types.AttributeValueMemberS{Value: a.taskID}
	}
	u.set(tp, u.value(&types.AttributeValueMemberM{Value: info}))
	u.add(u.path(wp), id)
	other := QueueAttr
	if !a.task {
		other = TasksAttr
	}
	u.cond("attribute_not_exists("+qp+")", "attribute_not_exists("+u.path(other, id)+")", "attribute_not_exists("+tp+")", "attribute_not_exists("+u.path(LeasesAttr, id)+")")
	if a.task {
		// A task's ticket is never presumed gone, so a join landing late
		// must not bring it back once claimed and released, withdrawn or
		// lapsed: each of those moves freed.
		u.cond(u.eqOrAbsent(u.path(FreedAttr), v.freed))
	}
	// Callers and tasks each have MaxQueued places (a task's holds no
	// invocation: what bounds the callers, a bulkhead's share of the
	// function's concurrency, does not bound them).
	size := "size(" + u.path(kind) + ")"
	purged := p.queue
	if a.task {
		// The tasks running keep their claimed tickets in the map, and
		// take no place in the queue: with freed as seen (above), each
		// ticket seen claimed is there still.
		purged = p.tasks + countIf(v.queue, func(t *ticket) bool { return v.claimed(t, now) })
	}
	u.cond(size + " < " + u.num(int64(a.req.MaxQueued+purged)))
	if r := QueueReserve(a.req.MaxQueued); r > 0 {
		// A principal whose tickets are all claimed (its tasks running)
		// or lapsed has nothing waiting.
		u.cond("(attribute_not_exists(" + u.path(wp) + ") OR " + size + " < " + u.num(int64(a.req.MaxQueued-r+purged)) + u.stillNotWaiting(wp, v, a.me.label, now) + ")")
	}
	u.ttl(deadline)
	a.asked = time.Now()
	a.l.stats.tickets.Add(1)
	nv, err := a.l.write(ctx, a.req.Key, u, func() { a.joined = true })
	if nv != nil && nv.ticketFor(id) != nil {
		// The item as its join left it (or as an earlier send of it did).
		a.joined = true
		a.behind = nv.before(a.now(), &a.me)
	}
	if err == nil || !errors.Is(err, errCondition) {
		return nv, err
	}
	if nv.ticketFor(id) != nil || nv.leases[id] != 0 {
		return nv, nil // an earlier attempt of it landed
	}
	if !nv.hasMaps {
		return nil, a.l.create(ctx, a.req.Key)
	}
	now = a.now()
	if w := nv.waiting(now, a.task); w >= a.req.MaxQueued || nv.holdsReserve(a.me.label, now) && w >= a.req.MaxQueued-QueueReserve(a.req.MaxQueued) {
		a.l.stats.shed.Add(1)
		return nil, a.full(nv, now, false, QueueFull)
	}
	return nv, nil
}

func (a *attempt) waitEnd() time.Time {
	end := a.start.Add(max(a.req.Wait, 0))
	if !a.req.CallBy.IsZero() && a.req.CallBy.Before(end) {
		end = a.req.CallBy
	}
	return end
}

// wait holds a queued caller until news of the item from this process,
// or for look, then reads the item.
func (a *attempt) wait(ctx context.Context, v *view, look time.Duration, until time.Time) (*view, error) {
	if !time.Now().Before(until) {
		a.l.stats.waitTimeouts.Add(1)
		return nil, &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	latest, at, changed := a.b.latest()
	if latest != nil && latest != v && at.After(a.asked) {
		return latest, nil // news from another request here
	}
	// News from this process does not put its own look off: it looks
	// by the earliest time any of its waits asked for since its last.
	by := time.Now().Add(look)
	if !a.lookBy.IsZero() && a.lookBy.Before(by) {
		by = a.lookBy
	}
	a.lookBy = by
	t := time.NewTimer(max(min(time.Until(by), time.Until(until)), 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("lease: waiting for %s: %w", a.req.Key, ctx.Err())
	case <-changed:
		latest, _, _ := a.b.latest()
		return latest, nil
	case <-t.C:
	}
	a.asked, a.lookBy = time.Now(), time.Time{}
	v, err := a.l.read(ctx, a.req.Key)
	a.own = v
	return v, err
}

// claimWindow is how long t's turn may stand untaken at another caller's
// looks before t's caller is presumed gone: ClaimWindow past the look
// period its ticket announces, its longest sleep between looks.
func claimWindow(t *ticket) time.Duration { return ClaimWindow + max(t.look, 0) }

// lookPeriod is the longest a waiter with rank callers before it goes
// without looking, places places on the key: MaxLook while fewer than
// places come before it, rank/places × MaxLook (at most MaxLookFar)
// behind more. Its ticket announces the period of its rank at its join.
func (a *attempt) lookPeriod(rank, places int) time.Duration {
	if rank < places {
		return a.l.maxLook
	}
	return min(time.Duration(rank/places)*a.l.maxLook, MaxLookFar)
}

// nextLook is how long a waiter waits before it looks at the item again:
// until its place may first free. Each place frees when its call should
// end — a lease's from its expiry, less its margin and this caller's hold,
// plus how long calls here last (from the item, or this process), less
// their spread; a place whose turn came to a caller that has not taken it
// yet, a call's length from now — and the callers before it take the
// places in the order they free, a round of calls per place. A pause, the
// hold or an empty bucket of its own end when they say. A look that finds
// its place late waits half as long again as the last, from 5 ms up to
// its look period. It never waits longer than its look period at its rank
// now (lookPeriod), nor than the one its ticket announced: so that, its
// turn come, it takes its place within its claim window, while the reads
// of a long queue grow with the logarithm of its length up to MaxLookFar
// rather than with it.
func (a *attempt) nextLook(v *view, now int64, ahead []*ticket) time.Duration {
	rank := v.before(now, &a.me)
	moved := a.lookRank < 0 || rank < a.lookRank
	a.lookRank = rank
	period := a.lookPeriod(rank, max(a.req.capIn(v), 1))
	if t := v.ticketFor(a.me.id); t != nil {
		// Never longer than its ticket announces; never shorter than its
		// MaxLook, the least it announces (a shorter period is an edit of
		// the item, and would have it poll).
		period = min(period, max(t.look, a.l.maxLook))
	}
	most := period
	if d := a.blockedFor(v, now); d > 0 {
		a.look = overdueLook
		return min(d+jitter(overdueLook), most)
	}
	// Callers whose turn came before its own take their places at their
	// next look; one that has not within its claim window is presumed gone
	// at this caller's first look after: it looks then.
	for _, t := range ahead {
		if at, ok := a.turnSince[t.id]; ok {
			most = min(most, max(time.Until(at.Add(claimWindow(t))), 0)+jitter(overdueLook))
		}
	}
	held, spread := a.b.meanHeld()
	if v.callMS > 0 {
		held = time.Duration(v.callMS) * time.Millisecond
	}
	if spread == 0 {
		spread = held / 2
	}
	late := func() time.Duration {
		// Jittered upwards (never below the schedule, so a late waiter
		// looks at most once a look period), and never past most.
		d := a.look
		a.look = min(a.look*3/2, period)
		return min(d+jitter(d/4), most)
	}
	if held <= 0 {
		return late()
	}
	var toolFull map[string]bool
	if set := v.sets[ToolAttr(a.req.Tool)]; a.req.ToolCap > 0 && v.liveIn(now, set) >= a.req.ToolCap {
		// Its tool is full: its place frees when one of the tool's
		// leases ends, not another tool's.
		toolFull = make(map[string]bool, len(set))
		for _, id := range set {
			toolFull[id] = true
		}
	}
	var ends, toolEnds []int64
	for id, exp := range v.leases {
		if exp >= now {
			end := exp - a.req.Hold.Milliseconds() - a.l.margin.Milliseconds() + (held - spread).Milliseconds()
			ends = append(ends, end)
			if toolFull[id] {
				toolEnds = append(toolEnds, end)
			}
		}
	}
	toolAhead := 0
	for _, t := range ahead {
		// A caller whose turn came takes its place at its next look: its
		// call ends a call's length from then, or, late to take it (gone,
		// or slow), it is late as a lease past its end is.
		from := now
		if at, ok := a.turnSince[t.id]; ok {
			from = now - time.Since(at).Milliseconds()
		}
		ends = append(ends, from+(held-spread).Milliseconds())
		if t.tool == a.req.Tool {
			toolEnds = append(toolEnds, from+(held-spread).Milliseconds())
			toolAhead++
		}
	}
	// The callers before it take the places in the order they free, a
	// round of calls per place.
	frees := func(ends []int64, pos int) (int64, bool) {
		if len(ends) == 0 {
			return 0, false
		}
		slices.Sort(ends)
		return ends[pos%len(ends)] + int64(pos/len(ends))*held.Milliseconds(), true
	}
	eta, ok := frees(ends, max(rank-len(ahead), 0))
	if toolFull != nil {
		// Its tool full, its place frees with one of the tool's leases,
		// after the tool's own callers before it: callers of other tools
		// take other tools' places. A server full as well frees it no
		// sooner than the server's place either.
		sameTool := func(t *ticket) bool { return t.tool == a.req.Tool }
		toolETA, toolOK := frees(toolEnds, max(v.beforeIf(now, &a.me, sameTool)-toolAhead, 0))
		if c := a.req.capIn(v); !ok || c <= 0 || v.liveLeases(now) < c {
			eta, ok = toolETA, toolOK
		} else if toolOK {
			eta = max(eta, toolETA)
		}
	}
	if ok {
		if d := time.Duration(eta-now) * time.Millisecond; d > 0 {
			if moved {
				// Found late, it backs off until it moves up: a new
				// estimate of the same place (call_ms moved, a holder
				// renewing past its expected end) does not make it look
				// again from 5 ms.
				a.look = overdueLook
			}
			return min(d, most)
		}
	}
	return late()
}

// blockedFor is how long until what holds every place back — the hold, the
// server's pause, a pause of this caller's, an empty bucket of its own —
// lets it through (0: nothing does).
func (a *attempt) blockedFor(v *view, now int64) time.Duration {
	until := v.hold
	for _, g := range v.gatesOf(a.req.Tool, "") {
		until = max(until, g.entry(gateAll).until, g.entry(a.me.label).until)
	}
	d := time.Duration(max(until-now, 0)) * time.Millisecond
	if rl := rateLimited(v, a.req.Rates, now); rl != nil {
		d = max(d, rl.RetryAfter)
	}
	return d
}

// withdrawBudget bounds each write of a withdrawal.
const withdrawBudget = 2 * time.Second

// leave takes back what this failed attempt may have left in the item: its
// ticket, conditioned on its number, and (when no ticket was there) a
// lease a take of it whose outcome was unknown may have made. Best
// effort: a ticket left behind is passed over once its turn has come for
// ClaimWindow, or purged past its deadline; a lease expires.
func (a *attempt) leave(ctx context.Context) {
	if !a.joined && len(a.unsure) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	now := a.now()
	id := a.me.id
	if a.joined {
		u := newUpdate()
		u.ttl(now)
		qp := u.path(kindAttr(a.task), id)
		if a.n != 0 {
			u.removeTicket(id, a.me.label, a.n, a.task)
		} else {
			u.remove(qp, u.path(TicketsAttr, id))
			u.del(u.path(WaitingAttr(a.me.label)), id)
			u.cond("attribute_exists(" + qp + ")")
		}
		// A ticket leaving, like a place freed, can change whose turn it is
		// for the callers behind it: freed tells the takes judged before.
		u.count(u.path(FreedAttr), 1)
		wctx, cancel := context.WithTimeout(ctx, withdrawBudget)
		_, err := a.l.write(wctx, a.req.Key, u, nil)
		cancel()
		if err == nil || len(a.unsure) == 0 {
			return
		}
	}
	// A take of it may have landed unseen (and removed its ticket). Its
	// ttl is from now: the write before may have taken its whole budget.
	u := newUpdate()
	u.ttl(a.now())
	lp := u.path(LeasesAttr, id)
	u.remove(lp)
	u.cond("attribute_exists(" + lp + ")")
	for _, set := range a.ownSets() {
		u.del(u.path(set), id)
	}
	u.count(u.path(FreedAttr), 1)
	wctx, cancel := context.WithTimeout(ctx, withdrawBudget)
	defer cancel()
	_, _ = a.l.write(wctx, a.req.Key, u, nil)
}

// full is the refusal of a caller that does not wait, or may not: why, and
// when to try again — when the calls held are expected to have made room
// for the callers waiting and this one, from how long calls here last.
func (a *attempt) full(v *view, now int64, queuedAhead bool, reason string) *FullError {
	e := &FullError{Reason: reason, What: "server", Cap: a.req.capIn(v)}
	held, _ := a.b.meanHeld()
	if v != nil {
		if v.callMS > 0 {
			held = time.Duration(v.callMS) * time.Millisecond
		}
		e.Waiting = v.waiting(now, a.task)
		e.InUse = v.liveLeases(now)
		if err := refusal(v.gatesOf(a.req.Tool, ""), a.me.label, now, v.hold); err != nil && e.Reason == "" {
			var f *FullError
			if errors.As(err, &f) {
				return f
			}
		}
		switch {
		case e.Cap > 0 && e.InUse >= e.Cap:
		case a.req.ToolCap > 0 && v.liveIn(now, v.sets[ToolAttr(a.req.Tool)]) >= a.req.ToolCap:
			e.What, e.Cap, e.InUse = "tool", a.req.ToolCap, v.liveIn(now, v.sets[ToolAttr(a.req.Tool)])
		case a.req.PrincipalCap > 0 && v.liveIn(now, v.sets[PrincipalAttr(a.me.label)]) >= a.req.PrincipalCap:
			e.What, e.Cap, e.InUse = "principal", a.req.PrincipalCap, v.liveIn(now, v.sets[PrincipalAttr(a.me.label)])
		}
	}
	if e.Reason == "" {
		e.Reason = AtCapacity
		if queuedAhead || e.InUse < e.Cap && e.Waiting > 0 {
			e.Reason = QueuedAhead
		}
	}
	if held <= 0 {
		held = time.Second
	}
	places := max(e.Cap, 1)
	e.RetryAfter = max(jitter(held*time.Duration(e.Waiting+1)/time.Duration(places)), 50*time.Millisecond)
	return e
}

// charge admits a call that holds nothing in the item, only pays its
// buckets: one conditional write, made again on the item it gets back
// while the buckets hold tokens. Nothing in the item tells its resend
// from another call's, so it is never sent again after an attempt whose
// outcome was unknown: a token may be lost to a store error, never taken
// twice.
func (l *Limiter) charge(ctx context.Context, req Request) (*Lease, error) {
	// The process's last view of the key only chooses the form of the
	// charge, which its conditions check; a refusal is judged from the
	// answer a charge gets.
	v, own := l.board(req.Key).recent(time.Hour), false
	for range maxEager {
		now := l.clock().UnixMilli()
		// Callers waiting whose turn comes before it, as a newcomer's,
		// came first: it leaves them their buckets' tokens, as a take
		// does, conditioned on no more callers waiting than the view
		// shows.
		rs := l.rulesFor(req, v)
		waiting := aheadIn(v, req, rs, now)
		if v != nil && own {
			if err := refusal(v.gatesOf(req.Tool, ""), req.Holder, now, v.hold); err != nil {
				l.stats.refused(err)
				return nil, err
			}
			if err := rateLimitedKeeping(v, req.Rates, now, waiting); err != nil {
				l.stats.rateLimited.Add(1)
				return nil, err
			}
		}
		u := newUpdate()
		u.once = true
		u.admit(req.gateAttrs(), req.Holder, "", 0, now, nil, v)
		// Both maps: a task's ticket waits for a token as a caller's does.
		for _, task := range []bool{false, true} {
			mp, n := u.path(kindAttr(task)), 0
			if v != nil {
				n = v.tickets(task)
			}
			if n > 0 {
				u.cond("size(" + mp + ") <= " + u.num(int64(n)))
			} else {
				u.cond("(attribute_not_exists(" + mp + ") OR size(" + mp + ") = " + u.num(0) + ")")
			}
		}
		if v != nil && slices.ContainsFunc(v.queue, func(t *ticket) bool {
			return t.live(now) && slices.ContainsFunc(rs.buckets(t), func(b Rate) bool {
				return slices.ContainsFunc(req.Rates, func(r Rate) bool { return r.Name == b.Name })
			})
		}) {
			// A waiter needing a token of its buckets, held back in the
			// view, may have had its turn come since (a place freed, a
			// ticket gone, a gate or bucket purged, a token back): its
			// token is left to it only if freed is as seen.
			u.cond(u.eqOrAbsent(u.path(FreedAttr), v.freed))
		}
		for _, r := range req.Rates {
			tat := int64(0)
			if v != nil {
				tat = v.rates[RateAttr(r.Name)]
			}
			u.charge(r, tat, now, waiting[r.Name])
		}
		u.ttl(now + 60_000)
		nv, err := l.write(ctx, req.Key, u, nil)
		if err == nil {
			l.stats.acquired.Add(1)
			ls := l.newLease(req, l.newLeaseID())
			ls.exps, ls.Expiry, ls.CallDeadline = []int64{now}, time.UnixMilli(now), time.Now().Add(req.Hold)
			return ls, nil
		}
		if !errors.Is(err, errCondition) {
			return nil, err
		}
		v, own = nv, true
	}
	return nil, fmt.Errorf("lease: the rate buckets of %s kept changing", req.Key)
}

// aheadIn counts, for each bucket, the callers waiting in v whose turn
// comes before a newcomer's making req at now and who take a token from it.
func aheadIn(v *view, req Request, r rules, now int64) map[string]int {
	n := map[string]int{}
	if v == nil {
		return n
	}
	me := &asker{id: "", label: req.Holder, tool: req.Tool, rates: req.Rates}
	for _, t := range v.walk(now, me, r, nil).ahead {
		for _, b := range r.buckets(t) {
			n[b.Name]++
		}
	}
	return n
}
