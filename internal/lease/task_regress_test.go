package lease

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 16, as the fault simulation found it broken (seed 721): a
// task's join whose first attempt is held in the network, its resend
// landing, must not land late once the task was claimed and released —
// its ticket back in tasks would be started and claimed again: the task
// would run twice.
func TestLateTaskJoinDoesNotBringBackItsTicket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faultAPI{API: newMemStore()}
		f.arm(rule{match: writes("ADD", WaitingAttr("q")), fate: hold}) // its join
		id, start := startedTask(t, f)
		w := New(f, "leases", Options{InstanceID: "w"})
		ls, err := w.Claim(context.Background(), taskReq("q"), id, start.Mark)
		if err != nil {
			t.Fatal(err)
		}
		release(t, ls)
		if landed := f.release(); len(landed) != 1 || landed[0] {
			t.Fatalf("the join held in the network landed late: %v; want it refused", landed)
		}
		if _, err := w.Claim(context.Background(), taskReq("q"), id, start.Mark); !errors.Is(err, ErrNoTicket) {
			t.Fatalf("a claim after the task ran: %v; want ErrNoTicket", err)
		}
	})
}

// Invariant 16, as the fault simulation found it broken (seeds 2537 and
// 5401286): two workers of one start claim; one's take is lost in the
// network (its outcome unknown) while the other's lands. The first finds
// the task's lease on its next look and must not take it for its own —
// nor release it — even when both set the same expiry (started at the
// same millisecond with the same hold): a claim names itself in the
// ticket.
func TestTwoWorkersOfOneStartClaimOnceThoughATakeIsLost(t *testing.T) {
	t.Run("own expiry", func(t *testing.T) { twoWorkersClaimOnce(t, time.Millisecond) })
	t.Run("same expiry", func(t *testing.T) { twoWorkersClaimOnce(t, 0) })
}

func twoWorkersClaimOnce(t *testing.T, apart time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		f := &faultAPI{API: newMemStore()}
		id, start := startedTask(t, f)
		w1 := New(f, "leases", Options{InstanceID: "w1"})
		w2 := New(f, "leases", Options{InstanceID: "w2"})
		req1 := taskReq("q")
		req1.Hold += apart // its own expiry, as a worker's clock would give it, or the same
		var ls1 *Lease
		var err1 error
		f.arm(rule{match: writes("SET", LeasesAttr), fate: hold, after: func() {
			ls1, err1 = w1.Claim(context.Background(), req1, id, start.Mark)
		}})
		ls2, err2 := w2.Claim(context.Background(), taskReq("q"), id, start.Mark)
		if err1 != nil || ls1 == nil {
			t.Fatalf("the first worker's claim: %v, %v; want the place", ls1, err1)
		}
		if ls2 != nil || !errors.Is(err2, ErrClaimed) {
			t.Fatalf("the worker whose take was lost: %v, %v; want ErrClaimed (the place is the other's)", ls2, err2)
		}
		release(t, ls1)
		if landed := f.release(); len(landed) != 1 || landed[0] {
			t.Fatalf("the lost take landed late: %v; want it refused", landed)
		}
	})
}

// Invariant 16: a worker whose take is held in the network (its outcome
// unknown) looks again, finds the ticket still there and takes again,
// that take's outcome unknown too; then the first lands late and the
// second is refused. The lease is the worker's own, from its first take:
// were it taken for another worker's (only the last take's expiry kept),
// nobody would run the task, its ticket gone into a lease left to lapse.
func TestAWorkerKnowsEachOfItsTakesWhoseOutcomeWasUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faultAPI{API: newMemStore()}
		id, start := startedTask(t, f)
		w := New(f, "leases", Options{InstanceID: "w"})
		var landed []bool
		f.arm(rule{match: writes("SET", LeasesAttr), fate: hold})
		f.arm(rule{match: writes("SET", LeasesAttr), fate: hold, after: func() { landed = f.release() }})
		ls, err := w.Claim(context.Background(), taskReq("q"), id, start.Mark)
		if !slices.Equal(landed, []bool{true, false}) {
			t.Fatalf("the held takes: landed %v; want the first, not the second", landed)
		}
		if err != nil || ls == nil {
			t.Fatalf("the worker's claim, its first take landed late: %v, %v; want the place (its own take's lease)", ls, err)
		}
		release(t, ls)
	})
}

// Invariant 16 and the gateway's task: a join whose answer is lost has
// landed, and its ticket's worker claimed it before Enqueue looked again.
// The lease at the ticket's id is the task's (no other write makes a
// lease of that id): the task is in, and running. Enqueue joined again
// and again (each join refused as the lease is there) and failed, telling
// its caller the task was not made while it ran.
func TestEnqueueFindingItsTicketClaimedSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faultAPI{API: newMemStore()}
		l := New(f, "leases", Options{InstanceID: "a"})
		w := New(f, "leases", Options{InstanceID: "w"})
		id := l.NewTaskID()
		var ls *Lease
		var claimErr error
		f.arm(rule{match: writes("ADD", WaitingAttr("q")), fate: lose, after: func() {
			ls, claimErr = w.Claim(context.Background(), taskReq("q"), id, 0)
		}})
		got, err := l.Enqueue(context.Background(), taskReq("q"), id, "task-1", time.Now().Add(time.Hour))
		if claimErr != nil || ls == nil {
			t.Fatalf("the worker's claim of the landed ticket: %v, %v", ls, claimErr)
		}
		defer release(t, ls)
		if err != nil || got != id {
			t.Fatalf("Enqueue, its join landed and its ticket claimed: %q, %v; want %q (the task is in)", got, err, id)
		}
	})
}
