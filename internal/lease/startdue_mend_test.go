package lease

import (
	"context"
	"testing"
	"testing/synctest"
)

// Invariant 16 (doc.go, Tasks) and the schedule's report (SweepTasks): a
// StartDue whose item cannot be mended — here every write fails — started
// nothing and must say so, as it did when it mended the item itself. It
// mends inside startDue now, whose error goes nowhere: StartDue answers
// nil, the task's start never made, and the sweep counts the key as done.
func TestAStartDueThatCannotMendItsItemReportsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id := enqueue(t, New(mem, "leases", Options{InstanceID: "a"}), taskReq("q"), "task-1")
		handEdit(t, mem, sv("soon"), TicketsAttr, id, ticketStarted) // a start mark of another type
		db := &faultAPI{API: mem}
		for range 64 {
			db.arm(rule{fate: hold}) // every write fails, unsent
		}
		var st starts
		l := New(db, "leases", Options{InstanceID: "b", OnTaskStart: st.hook})
		err := l.StartDue(context.Background(), taskReq("q"))
		if n := len(st.list()); err == nil && n == 0 {
			t.Errorf("StartDue over an item it could not mend: nil error and %d starts; want the error", n)
		}
	})
}
