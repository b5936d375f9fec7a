package gateway

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// engineHarness is a harness whose gateway runs tasks itself: its limiter
// starts a worker (RunTask, in a goroutine of the test) when a task's
// turn comes, as the process's starter does outside Lambda.
func engineHarness(t *testing.T) (*harness, *tasks.Store, *sync.WaitGroup) {
	t.Helper()
	h, store, wg, _, _ := engineHarnessOf(t)
	return h, store, wg
}

// engineHarnessOf is engineHarness, with its limiter and its store's
// environment; more change the gateway's dependencies.
func engineHarnessOf(t *testing.T, more ...func(*Deps)) (*harness, *tasks.Store, *sync.WaitGroup, *lease.Limiter, *storetest.Env) {
	t.Helper()
	return engineHarnessWith(t, Options{}, more...)
}

// engineHarnessWith is engineHarnessOf with the gateway's options; more
// change its dependencies (a metrics emitter, say).
func engineHarnessWith(t *testing.T, opts Options, more ...func(*Deps)) (*harness, *tasks.Store, *sync.WaitGroup, *lease.Limiter, *storetest.Env) {
	t.Helper()
	var (
		store   *tasks.Store
		limiter *lease.Limiter
		gw      *Gateway
		wg      sync.WaitGroup
		mu      sync.Mutex
	)
	start := func(_ context.Context, ts lease.TaskStart) {
		mu.Lock()
		g := gw
		mu.Unlock()
		wg.Go(func() {
			if err := g.RunTask(context.Background(), ts); err != nil {
				t.Errorf("worker of %s: %v", ts.Task, err)
			}
		})
	}
	h := newHarnessDeps(t, opts, func(d *Deps, env *storetest.Env) {
		store = &tasks.Store{DB: env.Client, Table: env.Tables.Tasks}
		limiter = lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond, OnTaskStart: start})
		d.Limiter = limiter
		for _, f := range more {
			f(d)
		}
	})
	mu.Lock()
	gw = h.gw
	mu.Unlock()
	h.gw.EnableTasks(store, limiter, start)
	t.Cleanup(wg.Wait)
	return h, store, &wg, limiter, h.env
}

// TestGatewayRunsTasks: tasks of a tool whose item sets task_support wait
// in the server's queue, holding nothing, and run one at a time under a
// cap of 1 — the upstream never sees two at once — each with its own
// result; a task cancelled while it waits never reaches the upstream, and
// one cancelled while it runs is cut off and says so.
func TestGatewayRunsTasks(t *testing.T) {
	h, _, _ := engineHarness(t)
	up := testkit.StartBatch(t, 10, 300*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})

	create := func() string {
		t.Helper()
		a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
		if a.err != nil || a.str(t, "resultType") != "task" || a.str(t, "status") != "working" {
			t.Fatalf("a declared call of work: %s, want a CreateTaskResult", a.raw)
		}
		return a.str(t, "taskId")
	}
	var ids []string
	for range 4 {
		ids = append(ids, create())
	}
	for _, id := range ids {
		a := h.pollTask("/mcp/batch", h.key, id)
		if a.err != nil || a.str(t, "status") != "completed" || !strings.Contains(string(a.result["result"]), "done") {
			t.Errorf("task %s: %s, want completed with the tool's answer", id, a.raw)
		}
	}
	if st := up.Stats(); st.Served != 4 || st.Peak != 1 {
		t.Errorf("the upstream served %d calls, at most %d at once; want 4, one at a time (cap 1)", st.Served, st.Peak)
	}

	// Cancelled while waiting: withdrawn from the queue, never called.
	running, waiting := create(), create()
	if a := h.rpc("/mcp/batch", h.key, "tasks/cancel", map[string]any{"taskId": waiting}, rpcOpts{declare: true}); a.err != nil {
		t.Fatalf("tasks/cancel of a waiting task: %s", a.raw)
	}
	if a := h.pollTask("/mcp/batch", h.key, waiting); a.str(t, "status") != "cancelled" {
		t.Errorf("a task cancelled while it waited: %s, want cancelled", a.raw)
	}
	if a := h.pollTask("/mcp/batch", h.key, running); a.str(t, "status") != "completed" {
		t.Errorf("the task before it: %s, want completed", a.raw)
	}
	if st := up.Stats(); st.Served != 5 {
		t.Errorf("the upstream served %d calls; want 5 (the cancelled task never reached it)", st.Served)
	}

	// Cancelled while running: cut off, its place kept until the upstream
	// stopped.
	slow := testkit.StartBatch(t, 1, 20*time.Second)
	h.server(map[string]any{"server_id": "slow", "url": slow.URL, "max_concurrent_requests": 1, "task_ttl": 120, "timeout": 60, "cancel_grace": 1,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	a := h.rpc("/mcp/slow", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil {
		t.Fatalf("a call of slow work: %s", a.raw)
	}
	id := a.str(t, "taskId")
	for deadline := time.Now().Add(30 * time.Second); slow.Stats().Served+len(slow.Stats().Arrivals) == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if a := h.rpc("/mcp/slow", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true}); a.err != nil {
		t.Fatalf("tasks/cancel of a running task: %s", a.raw)
	}
	if a := h.pollTask("/mcp/slow", h.key, id); a.str(t, "status") != "cancelled" {
		t.Errorf("a task cancelled while it ran: %s, want cancelled", a.raw)
	}
	if st := slow.Stats(); st.Served != 0 || len(st.Arrivals) != 1 {
		t.Errorf("the slow upstream: %d arrivals, %d answered before the cancellation; want 1, 0", len(st.Arrivals), st.Served)
	}
}

// TestStoppedWorkerReadsAsFailed: a task still working past its RunUntil
// lost its worker (its instance died with the call): tasks/get tells the
// agent it failed, and that the call may or may not have run, rather than
// leaving it working until its TTL.
func TestStoppedWorkerReadsAsFailed(t *testing.T) {
	now := time.Now()
	r := &tasks.Record{ID: "tsk_x", Kind: tasks.KindGateway, Status: tasks.StatusWorking, StatusMessage: "running",
		CreatedAt: now.Add(-time.Minute), UpdatedAt: now.Add(-time.Minute), TTL: time.Hour, RunUntil: now.Add(-time.Second)}
	res, err := detailedTask(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.fields["status"]); got != `"failed"` || !strings.Contains(string(res.fields["error"]), "may or may not have run") {
		t.Errorf("a task past its RunUntil reads as %s (error %s); want failed, saying the call may or may not have run", got, res.fields["error"])
	}
	r.RunUntil = now.Add(time.Minute)
	if res, _ := detailedTask(r); string(res.fields["status"]) != `"working"` {
		t.Errorf("a task within its RunUntil reads as %s; want working", res.fields["status"])
	}
	if r.Status != tasks.StatusWorking {
		t.Error("reading a stopped task changed its record")
	}
}

// TestGatewayTaskAsksForInput: a gateway task whose upstream (synchronous,
// answering input_required as MCP 2026-07-28 lets it) asks for input goes
// to input_required with the upstream's requests, its place given back;
// tasks/update brings the answer, and the task's next round — the call
// retried with it — completes with the upstream's answer to it.
func TestGatewayTaskAsksForInput(t *testing.T) {
	h, _, _ := engineHarness(t)
	id, a := h.inputTask(map[string]any{"max_concurrent_requests": 1})
	if _, shown := a.result["requestState"]; shown {
		t.Errorf("tasks/get shows a requestState: %s", a.raw)
	}
	// The place is given back beside the outcome's write (see RunTask), so
	// it may still be held as the record first shows input_required; it
	// must be given back without the agent's answer.
	n := testkit.LeaseCount(t, h.env, "plain", "leases")
	for deadline := time.Now().Add(30 * time.Second); n != 0 && time.Now().Before(deadline); n = testkit.LeaseCount(t, h.env, "plain", "leases") {
		time.Sleep(20 * time.Millisecond)
	}
	if n != 0 {
		t.Errorf("%d places held while the task waits for input; want none", n)
	}
	u := h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}}, rpcOpts{declare: true})
	if u.err != nil {
		t.Fatalf("tasks/update: %s", u.raw)
	}
	a = h.pollTask("/mcp/plain", h.key, id)
	if a.err != nil || a.str(t, "status") != "completed" || !strings.Contains(string(a.result["result"]), "deleted a.txt") {
		t.Errorf("after the answer: %s, want completed, deleted", a.raw)
	}
}

// TestTaskProtocolErrorFails: a task whose upstream answers its call with
// a JSON-RPC error (not a tool's isError) is failed, carrying that error,
// as a synchronous call relays it.
func TestTaskProtocolErrorFails(t *testing.T) {
	h, _, _ := engineHarness(t)
	_, url := startTaskServer(t, false, nil)
	h.server(map[string]any{"server_id": "plain", "url": url, "task_ttl": 120,
		"tools": map[string]any{"protocol_error_job": map[string]any{"task_support": "optional"}}})
	a := h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "protocol_error_job", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("a declared call of protocol_error_job: %s, want a CreateTaskResult", a.raw)
	}
	a = h.pollTask("/mcp/plain", h.key, a.str(t, "taskId"))
	if a.err != nil || a.str(t, "status") != "failed" || !strings.Contains(string(a.result["error"]), "protocol_error_job failed inside the server") {
		t.Errorf("the task: %s, want failed with the upstream's JSON-RPC error", a.raw)
	}
	if _, has := a.result["result"]; has {
		t.Errorf("a failed task carries a result: %s", a.raw)
	}
}

// TestGatewayTaskTakesPartialInput: a round of two input requests answered
// one tasks/update at a time stays input_required, asking for the one left,
// until both are answered; then the task runs its next round with both.
func TestGatewayTaskTakesPartialInput(t *testing.T) {
	h, _, _ := engineHarness(t)
	_, url := startTaskServer(t, false, nil)
	h.server(map[string]any{"server_id": "plain", "url": url, "task_ttl": 120,
		"tools": map[string]any{"multi_input": map[string]any{"task_support": "optional"}}})
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": map[string]any{
		"extensions": map[string]any{tasksExtension: map[string]any{}}, "elicitation": map[string]any{}}}
	a := h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "multi_input", "arguments": map[string]any{}, "_meta": meta}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("a declared call of multi_input: %s, want a CreateTaskResult", a.raw)
	}
	id := a.str(t, "taskId")
	if a = h.pollTask("/mcp/plain", h.key, id); a.str(t, "status") != "input_required" {
		t.Fatalf("the task: %s, want input_required", a.raw)
	}
	update := func(k string, content map[string]any) {
		t.Helper()
		if u := h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id,
			"inputResponses": map[string]any{k: map[string]any{"action": "accept", "content": content}}}, rpcOpts{declare: true}); u.err != nil {
			t.Fatalf("tasks/update %s: %s", k, u.raw)
		}
	}
	update("first", map[string]any{"name": "Ada"})
	a = h.rpc("/mcp/plain", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	if a.str(t, "status") != "input_required" || strings.Contains(string(a.result["inputRequests"]), `"first"`) || !strings.Contains(string(a.result["inputRequests"]), `"second"`) {
		t.Fatalf("after one of two answers: %s, want input_required asking for the second only", a.raw)
	}
	update("second", map[string]any{"confirm": true})
	if a = h.pollTask("/mcp/plain", h.key, id); a.str(t, "status") != "completed" || !strings.Contains(string(a.result["result"]), "got Ada and true") {
		t.Errorf("after both answers: %s, want completed with both", a.raw)
	}
}
