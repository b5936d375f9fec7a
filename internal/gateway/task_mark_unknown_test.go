package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// A worker whose mark of its record as running landed unseen (its answer
// lost, the record unreadable just then) makes no call and gives its
// place back, its ticket queued again: the task must not be lost. It
// made no call, and its worker, alive, knows it: the next start runs the
// call, once.
func TestATaskWhoseRunningMarkLandedUnseenRunsLater(t *testing.T) {
	// The first mark lands, and its answer is lost (the connection
	// reset); the read that follows it fails as well.
	var getFail atomic.Bool
	tapi := &readFailAPI{fail: &getFail}
	tapi.first = func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		if _, err := put(); err != nil {
			return nil, err
		}
		getFail.Store(true)
		return nil, errors.New("read tcp: connection reset by peer")
	}
	h, _, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	up := h.batchTasks(nil)
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	id := a.str(t, "taskId")
	h.sweep(st, 3)
	calls := len(up.Stats().Arrivals)
	p := h.pollTask("/mcp/batch", h.key, id)
	t.Logf("mark lost %v; poll: %s; upstream calls %d; starts %d", tapi.marked(), p.raw, calls, len(st.starts()))
	if !tapi.marked() {
		t.Fatal("no worker marked the task running")
	}
	if p.err != nil || p.str(t, "status") != "completed" || calls != 1 {
		t.Errorf("the task: %s, upstream calls %d; want it completed by one call", p.raw, calls)
	}
}

// readFailAPI is a markAPI whose next read fails once fail is set.
type readFailAPI struct {
	markAPI
	fail *atomic.Bool
}

func (a *readFailAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if a.fail.Swap(false) {
		return nil, errors.New("tasks store: service unavailable")
	}
	return a.API.GetItem(ctx, in, opts...)
}

// A worker whose mark lands past its call's deadline makes no call. Where
// no other claim came meanwhile (its own lease still held the place, and
// its release removed lease and ticket), nothing else will run the task
// either: it must not be lost, but run later, once.
func TestATaskWhoseWorkerMarkedItLateRunsLater(t *testing.T) {
	// The first mark is held before it is sent (a paused instance, a slow
	// network) past the lease's end: the tool's 1 s timeout and the margin.
	tapi := &markAPI{first: func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		time.Sleep(3 * time.Second)
		return put()
	}}
	h, _, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	up := h.batchTasks(map[string]any{"timeout": 1})
	id := h.createTask("batch", h.key, "work")
	h.sweep(st, 3)
	calls := len(up.Stats().Arrivals)
	p := h.pollTask("/mcp/batch", h.key, id)
	t.Logf("mark held %v; poll: %s; upstream calls %d; starts %d", tapi.marked(), p.raw, calls, len(st.starts()))
	if !tapi.marked() {
		t.Fatal("no worker marked the task running")
	}
	if p.err != nil || p.str(t, "status") != "completed" || calls != 1 {
		t.Errorf("the task: %s, upstream calls %d; want it completed by one call", p.raw, calls)
	}
}

// racedMarkAPI passes a task store's calls through, but holds the first
// write of a record marked running (its worker late) until its lease has
// lapsed and a start made meanwhile (meanwhile) has claimed the place anew
// and sent its own mark; the late mark lands first.
type racedMarkAPI struct {
	tasks.API
	late      time.Duration
	meanwhile func()
	mu        sync.Mutex
	marks     int
	second    chan struct{} // the second worker is at its mark
	first     chan struct{} // the first worker's mark has landed
}

func (a *racedMarkAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	m, ok := in.Item["status_message"].(*types.AttributeValueMemberS)
	if !ok || m.Value != "running" {
		return a.API.PutItem(ctx, in, opts...)
	}
	a.mu.Lock()
	a.marks++
	n := a.marks
	a.mu.Unlock()
	switch n {
	case 1:
		time.Sleep(a.late)
		a.meanwhile()
		select {
		case <-a.second:
		case <-time.After(10 * time.Second):
		}
		out, err := a.API.PutItem(ctx, in, opts...)
		close(a.first)
		return out, err
	case 2:
		close(a.second)
		<-a.first
	}
	return a.API.PutItem(ctx, in, opts...)
}

// A late worker (its lease lapsed) and the worker of the claim made anew
// meanwhile: the late one's mark lands first, past its call's deadline,
// so it makes no call; the new one finds the record marked by an earlier
// claim, which it cannot tell from one whose call was made, and makes
// none either, giving the ticket back. The call is made at most once;
// none made, the record keeps its run_until, past which the task reads
// failed ("may or may not have run"): it is not left working.
func TestATaskMarkedByALateWorkerAndClaimedAnewRunsAtMostOnce(t *testing.T) {
	tapi := &racedMarkAPI{late: lease.StartTimeout + time.Second, second: make(chan struct{}), first: make(chan struct{})}
	h, store, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	tapi.meanwhile = func() {
		if err := h.gw.SweepTasks(context.Background()); err != nil {
			t.Errorf("sweep: %v", err)
		}
	}
	up := h.batchTasks(map[string]any{"timeout": 1})
	id := h.createTask("batch", h.key, "work")
	h.sweep(st, 3)
	calls := len(up.Stats().Arrivals)
	p := h.pollTask("/mcp/batch", h.key, id)
	t.Logf("marks %d; poll: %s; upstream calls %d; starts %d", tapi.marks, p.raw, calls, len(st.starts()))
	if tapi.marks < 2 {
		t.Fatal("no second worker reached its mark")
	}
	if calls > 1 {
		t.Errorf("the upstream was called %d times", calls)
	}
	if calls == 1 && (p.err != nil || p.str(t, "status") != "completed") {
		t.Errorf("the task, its call made: %s; want it completed", p.raw)
	}
	if r, err := store.Get(context.Background(), id); calls == 0 && (err != nil || r.StatusMessage != "running" || r.RunUntil.IsZero()) {
		t.Errorf("no call made: the record %+v, %v; want it marked running with a run_until", r, err)
	}
}
