package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// firstWriteRaceStore is the store as one process's limiter sees it:
// before its first write lands, before runs — another process's writes
// made between that process's read and its write.
type firstWriteRaceStore struct {
	API
	before func()
	done   atomic.Bool
}

func (s *firstWriteRaceStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if s.done.CompareAndSwap(false, true) {
		s.before()
	}
	return s.API.UpdateItem(ctx, in, opts...)
}

// runReq is the key of these tests: one place, tasks and callers of it.
func runReq(who string) Request {
	return Request{Key: "srv", Cap: 1, Hold: 10 * time.Second, Holder: who, MaxQueued: 8, Wait: 30 * time.Minute}
}

// passedTask has caller h hold the one place, task-1 (holder q)
// enqueued behind it and caller c waiting behind task-1; h releases,
// task-1 is started (its first start) and no worker comes, so c passes
// it StartTimeout later; c holds the place 2 s, and its release starts
// task-1 again (f kept). It returns task-1's ticket and its starts'
// marks, the first and the last.
func passedTask(t *testing.T, db API, st *starts) (string, int64, int64) {
	t.Helper()
	l := New(db, rgTable, Options{InstanceID: "a", OnTaskStart: st.hook})
	h := acquire(t, l, runReq("h"))
	id := enqueue(t, l, runReq("q"), "task-1")
	held := make(chan *Lease, 1)
	go func() {
		ls, err := New(db, rgTable, Options{InstanceID: "c", OnTaskStart: st.hook}).Acquire(context.Background(), runReq("c"))
		if err != nil {
			t.Errorf("c behind task-1: %v", err)
		}
		held <- ls
	}()
	synctest.Wait()
	release(t, h)
	c := <-held
	if c == nil {
		t.FailNow()
	}
	time.Sleep(2 * time.Second)
	release(t, c)
	marks := st.marksOf(id)
	if len(marks) < 2 {
		t.Fatalf("task-1's starts %v: want it started again by c's release", marks)
	}
	return id, marks[0], marks[len(marks)-1]
}

// Tasks (doc.go): a start is made "on condition of ... its last mark as
// seen", and "A worker that came ends the run: it gives its start back
// when still the ticket's, or a start made since in the run": the next
// start is a first; invariant 16: "callers passing one only once its
// starts have gone unclaimed StartTimeout since the first".
//
// Task-1 (cap 1) is started at F0, no worker comes, caller c passes it
// and releases 2 s later, the release starting it again at S1 (f = F0).
// StartTimeout after S1, process b's StartDue reads the item (s = S1, due
// again, the place free); before its mark lands, caller d passes task-1
// and holds the place, and task-1's worker of F0 comes, finds no place
// (not its turn) and ends the run, giving S1 back. b's mark, conditioned
// on S1 as seen, is refused: it cannot write the run's old first back
// (had the run ended by a write leaving s as it was, b's mark would have
// landed with f = F0, the run going on from before the worker came).
func TestAStartFromAViewBeforeARunEndedDoesNotBringItsFirstBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := newMemStore()
		var st starts
		id, first, again := passedTask(t, db, &st)
		time.Sleep(time.Until(time.UnixMilli(again).Add(StartTimeout)) + time.Millisecond)
		var ended *mTicket
		race := &firstWriteRaceStore{API: db}
		var d *Lease
		race.before = func() {
			// Caller d comes and passes task-1 (unclaimed since its
			// first start), holding the place.
			d = acquire(t, New(db, rgTable, Options{InstanceID: "d", OnTaskStart: st.hook}), runReq("d"))
			// task-1's worker of its first start comes now: d holds the
			// place, so it is not task-1's turn (a worker limiter with no
			// hook: its own start of the next is left to b).
			_, err := New(db, rgTable, Options{InstanceID: "w"}).Claim(ctx, runReq("q"), id, first)
			if !errors.Is(err, ErrNotYourTurn) {
				t.Errorf("task-1's worker, c holding the one place: %v; want ErrNotYourTurn", err)
			}
			ended = mRead(rawItem(t, db, "srv")).tickets[id]
		}
		b := New(race, rgTable, Options{InstanceID: "b", OnTaskStart: st.hook})
		if err := b.StartDue(ctx, runReq("s")); err != nil {
			t.Fatalf("b's StartDue: %v", err)
		}
		if d != nil {
			defer release(t, d)
		}
		if !race.done.Load() || ended == nil {
			t.Fatal("b made no write, or task-1's ticket was gone after its worker came")
		}
		tk := mRead(rawItem(t, db, "srv")).tickets[id]
		now := time.Now().UnixMilli()
		t.Logf("task-1's starts %v (first %d); after its worker came: s=%d f=%d; after b's start: s=%d f=%d, unclaimed for %d ms",
			st.marksOf(id), first, ended.s, ended.f, tk.s, tk.f, now-tk.unclaimedSince())
		if ended.s != 0 {
			t.Fatalf("task-1's worker of %d came, its start made again at %d: the ticket still carries a start (s=%d f=%d); want the run ended, no start out", first, again, ended.s, ended.f)
		}
		if tk.s != 0 && tk.unclaimedSince() != tk.s {
			t.Errorf("b's start, made again from a view read before task-1's worker ended the run, wrote back the run's old first %d (f): task-1 reads as unclaimed %d ms, since before its worker came",
				tk.unclaimedSince(), now-tk.unclaimedSince())
		}
	})
}

// docs/tasks.md item 3: "A worker that came (its claim refused by
// others' writes for 10 s, or its turn taken by a caller passing it) ends
// that run of starts: the next start counts as a first, and the task is
// not passed."
//
// While its turn is taken (no place free for it), nobody starts the task
// again, so its last start is typically StartTimeout old or more when the
// worker of an earlier one comes and finds its turn taken: the run ends
// by giving that start back, not by counting from it (which would leave
// the task passed, the worker's coming changing nothing). Task-1 (cap 1)
// is started at F0, no worker comes, c passes it and releases 2 s later,
// the release starting it again at S1 (f = F0); caller d passes it and
// holds the place 15 s. Task-1's worker of F0 comes meanwhile, finds d
// holding the place (not its turn) and gives S1 back. d releases, its
// answer starting task-1 afresh (a first), and caller e, coming then,
// does not pass task-1.
func TestAWorkerThatCameEndsARunWhoseLastStartIsOld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := newMemStore()
		var st starts
		id, first, again := passedTask(t, db, &st)
		d := acquire(t, New(db, rgTable, Options{InstanceID: "d", OnTaskStart: st.hook}), runReq("d"))
		time.Sleep(12 * time.Second)
		_, err := New(db, rgTable, Options{InstanceID: "w", OnTaskStart: st.hook}).Claim(ctx, runReq("q"), id, first)
		if !errors.Is(err, ErrNotYourTurn) {
			t.Fatalf("task-1's worker, d holding the one place: %v; want ErrNotYourTurn", err)
		}
		ended := mRead(rawItem(t, db, "srv")).tickets[id]
		now := time.Now().UnixMilli()
		t.Logf("task-1's starts %v (the worker's %d); after its worker came: s=%d f=%d, unclaimed for %d ms", st.marksOf(id), first, ended.s, ended.f, now-ended.unclaimedSince())
		if ended.s != 0 {
			t.Errorf("task-1's worker has just come (its turn taken), yet the ticket still carries its last start %d (f %d), unclaimed %d ms: the task is still passed", ended.s, ended.f, now-ended.unclaimedSince())
		}
		time.Sleep(3 * time.Second)
		release(t, d) // its answer starts task-1 again
		tk := mRead(rawItem(t, db, "srv")).tickets[id]
		ectx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		e, err := New(db, rgTable, Options{InstanceID: "e"}).Acquire(ectx, runReq("e"))
		t.Logf("after d's release: s=%d f=%d; caller e: %v", tk.s, tk.f, err)
		if tk.s != 0 && tk.s != again && tk.unclaimedSince() != tk.s {
			t.Errorf("task-1's next start after its worker came (%d) does not count as a first: it reads as unclaimed since %d", tk.s, tk.unclaimedSince())
		}
		if err == nil {
			t.Errorf("caller e, behind task-1, took the one place at once, passing task-1 whose worker came 3 s ago and whose last start is %d ms old", time.Now().UnixMilli()-tk.s)
			release(t, e)
		}
	})
}

// Tasks (doc.go): a worker that came gives back its own start, or a start
// made since in the same run of unclaimed starts — never one of a run
// begun after its start ended (claimed, or given back). A worker of an
// old start delivered again (an asynchronous invocation retried), coming
// when its task's turn is taken, leaves the current start to its worker.
//
// Task-1 (cap 1) is started at F0; its worker comes while caller d holds
// the place and gives F0 back. d releases: task-1 is started afresh at S1
// (a new run), and caller x takes the place before S1's worker claims.
// F0's worker, delivered again, comes then: not task-1's turn, and S1
// stays the ticket's start.
func TestAnOldStartsWorkerDeliveredAgainLeavesTheCurrentRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := newMemStore()
		var st starts
		l := New(db, rgTable, Options{InstanceID: "a", OnTaskStart: st.hook})
		h := acquire(t, l, runReq("h"))
		id := enqueue(t, l, runReq("q"), "task-1")
		release(t, h) // task-1 started at F0
		f0 := st.marksOf(id)
		if len(f0) != 1 {
			t.Fatalf("task-1's starts %v; want one", f0)
		}
		// d takes the place as a newcomer before task-1's worker claims:
		// its principal holds none, so it ranks first.
		time.Sleep(StartTimeout)
		d := acquire(t, New(db, rgTable, Options{InstanceID: "d", OnTaskStart: st.hook}), runReq("d"))
		if _, err := New(db, rgTable, Options{InstanceID: "w"}).Claim(ctx, runReq("q"), id, f0[0]); !errors.Is(err, ErrNotYourTurn) {
			t.Fatalf("F0's worker, d holding the place: %v; want ErrNotYourTurn", err)
		}
		if tk := mRead(rawItem(t, db, "srv")).tickets[id]; tk.s != 0 {
			t.Fatalf("F0's worker came and found its turn taken: the ticket still carries a start (s=%d); want it given back", tk.s)
		}
		time.Sleep(time.Second)
		release(t, d) // task-1 started afresh at S1
		marks := st.marksOf(id)
		if len(marks) != 2 {
			t.Fatalf("task-1's starts %v; want a second once d released", marks)
		}
		s1 := marks[1]
		// Before S1's worker comes, caller x takes the place as a newcomer
		// of a principal holding none.
		x := acquire(t, New(db, rgTable, Options{InstanceID: "x", OnTaskStart: st.hook}), runReq("x"))
		defer release(t, x)
		// F0's worker, delivered again, comes now: not task-1's turn.
		if _, err := New(db, rgTable, Options{InstanceID: "w2"}).Claim(ctx, runReq("q"), id, f0[0]); !errors.Is(err, ErrNotYourTurn) {
			t.Fatalf("F0's worker delivered again, x holding the place: %v; want ErrNotYourTurn", err)
		}
		if tk := mRead(rawItem(t, db, "srv")).tickets[id]; tk.s != s1 {
			t.Errorf("F0's worker, delivered again after task-1 was started afresh at %d, took that start back (s=%d): a worker of an old run ended the current one", s1, tk.s)
		}
	})
}
