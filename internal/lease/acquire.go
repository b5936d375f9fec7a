package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Acquire takes a place for req (see Take in the package doc), waiting in
// the queue up to req.Wait when it finds none. It fails with *FullError,
// *WaitTimeoutError, *CircuitOpenError or *RateLimitedError.
func (l *Limiter) Acquire(ctx context.Context, req Request) (*Lease, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	var own *view
	if !req.holds() {
		ls, v, err := l.charge(ctx, req)
		if !errors.Is(err, errWaiters) {
			return ls, err
		}
		own = v // the item it was judged on
	}
	a := l.newAttempt(req, l.newLeaseID(), false)
	a.start, a.own = start, own
	ls, err := a.run(ctx)
	if err != nil {
		a.leave(ctx)
		return nil, err
	}
	ls.Waited, ls.since, ls.QueuedBehind = time.Since(a.start), time.Now(), a.behind
	return ls, nil
}

// attempt is the state of one Acquire.
type attempt struct {
	l     *Limiter
	req   Request
	b     *board
	me    asker
	start time.Time
	// n is its ticket's number (0: none); joined: a join of it landed or
	// may have.
	n      int64
	joined bool
	// task: a task's attempt (Enqueue, Claim): its ticket is in tasks.
	task   bool
	taskID string
	// behind is how many callers were ahead of it when it last joined.
	behind int
	// unsure are the expiries of its takes whose outcome was unknown.
	unsure []int64
	// claim names a task's claim in its ticket (Claim).
	claim string
	// asked is when the answer to its last request came: news sent after
	// it is newer than that answer, news sent before may not be; look the
	// next wait of a late waiter; lookBy when it reads at the latest
	// (zero: none set).
	asked  time.Time
	look   time.Duration
	lookBy time.Time
	// own is the last answer to its own requests: an Acquire's refusals
	// are judged from it (run; Enqueue and Claim read no refusal from it).
	own *view
	// turnSince: when it first saw each ticket's turn come before its own.
	turnSince map[turn]time.Time
	// firstExp: each live lease's expiry when it first saw it, which it
	// expects the lease's end from (a renewal does not move it).
	firstExp map[string]int64
	// purgeRefused: its last purge was refused.
	purgeRefused bool
	// takeErrs: takes in a row that met a store error.
	takeErrs int
	// tokensUnsure: a take of its that holds nothing may have taken its
	// tokens (an unknown outcome): it takes no more.
	tokensUnsure bool
	// lookedAt is when it last judged a view; steadyFrom, since when it
	// has judged one at least every steadyGap; timesForTasks, whether its
	// last judgement found callers presumed gone holding back tasks'
	// turns (actsForTasks).
	lookedAt, steadyFrom time.Time
	timesForTasks        bool
}

// steadyGap is the longest between two judgements of a caller's that
// keeps its looks steady: MaxLook, and twice as long again for the read's
// answer to come (a read answered later, or failed and sent again, leaves
// a stretch it saw nothing of).
func steadyGap(maxLook time.Duration) time.Duration { return 3 * maxLook }

func (a *attempt) now() int64 { return a.l.clock().UnixMilli() }

func (a *attempt) run(ctx context.Context) (*Lease, error) {
	waitUntil := a.waitEnd()
	if dl, ok := ctx.Deadline(); ok && dl.Before(waitUntil) {
		waitUntil = dl
	}
	// A recent view showing a queue, a gate or the hold saves a first
	// write that would fail.
	v := a.b.recent(recentView)
	if v != nil && len(v.queue) == 0 && len(v.gates) == 0 && v.hold == 0 {
		v = nil
	}
	eager := 0
	for {
		now := a.now()
		if v != nil {
			if exp, ok := v.leases[a.me.id]; ok {
				return a.lease(ctx, exp, v, false)
			}
			if v.needsRepair() {
				var err error
				if v, err = a.l.mend(ctx, a.req.Key, v); err != nil {
					return nil, err
				}
				a.own = v
				continue
			}
			if t := v.ticketFor(a.me.id); t != nil {
				a.n, a.joined = t.n, true
			} else if a.n != 0 {
				a.n = 0 // its ticket was passed over or purged
			}
			_, err := v.admits(a.req.Tool, a.me.breaker, a.me.label, now, nil)
			refuse := errors.As(err, new(*CircuitOpenError)) || err != nil && a.req.Wait <= 0
			rl := rateLimited(v, a.req.Rates, now, nil)
			if (refuse || a.n == 0 && rl != nil) && v != a.own {
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
				nv, progress, err := a.purge(ctx, v, func(d time.Duration) error { return a.pause(ctx, d, waitUntil) })
				if err != nil {
					return nil, err
				}
				a.own = nv
				// A purge with nothing to send waits before judging again.
				if !progress && nv == v {
					if err := a.pause(ctx, jitter(writeMinBackoff), waitUntil); err != nil {
						return nil, err
					}
				}
				v = nv
				continue
			}
			a.purgeRefused = false
		}
		served, h, bypass := a.decide(v, now)
		if !served && slices.ContainsFunc(h.ahead, func(t *ticket) bool { return t.task }) {
			_ = a.l.startDue(ctx, a.req.Key, v, a.req.rules(v))
		}
		var held *RateLimitedError
		if !served && v != nil && !a.req.holds() && a.n == 0 && (a.req.Wait <= 0 || a.req.MaxQueued <= 0) {
			// A call that would hold nothing and does not join is held
			// back by the tokens of callers before it: told so.
			held = rateLimited(v, a.req.Rates, now, a.req.rules(v).tokens(h.ahead))
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
		case served:
			v, err = a.wait(ctx, v, jitter(2*writeMinBackoff), waitUntil)
		case len(bypass) > 0:
			v, err = a.pass(ctx, v, bypass)
			a.own = v
		case held != nil && v != a.own:
			// Refused on the item, never on its process's view alone.
			v, err = a.l.read(ctx, a.req.Key)
			a.own = v
		case held != nil:
			a.l.stats.rateLimited.Add(1)
			return nil, held
		case a.req.Wait <= 0:
			return nil, a.full(v, now, len(h.ahead) > 0, "")
		case a.n == 0 && a.req.MaxQueued <= 0:
			return nil, a.full(v, now, false, QueueFull)
		case a.n == 0 && !time.Now().Before(waitUntil):
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
		if err != nil && a.joined && storeError(err) && !a.tokensUnsure && time.Now().Before(waitUntil) {
			// A store error while it waits: it keeps its ticket and looks again.
			for failures := 1; err != nil; failures++ {
				if err := a.pause(ctx, jitter(min(writeMaxBackoff<<min(failures, 3), a.l.maxLook)), waitUntil); err != nil {
					return nil, err
				}
				v, err = a.l.read(ctx, a.req.Key)
				a.own = v
			}
			continue
		}
		if err != nil {
			return nil, err
		}
	}
}

// storeError reports whether err is the store failing (rather than the
// protocol refusing, or the caller's own context ending).
func storeError(err error) bool {
	refusals := []any{new(*FullError), new(*WaitTimeoutError), new(*CircuitOpenError), new(*RateLimitedError)}
	return !slices.ContainsFunc(refusals, func(target any) bool { return errors.As(err, target) }) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// pause waits d, or until the wait's end or ctx's.
func (a *attempt) pause(ctx context.Context, d time.Duration, until time.Time) error {
	if d = min(d, time.Until(until)); d <= 0 {
		a.l.stats.waitTimeouts.Add(1)
		return &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	return sleep(ctx, d, a.req.Key)
}

// purge sends the purge of v's stale entries (purgeAll). A purge refused
// returns the item as it is now: a look, judged at once, its next look a
// period from it; only a purge sent again after it waits a back-off
// first, with pause.
func (a *attempt) purge(ctx context.Context, v *view, pause func(time.Duration) error) (*view, bool, error) {
	if a.purgeRefused {
		if err := pause(jitter(writeMinBackoff)); err != nil {
			return nil, false, err
		}
	}
	nv, progress, err := a.l.purgeAll(ctx, a.req.Key, v)
	a.purgeRefused = err == nil && !progress && nv != v
	return nv, progress, err
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration, key string) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("lease: waiting for %s: %w", key, ctx.Err())
	case <-t.C:
		return nil
	}
}

// decide says whether it is this caller's turn in v at now (with no view,
// an uncontended caller assumes it is), what the walk handed out, and the
// tickets it passes over (bypass): callers presumed gone past their claim
// window, and tasks whose start went unclaimed for StartTimeout (see Whose
// turn and Tasks in the package doc).
func (a *attempt) decide(v *view, now int64) (bool, handout, []*ticket) {
	if v == nil {
		return a.n == 0 && !a.joined, handout{}, nil
	}
	// Its looks are steady while each is judged within steadyGap of the
	// one before.
	if t := time.Now(); a.lookedAt.IsZero() || t.Sub(a.lookedAt) > steadyGap(a.l.maxLook) {
		a.steadyFrom, a.lookedAt = t, t
	} else {
		a.lookedAt = t
	}
	rs := a.req.rules(v)
	h, since, bypass := v.presume(now, &a.me, rs, a.turnSince)
	a.turnSince = since
	switch {
	case !h.served && !a.actsForTasks(v, now, rs, h, bypass):
		bypass = nil // passed over by the take of a caller whose turn it makes
	case !h.served, len(bypass) > maxPurge:
		// The callers presumed gone hold back tasks' turns (they start on
		// its answer), or more than one write may pass over: it removes
		// maxPurge of the callers first, in a write of their own (pass);
		// tasks keep their tickets, and are started again.
		dead := slices.DeleteFunc(slices.Clone(bypass), func(t *ticket) bool { return t.task })
		return false, h, dead[:min(len(dead), maxPurge)]
	}
	return h.served, h, bypass
}

// actsForTasks reports whether this caller, not served in h, passes the
// callers presumed gone in bypass for the tasks whose turn they hold
// back: tasks handed a place in h only because those callers are passed
// over, which have nobody to pass them for them (see Tasks in the package
// doc). Presumed gone, they are passed only past a claim window more of
// steady looks (none more than steadyGap after the one before), which it
// looks every MaxLook for (timesForTasks): a turn that went and came back
// between its looks reads then as one that went.
func (a *attempt) actsForTasks(v *view, now int64, rs rules, h handout, bypass []*ticket) bool {
	a.timesForTasks = false
	caller := func(t *ticket) bool { return !t.task }
	if v.tickets(true) == 0 || !slices.ContainsFunc(bypass, caller) {
		return false
	}
	skip := map[string]bool{}
	for _, t := range bypass {
		skip[t.id] = t.task
	}
	before := v.walk(now, &a.me, rs, skip).ahead
	a.timesForTasks = slices.ContainsFunc(h.ahead, func(t *ticket) bool { return t.task && !slices.Contains(before, t) })
	return a.timesForTasks && !slices.ContainsFunc(bypass, func(t *ticket) bool { return caller(t) && time.Since(a.steadyFrom) < claimWindow(t) })
}

// pass removes bypass, callers presumed gone whose tickets hold back its
// caller's turn: the first maxPurge of more than one take may pass over
// (see Whose turn in the package doc). Its caller judges again on its
// answer.
func (a *attempt) pass(ctx context.Context, v *view, bypass []*ticket) (*view, error) {
	u := newUpdate()
	u.ttl(a.now())
	for _, t := range bypass {
		u.removeTicket(t.id, t.label, t.n, false)
		u.count(u.path(FreedAttr), 1)
	}
	nv, err := a.l.write(ctx, a.req.Key, u, nil)
	a.asked = time.Now()
	if errors.Is(err, errCondition) {
		return nv, nil
	}
	return nv, err
}

// presume walks v at now for me, passing over the tickets presumed gone
// (bypass): callers whose turn, first seen at seen (now if not seen
// before), came their claim window ago, and the first maxPurge tasks
// whose starts went unclaimed for StartTimeout (see Tasks in the package
// doc). since is seen as it stands after: the turns of the tickets ahead
// and passed over.
func (v *view) presume(now int64, me *asker, rs rules, seen map[turn]time.Time) (h handout, since map[turn]time.Time, bypass []*ticket) {
	skip := map[string]bool{}
	since = map[turn]time.Time{}
	tasks := 0 // tasks passed: at most maxPurge, each a condition of the take
	for {
		h = v.walk(now, me, rs, skip)
		more := false
		for _, t := range h.ahead {
			// A task's turn too: its call is expected from then.
			at, ok := seen[turnOf(t)]
			if !ok {
				at = time.Now()
			}
			since[turnOf(t)] = at
			// A caller past its claim window is presumed gone; a task never
			// is, but is passed over, keeping its ticket, once its start
			// went unclaimed for StartTimeout.
			if t.passed(now) && tasks < maxPurge || !t.task && time.Since(at) >= claimWindow(t) {
				if t.task {
					tasks++
				}
				skip[t.id] = true
				bypass = append(bypass, t)
				more = true
			}
		}
		if !more {
			return h, since, bypass
		}
	}
}

// turn names a ticket's turn: its id and number, for a caller presumed
// gone who joins again under its id waits a new turn.
type turn struct {
	id string
	n  int64
}

func turnOf(t *ticket) turn { return turn{t.id, t.n} }

// mustPurge reports whether v shows stale entries that this caller's next
// write would count and could not remove itself (in a set it adds to), or
// more than one write removes.
func (a *attempt) mustPurge(v *view, now int64) bool {
	return slices.ContainsFunc(a.req.ownSets(), func(s string) bool { return len(v.sets[s]) > v.liveIn(now, v.sets[s]) }) ||
		slices.ContainsFunc(v.staleTickets(now), func(t *ticket) bool { return t.label == a.me.label }) ||
		newUpdate().purge(v, now, "", "").more
}

// ownSets are the sets a lease of r is a member of: its principal's, and
// its tool's when the tool is capped.
func (r *Request) ownSets() []string {
	out := []string{PrincipalAttr(r.Holder)}
	if r.ToolCap > 0 {
		out = append(out, ToolAttr(r.Tool))
	}
	return out
}

// rateAttrs are the attributes of the buckets rs.
func rateAttrs(rs []Rate) []string {
	var out []string
	for _, r := range rs {
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

// take makes the write that gives this caller a place (see Take and Whose
// turn in the package doc), leaving room in every cap and bucket for
// h.ahead and passing over bypass. It returns the lease, or the item as it
// is now when the write found it was not this caller's turn after all.
func (a *attempt) take(ctx context.Context, v *view, h handout, bypass []*ticket, now int64) (*Lease, *view, error) {
	hold := a.req.hold(time.Now())
	if hold <= 0 {
		return nil, nil, &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	// Made for now, the instant its turn was judged at: a caller unblocked
	// by time alone since would be passed with no condition to catch it.
	exp := now + (hold + a.l.margin).Milliseconds()
	id := a.me.id
	u := newUpdate()
	p := u.purge(v, now, id, a.me.label, append(append(a.req.ownSets(), WaitingAttr(a.me.label)), append(rateAttrs(a.req.Rates), gateAttrs(a.req.Tool, a.me.breaker)...)...)...)
	bv := v
	if bv == nil {
		bv, _, _ = a.b.latest() // only chooses the form of the charge, which its condition checks
	}
	rs := a.req.rules(v)
	keep := rs.tokens(h.ahead)
	u.charge(a.req.Rates, bv, now, keep)
	// The other buckets of the callers handed a place before it still
	// hold their tokens: one taken since (by a take holding nothing, which
	// moves no freed) could leave such a caller unable to use its place,
	// and hand it to one after it (see Buckets in the package doc). At
	// most maxAheadBuckets, those with the fewest tokens to spare; the
	// bucket of one waiter alone holds its token, or its ticket is gone
	// (taken with its token, or moving freed).
	others, by := map[string]Rate{}, map[string]*ticket{} // by: a caller needing it (keep counts them)
	for _, t := range h.ahead {
		for _, b := range rs.buckets(t) {
			if !slices.ContainsFunc(a.req.Rates, func(r Rate) bool { return r.Name == b.Name }) {
				others[b.Name], by[b.Name] = b, t
			}
		}
	}
	spare := func(b Rate) int { return b.Tokens(v.rates[RateAttr(b.Name)], now) - keep[b.Name] }
	named := slices.SortedFunc(maps.Values(others), func(x, y Rate) int { return cmp.Or(cmp.Compare(spare(x), spare(y)), strings.Compare(x.Name, y.Name)) })
	for _, b := range named[:min(len(named), maxAheadBuckets)] {
		gone := ""
		if t := by[b.Name]; keep[b.Name] == 1 && !t.task {
			gone = "attribute_not_exists(" + u.path(QueueAttr, t.id) + ")"
		}
		u.holds(b, now, keep[b.Name], gone)
	}
	// A call that needs no place takes its tokens in its turn and holds
	// nothing (see Buckets in the package doc).
	place := a.req.holds()
	if place {
		lp := u.path(LeasesAttr, id)
		u.set(lp, u.num(exp))
		u.cond("attribute_not_exists(" + lp + ")")
	}
	a.capConds(u, v, p.leases, len(h.ahead))
	if tc := a.req.ToolCap; tc > 0 {
		tp := u.path(ToolAttr(a.req.Tool))
		u.add(tp, id)
		u.cond("(attribute_not_exists(" + tp + ") OR size(" + tp + ") < " + u.num(int64(tc-countIf(h.ahead, func(t *ticket) bool { return t.tool == a.req.Tool && t.toolCap > 0 }))) + ")")
	}
	// Its principal's set as seen when it ranks the caller (mixed) or is
	// capped; with no view, room under the principal's cap.
	pp := func() string { return u.path(PrincipalAttr(a.me.label)) }
	if place {
		u.add(pp(), id)
	}
	mixed := v != nil && (a.req.ToolCap > 0 || slices.ContainsFunc(v.queue, func(t *ticket) bool {
		return t.id != id && v.waits(t, now) && (t.label != a.me.label || t.toolCap > 0)
	}))
	if v != nil && (a.req.PrincipalCap > 0 || mixed) {
		if members := v.sets[PrincipalAttr(a.me.label)]; len(members) == 0 {
			u.cond("attribute_not_exists(" + pp() + ")")
		} else {
			u.cond("size(" + pp() + ") = " + u.num(int64(len(members))))
		}
	} else if v == nil && a.req.PrincipalCap > 0 {
		u.cond("(attribute_not_exists(" + pp() + ") OR size(" + pp() + ") < " + u.num(int64(a.req.PrincipalCap)) + ")")
	}
	if place && v != nil && (a.n != 0 || slices.ContainsFunc(v.queue, func(t *ticket) bool { return t.label != a.me.label && v.waits(t, now) })) {
		// Its place ranks its principal's other callers waiting anew, after
		// another principal's. A newcomer's view shows every caller waiting
		// (its take is conditioned on seq): so while another principal's
		// wait. A waiter's take is not: callers of any principal may have
		// joined since its look, so always. One ADD, with no condition on
		// who they are: one a take holding nothing served since moved
		// nothing the take could read.
		u.count(u.path(FreedAttr), 1)
	}
	switch {
	case a.n != 0 && a.task:
		// A task's claim keeps its ticket and names itself in it, and
		// takes the start it claimed away: should the claim lapse, the
		// ticket waits again with no start, as a task whose turn has not
		// come (see Tasks in the package doc).
		u.cond(u.path(TasksAttr, id) + " = " + u.num(a.n))
		u.set(u.path(TicketsAttr, id, ticketClaim), u.str(a.claim))
		u.remove(u.path(TicketsAttr, id, ticketStarted), u.path(TicketsAttr, id, ticketFirst))
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
			// A newcomer: nobody joined since it looked.
			u.cond(u.eqOrAbsent(u.path(SeqAttr), v.seq))
		}
		// A claimed ticket that could rank before it — numbered before it,
		// or of another principal (ranked by places held) — waits again
		// when its claim lapses and is purged, which moves freed.
		claimedAhead := slices.ContainsFunc(v.queue, func(t *ticket) bool {
			return t.id != id && (a.n == 0 || t.n < a.n || t.label != a.me.label) && v.claimed(t, now)
		})
		if mixed || a.req.PrincipalCap > 0 || h.passed || claimedAhead {
			// Nothing changed whose turn it is; one principal alone waiting
			// for no capped tool, nobody passed over, no claim ahead, is
			// served by number.
			u.cond(u.eqOrAbsent(u.path(FreedAttr), v.freed))
		}
	}
	for _, t := range bypass {
		if t.task {
			u.passesTask(t)
			continue
		}
		u.removeTicket(t.id, t.label, t.n, t.task)
		u.count(u.path(FreedAttr), 1)
	}
	if place {
		u.admit(gateAttrs(a.req.Tool, a.me.breaker), a.me.label, id, exp, now, h.probes, v)
	} else {
		u.admit(gateAttrs(a.req.Tool, ""), a.me.label, "", 0, now, nil, v) // no verdict to give a probe
	}
	u.ttl(exp)
	// Judged for its moment: sent once (see Take in the package doc).
	u.judged = true
	wctx := ctx
	if v != nil {
		wctx = context.WithValue(ctx, judgedKey{}, v.seq)
	}
	unsure := false
	nv, err := a.l.write(wctx, a.req.Key, u, func() { unsure = true })
	if unsure && place {
		a.unsure = append(a.unsure, exp)
	}
	a.asked = time.Now()
	if err == nil {
		a.n = 0
		// Its answer is a look: a task served with it (places freed with
		// no write, by leases lapsing) may have been seen by nobody else.
		// Started before the lease is judged, so that a place the starts
		// left no time for is given back, and with a context of their own,
		// bounded as a give-back is: a start whose mark was won is made
		// whatever the caller's end. Past its CallBy the give-back's own
		// starts make them.
		if a.req.CallBy.IsZero() || time.Now().Before(a.req.CallBy) {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawBudget)
			_ = a.l.startDue(sctx, a.req.Key, nv, a.req.rules(nv))
			cancel()
		}
		ls, err := a.lease(ctx, exp, nv, true)
		return ls, nil, err
	}
	if errors.Is(err, errCondition) {
		a.takeErrs = 0
		return nil, nv, nil // not landed, unless the item shows it did (the caller's loop looks)
	}
	if unsure && !place {
		// Its tokens may have been taken: never taken twice.
		a.tokensUnsure = true
		return nil, nil, err
	}
	// Read again, until an answer or its budget of errors in a row is spent.
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

// judgedKey carries in a take's context the seq of the view it was judged
// from (which the fault simulation checks).
type judgedKey struct{}

// lease completes the acquire with the lease the item shows this attempt
// holding, expiring at exp, counted as granted; answer: v is its take's
// own answer (which tells what its charge left). A place with no time left
// for the call is given back, within withdrawBudget whatever ctx's end: a
// task's keeping its ticket for the next worker (ErrStartLapsed).
func (a *attempt) lease(ctx context.Context, exp int64, v *view, answer bool) (*Lease, error) {
	localNow := time.Now()
	deadline := earlier(localNow.Add(time.UnixMilli(exp).Sub(a.l.clock())-a.l.margin), a.req.CallBy)
	ls := &Lease{l: a.l, req: a.req, id: a.me.id, task: a.task, claim: a.claim}
	if answer {
		ls.charged = chargedIn(v, a.req.Rates)
	}
	ls.setExpiry(exp, deadline)
	ls.InFlight, ls.Limit, ls.round = v.liveLeases(a.now()), a.req.capIn(v), v.round
	for _, g := range gateAttrs(a.req.Tool, a.me.breaker) {
		for _, key := range []string{gateAll, a.me.label} {
			if e := v.gates[g].entry(key); e.probe == a.me.id {
				ls.probes = append(ls.probes, gateRef{g, key})
			}
		}
	}
	a.l.stats.acquired.Add(1)
	if ls.Probe() {
		a.l.stats.probes.Add(1)
	}
	if !deadline.After(localNow) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawBudget)
		defer cancel()
		if a.task {
			_ = ls.Unclaim(ctx)
			return nil, ErrStartLapsed
		}
		_, _ = ls.Finish(ctx, Unused)
		return nil, &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	return ls, nil
}

// join puts this caller's ticket in the queue (see Join in the package
// doc).
func (a *attempt) join(ctx context.Context, v *view) (*view, error) {
	now := a.now()
	id := a.me.id
	// Margin past its caller's deadline: others' clocks may be ahead.
	deadline := now + time.Until(a.waitEnd()).Milliseconds() + a.l.margin.Milliseconds()
	wp := WaitingAttr(a.me.label)
	u := newUpdate()
	p := u.purge(v, now, id, a.me.label, wp)
	kind := kindAttr(a.task)
	sp, qp, tp := u.path(SeqAttr), u.path(kind, id), u.path(TicketsAttr, id)
	next := "if_not_exists(" + sp + ", " + u.num(0) + ") + " + u.num(1)
	// Not lowered since it was judged (a hand edit): it would number this
	// caller before callers waiting; nor raised to the top: it would
	// number a half.
	u.cond(orAbsent(sp, "("+sp+" >= "+u.num(v.seq)+" AND "+sp+" < "+u.num(maxNumber-1)+")"))
	u.set(sp, next)
	u.set(qp, next)
	// Its principal is told by its waiting set; p names it again only
	// for instances built before tickets were read so, which take a
	// ticket without it for a half (see Upgrading in docs/admission.md).
	info := map[string]types.AttributeValue{ticketLabel: &types.AttributeValueMemberS{Value: a.me.label}, ticketDeadline: number(deadline)}
	if a.task {
		info[ticketTaskID] = &types.AttributeValueMemberS{Value: a.taskID}
	} else {
		info[ticketLook] = number(a.lookPeriod(v.before(now, &a.me), max(a.req.capIn(v), 1)).Milliseconds())
	}
	if a.req.Tool != "" {
		info[ticketTool] = &types.AttributeValueMemberS{Value: a.req.Tool}
	}
	for field, n := range map[string]int{ticketToolCap: a.req.ToolCap, ticketToolRPM: a.me.toolRPM} {
		if n > 0 { // its tool's cap and rate, when it has them
			info[field] = number(int64(n))
		}
	}
	if a.me.nothing {
		info[ticketNothing] = number(0)
	}
	u.set(tp, u.value(&types.AttributeValueMemberM{Value: info}))
	u.add(u.path(wp), id)
	u.cond("attribute_not_exists("+qp+")", "attribute_not_exists("+u.path(kindAttr(!a.task), id)+")", "attribute_not_exists("+tp+")", "attribute_not_exists("+u.path(LeasesAttr, id)+")")
	if a.task {
		// A late join must not bring back a task claimed and released,
		// withdrawn or lapsed: each of those moves freed.
		u.cond(u.eqOrAbsent(u.path(FreedAttr), v.freed))
	}
	// Callers and tasks each have MaxQueued places.
	size := "size(" + u.path(kind) + ")"
	purged := p.queue
	if a.task {
		// Claimed tickets take no place (freed as seen: each is there
		// still), while their claim has Margin left: one lapsing before
		// the join lands waits again, in a place.
		soon := now + a.l.margin.Milliseconds()
		purged = p.tasks + countIf(v.queue, func(t *ticket) bool { return v.claimed(t, soon) })
	}
	u.cond(size + " < " + u.num(int64(a.req.MaxQueued+purged)))
	if r := QueueReserve(a.req.MaxQueued); r > 0 {
		u.cond("(attribute_not_exists(" + u.path(wp) + ") OR " + size + " < " + u.num(int64(a.req.MaxQueued-r+purged)) + u.stillNotWaiting(wp, v, a.me.label, now) + ")")
	}
	u.ttl(deadline)
	a.l.stats.tickets.Add(1)
	nv, err := a.l.write(ctx, a.req.Key, u, func() { a.joined = true })
	a.asked = time.Now()
	if nv != nil && nv.ticketFor(id) != nil {
		a.joined = true
		a.behind = nv.before(a.now(), &a.me)
	}
	if err == nil || !errors.Is(err, errCondition) {
		return nv, err
	}
	// An earlier attempt of it landed; or the item needs repair: its
	// caller mends it, and judges again.
	if nv.ticketFor(id) != nil || nv.leases[id] != 0 || nv.needsRepair() {
		return nv, nil
	}
	now = a.now()
	// Held to the reserve unless its condition could name all it has there
	// as waiting no more (stillNotWaiting).
	_, named := nv.notWaiting(a.me.label, now)
	w := nv.waiting(now, a.task)
	if a.task {
		// As its condition counted them: a claim without Margin left waits.
		soon := now + a.l.margin.Milliseconds()
		w += countIf(nv.queue, func(t *ticket) bool { return nv.claimed(t, now) && !nv.claimed(t, soon) })
	}
	if w >= a.req.MaxQueued || !named && w >= a.req.MaxQueued-QueueReserve(a.req.MaxQueued) {
		return nil, a.full(nv, now, false, QueueFull)
	}
	return nv, nil
}

// waitEnd is when its wait is over: after req.Wait, or by req.CallBy.
func (a *attempt) waitEnd() time.Time { return earlier(a.start.Add(max(a.req.Wait, 0)), a.req.CallBy) }

// wait holds a queued caller until news of the item from this process,
// or for look, then reads the item.
func (a *attempt) wait(ctx context.Context, v *view, look time.Duration, until time.Time) (*view, error) {
	if !time.Now().Before(until) {
		a.l.stats.waitTimeouts.Add(1)
		return nil, &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	latest, at, changed := a.b.latest()
	news := func() bool { return latest != nil && latest != v && at.After(a.asked) }
	if news() {
		return latest, nil // from another request here
	}
	// News does not put its look off: it reads by the earliest time asked.
	a.lookBy = earlier(time.Now().Add(look), a.lookBy)
	t := time.NewTimer(max(min(time.Until(a.lookBy), time.Until(until)), 0))
	defer t.Stop()
	for looked := false; !looked; {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lease: waiting for %s: %w", a.req.Key, ctx.Err())
		case <-changed:
			if latest, at, changed = a.b.latest(); news() {
				return latest, nil
			}
		case <-t.C:
			looked = true
		}
	}
	a.lookBy = time.Time{}
	v, err := a.l.read(ctx, a.req.Key)
	a.asked, a.own = time.Now(), v
	return v, err
}

// claimWindow is how long t's turn may stand untaken before t's caller is
// presumed gone: ClaimWindow past the look period its ticket announces.
func claimWindow(t *ticket) time.Duration { return ClaimWindow + max(t.look, 0) }

// lookPeriod is the longest a waiter with rank callers before it goes
// without looking, places places on the key (see Whose turn).
func (a *attempt) lookPeriod(rank, places int) time.Duration {
	// MaxLook under Places (maxLook is MaxLookFar at most: New).
	return min(time.Duration(max(rank/places, 1))*a.l.maxLook, MaxLookFar)
}

// nextLook is how long a waiter waits before it reads the item again:
// until its place is expected to free (see Whose turn in the package
// doc), never longer than its look period now nor than its ticket's.
func (a *attempt) nextLook(v *view, now int64, ahead []*ticket) time.Duration {
	rank := v.before(now, &a.me)
	period := a.lookPeriod(rank, max(a.req.capIn(v), 1))
	if t := v.ticketFor(a.me.id); t != nil {
		// Its ticket's, read as MaxLook at least (shorter is a hand edit).
		period = min(period, max(t.look, a.l.maxLook))
	}
	most := period
	// It expects a lease's end from its expiry when it first saw it: a
	// renewal leaves its place late, not about to free again.
	seen := make(map[string]int64, len(v.leases))
	for id, exp := range v.leases {
		if first, ok := a.firstExp[id]; ok {
			exp = min(exp, first)
		}
		seen[id] = exp
	}
	a.firstExp = seen
	if a.timesForTasks {
		// Steady looks before it passes callers presumed gone for tasks.
		most = min(most, a.l.maxLook)
	}
	if d := a.blockedFor(v, now); d > 0 {
		// It looks when that ends; its back-off goes on from where it was.
		return min(d+jitter(overdueLook), most)
	}
	// It looks when a caller whose turn came is presumed gone (a task
	// never is).
	for _, t := range ahead {
		if at, ok := a.turnSince[turnOf(t)]; ok && !t.task {
			most = min(most, max(time.Until(at.Add(claimWindow(t))), 0)+jitter(overdueLook))
		}
	}
	held, spread := a.b.meanHeld(v)
	spread = cmp.Or(spread, held/2) // none measured: half the mean
	late := func() time.Duration {
		// Half as long again each time, jittered upwards.
		d := a.look
		a.look = min(a.look*3/2, period)
		return min(d+jitter(d/4), most)
	}
	if held <= 0 {
		return late()
	}
	toolSet := v.sets[ToolAttr(a.req.Tool)]
	toolFull := a.req.ToolCap > 0 && v.liveIn(now, toolSet) >= a.req.ToolCap
	var ends, toolEnds []int64
	for id, exp := range v.leases {
		if exp >= now {
			end := a.firstExp[id] - a.req.Hold.Milliseconds() - a.l.margin.Milliseconds() + (held - spread).Milliseconds()
			ends = append(ends, end)
			if toolFull && slices.Contains(toolSet, id) {
				toolEnds = append(toolEnds, end)
			}
		}
	}
	for _, t := range ahead {
		// Its call ends a call's length from when its turn came.
		from := now
		if at, ok := a.turnSince[turnOf(t)]; ok {
			from = now - time.Since(at).Milliseconds()
		}
		ends = append(ends, from+(held-spread).Milliseconds())
		if t.tool == a.req.Tool {
			toolEnds = append(toolEnds, from+(held-spread).Milliseconds())
		}
	}
	// The callers before it take the places in the order they free.
	frees := func(ends []int64, pos int) (int64, bool) {
		if len(ends) == 0 {
			return 0, false
		}
		slices.Sort(ends)
		return ends[pos%len(ends)] + int64(pos/len(ends))*held.Milliseconds(), true
	}
	eta, ok := frees(ends, max(rank-len(ahead), 0))
	if toolFull {
		// Its tool full: after the tool's own callers, no sooner than the
		// server's place when that is full too.
		sameTool := func(t *ticket) bool { return t.tool == a.req.Tool }
		toolETA, toolOK := frees(toolEnds, max(v.beforeIf(now, &a.me, sameTool)-countIf(ahead, sameTool), 0))
		if c := a.req.capIn(v); !ok || c <= 0 || v.liveLeases(now) < c {
			eta, ok = toolETA, toolOK
		} else if toolOK {
			eta = max(eta, toolETA)
		}
	}
	if d := time.Duration(eta-now) * time.Millisecond; ok && d > 0 {
		// Its back-off goes on from where it was: a new estimate of
		// its place, or a move up the queue, does not start it again.
		return min(d, most)
	}
	return late()
}

// blockedFor is how long until what holds every place back — the hold, the
// server's pause, a pause of this caller's, an empty bucket of its own —
// lets it through (0: nothing does).
func (a *attempt) blockedFor(v *view, now int64) time.Duration {
	until := v.hold
	for _, attr := range gateAttrs(a.req.Tool, "") {
		until = max(until, v.gates[attr].entry(gateAll).until, v.gates[attr].entry(a.me.label).until)
	}
	d := time.Duration(max(until-now, 0)) * time.Millisecond
	if rl := rateLimited(v, a.req.Rates, now, nil); rl != nil {
		d = max(d, rl.RetryAfter)
	}
	return d
}

// withdrawBudget bounds each write of a withdrawal.
const withdrawBudget = 2 * time.Second

// leave takes back what this failed attempt may have left in the item
// (see Leave in the package doc), best effort.
func (a *attempt) leave(ctx context.Context) {
	if !a.joined && len(a.unsure) == 0 {
		return
	}
	send := func(u *update) error {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawBudget)
		defer cancel()
		_, err := a.l.write(wctx, a.req.Key, u, nil)
		return err
	}
	now := a.now()
	id := a.me.id
	if a.joined {
		u := newUpdate()
		u.ttl(now)
		u.removeTicket(id, a.me.label, a.n, a.task) // a.n 0: its number unknown
		// A ticket leaving, like a place freed, can change whose turn it is
		// for the callers behind it: freed tells the takes judged before.
		u.count(u.path(FreedAttr), 1)
		if err := send(u); err == nil || len(a.unsure) == 0 {
			return
		}
	}
	// A take of it may have landed unseen.
	u := newUpdate()
	u.ttl(a.now())
	lp := u.path(LeasesAttr, id)
	u.remove(lp)
	u.cond("attribute_exists(" + lp + ")")
	for _, set := range a.req.ownSets() {
		u.del(u.path(set), id)
	}
	u.count(u.path(FreedAttr), 1)
	_ = send(u)
}

// full is the refusal of a caller that does not wait, or may not, counted
// as shed: why, and when the calls held are expected to have made room
// for it.
func (a *attempt) full(v *view, now int64, queuedAhead bool, reason string) *FullError {
	a.l.stats.shed.Add(1)
	e := &FullError{Reason: reason, What: "server", Cap: a.req.capIn(v)}
	held, _ := a.b.meanHeld(v)
	if v != nil {
		e.Waiting = v.waiting(now, a.task)
		e.InUse = v.liveLeases(now)
		_, err := v.admits(a.req.Tool, "", a.me.label, now, nil)
		if f, ok := err.(*FullError); ok && e.Reason == "" {
			return f // no breaker's: a pause or the hold
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

// charge admits a call that holds nothing in the item while no waiting
// ticket needs a token of its buckets, or its buckets hold one for every
// ticket to spare (chargeRoom): one write that only pays them, made again
// from each failed answer, never resent after an unknown outcome (a token
// may be lost, never taken twice). A call that finds such a ticket on the
// item and no tokens to spare gets errWaiters, with the view it was
// judged on: it is a take instead, waiting its turn as every caller does,
// that holds nothing (see Buckets in the package doc).
func (l *Limiter) charge(ctx context.Context, req Request) (*Lease, *view, error) {
	v := l.board(req.Key).recent(time.Hour)
	fresh := false // v is an answer to this call
	for try := range maxEager {
		if err := contended(ctx, req.Key, try); err != nil {
			return nil, nil, err
		}
		if try > eagerRetries {
			// After a back-off the answer before it is out of date: a
			// charge judged from it would be refused as long as others'
			// releases come faster than the back-off.
			var err error
			if v, err = l.read(ctx, req.Key); err != nil {
				return nil, nil, err
			}
			fresh = true
		}
		var now int64
		var judged *view
		var keep map[string]int
		nv, err := l.send(ctx, req.Key, v, func(v *view) (*update, error) {
			now, judged = l.clock().UnixMilli(), v
			u := newUpdate()
			u.once = true
			var err error
			if keep, err = l.chargeRoom(u, req, v, now, fresh); err != nil {
				return nil, err
			}
			u.admit(gateAttrs(req.Tool, ""), req.Holder, "", 0, now, nil, v)
			u.charge(req.Rates, v, now, keep)
			u.ttl(now + 60_000)
			return u, nil
		}, nil)
		switch {
		case err == nil:
			l.stats.acquired.Add(1)
			ls := &Lease{l: l, req: req, id: l.newLeaseID(), charged: chargedIn(nv, req.Rates)}
			ls.setExpiry(now, time.Now().Add(req.Hold))
			return ls, nv, nil
		case errors.Is(err, errStale):
			// Refused on the process's view: judged again on the item.
			if v, err = l.read(ctx, req.Key); err != nil {
				return nil, nil, err
			}
			fresh = true
		case errors.Is(err, errCondition) && keep != nil:
			// Refused beside waiters: it waits its turn instead, as
			// without tokens to spare.
			return nil, nv, errWaiters
		case errors.Is(err, errCondition):
			v, fresh = nv, true
		default:
			return nil, judged, err
		}
	}
	return nil, nil, fmt.Errorf("lease: the rate buckets of %s kept changing", req.Key)
}

// errStale is a charge's refusal judged from its process's view, not an
// answer to it: it is judged again on the item.
var errStale = errors.New("lease: refused on an old view")

// errWaiters is a charge's finding that a waiting ticket needs a token of
// its buckets: its call waits its turn instead (Acquire).
var errWaiters = errors.New("lease: callers wait for the buckets")

// chargeRoom judges a charge of req from v at now (fresh: v answers it)
// and adds to u what it is conditioned on besides its gates and buckets,
// returning the tokens of each bucket it leaves to others: while no
// waiting ticket needs a token of its buckets, nobody joined since v (a
// running task's, on condition that its claim stands), leaving none;
// beside such a ticket, a token for every ticket and task the item may
// hold when it lands, the room for joins meanwhile split between the two
// (errWaiters when its buckets hold fewer than those seen and one more;
// charge returns it too for such a charge refused).
func (l *Limiter) chargeRoom(u *update, req Request, v *view, now int64, fresh bool) (map[string]int, error) {
	if v == nil {
		// Seen nowhere: nobody waits, callers or tasks, as a key's first
		// call finds it.
		for _, task := range []bool{false, true} {
			mp := u.path(kindAttr(task))
			u.cond("(attribute_not_exists(" + mp + ") OR size(" + mp + ") = " + u.num(0) + ")")
		}
		return nil, nil
	}
	rs := req.rules(v)
	soon := now + l.margin.Milliseconds()
	var claims []string
	waiter := false
	for _, t := range v.queue {
		if !t.live(now) || !slices.ContainsFunc(rs.buckets(t), func(b Rate) bool {
			return slices.ContainsFunc(req.Rates, func(r Rate) bool { return r.Name == b.Name })
		}) {
			continue
		}
		if v.claimed(t, soon) {
			// A task running needs no token, while its claim stands: one
			// lapsing would wait again with no write.
			claims = append(claims, t.id)
		} else {
			waiter = true
		}
	}
	refuse := func(err error) (map[string]int, error) {
		if !fresh {
			return nil, errStale
		}
		return nil, err
	}
	var keep map[string]int
	if waiter {
		least := math.MaxInt // tokens in its emptiest bucket
		for _, r := range req.Rates {
			least = min(least, r.Tokens(v.rates[RateAttr(r.Name)], now))
		}
		// Of the tokens to spare, half is room for joins (the queue's
		// and tasks'), half for others' tokens taken meanwhile.
		spare := least - 1 - len(v.queue)
		if spare < 0 || !fresh {
			return refuse(errWaiters) // from its process's view: judged again on the item
		}
		room := spare / 2
		keep = map[string]int{}
		for _, r := range req.Rates {
			keep[r.Name] = len(v.queue) + room
		}
		u.cond("size("+u.path(QueueAttr)+") <= "+u.num(int64(v.tickets(false)+room-room/2)),
			"size("+u.path(TasksAttr)+") <= "+u.num(int64(v.tickets(true)+room/2)))
	} else {
		// Nobody joined since, not merely as many waiting: one may have
		// left as another joined.
		u.cond(u.eqOrAbsent(u.path(SeqAttr), v.seq))
		for _, id := range claims {
			u.cond(u.path(LeasesAttr, id) + " >= " + u.num(soon))
		}
	}
	_, err := v.admits(req.Tool, "", req.Holder, now, nil)
	var rl *RateLimitedError
	if err == nil {
		rl = rateLimited(v, req.Rates, now, keep)
	}
	switch {
	case err == nil && rl == nil:
		return keep, nil
	case waiter:
		return refuse(errWaiters) // beside waiters it waits its turn instead
	case !fresh:
	case err != nil:
		l.stats.refused(err)
	default:
		l.stats.rateLimited.Add(1)
		err = rl
	}
	return refuse(err)
}
