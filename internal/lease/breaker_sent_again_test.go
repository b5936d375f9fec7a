package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 10, the breaker's counterpart of
// TestAPauseJudgedBeforeItLandsLateDoesNotCloseEveryonesEntry: A's failure
// is judged at 8 s while B's entry is closed (until 10 s), but its write,
// lost and sent again as built, lands at 11 s, when B's entry has passed.
// shutWith closes everyone's for a whole Recovery from the judgement
// (until 18 s), so C, at 12 s, is refused on A's failures alone.
func TestABreakerFailureLandingLateDoesNotCloseEveryonesEntry(t *testing.T) {
	for _, applied := range []bool{false, true} {
		name := "sent again"
		if applied {
			name = "applied late"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx := context.Background()
				br := &Breaker{Name: "t", Threshold: 1, Recovery: 10 * time.Second}
				req := func(holder string) Request {
					return Request{Key: "srv", Hold: time.Minute, Holder: holder, Cap: 10, Tool: "t", Breaker: br}
				}
				var slow interface {
					API
					arm()
				} = &lostFirstWrite{API: db, delay: 3 * time.Second}
				if applied {
					slow = &landThenLose{API: db, delay: 3 * time.Second}
				}
				la := New(slow, "leases", Options{InstanceID: "a"})
				lb := New(db, "leases", Options{InstanceID: "b"})
				lc := New(db, "leases", Options{InstanceID: "c"})
				a, err := la.Acquire(ctx, req("A"))
				if err != nil {
					t.Fatal(err)
				}
				b, err := lb.Acquire(ctx, req("B"))
				if err != nil {
					t.Fatal(err)
				}
				if tr, err := b.Finish(ctx, Failure); err != nil || tr != OpenedForPrincipal {
					t.Fatalf("B's failure: %q, %v", tr, err)
				}
				time.Sleep(8 * time.Second)
				// A's process sees B's entry closed.
				a2, err := la.Acquire(ctx, req("A"))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := a2.Finish(ctx, Abandoned); err != nil {
					t.Fatal(err)
				}
				slow.arm()
				if _, err := a.Finish(ctx, Failure); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second) // 12 s
				c, err := lc.Acquire(ctx, req("C"))
				var open *CircuitOpenError
				if errors.As(err, &open) && !open.HalfOpen && !open.Principal {
					t.Fatalf("C at 12 s, B's entry closed until 10 s only: %v", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				c.Finish(ctx, Success)
			})
		})
	}
}
