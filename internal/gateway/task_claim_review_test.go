package gateway

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// lateEnd passes the lease table's calls through, but runs landed once
// in a worker marked "late" just as its claim's take (a SET naming the
// ticket and its claim field) has landed, before its answer goes back: its
// invocation's time runs out in that instant (the worker's context
// cancelled), or the answer comes late (a sleep). An error landed returns
// is the answer instead (the answer lost).
type lateEnd struct {
	lease.API
	mu     sync.Mutex
	ticket string
	landed func() error
}

func (e *lateEnd) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := e.API.UpdateItem(ctx, in, opts...)
	if ctx.Value(workerKey{}) != "late" || err != nil {
		return out, err
	}
	names := make([]string, 0, len(in.ExpressionAttributeNames))
	for _, n := range in.ExpressionAttributeNames {
		names = append(names, n)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.landed == nil || !slices.Contains(names, e.ticket) || !slices.Contains(names, "w") || !strings.HasPrefix(aws.ToString(in.UpdateExpression), "SET") {
		return out, err
	}
	lerr := e.landed()
	e.landed = nil
	if lerr != nil {
		return nil, lerr
	}
	return out, err
}

// flakyReads stands for others' releases and a store error in a worker
// marked "flaky": each of its claim's takes (a SET naming its ticket and
// claim field) is refused by the store, as others' releases refuse it, the
// item as it is in the answer; its reads fail (a 500, or throttling, past
// the SDK's retries), the first of which comes after its eager takes.
type flakyReads struct {
	lease.API
	ticket string
}

func (f *flakyReads) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if ctx.Value(workerKey{}) == "flaky" {
		return nil, errors.New("InternalServerError: the store is unavailable right now")
	}
	return f.API.GetItem(ctx, in, opts...)
}

func (f *flakyReads) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	names := make([]string, 0, len(in.ExpressionAttributeNames))
	for _, n := range in.ExpressionAttributeNames {
		names = append(names, n)
	}
	if ctx.Value(workerKey{}) == "flaky" && slices.Contains(names, f.ticket) && slices.Contains(names, "w") && strings.HasPrefix(aws.ToString(in.UpdateExpression), "SET") {
		// Refused by the store as a take is after others' writes (its
		// answer the item as it is).
		c := *in
		c.ExpressionAttributeNames = maps.Clone(in.ExpressionAttributeNames)
		c.ExpressionAttributeNames["#absentK"] = "limiter_key"
		c.ConditionExpression = aws.String("(" + aws.ToString(in.ConditionExpression) + ") AND attribute_not_exists(#absentK)")
		return f.API.UpdateItem(ctx, &c, opts...)
	}
	return f.API.UpdateItem(ctx, in, opts...)
}

// A store error in a worker's claim (here its reads failing after
// others' writes refused its takes) makes no call and leaves the task
// queued, its ticket waiting for the start made again: RunTask's rule for
// any store error before the call. It is no outcome of the task's.
func TestAStoreErrorInAClaimLeavesTheTaskQueued(t *testing.T) {
	flaky := &flakyReads{}
	h, store, _, up, id, starts := newTaskHarness(t, Options{}, func(api lease.API) lease.API { flaky.API = api; return flaky })
	ts := starts()[0]
	flaky.ticket = ts.Ticket
	err := h.gw.RunTask(context.WithValue(context.Background(), workerKey{}, "flaky"), ts)
	r, gerr := store.Get(context.Background(), id)
	if gerr != nil {
		t.Fatal(gerr)
	}
	t.Logf("the worker: %v; the task: %s (%s), %d calls; result %s", err, r.Status, r.StatusMessage, len(up.Stats().Arrivals), r.Result)
	if tasks.Terminal(r.Status) {
		t.Errorf("a store error in the claim settled the task %s (%s) with no call made; want it left queued, its ticket waiting for the start made again", r.Status, r.StatusMessage)
	}
}
