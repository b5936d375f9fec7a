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

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/tasks"
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
	api := &lostJoinAPI{}
	h, _, st := reviewHarnessOver(t, nil, func(c lease.API) lease.API { api.API = c; return api })
	up := h.batchTasks(nil)
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

// failedMark is a markAPI whose first mark fails as a store error does,
// without landing.
func failedMark() *markAPI {
	return &markAPI{first: func(func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		return nil, errors.New("tasks store: service unavailable")
	}}
}

// A worker whose mark of its record as running fails with a store error
// (not a conflict: the write did not land) must not make the call: the
// creation whose join's outcome was unknown still sees the record as no
// worker took it, fails it, and the agent is told it failed. Making the
// call then runs a task the agent was told failed.
func TestATaskWhoseRunningMarkFailedMakesNoCall(t *testing.T) {
	api := &lostJoinAPI{}
	tapi := failedMark()
	h, _, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi },
		func(c lease.API) lease.API { api.API = c; return api })
	up := h.batchTasks(nil)
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
	t.Logf("mark failed %v; create: %s; upstream calls %d; starts %d", tapi.marked(), a.raw, calls, len(st.starts()))
	if !tapi.marked() {
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
	tapi := failedMark()
	h, _, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	up := h.batchTasks(nil)
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	id := a.str(t, "taskId")
	h.sweep(st, 3)
	calls := len(up.Stats().Arrivals)
	p := h.pollTask("/mcp/batch", h.key, id)
	t.Logf("mark failed %v; poll: %s; upstream calls %d; starts %d", tapi.marked(), p.raw, calls, len(st.starts()))
	if !tapi.marked() {
		t.Fatal("no worker marked the task running")
	}
	if p.err != nil || p.str(t, "status") != "completed" || calls != 1 {
		t.Errorf("the task: %s, upstream calls %d; want it completed by one call", p.raw, calls)
	}
}

// endMark ends a worker (a panic, as an instance that ends does) at its
// first mark, as markAPI's first: after its claim, before its mark.
func endMark(func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
	panic("the worker's instance ended")
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
	tapi := &markAPI{first: endMark}
	h, _, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	st.quiet = true
	up := h.batchTasks(map[string]any{"timeout": 1})
	id := h.createTask("batch", h.key, "work")
	st.wg.Wait()
	if !tapi.marked() {
		t.Fatal("no worker reached its mark")
	}
	// Past the lease's end (its hold, the tool's 1 s timeout, and the
	// margin), and past a start's timeout: whatever could run it has.
	time.Sleep(2*time.Second + lease.StartTimeout)
	h.sweep(st, 2)
	p := h.pollTask("/mcp/batch", h.key, id)
	calls := len(up.Stats().Arrivals)
	t.Logf("poll: %s; upstream calls %d", p.raw, calls)
	if p.err != nil || p.str(t, "status") == "working" && calls == 0 {
		t.Errorf("the task is still waiting with nothing to run it: %s", p.raw)
	}
}

// A worker that ends once its record is marked running leaves a lease
// that lapses, and its ticket waits again; the worker started for it then
// finds the record marked under that ticket: the call may have been made,
// so it makes none, and gives the ticket back. The task ends failed past
// its run_until ("may or may not have run"), its call made at most once.
func TestATaskMarkedRunningIsNotCalledAgainByTheNextClaim(t *testing.T) {
	// The first mark lands, then its worker ends (a panic, as an instance
	// that ends does): after its mark, before its call.
	tapi := &markAPI{first: func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		if _, err := put(); err != nil {
			return nil, err
		}
		return endMark(nil)
	}}
	h, _, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	st.quiet = true
	env := h.env
	up := h.batchTasks(map[string]any{"timeout": 1, "cancel_grace": 1})
	id := h.createTask("batch", h.key, "work")
	st.wg.Wait()
	if !tapi.marked() {
		t.Fatal("no worker's mark landed")
	}
	// Past the lease's end and a start's timeout, and past run_until
	// (the call's end, cancel_grace, the lease margin and the watch).
	time.Sleep(3*time.Second + lease.StartTimeout)
	h.sweep(st, 2)
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

// The agent cancels a task whose call has just started; the upstream
// answers at once that it needs input, before the worker's watch reads
// the cancellation. The task was asked to stop: it must end cancelled,
// not ask the agent for input.
func TestATaskCancelledWhileItsCallRunsDoesNotAskForInput(t *testing.T) {
	var meanwhile func()
	// Once the first mark has landed, meanwhile runs.
	tapi := &markAPI{first: func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error) {
		out, err := put()
		if err == nil {
			meanwhile()
		}
		return out, err
	}}
	h, _, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	_, url := startTaskServer(t, false, nil)
	h.server(map[string]any{"server_id": "plain", "url": url, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"confirm_delete": map[string]any{"task_support": "optional"}}})
	var (
		id        string
		idMu      sync.Mutex
		cancelled rpcAnswer
	)
	meanwhile = func() {
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
	st.wg.Wait()
	p := h.pollTask("/mcp/plain", h.key, id)
	t.Logf("cancel: %s; poll: %s", cancelled.raw, p.raw)
	if p.err != nil || p.str(t, "status") != "cancelled" {
		t.Errorf("a task cancelled while its call ran, the upstream asking for input: %s; want cancelled", p.raw)
	}
}
