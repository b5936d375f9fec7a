package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Tasks (doc.go): a claim that leaves the turn at StartTimeout after its
// start's mark makes the next start when nobody has. The mark is the
// starter's clock in whole milliseconds, while the starter's own note of
// the start (board.mayStart) is its clock to the nanosecond, taken after:
// a claim in the starter's process that judges its start lapsed in the
// first millisecond the mark allows finds that note younger than
// StartTimeout, and must start the next all the same. Here the start is made half a
// millisecond into a millisecond, and the worker, delivered late, claims
// StartTimeout after its mark while others' releases refuse its takes.
func TestAClaimLeavingItsTurnInItsMarksLastMillisecondStartsTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newTakeStore(newMemStore(), -1)
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		held := acquire(t, l, taskReq("h"))
		id := enqueue(t, l, taskReq("q"), "task-1")
		enqueue(t, l, taskReq("r"), "task-2")
		db.id.Store(id)
		time.Sleep(500 * time.Microsecond) // the start is made mid-millisecond
		release(t, held)
		got := st.list()
		if len(got) != 1 || got[0].Ticket != id {
			t.Fatalf("starts %+v; want one of %s", got, id)
		}
		mark := got[0].Mark
		time.Sleep(time.Until(time.UnixMilli(mark + StartTimeout.Milliseconds())))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := l.Claim(ctx, taskReq("q"), id, mark)
		if !errors.Is(err, ErrStartLapsed) {
			t.Fatalf("claim: %v; want ErrStartLapsed (its takes refused, StartTimeout past its mark)", err)
		}
		after := st.marksOf(id)
		tk := mRead(rawItem(t, db, "srv")).tickets[id]
		t.Logf("claim: %v; starts %v; ticket %+v", err, after, tk)
		if len(after) != 2 {
			t.Errorf("the claim left its turn StartTimeout after its start with nobody's start since, and started nobody (starts %v)", after)
		}
	})
}

// As TestAClaimLeavingItsTurnInItsMarksLastMillisecondStartsTheNext,
// wider: startDue takes its mark's time once, before its loop, and notes
// each start (mayStart) as it comes to it, after the writes and the
// OnTaskStart hooks of the tasks before it. Two tasks' turns come at once
// (a hold lifted); the first's hook takes 100 ms (an invocation), and
// its worker claims at once. The second task's worker, its takes
// refused, leaves its turn StartTimeout after its mark; this process's
// note of the start is 100 ms younger than the mark, and must not keep it
// from starting the next.
func TestAClaimLeavingItsTurnBehindASlowStartHookStartsTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newTakeStore(newMemStore(), 0)
		var st starts
		hook := func(ctx context.Context, ts TaskStart) {
			st.hook(ctx, ts)
			time.Sleep(100 * time.Millisecond)
		}
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: hook})
		two := func(h string) Request { r := taskReq(h); r.Cap = 2; return r }
		h1, h2 := acquire(t, l, two("h")), acquire(t, l, two("h"))
		enqueue(t, l, two("q"), "task-1")
		enqueue(t, l, two("r"), "task-2")
		handHold(t, db, time.Now().Add(time.Hour).UnixMilli())
		release(t, h1)
		release(t, h2)
		if got := st.list(); len(got) != 0 {
			t.Fatalf("starts under the hold: %+v", got)
		}
		handHold(t, db, 0)
		if err := l.StartDue(context.Background(), two("q")); err != nil {
			t.Fatal(err)
		}
		got := st.list()
		if len(got) != 2 {
			t.Fatalf("starts: %+v; want both tasks'", got)
		}
		first, second := got[0], got[1]
		holder := map[string]string{"task-1": "q", "task-2": "r"}
		// The first task's worker claims its place at once.
		ls, err := l.Claim(context.Background(), two(holder[first.Task]), first.Ticket, first.Mark)
		if err != nil {
			t.Fatalf("the first task's claim: %v", err)
		}
		defer release(t, ls)
		db.id.Store(second.Ticket)
		db.refuse.Store(-1)
		time.Sleep(time.Until(time.UnixMilli(second.Mark + StartTimeout.Milliseconds())))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err = l.Claim(ctx, two(holder[second.Task]), second.Ticket, second.Mark)
		if !errors.Is(err, ErrStartLapsed) {
			t.Fatalf("claim: %v; want ErrStartLapsed", err)
		}
		marks := st.marksOf(second.Ticket)
		t.Logf("claim of %s: %v; its starts %v", second.Task, err, marks)
		if len(marks) != 2 {
			t.Errorf("the claim left its turn StartTimeout after its start, nobody's start since, and started nobody (starts %v)", marks)
		}
	})
}
