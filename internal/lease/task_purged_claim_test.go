package lease

import (
	"context"
	"errors"
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
	f = &faultAPI{API: newMemStore()}
	var st starts
	l := New(f, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
	deadline := time.Now().Add(13 * time.Second)
	id, err := l.Enqueue(ctx, taskReq("q"), "", "task-1", deadline)
	if err != nil {
		t.Fatal(err)
	}
	got := st.list()
	if len(got) != 1 {
		t.Fatalf("starts: %+v; want one", got)
	}
	w1 := New(f, "leases", Options{InstanceID: "w1"})
	w2 := New(f, "leases", Options{InstanceID: "w2"})
	ls1, err = w1.Claim(ctx, taskReq("q"), id, got[0].Mark)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	for range writeAttempts { // every attempt of the renewal
		f.arm(rule{match: writes("SET", LeasesAttr), fate: hold})
	}
	renewedTo := time.Now().Add(taskReq("q").Hold + w1.Margin())
	if err := ls1.Renew(ctx, taskReq("q").Hold); err == nil {
		t.Fatal("the renewal held in the network: no error")
	}
	time.Sleep(time.Until(ls1.Expiry) + time.Second) // lapsed, the renewal never landing
	req2 := taskReq("q")
	req2.Hold = time.Until(renewedTo) - w2.Margin() // its expiry is the renewal's
	ls2, err = w2.Claim(ctx, req2, id, 0)
	if err != nil {
		t.Fatalf("the later worker's claim of the lapsed place: %v", err)
	}
	if !ls2.Expiry.Equal(renewedTo) {
		t.Fatalf("the later claim expires %v; want the held renewal's %v", ls2.Expiry, renewedTo)
	}
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
	synctest.Test(t, func(t *testing.T) {
		f, ls1, ls2 := laterClaimOutlivingItsTicket(t)
		if _, err := ls1.Finish(context.Background(), Success); !errors.Is(err, ErrNotHeld) {
			t.Errorf("the first worker's late release: %v; want ErrNotHeld (the place is the later claim's)", err)
		}
		if s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil); len(s.Leases) != 1 || s.Leases[0].Lapsed {
			t.Errorf("after the late release: %+v; want the later claim's lease", s)
		}
		if _, err := ls2.Finish(context.Background(), Success); err != nil {
			t.Errorf("the later claim's release: %v; want its place given back by it", err)
		}
	})
}

// Invariant 16: as above, the first worker renewing late: it must not
// extend the later claim's lease as its own.
func TestALateRenewalLeavesALaterClaimOutlivingItsTicket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ls1, ls2 := laterClaimOutlivingItsTicket(t)
		if err := ls1.Renew(context.Background(), taskReq("q").Hold); !errors.Is(err, ErrNotHeld) {
			t.Errorf("the first worker's late renewal: %v; want ErrNotHeld (the place is the later claim's)", err)
		}
		s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil)
		if len(s.Leases) != 1 || !s.Leases[0].Expiry.Equal(ls2.Expiry) {
			t.Errorf("after the late renewal: %+v; want the later claim's lease, expiring %v", s, ls2.Expiry)
		}
		if _, err := ls2.Finish(context.Background(), Success); err != nil {
			t.Errorf("the later claim's release: %v; want its place given back by it", err)
		}
	})
}
