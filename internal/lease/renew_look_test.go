package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// Whose turn (doc.go): a waiter expects a lease's end from its expiry
// when it first saw it, so a holder renewing faster than its look period
// leaves its place late and its looks back off; they back off up to its
// look period only. Once such a holder releases, the waiter first in
// line (its period MaxLook) takes the place within MaxLook, whatever the
// holder's clock says (ahead or behind the waiter's by up to a second).
func TestAWaiterBehindAFastRenewingHolderTakesItsPlaceWithinItsPeriod(t *testing.T) {
	for _, skew := range []time.Duration{0, time.Second, -time.Second} {
		t.Run(fmt.Sprint(skew), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				const maxLook = time.Second
				r := Request{Key: "srv", Cap: 1, MaxQueued: 16, Hold: time.Second, Wait: 5 * time.Minute, Holder: "p"}
				h := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook,
					Clock: func() time.Time { return time.Now().Add(skew) }})
				stuck := holdAfterShortCalls(t, ctx, h, r)
				got := make(chan time.Time, 1)
				go func() {
					ls, err := New(db, rgTable, Options{InstanceID: "w", MaxLook: maxLook}).Acquire(ctx, r)
					if err != nil {
						t.Errorf("the waiter: %v", err)
						got <- time.Time{}
						return
					}
					got <- time.Now()
					_, _ = ls.Finish(context.Background(), Success)
				}()
				// 20 s of renewals every 250 ms: its back-off grows to MaxLook.
				for range 80 {
					time.Sleep(250 * time.Millisecond)
					if err := stuck.Renew(ctx, r.Hold); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(123 * time.Millisecond)
				if _, err := stuck.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				freed := time.Now()
				took := <-got
				if took.IsZero() {
					return
				}
				if d := took.Sub(freed); d > maxLook {
					t.Errorf("the waiter took the place %v after the fast-renewing holder released it; want within its look period %v", d, maxLook)
				}
			})
		})
	}
}
