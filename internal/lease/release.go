package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Outcome is what a finished call tells its breaker.
type Outcome int

const (
	// Success: the upstream answered (a tool's own isError answer
	// included). It resets the failure count; a probe's success closes
	// the breaker.
	Success Outcome = iota
	// Failure: an infrastructure failure of the upstream (timeout,
	// unreachable, broken transport, 5xx). It counts towards opening the
	// breaker; a probe's failure reopens it.
	Failure
	// Abandoned: the call ended without telling anything about the
	// upstream's health (the caller went away, the lease was lost, the
	// gateway shut down, the caller's own input was refused). The breaker
	// is left as it was; an abandoned probe only gives up being the probe.
	Abandoned
	// Unused: the call was never sent (another limit refused it). As
	// Abandoned, and the tokens its admission took go back to their
	// buckets.
	Unused
	// Overloaded: the upstream pushed back (HTTP 429, a 503 with
	// Retry-After, a JSON-RPC rate-limit error). It is alive and asks for
	// less: the breaker is left as it was (as Abandoned), and an adaptive
	// limit comes down.
	Overloaded
)

// forBreaker is what o tells a breaker: back-pressure and calls never
// made tell it nothing.
func (o Outcome) forBreaker() Outcome {
	if o == Overloaded || o == Unused {
		return Abandoned
	}
	return o
}

// timed reports whether a lease finished so measured a call's length: one
// the upstream answered or failed. An unused lease made none; an abandoned
// one may have ended before its call did, or never sent it; an overloaded
// one was pushed back at once, and counting it would shorten the waits the
// gateway advises just as the upstream asks for fewer calls.
func (o Outcome) timed() bool { return o == Success || o == Failure }

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Abandoned:
		return "abandoned"
	case Unused:
		return "unused"
	case Overloaded:
		return "overloaded"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Finish gives the place back and tells the call's outcome to its gates
// and the adaptive limit, in one write: the lease leaves the item whole,
// with its holder's ticket if one was left, and freed counts the place. It
// returns the breaker change it made, if any.
//
// It is idempotent: finishing twice, or after the lease expired and was
// purged, never frees another holder's place; those cases return
// ErrNotHeld (after the first, without a store call). A retried release
// whose earlier attempt's outcome was unknown and finds its lease gone
// while it was still Margin from expiring — which nobody else can have
// removed — counts as done: that attempt landed, and its outcome was
// counted once. (A retry answered later than that cannot tell, and says
// ErrNotHeld.)
func (ls *Lease) Finish(ctx context.Context, outcome Outcome) (Transition, error) {
	if ls.released.Swap(true) {
		return NoTransition, ErrNotHeld
	}
	l := ls.l
	if ls.noPlace {
		return NoTransition, ls.finishTokens(ctx, outcome)
	}
	b := l.board(ls.key)
	var took time.Duration
	if !ls.since.IsZero() && outcome.timed() {
		took = time.Since(ls.since)
		b.heldFor(took)
	}
	probes, purge, extras, unsure := ls.probes, true, true, false
	for tries := 1; ; tries++ {
		u, tr := ls.release(outcome, probes, purge, extras, b, took)
		v, err := l.write(ctx, ls.key, u, func() { unsure = true })
		if errors.Is(err, errCondition) {
			switch {
			case v.leases[ls.id] != 0:
				// Something else it carries — a probe's verdict, a gate's
				// change, a move of the limit, a purge — met a change
				// another write made first: make it again from the item
				// as that answer shows it, which drops what no longer
				// holds (a probe taken over, the limit moved since its
				// grant). The purge is not made again: best effort, and
				// the write that raced it purged. After maxEager tries
				// that all lost a race, the release is made with its
				// outcome to the probes it still holds alone, conditioned
				// on the lease and the probe, so the loop ends.
				probes = slices.DeleteFunc(probes, func(p gateRef) bool { return v.gates[p.attr].entry(p.key).probe != ls.id })
				purge = false
				extras = extras && tries < maxEager
				continue
			case unsure && v.leases[ls.id] == 0 && l.clock().UnixMilli() < ls.firstExp()-l.margin.Milliseconds():
				// An attempt of this write whose outcome was unknown, and
				// the lease gone before anyone, whatever their clock's
				// skew, could take it for expired: that attempt landed.
				err = nil
			default:
				return NoTransition, ErrNotHeld
			}
		}
		if err != nil {
			return NoTransition, err
		}
		l.stats.released.Add(1)
		if tr != NoTransition {
			l.stats.transitions.Add(1)
		}
		if v != nil {
			// The place it gave back may be a task's turn.
			l.startDue(ctx, ls.key, v, rulesOf(capIn(ls.ceiling, ls.adaptive, v), ls.principalCap, ls.rates))
		}
		return tr, nil
	}
}

// finishTokens ends a call that holds nothing in the item: a call never
// made gives its tokens back (sent once: nothing in the item tells a
// landed refund from one to make, so a token goes back at most once); a
// pause its upstream asked for is written (conditioned on no later pause
// standing, so safe to send again).
func (ls *Lease) finishTokens(ctx context.Context, outcome Outcome) error {
	l := ls.l
	now := l.clock().UnixMilli()
	u := newUpdate()
	switch {
	case outcome == Unused && len(ls.rates) > 0:
		u.once = true
		for _, r := range ls.rates {
			u.refund(r)
		}
	case ls.pauseUntil > 0:
		// Made again from the item each failed answer shows (the gate
		// changed), a few times.
		v, _, _ := l.board(ls.key).latest()
		if v == nil {
			v = parseItem(nil)
		}
		l.stats.released.Add(1)
		for range maxEager {
			u := newUpdate()
			u.pause(v, ls.pauseGate, ls.label, ls.pauseUntil, now)
			if len(u.sets) == 0 {
				return nil // a later pause stands
			}
			u.ttl(now)
			nv, err := l.write(ctx, ls.key, u, nil)
			if !errors.Is(err, errCondition) {
				return err
			}
			v = nv
		}
		return nil
	}
	l.stats.released.Add(1)
	if len(u.sets) == 0 {
		return nil
	}
	u.ttl(now)
	_, err := l.write(ctx, ls.key, u, nil)
	return err
}

// release is the write that gives the place back, after a call that took
// took (0: not measured, see timed), with the transition it makes. It
// moves the key's call length (call_ms) a quarter of the way towards took:
// a running mean the whole fleet's releases write; with purge, it purges
// what its process's recent view shows stale (never the buckets it gives
// tokens back to, nor the gates it writes); it tells the outcome to the
// probes it holds and, with extras, to its breaker, the pause gate and the
// adaptive limit.
func (ls *Lease) release(outcome Outcome, probes []gateRef, purge, extras bool, b *board, took time.Duration) (*update, Transition) {
	l := ls.l
	ms := l.clock().UnixMilli()
	u := newUpdate()
	lp := u.path(LeasesAttr, ls.id)
	u.remove(lp)
	u.cond("attribute_exists(" + lp + ")")
	if ls.tool != "" {
		u.del(u.path(ToolAttr(ls.tool)), ls.id)
	}
	u.del(u.path(PrincipalAttr(ls.label)), ls.id)
	u.remove(u.path(QueueAttr, ls.id), u.path(TicketsAttr, ls.id))
	if ls.task {
		u.remove(u.path(TasksAttr, ls.id))
	}
	u.del(u.path(WaitingAttr(ls.label)), ls.id)
	u.count(u.path(FreedAttr), 1)
	latest, _, _ := b.latest()
	if latest == nil {
		latest = parseItem(nil)
	}
	if v := b.recent(recentView); v != nil && purge {
		keep := []string{ls.pauseGate, WaitingAttr(ls.label)}
		for _, r := range ls.rates {
			keep = append(keep, RateAttr(r.Name))
		}
		if ls.breaker != nil {
			keep = append(keep, BreakerAttr(ls.breaker.Name))
		}
		for _, p := range probes {
			keep = append(keep, p.attr)
		}
		u.purge(v, ms, ls.id, ls.label, keep...)
	}
	if took > 0 {
		// The running mean moves from the latest value this process saw,
		// however old: it changes slowly, and starting it again from this
		// call alone, as a caller that waited longer than recentView
		// would, made it the length of whichever call ended last.
		u.set(u.path(CallAttr), u.num(callMean(latest.callMS, took)))
	}
	if outcome == Unused {
		for _, r := range ls.rates {
			u.refund(r)
		}
	}
	tr := NoTransition
	bo := outcome.forBreaker()
	switch {
	case ls.breaker != nil && len(probes) > 0:
		tr = u.outcome(ls.breaker, latest, ls.id, ls.label, probes, bo, ms)
	case ls.breaker != nil && extras && bo != Abandoned:
		tr = u.outcome(ls.breaker, latest, ls.id, ls.label, nil, bo, ms)
	case len(probes) > 0:
		// A probe of a breaker its request no longer names: it gives up
		// being the probe.
		for _, p := range probes {
			ep := u.path(p.attr, p.key)
			u.cond(ep + "." + u.path(gateProbe) + " = " + u.str(ls.id))
			u.remove(ep+"."+u.path(gateProbe), ep+"."+u.path(gateProbeExp))
		}
	}
	if extras {
		if ls.pauseUntil > 0 {
			u.pause(latest, ls.pauseGate, ls.label, ls.pauseUntil, ms)
		}
		ls.adapt(u, latest, outcome, took, ms)
	}
	u.ttl(ms)
	return u, tr
}

// callMean moves mean, how long calls on the key last in ms (0: not
// known), a quarter of the way towards took: a running arithmetic mean,
// the expected length its readers need (a queue's wait is the sum of the
// calls before it, and a geometric mean, far below it for skewed lengths,
// would have refused callers told to come back too early).
func callMean(mean int64, took time.Duration) int64 {
	t := max(took.Milliseconds(), 1)
	if mean <= 0 {
		return t
	}
	return max(mean+(t-mean)/4, 1)
}

// Renew extends the lease so it expires hold + Margin from now, only if it
// is still held with an expiry this holder wrote: a renewal never brings
// back a lease that was released or purged (ErrNotHeld). A probe lease
// extends its probe too. A renewal whose answer was lost and whose retry
// finds the new expiry in place counts as done.
func (ls *Lease) Renew(ctx context.Context, hold time.Duration) error {
	if ls.released.Load() {
		return ErrNotHeld
	}
	l := ls.l
	localNow := time.Now()
	exp := l.clock().Add(hold + l.margin).UnixMilli()
	if ls.noPlace {
		ls.setExpiry(exp, localNow.Add(hold))
		return nil
	}
	u := newUpdate()
	lp := u.path(LeasesAttr, ls.id)
	u.set(lp, u.num(exp))
	u.cond(ls.heldAs(u, lp))
	for _, p := range ls.probes {
		// Its probe lives as long as its lease, when it is still the
		// probe (else it renews without it).
		u.set(u.path(p.attr, p.key, gateProbeExp), u.num(exp))
		u.cond(u.path(p.attr, p.key, gateProbe) + " = " + u.str(ls.id))
	}
	u.ttl(exp)
	unsure := false
	v, err := l.write(ctx, ls.key, u, func() { unsure = true })
	switch {
	case errors.Is(err, errCondition) && v.leases[ls.id] == exp:
		// an earlier attempt landed
	case errors.Is(err, errCondition) && slices.Contains(ls.exps, v.leases[ls.id]) && len(ls.probes) > 0:
		// The lease is as it was, but no longer the probe of each entry:
		// it renews without them.
		ls.probes = slices.DeleteFunc(ls.probes, func(p gateRef) bool { return v.gates[p.attr].entry(p.key).probe != ls.id })
		return ls.Renew(ctx, hold)
	case errors.Is(err, errCondition):
		return ErrNotHeld
	case err != nil:
		if unsure {
			// It may have landed: the next renewal accepts the expiry
			// last known to be stored or any of the latest it may have
			// set (an older one that landed makes it fail, and the call
			// stop: never a lease kept unknowingly).
			ls.exps = append(ls.exps, exp)
			if len(ls.exps) > maxUnsureExps+1 {
				ls.exps = append(ls.exps[:1], ls.exps[len(ls.exps)-maxUnsureExps:]...)
			}
		}
		return fmt.Errorf("lease: renew %s: %w", ls.id, err)
	}
	ls.setExpiry(exp, localNow.Add(hold))
	return nil
}

// heldAs is the condition that the lease at path still holds one of the
// expiries this holder may have written.
func (ls *Lease) heldAs(u *update, path string) string {
	if len(ls.exps) == 1 {
		return path + " = " + u.num(ls.exps[0])
	}
	c := "("
	for i, e := range ls.exps {
		if i > 0 {
			c += " OR "
		}
		c += path + " = " + u.num(e)
	}
	return c + ")"
}

func (ls *Lease) setExpiry(exp int64, deadline time.Time) {
	ls.exps = []int64{exp}
	ls.Expiry = time.UnixMilli(exp)
	ls.CallDeadline = deadline
}

// maxUnsureExps bounds the expiries of renewals whose outcome was unknown
// that a lease keeps beside the one known to be stored.
const maxUnsureExps = 3

// ErrLeaseLost is the cause with which KeepAlive ends its context when the
// lease could not be kept.
var ErrLeaseLost = errors.New("lease lost")

// renewRetry is the wait before a failed renewal is tried again.
const renewRetry = 200 * time.Millisecond

// KeepAlive keeps ls for an exchange that runs until end. When the
// exchange may outlast the lease, it renews the lease halfway through each
// term, for hold() at a time (or what is left until end), and ends the
// returned context (cause ErrLeaseLost) if the lease is gone or cannot be
// renewed before it lapses, calling lost with why: no call runs on an
// expired lease. A renewal that fails for a store error is tried again
// every renewRetry (jittered) while the lease holds. Once a renewal covers
// end, it stops renewing. The returned stop function ends the renewals and
// waits for them.
func (ls *Lease) KeepAlive(ctx context.Context, end time.Time, hold func() time.Duration, lost func(error)) (context.Context, func()) {
	if !ls.CallDeadline.Before(end) {
		return ctx, func() {}
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := ls.CallDeadline
		term := hold()
		for {
			t := time.NewTimer(time.Until(deadline.Add(-term / 2)))
			select {
			case <-callCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			for {
				left := time.Until(end)
				if left <= 0 {
					return
				}
				term = min(hold(), left)
				rctx, rcancel := context.WithDeadline(context.WithoutCancel(callCtx), deadline)
				err := ls.Renew(rctx, term)
				rcancel()
				if err == nil {
					deadline = ls.CallDeadline
					break
				}
				wait := jitter(renewRetry)
				if errors.Is(err, ErrNotHeld) || !time.Now().Add(wait).Before(deadline) {
					if lost != nil {
						lost(err)
					}
					cancel(ErrLeaseLost)
					return
				}
				// A store hiccup: try again, while the lease holds.
				select {
				case <-callCtx.Done():
					return
				case <-time.After(wait):
				}
			}
			if term >= time.Until(end) {
				<-callCtx.Done()
				return
			}
		}
	}()
	return callCtx, func() { cancel(nil); <-done }
}

// PauseFor asks that no call of the lease's principal start on its scope
// (the server, or its tool for a server that pauses per tool) for d, at
// most the request's MaxPause: its upstream answered with a Retry-After.
// The release writes it; it stops everyone when another principal's pause
// stands too.
func (ls *Lease) PauseFor(d time.Duration) {
	if d <= 0 {
		return
	}
	ls.pauseUntil = ls.l.clock().Add(min(d, ls.maxPause)).UnixMilli()
}
