package lease

import (
	"context"
	"sync"
)

// handouts keeps, per attempt, the handout of its last decide3 for take3.
var handouts sync.Map

// decide3 is decide as the scenario tests read it: whether it is the
// caller's turn, the tickets handed a place before it, and those it
// presumes gone.
func (a *attempt) decide3(v *view, now int64) (bool, []*ticket, []*ticket) {
	served, h, bypass := a.decide(v, now)
	handouts.Store(a, h)
	return served, h.ahead, bypass
}

// take3 is take with the handout of the caller's last decide3.
func (a *attempt) take3(ctx context.Context, v *view, _, bypass []*ticket, now int64) (*Lease, *view, error) {
	h, _ := handouts.Load(a)
	ho, _ := h.(handout)
	return a.take(ctx, v, ho, bypass, now)
}

// turn3 is walk as the scenario tests read it: whether me is served, and
// the tickets handed a place before it.
func (v *view) turn3(now int64, me *asker, r rules, skip map[string]bool) (bool, []*ticket) {
	h := v.walk(now, me, r, skip)
	return h.served, h.ahead
}
