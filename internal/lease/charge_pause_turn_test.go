package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Buckets (doc.go) and invariant 11: a pause of a call holding nothing
// ADDs 1 to freed, as its principal's waiters held back can make it
// another's turn, and a charge conditioned on freed as seen then looks
// again. Every principal's bucket holds 3 tokens a minute. H (p0) holds
// tool heavy (cap 1); A (p0), then W (p1), wait for it. Two calls of tool
// light (no cap: they only charge) of p1 leave p1's bucket one token, W's.
// H finishes: A's turn, whose process is slow to look. Process P, refused
// a call of light for p0 (A needs p0's last token), keeps that view. X,
// a call of light of p0 in flight since the start, is pushed back with a
// pause of p0: A is held back, and it is W's turn, which needs p1's last
// token. P's call of light for p1, built from its view of A's turn, must
// not take it.
func TestAPauseOfACallHoldingNothingMakesAChargeLookAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := func(p string) []Rate { return []Rate{{Name: "principal:" + p, PerMinute: 3}} }
		heavy := func(p string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: p, Rates: rate(p)}
		}
		light := func(p string) Request {
			return Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: p, Rates: rate(p), MaxPause: time.Minute}
		}
		q := New(db, rgTable, Options{InstanceID: "q"})
		x, err := q.Acquire(ctx, light("p0")) // in flight until its pause
		if err != nil {
			t.Fatal(err)
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("p0"))
		slow := &slowProcessAPI{API: db}
		waiter := func(l *Limiter, p string) chan error {
			got := make(chan error, 1)
			go func() {
				ls, err := l.Acquire(ctx, heavy(p))
				if err == nil {
					_, _ = ls.Finish(context.Background(), Unused)
				}
				got <- err
			}()
			synctest.Wait()
			return got
		}
		gotA := waiter(New(slow, rgTable, Options{InstanceID: "a"}), "p0")
		gotW := waiter(New(db, rgTable, Options{InstanceID: "w"}), "p1")
		if n := len(parseItem(rgItem(t, db, rgTable, "srv")).queue); n != 2 {
			t.Fatalf("%d waiting; want A and W", n)
		}
		y := New(db, rgTable, Options{InstanceID: "y"})
		for range 2 {
			ls, err := y.Acquire(ctx, light("p1"))
			if err != nil {
				t.Fatalf("p1's call of light, its bucket holding a token beyond W's: %v", err)
			}
			_, _ = ls.Finish(ctx, Success)
		}
		slow.stop()                                       // A's process is slow to look
		if _, err := h.Finish(ctx, Success); err != nil { // A's turn
			t.Fatal(err)
		}
		p := New(db, rgTable, Options{InstanceID: "p"})
		var rl *RateLimitedError
		if _, err := p.Acquire(ctx, light("p0")); !errors.As(err, &rl) { // A needs p0's last token
			t.Fatalf("p0's call of light with A's turn come: %v; want *RateLimitedError", err)
		}
		x.PauseFor(30 * time.Second)
		if _, err := x.Finish(ctx, Overloaded); err != nil { // p0 paused: W's turn
			t.Fatal(err)
		}
		ls, err := p.Acquire(ctx, light("p1"))
		if err == nil {
			_, _ = ls.Finish(ctx, Success)
			t.Errorf("p0 paused, it was W's turn, p1's bucket holding its one token; P's charge for p1, built from its view of A's turn, took it")
		}
		slow.resume()
		if err := <-gotW; err != nil {
			t.Errorf("W: %v", err)
		}
		cancel()
		<-gotA
	})
}
