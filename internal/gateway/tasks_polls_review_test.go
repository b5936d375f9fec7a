package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/lease"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/tasks"
)

// Regression tests from a third adversarial reading of the gateway's side
// of MCP tasks: the poll cache, late writes, joins lost twice.

// Two polls of a relayed task in flight at once: the first sent while the
// upstream's task still worked, its answer slow; the second sent after it
// completed, answered at once, and kept. The first's answer, arriving
// last, must not replace the second's in the cache, or the next poll within
// the interval reads the task working again after the agent was told it
// completed.
func TestARelayedPollAnsweredLateKeepsTheNewerAnswer(t *testing.T) {
	h, _ := taskHarness(t, nil)
	var gets atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	_, _ = relayUp(t, h, func(_, method, _ string, res map[string]any) {
		if method != "tasks/get" {
			return
		}
		res["pollIntervalMs"] = 60000
		if gets.Add(1) == 1 {
			res["status"] = "working"
			delete(res, "result")
			close(entered)
			<-release
			return
		}
		res["status"] = "completed"
		res["result"] = map[string]any{"content": []any{map[string]any{"type": "text", "text": "done"}}}
	})
	id := h.relayCall().str(t, "taskId")
	poll := func() rpcAnswer {
		return h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	}
	var wg sync.WaitGroup
	var slow rpcAnswer
	wg.Go(func() { slow = poll() })
	<-entered
	done := poll()
	close(release)
	wg.Wait()
	if done.err != nil || done.str(t, "status") != "completed" {
		t.Fatalf("the second poll: %s, want completed", done.raw)
	}
	t.Logf("the slow poll, sent first: %s", slow.raw)
	if next := poll(); next.err != nil || next.str(t, "status") != "completed" {
		t.Errorf("after a poll answered completed, the next poll (within the interval) answers %s: the earlier-sent, later-answered poll's 'working' replaced the newer answer in the cache", next.raw)
	}
}

// holdGetAPI passes a task store's calls through, but once armed, hands
// the next GetItem's answer back only after release closes (a slow read).
type holdGetAPI struct {
	tasks.API
	armed            atomic.Bool
	entered, release chan struct{}
}

func (a *holdGetAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := a.API.GetItem(ctx, in, opts...)
	if a.armed.CompareAndSwap(true, false) {
		close(a.entered)
		<-a.release
	}
	return out, err
}

// The same for a gateway task whose outcome another instance writes (so
// this one forgets nothing): a poll whose store read is slow and a poll
// after the task completed; the slower, older read must not be kept over
// the newer.
func TestAGatewayPollReadSlowKeepsTheNewerRead(t *testing.T) {
	tapi := &holdGetAPI{entered: make(chan struct{}), release: make(chan struct{})}
	h, store, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	h.batchTasks(map[string]any{"timeout": 900})
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	id := h.createTask("batch", h.key, "work")
	poll := func() rpcAnswer {
		return h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	}
	var wg sync.WaitGroup
	var slow rpcAnswer
	tapi.armed.Store(true)
	wg.Go(func() { slow = poll() })
	<-tapi.entered
	// Another instance's worker writes the outcome.
	r, err := store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(context.Background(), r, func(n *tasks.Record) error {
		n.Status, n.StatusMessage = tasks.StatusCompleted, ""
		n.Result = json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	done := poll()
	close(tapi.release)
	wg.Wait()
	if done.err != nil || done.str(t, "status") != "completed" {
		t.Fatalf("the poll after the outcome: %s, want completed", done.raw)
	}
	t.Logf("the slow poll, read first: %s", slow.raw)
	if next := poll(); next.err != nil || next.str(t, "status") != "completed" {
		t.Errorf("after a poll answered completed, the next poll (within the interval) answers %s: the slower, older read replaced the newer one in the cache", next.raw)
	}
	_ = st.takeHeld()
}

// The relayed-poll cache bounds what it keeps by each entry's size, the
// answer's _meta included, which an upstream fills as it likes (it is
// forwarded to the agent): an entry of megabytes is over a sixteenth of
// the bound and not kept, or 4096 of them would hold gigabytes.
func TestARelayedAnswersMetaCountsInTheCache(t *testing.T) {
	h, _ := taskHarness(t, nil)
	big := strings.Repeat("m", 2<<20)
	_, _ = relayUp(t, h, func(_, method, _ string, res map[string]any) {
		if method == "tasks/get" {
			res["pollIntervalMs"] = 60000
			res["_meta"] = map[string]any{"example.com/blob": big}
		}
	})
	id := h.relayCall().str(t, "taskId")
	a := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	if a.err != nil || !bytes.Contains(a.raw, []byte(big[:1024])) {
		t.Fatalf("poll: %.300s, want the upstream's _meta forwarded", a.raw)
	}
	n, size := h.gw.polls.len()
	t.Logf("cache after one poll whose answer carries %d bytes of _meta: %d entries, %d bytes counted", len(big), n, size)
	if n > 0 && size < len(big) {
		t.Errorf("the cache keeps a relayed answer carrying %d bytes of _meta counted as %d bytes (its bound: %d in all, %d an entry): what it holds is not bounded", len(big), size, pollBytes, pollBytes/maxEntryShare)
	}
}

// A running task read shortly before its run_until, whose outcome another
// instance (a Lambda worker is one) writes in time (before run_until less
// the margin): a poll past run_until within the cache's interval must read
// the store, not take the cached running read for a stopped worker and
// answer failed, then completed.
func TestACachedRunningReadIsNotAnsweredPastItsRunUntil(t *testing.T) {
	h, store, st := reviewHarnessOver(t, nil, nil)
	h.batchTasks(nil)
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	id := h.createTask("batch", h.key, "work")
	defer st.takeHeld()
	ctx := context.Background()
	r, err := store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// Another instance's worker marks it running.
	until := time.Now().Add(lease.DefaultMargin + 2*time.Second).Truncate(time.Millisecond)
	if r, err = store.Update(ctx, r, func(n *tasks.Record) error {
		n.StatusMessage, n.Attempt, n.RunUntil, n.PollInterval = "running", n.Attempt+1, until, 60*time.Second
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	poll := func() rpcAnswer {
		return h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	}
	if a := poll(); a.err != nil || a.str(t, "status") != "working" {
		t.Fatalf("first poll: %s", a.raw)
	}
	// Its outcome lands in time.
	if _, err := store.Update(ctx, r, func(n *tasks.Record) error {
		n.Status, n.StatusMessage = tasks.StatusCompleted, ""
		n.Result = json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !time.Now().Before(until.Add(-lease.DefaultMargin)) {
		t.Skip("the outcome was not written before run_until less the margin: the machine is too slow for this test")
	}
	time.Sleep(time.Until(until) + 100*time.Millisecond)
	past := poll()
	// The entry expires (60 s): the next poll reads the store.
	h.gw.polls.forget(r.Owner, id)
	later := poll()
	t.Logf("past run_until: %s; once the entry expired: %s", past.raw, later.raw)
	if past.err == nil && later.err == nil && past.str(t, "status") != later.str(t, "status") {
		t.Errorf("a poll past run_until answered %q (from the cache), the next once its entry expired %q: a terminal status that changes, though the outcome was written in time", past.str(t, "status"), later.str(t, "status"))
	}
}

// An answered input's record is written working under a new ticket, its
// join fails on the store (it never landed), and refuse's end of the task
// fails too (the same incident): as a create's, the ticket must be joined
// once more, or the task reads working under a ticket in no queue until
// its TTL.
func TestAnUpdateWhoseJoinNeverLandedJoinsAgain(t *testing.T) {
	tapi := failPut(string(tasks.StatusCompleted)) // refuse writes a tool error as completed
	h, store, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	id, _ := h.inputTask(nil)
	q := hookTasks(h)
	var once sync.Once
	q.mu.Lock()
	q.beforeEnqueue = func(string, string) error {
		var err error
		once.Do(func() {
			err = errors.New("operation error DynamoDB: UpdateItem, exceeded maximum number of attempts, 3, ThrottlingException")
		})
		return err
	}
	q.mu.Unlock()
	u := h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}}, rpcOpts{declare: true})
	h.notStranded(t, st, store, id, fmt.Sprintf("a tasks/update (%s) whose join never landed and whose end could not be written", u.raw))
}

// Concurrent polls answered from the cache (a relayed task's answer with
// nested _meta, a gateway task's record) share nothing a request writes
// (run with -race).
func TestConcurrentCachedPollsShareNothingWritten(t *testing.T) {
	h, _ := taskHarness(t, nil)
	_, _ = relayUp(t, h, func(_, method, _ string, res map[string]any) {
		if method == "tasks/get" {
			res["pollIntervalMs"] = 60000
			res["_meta"] = map[string]any{"example.com/x": map[string]any{"y": []any{1, "z"}}}
		}
	})
	id := h.relayCall().str(t, "taskId")
	first := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			a := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
			if a.err != nil || !bytes.Equal(a.result["_meta"], first.result["_meta"]) {
				t.Errorf("a cached poll: %s; the first %s", a.raw, first.raw)
			}
		})
	}
	wg.Wait()
}

// afterEnqueueQueue passes a task queue's calls through, handing the
// answer of each join to after (with its count) once the join was made.
type afterEnqueueQueue struct {
	TaskQueue
	n     atomic.Int32
	after func(n int32, ticket, taskID string, err error) error
}

func (q *afterEnqueueQueue) Enqueue(ctx context.Context, req lease.Request, ticket, taskID string, deadline time.Time) (string, error) {
	id, err := q.TaskQueue.Enqueue(ctx, req, ticket, taskID, deadline)
	return id, q.after(q.n.Add(1), ticket, taskID, err)
}

// gateAPI passes a task store's calls through, but holds the write of a
// call's outcome ("done") until the write of requeue's end ("could not be
// started") has landed, or 5 s: the order a slower call gives.
type gateAPI struct {
	tasks.API
	open chan struct{}
	once sync.Once
}

func (a *gateAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	var item string
	if v, ok := in.Item["result"].(*types.AttributeValueMemberB); ok {
		item = string(v.Value)
	} else if v, ok := in.Item["result"].(*types.AttributeValueMemberS); ok {
		item = v.Value
	}
	if strings.Contains(item, "done") {
		select {
		case <-a.open:
		case <-time.After(5 * time.Second):
		}
	}
	out, err := a.API.PutItem(ctx, in, opts...)
	if err == nil && strings.Contains(item, "could not be started") {
		a.once.Do(func() { close(a.open) })
	}
	return out, err
}

// A worker whose mark failed on the store gives its place back and
// requeues its ticket. Its join lands, a second worker claims the ticket,
// marks the record and calls the upstream; the join's answer is lost (a
// store error). The requeue must not end the task "could not be started"
// over the running record: the call's own outcome would be refused as
// settled, and the agent, told its call never started, call again.
func TestARequeueWhoseJoinAnswerIsLostEndsNoTaskAWorkerRuns(t *testing.T) {
	tapi := &markAPI{}
	tapi.first = func(func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		return nil, errors.New("tasks store: service unavailable")
	}
	gate := &gateAPI{open: make(chan struct{})}
	h, store, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { gate.API = c; tapi.API = gate; return tapi }, nil)
	up := h.batchTasks(nil)
	e := h.gw.deps.Tasks.(*taskEngine)
	q := &afterEnqueueQueue{TaskQueue: e.queue}
	q.after = func(n int32, _, id string, err error) error {
		if n != 2 || err != nil {
			return err
		}
		// The requeue's join landed: its answer is lost once the ticket's
		// next worker has marked the record (its call follows).
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			if r, gerr := store.Get(context.Background(), id); gerr == nil && r.StatusMessage == "running" {
				return errors.New("operation error DynamoDB: UpdateItem, exceeded maximum number of attempts, 3, ThrottlingException")
			}
			_ = h.gw.SweepTasks(context.Background())
			time.Sleep(100 * time.Millisecond)
		}
		t.Error("no worker marked the requeued task")
		return nil
	}
	e.queue = q
	id := h.createTask("batch", h.key, "work")
	st.wg.Wait()
	waitArrivals(up, 1)
	p := h.pollTask("/mcp/batch", h.key, id)
	calls := len(up.Stats().Arrivals)
	t.Logf("upstream calls %d; task %s", calls, p.raw)
	if calls > 0 && bytes.Contains(p.raw, []byte("could not be started")) {
		t.Errorf("the task's call reached the upstream (%d), but the task reads %s: told it never started, the agent calls again and the call runs twice", calls, p.raw)
	}
}

// An input_required outcome whose write landed but was answered past its
// deadline (run_until less the margin): the late path must not write the
// task failed over it, or polls read input_required (the agent may answer
// it), then failed, "stopped before it wrote the call's outcome".
func TestAnInputRoundAnsweredLateAfterItLandedStands(t *testing.T) {
	tapi := &firstPutAPI{status: string(tasks.StatusInputRequired), first: func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		out, err := put()
		// Landed; its answer comes past the mark's run_until less the
		// margin (a timeout of 1 s, no cancel grace: some 3 s after the
		// claim).
		time.Sleep(4 * time.Second)
		return out, err
	}}
	h, store, _ := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	id, first := h.inputTask(map[string]any{"timeout": 1, "cancel_grace": 0.001})
	var r *tasks.Record
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var err error
		if r, err = store.Get(t.Context(), id); err == nil && r.Status != tasks.StatusInputRequired {
			break
		}
	}
	p := h.rpc("/mcp/plain", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	t.Logf("read first: %.200s\nthen: %.400s", first.raw, p.raw)
	if p.err == nil && p.str(t, "status") == "failed" {
		t.Errorf("a task read input_required (its outcome landed in time, its answer late) then reads %s", p.raw)
	}
}
