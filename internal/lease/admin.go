package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Admin makes operators' changes to lease items, each one conditional
// write through the limiter's own (write), judged from the item as read
// and conditioned on what it changes being as seen, so it never overwrites
// what a gateway wrote meanwhile. A retry that finds its own change made
// counts as done.
type Admin struct {
	l *Limiter
}

// NewAdmin returns an Admin of the lease items in table.
func NewAdmin(db API, table string) *Admin {
	return &Admin{l: New(db, table, Options{InstanceID: "admin"})}
}

// maxAdminTries bounds the tries of Release and Withdraw against
// others' writes.
const maxAdminTries = 4

// Pause holds admission on key until until (calls in flight go on,
// waiters wait), on condition that no hold as long stands; a longer one
// standing is no failure.
func (a *Admin) Pause(ctx context.Context, key string, until time.Time) error {
	ms := until.UnixMilli()
	if ms <= a.l.clock().UnixMilli() {
		return errors.New("lease: pause until a time already past")
	}
	// A hold written by hand reads as none, and fails the condition: it
	// is mended, and the hold set.
	v, err := a.l.send(ctx, key, nil, func(*view) (*update, error) {
		u := newUpdate()
		hp := u.path(HoldAttr)
		u.cond(orAbsent(hp, hp+" < "+u.num(ms)))
		u.set(hp, u.num(ms))
		u.ttl(ms)
		return u, nil
	}, nil)
	if errors.Is(err, errCondition) && v != nil && v.hold >= ms {
		return nil // a hold as long or longer stands (or an earlier attempt landed)
	}
	return wrapf(err, "lease: pause %s: %w", key)
}

// Resume lifts the operator's hold on key if it is still the one read (a
// Pause that lengthened it meanwhile wins, and Resume says so). The
// upstream's own pauses stand.
func (a *Admin) Resume(ctx context.Context, key string) error {
	v, err := a.l.read(ctx, key)
	if err != nil {
		return err
	}
	now := a.l.clock().UnixMilli()
	if v.hold <= now {
		return nil
	}
	u := newUpdate()
	hp := u.path(HoldAttr)
	u.remove(hp)
	u.cond(hp + " = " + u.num(v.hold))
	u.ttl(now)
	nv, err := a.l.write(ctx, key, u, nil)
	switch {
	case errors.Is(err, errCondition) && nv != nil && nv.hold <= now:
		return nil // an earlier attempt landed, or the hold passed
	case errors.Is(err, errCondition) && nv != nil:
		return fmt.Errorf("lease: resume %s: the hold changed meanwhile (now until %s); look again",
			key, time.UnixMilli(nv.hold).UTC().Format(time.RFC3339))
	}
	return wrapf(err, "lease: resume %s: %w", key)
}

// ResetBreaker closes breaker name on key for everyone: its gate is
// removed whole, on condition that it holds the entries read, each
// closing as read (pinGate), and freed counts it, as a probe's success
// does (the waiters it held back may rank otherwise). A probe running then releases without a verdict.
func (a *Admin) ResetBreaker(ctx context.Context, key, name string) error {
	if name == "" {
		return errors.New("lease: reset breaker: no name")
	}
	v, err := a.l.read(ctx, key)
	if err != nil {
		return err
	}
	attr := BreakerAttr(name)
	// A freed written by hand would refuse its ADD: mended first.
	nv, err := a.l.send(ctx, key, v, func(v *view) (*update, error) {
		g := v.gates[attr]
		if g == nil {
			return nil, nil // nothing to reset
		}
		u := newUpdate()
		u.remove(u.path(attr))
		u.pinGate(g, nil)
		u.count(u.path(FreedAttr), 1)
		u.ttl(a.l.clock().UnixMilli())
		return u, nil
	}, nil)
	switch {
	case errors.Is(err, errCondition) && nv != nil && nv.gates[attr] == nil:
		return nil // an earlier attempt landed
	case errors.Is(err, errCondition):
		return fmt.Errorf("lease: reset breaker %s of %s: it changed meanwhile; look again", name, key)
	}
	return wrapf(err, "lease: reset breaker %s of %s: %w", name, key)
}

// Release removes lease id from key whole, as a purge removes a lapsed
// one, conditioned on the expiry read (a renewal meanwhile: judged again
// from its answer); ErrNotHeld if gone. The holder learns it at its next
// renewal or release, and its call is stopped then: until it ends, the
// upstream may see one call more than the cap.
func (a *Admin) Release(ctx context.Context, key, id string) error {
	if id == "" {
		return ErrNotHeld
	}
	v, err := a.l.read(ctx, key)
	if err != nil {
		return err
	}
	unsure := false
	for range maxAdminTries {
		// Its ADD to freed or DELETE from a set over a value written by
		// hand: mended, and judged again.
		nv, err := a.l.send(ctx, key, v, func(v *view) (*update, error) {
			if _, ok := v.leases[id]; !ok && unsure {
				return nil, nil // an attempt whose answer was lost landed
			} else if !ok {
				return nil, ErrNotHeld
			}
			u := newUpdate()
			u.removeLease(v, id)
			u.ttl(a.l.clock().UnixMilli())
			return u, nil
		}, func() { unsure = true })
		switch {
		case err == nil || errors.Is(err, ErrNotHeld):
			return err
		case errors.Is(err, errCondition) && nv != nil:
			v = nv // renewed, or gone: judge again from the answer
			continue
		}
		return fmt.Errorf("lease: release %s of %s: %w", id, key, err)
	}
	if _, ok := v.leases[id]; ok {
		return fmt.Errorf("lease: release %s of %s: it kept changing; try again", id, key)
	}
	return ErrNotHeld
}
