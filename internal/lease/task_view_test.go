package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Cost: a task made on a key this process saw within a second joins from
// that view, with no read first, as a caller's first take may; a view
// older than that is read again. A join judged from a view behind the
// item would be refused on its conditions and judged again from the
// refusal's answer.
func TestAnEnqueueJoinsFromARecentViewWithoutARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var st starts
		l := New(newMemStore(), "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		held := acquire(t, l, taskReq("h")) // cap 1: tasks wait; its answer is on the board
		defer release(t, held)
		for _, c := range []struct {
			after time.Duration
			reads int64
		}{{0, 0}, {2 * recentView, 1}} {
			time.Sleep(c.after)
			before := l.Stats().Reads
			id := enqueue(t, l, taskReq("q"), "task-"+c.after.String())
			if got := l.Stats().Reads - before; got != c.reads {
				t.Errorf("an enqueue %v after the item was last seen here read it %d times; want %d", c.after, got, c.reads)
			}
			if tk := l.board("srv").recent(time.Hour).ticketFor(id); tk == nil || !tk.task {
				t.Errorf("the task's ticket is not in the queue: %+v", tk)
			}
		}
	})
}

// Cost: a worker started here — the release that made its task's turn
// marked its start, and that answer is on the board — claims from that
// view, with no read first. A worker whose view shows another mark than
// its start's reads the item first.
func TestAWorkerStartedHereClaimsWithoutARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var st starts
		l := New(newMemStore(), "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		started := func(task string) TaskStart {
			t.Helper()
			held := acquire(t, l, taskReq("h"))
			id := enqueue(t, l, taskReq("q"), task)
			release(t, held) // the task's turn: its start is marked
			s := st.list()
			if len(s) == 0 || s[len(s)-1].Ticket != id {
				t.Fatalf("starts: %+v; want %s's last", s, task)
			}
			return s[len(s)-1]
		}
		claim := func(ts TaskStart, mark int64) int64 {
			t.Helper()
			before := l.Stats().Reads
			ls, err := l.Claim(ctx, taskReq("q"), ts.Ticket, mark)
			if err != nil {
				t.Fatalf("the claim of %s: %v", ts.Task, err)
			}
			release(t, ls)
			return l.Stats().Reads - before
		}
		if ts := started("task-1"); claim(ts, ts.Mark+1) != 1 {
			t.Errorf("a claim whose view shows another mark than its start's did not read the item once")
		}
		if ts := started("task-2"); claim(ts, ts.Mark) != 0 {
			t.Errorf("a claim of a start made here read the item; want its start's view to stand in")
		}
	})
}
