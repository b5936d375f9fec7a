package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// workerKey names, in a worker's context, which worker a store call is
// from.
type workerKey struct{}

// twoWorkersAPI passes a task store's calls through, but ends worker "a"
// (a panic, as an instance that ends does) once its running mark has
// landed, before its call; and holds worker "b"'s first read, its answer
// in hand, until resume is closed (a paused instance).
type twoWorkersAPI struct {
	tasks.API
	resume chan struct{}
	mu     sync.Mutex
	read   bool
	ended  bool
}

func (a *twoWorkersAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := a.API.GetItem(ctx, in, opts...)
	if ctx.Value(workerKey{}) == "b" {
		a.mu.Lock()
		first := !a.read
		a.read = true
		a.mu.Unlock()
		if first {
			<-a.resume
		}
	}
	return out, err
}

func (a *twoWorkersAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := a.API.PutItem(ctx, in, opts...)
	if m, ok := in.Item["status_message"].(*types.AttributeValueMemberS); ok && m.Value == "running" && err == nil && ctx.Value(workerKey{}) == "a" {
		a.mu.Lock()
		a.ended = true
		a.mu.Unlock()
		panic("the worker's instance ended")
	}
	return out, err
}

// A task's start made twice (an invocation delivered twice): worker b
// reads the record (queued) and is paused; worker a claims, marks the
// record running and ends before its answer is known (its call may have
// been made). Once a's lease lapsed, b resumes: its claim takes the place
// anew, and its mark, judged on the record it read, meets a's. The record
// was marked by an earlier claim of the ticket: b must make no call.
func TestASecondWorkerMakesNoCallOnARecordAnEarlierClaimMarked(t *testing.T) {
	tapi := &twoWorkersAPI{resume: make(chan struct{})}
	var (
		store *tasks.Store
		mu    sync.Mutex
		got   []lease.TaskStart
	)
	start := func(_ context.Context, ts lease.TaskStart) {
		mu.Lock()
		got = append(got, ts)
		mu.Unlock()
	}
	h := newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		tapi.API = env.Client
		store = &tasks.Store{DB: tapi, Table: env.Tables.Tasks}
		d.Limiter = lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond, OnTaskStart: start})
		d.Auth = auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1})
	})
	h.gw.EnableTasks(store, h.gw.deps.Limiter.(*lease.Limiter), start)
	up := h.batchTasks(map[string]any{"timeout": 1})
	h.createTask("batch", h.key, "work")
	mu.Lock()
	if len(got) != 1 {
		mu.Unlock()
		t.Fatalf("starts: %+v; want one", got)
	}
	ts := got[0]
	mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = h.gw.RunTask(context.WithValue(context.Background(), workerKey{}, "b"), ts) })
	for {
		tapi.mu.Lock()
		read := tapi.read
		tapi.mu.Unlock()
		if read {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = h.gw.RunTask(context.WithValue(context.Background(), workerKey{}, "a"), ts)
	if !tapi.ended {
		close(tapi.resume)
		t.Fatal("worker a did not mark the record")
	}
	// Past a's lease: the tool's 1 s timeout and the margin.
	time.Sleep(2 * time.Second)
	close(tapi.resume)
	wg.Wait()
	if calls := len(up.Stats().Arrivals); calls != 0 {
		t.Errorf("the upstream was called %d times after the record was marked by an earlier claim, whose call may have been made", calls)
	}
}
