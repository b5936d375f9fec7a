package lease

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/mcpgate/mcpgate/internal/store"
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

// expireByTTL does what DynamoDB's TTL may do to key's item at now: delete
// it once its ttl (Unix seconds) has passed.
func expireByTTL(t *testing.T, db *memStore, key string, now time.Time) bool {
	t.Helper()
	db.mu.Lock()
	defer db.mu.Unlock()
	it := db.items[key]
	n, ok := it[store.TTLAttr].(*types.AttributeValueMemberN)
	if !ok {
		return false
	}
	ttl, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || ttl >= now.Unix() {
		return false
	}
	delete(db.items, key)
	return true
}

// # Gates ("Hold: an operator's hold stops every take until it is lifted
// or passes"), invariant 13, invariant 16 ("a task's ticket is never
// removed before its deadline but by its claim or its withdrawal") and
// the Guarantee ("it only removes items nobody has written for a day"):
// the ttl a write sets is a day after its own expiry, deadline or now,
// never less than what the item already holds, so a release made under a
// long hold (or while a task waits with a deadline days off) brings the
// ttl down to a day from now. A hold stands with no write at all — takes
// are refused, waiters only read — so a day later DynamoDB may delete the
// item: the hold is gone two days early, a newcomer takes a place under
// it, and the waiting task's ticket is gone before its deadline.
func TestFreshTTLDoesNotOutliveALongHoldOrATasksDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		l := New(db, "leases", Options{InstanceID: "a"})
		ls := acquire(t, l, req("srv", 1, "p")) // a call in flight
		// A task waits for the place, its deadline three days off.
		long, err := l.Enqueue(ctx, Request{Key: "srv", Cap: 1, Hold: 10 * time.Second, Holder: "q", MaxQueued: 4}, "", "task-1", time.Now().Add(72*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := NewAdmin(db, "leases").Pause(ctx, "srv", time.Now().Add(72*time.Hour)); err != nil {
			t.Fatal(err)
		}
		release(t, ls) // calls in flight go on, and end
		// A day and a bit with the hold standing: nothing may be taken,
		// so nothing is written.
		time.Sleep(25 * time.Hour)
		if expireByTTL(t, db, "srv", time.Now()) {
			t.Errorf("the item's ttl passed a day after the last write, with the operator's hold two days from ending and a task's ticket two days from its deadline")
		}
		if err := l.Withdraw(ctx, "srv", long, "task-1"); errors.Is(err, ErrNoTicket) {
			t.Errorf("the task's ticket is gone before its deadline: %v", err)
		}
		n := New(db, "leases", Options{InstanceID: "n"})
		if got, err := n.Acquire(ctx, req("srv", 1, "r")); err == nil {
			release(t, got)
			t.Errorf("a newcomer took a place under the operator's hold")
		}
	})
}

// # Tasks: a worker whose turn passed meanwhile "takes its mark back ...
// and leaves the ticket for the next start" (Claim: "so that the next to
// see the turn come starts a worker at once"). The mark goes, but the
// instance that started the worker keeps its own note of that start
// (board.mayStart) for StartTimeout, and the worker, elsewhere, cannot
// clear it: when the turn comes again, that instance's release sees it
// and starts nobody, and with the mark gone (started 0) no caller may pass
// the task either, so the place stays idle until the stale note lapses.
func TestFreshGivenBackStartIsMadeAgainAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		var st starts
		a := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		r := func(holder string) Request {
			return Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: holder, MaxQueued: 4}
		}
		q1 := acquire(t, a, r("q")) // q holds one place
		p1 := acquire(t, a, r("p")) // p the other
		id := enqueue(t, a, r("q"), "task-1")
		release(t, p1) // the task's turn: a worker is started
		got := st.list()
		if len(got) != 1 || got[0].Ticket != id {
			t.Fatalf("starts: %+v", got)
		}
		// Before the worker claims, a newcomer of a principal holding
		// nothing comes first (q holds a place) and takes it.
		r1 := acquire(t, a, r("r"))
		w := New(db, "leases", Options{InstanceID: "w"})
		if _, err := w.Claim(ctx, r("q"), id, got[0].Mark); !errors.Is(err, ErrNotYourTurn) {
			t.Fatalf("claim after the turn passed: %v; want ErrNotYourTurn", err)
		}
		time.Sleep(time.Second)
		release(t, r1) // the task's turn again, seen by a's release
		if got := st.list(); len(got) != 2 {
			t.Errorf("the task's turn came again, its start given back, and its starter started no worker: starts %+v", got)
		}
		release(t, q1)
	})
}
