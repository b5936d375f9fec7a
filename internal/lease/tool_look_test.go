package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 14 (doc.go, "Whose turn"): a waiter looks when its place is
// expected to free. A waiter for a full tool expects its place from that
// tool's leases; the callers of other tools before it in the queue take
// the places other tools' calls free, not its tool's. Server cap 2, tool t
// capped at 1; calls last 1 s (call_ms). One call of t and one of u hold
// both places; a caller X of u waits, then W of t. Both calls end at once,
// on time: X takes one place, and W's turn comes with the other (t free,
// a place free). W expected that: its place frees when the call of t ends.
// It looks then, and takes its place; it does not sleep on as if X were
// to take the call of t's place and W to wait a call's length more.
func TestFullToolWaiterBehindAnotherToolsCallerLooksWhenItsPlaceFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const maxLook = time.Second
		rt := Request{Key: "srv", Cap: 2, Tool: "t", ToolCap: 1, MaxQueued: 16, Hold: 10 * time.Minute, Wait: 5 * time.Minute, Holder: "p"}
		ru := rt
		ru.Tool, ru.ToolCap, ru.Holder = "u", 0, "q"
		h := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook})
		for range 4 { // calls on the key last 1 s (call_ms)
			ls, err := h.Acquire(ctx, ru)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
		}
		lt, err := h.Acquire(ctx, rt)
		if err != nil {
			t.Fatal(err)
		}
		lu, err := h.Acquire(ctx, ru)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		took := make(chan time.Duration, 2)
		for i, r := range []Request{ru, rt} {
			l := New(db, rgTable, Options{InstanceID: []string{"x", "w"}[i], MaxLook: maxLook})
			go func() {
				ls, err := l.Acquire(ctx, r)
				if err != nil {
					return
				}
				if r.Tool == "t" {
					took <- time.Since(start)
				}
				<-ctx.Done()
				_, _ = ls.Finish(context.Background(), Success)
			}()
			synctest.Wait()
		}
		if n := rgMapLen(rgItem(t, db, rgTable, "srv"), rgQueue); n != 2 {
			t.Fatalf("%d tickets; want X's and W's", n)
		}
		// Both calls end on time (a little before the half call's length
		// a waiter that has seen no spread allows).
		time.Sleep(450 * time.Millisecond)
		for _, ls := range []*Lease{lu, lt} {
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
		}
		freed := time.Since(start)
		select {
		case d := <-took:
			t.Logf("W's place freed at %v; W took it at %v", freed, d)
			if d >= maxLook {
				t.Errorf("W's place freed at %v, when W expected it, but W took it only at %v: it slept as if X, a caller of another tool, were to take its tool's place", freed, d)
			}
		case <-time.After(time.Minute):
			t.Fatal("W never took its place")
		}
	})
}
