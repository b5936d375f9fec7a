package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// lostJoinAPI passes a limiter's store calls through, but for the first
// task join: that one lands, then meanwhile runs (what the rest of the
// fleet does before its answer would have come back), and it and every
// resend of it answer as a lost answer does (the connection reset).
type lostJoinAPI struct {
	lease.API
	mu        sync.Mutex
	joined    bool
	meanwhile func()
}

func (a *lostJoinAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	names := slices.Collect(func(yield func(string) bool) {
		for _, v := range in.ExpressionAttributeNames {
			if !yield(v) {
				return
			}
		}
	})
	join := slices.Contains(names, lease.SeqAttr) && slices.Contains(names, lease.TasksAttr) &&
		strings.Contains(aws.ToString(in.UpdateExpression), "if_not_exists(")
	if !join {
		return a.API.UpdateItem(ctx, in, opts...)
	}
	a.mu.Lock()
	first := !a.joined
	a.joined = true
	a.mu.Unlock()
	if first {
		if _, err := a.API.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
		a.meanwhile()
	}
	return nil, errors.New("read tcp: connection reset by peer")
}

// A task's join whose answer is lost may have landed; Enqueue then fails
// (its writes' outcome unknown, or freed moved), and the task's record is
// settled as failed and the agent told so. Meanwhile the ticket was in
// the queue: its turn came, a worker claimed it and made its call. The
// agent must not be told a task failed whose call the upstream ran: either
// the task is made (its outcome in its record), or its call never runs.
func TestATaskWhoseJoinWasLostIsNotReportedFailedWhileItRuns(t *testing.T) {
	st := &reviewStarts{t: t}
	api := &lostJoinAPI{}
	var store *tasks.Store
	h := newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		store = &tasks.Store{DB: env.Client, Table: env.Tables.Tasks}
		api.API = env.Client
		d.Limiter = lease.New(api, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond, OnTaskStart: st.start})
		d.Auth = auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1})
	})
	st.mu.Lock()
	st.g = h.gw
	st.mu.Unlock()
	h.gw.EnableTasks(store, h.gw.deps.Limiter.(*lease.Limiter), st.start)
	t.Cleanup(st.wg.Wait)
	up := testkit.StartBatch(t, 10, 100*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	// Meanwhile a synchronous call arrives: it waits behind the task's
	// ticket, sees the task's turn come and starts its worker, which runs
	// the task's call; then it gets the place.
	var syncCall response
	api.meanwhile = func() {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/mcp-rest/tools/call", strings.NewReader(`{"server_id":"batch","name":"work","arguments":{}}`))
		req.Header.Set("Authorization", "Bearer "+h.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("the synchronous call: %v", err)
			return
		}
		resp.Body.Close()
		syncCall.status = resp.StatusCode
		st.wg.Wait()
	}
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if syncCall.status != http.StatusOK {
		t.Fatalf("the synchronous call meanwhile: status %d", syncCall.status)
	}
	calls := len(up.Stats().Arrivals)
	t.Logf("joined %v; create: %s; upstream calls %d; starts %d", api.joined, a.raw, calls, len(st.starts()))
	made := a.err == nil && a.result["taskId"] != nil
	if !made && calls > 1 {
		t.Errorf("the agent was told its call failed (%s), yet the upstream ran %d calls: the synchronous one and the task's", a.raw, calls)
	}
	if made {
		p := h.pollTask("/mcp/batch", h.key, a.str(t, "taskId"))
		if p.err != nil || p.str(t, "status") != "completed" {
			t.Errorf("the task made although its join's answer was lost: %s; want it completed, as its call ran", p.raw)
		}
	}
}

// failedMarkAPI passes a task store's calls through, but for the first
// write of a record marked running: that one fails as a store error does,
// without landing.
type failedMarkAPI struct {
	tasks.API
	mu     sync.Mutex
	failed bool
}

func (a *failedMarkAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if m, ok := in.Item["status_message"].(*types.AttributeValueMemberS); ok && m.Value == "running" {
		a.mu.Lock()
		first := !a.failed
		a.failed = true
		a.mu.Unlock()
		if first {
			return nil, errors.New("tasks store: service unavailable")
		}
	}
	return a.API.PutItem(ctx, in, opts...)
}

// A worker whose mark of its record as running fails with a store error
// (not a conflict: the write did not land) must not make the call: the
// creation whose join's outcome was unknown still sees the record as no
// worker took it, fails it, and the agent is told it failed. Making the
// call then runs a task the agent was told failed.
func TestATaskWhoseRunningMarkFailedMakesNoCall(t *testing.T) {
	st := &reviewStarts{t: t}
	api := &lostJoinAPI{}
	tapi := &failedMarkAPI{}
	var store *tasks.Store
	h := newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		tapi.API = env.Client
		store = &tasks.Store{DB: tapi, Table: env.Tables.Tasks}
		api.API = env.Client
		d.Limiter = lease.New(api, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond, OnTaskStart: st.start})
		d.Auth = auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1})
	})
	st.mu.Lock()
	st.g = h.gw
	st.mu.Unlock()
	h.gw.EnableTasks(store, h.gw.deps.Limiter.(*lease.Limiter), st.start)
	t.Cleanup(st.wg.Wait)
	up := testkit.StartBatch(t, 10, 100*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	api.meanwhile = func() {
		// The ticket landed; its turn has come: a worker claims it, and
		// its running mark fails.
		if err := h.gw.SweepTasks(context.Background()); err != nil {
			t.Errorf("sweep: %v", err)
		}
		st.wg.Wait()
	}
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	st.wg.Wait()
	// Whatever start is due now (a ticket given back) runs.
	if err := h.gw.SweepTasks(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.wg.Wait()
	calls := len(up.Stats().Arrivals)
	t.Logf("mark failed %v; create: %s; upstream calls %d; starts %d", tapi.failed, a.raw, calls, len(st.starts()))
	if !tapi.failed {
		t.Fatal("no worker marked the task running")
	}
	made := a.err == nil && a.result["taskId"] != nil
	if !made && calls > 0 {
		t.Errorf("the agent was told its call failed (%s), yet the upstream ran the task's call", a.raw)
	}
	if made {
		p := h.pollTask("/mcp/batch", h.key, a.str(t, "taskId"))
		if p.err != nil || p.str(t, "status") != "completed" || calls != 1 {
			t.Errorf("the task made: %s, upstream calls %d; want it completed by one call", p.raw, calls)
		}
	}
}

// A worker that could not mark its task running gives its place back
// unused; the task is not lost: its ticket waits again and a later start
// runs its call, once.
func TestATaskWhoseRunningMarkFailedRunsLater(t *testing.T) {
	st := &reviewStarts{t: t}
	tapi := &failedMarkAPI{}
	var store *tasks.Store
	h := newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		tapi.API = env.Client
		store = &tasks.Store{DB: tapi, Table: env.Tables.Tasks}
		d.Limiter = lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond, OnTaskStart: st.start})
		d.Auth = auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1})
	})
	st.mu.Lock()
	st.g = h.gw
	st.mu.Unlock()
	h.gw.EnableTasks(store, h.gw.deps.Limiter.(*lease.Limiter), st.start)
	t.Cleanup(st.wg.Wait)
	up := testkit.StartBatch(t, 10, 100*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	id := a.str(t, "taskId")
	for range 3 {
		st.wg.Wait()
		if err := h.gw.SweepTasks(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	st.wg.Wait()
	calls := len(up.Stats().Arrivals)
	p := h.pollTask("/mcp/batch", h.key, id)
	t.Logf("mark failed %v; poll: %s; upstream calls %d; starts %d", tapi.failed, p.raw, calls, len(st.starts()))
	if !tapi.failed {
		t.Fatal("no worker marked the task running")
	}
	if p.err != nil || p.str(t, "status") != "completed" || calls != 1 {
		t.Errorf("the task: %s, upstream calls %d; want it completed by one call", p.raw, calls)
	}
}

// endedMarkAPI passes a task store's calls through, but ends its worker
// (a panic, as an instance that ends does) at the first write of a record
// marked running: after its claim, before its mark.
type endedMarkAPI struct {
	tasks.API
	mu    sync.Mutex
	ended bool
}

func (a *endedMarkAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if m, ok := in.Item["status_message"].(*types.AttributeValueMemberS); ok && m.Value == "running" {
		a.mu.Lock()
		first := !a.ended
		a.ended = true
		a.mu.Unlock()
		if first {
			panic("the worker's instance ended")
		}
	}
	return a.API.PutItem(ctx, in, opts...)
}

// A worker that ends after it claimed its task's place and before it
// marked the record running leaves a lease that lapses and a record that
// still says queued. Once its lease has lapsed the task must not be lost:
// it runs, or it ends.
//
// The claim keeps the task's ticket in the lease item; once the lease
// lapses, the ticket waits again and a new worker is started, which finds
// the record never marked and runs the call.
func TestATaskWhoseWorkerEndedBeforeItsMarkIsNotLost(t *testing.T) {
	tapi := &endedMarkAPI{}
	var (
		store *tasks.Store
		g     *Gateway
		wg    sync.WaitGroup
		mu    sync.Mutex
	)
	start := func(_ context.Context, ts lease.TaskStart) {
		mu.Lock()
		gw := g
		mu.Unlock()
		wg.Go(func() { _ = gw.RunTask(context.Background(), ts) })
	}
	h := newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		tapi.API = env.Client
		store = &tasks.Store{DB: tapi, Table: env.Tables.Tasks}
		d.Limiter = lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond, OnTaskStart: start})
		d.Auth = auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1})
	})
	mu.Lock()
	g = h.gw
	mu.Unlock()
	h.gw.EnableTasks(store, h.gw.deps.Limiter.(*lease.Limiter), start)
	t.Cleanup(wg.Wait)
	up := testkit.StartBatch(t, 10, 100*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120, "timeout": 1,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	id := h.createTask("batch", h.key, "work")
	wg.Wait()
	if !tapi.ended {
		t.Fatal("no worker reached its mark")
	}
	// Past the lease's end (its hold, the tool's 1 s timeout, and the
	// margin), and past a start's timeout: whatever could run it has.
	time.Sleep(2*time.Second + lease.StartTimeout)
	for range 2 {
		if err := h.gw.SweepTasks(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
	p := h.pollTask("/mcp/batch", h.key, id)
	calls := len(up.Stats().Arrivals)
	t.Logf("poll: %s; upstream calls %d", p.raw, calls)
	if p.err != nil || p.str(t, "status") == "working" && calls == 0 {
		t.Errorf("the task is still waiting with nothing to run it: %s", p.raw)
	}
}

// diedMarkedAPI passes a task store's calls through, but ends its worker
// (a panic, as an instance that ends does) once the first write of a
// record marked running has landed: after its mark, before its call.
type diedMarkedAPI struct {
	tasks.API
	mu    sync.Mutex
	ended bool
}

func (a *diedMarkedAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := a.API.PutItem(ctx, in, opts...)
	if m, ok := in.Item["status_message"].(*types.AttributeValueMemberS); ok && m.Value == "running" && err == nil {
		a.mu.Lock()
		first := !a.ended
		a.ended = true
		a.mu.Unlock()
		if first {
			panic("the worker's instance ended")
		}
	}
	return out, err
}

// A worker that ends once its record is marked running leaves a lease
// that lapses, and its ticket waits again; the worker started for it then
// finds the record marked under that ticket: the call may have been made,
// so it makes none, and gives the ticket back. The task ends failed past
// its run_until ("may or may not have run"), its call made at most once.
func TestATaskMarkedRunningIsNotCalledAgainByTheNextClaim(t *testing.T) {
	tapi := &diedMarkedAPI{}
	var (
		store *tasks.Store
		g     *Gateway
		wg    sync.WaitGroup
		mu    sync.Mutex
		env   *storetest.Env
	)
	start := func(_ context.Context, ts lease.TaskStart) {
		mu.Lock()
		gw := g
		mu.Unlock()
		wg.Go(func() { _ = gw.RunTask(context.Background(), ts) })
	}
	h := newHarnessDeps(t, Options{}, func(d *Deps, e *storetest.Env) {
		env = e
		tapi.API = e.Client
		store = &tasks.Store{DB: tapi, Table: e.Tables.Tasks}
		d.Limiter = lease.New(e.Client, e.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond, OnTaskStart: start})
		d.Auth = auth.New(e.Client, e.Tables.Keys, auth.Options{CacheTTL: -1})
	})
	mu.Lock()
	g = h.gw
	mu.Unlock()
	h.gw.EnableTasks(store, h.gw.deps.Limiter.(*lease.Limiter), start)
	t.Cleanup(wg.Wait)
	up := testkit.StartBatch(t, 10, 100*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120, "timeout": 1, "cancel_grace": 1,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	id := h.createTask("batch", h.key, "work")
	wg.Wait()
	if !tapi.ended {
		t.Fatal("no worker's mark landed")
	}
	// Past the lease's end and a start's timeout, and past run_until
	// (the call's end, cancel_grace, the lease margin and the watch).
	time.Sleep(3*time.Second + lease.StartTimeout)
	for range 2 {
		if err := h.gw.SweepTasks(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
	if calls := len(up.Stats().Arrivals); calls != 0 {
		t.Errorf("the upstream was called %d times; its first worker ended before its call, and no other may call", calls)
	}
	out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &env.Tables.Leases,
		Key: map[string]types.AttributeValue{"limiter_key": &types.AttributeValueMemberS{Value: "batch"}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := lease.Describe(out.Item, time.Now(), 1, 0, nil); len(st.Queue) != 0 || len(st.Leases) != 0 {
		t.Errorf("the lease item still holds the task: %+v", st)
	}
	p := h.pollTask("/mcp/batch", h.key, id)
	if p.err != nil || p.str(t, "status") != "failed" {
		t.Errorf("a task whose worker ended during its run, past its run_until: %s; want failed", p.raw)
	}
}

// afterMarkAPI passes a task store's calls through and, once the first
// write of a record marked running has landed, runs meanwhile (once).
type afterMarkAPI struct {
	tasks.API
	mu        sync.Mutex
	done      bool
	meanwhile func()
}

func (a *afterMarkAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := a.API.PutItem(ctx, in, opts...)
	if m, ok := in.Item["status_message"].(*types.AttributeValueMemberS); ok && m.Value == "running" && err == nil {
		a.mu.Lock()
		first := !a.done
		a.done = true
		a.mu.Unlock()
		if first {
			a.meanwhile()
		}
	}
	return out, err
}

// The agent cancels a task whose call has just started; the upstream
// answers at once that it needs input, before the worker's watch reads
// the cancellation. The task was asked to stop: it must end cancelled,
// not ask the agent for input.
func TestATaskCancelledWhileItsCallRunsDoesNotAskForInput(t *testing.T) {
	tapi := &afterMarkAPI{}
	var (
		store *tasks.Store
		g     *Gateway
		wg    sync.WaitGroup
		mu    sync.Mutex
	)
	start := func(_ context.Context, ts lease.TaskStart) {
		mu.Lock()
		gw := g
		mu.Unlock()
		wg.Go(func() {
			if err := gw.RunTask(context.Background(), ts); err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	h := newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		tapi.API = env.Client
		store = &tasks.Store{DB: tapi, Table: env.Tables.Tasks}
		d.Limiter = lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond, OnTaskStart: start})
		d.Auth = auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1})
	})
	mu.Lock()
	g = h.gw
	mu.Unlock()
	h.gw.EnableTasks(store, h.gw.deps.Limiter.(*lease.Limiter), start)
	t.Cleanup(wg.Wait)
	_, url := startTaskServer(t, false, nil)
	h.server(map[string]any{"server_id": "plain", "url": url, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"confirm_delete": map[string]any{"task_support": "optional"}}})
	var (
		id        string
		idMu      sync.Mutex
		cancelled rpcAnswer
	)
	tapi.meanwhile = func() {
		idMu.Lock()
		defer idMu.Unlock()
		cancelled = h.rpc("/mcp/plain", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
	}
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": map[string]any{
		"extensions": map[string]any{tasksExtension: map[string]any{}}, "elicitation": map[string]any{}}}
	// The worker's cancel waits until the task is made: its id is set first.
	idMu.Lock()
	a := h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "confirm_delete", "arguments": map[string]any{"filename": "a.txt"}, "_meta": meta}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" {
		idMu.Unlock()
		t.Fatalf("a declared call of confirm_delete: %s, want a CreateTaskResult", a.raw)
	}
	id = a.str(t, "taskId")
	idMu.Unlock()
	wg.Wait()
	p := h.pollTask("/mcp/plain", h.key, id)
	t.Logf("cancel: %s; poll: %s", cancelled.raw, p.raw)
	if p.err != nil || p.str(t, "status") != "cancelled" {
		t.Errorf("a task cancelled while its call ran, the upstream asking for input: %s; want cancelled", p.raw)
	}
}
