package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// starts records the workers a limiter's hook was asked to start.
type starts struct {
	mu  sync.Mutex
	got []TaskStart
}

func (s *starts) hook(_ context.Context, ts TaskStart) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, ts)
}

func (s *starts) list() []TaskStart {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]TaskStart(nil), s.got...)
}

func taskReq(holder string) Request {
	return Request{Key: "srv", Cap: 1, Hold: 10 * time.Second, Holder: holder, MaxQueued: 4}
}

// startedTask enqueues taskReq("q")'s task-1 through a limiter on api,
// its turn come at once, and returns its ticket's id and the one start
// the enqueue made.
func startedTask(t *testing.T, api API) (string, TaskStart) {
	t.Helper()
	return startedTaskUntil(t, api, time.Now().Add(time.Hour))
}

// startedTaskUntil is startedTask with the task's deadline.
func startedTaskUntil(t *testing.T, api API, deadline time.Time) (string, TaskStart) {
	t.Helper()
	var st starts
	l := New(api, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
	id, err := l.Enqueue(context.Background(), taskReq("q"), "", "task-1", deadline)
	if err != nil {
		t.Fatal(err)
	}
	got := st.list()
	if len(got) != 1 {
		t.Fatalf("starts: %+v; want one", got)
	}
	return id, got[0]
}

func enqueue(t *testing.T, l *Limiter, req Request, task string) string {
	t.Helper()
	id, err := l.Enqueue(context.Background(), req, "", task, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("enqueue %s: %v", task, err)
	}
	if !IsTaskID(id) {
		t.Fatalf("a task's ticket id %q is not one IsTaskID knows", id)
	}
	return id
}

// Invariant 16: a task waits with no caller behind it; when a release
// frees its place, the releaser's limiter starts its worker, which claims
// the place; the place is a task's lease in the item.
func TestTaskRunsWhenItsTurnComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		held := acquire(t, l, taskReq("p"))
		id := enqueue(t, l, taskReq("q"), "task-1")
		if got := st.list(); len(got) != 0 {
			t.Fatalf("a worker started while the place is held: %v", got)
		}
		if _, err := held.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
		got := st.list()
		if len(got) != 1 || got[0].Ticket != id || got[0].Task != "task-1" || got[0].Key != "srv" || got[0].Mark == 0 {
			t.Fatalf("starts after the release: %+v; want one for %s, task-1", got, id)
		}
		// The worker runs elsewhere: another instance claims.
		w := New(db, "leases", Options{InstanceID: "w"})
		ls, err := w.Claim(context.Background(), taskReq("q"), id, got[0].Mark)
		if err != nil || ls.ID() != id {
			t.Fatalf("claim: %v, %v; want the lease %s", ls, err, id)
		}
		st2 := Describe(rawItem(t, db, "srv"), time.Now(), 1, 0, nil)
		if len(st2.Leases) != 1 || !st2.Leases[0].Task || len(st2.Queue) != 0 {
			t.Fatalf("status after the claim: %+v", st2)
		}
		if _, err := ls.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	})
}

// A task whose turn comes at once (nothing held) gets its worker from its
// own enqueue.
func TestTaskStartsAtOnceWhenThePlaceIsFree(t *testing.T) {
	db := newMemStore()
	var st starts
	l := New(db, "leases", Options{OnTaskStart: st.hook})
	id := enqueue(t, l, taskReq("q"), "task-1")
	if got := st.list(); len(got) != 1 || got[0].Ticket != id {
		t.Fatalf("starts: %+v; want one for %s", got, id)
	}
}

// Invariant 16: a start lost (its worker never claims) is made again by
// the first request that sees the task's turn StartTimeout later — here a
// caller waiting behind it — and not before.
func TestLostTaskStartIsMadeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		if len(st.list()) != 1 {
			t.Fatalf("starts: %+v", st.list())
		}
		// Its worker is lost. Another instance's caller comes and waits
		// behind the task.
		var st2 starts
		other := New(db, "leases", Options{InstanceID: "b", OnTaskStart: st2.hook})
		req := taskReq("p")
		req.Wait = 30 * time.Second
		done := make(chan error, 1)
		go func() {
			ls, err := other.Acquire(context.Background(), req)
			if err == nil {
				_, err = ls.Finish(context.Background(), Success)
			}
			done <- err
		}()
		time.Sleep(StartTimeout / 2)
		synctest.Wait()
		if got := st2.list(); len(got) != 0 {
			t.Fatalf("a start was made again %v after the first: %+v", StartTimeout/2, got)
		}
		time.Sleep(StartTimeout)
		synctest.Wait()
		got := st2.list()
		if len(got) == 0 || got[0].Ticket != id {
			t.Fatalf("no start made again past StartTimeout: %+v", got)
		}
		// That worker claims, runs and releases: the caller behind gets
		// its place.
		ls, err := other.Claim(context.Background(), taskReq("q"), id, got[0].Mark)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if _, err := ls.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("the caller behind the task: %v", err)
		}
	})
}

// Invariant 16: a withdrawal names the task whose ticket it takes out; one
// naming another task (a start whose ticket and task do not match) takes
// nothing out, and the ticket waits on.
func TestAWithdrawalNamingAnotherTaskTakesNothing(t *testing.T) {
	db := newMemStore()
	var st starts
	l := New(db, "leases", Options{OnTaskStart: st.hook})
	held := acquire(t, l, taskReq("p"))
	id := enqueue(t, l, taskReq("q"), "task-1")
	for _, other := range []string{"task-2", ""} {
		if err := l.Withdraw(context.Background(), "srv", id, other); !errors.Is(err, ErrNoTicket) {
			t.Fatalf("a withdrawal of task-1's ticket naming %q: %v; want ErrNoTicket", other, err)
		}
	}
	if s := Describe(rawItem(t, db, "srv"), time.Now(), 1, 0, nil); len(s.Queue) != 1 {
		t.Fatalf("after withdrawals naming another task: %+v; want task-1's ticket waiting", s)
	}
	if err := l.Withdraw(context.Background(), "srv", id, "task-1"); err != nil {
		t.Fatalf("the withdrawal naming its task: %v", err)
	}
	release(t, held)
}

// Invariant 16: a withdrawn task gets no place; its worker, started
// before, finds no ticket; a caller gets the place.
func TestWithdrawnTaskGetsNoPlace(t *testing.T) {
	db := newMemStore()
	var st starts
	l := New(db, "leases", Options{OnTaskStart: st.hook})
	held := acquire(t, l, taskReq("p"))
	id := enqueue(t, l, taskReq("q"), "task-1")
	if err := l.Withdraw(context.Background(), "srv", id, "task-1"); err != nil {
		t.Fatalf("withdraw: %v", err)
	}
	if err := l.Withdraw(context.Background(), "srv", id, "task-1"); !errors.Is(err, ErrNoTicket) {
		t.Fatalf("a second withdraw: %v; want ErrNoTicket", err)
	}
	release(t, held)
	if got := st.list(); len(got) != 0 {
		t.Fatalf("a worker started for a withdrawn task: %+v", got)
	}
	if _, err := l.Claim(context.Background(), taskReq("q"), id, 0); !errors.Is(err, ErrNoTicket) {
		t.Fatalf("claim of a withdrawn task: %v; want ErrNoTicket", err)
	}
	release(t, acquire(t, l, taskReq("p")))
}

// Invariant 16: two workers of one task claim once; a claimed task cannot
// be withdrawn.
func TestTaskWorkerClaimsOnce(t *testing.T) {
	db := newMemStore()
	var st starts
	l := New(db, "leases", Options{OnTaskStart: st.hook})
	id := enqueue(t, l, taskReq("q"), "task-1")
	mark := st.list()[0].Mark
	w1, w2 := New(db, "leases", Options{InstanceID: "w1"}), New(db, "leases", Options{InstanceID: "w2"})
	ls, err := w1.Claim(context.Background(), taskReq("q"), id, mark)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Claim(context.Background(), taskReq("q"), id, mark); !errors.Is(err, ErrClaimed) {
		t.Fatalf("a second worker's claim: %v; want ErrClaimed", err)
	}
	if err := l.Withdraw(context.Background(), "srv", id, "task-1"); !errors.Is(err, ErrClaimed) {
		t.Fatalf("withdraw of a claimed task: %v; want ErrClaimed", err)
	}
	release(t, ls)
}

// A worker whose turn has passed (a caller took the place first) keeps
// the task's ticket and takes its start back, so the next release starts
// a worker at once.
func TestTaskWorkerWhoseTurnPassedGivesItsStartBack(t *testing.T) {
	db := newMemStore()
	var st starts
	l := New(db, "leases", Options{OnTaskStart: st.hook})
	id := enqueue(t, l, taskReq("q"), "task-1")
	mark := st.list()[0].Mark
	// A caller takes the free place before the worker claims it (a
	// newcomer without a view of the item may not: with a view, the
	// task comes first; this one forces the state by hand).
	other := New(db, "leases", Options{InstanceID: "o", OnTaskStart: st.hook})
	a := &attempt{l: other, req: taskReq("p"), b: other.board("srv"), start: time.Now()}
	a.me = asker{id: other.newLeaseID(), label: "p"}
	v := itemView(t, db, "srv")
	ls, _, err := a.take(context.Background(), v, handout{served: true}, nil, a.now())
	if err != nil || ls == nil {
		t.Fatalf("forced take: %v, %v", ls, err)
	}
	if _, err := l.Claim(context.Background(), taskReq("q"), id, mark); !errors.Is(err, ErrNotYourTurn) {
		t.Fatalf("claim past its turn: %v; want ErrNotYourTurn", err)
	}
	if tk := itemView(t, db, "srv").ticketFor(id); tk == nil || tk.started != 0 {
		t.Fatalf("after the claim that was not its turn, the ticket is %+v; want it there, its start taken back", tk)
	}
	release(t, ls)
	if got := st.list(); len(got) != 2 || got[1].Ticket != id {
		t.Fatalf("starts after the release: %+v; want a second for %s", got, id)
	}
}

// Invariant 7: tasks have MaxQueued places of their own, apart from the
// callers': a full queue of callers leaves tasks room, and a full one of
// tasks leaves callers theirs.
func TestTasksHaveQueuePlacesOfTheirOwn(t *testing.T) {
	db := newMemStore()
	l := New(db, "leases", Options{})
	req := taskReq("p")
	req.MaxQueued = 2
	held := acquire(t, l, req)
	// Two tasks of two principals fill the tasks' places.
	for i, p := range []string{"q", "r"} {
		r := req
		r.Holder = p
		if _, err := l.Enqueue(context.Background(), r, "", "task-"+p, time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
	}
	r := req
	r.Holder = "s"
	var full *FullError
	if _, err := l.Enqueue(context.Background(), r, "", "task-s", time.Now().Add(time.Hour)); !errors.As(err, &full) || full.Reason != QueueFull {
		t.Fatalf("a third task on 2 places: %v; want queue_full", err)
	}
	// Callers still find their two places.
	for _, p := range []string{"x", "y"} {
		queuedAttempt(t, l, Request{Key: "srv", Cap: 1, Hold: time.Second, Holder: p, MaxQueued: 2, Wait: time.Minute})
	}
	release(t, held)
}

// A task waits for a gate shut to it rather than being refused once
// queued; a task made while a breaker is shut to its principal is refused
// as a caller would be.
func TestTaskEnqueueRefusedByAShutBreaker(t *testing.T) {
	db := newMemStore()
	l := New(db, "leases", Options{})
	br := &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}
	req := taskReq("q")
	req.Tool, req.Breaker = "t", br
	ls := acquire(t, l, req)
	if _, err := ls.Finish(context.Background(), Failure); err != nil {
		t.Fatal(err)
	}
	var open *CircuitOpenError
	if _, err := l.Enqueue(context.Background(), req, "", "task-1", time.Now().Add(time.Hour)); !errors.As(err, &open) {
		t.Fatalf("enqueue with the breaker shut to its principal: %v; want CircuitOpenError", err)
	}
}
