package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// slowStarts is a start hook that takes d to start a worker (an invoke
// the platform throttles and the SDK retries), recording each start.
type slowStarts struct {
	starts
	d time.Duration
}

func (s *slowStarts) hook(ctx context.Context, ts TaskStart) {
	s.starts.hook(ctx, ts)
	time.Sleep(s.d)
}

// Take and Tasks in doc.go: a place with no time left for the call is
// given back (lease), and a claim "whose take lands past its worker's
// CallBy ... gives its place back ... and fails with ErrStartLapsed". The
// starts a take's answer shows due are made inline, after the lease's
// deadline was judged: a caller whose take lands with time left is kept
// by the start hook past its CallBy and handed a lease with none.
func TestATakesStartsDoNotKeepItsCallerPastCallBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		slow := &slowStarts{d: 5 * time.Second}
		defer time.Sleep(slow.d) // a start made beside the call ends
		l := New(mem, "leases", Options{InstanceID: "a", OnTaskStart: slow.hook})
		callBy := time.Now().Add(6 * time.Second)
		_, ls, err := servedBeside(t, mem, l, callBy)
		r := struct {
			ls  *Lease
			err error
		}{ls, err}
		if len(slow.list()) != 1 {
			t.Fatalf("starts %+v; want the task's, from the caller's take", slow.list())
		}
		if r.err != nil {
			t.Logf("acquire: %v (a place with no time left given back)", r.err)
			return
		}
		defer release(t, r.ls)
		now := time.Now()
		late := !r.ls.CallDeadline.After(now)
		if late {
			t.Errorf("Acquire returned %v past its CallBy a lease whose CallDeadline passed %v ago: kept by the start its take's answer made, after the take landed with time left; want a lease with time left, or the place given back",
				now.Sub(callBy), now.Sub(r.ls.CallDeadline))
		}
	})
}

// The same for a task's worker: its claim lands with time left, its answer
// shows the next task served beside it, and the start the claim makes
// keeps it past its CallBy; it returns a lease with no time left for its
// call instead of giving the place back (ErrStartLapsed).
func TestATakesStartsDoNotKeepAClaimPastCallBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem, req, t1, t2, first := claimBesideADueTask(t)

		slow := &slowStarts{d: 5 * time.Second}
		defer time.Sleep(slow.d) // a start made beside the call ends
		w := New(mem, "leases", Options{InstanceID: "w", OnTaskStart: slow.hook})
		wr := req("q")
		wr.CallBy = time.Now().Add(2 * time.Second)
		ls, err := w.Claim(ctx, wr, t1, first.Mark)
		// Its take's start of task-2 first; a place given back then starts
		// task-1's next worker.
		if s := slow.list(); len(s) == 0 || s[0].Ticket != t2 {
			t.Fatalf("the claim's starts %+v; want task-2's first", s)
		}
		if err != nil {
			if !errors.Is(err, ErrStartLapsed) {
				t.Errorf("claim: %v; want ErrStartLapsed (its place given back) or a lease with time left", err)
			}
			return
		}
		defer release(t, ls)
		now := time.Now()
		late := !ls.CallDeadline.After(now)
		if late {
			t.Errorf("Claim returned a lease whose CallDeadline passed %v ago (its CallBy %v ago): kept past it by the start its take's answer made; want the place given back (ErrStartLapsed)",
				now.Sub(ls.CallDeadline), now.Sub(wr.CallBy))
		}
	})
}

// claimBesideADueTask sets two places (cap 2) held by a dead process to
// lapse 3 s and 7 s on, and tasks task-1 (t1) and task-2 (t2) behind them;
// once the first place lapsed, StartDue starts task-1 (first), and once
// the second lapsed too, task-2's turn has come, seen by no write: a claim
// of task-1's place now finds task-2 served beside it. In a synctest
// bubble; req makes the key's requests for a principal.
func claimBesideADueTask(t *testing.T) (mem *memStore, req func(string) Request, t1, t2 string, first TaskStart) {
	t.Helper()
	mem = newMemStore()
	var sched starts
	dead := New(mem, "leases", Options{InstanceID: "d"})
	s := New(mem, "leases", Options{InstanceID: "s", OnTaskStart: sched.hook})
	req = func(p string) Request {
		return Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: p, MaxQueued: 4}
	}
	short, long := req("p"), req("p")
	short.Hold, long.Hold = time.Second, 5*time.Second
	acquire(t, dead, short) // lapses 3 s on
	acquire(t, dead, long)  // lapses 7 s on
	t1 = enqueue(t, s, req("q"), "task-1")
	t2 = enqueue(t, s, req("r"), "task-2")
	time.Sleep(3500 * time.Millisecond) // the first place has lapsed: task-1's turn
	if err := s.StartDue(context.Background(), req("q")); err != nil {
		t.Fatal(err)
	}
	got := sched.list()
	if len(got) != 1 || got[0].Ticket != t1 {
		t.Fatalf("starts %+v; want task-1's", got)
	}
	time.Sleep(4 * time.Second) // the second has lapsed too: task-2's turn, seen by no write
	return mem, req, t1, t2, got[0]
}

// invalidJoins refuses as invalid (ValidationException) every task join
// past the first lose ones, which land with their answers lost; it counts
// the joins sent.
type invalidJoins struct {
	API
	mu    sync.Mutex
	armed bool
	lose  int
	joins int
}

func isJoin(in *dynamodb.UpdateItemInput) bool {
	expr := aws.ToString(in.UpdateExpression)
	for q, n := range in.ExpressionAttributeNames {
		if n == TasksAttr && strings.Contains(expr, "if_not_exists") && usesName(expr, q) {
			return true
		}
	}
	return false
}

func (f *invalidJoins) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	if !f.armed || !isJoin(in) {
		f.mu.Unlock()
		return f.API.UpdateItem(ctx, in, opts...)
	}
	f.joins++
	lose := f.lose > 0
	f.lose--
	f.mu.Unlock()
	if lose {
		if _, err := f.API.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
		return nil, errInjected
	}
	return nil, &errValidation{msg: "an operand of another type (by hand)"}
}

// Held. Tasks in doc.go: a join refused as invalid reads, mends and joins
// again, once: an item the store keeps refusing costs two joins, and the
// enqueue fails.
func TestAnEnqueueRefusedAsInvalidAgainJoinsTwice(t *testing.T) {
	mem := newMemStore()
	db := &invalidJoins{API: mem}
	l := viewedQueue(t, db, "leases") // a recent view: the first join is judged from it
	db.mu.Lock()
	db.armed = true
	db.mu.Unlock()
	r := taskReq("r")
	r.MaxQueued = 16
	if _, err := l.Enqueue(context.Background(), r, "", "task-2", time.Now().Add(time.Hour)); !invalid(err) {
		t.Errorf("enqueue over an item refused as invalid every time: %v; want the store's refusal", err)
	}
	if db.joins != 2 {
		t.Errorf("%d joins sent by the enqueue; want 2 (judged again once)", db.joins)
	}
}

// Held. Join and Tasks in doc.go: a join that landed with its answer lost,
// whose resend is refused as invalid, is found by the read that follows:
// one ticket, the enqueue's.
func TestALandedJoinWhoseResendIsRefusedAsInvalidIsFound(t *testing.T) {
	mem := newMemStore()
	db := &invalidJoins{API: mem}
	l := viewedQueue(t, db, "leases")
	db.mu.Lock()
	db.armed, db.lose = true, 1
	db.mu.Unlock()
	r := taskReq("r")
	r.MaxQueued = 16
	id, err := l.Enqueue(context.Background(), r, "", "task-2", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("enqueue whose join landed, answer lost, resend invalid: %v", err)
	}
	v := itemView(t, mem, "srv")
	if v.ticketFor(id) == nil || v.tickets(true) != 2 {
		t.Errorf("tickets %d, %s among them: %v; want task-1's and the enqueue's", v.tickets(true), id, v.ticketFor(id) != nil)
	}
}

// Held. Tasks and invariant 14 in doc.go: a caller's take served beside a
// task already started (its mark young) starts nothing and writes nothing
// more: once joined, its acquire costs its take.
func TestATakeBesideAStartedTaskWritesNothingMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := newMemStore()
		var hs, cs starts
		h := New(mem, "leases", Options{InstanceID: "h", OnTaskStart: hs.hook})
		c := New(mem, "leases", Options{InstanceID: "c", OnTaskStart: cs.hook})
		r := func(p string) Request {
			return Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: p, MaxQueued: 4}
		}
		x, y := acquire(t, h, r("p")), acquire(t, h, r("p"))
		task := enqueue(t, h, r("q"), "task-1")
		got := make(chan *Lease, 1)
		go func() {
			cr := r("c")
			cr.Wait = time.Minute
			ls, err := c.Acquire(ctx, cr)
			if err != nil {
				t.Errorf("the waiting caller: %v", err)
			}
			got <- ls
		}()
		synctest.Wait() // the caller waits, joined
		base := c.Stats()
		release(t, x) // the task's turn: started by the release
		if s := hs.list(); len(s) != 1 || s[0].Ticket != task {
			t.Fatalf("the release's starts %+v; want the task's", s)
		}
		release(t, y) // the caller's turn, beside the task
		if ls := <-got; ls != nil {
			defer release(t, ls)
		}
		if s := cs.list(); len(s) != 0 {
			t.Errorf("the caller's take started %+v; the task's start is young", s)
		}
		if st := c.Stats(); st.Writes-base.Writes != 1 {
			t.Errorf("the caller wrote %d times once joined (%d failed); want 1, its take", st.Writes-base.Writes, st.FailedWrites-base.FailedWrites)
		}
	})
}
