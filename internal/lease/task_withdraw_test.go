package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 16: a withdrawal naming its task whose first attempt landed,
// its answer lost, succeeds (the ticket it finds gone was its own to take)
// and takes the ticket once.
func TestALostWithdrawalNamingItsTaskSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faultAPI{API: newMemStore()}
		var st starts
		l := New(f, "leases", Options{InstanceID: "i", OnTaskStart: st.hook})
		held := acquire(t, l, taskReq("p"))
		id := enqueue(t, l, taskReq("q"), "task-1")
		f.arm(rule{match: writes("ADD", FreedAttr), fate: lose})
		if err := l.Withdraw(context.Background(), "srv", id, "task-1"); err != nil {
			t.Fatalf("a withdrawal whose answer was lost: %v; want it done", err)
		}
		if len(f.rules) != 0 {
			t.Fatal("the withdrawal's answer was not lost")
		}
		if s := Describe(rawItem(t, f.API, "srv"), time.Now(), 1, 0, nil); len(s.Queue) != 0 {
			t.Fatalf("after the withdrawal: %+v; want no ticket", s)
		}
		release(t, held)
		if got := st.list(); len(got) != 0 {
			t.Errorf("starts of a withdrawn task: %+v", got)
		}
	})
}

// Invariant 16: a withdrawal naming another task takes nothing out of a
// claimed ticket either — neither the live lease nor, once it lapsed, the
// lapsed one with its ticket; the withdrawal naming its task then does.
func TestAWithdrawalNamingAnotherTaskLeavesAClaimedTicket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{OnTaskStart: st.hook})
		held := acquire(t, l, taskReq("p"))
		id := enqueue(t, l, taskReq("q"), "task-1")
		release(t, held)
		claimOf(t, db, "w1", &st, id)
		if err := l.Withdraw(context.Background(), "srv", id, "task-2"); !errors.Is(err, ErrNoTicket) {
			t.Fatalf("a withdrawal of a claimed ticket naming another task: %v; want ErrNoTicket", err)
		}
		if err := l.Withdraw(context.Background(), "srv", id, "task-1"); !errors.Is(err, ErrClaimed) {
			t.Fatalf("the withdrawal naming its task while claimed: %v; want ErrClaimed", err)
		}
		time.Sleep(past) // the claim's lease lapses (its worker died)
		if err := l.Withdraw(context.Background(), "srv", id, "task-2"); !errors.Is(err, ErrNoTicket) {
			t.Fatalf("a withdrawal of a lapsed claim naming another task: %v; want ErrNoTicket", err)
		}
		if s := Describe(rawItem(t, db, "srv"), time.Now(), 1, 0, nil); len(s.Queue) != 1 || len(s.Leases) != 1 {
			t.Fatalf("after a withdrawal naming another task: %+v; want the ticket and its lapsed lease", s)
		}
		if err := l.Withdraw(context.Background(), "srv", id, "task-1"); err != nil {
			t.Fatalf("the withdrawal naming its task once its claim lapsed: %v", err)
		}
	})
}
