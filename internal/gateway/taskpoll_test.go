package gateway

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store"
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
// behind a held place are told to poll at half their expected wait — the
// k-th in line (k ahead of it) at (k+1)·L/2, so each later one at a longer
// interval than the one before — and a task, once running, at half its
// call's expected length, L/2; the record keeps what it was told.
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
		want := (time.Duration(k+1) * L / 2).Truncate(time.Millisecond)
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
	// It ran: its record says what a running task is told, half the call
	// length the item showed when it was claimed (L: no call had ended).
	if r, err := store.Get(context.Background(), ids[0]); err != nil || r.PollInterval != (L/2).Truncate(time.Millisecond) {
		t.Errorf("the run task's record: %+v, %v; want pollIntervalMs %v", r, err, (L / 2).Truncate(time.Millisecond))
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
		t.Errorf("the last task's running interval %v, want about half a call (%v), less than it was told waiting (%v)", last.PollInterval, L/2, told[3])
	}
}
