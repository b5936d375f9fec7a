package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A renewal asking a shorter hold than its lease has left must not set an
// expiry before the one its holder knows it wrote (doc.go, Renew: "a later
// expiry"). Were it to, landed with its answer lost, the lease would lapse
// early: a later claim, made while the ticket is there, would set an
// expiry past that lapse but not past the known one, and might set the
// known one itself; once the ticket lapsed and was purged while the later
// claim's call ran, the first worker's late release or renewal (ticket
// gone, lease at the expiry it knows) would give back, or extend, the
// later claim's lease. A short renewal, its answer known or lost, leaves
// the expiry where it was.
func TestARenewalNeverSetsAnExpiryBeforeTheOneItKnows(t *testing.T) {
	for _, lost := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			f := &faultAPI{API: newMemStore()}
			var st starts
			l := New(f, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
			id, err := l.Enqueue(ctx, taskReq("q"), "", "task-1", time.Now().Add(13*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			got := st.list()
			if len(got) != 1 {
				t.Fatalf("starts: %+v; want one", got)
			}
			req := taskReq("q")
			req.Hold = 30 * time.Second // a long call's hold: past the ticket's deadline
			ls, err := New(f, "leases", Options{InstanceID: "w1"}).Claim(ctx, req, id, got[0].Mark)
			if err != nil {
				t.Fatal(err)
			}
			known := ls.Expiry
			time.Sleep(time.Second)
			if lost {
				// It lands, its answer lost, and every retry is held in
				// the network: its outcome stays unknown.
				f.arm(rule{match: writes("SET", LeasesAttr), fate: lose})
				for range writeAttempts {
					f.arm(rule{match: writes("SET", LeasesAttr), fate: hold})
				}
			}
			err = ls.Renew(ctx, 3*time.Second)
			if lost != (err != nil) {
				t.Fatalf("the short renewal (answer lost %v): %v", lost, err)
			}
			s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil)
			if len(s.Leases) != 1 || s.Leases[0].Expiry.Before(known) {
				t.Errorf("after a short renewal (answer lost %v): %+v; want the lease expiring at %v or later", lost, s, known)
			}
		})
	}
}
