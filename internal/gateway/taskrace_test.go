package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/metrics/metricstest"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestCancelOfTaskAskingForInput: a task in input_required has no ticket
// and no worker; tasks/cancel of it must end it as cancelled (docs: the
// task is then cancelled), not leave it asking for input until its TTL
// with a cancellation no worker will ever read.
func TestCancelOfTaskAskingForInput(t *testing.T) {
	h, _, _ := engineHarness(t)
	id, _ := h.inputTask(map[string]any{"max_concurrent_requests": 1})
	if c := h.rpc("/mcp/plain", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true}); c.err != nil {
		t.Fatalf("tasks/cancel: %s", c.raw)
	}
	if a := h.pollTask("/mcp/plain", h.key, id); a.str(t, "status") != "cancelled" {
		t.Errorf("a task cancelled while it asked for input: %s, want cancelled", a.raw)
	}
}

// TestAWorkerStartNamingAnotherTasksTicketWithdrawsNothing: a worker's
// start names its task and its ticket; one whose ticket is another task's
// (a forged event: the limiter's starts name the task each ticket was
// joined for) — for an unknown task, or for a task whose record has
// another ticket — withdraws nothing: the other task's ticket waits on, and
// that task runs when its turn comes. (A late start of a task's earlier
// ticket names its own task, and withdraws that ticket.)
func TestAWorkerStartNamingAnotherTasksTicketWithdrawsNothing(t *testing.T) {
	h, store, _, limiter, _ := engineHarnessOf(t)
	up := testkit.StartBatch(t, 10, 10*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	hold, err := limiter.Acquire(context.Background(), lease.Request{Key: "batch", Cap: 1, MaxQueued: 10, Hold: time.Minute, Holder: "other"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
		if a.err != nil || a.str(t, "resultType") != "task" {
			t.Fatalf("a declared call of work: %s", a.raw)
		}
		ids = append(ids, a.str(t, "taskId"))
	}
	victim, err := store.Get(t.Context(), ids[0])
	if err != nil || victim.LeaseID == "" {
		t.Fatalf("the first task's record: %+v, %v; want it queued with a ticket", victim, err)
	}
	for _, task := range []string{"tsk_AAAAAAAAAAAAAAAAAAAAAAAA", ids[1]} {
		if err := h.gw.RunTask(t.Context(), lease.TaskStart{Key: "batch", Ticket: victim.LeaseID, Task: task}); err != nil {
			t.Fatalf("a start of %s naming the first task's ticket: %v", task, err)
		}
	}
	if _, err := hold.Finish(context.Background(), lease.Unused); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if a := h.pollTask("/mcp/batch", h.key, id); a.str(t, "status") != "completed" {
			t.Errorf("task %s after starts naming the first task's ticket for other tasks: %s; want completed", id, a.raw)
		}
	}
}

// TestCancelOnAStaleQueuedReadOfARunTask: tasks/cancel reads the record
// (queued), and before its withdrawal the worker — another instance's —
// claims the place, writes "running", runs the call and gives the place
// back: the withdrawal finds no ticket. The task ran: the cancellation
// must not write "cancelled before it ran" over it (which would also
// throw away the outcome its worker is about to write); it asks the
// worker to stop, as for a running task.
func TestCancelOnAStaleQueuedReadOfARunTask(t *testing.T) {
	h, store, _, limiter, _ := engineHarnessOf(t)
	h.batchTasks(nil)
	// Another holder has the one place: the task waits.
	hold, err := limiter.Acquire(context.Background(), lease.Request{Key: "batch", Cap: 1, MaxQueued: 10, Hold: time.Minute, Holder: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = hold.Finish(context.Background(), lease.Unused) }()
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("a declared call of work: %s", a.raw)
	}
	id := a.str(t, "taskId")
	stale, err := store.Get(t.Context(), id)
	if err != nil || stale.StatusMessage != "queued" {
		t.Fatalf("the task's record: %+v, %v; want queued", stale, err)
	}
	// Elsewhere: claimed, running, its place given back, its outcome not
	// yet written.
	if err := limiter.Withdraw(t.Context(), "batch", stale.LeaseID, stale.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(t.Context(), stale, func(n *tasks.Record) error { n.StatusMessage, n.Attempt = "running", 1; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := h.gw.deps.Tasks.Cancel(t.Context(), stale); err != nil {
		t.Fatal(err)
	}
	n, err := store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if n.Status != tasks.StatusWorking || !n.CancelRequested {
		t.Errorf("after a cancel on a stale queued read of a task that ran: %s %q (cancel requested %v); want working, its worker asked to stop",
			n.Status, n.StatusMessage, n.CancelRequested)
	}
}

// TestRelayedPollIntervalIsBounded: the pollIntervalMs of a relayed task
// is the upstream's to choose, but what reaches the agent is a whole
// number of milliseconds from minTaskPoll to the handle's ttlMs: an
// upstream answering 0, a negative, a fraction, a string or an absurdly
// large number neither breaks the agent's reading of the task nor makes
// it poll the gateway (each relayed poll a request upstream) without
// pause.
func TestRelayedPollIntervalIsBounded(t *testing.T) {
	h, _ := taskHarnessWith(t, Options{}, nil)
	var poll atomic.Value
	poll.Store(json.RawMessage(`0`))
	_, url := startTaskServer(t, true, rewriteAnswers(func(method string, res map[string]any) {
		if method == "tools/call" || method == "tasks/get" {
			res["pollIntervalMs"] = poll.Load()
		}
	}))
	h.server(map[string]any{"server_id": "up", "url": url, "task_ttl": 60})
	check := func(what string, a rpcAnswer) {
		t.Helper()
		if a.err != nil {
			t.Fatalf("%s: %s", what, a.raw)
		}
		var ms, ttl int64
		if err := json.Unmarshal(a.result["pollIntervalMs"], &ms); err != nil || ms < minTaskPoll.Milliseconds() {
			t.Errorf("%s: pollIntervalMs %s, want a whole number of at least %d", what, a.result["pollIntervalMs"], minTaskPoll.Milliseconds())
		}
		if err := json.Unmarshal(a.result["ttlMs"], &ttl); err != nil || ms > ttl {
			t.Errorf("%s: pollIntervalMs %s, ttlMs %s: want an interval within the task's TTL", what, a.result["pollIntervalMs"], a.result["ttlMs"])
		}
	}
	for _, v := range []string{`0`, `-5`, `2.5`, `"soon"`, `1.5e15`} {
		poll.Store(json.RawMessage(v))
		what := fmt.Sprintf("upstream pollIntervalMs %v", v)
		a := h.rpc("/mcp/up", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 30}}, rpcOpts{declare: true})
		check(what+" (tools/call)", a)
		id := a.str(t, "taskId")
		check(what+" (tasks/get)", h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true}))
		h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
	}
}

// TestDuplicateStartOfACancelledRunningTask: a task's worker has claimed
// its place and runs its call when tasks/cancel asks it to stop; a second
// start of the same ticket (a start seen lost and made again) then reads
// the cancellation. The call is running: that start must not write
// "cancelled before it ran" (the call did reach the upstream, and the
// running worker's own ending is then dropped); it leaves the running
// worker to cut the call off.
func TestDuplicateStartOfACancelledRunningTask(t *testing.T) {
	starts := make(chan lease.TaskStart, 8)
	var store *tasks.Store
	var limiter *lease.Limiter
	h := newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		store = &tasks.Store{DB: env.Client, Table: env.Tables.Tasks}
		limiter = lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond,
			OnTaskStart: func(_ context.Context, ts lease.TaskStart) { starts <- ts }})
		d.Limiter = limiter
	})
	h.gw.EnableTasks(store, limiter, func(_ context.Context, ts lease.TaskStart) { starts <- ts })
	h.batchTasks(nil)
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("a declared call of work: %s", a.raw)
	}
	id := a.str(t, "taskId")
	ts := <-starts
	// The first worker (another instance's) claims the place: the call runs.
	rec, err := store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var who taskCaller
	if err := json.Unmarshal(rec.Principal, &who); err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(t.Context(), callerCtx, &caller{principal: who.Principal})
	srv, ferr := h.gw.server(ctx, "batch")
	if ferr != nil {
		t.Fatal(ferr)
	}
	ls, err := limiter.Claim(ctx, h.gw.taskRequest(ctx, srv, "work", srv.TimeoutFor("work")), ts.Ticket, ts.Mark)
	if err != nil {
		t.Fatalf("the first worker's claim: %v", err)
	}
	defer func() { _, _ = ls.Finish(context.Background(), lease.Unused) }()
	if c := h.rpc("/mcp/batch", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true}); c.err != nil {
		t.Fatalf("tasks/cancel: %s", c.raw)
	}
	// The start made again.
	if err := h.gw.RunTask(t.Context(), ts); err != nil {
		t.Fatal(err)
	}
	r, err := store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != tasks.StatusWorking || !r.CancelRequested {
		t.Errorf("after a second start of a running task asked to stop: %s %q; want working, its running worker asked to stop", r.Status, r.StatusMessage)
	}
}

// TestTaskWithLargeForwardedHeaders: a forwarded header value as long as
// a synchronous call forwards (maxForwardValue), on two headers, is kept
// with the task, which runs with them; it is never answered as a
// retryable STORE_UNAVAILABLE, which an agent would retry for ever.
func TestTaskWithLargeForwardedHeaders(t *testing.T) {
	h, _, _ := engineHarness(t)
	var (
		mu   sync.Mutex
		seen []int
	)
	demo, _ := testkit.StartGuardedDemo(t, func(r *http.Request, body []byte) bool {
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			mu.Lock()
			seen = append(seen, len(r.Header.Get("X-Tenant-A"))+len(r.Header.Get("X-Tenant-B")))
			mu.Unlock()
		}
		return true
	})
	h.server(map[string]any{"server_id": "fwd", "url": demo.URL, "task_ttl": 120,
		"forward_headers": []string{"X-Tenant-A", "X-Tenant-B"},
		"tools":           map[string]any{"fail_tool": map[string]any{"task_support": "optional"}}})
	v := strings.Repeat("t", maxForwardValue-100)
	hdr := http.Header{"X-Tenant-A": {v}, "X-Tenant-B": {v}}
	args := map[string]any{"name": "fail_tool", "arguments": map[string]any{}}
	a := h.rpc("/mcp/fwd", h.key, "tools/call", args, rpcOpts{declare: true, header: hdr})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("a declared call with forwarded headers of %d bytes: %s, want a task", 2*len(v), a.raw)
	}
	if a = h.pollTask("/mcp/fwd", h.key, a.str(t, "taskId")); a.str(t, "status") != "completed" {
		t.Fatalf("the task: %s, want completed", a.raw)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != 2*len(v) {
		t.Errorf("the task's call reached the upstream with forwarded headers of %v bytes; want %d", seen, 2*len(v))
	}
}

// TestTaskTooLargeToKeepIsRefusedForGood: a call whose forwarded headers
// are more than a task keeps is refused as a call too large to run as a
// task — as one whose arguments are — never as a retryable
// STORE_UNAVAILABLE.
func TestTaskTooLargeToKeepIsRefusedForGood(t *testing.T) {
	h, _, _ := engineHarness(t)
	demo, _ := testkit.StartGuardedDemo(t, func(*http.Request, []byte) bool { return true })
	names := []string{"X-A", "X-B", "X-C", "X-D", "X-E", "X-F"}
	h.server(map[string]any{"server_id": "fwd", "url": demo.URL, "task_ttl": 120, "forward_headers": names,
		"tools": map[string]any{"fail_tool": map[string]any{"task_support": "optional"}}})
	hdr := http.Header{}
	for _, n := range names {
		hdr.Set(n, strings.Repeat("t", maxForwardValue-100))
	}
	a := h.rpc("/mcp/fwd", h.key, "tools/call", map[string]any{"name": "fail_tool", "arguments": map[string]any{}}, rpcOpts{declare: true, header: hdr})
	if bytes.Contains(a.raw, []byte("STORE_UNAVAILABLE")) || bytes.Contains(a.raw, []byte(`"retryable":true`)) || a.result != nil && string(a.result["resultType"]) == `"task"` ||
		!bytes.Contains(a.raw, []byte("too large to run as a task")) {
		t.Errorf("a declared call with %d bytes of forwarded headers: %s; want a refusal that is not retryable", len(names)*(maxForwardValue-100), a.raw)
	}
}

// TestTaskUpdateTooLargeIsInvalidParams: input responses larger than a
// task keeps are the agent's mistake, answered as invalid params saying
// so — not as an internal error of the gateway — and the task still asks
// for its input.
func TestTaskUpdateTooLargeIsInvalidParams(t *testing.T) {
	h, _, _, _, _ := engineHarnessWith(t, Options{MaxBodyBytes: 1 << 20})
	id, _ := h.inputTask(nil)
	u := h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{
		"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true, "note": strings.Repeat("n", tasks.MaxInputResponsesBytes)}}}}, rpcOpts{declare: true})
	if u.code() != -32602 {
		t.Errorf("tasks/update with responses over %d bytes: %s, want -32602", tasks.MaxInputResponsesBytes, u.raw)
	}
	if a := h.rpc("/mcp/plain", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true}); a.str(t, "status") != "input_required" {
		t.Errorf("after a refused update: %s, want input_required", a.raw)
	}
}

// TestLosingTaskStartCountsNoCall: a start of a task that finds its place
// claimed by another start (a start made again, seen lost) makes no call:
// it must write no call record, where it wrote one with outcome "ok" — a
// call that never happened, counted as a success in the server's
// metrics.
func TestLosingTaskStartCountsNoCall(t *testing.T) {
	starts := make(chan lease.TaskStart, 8)
	var store *tasks.Store
	var limiter *lease.Limiter
	out := &syncBuffer{}
	h := newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		store = &tasks.Store{DB: env.Client, Table: env.Tables.Tasks}
		limiter = lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond,
			OnTaskStart: func(_ context.Context, ts lease.TaskStart) { starts <- ts }})
		d.Limiter = limiter
		d.Metrics = metrics.New(out, metrics.Options{})
	})
	h.gw.EnableTasks(store, limiter, func(_ context.Context, ts lease.TaskStart) { starts <- ts })
	h.batchTasks(nil)
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("a declared call of work: %s", a.raw)
	}
	ts := <-starts
	rec, err := store.Get(t.Context(), a.str(t, "taskId"))
	if err != nil {
		t.Fatal(err)
	}
	var who taskCaller
	if err := json.Unmarshal(rec.Principal, &who); err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(t.Context(), callerCtx, &caller{principal: who.Principal})
	srv, ferr := h.gw.server(ctx, "batch")
	if ferr != nil {
		t.Fatal(ferr)
	}
	// Another start has claimed the place.
	ls, err := limiter.Claim(ctx, h.gw.taskRequest(ctx, srv, "work", srv.TimeoutFor("work")), ts.Ticket, ts.Mark)
	if err != nil {
		t.Fatalf("the other start's claim: %v", err)
	}
	defer func() { _, _ = ls.Finish(context.Background(), lease.Unused) }()
	before := callRecords(t, out, "work")
	if err := h.gw.RunTask(t.Context(), ts); err != nil {
		t.Fatal(err)
	}
	if n := callRecords(t, out, "work") - before; n != 0 {
		t.Errorf("a start that found its place claimed wrote %d call records; want none (it made no call)", n)
	}
}

// callRecords counts the EMF call records of tool in out.
func callRecords(t *testing.T, out *syncBuffer, tool string) int {
	t.Helper()
	n := 0
	for line := range bytes.SplitSeq(bytes.TrimSpace([]byte(out.String())), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		rec, err := metricstest.Parse(line)
		if err != nil {
			t.Fatalf("invalid EMF line %s: %v", line, err)
		}
		if name, _ := rec.String("Tool"); name != tool {
			continue
		}
		if _, _, ok := rec.Metric(metrics.MetricLatency); ok {
			n++
		}
	}
	return n
}

// TestTaskRefusedTheKeysPlaceEndsAsASynchronousCallWould: a task whose
// worker finds its key's max_parallel_requests taken (a synchronous call
// of the key in flight) ends with the AT_CAPACITY tool error a
// synchronous call gets (completed, isError), as docs/tasks.md says of
// faults a synchronous call answers as tool errors.
func TestTaskRefusedTheKeysPlaceEndsAsASynchronousCallWould(t *testing.T) {
	h, _, _ := engineHarness(t)
	key := testkit.PutKeyAs(t, h.env, auth.Key{Servers: []string{"*"}, MaxParallel: 1})
	slow := testkit.StartBatch(t, 10, 3*time.Second)
	fast := testkit.StartBatch(t, 10, 10*time.Millisecond)
	h.server(map[string]any{"server_id": "slow", "url": slow.URL, "timeout": 30})
	h.server(map[string]any{"server_id": "fast", "url": fast.URL, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.rpc("/mcp/slow", key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{})
	}()
	defer func() { <-done }()
	for deadline := time.Now().Add(20 * time.Second); len(slow.Stats().Arrivals) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	a := h.rpc("/mcp/fast", key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("a declared call of work: %s", a.raw)
	}
	a = h.pollTask("/mcp/fast", key, a.str(t, "taskId"))
	if a.str(t, "status") != "completed" || !bytes.Contains(a.result["result"], []byte("AT_CAPACITY")) || !bytes.Contains(a.result["result"], []byte(`"isError":true`)) {
		t.Errorf("a task refused its key's place: %s, want completed with the AT_CAPACITY tool error", a.raw)
	}
}

// TestTaskWorkerEndsOnceOutcomeAndReleaseAreDone: a worker gives its
// answered call's place back while it writes the task's outcome; when it
// returns, both have been done — the record says completed, and the lease
// item holds neither its lease nor its ticket — so that a worker's end
// (under Lambda, its invocation's) never cuts off either.
func TestTaskWorkerEndsOnceOutcomeAndReleaseAreDone(t *testing.T) {
	starts := make(chan lease.TaskStart, 8)
	var store *tasks.Store
	var limiter *lease.Limiter
	var env *storetest.Env
	h := newHarnessDeps(t, Options{}, func(d *Deps, e *storetest.Env) {
		env = e
		store = &tasks.Store{DB: e.Client, Table: e.Tables.Tasks}
		limiter = lease.New(e.Client, e.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond,
			OnTaskStart: func(_ context.Context, ts lease.TaskStart) { starts <- ts }})
		d.Limiter = limiter
	})
	h.gw.EnableTasks(store, limiter, func(_ context.Context, ts lease.TaskStart) { starts <- ts })
	up := h.batchTasks(nil)
	for round := range 3 {
		a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
		if a.err != nil || a.str(t, "resultType") != "task" {
			t.Fatalf("a declared call of work: %s", a.raw)
		}
		id := a.str(t, "taskId")
		if err := h.gw.RunTask(t.Context(), <-starts); err != nil {
			t.Fatal(err)
		}
		if r, err := store.Get(t.Context(), id); err != nil || r.Status != tasks.StatusCompleted {
			t.Fatalf("round %d: the record once its worker returned: %+v, %v; want completed", round, r, err)
		}
		out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &env.Tables.Leases, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"limiter_key": &types.AttributeValueMemberS{Value: "batch"}}})
		if err != nil {
			t.Fatal(err)
		}
		if st := lease.Describe(out.Item, time.Now(), 1, 0, nil); len(st.Queue) != 0 || len(st.Leases) != 0 {
			t.Fatalf("round %d: the lease item once its worker returned: %+v; want neither lease nor ticket", round, st)
		}
	}
	if n := len(up.Stats().Arrivals); n != 3 {
		t.Errorf("the upstream was called %d times for 3 tasks", n)
	}
}
