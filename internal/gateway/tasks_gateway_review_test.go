package gateway

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// Regression tests from an adversarial reading of the gateway's side of
// MCP tasks: cancels, lost writes, late outcomes, the sweep, and relayed
// tasks' answers.

// A tasks/cancel that arrives once the worker has claimed the task's place
// but before it marked the record running finds the ticket claimed and
// marks the record cancel_requested: the worker's mark is refused on it,
// and no call reaches the upstream after the acknowledgement (the watch,
// which looks every 2 s, would let a short call run to its end).
func TestACancelBetweenAClaimAndItsMarkMakesNoCall(t *testing.T) {
	var (
		h    *harness
		id   string
		ack  rpcAnswer
		once sync.Once
	)
	tapi := &markAPI{}
	tapi.first = func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		// The worker has claimed its place and is about to mark its
		// record: the agent cancels now.
		once.Do(func() {
			ack = h.rpc("/mcp/batch", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
		})
		return put()
	}
	var st *reviewStarts
	h, _, st = reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	up := h.batchTasks(nil)
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	id = h.createTask("batch", h.key, "work")
	for _, ts := range st.takeHeld() {
		st.wg.Go(func() {
			if err := h.gw.RunTask(context.Background(), ts); err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	st.wg.Wait()
	if ack.err != nil || ack.result["resultType"] == nil {
		t.Fatalf("tasks/cancel: %s, want an ack", ack.raw)
	}
	p := h.pollTask("/mcp/batch", h.key, id)
	calls := len(up.Stats().Arrivals)
	t.Logf("cancel acked before the mark; upstream calls %d; task %s", calls, p.raw)
	if calls > 0 {
		t.Errorf("the task's call reached the upstream %d time(s) after its tasks/cancel was acknowledged (the worker had claimed but not yet marked it); its record: %s", calls, p.raw)
	}
}

// failPut is a firstPutAPI whose first PutItem of an item with status
// fails, without landing.
func failPut(status string) *firstPutAPI {
	return &firstPutAPI{status: status, first: func(func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		return nil, errors.New("tasks store: service unavailable")
	}}
}

// A cancel of a waiting task whose last write (the record cancelled) fails
// on the store, its ticket withdrawn: the task has no ticket and no worker,
// and must not read working until its TTL. It reads cancelled, from the
// mark its cancel made first.
func TestACancelWhoseLastWriteFailsStillEndsTheTask(t *testing.T) {
	tapi := failPut(string(tasks.StatusCancelled))
	h, _, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	up := h.batchTasks(nil)
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	id := h.createTask("batch", h.key, "work")
	a := h.rpc("/mcp/batch", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
	t.Logf("tasks/cancel whose record write failed: %s", a.raw)
	// Whatever was started runs now; then the sweep, twice.
	for _, ts := range st.takeHeld() {
		st.wg.Go(func() { _ = h.gw.RunTask(context.Background(), ts) })
	}
	h.sweep(st, 2)
	p := h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	calls := len(up.Stats().Arrivals)
	if p.err == nil && p.str(t, "status") == "working" && calls == 0 {
		t.Errorf("after a tasks/cancel whose record write failed (%s), the task says %s while no worker can run it (no ticket left; upstream calls %d): it stays working until its TTL", a.raw, p.raw, calls)
	}
}

// relayUp registers server "up" over a task-capable upstream whose answers
// change makes hostile by the mode a test stores, and returns the mode and
// the upstream's stats.
func relayUp(t *testing.T, h *harness, change func(mode, method, id string, res map[string]any)) (*atomic.Value, func() map[string]int) {
	t.Helper()
	var mode atomic.Value
	mode.Store("")
	up, url := startTaskServer(t, true, rewriteAnswers(func(method string, res map[string]any) {
		id, _ := res["taskId"].(string)
		change(mode.Load().(string), method, id, res)
	}))
	h.server(map[string]any{"server_id": "up", "url": url})
	return &mode, func() map[string]int { return up.Stats().Requests }
}

func (h *harness) relayCall() rpcAnswer {
	return h.rpc("/mcp/up", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 30}}, rpcOpts{declare: true})
}

// An upstream's CreateTaskResult that the gateway cannot use (here an
// unknown status) is answered with a tool error, and the upstream's task
// is cancelled: no agent holds a handle to it, and left to run it would run
// outside the server's cap, and again when the agent calls again.
func TestAnUnusableRelayedTaskIsCancelledUpstream(t *testing.T) {
	h, _ := taskHarness(t, nil)
	mode, reqs := relayUp(t, h, func(mode, method, _ string, res map[string]any) {
		if method == "tools/call" && mode == "bad" {
			res["status"] = "exploded"
		}
	})
	mode.Store("bad")
	a := h.relayCall()
	if a.err == nil && a.result["taskId"] != nil {
		t.Fatalf("a CreateTaskResult with an unknown status was passed on: %s", a.raw)
	}
	mode.Store("")
	deadline := time.Now().Add(5 * time.Second)
	for reqs()["tasks/cancel"] == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := reqs()["tasks/cancel"]; n == 0 {
		t.Errorf("the call was answered %s, but the upstream's task it made was never cancelled (tasks/cancel sent %d times): it runs on, orphaned", a.raw, n)
	}
}

// The upstream's task id is rewritten in object keys as in values: an
// answer that keys anything by its id (input requests, structured content)
// must not show it to the agent (docs/tasks.md).
func TestTheUpstreamsTaskIDIsRewrittenInKeys(t *testing.T) {
	h, ts := taskHarness(t, nil)
	mode, _ := relayUp(t, h, func(mode, method, id string, res map[string]any) {
		if method == "tasks/get" && mode == "keys" {
			res["status"] = "input_required"
			res["inputRequests"] = map[string]any{id: map[string]any{"method": "elicitation/create", "params": map[string]any{"message": "ok?"}}}
		}
	})
	id := h.relayCall().str(t, "taskId")
	rec, err := ts.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	mode.Store("keys")
	a := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	mode.Store("")
	if bytes.Contains(a.raw, []byte(rec.UpstreamID)) {
		t.Errorf("tasks/get shows the upstream's own task id %q (as an object key): %s", rec.UpstreamID, a.raw)
	}
	h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
}

// docs/tasks.md: no requestState is ever shown, a relayed task's
// included.
func TestARelayedPollShowsNoRequestState(t *testing.T) {
	h, _ := taskHarness(t, nil)
	mode, _ := relayUp(t, h, func(mode, method, _ string, res map[string]any) {
		if method == "tasks/get" && mode == "state" {
			res["status"] = "input_required"
			res["inputRequests"] = map[string]any{"confirm": map[string]any{"method": "elicitation/create", "params": map[string]any{"message": "ok?"}}}
			res["requestState"] = "upstream-private-state"
		}
	})
	id := h.relayCall().str(t, "taskId")
	mode.Store("state")
	a := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	mode.Store("")
	if _, shown := a.result["requestState"]; shown {
		t.Errorf("a relayed tasks/get shows the upstream's requestState: %s", a.raw)
	}
	h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
}

// A relayed statusMessage is a string cut to 1 KiB, and createdAt and
// lastUpdatedAt strings of a timestamp's length: of another type (here a
// 200 KiB object, a 100 KiB array) they are left out, not passed on up to
// the 16 MiB bound on the whole answer.
func TestARelayedMessageOrTimeOfAnotherTypeIsLeftOut(t *testing.T) {
	h, _ := taskHarness(t, nil)
	mode, _ := relayUp(t, h, func(mode, method, _ string, res map[string]any) {
		if method == "tasks/get" && mode == "object" {
			res["statusMessage"] = map[string]any{"text": strings.Repeat("z", 200<<10)}
			res["createdAt"] = []any{strings.Repeat("c", 100<<10)}
		}
	})
	id := h.relayCall().str(t, "taskId")
	mode.Store("object")
	a := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	mode.Store("")
	if m := a.result["statusMessage"]; len(m) > tasks.MaxStatusMessageBytes+16 || (len(m) > 0 && m[0] != '"') {
		t.Errorf("a relayed statusMessage of %d bytes, not a string (%.40s…), went out; want a string of at most %d bytes", len(m), m, tasks.MaxStatusMessageBytes)
	}
	if c := a.result["createdAt"]; len(c) > 0 && c[0] != '"' {
		t.Errorf("a relayed createdAt that is no timestamp (%d bytes, %.20s…) went out", len(c), c)
	}
	h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
}

// docs/tasks.md (errors): inputResponses more than a task keeps (32 KiB)
// are -32602, for a relayed task too: nothing is sent to the upstream.
func TestARelayedUpdatesInputResponsesAreBounded(t *testing.T) {
	h, _ := taskHarnessWith(t, Options{MaxBodyBytes: 1 << 20}, nil)
	_, reqs := relayUp(t, h, func(string, string, string, map[string]any) {})
	id := h.relayCall().str(t, "taskId")
	before := reqs()["tasks/update"]
	big := map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"note": strings.Repeat("n", 200<<10)}}}
	a := h.rpc("/mcp/up", h.key, "tasks/update", map[string]any{"taskId": id, "inputResponses": big}, rpcOpts{declare: true})
	if after := reqs()["tasks/update"]; a.code() != -32602 || after != before {
		t.Errorf("tasks/update of a relayed task with 200 KiB of inputResponses: %.200s (upstream got %d tasks/update); want -32602, nothing sent", a.raw, after-before)
	}
	h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
}

// A create whose join's outcome is unknown (the lease store's answer lost;
// the ticket landed) and whose failure's write fails too (the same store
// incident) leaves a ticket in the queue whose call runs when its turn
// comes (here the sweep's start): the agent must be told of the task, not
// told its call failed, which would have it call again and run it twice.
func TestACreateWhoseJoinAndFailureAreLostIsAnsweredAsMade(t *testing.T) {
	join := &lostJoinAPI{meanwhile: func() {}}
	tapi := failPut(string(tasks.StatusCompleted)) // refuse writes a tool error as completed
	h, store, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi },
		func(c lease.API) lease.API { join.API = c; return join })
	up := h.batchTasks(nil)
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	made := a.err == nil && a.result["taskId"] != nil
	h.sweep(st, 2)
	calls := len(up.Stats().Arrivals)
	t.Logf("create: %s; upstream calls %d; starts %+v", a.raw, calls, st.starts())
	for _, s := range st.starts() {
		r, err := store.Get(t.Context(), s.Task)
		if err == nil {
			t.Logf("record: %s %q lease %s attempt %d", r.Status, r.StatusMessage, r.LeaseID, r.Attempt)
		}
	}
	if !made && calls > 0 {
		t.Errorf("the agent was told its call failed (%s), yet the upstream ran it %d time(s)", a.raw, calls)
	}
}

// landFailAPI passes a task store's calls through, but the first PutItem
// that match holds lands and then answers with an error (its answer lost:
// the outcome unknown to the writer).
type landFailAPI struct {
	tasks.API
	match  func(item map[string]types.AttributeValue) bool
	mu     sync.Mutex
	failed bool
}

func (a *landFailAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := a.API.PutItem(ctx, in, opts...)
	if err != nil || !a.match(in.Item) {
		return out, err
	}
	a.mu.Lock()
	first := !a.failed
	a.failed = true
	a.mu.Unlock()
	if first {
		return nil, errors.New("read tcp: connection reset by peer")
	}
	return out, err
}

// tasks/update writes the record back in the queue (working, "queued",
// under a new ticket) and then joins that ticket. When the write lands but
// its answer is lost, the update must still join the ticket the record
// names: otherwise the task reads working under a ticket in no queue, and
// nothing ever runs it (the agent's retry finds it working, asking for
// nothing).
func TestAnUpdateWhoseWriteLandedUnseenJoinsItsTicket(t *testing.T) {
	tapi := &landFailAPI{match: func(item map[string]types.AttributeValue) bool {
		m, _ := item["status_message"].(*types.AttributeValueMemberS)
		_, answered := item["input_responses"]
		return answered && m != nil && m.Value == "queued"
	}}
	h, store, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	id, _ := h.inputTask(nil)
	answer := map[string]any{"taskId": id, "inputResponses": map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}}
	u := h.rpc("/mcp/plain", h.key, "tasks/update", answer, rpcOpts{declare: true})
	t.Logf("tasks/update whose write's answer was lost: %s", u.raw)
	h.sweep(st, 1)
	// The agent retries its answer, then waits.
	u2 := h.rpc("/mcp/plain", h.key, "tasks/update", answer, rpcOpts{declare: true})
	h.sweep(st, 2)
	time.Sleep(time.Second)
	h.sweep(st, 1)
	p := h.rpc("/mcp/plain", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	r, _ := store.Get(t.Context(), id)
	if r != nil {
		t.Logf("record: %s %q lease %s attempt %d", r.Status, r.StatusMessage, r.LeaseID, r.Attempt)
	}
	if p.err == nil && p.str(t, "status") == "working" {
		t.Errorf("after a tasks/update whose write landed unseen (%s) and its retry (%s), the task says %s, and nothing will run it", u.raw, u2.raw, p.raw)
	}
}

// A server whose item stopped running a tool as a task (an operator set
// it forbidden) while tasks of it wait: the sweep still starts a task
// whose start was lost, which would otherwise read working ("queued")
// until its TTL.
func TestTasksOfAServerNoLongerRunningTasksAreSwept(t *testing.T) {
	h, _, st := reviewHarness(t)
	up := h.batchTasks(nil)
	st.mu.Lock()
	st.drop = 1
	st.mu.Unlock()
	id := h.createTask("batch", h.key, "work")
	// The operator turns the tool's tasks off; the task was made already.
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "forbidden"}}})
	time.Sleep(lease.StartTimeout + time.Second)
	h.sweep(st, 1)
	a := h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	if a.err == nil && a.str(t, "status") == "working" {
		t.Errorf("a task made before its tool's tasks were turned off, its start lost, after the sweep: %s (%d starts); it stays working until its TTL", a.raw, len(st.starts()))
	}
}

// firstPutAPI passes a task store's calls through, but hands the first
// PutItem whose item's status is status to first, with put, which sends
// it.
type firstPutAPI struct {
	tasks.API
	status string
	first  func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error)
	mu     sync.Mutex
	seen   bool
}

func (a *firstPutAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	put := func() (*dynamodb.PutItemOutput, error) { return a.API.PutItem(ctx, in, opts...) }
	if s, ok := in.Item["status"].(*types.AttributeValueMemberS); ok && s.Value == a.status {
		a.mu.Lock()
		first := !a.seen
		a.seen = true
		a.mu.Unlock()
		if first {
			return a.first(put)
		}
	}
	return put()
}

// A running task whose outcome's write comes only past its run_until (a
// store slow or throttled) reads failed (its worker presumed stopped) by
// then: the outcome must not turn it completed after, or an agent that
// stopped at "failed … may or may not have run" and called again runs the
// call twice.
func TestATaskReadFailedNeverReadsCompleted(t *testing.T) {
	var (
		h     *harness
		id    string
		first rpcAnswer
	)
	tapi := &firstPutAPI{status: string(tasks.StatusCompleted)}
	tapi.first = func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			first = h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
			if first.err != nil || first.str(t, "status") != "working" {
				break
			}
		}
		return put()
	}
	var st *reviewStarts
	h, _, st = reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	h.batchTasks(map[string]any{"timeout": 1, "cancel_grace": 0.1})
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	id = h.createTask("batch", h.key, "work")
	for _, ts := range st.takeHeld() {
		st.wg.Go(func() { _ = h.gw.RunTask(context.Background(), ts) })
	}
	st.wg.Wait()
	then := h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	t.Logf("before the outcome's write: %s\nafter: %s", first.raw, then.raw)
	if first.err == nil && then.err == nil && first.str(t, "status") != then.str(t, "status") && first.str(t, "status") != "working" {
		t.Errorf("the task read %q, then %q: a terminal status changed", first.str(t, "status"), then.str(t, "status"))
	}
}

// A gateway task's result over MAX_TASK_RESULT_BYTES fails the task,
// saying so; it is never cut.
func TestAnOversizedTaskResultFailsTheTask(t *testing.T) {
	h, store, _, _, _ := engineHarnessWith(t, Options{MaxBodyBytes: 1 << 20})
	store.MaxResultBytes = 2048
	_, url := startTaskServer(t, false, nil)
	h.server(map[string]any{"server_id": "plain", "url": url, "task_ttl": 120,
		"tools": map[string]any{"slow_compute": map[string]any{"task_support": "optional"}}})
	label := strings.Repeat("L", 4000)
	a := h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 0, "label": label}}, rpcOpts{declare: true})
	if a.err != nil || a.result["taskId"] == nil {
		t.Fatalf("create: %s", a.raw)
	}
	p := h.pollTask("/mcp/plain", h.key, a.str(t, "taskId"))
	if p.err != nil || p.str(t, "status") != "failed" || !strings.Contains(p.str(t, "statusMessage"), "MAX_TASK_RESULT_BYTES") || p.result["result"] != nil {
		t.Errorf("a result of over 4000 bytes under a bound of 2048: %.600s; want failed, saying so", p.raw)
	}
}

// Polls of a relayed task faster than the interval its upstream told are
// answered from the last poll's answer: an agent polling in a loop sends
// the upstream one tasks/get per interval, not one per poll (polls take no
// place under the cap, so nothing else bounds them). A tasks/cancel sent
// on forgets it: the next poll asks the upstream.
func TestFastPollsOfARelayedTaskReachTheUpstreamOncePerInterval(t *testing.T) {
	h, _ := taskHarness(t, nil)
	_, reqs := relayUp(t, h, func(_, method, _ string, res map[string]any) {
		if method == "tasks/get" {
			res["pollIntervalMs"] = 60000
		}
	})
	id := h.relayCall().str(t, "taskId")
	var first rpcAnswer
	for i := range 5 {
		a := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
		if a.err != nil || a.str(t, "taskId") != id {
			t.Fatalf("poll %d: %s", i, a.raw)
		}
		if i == 0 {
			first = a
		} else if a.str(t, "status") != first.str(t, "status") || a.result["pollIntervalMs"] == nil {
			t.Errorf("poll %d answered %s; the first %s", i, a.raw, first.raw)
		}
	}
	if n := reqs()["tasks/get"]; n != 1 {
		t.Errorf("5 polls within the 60 s interval the upstream told sent it %d tasks/get; want 1", n)
	}
	// Another principal's poll of the handle is refused, cache or not.
	if a := h.rpc("/mcp/up", testkit.PutKey(t, h.env, "*"), "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true}); a.code() != -32602 {
		t.Errorf("another principal's poll: %s; want -32602", a.raw)
	}
	h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
	h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	if n := reqs()["tasks/get"]; n != 2 {
		t.Errorf("a poll after tasks/cancel: the upstream got %d tasks/get in all; want 2 (the cancel forgets the answer)", n)
	}
}
