package gateway

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// heldWritesAPI holds the lease item's writes, once armed, until open is
// closed (or a bound passes, so that a worker that waits for them still
// ends): a release in flight while the worker's outcome is written.
type heldWritesAPI struct {
	lease.API
	armed atomic.Bool
	open  chan struct{}
}

func (a *heldWritesAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if a.armed.Load() {
		select {
		case <-a.open:
		case <-time.After(time.Second): // within the release's own bound (releaseTimeout)
		}
	}
	return a.API.UpdateItem(ctx, in, opts...)
}

// panicAtCompleted is an EMF sink that arms held once the task's call
// record is written (the call answered, before its slot is given back),
// and panics at the task's completed record (written by the outcome's
// write, once it landed).
type panicAtCompleted struct {
	mu    sync.Mutex
	on    atomic.Bool
	held  *heldWritesAPI
	lines []string
}

func (w *panicAtCompleted) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.lines = append(w.lines, string(p))
	w.mu.Unlock()
	if !w.on.Load() {
		return len(p), nil
	}
	if strings.Contains(string(p), metrics.MetricTasksCompleted) {
		panic("EMF sink failed")
	}
	w.held.armed.Store(true)
	return len(p), nil
}

// TestTaskWorkerThatPanicsWritingItsOutcomeStillWaitsForItsRelease: a
// worker gives its answered call's place back while it writes the task's
// outcome, and ends only once both are done (under Lambda, the
// invocation's end may freeze the process). A panic while the outcome is
// written ends the worker as a failed one; it must still not return while
// its release is in flight, or the release is left to a process that may
// be frozen and the lease to lapse, holding the place for its hold.
func TestTaskWorkerThatPanicsWritingItsOutcomeStillWaitsForItsRelease(t *testing.T) {
	starts := make(chan lease.TaskStart, 8)
	var store *tasks.Store
	var env *storetest.Env
	var limiter *lease.Limiter
	sink := &panicAtCompleted{}
	h := newHarnessDeps(t, Options{}, func(d *Deps, e *storetest.Env) {
		env = e
		store = &tasks.Store{DB: e.Client, Table: e.Tables.Tasks}
		sink.held = &heldWritesAPI{API: e.Client, open: make(chan struct{})}
		limiter = lease.New(sink.held, e.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond,
			OnTaskStart: func(_ context.Context, ts lease.TaskStart) { starts <- ts }})
		d.Limiter = limiter
		d.Metrics = metrics.New(sink, metrics.Options{})
	})
	h.gw.EnableTasks(store, limiter, func(_ context.Context, ts lease.TaskStart) { starts <- ts })
	up := testkit.StartBatch(t, 10, 50*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("a declared call of work: %s", a.raw)
	}
	id := a.str(t, "taskId")
	ts := <-starts
	sink.on.Store(true)
	err := h.gw.RunTask(t.Context(), ts)
	sink.on.Store(false)
	if err == nil {
		t.Fatal("the worker whose outcome's metric panicked returned nil; want its panic reported")
	}
	// Read before the held writes are let through.
	out, gerr := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &env.Tables.Leases, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"limiter_key": &types.AttributeValueMemberS{Value: "batch"}}})
	sink.held.armed.Store(false)
	close(sink.held.open)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if r, err := store.Get(t.Context(), id); err != nil || r.Status != tasks.StatusCompleted {
		t.Fatalf("the record once its worker returned: %+v, %v; want completed", r, err)
	}
	if st := lease.Describe(out.Item, time.Now(), 1, 0, nil); len(st.Leases) != 0 {
		t.Errorf("the worker returned (its outcome's write panicked) with its release still in flight: the lease item holds %+v", st.Leases)
	}
}
