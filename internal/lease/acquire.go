package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Acquire takes a place for req in one conditional write, unless callers
// waiting on the key come first. When it finds no place it fails with
// *FullError or, if req.Wait is positive, puts a ticket in the queue and
// waits until the item shows it is its turn and it takes the place, until
// req.Wait passes (*WaitTimeoutError), or until ctx ends. A breaker that is
// open for the caller refuses it (*CircuitOpenError).
func (l *Limiter) Acquire(ctx context.Context, req Request) (*Lease, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	if !req.capped() {
		return l.acquireNoPlace(ctx, req)
	}
	a := &attempt{l: l, req: req, start: time.Now(), b: l.board(req.Key)}
	a.me = asker{id: l.newLeaseID(), label: req.Holder, tool: req.Tool, toolCap: req.ToolCap}
	if req.Breaker != nil {
		a.me.breaker = req.Breaker.Name
	}
	ls, err := a.run(ctx)
	if err != nil {
		a.withdraw(ctx)
		return nil, err
	}
	ls.Waited, ls.since, ls.QueuedBehind = time.Since(a.start), time.Now(), a.behind
	l.stats.acquired.Add(1)
	if ls.probe {
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
	// set once a join was sent, whether or not it landed.
	n      int64
	joined bool
	// behind is how many callers were ahead of it when it last joined.
	behind int
	// unsure is the latest instant until which a take or join of this
	// attempt whose outcome was unknown could still create an entry.
	unsure int64
	// maps: a view showed the item with its maps.
	maps bool
	// charged: a write of it that took its tokens landed.
	charged bool
	// asked is when the last request of this attempt was sent; look is the
	// next wait for a place that was expected to be free already.
	asked time.Time
	look  time.Duration
	// turnSince is, for each ticket whose turn had come at this attempt's
	// looks, when it first saw so: past ClaimWindow, still there with its
	// turn come, its caller is presumed gone.
	turnSince map[string]time.Time
	// failures counts the store errors in a row while it waits; takeErrs
	// the takes in a row that met one.
	failures int
	takeErrs int
}

func (a *attempt) now() int64 { return a.l.clock().UnixMilli() }

func (a *attempt) caps(v *view) caps {
	return caps{cap: a.req.capIn(v), principalCap: a.req.PrincipalCap}
}

func (a *attempt) run(ctx context.Context) (*Lease, error) {
	waitUntil := a.start.Add(max(a.req.Wait, 0))
	if dl, ok := ctx.Deadline(); ok && dl.Before(waitUntil) {
		waitUntil = dl
	}
	if !a.req.CallBy.IsZero() && a.req.CallBy.Before(waitUntil) {
		waitUntil = a.req.CallBy
	}
	// A recent view showing a queue saves a first write that would fail.
	v := a.b.recent(recentView)
	if v != nil && len(v.queue) == 0 {
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
			a.maps = true
			t := v.ticketFor(a.me.id)
			switch {
			case t != nil:
				// Its join landed, and took its tokens with it.
				a.n, a.charged = t.n, true
			case a.n != 0:
				// Its ticket is gone: presumed gone itself after its turn
				// came and went, or purged past its deadline.
				a.n = 0
			}
			if br := a.req.Breaker; br != nil {
				if err := a.l.refusal(v.breakers[br.Name], br.Name, a.me.label); err != nil {
					return nil, err
				}
			}
			if !a.charged && a.n == 0 {
				if err := rateLimited(v, a.req.Rates, now); err != nil {
					a.l.stats.rateLimited.Add(1)
					return nil, err
				}
			}
			if a.clogged(v, now) {
				// Only stale leases hold the room of one of its own sets:
				// clear them with a write of their own.
				nv, err := a.l.purgeAll(ctx, a.req.Key, v)
				if err != nil {
					return nil, err
				}
				v = nv
				continue
			}
		}
		served, ahead, bypass := a.decide(v, now)
		var err error
		switch {
		case served && eager < maxEager:
			eager++
			var ls *Lease
			if ls, v, err = a.take(ctx, v, ahead, bypass, now); ls != nil {
				return ls, err
			}
			if err == nil {
				continue
			}
			// A store error: a waiter keeps its ticket, as below.
		case served:
			// The item keeps changing under it: look again shortly.
			v, err = a.wait(ctx, v, jitter(2*writeMinBackoff), waitUntil)
		case a.req.Wait <= 0:
			a.l.stats.shed.Add(1)
			return nil, a.full(v, now, len(ahead) > 0, "")
		case a.n == 0 && a.req.MaxQueued <= 0:
			a.l.stats.shed.Add(1)
			return nil, a.full(v, now, false, QueueFull)
		case a.n == 0:
			v, err = a.join(ctx, v)
		case v == nil:
			v, err = a.l.read(ctx, a.req.Key)
		default:
			v, err = a.wait(ctx, v, a.nextLook(v, now, ahead), waitUntil)
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
	return !errors.As(err, &full) && !errors.As(err, &wt) && !errors.As(err, &open) &&
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
// an uncontended caller assumes it is), which tickets' turn comes before
// it, and, when some of those have had their turn for ClaimWindow without
// taking their place, those it may take the place from (then ahead are the
// tickets whose turn comes before it without them).
func (a *attempt) decide(v *view, now int64) (served bool, ahead, bypass []*ticket) {
	if v == nil {
		return a.n == 0 && !a.joined, nil, nil
	}
	served, ahead = v.turn(now, &a.me, a.caps(v), nil)
	since := map[string]time.Time{}
	skip := map[string]bool{}
	for _, t := range ahead {
		since[t.id] = time.Now()
		if at, ok := a.turnSince[t.id]; ok {
			since[t.id] = at
		}
		if time.Since(since[t.id]) >= ClaimWindow {
			skip[t.id] = true
			bypass = append(bypass, t)
		}
	}
	a.turnSince = since
	if served || len(bypass) == 0 {
		return served, ahead, nil
	}
	if served, rest := v.turn(now, &a.me, a.caps(v), skip); served {
		return true, rest, bypass
	}
	return false, ahead, nil
}

// clogged reports whether stale leases are in a set the caller takes a
// place in: a take cannot purge them (it adds to that set), so they would
// take room from it, and from the key's cap, until another write does.
func (a *attempt) clogged(v *view, now int64) bool {
	for _, s := range a.ownSets() {
		if members := v.sets[s]; len(members) > v.live(now, members, false) {
			return true
		}
	}
	return false
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

// charge adds the taking of the caller's tokens to u, unless a write of it
// took them already. With no view, the buckets' arrival times are the last
// this process saw: they only choose the form of the write, whose
// conditions check them.
func (a *attempt) charge(u *update, v *view, now int64) {
	if a.charged || len(a.req.Rates) == 0 {
		return
	}
	if v == nil {
		v, _, _ = a.b.latest()
	}
	for _, r := range a.req.Rates {
		tat := int64(0)
		if v != nil {
			tat = v.rates[RateAttr(r.Name)]
		}
		u.charge(r, tat, now)
	}
}

// acquireNoPlace admits a call that takes no place: it takes its tokens,
// then asks its breaker; a breaker that refuses it gets its tokens back.
func (l *Limiter) acquireNoPlace(ctx context.Context, req Request) (*Lease, error) {
	var tokens *Lease
	if len(req.Rates) > 0 {
		var err error
		if tokens, err = l.acquireTokens(ctx, req); err != nil || req.Breaker == nil {
			return tokens, err
		}
	}
	ls, err := l.acquireBreaker(ctx, req)
	if err != nil && tokens != nil {
		_, _ = tokens.Finish(context.WithoutCancel(ctx), Unused)
	}
	if ls != nil && tokens != nil {
		ls.rates = req.Rates
	}
	return ls, err
}

// reserved counts the tickets of ahead that take a place in set.
func (a *attempt) reserved(set string, ahead []*ticket) int {
	n := 0
	for _, t := range ahead {
		if set == ToolAttr(t.tool) && t.toolCap > 0 || set == PrincipalAttr(t.label) {
			n++
		}
	}
	return n
}

// purgeAll removes what v shows stale, in one write of its own.
func (l *Limiter) purgeAll(ctx context.Context, key string, v *view) (*view, error) {
	u := newUpdate()
	now := l.clock().UnixMilli()
	u.purge(v, now, "")
	if len(u.conds) == 0 {
		return v, nil
	}
	u.ttl(now)
	l.stats.purged.Add(1)
	nv, err := l.write(ctx, key, u, nil)
	if errors.Is(err, errCondition) {
		err = nil
	}
	return nv, err
}

// take makes the conditional write that gives this caller a place: its
// lease in leases and its sets, its ticket (if any) out, and the tickets
// of bypass — callers presumed gone — out, purging what v shows stale. It
// leaves room in every cap for the tickets whose turn comes before it
// (ahead), which may not have taken their places yet: two callers that
// each see themselves next after those never take the same one. It
// returns the lease, or the item as it is now when the write found it was
// not this caller's turn after all.
func (a *attempt) take(ctx context.Context, v *view, ahead, bypass []*ticket, now int64) (*Lease, *view, error) {
	hold := a.req.hold(time.Now())
	if hold <= 0 {
		return nil, nil, &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	// The write is made for now, the instant its turn was judged at (its
	// purge, pause check, breaker election and expiry alike): judged at
	// one instant and made for a later one, a caller unblocked by time
	// alone in between (a breaker's open period ending, a lease lapsing)
	// could be passed with no condition to catch it. The expiry may be a
	// little early by the time the write lands: only safer.
	exp := now + (hold + a.l.margin).Milliseconds()
	id := a.me.id
	u := newUpdate()
	p := u.purge(v, now, id, append(a.ownSets(), a.rateAttrs()...)...)
	a.charge(u, v, now)
	lp := u.path(LeasesAttr, id)
	u.set(lp, u.num(exp))
	u.cond("attribute_not_exists(" + lp + ")")
	a.capConds(u, v, p.leases, len(ahead))
	notPaused(u, now)
	if tc := a.req.ToolCap; tc > 0 {
		tp := u.path(ToolAttr(a.req.Tool))
		u.add(tp, id)
		u.cond("(attribute_not_exists(" + tp + ") OR size(" + tp + ") < " + u.num(int64(tc-a.reserved(ToolAttr(a.req.Tool), ahead))) + ")")
	}
	// Its principal's set: where it stands in the queue depends on how
	// many places its principal holds, so with other principals waiting,
	// that must be as it saw; so must it be for the principal's cap. With no view, it
	// knows of no queue (and checks there is none), and its principal
	// must have room.
	pp := u.path(PrincipalAttr(a.me.label))
	u.add(pp, id)
	mixed := v != nil && (a.req.ToolCap > 0 || slices.ContainsFunc(v.queue, func(t *ticket) bool {
		return t.id != id && t.live(now) && (t.label != a.me.label || t.toolCap > 0)
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
	qp, tp := u.path(QueueAttr, id), u.path(TicketsAttr, id)
	if a.n != 0 {
		u.cond(qp + " = " + u.num(a.n))
		u.remove(qp)
		a.endTicket(u, now)
	} else {
		u.cond("attribute_not_exists("+qp+")", "attribute_not_exists("+tp+")")
		if v == nil {
			u.cond("size(" + u.path(QueueAttr) + ") = " + u.num(0))
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
		if mixed || a.req.PrincipalCap > 0 || a.passedOver(v, now, ahead, bypass) {
			// No place was freed that might change whose turn it is. When
			// every caller waiting is of its own principal and none waits
			// for a capped tool, they are served by ticket number alone,
			// and a place freed only makes more room — unless one before
			// it was passed over (its breaker's probe was running), which
			// a probe's verdict, a release, may unblock.
			u.cond(u.eqOrAbsent(u.path(FreedAttr), v.freed))
		}
	}
	for _, t := range bypass {
		bq := u.path(QueueAttr, t.id)
		u.remove(bq, u.path(TicketsAttr, t.id))
		u.cond(bq + " = " + u.num(t.n))
		u.count(u.path(FreedAttr), 1)
	}
	probe := false
	if br := a.req.Breaker; br != nil {
		var st *breakerState
		if v != nil {
			s := v.breakers[br.Name]
			st = &s
		}
		probe = u.admit(br, st, id, a.me.label, exp, now)
	}
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
	nv, err := a.l.write(wctx, a.req.Key, u, func() { a.unsure = max(a.unsure, exp) })
	if err == nil {
		a.n, a.charged = 0, true
		ls, err := a.lease(ctx, exp, nv)
		if ls != nil {
			ls.probe = probe
		}
		return ls, nil, err
	}
	if errors.Is(err, errCondition) {
		a.takeErrs = 0
	} else {
		// Look again, until an answer or the budget of errors in a row
		// is spent: a caller that gives up while its take may land needs
		// its tombstone written, which the store may refuse as well.
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
	// Not landed, unless the item shows it did (the caller's loop looks).
	return nil, nv, nil
}

// passedOver reports whether v shows a live ticket numbered before this
// caller's (a newcomer's is the newest) that gets no place in its turn:
// neither ahead of it nor presumed gone (bypass), so passed over as a
// caller that cannot use a place.
func (a *attempt) passedOver(v *view, now int64, ahead, bypass []*ticket) bool {
	mine := a.n
	if mine == 0 {
		mine = math.MaxInt64
	}
	handed := func(t *ticket) bool {
		has := func(x *ticket) bool { return x.id == t.id }
		return slices.ContainsFunc(ahead, has) || slices.ContainsFunc(bypass, has)
	}
	return slices.ContainsFunc(v.queue, func(t *ticket) bool {
		return t.id != a.me.id && t.live(now) && t.n < mine && !handed(t)
	})
}

// judgedKey carries, in the context of a take judged from a view, that
// view's seq: the fault simulation checks the order of places against the
// callers the taker could see.
type judgedKey struct{}

// endTicket adds to u the end of this caller's ticket: removed or, while a
// write of it may still land and create something live, a tombstone.
func (a *attempt) endTicket(u *update, now int64) {
	endTicket(u, a.me.id, a.unsure, now, a.l.margin)
}

// endTicket ends ticket id in u. unsure is the latest instant until which
// a write of its caller that may still land would create something live
// (on its caller's clock); the tombstone lasts Margin past it, so no clock
// within the margin purges it while that write could still matter.
func endTicket(u *update, id string, unsure, now int64, margin time.Duration) {
	tp := u.path(TicketsAttr, id)
	// A write landing late creates an entry live until unsure on its
	// caller's clock, so live to a clock up to margin behind until the
	// tombstone's end: it is needed until then, not only until unsure.
	if until := unsure + margin.Milliseconds(); until >= now {
		u.set(tp, u.value(&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{ticketTomb: number(until)}}))
		return
	}
	u.remove(tp)
}

// lease completes the acquire with the lease the item shows this attempt
// holding, expiring at exp. A place with no time left for the call is
// given back.
func (a *attempt) lease(ctx context.Context, exp int64, v *view) (*Lease, error) {
	localNow := time.Now()
	deadline := localNow.Add(time.UnixMilli(exp).Sub(a.l.clock()) - a.l.margin)
	if !a.req.CallBy.IsZero() && a.req.CallBy.Before(deadline) {
		deadline = a.req.CallBy
	}
	a.charged = true // the write that gave it the place, or queued it, took the tokens
	ls := &Lease{l: a.l, key: a.req.Key, id: a.me.id, exps: []int64{exp}, unsure: a.unsure, breaker: a.req.Breaker, label: a.me.label, rates: a.req.Rates,
		Expiry: time.UnixMilli(exp), CallDeadline: deadline, InFlight: v.live(a.now(), nil, true), Limit: a.req.capIn(v),
		ceiling: a.req.Cap, adaptive: a.req.Adaptive, toolName: a.req.Tool, grantMS: a.now()}
	if a.req.ToolCap > 0 {
		ls.tool = a.req.Tool
	}
	if br := a.req.Breaker; br != nil {
		ls.probe = v.breakers[br.Name].probe == a.me.id
	}
	if !deadline.After(localNow) {
		_, _ = ls.Finish(ctx, Abandoned)
		return nil, &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	return ls, nil
}

// join puts this caller's ticket in the queue: its number from seq, its
// deadline, and the tool and cap it waits for, on condition that the queue
// has room, and that the caller neither waits nor holds a place already.
func (a *attempt) join(ctx context.Context, v *view) (*view, error) {
	now := a.now()
	id := a.me.id
	// Others' clocks may be ahead of this one by up to Margin: the ticket
	// lives that much past its caller's own deadline, so that nobody takes
	// it for gone while its caller still waits.
	deadline := now + time.Until(a.waitEnd()).Milliseconds() + a.l.margin.Milliseconds()
	u := newUpdate()
	p := u.purge(v, now, id, a.rateAttrs()...)
	a.charge(u, v, now)
	sp, qp, tp := u.path(SeqAttr), u.path(QueueAttr, id), u.path(TicketsAttr, id)
	next := "if_not_exists(" + sp + ", " + u.num(0) + ") + " + u.num(1)
	u.set(sp, next)
	u.set(qp, next)
	info := map[string]types.AttributeValue{ticketLabel: &types.AttributeValueMemberS{Value: a.me.label}, ticketDeadline: number(deadline)}
	if a.req.Tool != "" {
		info[ticketTool] = &types.AttributeValueMemberS{Value: a.req.Tool}
	}
	if a.req.ToolCap > 0 {
		info[ticketToolCap] = number(int64(a.req.ToolCap))
	}
	u.set(tp, u.value(&types.AttributeValueMemberM{Value: info}))
	u.cond("attribute_not_exists("+qp+")", "attribute_not_exists("+tp+")", "attribute_not_exists("+u.path(LeasesAttr, id)+")")
	u.cond("size(" + u.path(QueueAttr) + ") < " + u.num(int64(a.req.MaxQueued+p.queue)))
	u.ttl(deadline)
	a.joined, a.asked = true, time.Now()
	a.l.stats.tickets.Add(1)
	nv, err := a.l.write(ctx, a.req.Key, u, func() { a.unsure = max(a.unsure, deadline) })
	if nv != nil && nv.ticketFor(id) != nil {
		// The item as its join left it (or as an earlier send of it did).
		a.behind = nv.before(a.now(), &a.me)
	}
	if err == nil {
		a.charged = true
	}
	if err == nil || !errors.Is(err, errCondition) {
		return nv, err
	}
	if nv.ticketFor(id) != nil || nv.leases[id] != 0 {
		a.charged = true
		return nv, nil // an earlier attempt of it landed
	}
	if !nv.hasMaps {
		return nil, a.l.create(ctx, a.req.Key)
	}
	if nv.waiting(a.now()) >= a.req.MaxQueued {
		a.l.stats.shed.Add(1)
		return nil, a.full(nv, a.now(), false, QueueFull)
	}
	return nv, nil
}

func (a *attempt) waitEnd() time.Time {
	end := a.start.Add(a.req.Wait)
	if !a.req.CallBy.IsZero() && a.req.CallBy.Before(end) {
		end = a.req.CallBy
	}
	return end
}

// wait holds a queued caller until there is news of the item from this
// process, or for look, then looks itself.
func (a *attempt) wait(ctx context.Context, v *view, look time.Duration, until time.Time) (*view, error) {
	if !time.Now().Before(until) {
		a.l.stats.waitTimeouts.Add(1)
		return nil, &WaitTimeoutError{Waited: time.Since(a.start)}
	}
	latest, at, changed := a.b.latest()
	if latest != nil && latest != v && at.After(a.asked) {
		return latest, nil // news from another request here
	}
	t := time.NewTimer(max(min(look, a.l.maxLook, time.Until(until)), 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("lease: waiting for %s: %w", a.req.Key, ctx.Err())
	case <-changed:
		latest, _, _ := a.b.latest()
		return latest, nil
	case <-t.C:
	}
	a.asked = time.Now()
	return a.l.read(ctx, a.req.Key)
}

// nextLook is how long a waiter waits before it looks at the item again:
// until its place may first free. Each place frees when its call should
// end — a lease's from its expiry, less its margin and this caller's hold,
// plus how long calls here last (from the item, or this process), less
// their spread; a place whose turn came to a caller that has not taken it
// yet, a call's length from now — and the callers before it take the
// places in the order they free, a round of calls per place. While the
// place is late it looks every eighth of the calls' spread (at least
// 5 ms), growing by half up to 50 ms. It never waits longer than MaxLook,
// so that, its turn come, it takes its place well within ClaimWindow.
func (a *attempt) nextLook(v *view, now int64, ahead []*ticket) time.Duration {
	held, spread := a.b.meanHeld()
	if v.callMS > 0 {
		held = time.Duration(v.callMS) * time.Millisecond
	}
	if spread == 0 {
		spread = held / 2
	}
	overdue := func(most time.Duration) time.Duration {
		a.look = min(max(a.look*3/2, overdueLook, spread/8), most)
		return a.look
	}
	if v.paused > now {
		// Nobody takes a place before the pause ends.
		a.look = 0
		return time.Duration(v.paused-now)*time.Millisecond + jitter(overdueLook)
	}
	if held <= 0 {
		return jitter(overdue(2 * writeMinBackoff))
	}
	// When each place is expected to free: a lease's when its call should
	// end; a place whose turn came to a caller that has yet to take it,
	// when that caller's call should.
	var ends []int64
	for _, exp := range v.leases {
		if exp >= now {
			ends = append(ends, exp-a.req.Hold.Milliseconds()-a.l.margin.Milliseconds()+(held-spread).Milliseconds())
		}
	}
	for range ahead {
		ends = append(ends, now+(held-spread).Milliseconds())
	}
	slices.Sort(ends)
	if pos := max(v.before(now, &a.me)-len(ahead), 0); len(ends) > 0 {
		eta := ends[pos%len(ends)] + int64(pos/len(ends))*held.Milliseconds()
		if d := time.Duration(eta-now) * time.Millisecond; d > 0 {
			a.look = 0
			return d
		}
	}
	return overdue(2 * writeMinBackoff)
}

// withdrawBudget bounds each write of a withdrawal.
const withdrawBudget = 2 * time.Second

// withdraw takes back what this failed attempt may have written: its
// ticket, and a lease it took unseen. While a write of it may still land,
// its ticket becomes a tombstone that write is conditioned against. Best
// effort: a ticket left behind is passed over once its deadline passes, a
// lease expires.
func (a *attempt) withdraw(ctx context.Context) {
	if !a.joined && a.unsure == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	now := a.now()
	id := a.me.id
	u := newUpdate()
	u.ttl(now)
	u.remove(u.path(QueueAttr, id))
	a.endTicket(u, now)
	// A ticket leaving, like a place freed, can change whose turn it is
	// for the callers behind it: freed tells the takes judged before.
	u.count(u.path(FreedAttr), 1)
	if a.unsure != 0 {
		// A take of it may have landed unseen.
		u.remove(u.path(LeasesAttr, id))
		for _, set := range a.ownSets() {
			u.del(u.path(set), id)
		}
	}
	if !a.maps {
		// As far as it saw, the item has no maps yet, for a tombstone to go
		// in: a write of this caller still in flight would find them made
		// by another. A create that failed may have landed: the tombstone
		// is tried all the same (the store refuses it if not).
		cctx, cancel := context.WithTimeout(ctx, withdrawBudget)
		_ = a.l.create(cctx, a.req.Key)
		cancel()
	}
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
		e.Waiting = v.waiting(now)
		e.InUse = v.live(now, nil, true)
		if v.paused > now && e.Reason == "" {
			e.Reason, e.RetryAfter = Paused, time.Duration(v.paused-now)*time.Millisecond
			return e
		}
		switch {
		case e.Cap > 0 && e.InUse >= e.Cap:
		case a.req.ToolCap > 0 && v.live(now, v.sets[ToolAttr(a.req.Tool)], false) >= a.req.ToolCap:
			e.What, e.Cap, e.InUse = "tool", a.req.ToolCap, v.live(now, v.sets[ToolAttr(a.req.Tool)], false)
		case a.req.PrincipalCap > 0 && v.live(now, v.sets[PrincipalAttr(a.me.label)], false) >= a.req.PrincipalCap:
			e.What, e.Cap, e.InUse = "principal", a.req.PrincipalCap, v.live(now, v.sets[PrincipalAttr(a.me.label)], false)
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
