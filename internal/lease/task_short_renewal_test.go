package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A renewal asking a shorter hold than its lease has left sets an expiry
// before the one its holder knows it wrote (exps[0]). Landed with its
// answer lost, it lets the lease lapse early: a later claim, made while
// the ticket is there, then sets an expiry past that lapse but not past
// exps[0], and may set exps[0] itself. Once the ticket lapses and is
// purged while the later claim's call runs, the first worker's late
// release or renewal (ticket gone, lease at exps[0]) must not give back,
// or extend, the later claim's lease.
//
// shortRenewalThenLaterClaim sets that up: it returns the fault store and
// both workers' leases, the ticket purged and the later claim's lease live.
func shortRenewalThenLaterClaim(t *testing.T) (f *faultAPI, ls1, ls2 *Lease) {
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
	// The later worker's clock runs a fraction of a second behind (whole
	// seconds), well within Margin: its claim's expiry is then exact.
	w2 := New(f, "leases", Options{InstanceID: "w2", Clock: func() time.Time { return time.Now().Truncate(time.Second) }})
	req1 := taskReq("q")
	req1.Hold = 30 * time.Second // a long call's hold: past the ticket's deadline
	ls1, err = w1.Claim(ctx, req1, id, got[0].Mark)
	if err != nil {
		t.Fatal(err)
	}
	known := ls1.Expiry // exps[0]
	time.Sleep(time.Second)
	// A renewal for 3s: it lands, its answer lost, and every retry is
	// held in the network, so its outcome stays unknown.
	f.arm(rule{match: writes("SET", LeasesAttr), fate: lose})
	for range writeAttempts {
		f.arm(rule{match: writes("SET", LeasesAttr), fate: hold})
	}
	if err := ls1.Renew(ctx, 3*time.Second); err == nil {
		t.Fatal("the renewal's answer was lost: no error")
	}
	s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil)
	if len(s.Leases) != 1 || !s.Leases[0].Expiry.Before(known) {
		t.Fatalf("after the short renewal: %+v; want the lease expiring before %v", s, known)
	}
	time.Sleep(time.Until(s.Leases[0].Expiry.Truncate(time.Second).Add(2 * time.Second))) // lapsed early
	req2 := taskReq("q")
	req2.Hold = known.Sub(time.Now().Truncate(time.Second)) - w2.Margin() // its expiry is the first claim's
	ls2, err = w2.Claim(ctx, req2, id, 0)
	if err != nil {
		t.Fatalf("the later worker's claim of the lapsed place: %v", err)
	}
	if !ls2.Expiry.Equal(known) {
		t.Fatalf("the later claim expires %v; want the first claim's %v", ls2.Expiry, known)
	}
	time.Sleep(time.Until(deadline.Add(l.Margin())) + time.Second) // the ticket lapsed
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

func TestALateReleaseAfterAShortRenewalLeavesALaterClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ls1, ls2 := shortRenewalThenLaterClaim(t)
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

func TestALateRenewalAfterAShortRenewalLeavesALaterClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, ls1, ls2 := shortRenewalThenLaterClaim(t)
		if err := ls1.Renew(context.Background(), taskReq("q").Hold); !errors.Is(err, ErrNotHeld) {
			t.Errorf("the first worker's late renewal: %v; want ErrNotHeld (the place is the later claim's)", err)
		}
		if s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil); len(s.Leases) != 1 || !s.Leases[0].Expiry.Equal(ls2.Expiry) {
			t.Errorf("after the late renewal: %+v; want the later claim's lease, expiring %v", s, ls2.Expiry)
		}
	})
}
