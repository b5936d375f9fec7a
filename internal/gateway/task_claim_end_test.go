package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// endingLeases passes the lease table's calls through, but ends the
// context of a worker marked "ending" (its invocation's time spent, its
// process shutting down) as its first lease request goes out.
type endingLeases struct {
	lease.API
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (e *endingLeases) end(ctx context.Context) {
	if ctx.Value(workerKey{}) != "ending" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancel != nil {
		e.cancel()
	}
}

func (e *endingLeases) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	e.end(ctx)
	return e.API.GetItem(ctx, in, opts...)
}

func (e *endingLeases) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	e.end(ctx)
	return e.API.UpdateItem(ctx, in, opts...)
}

// A worker whose context ends while it claims its task's place makes no
// call and leaves the task as it was: queued, its ticket and its start's
// mark kept, so that a worker started again runs it. It is no failure of
// the task's call (none was made).
func TestAWorkerEndingInItsClaimLeavesItsTaskQueued(t *testing.T) {
	leases := &endingLeases{}
	h, store, _, up, id, starts := newTaskHarness(t, Options{}, func(api lease.API) lease.API { leases.API = api; return leases })
	ts := starts()[0]
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), workerKey{}, "ending"))
	defer cancel()
	leases.mu.Lock()
	leases.cancel = cancel
	leases.mu.Unlock()
	err := h.gw.RunTask(ctx, ts)
	r, gerr := store.Get(context.Background(), id)
	if gerr != nil {
		t.Fatal(gerr)
	}
	t.Logf("the ending worker: %v; the task: %s (%s)", err, r.Status, r.StatusMessage)
	if r.Status != tasks.StatusWorking || r.StatusMessage != "queued" {
		t.Fatalf("a worker that ended in its claim left its task %s (%s); want it still queued", r.Status, r.StatusMessage)
	}
	if n := len(up.Stats().Arrivals); n != 0 {
		t.Fatalf("%d calls upstream from a worker that ended in its claim", n)
	}
	// Started again (here at once, with the same start), it runs.
	if err := h.gw.RunTask(context.Background(), ts); err != nil {
		t.Fatal(err)
	}
	if r := awaitSettled(t, store, id); r.Status != tasks.StatusCompleted {
		t.Fatalf("the task run again: %s (%s); want completed", r.Status, r.StatusMessage)
	}
}

// Claim in run: a worker whose time ends as it claims — its context ended
// as its take lands, the answer in hand or lost with it (an outcome
// unknown to the worker), or its CallBy (its deadline less the answer's
// reserve) passed as the take's answer came or before its take was made,
// no time left for the call — makes no call and gives the place back (or
// its start's mark), so that the ticket is not left claimed (no turn, no
// start) until the lease lapses, the task's whole timeout and the margin
// later: the task stays queued, and the next worker, started at once,
// runs it with one call. (Before, CallBy passed completed the task with a
// QUEUE_TIMEOUT error, no call made.)
func TestAWorkerWhoseTimeEndsAsItClaimsLeavesTheTaskToTheNext(t *testing.T) {
	// The answer's reserve: what is left of the worker's time once CallBy
	// has passed, for its give-back (seconds: the race detector is slow).
	const reserve = 3 * time.Second
	for _, c := range []struct {
		name   string
		left   time.Duration // the worker's time, from its start
		landed func(cancel context.CancelFunc, callBy time.Time) error
	}{
		{"context ended", reserve + 2*time.Second, func(cancel context.CancelFunc, _ time.Time) error { cancel(); return nil }},
		{"context ended, answer lost", reserve + 2*time.Second, func(cancel context.CancelFunc, _ time.Time) error { cancel(); return context.Canceled }},
		{"answer past CallBy", reserve + 2*time.Second, func(_ context.CancelFunc, callBy time.Time) error {
			time.Sleep(time.Until(callBy) + 100*time.Millisecond) // the invocation's time not yet over
			return nil
		}},
		{"CallBy past before its take", reserve - 50*time.Millisecond, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			leases := &lateEnd{}
			h, store, env, up, id, starts := newTaskHarness(t, Options{AnswerReserve: reserve}, func(api lease.API) lease.API { leases.API = api; return leases })
			ts := starts()[0]
			deadline := time.Now().Add(c.left)
			ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), workerKey{}, "late"), deadline)
			defer cancel()
			leases.mu.Lock()
			if c.landed != nil {
				leases.ticket, leases.landed = ts.Ticket, func() error { return c.landed(cancel, deadline.Add(-reserve)) }
			}
			leases.mu.Unlock()
			err := h.gw.RunTask(ctx, ts)
			r, gerr := store.Get(context.Background(), id)
			if gerr != nil {
				t.Fatal(gerr)
			}
			exp := claimExpiry(t, env, ts)
			t.Logf("the worker: %v; the task: %s (%s), %d calls; the claim's lease: %q", err, r.Status, r.StatusMessage, len(up.Stats().Arrivals), exp)
			if exp != "" || r.Status != tasks.StatusWorking || r.StatusMessage != "queued" || len(up.Stats().Arrivals) != 0 {
				t.Fatalf("the worker left its task %s (%s), %d calls, the claim's lease %q; want it queued, no call, no lease", r.Status, r.StatusMessage, len(up.Stats().Arrivals), exp)
			}
			got := starts()
			if len(got) != 2 || got[1].Ticket != ts.Ticket {
				t.Fatalf("starts %+v; want the next one of %s, made as the place came back", got, ts.Ticket)
			}
			if err := h.gw.RunTask(context.Background(), got[1]); err != nil {
				t.Fatal(err)
			}
			if r := awaitSettled(t, store, id); r.Status != tasks.StatusCompleted || len(up.Stats().Arrivals) != 1 {
				t.Fatalf("the next worker left the task %s (%s) after %d calls; want it completed by one", r.Status, r.StatusMessage, len(up.Stats().Arrivals))
			}
		})
	}
}

// claimExpiry is the expiry of start ts's lease in its item ("": none).
func claimExpiry(t *testing.T, env *storetest.Env, ts lease.TaskStart) string {
	t.Helper()
	out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(env.Tables.Leases), Key: map[string]types.AttributeValue{"limiter_key": &types.AttributeValueMemberS{Value: ts.Key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := out.Item["leases"].(*types.AttributeValueMemberM); ok {
		if n, ok := m.Value[ts.Ticket].(*types.AttributeValueMemberN); ok {
			return n.Value
		}
	}
	return ""
}

// awaitSettled returns task id's record once it is no longer working, or
// as it is after 10 s.
func awaitSettled(t *testing.T, store *tasks.Store, id string) *tasks.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != tasks.StatusWorking || time.Now().After(deadline) {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newTaskHarness is a harness (opts) running gateway tasks with its limiter's
// requests going through leases (given the store's client), and a task of
// the batch server's work tool made, its one start recorded, not run. It
// returns the task's id, the upstream, and the starts recorded so far (the
// first of them the task's).
func newTaskHarness(t *testing.T, opts Options, leases func(lease.API) lease.API) (h *harness, store *tasks.Store, env *storetest.Env, up *testkit.Batch, id string, starts func() []lease.TaskStart) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []lease.TaskStart
	)
	start := func(_ context.Context, ts lease.TaskStart) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ts)
	}
	h = newHarnessDeps(t, opts, func(d *Deps, e *storetest.Env) {
		env = e
		store = &tasks.Store{DB: e.Client, Table: e.Tables.Tasks}
		d.Limiter = lease.New(leases(e.Client), e.Tables.Leases, lease.Options{OnTaskStart: start})
	})
	h.gw.EnableTasks(store, h.gw.deps.Limiter.(*lease.Limiter), start)
	up = h.batchTasks(nil)
	id = h.createTask("batch", h.key, "work")
	starts = func() []lease.TaskStart {
		mu.Lock()
		defer mu.Unlock()
		return append([]lease.TaskStart(nil), got...)
	}
	if got := starts(); len(got) != 1 {
		t.Fatalf("starts: %+v; want one", got)
	}
	return h, store, env, up, id, starts
}
