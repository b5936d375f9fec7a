package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/metrics/metricstest"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// callLength is the running mean of call lengths the lease item of key
// shows (as mcpgate status reads it).
func callLength(t *testing.T, h *harness, key string) time.Duration {
	t.Helper()
	out, err := h.env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(h.env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return lease.Describe(out.Item, time.Now(), 1, 0, nil).CallLength
}

// TestTaskPollFollowsExpectedWait: on a server with a cap of 1 whose calls
// are known to last L (the lease item's running mean), tasks queued
// behind a held place are told to poll when their turn has come at the
// latest — the k-th in line (k ahead of it) at (k+1)·L, so each later one
// at a longer interval than the one before — and a task, once running,
// when its call has ended, L; the record keeps what it was told.
func TestTaskPollFollowsExpectedWait(t *testing.T) {
	h, store, _, limiter, _ := engineHarnessOf(t)
	up := testkit.StartBatch(t, 10, 1200*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120, "timeout": 30,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	// One call, so that the item knows how long calls last.
	if r := h.call(h.key, `{"server_id":"batch","name":"work","arguments":{}}`); r.status != 200 {
		t.Fatalf("warm-up call: %d %s", r.status, r.body)
	}
	L := callLength(t, h, "batch")
	if L < time.Second {
		t.Fatalf("the item's call length is %v after a call of 1.2 s", L)
	}
	// Another holder takes the one place, so that every task waits.
	hold, err := limiter.Acquire(context.Background(), lease.Request{Key: "batch", Cap: 1, MaxQueued: 10, Hold: time.Minute, Holder: "other"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	var told []time.Duration
	for range 4 {
		a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
		if a.err != nil || a.str(t, "resultType") != "task" {
			t.Fatalf("declared call: %s", a.raw)
		}
		var ms int64
		if err := json.Unmarshal(a.result["pollIntervalMs"], &ms); err != nil {
			t.Fatalf("pollIntervalMs %s: %v", a.result["pollIntervalMs"], err)
		}
		ids, told = append(ids, a.str(t, "taskId")), append(told, time.Duration(ms)*time.Millisecond)
	}
	for k, got := range told {
		want := (time.Duration(k+1) * L).Truncate(time.Millisecond)
		if got != want {
			t.Errorf("task %d in line (L %v): pollIntervalMs %v, want %v", k, L, got, want)
		}
		if k > 0 && got <= told[k-1] {
			t.Errorf("task %d told %v, no longer than the one before it (%v)", k, got, told[k-1])
		}
		if r, err := store.Get(context.Background(), ids[k]); err != nil || r.PollInterval != got {
			t.Errorf("task %d's record: %+v, %v; want the interval it was told, %v", k, r, err, got)
		}
	}
	// The place given back unused leaves the mean as it was.
	if _, err := hold.Finish(context.Background(), lease.Unused); err != nil {
		t.Fatal(err)
	}
	first := h.pollTask("/mcp/batch", h.key, ids[0])
	if first.str(t, "status") != "completed" {
		t.Fatalf("first task: %s", first.raw)
	}
	// It ran: its record says what a running task is told, the call
	// length the item showed when it was claimed (L: no call had ended).
	if r, err := store.Get(context.Background(), ids[0]); err != nil || r.PollInterval != L.Truncate(time.Millisecond) {
		t.Errorf("the run task's record: %+v, %v; want pollIntervalMs %v", r, err, L.Truncate(time.Millisecond))
	}
	for _, id := range ids[1:] {
		if a := h.pollTask("/mcp/batch", h.key, id); a.str(t, "status") != "completed" {
			t.Errorf("task %s: %s", id, a.raw)
		}
	}
	// Later tasks were claimed once calls had ended: their running
	// interval follows the mean as it moved (never the wait they had).
	last, err := store.Get(context.Background(), ids[3])
	if err != nil {
		t.Fatal(err)
	}
	if last.PollInterval >= told[3] || last.PollInterval < minTaskPoll {
		t.Errorf("the last task's running interval %v, want about a call (%v), less than it was told waiting (%v)", last.PollInterval, L, told[3])
	}
}

// TestFastPollsAnsweredFromLastRead: a tasks/get sooner than the task's
// pollIntervalMs after its owner's last one is answered from that read —
// a change written meanwhile by a worker elsewhere is not seen yet, so no
// store read was made — never for another principal, whose poll reads the
// store and is refused; a tasks/cancel or tasks/update made on this
// instance makes the next poll read the store.
func TestFastPollsAnsweredFromLastRead(t *testing.T) {
	var engine *recordingEngine
	h, ts := taskHarness(t, func(s *tasks.Store) TaskEngine {
		engine = &recordingEngine{store: s}
		return engine
	})
	_, url := startTaskServer(t, false, nil)
	h.server(map[string]any{"server_id": "plain", "url": url, "task_ttl": 600, "tools": map[string]any{
		"slow_compute": map[string]any{"task_support": "optional"}}})
	other := testkit.PutKey(t, h.env, "*")
	get := func(key, id string) rpcAnswer {
		return h.rpc("/mcp/plain", key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	}
	// elsewhere writes the record as another instance's worker would.
	elsewhere := func(id string, change func(*tasks.Record)) {
		t.Helper()
		rec, err := ts.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.Update(t.Context(), rec, func(r *tasks.Record) error { change(r); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	create := func() string {
		t.Helper()
		a := h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 1, "label": "x"}}, rpcOpts{declare: true})
		if a.err != nil || a.str(t, "resultType") != "task" {
			t.Fatalf("tools/call: %s", a.raw)
		}
		id := a.str(t, "taskId")
		// An interval no test run outlasts.
		elsewhere(id, func(r *tasks.Record) { r.PollInterval = 5 * time.Minute })
		return id
	}

	id := create()
	if a := get(h.key, id); a.str(t, "status") != "working" {
		t.Fatalf("tasks/get: %s", a.raw)
	}
	elsewhere(id, func(r *tasks.Record) {
		r.Status, r.StatusMessage, r.Result = tasks.StatusCompleted, "", json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)
	})
	if a := get(h.key, id); a.str(t, "status") != "working" {
		t.Errorf("a poll within the interval: %s, want the last read's answer (working)", a.raw)
	}
	// Another principal's poll is never answered from the owner's read.
	unknownTask(t, "tasks/get by another key", get(other, id))
	// A cancel here: the next poll reads the store (and finds it ended).
	if a := h.rpc("/mcp/plain", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true}); a.err != nil {
		t.Fatalf("tasks/cancel: %s", a.raw)
	}
	if a := get(h.key, id); a.str(t, "status") != "completed" {
		t.Errorf("a poll after a cancel made here: %s, want the store's completed", a.raw)
	}

	// An update here: the same.
	id = create()
	if a := get(h.key, id); a.str(t, "status") != "working" {
		t.Fatalf("tasks/get: %s", a.raw)
	}
	elsewhere(id, func(r *tasks.Record) {
		r.Status, r.StatusMessage = tasks.StatusInputRequired, "asks"
		r.InputRequests = json.RawMessage(`{"confirm":{"method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object"}}}}`)
	})
	if a := get(h.key, id); a.str(t, "status") != "working" {
		t.Errorf("a poll within the interval: %s, want the last read's answer (working)", a.raw)
	}
	if a := h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{"confirm": map[string]any{"action": "accept"}}}, rpcOpts{declare: true}); a.err != nil {
		t.Fatalf("tasks/update: %s", a.raw)
	}
	if _, _, u := engine.counts(); u != 1 {
		t.Fatalf("engine updates %d, want 1", u)
	}
	elsewhere(id, func(r *tasks.Record) { r.StatusMessage = "running again" })
	if a := get(h.key, id); a.str(t, "statusMessage") != "running again" {
		t.Errorf("a poll after an update made here: %s, want the store's record", a.raw)
	}
}

// TestTaskPollsBounded: what an instance remembers of polls is bounded in
// entries and in bytes, the least recently used dropped first, a record
// too large for its share never kept; an entry answers only its owner,
// only within its record's interval, and never past the task's expiry.
func TestTaskPollsBounded(t *testing.T) {
	now := time.Now()
	rec := func(owner string, i, resultBytes int) *tasks.Record {
		return &tasks.Record{ID: fmt.Sprintf("tsk_%022d", i), Kind: tasks.KindGateway, Owner: owner, Status: tasks.StatusCompleted,
			CreatedAt: now, TTL: time.Hour, PollInterval: time.Second,
			Result: json.RawMessage(`"` + strings.Repeat("r", resultBytes) + `"`)}
	}
	p := newTaskPolls(3, 1<<20)
	for i := range 5 {
		p.put(rec("a", i, 10), now, p.begin())
	}
	if n, _ := p.len(); n != 3 {
		t.Errorf("%d entries kept, want the bound of 3", n)
	}
	if p.get("a", rec("a", 0, 0).ID, now) != nil || p.get("a", rec("a", 4, 0).ID, now) == nil {
		t.Error("not the least recently used dropped first")
	}
	// Owner, interval, expiry.
	r := rec("a", 4, 10)
	if p.get("b", r.ID, now) != nil {
		t.Error("an entry answered another principal")
	}
	if p.get("a", r.ID, now.Add(time.Second-time.Millisecond)) == nil {
		t.Error("an entry not used within its interval")
	}
	if p.get("a", r.ID, now.Add(time.Second)) != nil {
		t.Error("an entry used at its interval's end")
	}
	old := rec("a", 9, 10)
	old.CreatedAt, old.TTL = now.Add(-time.Hour), time.Hour
	p.put(old, now, p.begin())
	if p.get("a", old.ID, now) != nil {
		t.Error("an expired task answered")
	}
	// Bytes: a hundred records of 4 KiB under a bound of 256 KiB.
	const bound = 256 << 10
	p = newTaskPolls(1000, bound)
	for i := range 100 {
		p.put(rec("a", i, 4<<10), now, p.begin())
		if _, b := p.len(); b > bound {
			t.Fatalf("%d bytes kept, over the bound of %d", b, bound)
		}
	}
	if n, _ := p.len(); n == 0 || n >= 64 {
		t.Errorf("%d records of 4 KiB kept under %d bytes", n, bound)
	}
	if p.put(rec("a", 500, bound/maxEntryShare), now, p.begin()); p.get("a", rec("a", 500, 0).ID, now) != nil {
		t.Error("a record over its share of the bound was kept")
	}
	// forget drops the entry.
	last := rec("a", 99, 0)
	if p.get("a", last.ID, now) == nil {
		t.Fatal("the last record put is not kept")
	}
	p.forget("a", last.ID)
	if p.get("a", last.ID, now) != nil {
		t.Error("a forgotten entry answered")
	}
}

// TestTaskPollCountsTheLineItJoined: a process that has not seen the
// server's lease item (here, tasks queued by another process) estimates
// a task first in line; the join's answer shows six tickets before it,
// and the task is told, and its record keeps, the wait the join found.
func TestTaskPollCountsTheLineItJoined(t *testing.T) {
	h, store, _, _, env := engineHarnessOf(t)
	up := testkit.StartBatch(t, 10, 100*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120, "timeout": 30,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	// Another process holds the one place and queues six tasks of a
	// principal that holds none, as the caller.
	other := lease.New(env.Client, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond})
	req := lease.Request{Key: "batch", Cap: 1, MaxQueued: 10, Hold: time.Minute, Holder: "other"}
	ctx := context.Background()
	held := req
	held.Holder = "third" // not the tasks' principal, which would rank after h's (fair shares)
	hold, err := other.Acquire(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	var queued []string
	for range 6 {
		id := other.NewTaskID()
		if _, err := other.Enqueue(ctx, req, id, "elsewhere", time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		queued = append(queued, id)
	}
	t.Cleanup(func() {
		for _, id := range queued {
			_ = other.Withdraw(ctx, "batch", id, "elsewhere")
		}
		_, _ = hold.Finish(ctx, lease.Unused)
	})
	a := h.rpc("/mcp/batch", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("declared call: %s", a.raw)
	}
	var ms int64
	if err := json.Unmarshal(a.result["pollIntervalMs"], &ms); err != nil {
		t.Fatalf("pollIntervalMs %s: %v", a.result["pollIntervalMs"], err)
	}
	// No call has ended: a call is taken to last a thirtieth of the
	// timeout (1 s); its turn comes within seven of them.
	want := 7 * time.Second
	if got := time.Duration(ms) * time.Millisecond; got != want {
		t.Errorf("a task behind six told pollIntervalMs %v, want %v", got, want)
	}
	r, err := store.Get(ctx, a.str(t, "taskId"))
	if err != nil || r.PollInterval != want {
		t.Errorf("its record: %+v, %v; want pollIntervalMs %v", r, err, want)
	}
	// Withdrawn, it leaves the line as it came.
	if c := h.rpc("/mcp/batch", h.key, "tasks/cancel", map[string]any{"taskId": a.str(t, "taskId")}, rpcOpts{declare: true}); c.err != nil {
		t.Fatalf("cancel: %s", c.raw)
	}
}

// TestPollReadOlderThanAChangeIsNotKept: a tasks/get whose store read was
// made before a status change this instance made (a tasks/cancel, a
// tasks/update, its own worker's write), and whose answer comes back after
// that change forgot the task, must not be remembered: the next poll reads
// the store, as the change promises, instead of answering the older read
// for a whole interval.
func TestPollReadOlderThanAChangeIsNotKept(t *testing.T) {
	now := time.Now()
	r := &tasks.Record{ID: "tsk_0000000000000000000001", Kind: tasks.KindGateway, Owner: "a", Status: tasks.StatusWorking,
		StatusMessage: "queued", CreatedAt: now, TTL: time.Hour, PollInterval: 30 * time.Second}
	p := newTaskPolls(pollEntries, pollBytes)
	gen := p.begin()    // a poll starts its store read: the task is working
	p.forget("a", r.ID) // meanwhile a cancel made here ends the task
	p.put(r, now, gen)  // the poll's older read comes back
	if p.get("a", r.ID, now.Add(time.Millisecond)) != nil {
		t.Error("a read made before a change here is remembered after it: the next poll answers the task as it was before the change")
	}
	// A read begun after the change is kept.
	gen = p.begin()
	p.put(r, now, gen)
	if p.get("a", r.ID, now.Add(time.Millisecond)) == nil {
		t.Error("a read begun after the last change is not remembered")
	}
}

// TestTaskPollStaysWithinBounds: whatever the lease item says (an
// unknown cap, a call length of zero, a negative one, a queue so long that
// its wait overflows a Duration) and whatever the tool's timeout, the
// interval is within [minTaskPoll, maxTaskPoll] and the TTL, and a longer
// expected wait never gives a shorter interval than the bound it passed.
func TestTaskPollStaysWithinBounds(t *testing.T) {
	for _, c := range []struct {
		o       lease.Outlook
		running bool
		timeout time.Duration
		ttl     time.Duration
		want    time.Duration // 0: only within bounds
	}{
		{lease.Outlook{}, false, 0, time.Hour, minTaskPoll},
		{lease.Outlook{CallLength: -time.Hour}, false, 0, time.Hour, minTaskPoll},
		{lease.Outlook{Ahead: 1 << 40, Places: 1, CallLength: time.Hour}, false, time.Hour, time.Hour, maxTaskPoll},
		{lease.Outlook{Ahead: 1 << 40, Places: 0, CallLength: time.Duration(1 << 62)}, false, time.Hour, time.Hour, maxTaskPoll},
		{lease.Outlook{Ahead: 3, Places: 1, CallLength: time.Hour}, false, time.Hour, 10 * time.Second, 10 * time.Second},
		{lease.Outlook{CallLength: time.Duration(1 << 62)}, true, time.Hour, time.Hour, maxTaskPoll},
	} {
		got := taskPoll(c.o, c.running, c.timeout, c.ttl)
		if got < minTaskPoll && got < c.ttl || got > maxTaskPoll || got > c.ttl || c.want != 0 && got != c.want {
			t.Errorf("taskPoll(%+v, running %v, timeout %v, ttl %v) = %v, want %v", c.o, c.running, c.timeout, c.ttl, got, c.want)
		}
	}
}

// TestSweepCountsTasksWaiting: the sweep's one read of a server's lease
// item also tells how many tasks wait there, as an EMF record
// (TasksWaiting, [ServerID]) — three behind a held place, then none once
// they were withdrawn.
func TestSweepCountsTasksWaiting(t *testing.T) {
	var out syncBuffer
	h, _, _, limiter, _ := engineHarnessOf(t, func(d *Deps) { d.Metrics = metrics.New(&out, metrics.Options{}) })
	up := testkit.StartBatch(t, 10, 50*time.Millisecond)
	h.server(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	ctx := context.Background()
	hold, err := limiter.Acquire(ctx, lease.Request{Key: "batch", Cap: 1, MaxQueued: 10, Hold: time.Minute, Holder: "other"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		ids = append(ids, h.createTask("batch", h.key, "work"))
	}
	waiting := func() []string {
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if strings.Contains(line, `"`+metrics.MetricTasksWaiting+`"`) {
				rec, err := metricstest.Parse([]byte(line))
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				got = append(got, fmt.Sprint(rec.Members[metrics.MetricTasksWaiting]))
			}
		}
		return got
	}
	if err := h.gw.SweepTasks(ctx); err != nil {
		t.Fatal(err)
	}
	if got := waiting(); len(got) != 1 || got[0] != "3" {
		t.Errorf("TasksWaiting records after the sweep: %v; want one of 3", got)
	}
	for _, id := range ids {
		if a := h.rpc("/mcp/batch", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true}); a.err != nil {
			t.Fatalf("cancel: %s", a.raw)
		}
	}
	if err := h.gw.SweepTasks(ctx); err != nil {
		t.Fatal(err)
	}
	if got := waiting(); len(got) != 2 || got[1] != "0" {
		t.Errorf("TasksWaiting records after the tasks were withdrawn: %v; want a second of 0", got)
	}
	if _, err := hold.Finish(ctx, lease.Unused); err != nil {
		t.Fatal(err)
	}
}
