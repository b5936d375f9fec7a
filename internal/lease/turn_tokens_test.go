package lease

// Invariant 6 (doc.go, "Whose turn") for what lets a waiter held back by
// its bucket through: a token given back, and a full bucket purged. Either
// can make it that waiter's turn again, so a take judged from a view that
// showed it held back must not land.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// tokenReq is a call of holder's on tool (tool a capped at one place),
// its principal's bucket one token a minute.
func tokenReq(holder, tool string) Request {
	r := Request{Key: "srv", Holder: holder, Tool: tool, Hold: 2 * time.Minute, MaxQueued: 8,
		Rates: []Rate{{Name: "principal:" + holder, PerMinute: 1}}}
	if tool == "a" {
		r.ToolCap = 1
	}
	return r
}

// W waits for tool a, held by X. A call of W's on tool c (no cap: it only
// charges) takes W's one token; X's call ends, and W, its bucket empty,
// is passed over. Then W's call on c is never made: its token comes back,
// and the place is W's. B, a newcomer whose instance's view (X's release)
// still shows W held back, must not take it.
func TestATokenGivenBackIsNotPassedByATakeJudgedBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		i1 := New(db, rgTable, Options{InstanceID: "i1"})
		i2 := New(db, rgTable, Options{InstanceID: "i2"})
		i3 := New(db, rgTable, Options{InstanceID: "i3"})
		ctx := context.Background()
		x, err := i2.Acquire(ctx, tokenReq("X", "a"))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			r := tokenReq("W", "a")
			r.Wait = 30 * time.Second
			ls, err := i3.Acquire(ctx, r)
			if err == nil {
				_, err = ls.Finish(ctx, Success)
			}
			got <- err
		}()
		synctest.Wait() // W waits for tool a
		w, err := i1.Acquire(ctx, tokenReq("W", "c"))
		if err != nil {
			t.Fatal(err)
		}
		if w.TakesPlace() {
			t.Fatal("W's call of tool c, which has no cap, took a place; want it only charged")
		}
		if _, err := x.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, err := w.Finish(ctx, Unused); err != nil { // W's token back
			t.Fatal(err)
		}
		if v, err := i1.read(ctx, "srv"); err != nil || len(v.queue) != 1 || rateLimited(v, tokenReq("W", "a").Rates, i1.clock().UnixMilli(), nil) != nil {
			t.Fatalf("after W's refund: %d waiting, %v; want W waiting with a token", len(v.queue), err)
		}
		if ls, err := i2.Acquire(ctx, tokenReq("B", "a")); err == nil {
			_, _ = ls.Finish(ctx, Success)
			t.Errorf("B, a newcomer judging from a view before W's token came back, took tool a's place while W waited with a token; want B refused, W served first")
		}
		if err := <-got; err != nil {
			t.Errorf("W's call of tool a: %v; want it through", err)
		}
	})
}

// The same with a bucket full on a fast clock and not yet on a slow one:
// the fast instance purges it (absent is full), and B, a newcomer on the
// slow instance whose view still shows W's bucket empty, must not pass W.
func TestABucketPurgedOnAFastClockIsNotPassedOnASlowOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		const skew = 300 * time.Millisecond
		fast := New(db, rgTable, Options{InstanceID: "f", Clock: func() time.Time { return time.Now().Add(skew) }})
		slowClock := func() time.Time { return time.Now().Add(-skew) }
		s1 := New(db, rgTable, Options{InstanceID: "s1", Clock: slowClock})
		s2 := New(db, rgTable, Options{InstanceID: "s2", Clock: slowClock})
		ctx := context.Background()
		x, err := s2.Acquire(ctx, tokenReq("X", "a"))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			r := tokenReq("W", "a")
			r.Wait = 2 * time.Minute
			ls, err := s1.Acquire(ctx, r)
			if err == nil {
				_, err = ls.Finish(ctx, Success)
			}
			got <- err
		}()
		synctest.Wait() // W waits for tool a
		// W's call of tool c takes W's token: its bucket is full again a
		// minute on, on the slow clock: 600 ms earlier on the fast one.
		w, err := s1.Acquire(ctx, tokenReq("W", "c"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		// W looks at least every MaxLook, and once it sees its bucket
		// empty sleeps until it fills on its clock: none of its looks
		// falls between here and B's take.
		time.Sleep(time.Minute - 450*time.Millisecond)
		if _, err := x.Finish(ctx, Success); err != nil { // tool a free; W passed over on the slow clock
			t.Fatal(err)
		}
		v, err := fast.read(ctx, "srv")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := fast.purgeAll(ctx, "srv", v); err != nil {
			t.Fatal(err)
		}
		if v, err = fast.read(ctx, "srv"); err != nil || len(v.queue) != 1 || v.rates[RateAttr("principal:W")] != 0 {
			t.Fatalf("after the fast instance's purge: %d waiting, W's bucket at %d, %v; want W waiting, its bucket gone", len(v.queue), v.rates[RateAttr("principal:W")], err)
		}
		if ls, err := s2.Acquire(ctx, tokenReq("B", "a")); err == nil {
			_, _ = ls.Finish(ctx, Success)
			t.Errorf("B, a newcomer on the slow instance, took tool a's place while W waited with its bucket purged (full) on the item; want B refused, W served first")
		}
		if err := <-got; err != nil {
			t.Errorf("W's call of tool a: %v; want it through", err)
		}
	})
}

// A call that only charges judges from its process's last view of the
// key, however old: W waits for tool a, held by X; Z's call on i2 shows
// i2 W held back by the tool. X's call ends: it is W's turn, and W needs
// its principal's one token. A call of W's own principal on tool c, sent
// from i2, must leave that token to W.
func TestAChargeJudgedBeforeAPlaceFreedLeavesTheWaiterItsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		i1 := New(db, rgTable, Options{InstanceID: "i1"})
		i2 := New(db, rgTable, Options{InstanceID: "i2"})
		i3 := New(db, rgTable, Options{InstanceID: "i3"})
		ctx := context.Background()
		x, err := i1.Acquire(ctx, tokenReq("X", "a"))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			r := tokenReq("W", "a")
			r.Wait = 30 * time.Second
			ls, err := i3.Acquire(ctx, r)
			if err == nil {
				_, err = ls.Finish(ctx, Success)
			}
			got <- err
		}()
		synctest.Wait() // W waits for tool a
		if _, err := i2.Acquire(ctx, tokenReq("Z", "c")); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		if _, err := i2.Acquire(ctx, tokenReq("W", "c")); err == nil {
			t.Errorf("a call of W's on tool c took W's one token after X's call ended and it was W's turn at tool a; want it refused (rate limited), the token left to W")
		}
		if err := <-got; err != nil {
			t.Errorf("W's call of tool a: %v; want it through", err)
		}
	})
}
