package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// past is how long a task's lease of taskReq lives, and a second more.
const past = 10*time.Second + DefaultMargin + time.Second

// claimOf starts and claims task id's place on a limiter of its own
// (a worker elsewhere), failing the test if it cannot.
func claimOf(t *testing.T, db API, worker string, st *starts, id string) *Lease {
	t.Helper()
	got := st.list()
	if len(got) == 0 || got[len(got)-1].Ticket != id {
		t.Fatalf("no start of %s: %+v", id, got)
	}
	w := New(db, "leases", Options{InstanceID: worker})
	ls, err := w.Claim(context.Background(), taskReq("q"), id, got[len(got)-1].Mark)
	if err != nil || ls.ID() != id {
		t.Fatalf("claim of %s: %v, %v", id, ls, err)
	}
	return ls
}

// Invariant 16: a task whose worker ended after its claim and before its
// call (its lease lapsing unreleased) is not lost: while the lease is
// live, its ticket is no waiter (no start, no withdrawal, no second
// claim); once it lapses, the ticket waits again, a start is made, and
// the next claim takes the place anew; that claim's release removes the
// ticket with its lease.
func TestALapsedClaimLeavesItsTaskWaitingAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		claimOf(t, db, "w1", &st, id) // its worker ends here: never released
		if s := Describe(rawItem(t, db, "srv"), time.Now(), 1, 0, nil); len(s.Leases) != 1 || len(s.Queue) != 0 {
			t.Fatalf("status of a claimed task: %+v; want its lease and no ticket waiting", s)
		}
		time.Sleep(StartTimeout + time.Second)
		if err := l.StartDue(context.Background(), taskReq("q")); err != nil {
			t.Fatal(err)
		}
		if got := st.list(); len(got) != 1 {
			t.Fatalf("a start made for a task whose claim's lease is live: %+v", got)
		}
		if err := l.Withdraw(context.Background(), "srv", id, "task-1"); !errors.Is(err, ErrClaimed) {
			t.Fatalf("withdraw while its claim's lease is live: %v; want ErrClaimed", err)
		}
		w2 := New(db, "leases", Options{InstanceID: "w2"})
		if _, err := w2.Claim(context.Background(), taskReq("q"), id, st.list()[0].Mark); !errors.Is(err, ErrClaimed) {
			t.Fatalf("a second claim while the first's lease is live: %v; want ErrClaimed", err)
		}
		time.Sleep(past)
		if err := l.StartDue(context.Background(), taskReq("q")); err != nil {
			t.Fatal(err)
		}
		got := st.list()
		if len(got) != 2 || got[1].Ticket != id || got[1].Task != "task-1" {
			t.Fatalf("starts once the claim's lease lapsed: %+v; want a second for %s", got, id)
		}
		ls := claimOf(t, db, "w3", &st, id)
		if s := Describe(rawItem(t, db, "srv"), time.Now(), 1, 0, nil); len(s.Leases) != 1 || s.Leases[0].Lapsed || len(s.Queue) != 0 {
			t.Fatalf("status after the second claim: %+v; want its live lease alone", s)
		}
		release(t, ls)
		item := rawItem(t, db, "srv")
		if s := Describe(item, time.Now(), 1, 0, nil); len(s.Leases) != 0 || len(s.Queue) != 0 || len(mRead(item).tickets) != 0 {
			t.Fatalf("after the release: %+v; want no lease and no ticket", s)
		}
		if _, err := w2.Claim(context.Background(), taskReq("q"), id, 0); !errors.Is(err, ErrNoTicket) {
			t.Fatalf("a claim after the release: %v; want ErrNoTicket", err)
		}
		time.Sleep(past)
		if err := l.StartDue(context.Background(), taskReq("q")); err != nil {
			t.Fatal(err)
		}
		if got := st.list(); len(got) != 2 {
			t.Fatalf("a start made after the task's release: %+v", got)
		}
	})
}

// A late worker (its lease lapsed, the task claimed anew) gives back
// nothing of the new claim's: its release finds the lease not its own.
func TestALateWorkersReleaseLeavesTheNewClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		late := claimOf(t, db, "w1", &st, id)
		time.Sleep(past)
		if err := l.StartDue(context.Background(), taskReq("q")); err != nil {
			t.Fatal(err)
		}
		now := claimOf(t, db, "w2", &st, id)
		if _, err := late.Finish(context.Background(), Unused); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("the late worker's release: %v; want ErrNotHeld", err)
		}
		if s := Describe(rawItem(t, db, "srv"), time.Now(), 1, 0, nil); len(s.Leases) != 1 || s.Leases[0].Lapsed {
			t.Fatalf("after the late release: %+v; want the new claim's lease", s)
		}
		if err := l.Withdraw(context.Background(), "srv", id, "task-1"); !errors.Is(err, ErrClaimed) {
			t.Fatalf("withdraw: %v; want ErrClaimed", err)
		}
		release(t, now)
	})
}

// A task whose claim lapsed can be withdrawn (cancelled): its ticket and
// the lapsed lease go, and nothing starts it again.
func TestATaskWhoseClaimLapsedCanBeWithdrawn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		claimOf(t, db, "w1", &st, id)
		time.Sleep(past)
		if err := l.Withdraw(context.Background(), "srv", id, "task-1"); err != nil {
			t.Fatalf("withdraw of a task whose claim lapsed: %v", err)
		}
		item := rawItem(t, db, "srv")
		if m := mRead(item); len(m.leases) != 0 || len(m.tickets) != 0 {
			t.Fatalf("after the withdrawal: leases %v, tickets %v; want none", m.leases, m.tickets)
		}
		if err := l.StartDue(context.Background(), taskReq("q")); err != nil {
			t.Fatal(err)
		}
		if got := st.list(); len(got) != 1 {
			t.Fatalf("a start made for a withdrawn task: %+v", got)
		}
	})
}

// Invariants 7 and 16: a running task's claimed ticket takes no place in
// the queue, and no turn: callers and tasks queue beside it as if it had
// left, and a caller takes a free place at once.
func TestAClaimedTaskIsNoWaiter(t *testing.T) {
	db := newMemStore()
	var st starts
	l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
	req := taskReq("q")
	req.Cap, req.MaxQueued = 2, 1
	id, err := l.Enqueue(context.Background(), req, "", "task-1", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	w := New(db, "leases", Options{InstanceID: "w"})
	ls, err := w.Claim(context.Background(), req, id, st.list()[0].Mark)
	if err != nil {
		t.Fatal(err)
	}
	// Of the task's principal: were the task waiting, its ticket would
	// come first (the lower number, as many places held).
	held := acquire(t, l, Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: "q", MaxQueued: 1})
	full := Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: "r", MaxQueued: 1}
	if _, err := l.Enqueue(context.Background(), full, "", "task-2", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("a task joining beside a running one, MaxQueued 1: %v", err)
	}
	var fe *FullError
	if _, err := l.Enqueue(context.Background(), full, "", "task-3", time.Now().Add(time.Hour)); !errors.As(err, &fe) || fe.Reason != QueueFull {
		t.Fatalf("a second task waiting, MaxQueued 1: %v; want QueueFull", err)
	}
	if o, ok := l.Outlook(req, ""); !ok || o.Tasks != 1 {
		t.Fatalf("outlook: %+v; want 1 task waiting", o)
	}
	release(t, held)
	release(t, ls)
}
