package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Admin makes operators' changes to lease items, each one conditional write.
//
// Each change is judged from the item as one read (or the answer of a
// failed write) showed it, and its write is conditioned on what it changes
// still being as seen, so an operator never overwrites what a gateway wrote
// meanwhile. The writes go through the limiter's own machinery (write):
// the same retries, the item back with every answer, the ttl refreshed.
// A retried write whose first attempt landed fails its condition and finds
// its own change made: that counts as done.
type Admin struct {
	l *Limiter
}

// NewAdmin returns an Admin of the lease items in table.
func NewAdmin(db API, table string) *Admin {
	return &Admin{l: New(db, table, Options{InstanceID: "admin"})}
}

// maxAdminTries bounds how often Release reads the answer of a write that
// lost a race (the lease renewed meanwhile) and tries again.
const maxAdminTries = 4

// Pause stops admission on key until until — the operator's hold: calls
// in flight go on, waiters wait; it never shortens a later hold.
//
// The write sets hold on condition that no hold at or after until stands:
// every take is conditioned on the hold having passed. A later hold that
// stands already is no failure: key is held at least until until.
func (a *Admin) Pause(ctx context.Context, key string, until time.Time) error {
	ms := until.UnixMilli()
	if ms <= a.l.clock().UnixMilli() {
		return errors.New("lease: pause until a time already past")
	}
	u := newUpdate()
	hp := u.path(HoldAttr)
	u.cond(orAbsent(hp, hp+" < "+u.num(ms)))
	u.set(hp, u.num(ms))
	u.ttl(ms)
	v, err := a.l.write(ctx, key, u, nil)
	if errors.Is(err, errCondition) && v != nil && v.hold >= ms {
		return nil // a hold as long or longer stands (or an earlier attempt landed)
	}
	if err != nil {
		return fmt.Errorf("lease: pause %s: %w", key, err)
	}
	return nil
}

// Resume lifts the operator's hold on key (conditioned on the hold it
// read). The upstream's own pauses (its Retry-After) stand: they are the
// upstream's word.
//
// A hold that passed already, or none, needs no write. The hold is
// removed only if it is still the one read: a Pause that lengthened it
// meanwhile wins, and Resume says so.
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
	case err != nil:
		return fmt.Errorf("lease: resume %s: %w", key, err)
	}
	return nil
}

// ResetBreaker closes breaker name on key for everyone (conditioned on the
// state it read): its gate — the entry for everyone and every principal's,
// with their failures and probes — is removed whole, on condition that
// every entry is still as read, and a place freed is counted, as a probe's
// verdict that closes it does: the waiters it held back may rank
// otherwise. A probe running then finds itself no longer the probe when it
// releases, and gives its place back without a verdict.
func (a *Admin) ResetBreaker(ctx context.Context, key, name string) error {
	if name == "" {
		return errors.New("lease: reset breaker: no name")
	}
	v, err := a.l.read(ctx, key)
	if err != nil {
		return err
	}
	attr := BreakerAttr(name)
	g := v.gates[attr]
	if g == nil {
		return nil // nothing to reset
	}
	u := newUpdate()
	u.remove(u.path(attr))
	u.pinGate(g, nil)
	u.count(u.path(FreedAttr), 1)
	u.ttl(a.l.clock().UnixMilli())
	nv, err := a.l.write(ctx, key, u, nil)
	switch {
	case errors.Is(err, errCondition) && nv != nil && nv.gates[attr] == nil:
		return nil // an earlier attempt landed
	case errors.Is(err, errCondition):
		return fmt.Errorf("lease: reset breaker %s of %s: it changed meanwhile; look again", name, key)
	case err != nil:
		return fmt.Errorf("lease: reset breaker %s of %s: %w", name, key, err)
	}
	return nil
}

// Release removes lease id from key whole (every set it is in), conditioned on the expiry it read; ErrNotHeld if gone.
//
// It is what a purge does to an expired lease, done to a live one: REMOVE
// leases.<id> on condition that it holds the expiry read, DELETE the id
// from every set the item shows it in, ADD 1 to freed. The holder learns
// it at its next renewal or release (ErrNotHeld) and its call is stopped
// then; until that call ends, the upstream may see one call more than the
// cap. A lease renewed meanwhile is removed from the answer that showed
// the renewal.
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
		if _, ok := v.leases[id]; !ok {
			if unsure {
				return nil // an attempt whose answer was lost landed
			}
			return ErrNotHeld
		}
		u := newUpdate()
		u.removeLease(v, id)
		u.ttl(a.l.clock().UnixMilli())
		nv, err := a.l.write(ctx, key, u, func() { unsure = true })
		switch {
		case err == nil:
			return nil
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
