package lease

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// ctxStarts is a start hook that calls the platform with the context it
// is given (an invoke taking d), as a hook that starts a worker inline
// does: a start whose context ends first is lost (recorded in cut).
type ctxStarts struct {
	mu      sync.Mutex
	d       time.Duration
	ok, cut []TaskStart
}

func (s *ctxStarts) hook(ctx context.Context, ts TaskStart) {
	select {
	case <-time.After(s.d):
		s.mu.Lock()
		s.ok = append(s.ok, ts)
		s.mu.Unlock()
	case <-ctx.Done():
		s.mu.Lock()
		s.cut = append(s.cut, ts)
		s.mu.Unlock()
	}
}

func (s *ctxStarts) lists() (ok, cut []TaskStart) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]TaskStart(nil), s.ok...), append([]TaskStart(nil), s.cut...)
}

// servedBeside puts a caller of l in line on srv (Cap 2, both places
// held by leases lapsing 3 s on, CallBy callBy) and a task behind it; it
// returns the task's ticket and the caller's outcome.
func servedBeside(t *testing.T, mem API, l *Limiter, callBy time.Time) (string, *Lease, error) {
	t.Helper()
	ctx := context.Background()
	dead := New(mem, "leases", Options{InstanceID: "d"})
	held := Request{Key: "srv", Cap: 2, Hold: time.Second, Holder: "p", MaxQueued: 4}
	acquire(t, dead, held)
	acquire(t, dead, held) // neither is released: both lapse 3 s on
	type result struct {
		ls  *Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		ls, err := l.Acquire(ctx, Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: "c", Wait: time.Minute, CallBy: callBy, MaxQueued: 4})
		got <- result{ls, err}
	}()
	synctest.Wait() // the caller's ticket is in line
	id, err := New(mem, "leases", Options{InstanceID: "e"}).Enqueue(ctx, Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: "q", MaxQueued: 4}, "", "task-1", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	return id, r.ls, r.err
}

// Tasks in doc.go: "having won the mark, starts a worker"; "A lost start
// is made again by the first to see the turn StartTimeout after it". A
// take's starts now run under a context that ends at its caller's CallBy:
// a start hook that calls the platform with the context it is given (it is
// "called inline by the request that won the start") is cut at CallBy
// after its mark was won. The place is then given back (no time left), but
// the give-back's own starts see the mark young and start nothing: the
// task's turn has come, a mark says it was started, and no worker runs
// for StartTimeout, on the path the change was made for.
func TestATakesStartIsNotCutByItsCallersCallBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		hook := &ctxStarts{d: time.Second} // an invoke the SDK retried once
		l := New(mem, "leases", Options{InstanceID: "a", OnTaskStart: hook.hook})
		// The places lapse 3 s on; the caller's take lands in its next
		// look, with time left for its call.
		task, ls, err := servedBeside(t, mem, l, time.Now().Add(3500*time.Millisecond))
		if ls != nil {
			defer release(t, ls)
		}
		t.Logf("acquire: %v", err)
		time.Sleep(time.Minute) // any start made beside the call ends
		ok, cut := hook.lists()
		for _, s := range cut {
			if s.Ticket != task {
				continue
			}
			v := itemView(t, mem, "srv")
			marked := v.ticketFor(task) != nil && v.ticketFor(task).started == s.Mark
			t.Errorf("the take's start of the task (mark %d) was cut by its caller's CallBy (%d starts made, %d cut); the ticket still carries that mark: %v — no worker runs until StartTimeout after it and someone looks",
				s.Mark, len(ok), len(cut), marked)
		}
		if len(ok) == 0 && len(cut) == 0 {
			t.Fatalf("no start of the task at all")
		}
	})
}

// marksAnsweredAtTheEnd lands the first task start mark it is armed for and then
// answers only when the writer's context ends (an answer lost on the
// network, the SDK waiting until the context's end), if that context has
// a deadline; marks is how many it held so.
type marksAnsweredAtTheEnd struct {
	API
	mu    sync.Mutex
	armed bool
	marks int
}

func isMark(in *dynamodb.UpdateItemInput) bool {
	expr := aws.ToString(in.UpdateExpression)
	if strings.Contains(expr, "REMOVE") {
		return false
	}
	for q, n := range in.ExpressionAttributeNames {
		if n == ticketStarted && usesName(expr, q) {
			return true
		}
	}
	return false
}

func (f *marksAnsweredAtTheEnd) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	_, dl := ctx.Deadline()
	hold := f.armed && isMark(in) && dl
	if hold {
		f.armed = false
		f.marks++
	}
	f.mu.Unlock()
	out, err := f.API.UpdateItem(ctx, in, opts...)
	if !hold || err != nil {
		return out, err
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// The same on the mark: a take's mark sent before CallBy whose answer
// comes after it (a slow or lost answer) is cut by the context the take
// now bounds at CallBy: markStart reports it lost and starts nothing, but
// it landed. The place is given back, and its give-back's starts see the
// mark young: nobody starts the task for StartTimeout.
func TestATakesMarkLeftOutByItsContextStillStartsTheTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		db := &marksAnsweredAtTheEnd{API: mem, armed: true}
		var sched starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: sched.hook})
		task, ls, err := servedBeside(t, mem, l, time.Now().Add(6*time.Second))
		if ls != nil {
			defer release(t, ls)
		}
		t.Logf("acquire: %v", err)
		t.Logf("%d marks answered only at their context's end", db.marks)
		v := itemView(t, mem, "srv")
		tk := v.ticketFor(task)
		if tk == nil {
			t.Fatal("the task's ticket is gone")
		}
		if len(sched.marksOf(task)) == 0 && tk.started == 0 {
			t.Errorf("the task's turn came beside the caller's take and nobody started it")
		}
		if len(sched.marksOf(task)) == 0 && tk.started != 0 {
			t.Errorf("the task's ticket carries mark %d (%v old), its turn come, and no worker was started for it: its take's mark landed as its CallBy cut the answer, and the give-back's starts saw it young",
				tk.started, time.Duration(time.Now().UnixMilli()-tk.started)*time.Millisecond)
		}
	})
}

// The same for a task's worker: its claim lands with time left, its
// answer shows the next task served beside it, and the start the claim
// makes of it is cut at the worker's CallBy after its mark was won. The
// claim gives its place back (ErrStartLapsed), its own task's next worker
// is started, and the task beside it has a young mark and no worker.
func TestAClaimsStartIsNotCutByItsCallBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, req, t1, t2, first := claimBesideADueTask(t)

		hook := &ctxStarts{d: time.Second}
		w := New(mem, "leases", Options{InstanceID: "w", OnTaskStart: hook.hook})
		wr := req("q")
		wr.CallBy = time.Now().Add(500 * time.Millisecond)
		ls, err := w.Claim(ctx, wr, t1, first.Mark)
		if ls != nil {
			defer release(t, ls)
		}
		t.Logf("claim: %v", err)
		time.Sleep(time.Minute) // any start made beside the call ends
		ok, cut := hook.lists()
		for _, c := range cut {
			if c.Ticket == t2 {
				t.Errorf("the claim's start of task-2 (mark %d) was cut by the worker's CallBy (starts made: %+v); task-2 waits with that mark and no worker until StartTimeout after it and someone looks", c.Mark, ok)
			}
		}
	})
}
