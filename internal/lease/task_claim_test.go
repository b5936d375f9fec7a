package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 16: a worker's take lands but its answer is lost, and before
// the worker looks again its lease lapses and a later worker of the task
// claims its place anew (purging the lapsed lease, naming its own claim
// in the ticket). The first must not take that lease for its own, nor
// give it back: the later claim's expiry is past the lapsed one, and the
// ticket names the later claim.
func TestALostTakeDoesNotTakeALaterClaimOfItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faultAPI{API: newMemStore()}
		var st starts
		l := New(f, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		got := st.list()
		if len(got) != 1 {
			t.Fatalf("starts: %+v; want one", got)
		}
		w1 := New(f, "leases", Options{InstanceID: "w1"})
		w2 := New(f, "leases", Options{InstanceID: "w2"})
		var ls2 *Lease
		var err2 error
		f.arm(rule{match: writes("SET", LeasesAttr), fate: lose, after: func() {
			time.Sleep(taskReq("q").Hold + time.Minute) // w1's lease lapses
			ls2, err2 = w2.Claim(context.Background(), taskReq("q"), id, 0)
		}})
		ls1, err1 := w1.Claim(context.Background(), taskReq("q"), id, got[0].Mark)
		if err2 != nil || ls2 == nil {
			t.Fatalf("the later worker's claim of the lapsed place: %v, %v; want the place", ls2, err2)
		}
		if ls1 != nil || !errors.Is(err1, ErrClaimed) {
			t.Fatalf("the worker whose landed take lapsed: %v, %v; want ErrClaimed (the place is the later claim's)", ls1, err1)
		}
		release(t, ls2)
	})
}
