package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// The liveness rule (sim.liveness) allows a waiter what the schedule's
// faults cost its requests, never what it cost itself: a request whose
// answer its caller stopped waiting for before the schedule did anything
// but take it (its own context ended) adds nothing to the allowance, so a
// waiter that gives up on its own looks cannot pass for one the store kept
// waiting; one the schedule held, and that the caller gave up on (a
// withdrawal's budget running out), costs it the time to then and a look.
func TestSimAllowsForTheSchedulesFaultsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sim{t: t, kick: make(chan struct{}, 1), shown: map[int]int64{}}
		c := &simCaller{inflight: map[*simReq]bool{}}
		api := simAPI{s: s}
		ctx := context.WithValue(context.Background(), simCallerKey{}, c)

		// Given up on at once, never faulted by the schedule.
		gone, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := api.GetItem(gone, &dynamodb.GetItemInput{Key: simKey()}); err == nil {
			t.Fatal("a read whose context had ended was answered")
		}
		if c.lat != 0 {
			t.Errorf("a read its caller gave up on before the schedule faulted it added %v to the caller's allowance; want none", c.lat)
		}

		// Held by the schedule past the caller's budget.
		budget, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		go func() {
			synctest.Wait() // the read is pending
			s.mu.Lock()
			for _, r := range s.pending {
				r.orig.faulted = true // held: never answered here
			}
			s.mu.Unlock()
		}()
		s.pending, c.lat = nil, 0
		if _, err := api.GetItem(budget, &dynamodb.GetItemInput{Key: simKey()}); err == nil {
			t.Fatal("a read the schedule held was answered")
		}
		if want := 2*time.Second + DefaultMaxLook; c.lat != want {
			t.Errorf("a read the schedule held until its caller gave up after 2 s added %v to the caller's allowance; want %v (the time to then and a look)", c.lat, want)
		}
	})
}
