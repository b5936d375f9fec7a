package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 6 with a task's claim: a waiter's take judged while another
// principal's task, numbered after it, held a claim must not land once
// that claim lapsed and was purged. The task's ticket waits again, and its
// principal, holding no place, ranks before the waiter's, which holds
// one: the one token the take uses is the task's turn. (The purge moves
// freed; a take conditioned on freed as seen fails.)
func TestAWaiterDoesNotTakeTheTurnOfAClaimBehindItThatLapsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := &faultAPI{API: newMemStore()}
		var st starts
		// 4 a minute: a token each 15 s, a burst of 4.
		rate := []Rate{{Name: "server", PerMinute: 4}}
		p := func() Request {
			return Request{Key: "srv", Cap: 3, Hold: time.Hour, Holder: "p", MaxQueued: 4, Wait: 10 * time.Minute, Rates: rate}
		}
		task := Request{Key: "srv", Cap: 3, Hold: 20 * time.Second, Holder: "q", MaxQueued: 4, Rates: rate}
		l := New(f, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		h := acquire(t, l, p()) // p keeps a place throughout
		defer release(t, h)
		x1, x2 := acquire(t, l, p()), acquire(t, l, p()) // the cap full, a token left
		lw := New(f, "leases", Options{InstanceID: "w", OnTaskStart: st.hook})
		got := make(chan *Lease, 1)
		go func() {
			ls, err := lw.Acquire(ctx, p())
			if err != nil {
				t.Errorf("the waiter: %v", err)
			}
			got <- ls
		}()
		synctest.Wait()
		id := enqueue(t, l, task, "task-1") // numbered after the waiter
		release(t, x1)
		synctest.Wait()
		starts := st.list()
		if len(starts) != 1 || starts[0].Ticket != id {
			t.Fatalf("starts: %+v; want the task's (q holds no place, p one)", starts)
		}
		// Its worker claims the place and the last token, and ends before
		// its call: the claim lapses unreleased.
		worker := New(f, "leases", Options{InstanceID: "worker"})
		if _, err := worker.Claim(ctx, task, id, starts[0].Mark); err != nil {
			t.Fatal(err)
		}
		claimed := time.Now()
		// A place frees; the next token (15 s on) is the waiter's turn,
		// the task being claimed. Its take is held in the network while
		// the claim lapses and a purge removes its lease, and lands before
		// the token after (30 s on).
		var landed []bool
		f.arm(rule{match: writes("SET", LeasesAttr), fate: hold, after: func() {
			time.Sleep(time.Until(claimed.Add(task.Hold + DefaultMargin + time.Second)))
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Error(err)
				return
			}
			if _, purged, err := l.purgeAll(ctx, "srv", v); err != nil || !purged {
				t.Errorf("the purge of the lapsed claim: %v, %v", purged, err)
			}
			landed = f.release()
		}})
		release(t, x2)
		ls := <-got
		if len(landed) != 1 {
			t.Fatalf("held takes: %v; want one", landed)
		}
		if landed[0] {
			t.Errorf("the waiter's take judged while the task behind it was claimed landed after its claim lapsed and was purged: it took the task's turn")
		}
		if ls != nil {
			release(t, ls)
		}
	})
}
