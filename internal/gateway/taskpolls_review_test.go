package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/mcpgate/mcpgate/internal/tasks"
)

// Regression tests from a fourth adversarial reading of the gateway's side
// of MCP tasks: reads in flight while the poll cache drops a newer one.

// A slow read of a task still working, told a long interval, is put in the
// poll cache after a newer read answered completed and its entry (told a
// short interval) expired: it must not be kept, or a poll within the slow
// read's interval answers working after one answered completed.
func TestASlowReadPutAfterANewerEntryExpiredIsNotKept(t *testing.T) {
	p := newTaskPolls(pollEntries, pollBytes)
	t0 := time.Now()
	working := &tasks.Record{ID: "t1", Owner: "o", Kind: tasks.KindGateway, Status: tasks.StatusWorking, StatusMessage: "queued",
		CreatedAt: t0.Add(-time.Second), TTL: time.Hour, PollInterval: 30 * time.Second}
	completed := working.Clone()
	completed.Status, completed.StatusMessage, completed.PollInterval = tasks.StatusCompleted, "", minTaskPoll
	completed.Result = json.RawMessage(`{"content":[]}`)

	slow := p.begin() // P1's read begins at t0 (working), its answer slow
	t1 := t0.Add(10 * time.Millisecond)
	p.put(completed, t1, p.begin()) // P2 read completed at t1, answered
	if r := p.get("o", "t1", t1.Add(minTaskPoll/2)); r == nil || r.Status != tasks.StatusCompleted {
		t.Fatalf("within the interval: %v, want the completed read", r)
	}
	// P3, past the completed read's interval: its entry is dropped, and it
	// reads the store (in flight).
	t3 := t1.Add(minTaskPoll + time.Millisecond)
	if r := p.get("o", "t1", t3); r != nil {
		t.Fatalf("past the interval: %v, want nothing", r)
	}
	// P1's answer arrives now.
	p.put(working, t0, slow)
	if r := p.get("o", "t1", t3.Add(time.Millisecond)); r != nil && r.Status != tasks.StatusCompleted {
		t.Errorf("after a poll answered completed, a later poll answers %s from the cache: a read begun before the completed one was kept once that one's entry had expired", r.Status)
	}
}

// gateGetAPI passes a task store's calls through, but each GetItem made
// while a gate is armed is answered only once that gate opens.
type gateGetAPI struct {
	tasks.API
	mu    sync.Mutex
	gates []*getGate
}

type getGate struct{ entered, release chan struct{} }

func (a *gateGetAPI) arm() *getGate {
	g := &getGate{entered: make(chan struct{}), release: make(chan struct{})}
	a.mu.Lock()
	a.gates = append(a.gates, g)
	a.mu.Unlock()
	return g
}

func (a *gateGetAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := a.API.GetItem(ctx, in, opts...)
	a.mu.Lock()
	var g *getGate
	if len(a.gates) > 0 {
		g, a.gates = a.gates[0], a.gates[1:]
	}
	a.mu.Unlock()
	if g != nil {
		close(g.entered)
		<-g.release
	}
	return out, err
}

// The same through tasks/get, an agent polling in parallel: a poll whose
// read (the task waiting, told 30 s) is slow; the task completes on another
// instance (told 250 ms); a poll answers completed; a poll past that
// interval drops its entry and reads (slowly too); the first poll's read
// lands then. The next poll, sent after one answered completed, must not
// answer working.
func TestAGatewayPollNeverAnswersWorkingAfterCompleted(t *testing.T) {
	tapi := &gateGetAPI{}
	h, store, st := reviewHarnessOver(t, func(c tasks.API) tasks.API { tapi.API = c; return tapi }, nil)
	h.batchTasks(map[string]any{"timeout": 900})
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
	// Far back in line: told 30 s.
	if r, err = store.Update(ctx, r, func(n *tasks.Record) error { n.PollInterval = 30 * time.Second; return nil }); err != nil {
		t.Fatal(err)
	}
	poll := func() rpcAnswer {
		return h.rpc("/mcp/batch", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	}
	var wg sync.WaitGroup
	a := tapi.arm()
	var first rpcAnswer
	firstDone := make(chan struct{})
	wg.Go(func() { first = poll(); close(firstDone) })
	<-a.entered
	// Another instance's worker ran it and wrote its outcome.
	if _, err := store.Update(ctx, r, func(n *tasks.Record) error {
		n.Status, n.StatusMessage, n.PollInterval = tasks.StatusCompleted, "", minTaskPoll
		n.Result = json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if done := poll(); done.err != nil || done.str(t, "status") != "completed" {
		t.Fatalf("the poll after the outcome: %s, want completed", done.raw)
	}
	time.Sleep(minTaskPoll + 50*time.Millisecond) // past the completed read's interval
	b := tapi.arm()
	var third rpcAnswer
	wg.Go(func() { third = poll() })
	<-b.entered
	close(a.release)
	// The first poll's answer is written (and its read put) before the
	// third's read returns.
	<-firstDone
	next := poll()
	close(b.release)
	wg.Wait()
	t.Logf("first (slow, sent before the outcome): %s; third (slow): %s", first.raw, third.raw)
	if next.err != nil || next.str(t, "status") != "completed" {
		t.Errorf("after a poll answered completed, a poll answers %s: the slow first read, put once the completed read's entry expired, is answered", next.raw)
	}
}

// The same for a relayed task: an upstream's answer to a poll sent before
// another's, arriving once that one's entry expired (the upstream told
// 250 ms once its task completed, 30 s while it worked), must not be kept
// and answered: completed, then working.
func TestARelayedSlowAnswerPutAfterANewerEntryExpiredIsNotKept(t *testing.T) {
	p := newTaskPolls(pollEntries, pollBytes)
	t0 := time.Now()
	r := &tasks.Record{ID: "t1", Owner: "o", Kind: tasks.KindRelay, Status: tasks.StatusWorking, UpstreamID: "u1",
		CreatedAt: t0.Add(-time.Second), TTL: time.Hour}
	answer := func(status string) *objectResult {
		return &objectResult{fields: map[string]json.RawMessage{"taskId": rawString("t1"), "status": rawString(status)}}
	}
	slow := p.begin()
	t1 := t0.Add(10 * time.Millisecond)
	p.putRelayed(r, answer("completed"), minTaskPoll, t1, p.begin())
	t3 := t1.Add(minTaskPoll + time.Millisecond)
	if a := p.relayed("o", "t1", t3); a != nil {
		t.Fatalf("past the interval: %v, want nothing", a.fields)
	}
	p.putRelayed(r, answer("working"), 30*time.Second, t0, slow)
	if a := p.relayed("o", "t1", t3.Add(time.Millisecond)); a != nil && string(a.fields["status"]) != `"completed"` {
		t.Errorf("after a poll answered completed, a later poll answers %s from the cache: the upstream's answer to a poll sent before it was kept once that one's entry had expired", a.fields["status"])
	}
}

// The same with no time passing: the newer read's entry is pushed out by
// the bound (other tasks' polls); the slow, older read must not be kept.
func TestASlowReadPutAfterANewerEntryWasEvictedIsNotKept(t *testing.T) {
	p := newTaskPolls(2, pollBytes)
	t0 := time.Now()
	rec := func(id string, s tasks.Status) *tasks.Record {
		r := &tasks.Record{ID: id, Owner: "o", Kind: tasks.KindGateway, Status: s, StatusMessage: "queued",
			CreatedAt: t0.Add(-time.Second), TTL: time.Hour, PollInterval: 30 * time.Second}
		if s == tasks.StatusCompleted {
			r.StatusMessage, r.Result = "", json.RawMessage(`{"content":[]}`)
		}
		return r
	}
	slow := p.begin()
	t1 := t0.Add(10 * time.Millisecond)
	p.put(rec("t1", tasks.StatusCompleted), t1, p.begin())
	p.put(rec("t2", tasks.StatusWorking), t1, p.begin())
	p.put(rec("t3", tasks.StatusWorking), t1, p.begin()) // t1's entry is pushed out
	p.put(rec("t1", tasks.StatusWorking), t0, slow)
	if r := p.get("o", "t1", t1.Add(time.Millisecond)); r != nil && r.Status != tasks.StatusCompleted {
		t.Errorf("after a poll answered completed, a later poll answers %s from the cache: a read begun before the completed one was kept once that one's entry was pushed out", r.Status)
	}
}
