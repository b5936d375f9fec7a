package lease

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Invariant 16: a worker's take lands but its answer is lost, and before
// the worker looks again its lease lapses and a later worker of the task
// claims its place anew (purging the lapsed lease, naming its own claim
// in the ticket). The first must not take that lease for its own, nor
// give it back: the later claim's expiry is past the lapsed one, and the
// ticket names the later claim.
func TestALostTakeDoesNotTakeALaterClaimOfItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faultAPI{API: newMemStore()}
		id, start := startedTask(t, f)
		w1 := New(f, "leases", Options{InstanceID: "w1"})
		w2 := New(f, "leases", Options{InstanceID: "w2"})
		var ls2 *Lease
		var err2 error
		f.arm(rule{match: writes("SET", LeasesAttr), fate: lose, after: func() {
			time.Sleep(taskReq("q").Hold + time.Minute) // w1's lease lapses
			ls2, err2 = w2.Claim(context.Background(), taskReq("q"), id, 0)
		}})
		ls1, err1 := w1.Claim(context.Background(), taskReq("q"), id, start.Mark)
		if err2 != nil || ls2 == nil {
			t.Fatalf("the later worker's claim of the lapsed place: %v, %v; want the place", ls2, err2)
		}
		if ls1 != nil || !errors.Is(err1, ErrClaimed) {
			t.Fatalf("the worker whose landed take lapsed: %v, %v; want ErrClaimed (the place is the later claim's)", ls1, err1)
		}
		release(t, ls2)
	})
}

// oldTakes passes writes on as an instance built before claims named
// themselves makes them: a claim's take sets no w in its ticket, and a
// task's release or renewal is not conditioned on it.
type oldTakes struct{ API }

func (o oldTakes) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for p, n := range in.ExpressionAttributeNames {
		if n != ticketClaim {
			continue
		}
		if c := aws.ToString(in.ConditionExpression); strings.Contains(c, "."+p+" = ") {
			re := regexp.MustCompile(`( AND )?\(#n\d+\.#n\d+\.` + p + ` = (:\w+) OR \(attribute_not_exists\(#n\d+\.#n\d+\) AND [^()]*\)\)`)
			if m := re.FindStringSubmatch(c); m != nil {
				delete(in.ExpressionAttributeValues, m[2])
				in.ConditionExpression = aws.String(strings.TrimPrefix(strings.Replace(c, m[0], "", 1), " AND "))
			}
		}
		expr := aws.ToString(in.UpdateExpression)
		if set := clause(expr, "SET"); strings.Contains(set, "."+p+" = ") {
			var kept []string
			for _, s := range strings.Split(set, ", ") {
				if lhs, val, _ := strings.Cut(strings.TrimSpace(s), " = "); strings.HasSuffix(lhs, "."+p) {
					delete(in.ExpressionAttributeValues, val)
					continue
				}
				kept = append(kept, strings.TrimSpace(s))
			}
			rest := strings.Replace(expr, "SET "+set, "", 1)
			if len(kept) > 0 {
				rest = "SET " + strings.Join(kept, ", ") + " " + rest
			}
			in.UpdateExpression = aws.String(strings.TrimSpace(rest))
		}
		for q := range in.ExpressionAttributeNames {
			if !usesName(aws.ToString(in.UpdateExpression), q) && !usesName(aws.ToString(in.ConditionExpression), q) {
				delete(in.ExpressionAttributeNames, q)
			}
		}
	}
	return o.API.UpdateItem(ctx, in, opts...)
}

// usesName reports whether expr names placeholder q ("#n1", not "#n10").
func usesName(expr, q string) bool {
	for i := strings.Index(expr, q); i >= 0; {
		if end := i + len(q); end == len(expr) || expr[end] < '0' || expr[end] > '9' {
			return true
		}
		j := strings.Index(expr[i+1:], q)
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// Mixed versions (docs/admission.md): as above, but the later claim is
// made by an instance built before claims named themselves, so the
// ticket still names the first worker's lapsed claim. The first worker,
// on this version, takes a lease only its ticket's claim names — yet it
// must not take the other's place for its own: the task would run twice.
func TestALostTakeDoesNotTakeAnOldInstancesLaterClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		f := &faultAPI{API: mem}
		id, start := startedTask(t, f)
		w1 := New(f, "leases", Options{InstanceID: "w1"})
		old := New(oldTakes{mem}, "leases", Options{InstanceID: "old"})
		var ls2 *Lease
		var err2 error
		f.arm(rule{match: writes("SET", LeasesAttr), fate: lose, after: func() {
			time.Sleep(taskReq("q").Hold + time.Minute) // w1's lease lapses
			ls2, err2 = old.Claim(context.Background(), taskReq("q"), id, 0)
		}})
		ls1, err1 := w1.Claim(context.Background(), taskReq("q"), id, start.Mark)
		if err2 != nil || ls2 == nil {
			t.Fatalf("the old instance's claim of the lapsed place: %v, %v; want the place", ls2, err2)
		}
		if ls1 != nil {
			t.Fatalf("the worker whose landed take lapsed took the old instance's lease (expiring %v, the old claim's %v) for its own: the task runs twice; want ErrClaimed", ls1.Expiry, ls2.Expiry)
		}
		if !errors.Is(err1, ErrClaimed) {
			t.Fatalf("the worker whose landed take lapsed: %v; want ErrClaimed (the place is the old instance's claim)", err1)
		}
		release(t, ls2)
	})
}

// laterClaimAtUnsureRenewal sets up invariant 16's late holder: a
// worker's renewal is held in the network (its outcome unknown, so its
// lease takes that expiry for its own too), its lease lapses, and a later
// worker of the task claims the place anew with an expiry that happens to
// be the renewal's (its hold bounded by its own deadline: the same
// millisecond). It returns the first worker's lease and the later one's.
func laterClaimAtUnsureRenewal(t *testing.T) (f *faultAPI, ls1, ls2 *Lease) {
	t.Helper()
	return laterClaimAtUnsureRenewalUntil(t, time.Now().Add(time.Hour))
}

// laterClaimAtUnsureRenewalUntil is laterClaimAtUnsureRenewal with the
// task's deadline.
func laterClaimAtUnsureRenewalUntil(t *testing.T, deadline time.Time) (f *faultAPI, ls1, ls2 *Lease) {
	t.Helper()
	f = &faultAPI{API: newMemStore()}
	id, start := startedTaskUntil(t, f, deadline)
	w1 := New(f, "leases", Options{InstanceID: "w1"})
	w2 := New(f, "leases", Options{InstanceID: "w2"})
	ls1, err := w1.Claim(context.Background(), taskReq("q"), id, start.Mark)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	for range writeAttempts { // every attempt of the renewal
		f.arm(rule{match: writes("SET", LeasesAttr), fate: hold})
	}
	renewedTo := time.Now().Add(taskReq("q").Hold + w1.Margin())
	if err := ls1.Renew(context.Background(), taskReq("q").Hold); err == nil {
		t.Fatal("the renewal held in the network: no error")
	}
	time.Sleep(time.Until(ls1.Expiry) + time.Second) // lapsed, the renewal never landing
	req2 := taskReq("q")
	req2.Hold = time.Until(renewedTo) - w2.Margin() // its expiry is the renewal's
	ls2, err = w2.Claim(context.Background(), req2, id, 0)
	if err != nil {
		t.Fatalf("the later worker's claim of the lapsed place: %v", err)
	}
	if !ls2.Expiry.Equal(renewedTo) {
		t.Fatalf("the later claim expires %v; want the held renewal's %v", ls2.Expiry, renewedTo)
	}
	return f, ls1, ls2
}

// Invariant 16: the first worker of laterClaimAtUnsureRenewal, late, ends
// its call: its release must not give back the later claim's place, nor
// take the task's ticket away under that claim's running call.
func TestALateReleaseLeavesALaterClaimWithItsUnsureRenewalsExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { lateReleaseLeavesTheLaterClaim(t)(laterClaimAtUnsureRenewal(t)) })
}

// Invariant 16: as above, but the first worker renews again: the renewal
// must not extend the later claim's lease as its own (its call would run
// on, unbounded by that lease, which the later worker gives back).
func TestALateRenewalLeavesALaterClaimWithItsUnsureRenewalsExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { lateRenewalLeavesTheLaterClaim(t)(laterClaimAtUnsureRenewal(t)) })
}

// lateReleaseLeavesTheLaterClaim fails t unless ls1's late release is
// refused and leaves ls2's lease, which ls2 then gives back.
func lateReleaseLeavesTheLaterClaim(t *testing.T) func(f *faultAPI, ls1, ls2 *Lease) {
	return func(f *faultAPI, ls1, ls2 *Lease) {
		t.Helper()
		if _, err := ls1.Finish(context.Background(), Success); !errors.Is(err, ErrNotHeld) {
			t.Errorf("the first worker's late release: %v; want ErrNotHeld (the place is the later claim's)", err)
		}
		if s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil); len(s.Leases) != 1 || s.Leases[0].Lapsed {
			t.Errorf("after the late release: %+v; want the later claim's lease", s)
		}
		if _, err := ls2.Finish(context.Background(), Success); err != nil {
			t.Errorf("the later claim's release: %v; want its place given back by it", err)
		}
	}
}

// lateRenewalLeavesTheLaterClaim fails t unless ls1's late renewal is
// refused and leaves ls2's lease as it was, which ls2 then gives back.
func lateRenewalLeavesTheLaterClaim(t *testing.T) func(f *faultAPI, ls1, ls2 *Lease) {
	return func(f *faultAPI, ls1, ls2 *Lease) {
		t.Helper()
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
	}
}

// A task claimed near its deadline runs past it (its call's end is the
// tool's timeout, not the task's deadline): its ticket, lapsed, is purged
// while the claim's lease is live. A ticket gone names no other claim, and
// a later claim needs one: the claim still renews and gives back its place.
func TestAClaimOutlivingItsTicketRenewsAndReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := &faultAPI{API: newMemStore()}
		var st starts
		l := New(f, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id, err := l.Enqueue(ctx, taskReq("q"), "", "task-1", time.Now().Add(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := st.list()
		if len(got) != 1 {
			t.Fatalf("starts: %+v; want one", got)
		}
		w := New(f, "leases", Options{InstanceID: "w"})
		ls, err := w.Claim(ctx, taskReq("q"), id, got[0].Mark)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2*time.Second + l.Margin() + time.Second) // past the ticket's deadline (and margin), the lease live
		v, err := l.read(ctx, "srv")
		if err != nil {
			t.Fatal(err)
		}
		if _, purged, err := l.purgeAll(ctx, "srv", v); err != nil || !purged {
			t.Fatalf("the purge of the lapsed ticket: %v, %v", purged, err)
		}
		if s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil); len(s.Queue) != 0 || len(s.Leases) != 1 {
			t.Fatalf("after the purge: %+v; want the claim's lease alone", s)
		}
		if err := ls.Renew(ctx, taskReq("q").Hold); err != nil {
			t.Errorf("the claim's renewal, its ticket purged: %v; want its place kept", err)
		}
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Errorf("the claim's release, its ticket purged: %v; want its place given back", err)
		}
		if s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil); len(s.Leases) != 0 {
			t.Errorf("after the release: %+v; want no lease", s)
		}
	})
}
