package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 4 (doc.go): malformed values never wedge a key, and no retry
// runs without a pause. A release repairs the item when a hand edit fails
// its condition, for its first maxEager tries only; it is made again from
// every failed answer after that, for ever. A probe's failure is
// conditioned on its breaker's gate pinned as seen (its size among
// them), which a malformed entry of that gate fails. With more malformed
// values sorting before that entry than maxEager repairs put right
// (maxRepair each), the release sends write after write at one instant,
// none landing, and the place is never given back.
func TestAProbesReleaseOverManyHandEditsGivesItsPlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		br := &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}
		r := Request{Key: "srv", Cap: 2, Hold: time.Second, Holder: "p", Tool: "t", Breaker: br}
		wc := &writeCounter{API: db}
		l := New(wc, rgTable, Options{InstanceID: "a"})
		first := acquire(t, l, r)
		if _, err := first.Finish(ctx, Failure); err != nil {
			t.Fatal(err)
		}
		time.Sleep(br.Recovery + time.Second) // half-open: the next call is its probe
		probe := acquire(t, l, r)
		if len(probe.probes) == 0 {
			t.Fatal("the call after Recovery is no probe")
		}
		// By hand: one entry of the breaker's gate not a map, and
		// maxEager × maxRepair gates not maps, sorting before it.
		handEdit(t, db, number(1), BreakerAttr("t"), "q")
		for i := range maxEager * maxRepair {
			handEdit(t, db, number(1), BreakerAttr(fmt.Sprintf("a%03d", i)))
		}
		_, before := wc.burst()
		_, err := probe.Finish(ctx, Failure)
		most, total := wc.burst()
		total -= before
		v := parseItem(rgItem(t, db, rgTable, "srv"))
		if err != nil || v.leases[probe.ID()] != 0 {
			t.Errorf("the probe's release over %d malformed values: %v after %d writes, %d at one instant; its lease still there: %v",
				maxEager*maxRepair+1, err, total, most, v.leases[probe.ID()] != 0)
		}
	})
}
