package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A task's ticket keeps its turn until its deadline (the task's TTL, up
// to a day) whether or not a worker ever comes to claim the place: a start
// that goes unclaimed is only made again, every StartTimeout. When no
// worker can come — the function's asynchronous invocations throttled
// because synchronous callers hold its concurrency, a missing
// lambda:InvokeFunction grant, a misconfigured TASK_WORKER_FUNCTION, a
// worker failing before it claims — the place stays free while every
// caller queued behind the ticket, of every principal, waits out its
// queue_timeout and is refused: one task wedges the server for everyone.
// Here the place is free for the caller's whole 30 s wait, and every
// start of the task (one each StartTimeout) goes unclaimed.
func TestReviewUnclaimedTaskStarvesCallersBehindAFreePlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts // records the starts; no worker ever claims
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		held := acquire(t, l, taskReq("p"))
		if _, err := l.Enqueue(context.Background(), taskReq("q"), "", "task-1", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		release(t, held) // the place is free from now on
		req := taskReq("r")
		req.Wait = 30 * time.Second
		other := New(db, "leases", Options{InstanceID: "b", OnTaskStart: st.hook})
		ls, err := other.Acquire(context.Background(), req)
		if err != nil {
			t.Errorf("a caller behind a task nobody claims, its place free for the caller's whole %v wait (%d starts made): %v; want the place",
				req.Wait, len(st.list()), err)
			return
		}
		release(t, ls)
	})
}
