package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Abandoned:
		return "abandoned"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Release gives the place back after a call that did not fail: it is
// Finish(ctx, Success).
func (ls *Lease) Release(ctx context.Context) error {
	_, err := ls.Finish(ctx, Success)
	return err
}

// Finish gives the place back and, if the lease has a breaker, reports the
// call's outcome to it in the same write. When callers wait for the place,
// the same write passes it to the first in the queue who can use it (or,
// when this process did not know of them, one more write does). It
// returns the breaker change it made, if any.
//
// It is idempotent: finishing twice, or after the lease expired and was
// purged, never frees another holder's place; those cases return
// ErrNotHeld (after the first, without a store call). Every release write
// names its lease in the item's last_release attribute, so a retry of a
// write whose first attempt landed (its answer was lost) knows it did.
func (ls *Lease) Finish(ctx context.Context, outcome Outcome) (Transition, error) {
	if ls.released.Swap(true) {
		return NoTransition, ErrNotHeld
	}
	l := ls.l
	if len(ls.slots) == 0 {
		return ls.finishBreaker(ctx, outcome)
	}
	b := l.board(ls.key)
	snap, probe, passed, err := ls.release(ctx, outcome, b)
	if err != nil {
		return NoTransition, err
	}
	l.stats.released.Add(1)
	if !ls.since.IsZero() {
		b.heldFor(time.Since(ls.since))
	}
	tr := verdict(probe, outcome)
	if ls.breaker != nil && !probe && outcome == Failure {
		snap, tr, err = l.open(ctx, ls.key, ls.breaker, snap)
	}
	if tr != NoTransition {
		l.stats.transitions.Add(1)
	}
	if !passed {
		l.passOn(ctx, ls.key, snap, ls.slots)
	}
	return tr, err
}

// release makes the release write and returns the item after it, whether
// it released the probe and whether it passed the place on. Unless the call failed (its breaker may
// be about to open), it passes the place to the caller this process knows
// to be next in the queue in the same write.
func (ls *Lease) release(ctx context.Context, outcome Outcome, b *board) (snap *snapshot, probe, passed bool, err error) {
	l := ls.l
	first := ls.slots[0].Attr
	probe = ls.probe
	var next *ticket
	now := l.clock().UnixMilli()
	if known := b.recent(recentView); known != nil && outcome != Failure && !probe && known.occupied(first, now) == 1 {
		// This lease was the only one: no other release can have passed
		// the place it would pass on since this process looked.
		next = known.without(ls.id).next(now)
	}
	for {
		u := newUpdate()
		for _, s := range ls.slots {
			u.removes = append(u.removes, u.path(s.Attr, ls.id))
		}
		u.conds = append(u.conds, "attribute_exists("+u.path(first, ls.id)+")")
		u.released(ls.id)
		if ls.breaker != nil && outcome != Abandoned || probe {
			u.outcome(ls.breaker, ls.id, probe, outcome, l.clock())
		}
		if next != nil {
			freed := map[string]int{}
			for _, s := range ls.slots {
				freed[s.Attr] = 1
			}
			l.grant(u, next, ls.slots, freed)
		}
		snap, err = l.write(ctx, ls.key, u)
		if err == nil {
			if next != nil {
				l.stats.grants.Add(1)
			}
			return snap, probe, next != nil, nil
		}
		if !errors.Is(err, errCondition) {
			return nil, false, false, err
		}
		_, held := snap.holds(first, ls.id)
		if held && (next != nil || probe) {
			// The caller it was passed to is gone, or another call
			// became the probe: give the place back plainly.
			next, probe = nil, false
			continue
		}
		if !held && snap.released == ls.id {
			// An earlier attempt of this write landed.
			return snap, probe, next != nil, nil
		}
		return nil, false, false, ErrNotHeld
	}
}

// grant adds to u the hand-over of a place to ticket t: t's lease in every
// slot it wants, while each has room (freed counts what the same write
// frees), its ticket out, only while the ticket is live, t holds no place
// yet and its breaker is closed. A slot t shares with caps uses the lower
// cap of the two.
func (l *Limiter) grant(u *update, t *ticket, caps []Slot, freed map[string]int) {
	now := l.clock()
	exp := now.Add(time.Duration(t.hold)*time.Millisecond + l.margin).UnixMilli()
	slots := make([]Slot, len(t.slots))
	for i, s := range t.slots {
		for _, c := range caps {
			if c.Attr == s.Attr {
				s.Cap = min(s.Cap, c.Cap)
			}
		}
		slots[i] = s
	}
	u.take(t.id, exp, slots, freed)
	u.removes = append(u.removes, u.path(TicketsAttr, t.id))
	u.conds = append(u.conds, u.path(TicketsAttr, t.id, ticketExpiry)+" >= "+u.num(now.UnixMilli()),
		"attribute_not_exists("+u.path(slots[0].Attr, t.id)+")")
	if t.breaker != "" {
		u.closed(t.breaker)
	}
	u.ttl(exp)
}

// maxPassOn bounds the writes one release makes to pass its place on.
const maxPassOn = 4

// passOn passes one place that snap shows free to the caller the queue
// gives it to, purging what is stale in the same write, and tries again
// with the item its write returns while that fails. It returns the item
// as last seen (nil after a store error). Best effort: a waiter that finds
// a place free takes it itself.
func (l *Limiter) passOn(ctx context.Context, key string, snap *snapshot, caps []Slot) *snapshot {
	for range maxPassOn {
		if snap == nil {
			return nil
		}
		now := l.clock().UnixMilli()
		t := snap.next(now)
		if t != nil && t.breaker != "" && snap.breakers[t.breaker].openUntil != 0 {
			t = nil // its breaker is not closed: the waiter sees to it
		}
		if t == nil && len(snap.stale(now)) == 0 {
			return snap
		}
		u := newUpdate()
		skip := ""
		if t != nil {
			skip = t.id
		}
		purged := u.purge(snap, now, skip)
		l.stats.purged.Add(int64(len(u.removes)))
		if t != nil {
			l.grant(u, t, caps, purged)
		}
		next, err := l.write(ctx, key, u)
		if err == nil && t != nil {
			l.stats.grants.Add(1)
		}
		if !errors.Is(err, errCondition) || t == nil {
			return next
		}
		snap = next
	}
	return snap
}

// Renew extends the lease so it expires hold + Margin from now, only if it
// is still held with the expiry this holder last wrote: a renewal never
// brings back a lease that was released or purged (ErrNotHeld). A probe
// lease extends its probe too. A renewal whose answer was lost and whose
// retry finds the new expiry in place counts as done.
func (ls *Lease) Renew(ctx context.Context, hold time.Duration) error {
	if ls.released.Load() {
		return ErrNotHeld
	}
	l := ls.l
	localNow := time.Now()
	exp := l.clock().Add(hold + l.margin).UnixMilli()
	for try := 0; len(ls.slots) > 0 || ls.probe; try++ {
		u := newUpdate()
		for _, s := range ls.slots {
			u.sets = append(u.sets, u.path(s.Attr, ls.id)+" = "+u.num(exp))
		}
		if len(ls.slots) > 0 {
			u.conds = append(u.conds, u.path(ls.slots[0].Attr, ls.id)+" = "+u.num(ls.exp))
		}
		if ls.probe {
			ba := ls.breaker.attrs()
			u.sets = append(u.sets, u.path(ba.probeExp)+" = "+u.num(exp))
			u.conds = append(u.conds, u.path(ba.probe)+" = "+u.value(&types.AttributeValueMemberS{Value: ls.id}))
			if len(ls.slots) == 0 {
				u.conds = append(u.conds, u.path(ba.probeExp)+" = "+u.num(ls.exp))
			}
		}
		snap, err := l.write(ctx, ls.key, u)
		if err == nil {
			break
		}
		if !errors.Is(err, errCondition) {
			return fmt.Errorf("lease: renew %s: %w", ls.id, err)
		}
		// Only this holder renews its lease: one still there with another
		// expiry was renewed by an attempt whose answer was lost.
		seen, held := ls.stored(snap)
		if !held || seen < l.clock().UnixMilli() || try > 0 {
			return ErrNotHeld
		}
		if seen == exp {
			break
		}
		ls.exp = seen
	}
	ls.exp = exp
	ls.Expiry = time.UnixMilli(exp)
	ls.CallDeadline = localNow.Add(hold)
	return nil
}

// stored returns the expiry snap shows for the lease, and whether it is
// still there (for a breaker-only probe: still the probe).
func (ls *Lease) stored(snap *snapshot) (int64, bool) {
	if len(ls.slots) > 0 {
		return snap.holds(ls.slots[0].Attr, ls.id)
	}
	st := snap.breakers[ls.breaker.Name]
	return st.probeExp, st.probe == ls.id
}
