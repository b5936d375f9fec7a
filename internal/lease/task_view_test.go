package lease

import (
	"context"
	"testing"
	"testing/synctest"
)

// startedHere makes task's turn come on l, whose OnTaskStart is st's: a
// place held, the task enqueued, the place given back, whose release
// marks the task's start. It returns that start.
func startedHere(t *testing.T, l *Limiter, st *starts, task string) TaskStart {
	t.Helper()
	held := acquire(t, l, taskReq("h"))
	id := enqueue(t, l, taskReq("q"), task)
	release(t, held) // the task's turn: its start is marked, the answer on the board
	s := st.list()
	if len(s) == 0 || s[len(s)-1].Ticket != id {
		t.Fatalf("starts: %+v; want %s's last", s, task)
	}
	return s[len(s)-1]
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
		if ts := startedHere(t, l, &st, "task-1"); claim(ts, ts.Mark+1) != 1 {
			t.Errorf("a claim whose view shows another mark than its start's did not read the item once")
		}
		if ts := startedHere(t, l, &st, "task-2"); claim(ts, ts.Mark) != 0 {
			t.Errorf("a claim of a start made here read the item; want its start's view to stand in")
		}
	})
}

// A value written by hand since a task's start (its principal's set, as
// a string) is put right before the worker's take, as before any other
// write: the take built on it was refused as invalid, and the claim
// failed with the store's error until a later start mended the item.
func TestAClaimMendsAHandEditBeforeItsTake(t *testing.T) {
	for _, board := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			db := newMemStore()
			var st starts
			l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
			ts := startedHere(t, l, &st, "task-1")
			handEditIn(t, db, "leases", sv("by hand"), PrincipalAttr("q"))
			w := l
			if !board {
				w = New(db, "leases", Options{InstanceID: "w"}) // a worker elsewhere: it reads
			}
			ls, err := w.Claim(context.Background(), taskReq("q"), ts.Ticket, ts.Mark)
			if err != nil {
				t.Fatalf("a claim (view seen here: %v) over a value written by hand since its start: %v; want the place", board, err)
			}
			release(t, ls)
		})
	}
}
