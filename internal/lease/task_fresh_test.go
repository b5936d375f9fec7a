package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A ticket's p of a type the protocol never writes there (a number, by
// hand) names no principal: it reads as none and is removed alone (Repair
// in the package doc), the ticket — whole by its waiting set, its queue
// entry and its body — kept at its number. Read as a half, the next
// writer's mend took a waiting task's ticket apart, and its task never ran.
func TestAPrincipalFieldOfAnotherTypeDoesNotTakeTheTicketApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		l := New(db, "leases", Options{InstanceID: "a"})
		held := acquire(t, l, taskReq("h"))
		id := enqueue(t, l, taskReq("q"), "task-1")
		handEditIn(t, db, "leases", nv("7"), TicketsAttr, id, ticketLabel)
		// Another principal's task joins: its enqueue mends what it read.
		other := New(db, "leases", Options{InstanceID: "b"})
		if _, err := other.Enqueue(context.Background(), taskReq("r"), "", "task-2", time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("enqueue task-2: %v", err)
		}
		db.mu.Lock()
		item := cloneItem(db.items["srv"])
		db.mu.Unlock()
		tasks, _ := item[TasksAttr].(*types.AttributeValueMemberM)
		if tasks == nil || tasks.Value[id] == nil {
			t.Errorf("task-1's ticket %s was taken apart over a p written as a number; want p removed alone, the ticket kept", id)
		}
		if tk := parseItem(item).ticketFor(id); tk == nil || tk.label != "q" {
			t.Errorf("task-1's ticket after the mend: %+v; want q's", tk)
		}
		release(t, held)
	})
}

// Cost: a worker claiming over a lapsed claim purges the lapsed lease
// first; the purge's answer, as every write's, is its next look: one
// read for the claim, not a read again after the purge.
func TestAClaimAfterALapsedClaimsPurgeReadsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		s := st.list()
		if len(s) != 1 {
			t.Fatalf("starts: %+v; want one, the task's turn come at once", s)
		}
		if _, err := l.Claim(ctx, taskReq("q"), id, s[0].Mark); err != nil {
			t.Fatalf("the first claim: %v", err)
		}
		time.Sleep(time.Minute) // the claim lapses unreleased: its worker died
		if err := l.StartDue(ctx, taskReq("q")); err != nil {
			t.Fatal(err)
		}
		s = st.list()
		if len(s) != 2 {
			t.Fatalf("starts: %+v; want a second after the lapse", s)
		}
		w := New(db, "leases", Options{InstanceID: "w"}) // a worker elsewhere: no view
		before := w.Stats()
		ls, err := w.Claim(ctx, taskReq("q"), id, s[1].Mark)
		if err != nil {
			t.Fatalf("the claim after the lapse: %v", err)
		}
		if r := w.Stats().Reads - before.Reads; r != 1 {
			t.Errorf("a claim over a lapsed claim read the item %d times; want 1: the purge's answer is its next look", r)
		}
		release(t, ls)
	})
}
