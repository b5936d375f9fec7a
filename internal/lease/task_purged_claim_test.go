package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// laterClaimOutlivingItsTicket is laterClaimAtUnsureRenewal with a task
// whose deadline falls between the later claim and its lease's expiry:
// after the later claim, the ticket lapses and a purge takes it out while
// the later claim's lease (the expiry of the first worker's unsure
// renewal) is live. The ticket gone names no claim at all.
func laterClaimOutlivingItsTicket(t *testing.T) (f *faultAPI, ls1, ls2 *Lease) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(13 * time.Second)
	f, ls1, ls2 = laterClaimAtUnsureRenewalUntil(t, deadline)
	l := New(f, "leases", Options{InstanceID: "a"})
	time.Sleep(time.Until(deadline.Add(l.Margin())) + time.Second) // the ticket lapsed, the later lease live
	if !time.Now().Before(ls2.Expiry) {
		t.Fatalf("the later claim's lease lapsed (%v) before the ticket's purge", ls2.Expiry)
	}
	v, err := l.read(ctx, "srv")
	if err != nil {
		t.Fatal(err)
	}
	if _, purged, err := l.purgeAll(ctx, "srv", v); err != nil || !purged {
		t.Fatalf("the purge of the lapsed ticket: %v, %v", purged, err)
	}
	if s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil); len(s.Queue) != 0 || len(s.Leases) != 1 {
		t.Fatalf("after the purge: %+v; want the later claim's lease alone", s)
	}
	return f, ls1, ls2
}

// Invariant 16: the first worker of laterClaimOutlivingItsTicket, late,
// ends its call after the ticket's purge: its release must not give back
// the later claim's place while that claim's call runs.
func TestALateReleaseLeavesALaterClaimOutlivingItsTicket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { lateReleaseLeavesTheLaterClaim(t)(laterClaimOutlivingItsTicket(t)) })
}

// Invariant 16: as above, the first worker renewing late: it must not
// extend the later claim's lease as its own.
func TestALateRenewalLeavesALaterClaimOutlivingItsTicket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { lateRenewalLeavesTheLaterClaim(t)(laterClaimOutlivingItsTicket(t)) })
}
