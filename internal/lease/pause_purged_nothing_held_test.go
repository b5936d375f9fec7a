package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 13: a call holding nothing whose upstream asked for a pause
// shorter than one its process last saw must not take that pause as
// standing: a take on a clock 300 ms ahead (within the skew the protocol
// allows) may have purged it as passed, and then the pause asked, still
// 150 ms ahead on the call's own clock, is lost. A release that holds a
// place conditions its write on the entry as seen; this one must too.
func TestAShorterPauseOfACallHoldingNothingOutlivesAPurgeOfTheLongerOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := newMemStore()
		l := New(db, "leases", Options{InstanceID: "a"})
		r := func(holder string) Request {
			return Request{Key: "srv", Hold: time.Second, Holder: holder, Rates: []Rate{{Name: "server", PerMinute: 600}}}
		}
		first, err := l.Acquire(ctx, r("p"))
		if err != nil {
			t.Fatal(err)
		}
		second, err := l.Acquire(ctx, r("p"))
		if err != nil {
			t.Fatal(err)
		}
		// The first's upstream asks for 1 s: the process sees that pause.
		first.PauseFor(time.Second)
		long := first.pauseUntil
		if _, err := first.Finish(ctx, Overloaded); err != nil {
			t.Fatal(err)
		}
		time.Sleep(800 * time.Millisecond)
		// Another principal's take, on a clock 300 ms ahead, purges it.
		fast := New(db, "leases", Options{InstanceID: "f", Clock: func() time.Time { return time.Now().Add(300 * time.Millisecond) }})
		rq := r("q")
		rq.Cap = 4
		q, err := fast.Acquire(ctx, rq)
		if err != nil {
			t.Fatal(err)
		}
		if got := parseItem(rgItem(t, db, "leases", "srv")).gates[PauseAttr].entry("p").until; got != 0 {
			t.Fatalf("p's pause until %d (asked %d) stands after a take on a clock 300 ms ahead, 200 ms past it", got, long)
		}
		// The second's upstream asks for 150 ms: until before the first's.
		second.PauseFor(150 * time.Millisecond)
		asked := second.pauseUntil
		if _, err := second.Finish(ctx, Overloaded); err != nil {
			t.Fatal(err)
		}
		if got := parseItem(rgItem(t, db, "leases", "srv")).gates[PauseAttr].entry("p").until; got < asked {
			t.Errorf("the pause asked until %d, %d ms ahead, was lost: the item's is %d (the process saw one until %d, since purged)",
				asked, asked-time.Now().UnixMilli(), got, long)
		}
		_, _ = q.Finish(ctx, Success)
	})
}
