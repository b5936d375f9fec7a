package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// Invariants 4 and 13: malformed values never cost a call its pause. A
// call holding nothing whose upstream asked for a pause repairs the item
// first when its view shows a value written by hand, then writes the
// pause, all within maxEager tries: maxEager × maxRepair malformed values
// (each repair puts right maxRepair) use every try on repairs, and the
// pause is never written, though each repair landed.
func TestAPauseOfACallHoldingNothingOverManyHandEditsIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		wc := &writeCounter{API: db}
		l := New(wc, rgTable, Options{InstanceID: "a"})
		r := Request{Key: "srv", Hold: time.Second, Holder: "p", Rates: []Rate{{Name: "server", PerMinute: 600}}}
		ls, err := l.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		for i := range maxEager * maxRepair {
			handEdit(t, db, number(1), BreakerAttr(fmt.Sprintf("a%03d", i)))
		}
		if _, err := l.read(ctx, "srv"); err != nil {
			t.Fatal(err)
		}
		ls.PauseFor(time.Minute)
		asked := ls.pauseUntil
		_, before := wc.burst()
		if _, err := ls.Finish(ctx, Overloaded); err != nil {
			t.Fatal(err)
		}
		_, total := wc.burst()
		v := parseItem(rgItem(t, db, rgTable, "srv"))
		if got := v.gates[PauseAttr].entry("p").until; got < asked {
			t.Errorf("the pause asked until %d over %d malformed values was lost: the item's is %d, after %d writes (%d fixes left)",
				asked, maxEager*maxRepair, got, total-before, len(v.fixes))
		}
	})
}
