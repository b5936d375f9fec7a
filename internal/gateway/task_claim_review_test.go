package gateway

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

// Claim in run: a worker whose context ends just as its claim's take
// lands, the answer in hand, is no worker whose claim failed: it goes on
// with the lease it holds and, making no call, gives it back, so that the
// ticket is not left claimed (no turn, no start) until the lease lapses,
// the task's whole timeout and the margin later. (With the answer lost:
// TestAWorkerEndingOnItsClaimsLostAnswerLeavesTheTaskToTheNext.)
func TestAWorkerEndingAsItsClaimLandsReleasesItsLease(t *testing.T) {
	leases := &lateEnd{}
	h, store, env, up, id, starts := newTaskHarness(t, func(api lease.API) lease.API { leases.API = api; return leases })
	ts := starts()[0]
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), workerKey{}, "late"))
	defer cancel()
	leases.mu.Lock()
	leases.ticket, leases.landed = ts.Ticket, func() error { cancel(); return nil }
	leases.mu.Unlock()
	err := h.gw.RunTask(ctx, ts)
	r, gerr := store.Get(context.Background(), id)
	if gerr != nil {
		t.Fatal(gerr)
	}
	exp := claimExpiry(t, env, ts)
	t.Logf("the late worker: %v; the task: %s (%s), %d calls; the claim's lease in the item: %q (now %d)", err, r.Status, r.StatusMessage, len(up.Stats().Arrivals), exp, time.Now().UnixMilli())
	if exp != "" && r.Status == tasks.StatusWorking && r.StatusMessage == "queued" && len(up.Stats().Arrivals) == 0 {
		t.Errorf("the worker left its claim's lease (expiry %s, %v from now) with its task queued and no call made: the ticket is claimed, so no turn and no start, until it lapses", exp, func() time.Duration {
			var ms int64
			for _, ch := range exp {
				ms = ms*10 + int64(ch-'0')
			}
			return time.Until(time.UnixMilli(ms)).Round(time.Second)
		}())
		// A worker started again (the invocation retried) leaves too.
		if err := h.gw.RunTask(context.Background(), ts); err != nil {
			t.Fatal(err)
		}
		if r, gerr = store.Get(context.Background(), id); gerr == nil {
			t.Logf("the same start run again: the task %s (%s), %d calls", r.Status, r.StatusMessage, len(up.Stats().Arrivals))
		}
	}
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
	h, store, _, up, id, starts := newTaskHarness(t, func(api lease.API) lease.API { flaky.API = api; return flaky })
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
