package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// deadlineQueue is a TaskQueue whose Enqueue notes the deadline of the
// context it is given and succeeds.
type deadlineQueue struct {
	TaskQueue
	deadline time.Time
	bounded  bool
}

func (q *deadlineQueue) Enqueue(ctx context.Context, _ lease.Request, ticket, _ string, _ time.Time) (string, error) {
	q.deadline, q.bounded = ctx.Deadline()
	return ticket, nil
}

// A worker queueing its task's ticket again gives Enqueue a context that
// ends within requeueTimeout, its own cancellation left out: Enqueue tries
// again while others' writes refuse its join until its context ends (or
// the task's deadline, an hour by default), and a worker must not outlive
// its invocation on a key whose releases keep refusing it.
func TestARequeueIsBoundedThoughItsWorkerIsCancelled(t *testing.T) {
	q := &deadlineQueue{}
	e := &taskEngine{g: &Gateway{}, queue: q}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the worker's call was cut off: the requeue runs all the same
	start := time.Now()
	e.requeue(ctx, lease.Request{Key: "srv"}, lease.TaskStart{Ticket: "i.T1"}, &tasks.Record{ID: "t", CreatedAt: start, TTL: time.Hour}, true)
	if !q.bounded {
		t.Fatal("the requeue's enqueue had no deadline: it may try for as long as its task lives")
	}
	if q.deadline.After(start.Add(requeueTimeout).Add(time.Second)) {
		t.Errorf("the requeue's enqueue may run until %v, want within %v of its start", q.deadline.Sub(start), requeueTimeout)
	}
}
