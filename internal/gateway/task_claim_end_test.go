package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// endingLeases passes the lease table's calls through, but ends the
// context of a worker marked "ending" (its invocation's time spent, its
// process shutting down) as its first lease request goes out.
type endingLeases struct {
	lease.API
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (e *endingLeases) end(ctx context.Context) {
	if ctx.Value(workerKey{}) != "ending" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancel != nil {
		e.cancel()
	}
}

func (e *endingLeases) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	e.end(ctx)
	return e.API.GetItem(ctx, in, opts...)
}

func (e *endingLeases) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	e.end(ctx)
	return e.API.UpdateItem(ctx, in, opts...)
}

// A worker whose context ends while it claims its task's place makes no
// call and leaves the task as it was: queued, its ticket and its start's
// mark kept, so that a worker started again runs it. It is no failure of
// the task's call (none was made).
func TestAWorkerEndingInItsClaimLeavesItsTaskQueued(t *testing.T) {
	leases := &endingLeases{}
	h, store, _, up, id, ts := newTaskHarness(t, func(api lease.API) lease.API { leases.API = api; return leases })
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), workerKey{}, "ending"))
	defer cancel()
	leases.mu.Lock()
	leases.cancel = cancel
	leases.mu.Unlock()
	err := h.gw.RunTask(ctx, ts)
	r, gerr := store.Get(context.Background(), id)
	if gerr != nil {
		t.Fatal(gerr)
	}
	t.Logf("the ending worker: %v; the task: %s (%s)", err, r.Status, r.StatusMessage)
	if r.Status != tasks.StatusWorking || r.StatusMessage != "queued" {
		t.Fatalf("a worker that ended in its claim left its task %s (%s); want it still queued", r.Status, r.StatusMessage)
	}
	if n := len(up.Stats().Arrivals); n != 0 {
		t.Fatalf("%d calls upstream from a worker that ended in its claim", n)
	}
	// Started again (here at once, with the same start), it runs.
	if err := h.gw.RunTask(context.Background(), ts); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r, gerr = store.Get(context.Background(), id); gerr != nil {
			t.Fatal(gerr)
		}
		if r.Status != tasks.StatusWorking || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r.Status != tasks.StatusCompleted {
		t.Fatalf("the task run again: %s (%s); want completed", r.Status, r.StatusMessage)
	}
}

// newTaskHarness is a harness running gateway tasks with its limiter's
// requests going through leases (given the store's client), and a task of
// the batch server's work tool made, its one start recorded, not run. It
// returns the task's id and start, and the upstream.
func newTaskHarness(t *testing.T, leases func(lease.API) lease.API) (h *harness, store *tasks.Store, env *storetest.Env, up *testkit.Batch, id string, ts lease.TaskStart) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []lease.TaskStart
	)
	start := func(_ context.Context, ts lease.TaskStart) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ts)
	}
	h = newHarnessDeps(t, Options{}, func(d *Deps, e *storetest.Env) {
		env = e
		store = &tasks.Store{DB: e.Client, Table: e.Tables.Tasks}
		d.Limiter = lease.New(leases(e.Client), e.Tables.Leases, lease.Options{OnTaskStart: start})
	})
	h.gw.EnableTasks(store, h.gw.deps.Limiter.(*lease.Limiter), start)
	up = h.batchTasks(nil)
	id = h.createTask("batch", h.key, "work")
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("starts: %+v; want one", got)
	}
	return h, store, env, up, id, got[0]
}
