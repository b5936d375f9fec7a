package lease

import (
	"context"
	"testing"
	"time"
)

// Tasks in doc.go: an enqueue's first join is judged from a view this
// process saw within a second when that view shows nothing else to do; a
// view behind the item costs a refused join whose answer is the next
// look, and one showing the ticket already there is judged from a read.
func TestAnEnqueueJoinsFromARecentView(t *testing.T) {
	ctx := context.Background()
	mem := newMemStore()
	l := New(mem, "leases", Options{InstanceID: "a"})
	other := New(mem, "leases", Options{InstanceID: "b"})
	held := acquire(t, other, Request{Key: "srv", Cap: 1, Hold: time.Hour, Holder: "p", MaxQueued: 4})
	defer release(t, held)
	deadline := time.Now().Add(time.Hour)

	first := enqueue(t, l, taskReq("q"), "task-1")
	reads := l.Stats().Reads
	second := enqueue(t, l, taskReq("q"), "task-2")
	if got := l.Stats().Reads; got != reads {
		t.Errorf("an enqueue after another on the same process read the item %d times; want none (its view is a second old at most)", got-reads)
	}
	v := itemView(t, mem, "srv")
	if v.ticketFor(second) == nil {
		t.Fatalf("the second task's ticket %s is not in the item: %+v", second, v.queue)
	}

	// Another process withdraws the first task: freed moves, and this
	// process's view is behind.
	if err := other.Withdraw(ctx, "srv", first, "task-1"); err != nil {
		t.Fatal(err)
	}
	failed := l.Stats().FailedWrites
	third := enqueue(t, l, taskReq("q"), "task-3")
	if got := l.Stats().FailedWrites; got != failed+1 {
		t.Errorf("a join from a view behind the item: %d refused writes; want 1 (refused on freed, then joined from its answer)", got-failed)
	}
	if got := l.Stats().Reads; got != reads {
		t.Errorf("a join refused on freed read the item %d times; want none (its answer is the next look)", got-reads)
	}
	v = itemView(t, mem, "srv")
	t3 := v.ticketFor(third)
	if t3 == nil || v.ticketFor(first) != nil || t3.n <= v.ticketFor(second).n {
		t.Fatalf("after the third enqueue: queue %+v; want task-1 gone and task-3 after task-2", v.queue)
	}

	// Another process withdraws the second task, which this process's view
	// still shows: enqueueing its ticket again must not read that view as
	// its join landed.
	if err := other.Withdraw(ctx, "srv", second, "task-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Enqueue(ctx, taskReq("q"), second, "task-2", deadline); err != nil {
		t.Fatal(err)
	}
	v = itemView(t, mem, "srv")
	if t2 := v.ticketFor(second); t2 == nil || t2.n <= t3.n {
		t.Errorf("the second task enqueued again after its withdrawal: queue %+v; want its ticket back, after task-3", v.queue)
	}
	if got := l.Stats().Reads; got != reads+1 {
		t.Errorf("an enqueue whose view showed its own ticket read the item %d times; want 1", got-reads)
	}
}
