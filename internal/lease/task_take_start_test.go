package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Tasks in doc.go: a take's answer is a look like any other. Two places
// come free with no write (their holders died, their leases lapse); the
// waiting caller ahead is served and takes one, and the task behind it,
// served in the same look, is started from that take's answer rather than
// left for the next write or the schedule's StartDue.
func TestATaskServedInTheSameLookAsATakeIsStartedByIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := newMemStore()
		var st starts
		dead := New(mem, "leases", Options{InstanceID: "d"})
		l := New(mem, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		held := Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: "p", MaxQueued: 4}
		acquire(t, dead, held)
		acquire(t, dead, held) // neither is released: both lapse

		got := make(chan *Lease, 1)
		go func() {
			ls, err := l.Acquire(ctx, Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: "c", Wait: time.Minute, MaxQueued: 4})
			if err != nil {
				t.Errorf("the waiting caller: %v", err)
			}
			got <- ls
		}()
		synctest.Wait() // the caller's ticket is in line
		task, err := l.Enqueue(ctx, Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: "q", MaxQueued: 4}, "", "task-1", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if s := st.list(); len(s) != 0 {
			t.Fatalf("a task started while both places were held: %+v", s)
		}
		ls := <-got // both leases lapse; the caller purges them and takes a place
		if ls == nil {
			return
		}
		defer release(t, ls)
		synctest.Wait()
		s := st.list()
		if len(s) != 1 || s[0].Ticket != task {
			t.Errorf("starts once the caller took one of two free places: %+v; want one, of the task's ticket %s (a place is free and it is the task's turn)", s, task)
		}
	})
}
