package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// As TestARefusedPurgeIsNotResentAtOnce, for a task's worker: Claim
// purges a lapsed claim's lease before it takes the place, and a purge
// the store refuses (another principal's full bucket, which another writer
// sets to a new full time before each of the worker's writes, so its
// purge, conditioned on the time seen, fails) returns an item that shows
// the same entries again. The worker must not send the same purge at once,
// again and again, each a read and a write unit.
func TestAClaimDoesNotResendARefusedPurgeAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var st starts
		l := New(db, rgTable, Options{InstanceID: "a", OnTaskStart: st.hook})
		id, err := l.Enqueue(ctx, taskReq("q"), "", "task-1", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		got := st.list()
		if len(got) != 1 {
			t.Fatalf("starts: %+v; want one", got)
		}
		// The first worker dies holding the place: its lease lapses.
		if _, err := New(db, rgTable, Options{InstanceID: "w1"}).Claim(ctx, taskReq("q"), id, got[0].Mark); err != nil {
			t.Fatal(err)
		}
		other := rewriteBucket(t, db, "z")
		other()
		time.Sleep(time.Minute)
		// Two seconds of the worker's time, or 200 refused purges.
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		pc := &purgeCounter{API: db, ctx: wctx, stop: wcancel, other: other}
		ls, err := New(pc, rgTable, Options{InstanceID: "w2"}).Claim(wctx, taskReq("q"), id, 0)
		if ls != nil {
			t.Fatal("the later worker took the place, its purges refused")
		}
		most, total := pc.burst()
		t.Logf("claim: %v; refused purges: %d, at most %d at one instant", err, total, most)
		if total == 0 {
			t.Fatal("the worker sent no purge the store refused; want some (the bucket)")
		}
		if most > 2 {
			t.Errorf("the worker sent %d refused purges at one instant (%d in all): a purge refused is resent at once, each a write unit", most, total)
		}
	})
}
