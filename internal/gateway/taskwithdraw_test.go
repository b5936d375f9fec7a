package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestCancelOfATaskQueuedAgainWithItsInput: a task that asked for input
// and was answered waits again under a new ticket; tasks/cancel of it while
// it waits withdraws that ticket (joined for the same task) and ends it
// cancelled, holding no place in the queue and never reaching the upstream
// again.
func TestCancelOfATaskQueuedAgainWithItsInput(t *testing.T) {
	h, store, _, limiter, env := engineHarnessOf(t)
	id, _ := h.inputTask(map[string]any{"max_concurrent_requests": 1})
	first, err := store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	hold, err := limiter.Acquire(context.Background(), lease.Request{Key: "plain", Cap: 1, MaxQueued: 10, Hold: time.Minute, Holder: "other"})
	if err != nil {
		t.Fatal(err)
	}
	u := h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id,
		"inputResponses": map[string]any{"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}}, rpcOpts{declare: true})
	if u.err != nil {
		t.Fatalf("tasks/update: %s", u.raw)
	}
	again, err := store.Get(t.Context(), id)
	if err != nil || again.LeaseID == "" || again.LeaseID == first.LeaseID || again.StatusMessage != "queued" {
		t.Fatalf("the answered task: %+v, %v; want it queued under a new ticket", again, err)
	}
	if n := testkit.LeaseCount(t, env, "plain", lease.TasksAttr); n != 1 {
		t.Fatalf("%d task tickets while the answered task waits; want 1", n)
	}
	if c := h.rpc("/mcp/plain", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true}); c.err != nil {
		t.Fatalf("tasks/cancel: %s", c.raw)
	}
	if n := testkit.LeaseCount(t, env, "plain", lease.TasksAttr); n != 0 {
		t.Errorf("%d task tickets after the waiting task was cancelled; want none", n)
	}
	if _, err := hold.Finish(context.Background(), lease.Unused); err != nil {
		t.Fatal(err)
	}
	if a := h.pollTask("/mcp/plain", h.key, id); a.str(t, "status") != "cancelled" {
		t.Errorf("the answered task cancelled while it waited: %s, want cancelled", a.raw)
	}
}
