package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Tasks (doc.go): a task whose turn has come is started by whoever sees
// it. Two places come free at once (their holders died, their leases
// lapse); a task waits first for them and a caller second: the caller's
// look serves them both, and the caller, taking its place, starts the
// task's worker, rather than leaving the other free place idle until a
// later release or the schedule's StartDue.
func TestACallerServedWithATaskStartsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		two := func(p string) Request {
			return Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: p, MaxQueued: 4}
		}
		for _, p := range []string{"d1", "d2"} { // holders that die holding
			acquire(t, New(db, "leases", Options{InstanceID: p}), two(p))
		}
		id := enqueue(t, l, two("q"), "task-1")
		if got := st.list(); len(got) != 0 {
			t.Fatalf("a task started while both places are held: %+v", got)
		}
		w := two("w")
		w.Wait = time.Minute
		ls, err := New(db, "leases", Options{InstanceID: "b", OnTaskStart: st.hook}).Acquire(context.Background(), w)
		if err != nil {
			t.Fatalf("the caller behind the lapsing leases: %v", err)
		}
		got := st.list()
		t.Logf("starts when the caller took its place: %+v", got)
		if len(got) != 1 || got[0].Ticket != id {
			t.Errorf("the task's starts when the caller served with it took its place: %+v; want one of %s", got, id)
		}
		release(t, ls)
	})
}
