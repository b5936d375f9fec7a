package lease

// Invariant 6 (doc.go, "Whose turn") for what lets a waiter held back by
// its bucket through: a token given back can make it that waiter's turn
// again, so a take judged from a view that showed it held back must not
// land.

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
		if v, err := i1.read(ctx, "srv"); err != nil || len(v.queue) != 1 || rateLimited(v, tokenReq("W", "a").Rates, i1.clock().UnixMilli()) != nil {
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
