package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 14 (doc.go, "Whose turn"): a waiter's back-off starts from
// 5 ms after its join, not again for each caller before it that leaves. Calls
// on a key of cap 1 last 100 ms (call_ms); five callers wait before a
// sixth, and each takes the place in turn and holds it a second, its call
// abandoned (which leaves call_ms as it was), so the waiter behind finds
// its place late before each take. Each take moves it up the queue:
// were a move up to start its back-off again from 5 ms, each would cost
// it the climb again (5 ms, half as long again each look, to its
// period), about ten reads a departure, reads growing with the waiters
// times the departures. It reads at most one climb from 5 ms to MaxLook,
// plus two looks for each caller before it (its place expected anew, and
// found late) and one per MaxLook waited; and it still takes the place
// within a look of its freeing.
func TestAWaiterMovingUpKeepsItsBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		db := newMemStore()
		const (
			maxLook = time.Second
			ahead   = 5
			call    = time.Second
		)
		r := Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "p", MaxQueued: 16, Wait: time.Minute}
		h := holdAfterShortCalls(t, ctx, New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook}), r)
		done := make(chan struct{}, ahead)
		for i := range ahead {
			l := New(db, rgTable, Options{InstanceID: fmt.Sprintf("a%d", i), MaxLook: maxLook})
			go func() {
				defer func() { done <- struct{}{} }()
				ls, err := l.Acquire(ctx, r)
				if err != nil {
					t.Errorf("caller %d before the waiter: %v", i, err)
					return
				}
				time.Sleep(call)
				if _, err := ls.Finish(context.Background(), Abandoned); err != nil {
					t.Errorf("caller %d before the waiter: release: %v", i, err)
				}
			}()
			synctest.Wait()
		}
		rec := &readTimes{API: db}
		type result struct {
			ls *Lease
			at time.Time
		}
		got := make(chan result, 1)
		joined := time.Now()
		go func() {
			ls, err := New(rec, rgTable, Options{InstanceID: "w", MaxLook: maxLook}).Acquire(ctx, r)
			if err != nil {
				t.Errorf("the waiter: %v", err)
			}
			got <- result{ls, time.Now()}
		}()
		synctest.Wait()
		if n := rgMapLen(rgItem(t, db, rgTable, "srv"), rgQueue); n != ahead+1 {
			t.Fatalf("%d tickets; want the %d waiters'", n, ahead+1)
		}
		time.Sleep(call)
		if _, err := h.Finish(context.Background(), Abandoned); err != nil {
			t.Fatal(err)
		}
		for range ahead {
			<-done
		}
		freed := time.Now() // the last caller before it released
		res := <-got
		if res.ls == nil {
			return
		}
		release(t, res.ls)
		if took := res.at.Sub(freed); took > maxLook {
			t.Errorf("the waiter took the place %v after it freed; want within a look, %v", took, maxLook)
		}
		climb := 0
		for d := overdueLook; d < maxLook; d = d * 3 / 2 {
			climb++
		}
		waited := res.at.Sub(joined)
		want := climb + 2*ahead + int(waited/maxLook) + 1
		n := rec.since(joined, res.at)
		t.Logf("the waiter read the item %d times in %v behind %d callers (at most %d); it took the place %v after it freed",
			n, waited, ahead, want, res.at.Sub(freed))
		if n > want {
			t.Errorf("the waiter read the item %d times in %v behind %d callers that each held the place past its expected end; "+
				"want at most %d: one climb from 5 ms to MaxLook (%d looks), two looks a caller before it, one a MaxLook waited",
				n, waited, ahead, want, climb)
		}
	})
}
