package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 11 ("a call that only charges leaves a waiter's token to it")
// and # Tasks ("served in the same turn order, passed over for the same
// reasons"): a task whose turn has come is a waiter like a caller. A
// charge-only call from an instance with no view of the key conditions
// its charge on the queue map alone being empty ("size(queue) = 0"), not
// on the tasks map, so it takes the last token of a bucket the task's
// worker needs (a full bucket's charge is conditioned only on the bucket
// being full), and the worker's claim then fails for want of it. With a
// caller's ticket in the same place instead, the charge fails its
// condition, looks, and leaves the token.
func TestFreshChargeOnlyCallLeavesAWaitingTaskItsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		// Tool x has a bucket of one a minute; p's call of tool y holds
		// the one place meanwhile.
		rates := []Rate{{Name: "tool:x", PerMinute: 1}}
		a := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		p := Request{Key: "srv", Cap: 1, Tool: "y", Hold: 10 * time.Second, Holder: "p", MaxQueued: 4}
		q := Request{Key: "srv", Cap: 1, Tool: "x", Hold: 10 * time.Second, Holder: "q", MaxQueued: 4, Rates: rates}
		held := acquire(t, a, p)
		id := enqueue(t, a, q, "task-1")
		if _, err := held.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
		got := st.list()
		if len(got) != 1 || got[0].Ticket != id {
			t.Fatalf("starts after the release: %+v; want one for %s", got, id)
		}
		// Another instance, with no view of the key, makes a call that
		// only pays the server's bucket.
		c := New(db, "leases", Options{InstanceID: "c"})
		ls, err := c.Acquire(context.Background(), Request{Key: "srv", Tool: "x", Hold: 10 * time.Second, Holder: "r", Rates: rates})
		var rl *RateLimitedError
		if err == nil {
			_, _ = ls.Finish(context.Background(), Success)
			t.Errorf("a charge-only call took the token of the task whose turn had come")
		} else if !errors.As(err, &rl) {
			t.Fatalf("charge-only call: %v", err)
		}
		w := New(db, "leases", Options{InstanceID: "w"})
		tl, err := w.Claim(context.Background(), q, id, got[0].Mark)
		if err != nil {
			t.Fatalf("the task's worker could not claim its place: %v", err)
		}
		_, _ = tl.Finish(context.Background(), Success)
	})
}
