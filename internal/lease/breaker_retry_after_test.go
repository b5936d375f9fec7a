package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Gates (doc.go), and docs/admission.md: "A refusal carries Retry-After set
// to the time left closed." B's entry closes at 0 s until 10 s; A's at 8 s
// until 18 s, and "*" with it, now until 10 s only (the earlier of the
// two). At 8.5 s A's call, refused by both, must be told the later end,
// 9.5 s on, and that the breaker is open for it, not "*"'s end (10 s),
// when its own entry still refuses it for 8 s more.
func TestABreakerRefusalTellsTheCallerItsOwnLaterEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		br := &Breaker{Name: "t", Threshold: 1, Recovery: 10 * time.Second}
		l := New(db, "leases", Options{InstanceID: "a"})
		req := func(holder string) Request {
			return Request{Key: "srv", Hold: time.Minute, Holder: holder, Cap: 10, Tool: "t", Breaker: br}
		}
		fail := func(holder string) {
			t.Helper()
			ls, err := l.Acquire(ctx, req(holder))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ls.Finish(ctx, Failure); err != nil {
				t.Fatal(err)
			}
		}
		fail("B")
		time.Sleep(8 * time.Second)
		fail("A")
		time.Sleep(500 * time.Millisecond)
		_, err := l.Acquire(ctx, req("A"))
		var open *CircuitOpenError
		if !errors.As(err, &open) {
			t.Fatalf("A at 8.5 s, its entry closed until 18 s: %v; want refused", err)
		}
		if want := 9500 * time.Millisecond; open.RetryAfter < want || !open.Principal {
			t.Errorf("A at 8.5 s told to retry in %v (principal %v); its own entry refuses it for %v", open.RetryAfter, open.Principal, want)
		}
	})
}
