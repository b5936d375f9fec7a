package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// Invariants 7 and 16: a running task's claimed ticket is no waiter, so
// its principal, with nothing waiting, may take the last QueueReserve
// places of the tasks' queue as any principal with nothing waiting may.
// The claimed ticket stays a member of its principal's waiting set: the
// reserve's condition must not read it as a task waiting.
func TestARunningTaskDoesNotHoldItsPrincipalToTheReserve(t *testing.T) {
	t.Run("memStore", func(t *testing.T) { runningTaskAndTheReserve(t, newMemStore(), "leases") })
	t.Run("dynalite", func(t *testing.T) {
		env := storetest.NewEnv(t)
		runningTaskAndTheReserve(t, env.Client, env.Tables.Leases)
	})
}

func runningTaskAndTheReserve(t *testing.T, db API, table string) {
	var st starts
	l := New(db, table, Options{InstanceID: "a", OnTaskStart: st.hook})
	id := enqueue(t, l, taskReq("p"), "task-p1")
	w := New(db, table, Options{InstanceID: "w"})
	ls, err := w.Claim(context.Background(), taskReq("p"), id, st.list()[0].Mark)
	if err != nil {
		t.Fatal(err)
	}
	// MaxQueued 4, a reserve of 1: three tasks of others wait.
	for _, who := range []string{"r", "s", "u"} {
		enqueue(t, l, taskReq(who), "task-"+who)
	}
	if o, ok := l.Outlook(taskReq("p"), ""); !ok || o.Tasks != 3 {
		t.Fatalf("outlook: %+v; want 3 tasks waiting", o)
	}
	// p has no task waiting: its first takes the last place.
	if _, err := l.Enqueue(context.Background(), taskReq("p"), "", "task-p2", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("the first task waiting of a principal whose other task runs, 3 of 4 places taken: %v; want it to join", err)
	}
	// Now it has: its next is held to the reserve (the queue is full).
	_, err = l.Enqueue(context.Background(), taskReq("p"), "", "task-p3", time.Now().Add(time.Hour))
	if fe := (*FullError)(nil); !errors.As(err, &fe) || fe.Reason != QueueFull {
		t.Fatalf("a second task waiting of a principal, 4 of 4 places taken: %v; want the queue full", err)
	}
	release(t, ls)
}

// The same for the callers' queue: a principal whose task runs, with no
// caller waiting, may take the last QueueReserve places of the callers'.
func TestARunningTaskDoesNotHoldItsPrincipalsCallersToTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("p"), "task-p1")
		w := New(db, "leases", Options{InstanceID: "w"})
		ls, err := w.Claim(context.Background(), taskReq("p"), id, st.list()[0].Mark)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		caller := func(who string) Request {
			r := taskReq(who)
			r.Wait = time.Minute
			return r
		}
		// MaxQueued 4, a reserve of 1: three callers of others wait.
		for _, who := range []string{"r", "s", "u"} {
			c := New(db, "leases", Options{InstanceID: "c-" + who})
			wg.Go(func() {
				if ls, err := c.Acquire(ctx, caller(who)); err == nil {
					_, _ = ls.Finish(context.Background(), Success)
				}
			})
			synctest.Wait()
		}
		if n := rgMapLen(rawItem(t, db, "srv"), QueueAttr); n != 3 {
			t.Fatalf("callers waiting: %d; want 3", n)
		}
		done := make(chan error, 1)
		c := New(db, "leases", Options{InstanceID: "c-p"})
		wg.Go(func() {
			ls, err := c.Acquire(ctx, caller("p"))
			if err == nil {
				_, _ = ls.Finish(context.Background(), Success)
			}
			done <- err
		})
		synctest.Wait()
		select {
		case err := <-done:
			var fe *FullError
			if errors.As(err, &fe) {
				t.Errorf("p's first caller, its task running, 3 of 4 places taken: %v; want it to join", err)
			}
		default:
		}
		cancel()
		wg.Wait()
		release(t, ls)
	})
}

// A claim whose lease lapsed unreleased leaves its ticket waiting again,
// with no write: its principal is held to the reserve again, as any
// principal with a task waiting.
func TestALapsedClaimHoldsItsPrincipalToTheReserveAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("p"), "task-p1")
		w := New(db, "leases", Options{InstanceID: "w"})
		if _, err := w.Claim(context.Background(), taskReq("p"), id, st.list()[0].Mark); err != nil {
			t.Fatal(err) // its worker ends here: never released
		}
		// MaxQueued 4, a reserve of 1: two tasks of others wait.
		for _, who := range []string{"r", "s"} {
			enqueue(t, l, taskReq(who), "task-"+who)
		}
		time.Sleep(past)
		_, err := l.Enqueue(context.Background(), taskReq("p"), "", "task-p2", time.Now().Add(time.Hour))
		if fe := (*FullError)(nil); !errors.As(err, &fe) || fe.Reason != QueueFull {
			t.Fatalf("a task of a principal whose claim lapsed (its task waiting again), 3 of 4 places taken: %v; want the queue full for it", err)
		}
		// The place it was refused is the reserve's: a principal with
		// nothing waiting takes it.
		enqueue(t, l, taskReq("v"), "task-v")
	})
}
