package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Tasks and Whose turn (doc.go): callers pass a task only once its start
// has gone unclaimed StartTimeout, and a waiter fewer than Places behind
// looks at least every MaxLook. A waiter behind a task whose start nobody
// claims (the worker died) so takes the free place no sooner than
// StartTimeout after the start was marked and no later than a look
// period after that; its turn recorded for the task must not make it
// wait longer, nor pass the task early.
func TestAWaiterPassesAnUnclaimedTaskWithinALookOfStartTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		db := newMemStore()
		var st starts
		const maxLook = time.Second
		l := New(db, rgTable, Options{InstanceID: "a", MaxLook: maxLook, OnTaskStart: st.hook})
		h := acquire(t, l, Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "p", MaxQueued: 4})
		enqueue(t, l, Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "q", MaxQueued: 4}, "task-1")
		got := make(chan *Lease, 1)
		go func() {
			ls, err := New(db, rgTable, Options{InstanceID: "w", MaxLook: maxLook}).Acquire(ctx,
				Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "r", MaxQueued: 4, Wait: time.Minute})
			if err != nil {
				t.Errorf("the waiter: %v", err)
			}
			got <- ls
		}()
		synctest.Wait()
		time.Sleep(200 * time.Millisecond) // a call of 200 ms: call_ms
		release(t, h)
		synctest.Wait()
		starts := st.list()
		if len(starts) != 1 {
			t.Fatalf("starts of the task: %d; want 1 (its turn came)", len(starts))
		}
		marked := time.UnixMilli(starts[0].Mark)
		ls := <-got
		took := time.Now()
		if ls == nil {
			t.Fatal("the waiter got no place")
		}
		release(t, ls)
		t.Logf("taken %v after the mark", took.Sub(marked))
		if d := took.Sub(marked); d < StartTimeout || d > StartTimeout+maxLook+maxLook/4 {
			t.Errorf("the waiter took the place %v after the task's start was marked; want between StartTimeout (%v) and a look period after it", d, StartTimeout)
		}
	})
}
