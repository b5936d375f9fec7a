package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Outcome is what a finished call tells its gates and adaptive limit.
type Outcome int

const (
	// Success: the upstream answered (a tool's isError answer included).
	// It resets the failure count; a probe's success closes the breaker.
	Success Outcome = iota
	// Failure: the upstream failed (timeout, unreachable, broken
	// transport, 5xx). It counts towards opening the breaker; a probe's
	// failure reopens it.
	Failure
	// Abandoned: the call ended telling nothing of the upstream's health
	// (the caller went away, the lease was lost, the gateway shut down,
	// the input was refused). An abandoned probe gives up being the probe.
	Abandoned
	// Unused: the call was never sent; as Abandoned, and its tokens go
	// back to their buckets.
	Unused
	// Overloaded: the upstream pushed back (429, a 503 with Retry-After, a
	// rate-limit error): as Abandoned for the breaker, and an adaptive
	// limit comes down.
	Overloaded
)

func (o Outcome) String() string {
	if o >= Success && o <= Overloaded {
		return [...]string{"success", "failure", "abandoned", "unused", "overloaded"}[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Finish gives the place back and tells the call's outcome to its gates
// and the adaptive limit, in one write (see Release in the package doc),
// returning the breaker change it made. Finishing twice, or after the
// lease was purged, returns ErrNotHeld; a retry after an unknown outcome
// that finds the lease gone (a task's: or claimed again) still Margin
// from expiring counts as done.
func (ls *Lease) Finish(ctx context.Context, outcome Outcome) (Transition, error) {
	return ls.finish(ctx, outcome, false)
}

// Unclaim gives a task's place back unused, as Finish(Unused) does, but
// leaves its ticket waiting again at its number, with no start, and
// starts the next worker when its turn has come (see Tasks in the
// package doc): for a worker that claimed the place and made no call (its
// invocation's time too short, its record not marked). A ticket gone
// meanwhile (past its deadline) leaves it a plain release, unless an
// attempt of its own had an unknown outcome: then the lease, which may be
// a later claim's of the same expiry, is left (ErrNotHeld). ErrNotHeld as
// Finish; a lease that is no task's is refused.
func (ls *Lease) Unclaim(ctx context.Context) error {
	if !ls.task {
		return errors.New("lease: only a task's lease is unclaimed")
	}
	_, err := ls.finish(ctx, Unused, true)
	return err
}

// finish is Finish, keeping a task's ticket with keep (Unclaim).
func (ls *Lease) finish(ctx context.Context, outcome Outcome, keep bool) (Transition, error) {
	if ls.released.Swap(true) {
		return NoTransition, ErrNotHeld
	}
	l := ls.l
	if !ls.req.holds() {
		return NoTransition, ls.finishTokens(ctx, outcome)
	}
	b := l.board(ls.req.Key)
	var took time.Duration
	// The call's length is measured when the upstream answered or failed
	// (an overloaded one, pushed back at once, would shorten the advised
	// waits just as the upstream asks for fewer calls).
	if !ls.since.IsZero() && (outcome == Success || outcome == Failure) {
		took = time.Since(ls.since)
		b.heldFor(took)
	}
	probes, purge, extras, unsure := ls.probes, true, true, false
	for tries := 1; ; tries++ {
		var tr Transition
		v, err := l.send(ctx, ls.req.Key, nil, func(*view) (*update, error) {
			var u *update
			u, tr = ls.release(outcome, probes, purge, extras, keep, b, took)
			return u, nil
		}, func() { unsure = true })
		if errors.Is(err, errCondition) {
			// No ticket left to keep: after an unknown outcome the lease
			// may be a later claim's of the same expiry, which only the
			// ticket told apart.
			lost := keep && v.ticketFor(ls.id) == nil
			switch {
			case lost && v.leases[ls.id] != 0 && !unsure:
				// Released as any other.
				keep = false
				continue
			case v.leases[ls.id] != 0 && (!ls.task || ls.heldIn(v)) && !lost:
				// Made again from the answer: no purge, and after maxEager
				// tries only its probes' verdicts.
				probes = v.stillProbes(probes, ls.id)
				purge = false
				extras = extras && tries < maxEager
				if err := contended(ctx, ls.req.Key, tries); err != nil {
					return NoTransition, err
				}
				continue
			case unsure && (v.leases[ls.id] == 0 || ls.task && !ls.heldIn(v)) && l.clock().UnixMilli() < ls.firstExp()-l.margin.Milliseconds():
				// Gone while nobody could take it for expired (a task's
				// place since claimed again, its ticket kept): it landed.
				err = nil
			default:
				// Not its own (or, lost, maybe not): its write may have
				// landed unseen all the same, and the place it gave back be
				// a task's turn.
				_ = l.startDue(ctx, ls.req.Key, v, ls.req.rules(v))
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
		// The place it gave back may be a task's turn.
		_ = l.startDue(ctx, ls.req.Key, v, ls.req.rules(v))
		return tr, nil
	}
}

// finishTokens ends a call that holds nothing in the item: a call never
// made gives its tokens back (sent once), else a pause its upstream asked
// for is written.
func (ls *Lease) finishTokens(ctx context.Context, outcome Outcome) error {
	l := ls.l
	l.stats.released.Add(1)
	refund := outcome == Unused && len(ls.req.Rates) > 0
	if !refund && ls.pauseUntil == 0 {
		return nil
	}
	v, _, _ := l.board(ls.req.Key).latest()
	for tries := range maxEager {
		if err := contended(ctx, ls.req.Key, tries); err != nil {
			return err
		}
		nv, err := l.send(ctx, ls.req.Key, v, func(v *view) (*update, error) {
			if v == nil {
				v = parseItem(nil)
			}
			// Each try is judged at its own moment: whether another
			// principal's entry is closed, and so whether its pause
			// closes everyone's, is a question of now, and a try made
			// again after a late answer asks it later; so is what of a
			// token is still to come.
			now := l.clock().UnixMilli()
			u := newUpdate()
			// A refund is sent once: a bucket or freed written by hand
			// refuses it as invalid (nothing applied), and it is made
			// again once mended.
			u.once = refund
			// Either may make it another's turn: a token back, or its
			// principal's waiters held back, as when a place frees.
			if refund && u.refund(ls.req.Rates, ls.charged, v, now) || !refund && u.pause(v, ls.pauseGate(), ls.req.Holder, ls.pauseUntil, now) {
				u.count(u.path(FreedAttr), 1)
			}
			if len(u.conds) == 0 {
				return nil, nil // nothing to give back, or the pause has passed
			}
			// A later pause standing is written over nothing but
			// conditioned on it as seen: one purged meanwhile (a faster
			// clock's) leaves this one to write.
			u.ttl(now)
			return u, nil
		}, nil)
		if !errors.Is(err, errCondition) {
			return err
		}
		v = nv
	}
	return nil
}

// release is the write that gives the place back after a call that took
// took (0: not measured), purging with purge, telling the outcome to its
// probes and, with extras, to its breaker, pause gate and limit, and
// removing its ticket, or with keep leaving a task's waiting again.
func (ls *Lease) release(outcome Outcome, probes []gateRef, purge, extras, keep bool, b *board, took time.Duration) (*update, Transition) {
	ms := ls.l.clock().UnixMilli()
	u := newUpdate()
	lp := u.path(LeasesAttr, ls.id)
	u.remove(lp)
	if ls.task {
		// A later claim of the task holds a lease of the same id.
		u.cond(ls.heldAs(u, lp))
	} else {
		u.cond("attribute_exists(" + lp + ")")
	}
	for _, set := range ls.req.ownSets() {
		u.del(u.path(set), ls.id)
	}
	if keep {
		// As it was before its claim: no claim named in it (its start
		// mark the take removed).
		tp := u.path(TicketsAttr, ls.id)
		u.cond("attribute_exists(" + tp + ")")
		u.remove(tp + "." + u.path(ticketClaim))
	} else {
		u.remove(u.path(QueueAttr, ls.id), u.path(TicketsAttr, ls.id))
		if ls.task {
			u.remove(u.path(TasksAttr, ls.id))
		}
		u.del(u.path(WaitingAttr(ls.req.Holder)), ls.id)
	}
	u.count(u.path(FreedAttr), 1)
	latest, _, _ := b.latest()
	if latest == nil {
		latest = parseItem(nil)
	}
	if v := b.recent(recentView); v != nil && purge {
		keep := append(rateAttrs(ls.req.Rates), ls.pauseGate(), WaitingAttr(ls.req.Holder))
		if ls.req.Breaker != nil {
			keep = append(keep, BreakerAttr(ls.req.Breaker.Name))
		}
		for _, p := range probes {
			keep = append(keep, p.attr)
		}
		u.purge(v, ms, ls.id, ls.req.Holder, keep...)
	}
	if took > 0 {
		u.set(u.path(CallAttr), u.num(callMean(latest.callMS, took)))
	}
	if outcome == Unused && extras {
		u.refund(ls.req.Rates, ls.charged, latest, ms)
	}
	tr, bo := NoTransition, outcome
	if bo == Overloaded || bo == Unused {
		bo = Abandoned // what it tells a breaker
	}
	switch {
	case len(probes) > 0 && (keep || ls.req.Breaker == nil):
		// A probe of a breaker its request no longer names gives it up,
		// as does one that made no call and keeps its ticket: its task's
		// next worker probes (no bar on its principal).
		for _, p := range probes {
			u.unprobe(u.probeOf(p, ls.id))
		}
	case ls.req.Breaker != nil && (len(probes) > 0 || extras && bo != Abandoned):
		// Its probes' verdicts, or (none) its outcome, to its breaker.
		tr = u.outcome(ls.req.Breaker, latest, ls.id, ls.req.Holder, probes, bo, ms)
	}
	if extras {
		if ls.pauseUntil > 0 {
			u.pause(latest, ls.pauseGate(), ls.req.Holder, ls.pauseUntil, ms)
		}
		ls.adapt(u, latest, outcome, took, ms)
	}
	u.ttl(ms)
	return u, tr
}

// callMean moves mean (ms, 0: unknown) a quarter of the way towards took:
// a running arithmetic mean, as a queue's wait is the sum of its calls.
func callMean(mean int64, took time.Duration) int64 {
	t := max(took.Milliseconds(), 1)
	if mean <= 0 {
		return t
	}
	return max(mean+(t-mean)/4, 1)
}

// Renew extends the lease (and its probes) to expire hold + Margin from
// now, never before the expiry its holder knows it wrote (see Renew in
// the package doc; ErrNotHeld if it is not held). CallDeadline is set
// hold from now.
func (ls *Lease) Renew(ctx context.Context, hold time.Duration) error {
	if ls.released.Load() {
		return ErrNotHeld
	}
	l := ls.l
	localNow := time.Now()
	exp := max(l.clock().Add(hold+l.margin).UnixMilli(), ls.exps[0])
	if !ls.req.holds() {
		ls.setExpiry(exp, localNow.Add(hold))
		return nil
	}
	u := newUpdate()
	lp := u.path(LeasesAttr, ls.id)
	u.set(lp, u.num(exp))
	u.cond(ls.heldAs(u, lp))
	for _, p := range ls.probes {
		u.set(u.probeOf(p, ls.id)+"."+u.path(gateProbeExp), u.num(exp))
	}
	u.ttl(exp)
	unsure := false
	v, err := l.write(ctx, ls.req.Key, u, func() { unsure = true })
	switch {
	case errors.Is(err, errCondition) && v.leases[ls.id] == exp && ls.claimIn(v, exp):
		// an earlier attempt landed
	case errors.Is(err, errCondition) && ls.heldIn(v) && len(ls.probes) > 0:
		// No longer the probe of each entry: renewed without them.
		ls.probes = v.stillProbes(ls.probes, ls.id)
		return ls.Renew(ctx, hold)
	case errors.Is(err, errCondition):
		return ErrNotHeld
	case err != nil:
		if unsure {
			// It may have landed: the next renewal accepts its expiry too.
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

// heldAs is the condition that the lease at path holds one of the
// expiries this holder may have written and, a task's, that its ticket
// names its claim, or is gone and the lease holds the expiry it knows it
// wrote (see Tasks in the package doc).
func (ls *Lease) heldAs(u *update, path string) string {
	conds := make([]string, len(ls.exps))
	for i, e := range ls.exps {
		conds[i] = path + " = " + u.num(e)
	}
	c := conds[0]
	if len(conds) > 1 {
		c = "(" + strings.Join(conds, " OR ") + ")"
	}
	if ls.claim != "" {
		tp := u.path(TicketsAttr, ls.id)
		c += " AND (" + tp + "." + u.path(ticketClaim) + " = " + u.str(ls.claim) +
			" OR (attribute_not_exists(" + tp + ") AND " + conds[0] + "))"
	}
	return c
}

// heldIn reports whether v shows the lease as heldAs requires it.
func (ls *Lease) heldIn(v *view) bool {
	exp := v.leases[ls.id]
	return slices.Contains(ls.exps, exp) && ls.claimIn(v, exp)
}

// claimIn reports whether v, showing the lease at exp, shows the ticket
// as heldAs requires it (true for a lease that is no task's).
func (ls *Lease) claimIn(v *view, exp int64) bool {
	if ls.claim == "" {
		return true
	}
	if t := v.ticketFor(ls.id); t != nil {
		return t.claim == ls.claim
	}
	for _, h := range v.halves {
		if h.id == ls.id && h.details != nil {
			// A part of a ticket (a hand edit, an older version): the
			// condition reads its entry as the ticket's.
			d, _ := h.details.(*types.AttributeValueMemberM)
			return d != nil && strOr(d.Value[ticketClaim]) == ls.claim
		}
	}
	return exp == ls.exps[0]
}

// pauseGate is the gate its upstream's pause closes: its tool's when its
// server pauses per tool, else the server's.
func (ls *Lease) pauseGate() string {
	if ls.req.PauseTool && ls.req.Tool != "" {
		return PauseAttrPrefix + ls.req.Tool
	}
	return PauseAttr
}

func (ls *Lease) setExpiry(exp int64, deadline time.Time) {
	ls.exps = []int64{exp}
	ls.Expiry = time.UnixMilli(exp)
	ls.CallDeadline = deadline
}

// maxUnsureExps bounds the expiries of unknown renewals a lease keeps
// beside the one known stored.
const maxUnsureExps = 3

// ErrLeaseLost is the cause with which KeepAlive ends its context when the
// lease could not be kept.
var ErrLeaseLost = errors.New("lease lost")

// renewRetry is the wait before a failed renewal is tried again.
const renewRetry = 200 * time.Millisecond

// KeepAlive keeps ls for an exchange that runs until end, renewing it
// halfway through each term for hold() at a time, retrying a store error
// every renewRetry; when the lease is lost it calls lost and ends the
// returned context (cause ErrLeaseLost). It stops once the lease covers
// end. The returned function ends the renewals and waits for them.
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
			if sleep(callCtx, time.Until(deadline.Add(-term/2)), ls.req.Key) != nil {
				return
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
				if sleep(callCtx, wait, ls.req.Key) != nil {
					return
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

// PauseFor asks, its upstream having answered with a Retry-After, that no
// call of the lease's principal start on its scope for d, at most the
// request's MaxPause: the release writes it (see Pause in the package doc).
func (ls *Lease) PauseFor(d time.Duration) {
	if d <= 0 {
		return
	}
	ls.pauseUntil = ls.l.clock().Add(min(d, cmp.Or(ls.req.MaxPause, MaxPause))).UnixMilli()
}
