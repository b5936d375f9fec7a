package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// Regression tests from a second adversarial reading of the gateway's
// tasks: cancels that race a worker or a tasks/update, what a cancelled
// task leaves, late marks, and relayed answers.

// hookQueue passes a task queue's calls through, running afterClaim once a
// claim has landed and beforeEnqueue before a join, where set.
type hookQueue struct {
	TaskQueue
	mu            sync.Mutex
	afterClaim    func(ticket string)
	beforeEnqueue func(ticket, taskID string) error
}

func (q *hookQueue) Claim(ctx context.Context, req lease.Request, id string, mark int64) (*lease.Lease, error) {
	ls, err := q.TaskQueue.Claim(ctx, req, id, mark)
	q.mu.Lock()
	f := q.afterClaim
	q.mu.Unlock()
	if err == nil && f != nil {
		f(id)
	}
	return ls, err
}

func (q *hookQueue) Enqueue(ctx context.Context, req lease.Request, ticket, taskID string, deadline time.Time) (string, error) {
	q.mu.Lock()
	f := q.beforeEnqueue
	q.mu.Unlock()
	if f != nil {
		if err := f(ticket, taskID); err != nil {
			return "", err
		}
	}
	return q.TaskQueue.Enqueue(ctx, req, ticket, taskID, deadline)
}

// hookTasks puts a hookQueue between h's task engine and its queue.
func hookTasks(h *harness) *hookQueue {
	e := h.gw.deps.Tasks.(*taskEngine)
	q := &hookQueue{TaskQueue: e.queue}
	e.queue = q
	return q
}

// A tasks/cancel that lands after the worker's claim (its Withdraw finds
// the ticket claimed) but before its mark leaves a record that reads
// cancelled (waitsCancelled). The worker then finds its key's
// max_parallel_requests taken (a synchronous call of the key in flight, a
// common case): the task must end cancelled, as it read, not with the
// AT_CAPACITY tool error. So must every settle a worker makes before its
// mark (its server gone, its policy refused, a claim refused for a fault).
func TestACancelledTaskStaysCancelledWhenItsKeysPlaceIsRefused(t *testing.T) {
	h, _, st := reviewHarness(t)
	key := testkit.PutKeyAs(t, h.env, auth.Key{Servers: []string{"*"}, MaxParallel: 1})
	slow := testkit.StartBatch(t, 10, 4*time.Second)
	h.server(map[string]any{"server_id": "slow", "url": slow.URL, "timeout": 30})
	h.batchTasks(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.rpc("/mcp/slow", key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{})
	}()
	defer func() { <-done }()
	waitArrivals(slow, 1)
	if len(slow.Stats().Arrivals) == 0 {
		t.Fatal("the synchronous call holding the key's place never reached its upstream")
	}
	var (
		id            string
		ack, inWindow rpcAnswer
		once          sync.Once
	)
	q := hookTasks(h)
	q.afterClaim = func(string) {
		once.Do(func() {
			ack = h.rpc("/mcp/batch", key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
			inWindow = h.rpc("/mcp/batch", key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
		})
	}
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	id = h.createTask("batch", key, "work")
	for _, ts := range st.takeHeld() {
		st.wg.Go(func() { _ = h.gw.RunTask(context.Background(), ts) })
	}
	st.wg.Wait()
	if ack.err != nil || inWindow.err != nil {
		t.Fatalf("tasks/cancel %s; tasks/get %s", ack.raw, inWindow.raw)
	}
	then := h.rpc("/mcp/batch", key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	t.Logf("after the cancel: %s\nonce the worker ended: %.400s", inWindow.raw, then.raw)
	if s := inWindow.str(t, "status"); s == "cancelled" && then.err == nil && then.str(t, "status") != s {
		t.Errorf("the task read %q after its tasks/cancel was acknowledged, then %q: a terminal status changed", s, then.str(t, "status"))
	}
}

// A tasks/update that completes a round writes the record working under a
// new ticket, then joins it. A tasks/cancel landing between the two finds
// no ticket to withdraw, so it writes the task cancelled; the update's
// join then lands a ticket for a task that has ended. That ticket must be
// taken out again: while the server is busy it would hold a place of the
// queue (max_queued), and a new task be refused behind a task that no
// longer exists.
func TestACancelRacingAnUpdateLeavesNoTicket(t *testing.T) {
	h, _, _ := reviewHarness(t)
	id, _ := h.inputTask(map[string]any{"max_concurrent_requests": 1, "max_queued": 1})
	// Wait for the first round's place to be given back.
	for deadline := time.Now().Add(30 * time.Second); testkit.LeaseCount(t, h.env, "plain", "leases") != 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	// The server is busy: a synchronous call holds its one place.
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 6}}, rpcOpts{})
	}()
	defer func() { <-done }()
	for deadline := time.Now().Add(30 * time.Second); testkit.LeaseCount(t, h.env, "plain", "leases") == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	var (
		cancel rpcAnswer
		once   sync.Once
	)
	q := hookTasks(h)
	q.beforeEnqueue = func(_, taskID string) error {
		if taskID == id {
			once.Do(func() {
				cancel = h.rpc("/mcp/plain", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
			})
		}
		return nil
	}
	u := h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}}, rpcOpts{declare: true})
	q.mu.Lock()
	q.beforeEnqueue = nil
	q.mu.Unlock()
	p := h.rpc("/mcp/plain", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	tickets := testkit.LeaseCount(t, h.env, "plain", "tasks")
	other := h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "confirm_delete", "arguments": map[string]any{"filename": "b.txt"}}, rpcOpts{declare: true})
	t.Logf("update %s\ncancel %s\ntask %s\ntickets waiting: %d\nanother task: %.300s", u.raw, cancel.raw, p.raw, tickets, other.raw)
	if cancel.err != nil || p.err != nil {
		t.Fatalf("tasks/cancel %s; tasks/get %s", cancel.raw, p.raw)
	}
	if p.str(t, "status") != "cancelled" {
		t.Skipf("the cancel did not end the task (%s): not the race this test makes", p.raw)
	}
	if tickets > 0 {
		t.Errorf("the task reads cancelled, yet %d ticket(s) wait in its server's queue", tickets)
	}
	if other.err == nil && other.result["isError"] != nil && other.result["taskId"] == nil {
		t.Errorf("a new task on the server (max_queued 1) is refused while the only ticket waiting is a cancelled task's: %.300s", other.raw)
	}
}

// A create whose join fails on the store without landing (the lease
// store's write refused: throttled, unavailable), and whose failure's
// write fails too (the same incident), is answered as a task made. Its
// ticket must be in a queue, or nothing ever starts it (the sweep reads the
// lease items) nor ends it, and the agent polls "working" for the task's
// whole TTL (up to a day).
func TestACreateWhoseJoinNeverLandedIsQueuedStill(t *testing.T) {
	tapi := failPut(string(tasks.StatusCompleted)) // refuse writes a tool error as completed
	h, store, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	up := h.batchTasks(nil)
	q := hookTasks(h)
	var once sync.Once
	q.beforeEnqueue = func(string, string) error {
		var err error
		once.Do(func() {
			err = errors.New("operation error DynamoDB: UpdateItem, exceeded maximum number of attempts, 3, ThrottlingException")
		})
		return err
	}
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil || a.result["taskId"] == nil {
		t.Skipf("the create was not answered as a task made (%s): not the path under test", a.raw)
	}
	id := a.str(t, "taskId")
	time.Sleep(lease.StartTimeout + time.Second)
	h.sweep(st, 2)
	p := h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	if r, err := store.Get(t.Context(), id); err == nil {
		t.Logf("record: %s %q ticket %s attempt %d", r.Status, r.StatusMessage, r.LeaseID, r.Attempt)
	}
	tickets := testkit.LeaseCount(t, h.env, "batch", "tasks")
	t.Logf("create %s\npoll %s\ntickets %d, upstream calls %d", a.raw, p.raw, tickets, len(up.Stats().Arrivals))
	if p.err == nil && p.str(t, "status") == "working" && tickets == 0 && len(up.Stats().Arrivals) == 0 {
		t.Errorf("a task answered as made after a join that never landed reads working with no ticket in any queue and no worker: nothing ends it before its TTL (%s)", p.raw)
	}
}

// An upstream's CreateTaskResult whose statusMessage is no string (here a
// number) is passed on with its message left out, as a poll's is; were it
// refused, its upstream task (its taskId valid) must be cancelled, or it
// runs on outside the server's cap, orphaned, and again when the agent
// calls again.
func TestARelayedCreateWithANonStringMessageIsPassedOnOrCancelled(t *testing.T) {
	h, _ := taskHarness(t, nil)
	mode, reqs := relayUp(t, h, func(mode, method, _ string, res map[string]any) {
		if method == "tools/call" && mode == "number" {
			res["statusMessage"] = 42
		}
	})
	mode.Store("number")
	a := h.relayCall()
	mode.Store("")
	if a.err == nil && a.result["taskId"] != nil {
		// Passed on: its message left out, as relayedTask does.
		if _, has := a.result["statusMessage"]; has {
			t.Errorf("a relayed CreateTaskResult with a statusMessage that is no string was passed on with it: %s", a.raw)
		}
		h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": a.str(t, "taskId")}, rpcOpts{declare: true})
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for reqs()["tasks/cancel"] == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := reqs()["tasks/cancel"]; n == 0 {
		t.Errorf("the call was answered %.300s, but the upstream's task it made was never cancelled: it runs on, orphaned", a.raw)
	}
}

// An upstream's JSON-RPC error about a relayed task is clipped to 512
// bytes: its id must be rewritten first, or an id the cut runs through
// shows its head to the agent (docs/tasks.md: the upstream's own task id
// never reaches the agent).
func TestARelayedErrorCutShowsNoPartOfTheUpstreamsID(t *testing.T) {
	h, ts := taskHarness(t, nil)
	var hostile atomic.Bool
	_, url := startTaskServer(t, true, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			up := r.Header.Get("Mcp-Name")
			if !hostile.Load() || r.Header.Get("Mcp-Method") != "tasks/get" || len(up) < 16 {
				next.ServeHTTP(w, r)
				return
			}
			var req struct {
				ID json.RawMessage `json:"id"`
			}
			body := new(bytes.Buffer)
			_, _ = body.ReadFrom(r.Body)
			_ = json.Unmarshal(body.Bytes(), &req)
			msg := strings.Repeat("x", maxUpstreamMessage-len(up)/2) + up + " is not a task here"
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":%q}}`, req.ID, msg)
		})
	})
	h.server(map[string]any{"server_id": "up", "url": url})
	id := h.relayCall().str(t, "taskId")
	rec, err := ts.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	hostile.Store(true)
	a := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	hostile.Store(false)
	head := rec.UpstreamID[:len(rec.UpstreamID)/2]
	t.Logf("upstream id %s; answer %.120s…%s", rec.UpstreamID, a.raw, a.raw[max(0, len(a.raw)-80):])
	if bytes.Contains(a.raw, []byte(head)) {
		t.Errorf("a relayed tasks/get error shows the head of the upstream's own task id (%q of %q)", head, rec.UpstreamID)
	}
	h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
}

// A worker whose mark of the record lands, but is answered only late (a
// slow store), past its call's deadline and past the run_until it wrote,
// gives its place back unused. Meanwhile a poll past that run_until read
// the task failed ("the call may or may not have run"): the worker must not
// take its mark back and queue the task again, or it reads working and then
// completed, and an agent that called again on "failed" has its call run
// twice.
func TestATaskReadFailedIsNotTakenBackAndRunAgain(t *testing.T) {
	var (
		h     *harness
		id    string
		first rpcAnswer
	)
	tapi := &markAPI{}
	tapi.first = func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		out, err := put() // the mark lands; its answer comes late
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			first = h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
			if first.err != nil || first.str(t, "status") != "working" {
				break
			}
		}
		return out, err
	}
	var st *reviewStarts
	h, _, st = reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	up := h.batchTasks(map[string]any{"timeout": 1, "cancel_grace": 0.1})
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	id = h.createTask("batch", h.key, "work")
	for _, ts := range st.takeHeld() {
		st.wg.Go(func() { _ = h.gw.RunTask(context.Background(), ts) })
	}
	st.wg.Wait()
	h.sweep(st, 1)
	then := h.pollTask("/mcp/batch", h.key, id)
	t.Logf("while the mark's answer was late: %s\nafter: %.300s\nupstream calls %d", first.raw, then.raw, len(up.Stats().Arrivals))
	if first.err == nil && then.err == nil && first.str(t, "status") != "working" && then.str(t, "status") != first.str(t, "status") {
		t.Errorf("the task read %q, then %q (upstream calls %d): a terminal status changed", first.str(t, "status"), then.str(t, "status"), len(up.Stats().Arrivals))
	}
}

// cancelPutAPI passes a task store's calls through, but for the first
// PutItem that match holds, lets it land and then ends the request's
// context (its client gone, its deadline reached) and answers with that.
type cancelPutAPI struct {
	tasks.API
	match  func(item map[string]types.AttributeValue) bool
	cancel context.CancelFunc
	mu     sync.Mutex
	done   bool
}

func (a *cancelPutAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := a.API.PutItem(ctx, in, opts...)
	a.mu.Lock()
	first := !a.done && a.cancel != nil && err == nil && a.match(in.Item)
	if first {
		a.done = true
	}
	a.mu.Unlock()
	if !first {
		return out, err
	}
	a.cancel()
	return nil, ctx.Err()
}

// A tasks/update whose request ends (the agent's connection dropped, the
// request's deadline) once its write has landed: the ticket that write
// names must still be joined, or the task reads working under a ticket in
// no queue (the agent's retry finds it working and does nothing), and
// nothing runs or ends it before its TTL.
func TestAnUpdateWhoseRequestEndsAfterItsWriteStillQueuesTheTask(t *testing.T) {
	tapi := &cancelPutAPI{match: func(item map[string]types.AttributeValue) bool {
		m, _ := item["status_message"].(*types.AttributeValueMemberS)
		_, answered := item["input_responses"]
		return answered && m != nil && m.Value == "queued"
	}}
	h, store, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	id, _ := h.inputTask(nil)
	responses := json.RawMessage(`{"confirm":{"action":"accept","content":{"confirm":true}}}`)
	r, err := store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	// The agent's request, as the gateway's handler has it: its caller
	// in its context.
	var who taskCaller
	if err := json.Unmarshal(r.Principal, &who); err != nil {
		t.Fatal(err)
	}
	pr, fe := h.gw.currentPrincipal(t.Context(), who.Principal)
	if fe != nil {
		t.Fatal(fe)
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), callerCtx, &caller{principal: pr}))
	defer cancel()
	tapi.mu.Lock()
	tapi.cancel = cancel
	tapi.mu.Unlock()
	_, uerr := h.gw.deps.Tasks.(*taskEngine).Update(ctx, r, responses, "")
	t.Logf("tasks/update whose context ended after its write landed: %v", uerr)
	// The agent, told its update failed, sends it again.
	u2 := h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}}, rpcOpts{declare: true})
	h.notStranded(t, st, store, id, fmt.Sprintf("a tasks/update whose context ended once its write landed, and the agent's retry (%s)", u2.raw))
}

// notStranded sweeps twice once a lost start would be seen, then fails t
// if task id of server plain reads working with no ticket in its queue:
// nothing would run or end it before its TTL. what says what came before.
func (h *harness) notStranded(t *testing.T, st *reviewStarts, store *tasks.Store, id, what string) {
	t.Helper()
	time.Sleep(lease.StartTimeout + time.Second)
	h.sweep(st, 2)
	p := h.rpc("/mcp/plain", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	if r, err := store.Get(t.Context(), id); err == nil {
		t.Logf("record: %s %q ticket %s attempt %d", r.Status, r.StatusMessage, r.LeaseID, r.Attempt)
	}
	tickets := testkit.LeaseCount(t, h.env, "plain", "tasks")
	t.Logf("poll %s\ntickets %d", p.raw, tickets)
	if p.err == nil && p.str(t, "status") == "working" && tickets == 0 {
		t.Errorf("after %s, the task reads %s with no ticket in the queue: nothing runs or ends it before its TTL", what, p.raw)
	}
}

// A worker whose mark is refused on a record asked to stop (a cancel
// landed between its claim and its mark) makes no call, and must count
// none: no EMF call record (as TestLosingTaskStartCountsNoCall says of any
// start that makes no call). Nor must a worker that gives its place back
// unmarked (settled, taken, late, a mark of unknown outcome): a task
// requeued and then run counts one call.
func TestATaskCancelledBeforeItsMarkCountsNoCall(t *testing.T) {
	var (
		h    *harness
		id   string
		once sync.Once
	)
	tapi := &markAPI{}
	tapi.first = func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		once.Do(func() {
			h.rpc("/mcp/batch", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
		})
		return put()
	}
	starts := make(chan lease.TaskStart, 8)
	out := &syncBuffer{}
	var (
		store   *tasks.Store
		limiter *lease.Limiter
	)
	h = newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		tapi.API = env.Client
		store = &tasks.Store{DB: tapi, Table: env.Tables.Tasks}
		limiter = lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond,
			OnTaskStart: func(_ context.Context, ts lease.TaskStart) { starts <- ts }})
		d.Limiter = limiter
		d.Metrics = metrics.New(out, metrics.Options{})
	})
	h.gw.EnableTasks(store, limiter, func(_ context.Context, ts lease.TaskStart) { starts <- ts })
	up := h.batchTasks(nil)
	id = h.createTask("batch", h.key, "work")
	before := callRecords(t, out, "work")
	if err := h.gw.RunTask(t.Context(), <-starts); err != nil {
		t.Fatal(err)
	}
	p := h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	n := callRecords(t, out, "work") - before
	t.Logf("task %s; upstream calls %d; call records %d", p.raw, len(up.Stats().Arrivals), n)
	if len(up.Stats().Arrivals) == 0 && n != 0 {
		t.Errorf("a task cancelled between its claim and its mark made no call, yet its worker wrote %d call record(s)", n)
	}
}
