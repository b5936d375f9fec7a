package lease

import (
	"testing"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// TestQueuedBehind: a lease tells how many callers were ahead of its
// caller when it joined the queue, counted in the order of turn (a
// principal holding fewer places comes first, whenever it joined): 0 for
// a caller granted at once.
func TestQueuedBehind(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	h1, h2 := acquire(t, l, req("srv", 2, "A")), acquire(t, l, req("srv", 2, "A"))
	if h1.QueuedBehind != 0 || h2.QueuedBehind != 0 {
		t.Errorf("granted at once: QueuedBehind %d and %d, want 0", h1.QueuedBehind, h2.QueuedBehind)
	}
	// A's two callers queue behind A's places, one after the other…
	a1 := waitFor(t, New(env.Client, env.Tables.Leases, Options{}), waiting("srv", 2, "A"))
	queued(t, env, "srv", 1)
	a2 := waitFor(t, New(env.Client, env.Tables.Leases, Options{}), waiting("srv", 2, "A"))
	queued(t, env, "srv", 2)
	// …then B's, whose principal holds no place: its turn comes first.
	b := waitFor(t, New(env.Client, env.Tables.Leases, Options{}), waiting("srv", 2, "B"))
	queued(t, env, "srv", 3)
	check := func(name string, got <-chan *Lease, behind int) *Lease {
		t.Helper()
		ls := <-got
		if ls == nil {
			t.Fatalf("%s got no place", name)
		}
		if ls.QueuedBehind != behind {
			t.Errorf("%s: QueuedBehind %d, want %d", name, ls.QueuedBehind, behind)
		}
		return ls
	}
	release(t, h1)
	gotB := check("B", b, 0)
	release(t, h2)
	release(t, gotB)
	release(t, check("A's first", a1, 0))
	release(t, check("A's second", a2, 1))
}
