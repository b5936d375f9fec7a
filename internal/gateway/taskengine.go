package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// The gateway's own tasks (TaskEngine): a tools/call made a task waits in
// its server's lease item as a task ticket (lease.Enqueue), costing no
// invocation, until its turn comes; then a worker is started for it
// (Starter: an asynchronous invocation of the function under Lambda, a
// goroutine in a process), which claims the place (lease.Claim) and runs
// the call through the same path as a synchronous call — its policy, the
// key's own place, the upstream exchange, its slot held until the
// upstream stopped — and writes the outcome into the task's record.
//
//   - Create stores the record (status working, "queued") before the
//     ticket joins, so that a worker started at once finds it. A refusal
//     a synchronous call would get at once (queue full, breaker open,
//     paused, rate limited) is answered as one, and the record, which
//     nobody was told of, is failed; a join of unknown outcome whose
//     failure cannot be written is answered as a task made.
//   - The key's own limits: its rpm_limit is charged when the task is
//     made (a refusal is RATE_LIMITED then); its max_parallel_requests is
//     a place the worker takes when the task runs, without waiting (a
//     refusal fails the task).
//   - A worker started twice (a start seen lost) claims once; a worker
//     whose claim is refused (not its turn, its ticket gone, its start
//     lapsed) leaves, as does one whose claim fails on the store or with
//     its own end: the task stays queued and a worker is started again.
//   - A worker makes its call only once it marked the record running (a
//     write conditioned on the record as read), and never on a record an
//     earlier claim of the same ticket marked. The claim keeps the ticket
//     in the lease item until the lease's release; a worker that ends
//     after its claim leaves its lease to lapse and the ticket waiting
//     again, and the worker started for it then runs the call if the
//     record was never marked, or gives the ticket back if it was (the
//     record's run_until tells the end of a call that may have run). A
//     worker that makes no call after its mark (its outcome unknown, or
//     late) takes its mark back before its ticket waits again, once its
//     release showed that no other claim came since.
//   - Cancel marks the record first (cancel_requested), on which a
//     worker's mark is refused, so no call is made once it landed; then
//     withdraws a waiting task's ticket and ends it. A running task's
//     worker sees the request within taskWatch and cuts the call off, its
//     slot kept until the upstream stopped, as a synchronous call's.
//   - A worker's outcome is written before the record's run_until less
//     the lease margin, or as failed: past run_until a poll reads the
//     task failed, and a terminal status once read never changes.
//
//   - Input: an upstream that answers the call input_required (MCP
//     2026-07-28's multi-round trip: input requests and its requestState)
//     puts the task in input_required, its place given back, the
//     upstream's state kept in the record (never shown). tasks/update
//     brings the responses: the task joins the queue again, and its next
//     round is the call retried with them, as a synchronous client's
//     retry is.

// Starter starts a worker for a task whose turn came (or that runs at
// once): it should return quickly, the worker running elsewhere.
type Starter func(ctx context.Context, ts lease.TaskStart)

// TaskQueue is the lease store's queue of tasks (a *lease.Limiter).
type TaskQueue interface {
	NewTaskID() string
	Enqueue(ctx context.Context, req lease.Request, ticket, taskID string, deadline time.Time) (string, error)
	Claim(ctx context.Context, req lease.Request, id string, mark int64) (*lease.Lease, error)
	Withdraw(ctx context.Context, key, id, taskID string) error
	StartDue(ctx context.Context, req lease.Request) error
	Outlook(req lease.Request, id string) (lease.Outlook, bool)
}

var _ TaskQueue = (*lease.Limiter)(nil)

// taskEngine is the TaskEngine of a gateway that runs tasks itself.
type taskEngine struct {
	g     *Gateway
	store *tasks.Store
	queue TaskQueue
	start Starter
}

// taskWatch is how often a running task's worker reads its record for a
// cancellation.
const taskWatch = 2 * time.Second

// requeueTimeout bounds a worker's enqueue of its task's ticket again
// (requeue); past it the task fails, as one that could not be queued.
const requeueTimeout = 10 * time.Second

// EnableTasks makes g run gateway tasks (tools whose item sets
// task_support), keeping their records in store and their tickets in
// queue, and relay upstreams' tasks; start starts their workers (see
// RunTask). Call it before serving.
func (g *Gateway) EnableTasks(store *tasks.Store, queue TaskQueue, start Starter) {
	g.deps.TaskStore = store
	g.deps.Tasks = &taskEngine{g: g, store: store, queue: queue, start: start}
}

// taskRunKey marks the context of a task's run: its key's rpm_limit was
// charged when the task was made.
type taskRunKey struct{}

// Create makes a gateway task (TaskEngine).
func (e *taskEngine) Create(ctx context.Context, srv *registry.Server, p *auth.Principal, params json.RawMessage, tool, protocol string) (*tasks.Record, *fault.Error) {
	g := e.g
	if p == nil {
		return nil, fault.New(fault.Unauthorized, "a task needs a caller")
	}
	timeout := srv.TimeoutFor(tool)
	rec := recordFrom(ctx)
	// The key's own rate: charged now, its place left for the run.
	if kr, ok := g.principalRequest(ctx, timeout); ok && len(kr.Rates) > 0 {
		kl, err := g.deps.Limiter.Acquire(ctx, kr)
		if err != nil {
			return nil, principalFault(err)
		}
		g.finish(ctx, kl, lease.Abandoned, rec)
	}
	who, err := json.Marshal(taskCaller{Principal: p, Header: callerFrom(ctx).upstream(srv).Header})
	if err != nil {
		return nil, fault.Wrap(err, fault.Internal, "the task cannot be made")
	}
	id, err := tasks.NewID()
	if err != nil {
		return nil, fault.Wrap(err, fault.Internal, "the task cannot be made")
	}
	req := g.taskRequest(ctx, srv, tool, timeout)
	r := &tasks.Record{
		ID: id, Kind: tasks.KindGateway, ServerID: srv.ID, Tool: tool, Owner: p.StateKey, OwnerID: p.ID,
		Principal: who, Status: tasks.StatusWorking, StatusMessage: "queued", TTL: srv.TaskTTL,
		Params: params, Protocol: protocol, LeaseID: e.queue.NewTaskID(),
	}
	r.PollInterval = e.pollWaiting(req, r.LeaseID, timeout, srv.TaskTTL)
	if t := g.deps.Tracer; t != nil {
		// The worker's span links to this request's.
		if m := t.Current(ctx); len(m.Traceparent) <= tasks.MaxTraceparentBytes && len(m.Tracestate) <= tasks.MaxTracestateBytes {
			r.Traceparent, r.Tracestate = m.Traceparent, m.Tracestate
		}
	}
	if err := e.store.Create(ctx, r); err != nil {
		if errors.Is(err, tasks.ErrTooLarge) {
			// What it must keep (its caller, the headers it forwards) is
			// more than a task keeps: no retry makes it fit.
			return nil, fault.Wrap(err, fault.BadRequest, "the call is too large to run as a task (its caller and forwarded headers are more than a task keeps): call it without the tasks extension, or with less")
		}
		return nil, fault.Wrap(err, fault.StoreUnavailable, "the task cannot be stored right now").WithRetryAfter(storeRetryAfter)
	}
	if _, err := e.queue.Enqueue(ctx, req, r.LeaseID, id, r.CreatedAt.Add(r.TTL)); err != nil {
		fe := acquireFault(srv, tool, err)
		// Nobody was told of this task: it is no task that failed.
		n, ended := e.refuse(context.WithValue(context.WithoutCancel(ctx), untoldKey{}, true), r, fe)
		switch {
		case n != nil:
			r = n // a worker took it: the agent's task, whose call was made
		case ended || refusal(err):
			return nil, fe
		default:
			// Its join may have landed and its end was not written: a
			// worker may yet run it, so the agent is told of the task
			// rather than told to call again, which could run it twice.
			// Its ticket joins again (joinAgain), so that a join that
			// never landed does not leave the task waiting for nothing.
			g.log.Warn("task's join and end both failed on the store; the task is answered as made", "task", r.ID, "error", err.Error())
			e.joinAgain(ctx, req, r)
		}
	}
	// The join's answer shows the task's place in line. Where the estimate
	// above (this process's earlier view of the item, or none) told under
	// half the interval it shows, the record is told that interval, in one
	// more write: a burst of tasks on processes that have not seen each
	// other's would otherwise all be told to poll as if first in line.
	if p := e.pollWaiting(req, r.LeaseID, timeout, srv.TaskTTL); p > 2*r.PollInterval {
		if n, err := e.update(ctx, r, func(n *tasks.Record) error {
			if n.Status != tasks.StatusWorking || n.StatusMessage != "queued" {
				return errSettled
			}
			n.PollInterval = p
			return nil
		}); err == nil {
			r = n
		}
	}
	_ = g.deps.Metrics.Task(srv.ID, tool, "created")
	return r, nil
}

// uncappedTask is the cap a task's request asks under on a server that
// has none: every task waits as a ticket and runs as a lease, so that a
// start made twice claims once and a start lost is made again, whatever
// the server's caps.
const uncappedTask = 1 << 20

// taskRequest is what a task of tool on srv asks of the server's lease
// item: what a synchronous call asks (leaseRequest), always a place
// (uncappedTask where the server has no cap), and max_queued places in
// the queue of tasks, which no bulkhead bounds: a waiting task holds no
// invocation.
func (g *Gateway) taskRequest(ctx context.Context, srv *registry.Server, tool string, timeout time.Duration) lease.Request {
	req, _ := g.leaseRequest(ctx, srv, tool, timeout)
	if !req.TakesPlace() {
		req.Cap = uncappedTask
	}
	req.MaxQueued = srv.MaxQueued
	if req.MaxQueued == 0 {
		req.MaxQueued = registry.DefaultMaxQueued
	}
	return req
}

// taskCaller is who a task runs for, as its record keeps it: the
// principal (no credential), and the agent's headers the server forwards
// upstream (forward_headers), as its request carried them.
type taskCaller struct {
	Principal *auth.Principal `json:"principal"`
	Header    http.Header     `json:"header,omitempty"`
}

// The bounds of a task's pollIntervalMs.
const (
	minTaskPoll = 250 * time.Millisecond
	maxTaskPoll = 30 * time.Second
)

// taskPoll is how often an agent is told to poll a task: the time by which
// it is expected to have moved on, within [minTaskPoll, maxTaskPoll] and
// its TTL. A call on the server is expected to last the lease item's
// running mean (Outlook.CallLength), or, before one was seen, a thirtieth
// of the tool's timeout. A running task's call ends within one call
// length. A waiting task's turn comes once the places ahead of it are
// free: with ahead tickets before it and places places, within
// (ahead/places + 1) call lengths (its first place frees within one). A
// poll then finds a waiting task running or ended, and a running one
// ended, or told to come back once its call has ended: an agent polls
// about once near its task's end, or twice, not at fractions of the wait.
func taskPoll(o lease.Outlook, running bool, timeout, ttl time.Duration) time.Duration {
	call := o.CallLength
	if call <= 0 {
		call = timeout / 30
	}
	expect := float64(call)
	if !running {
		places := max(o.Places, 1)
		expect += expect * float64(max(o.Ahead, 0)) / float64(places)
	}
	// Bounded before it is a Duration: a wait too long for one is long.
	return min(max(time.Duration(min(expect, float64(maxTaskPoll))), minTaskPoll), ttl)
}

// pollWaiting is the pollIntervalMs of a task about to wait as ticket
// under req (or waiting as it), from what this process last saw of its
// server's lease item: no store read.
func (e *taskEngine) pollWaiting(req lease.Request, ticket string, timeout, ttl time.Duration) time.Duration {
	o, _ := e.queue.Outlook(req, ticket)
	return taskPoll(o, false, timeout, ttl)
}

// Cancel asks a task to stop (TaskEngine). What it writes is decided on
// the record as stored, not as r was read: a task waiting for input (no
// ticket, no worker) ends cancelled at once; any other is first asked to
// stop in its record (cancel_requested). Once that has landed no worker
// makes its call — a worker's mark refuses such a record, and a start
// that finds it ends the task — and a poll reads a waiting one cancelled
// (waitsCancelled): what follows may fail and lose nothing. A waiting
// task's ticket is then withdrawn and the task ends "cancelled before it
// ran"; a claimed or running one's worker stops it.
func (e *taskEngine) Cancel(ctx context.Context, r *tasks.Record) (*tasks.Record, error) {
	if tasks.Terminal(r.Status) {
		return r, nil
	}
	n, err := e.update(ctx, r, func(n *tasks.Record) error {
		switch {
		case tasks.Terminal(n.Status), n.CancelRequested:
			return errSettled // ended, or asked already
		case n.Status == tasks.StatusInputRequired:
			n.Status, n.StatusMessage = tasks.StatusCancelled, "cancelled while it asked for input"
			n.InputRequests, n.InputResponses, n.RequestState = nil, nil, ""
		default:
			n.CancelRequested = true
		}
		return nil
	})
	if err != nil || !waitsCancelled(n) {
		return n, err
	}
	switch err := e.queue.Withdraw(ctx, n.ServerID, n.LeaseID, n.ID); {
	case err == nil, errors.Is(err, lease.ErrNoTicket):
		// Withdrawn, or gone (past its deadline, or claimed and given
		// back since the record was read).
	case errors.Is(err, lease.ErrClaimed):
		return n, nil // its worker ends it
	default:
		// The ask stands: the ticket's start, when its turn comes, ends
		// the task.
		e.g.log.Warn("cancelled task's ticket not withdrawn; its start ends it", "task", n.ID, "error", err.Error())
		return n, nil
	}
	c, err := e.cancelWaiting(ctx, n)
	if err != nil {
		// It reads cancelled, and no worker runs it: a later cancel
		// writes its end.
		e.g.log.Warn("cancelled task's end not written; it reads cancelled", "task", n.ID, "error", err.Error())
		return n, nil
	}
	return c, nil
}

// cancelWaiting ends task r, asked to stop while it waited with no call
// made, "cancelled before it ran" — unless its record has moved on since
// (ended, running, or waiting under another ticket).
func (e *taskEngine) cancelWaiting(ctx context.Context, r *tasks.Record) (*tasks.Record, error) {
	ticket := r.LeaseID
	return e.update(ctx, r, func(n *tasks.Record) error {
		if !waitsCancelled(n) || n.LeaseID != ticket {
			return errSettled
		}
		n.Status, n.StatusMessage = tasks.StatusCancelled, "cancelled before it ran"
		return nil
	})
}

// waitsCancelled reports whether gateway task r waits for its turn (or a
// claim that made no call) and was asked to stop: no worker makes its
// call, and it reads cancelled.
func waitsCancelled(r *tasks.Record) bool {
	return r.Kind == tasks.KindGateway && r.Status == tasks.StatusWorking && r.CancelRequested && r.StatusMessage == "queued" && r.LeaseID != ""
}

// Update brings input responses to a task in input_required (TaskEngine):
// its next round joins the queue, the call to be retried with them and
// the upstream's requestState (the record's).
func (e *taskEngine) Update(ctx context.Context, r *tasks.Record, responses json.RawMessage, _ string) (*tasks.Record, error) {
	if r.Status != tasks.StatusInputRequired {
		return r, nil
	}
	g := e.g
	srv, ferr := g.server(ctx, r.ServerID)
	if ferr != nil {
		return nil, ferr
	}
	req := g.taskRequest(ctx, srv, r.Tool, srv.TimeoutFor(r.Tool))
	ticket := e.queue.NewTaskID()
	n, err := e.update(ctx, r, func(n *tasks.Record) error {
		if n.Status != tasks.StatusInputRequired {
			return errSettled
		}
		// Answers accumulate until every request of the round has one;
		// until then the task asks for the rest.
		asked, given := map[string]json.RawMessage{}, map[string]json.RawMessage{}
		_ = json.Unmarshal(n.InputRequests, &asked)
		_ = json.Unmarshal(n.InputResponses, &given)
		var more map[string]json.RawMessage
		if err := json.Unmarshal(responses, &more); err != nil {
			return err
		}
		for k, v := range more {
			if _, ok := asked[k]; ok {
				given[k] = v
				delete(asked, k)
			}
		}
		all, err := marshalPlain(given)
		if err != nil {
			return err
		}
		n.InputResponses = all
		if len(asked) > 0 {
			n.InputRequests, err = marshalPlain(asked)
			return err
		}
		n.Status, n.StatusMessage, n.InputRequests = tasks.StatusWorking, "queued", nil
		n.LeaseID, n.RunUntil = ticket, time.Time{}
		n.PollInterval = e.pollWaiting(req, ticket, srv.TimeoutFor(r.Tool), n.TTL)
		return nil
	})
	// Once its write may have landed, the task is queued whether or not
	// its agent stays: bounded, as a requeue is.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requeueTimeout)
	defer cancel()
	if err != nil {
		// Its write may have landed unseen (its answer lost, its request
		// gone): the record says, and a task queued under this ticket
		// joins it, or it would read working with nothing to run it.
		if got, gerr := e.store.Get(qctx, r.ID); gerr == nil && got.Status == tasks.StatusWorking && got.LeaseID == ticket {
			n, err = got, nil
		}
	}
	if err != nil || n.Status != tasks.StatusWorking || n.LeaseID != ticket {
		return n, err
	}
	if _, err := e.queue.Enqueue(qctx, req, ticket, n.ID, n.CreatedAt.Add(n.TTL)); err != nil {
		if taken, ended := e.refuse(qctx, n, acquireFault(srv, r.Tool, err)); taken == nil && !ended && !refusal(err) {
			e.joinAgain(qctx, req, n) // as Create
		}
		return n, nil
	}
	e.stillWaits(qctx, n.ServerID, ticket, n.ID)
	return n, nil
}

// joinAgain joins task r's ticket once more, for a join whose outcome was
// unknown and whose failure could not be written: a join that never
// landed would leave the task waiting for nothing. Its id lands once; a
// worker started for a ticket whose call was made finds the record marked
// or ended and makes none. If this join fails too, the task reads working
// until its TTL or a cancel.
func (e *taskEngine) joinAgain(ctx context.Context, req lease.Request, r *tasks.Record) {
	jctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requeueTimeout)
	defer cancel()
	if _, err := e.queue.Enqueue(jctx, req, r.LeaseID, r.ID, r.CreatedAt.Add(r.TTL)); err != nil {
		e.g.log.Warn("task's ticket not joined again; it reads working until its TTL or a cancel", "task", r.ID, "error", err.Error())
		return
	}
	e.stillWaits(jctx, r.ServerID, r.LeaseID, r.ID)
}

// stillWaits follows the join of ticket for task id, which already had a
// record (an answered input, a requeue): a cancel that marked the record
// meanwhile found no ticket to withdraw before the join landed, and may
// have ended the task. The record is read again, and the ticket taken
// out unless the task still waits under it; a task asked to stop ends
// cancelled. (Cancel marks, then withdraws; the join lands, then reads:
// one of the two sees the other.)
func (e *taskEngine) stillWaits(ctx context.Context, key, ticket, id string) {
	n, err := e.store.Get(ctx, id)
	if err != nil || n.Status == tasks.StatusWorking && n.LeaseID == ticket && !n.CancelRequested {
		return // unread: a worker started for it reads it
	}
	if e.withdraw(ctx, lease.TaskStart{Key: key, Ticket: ticket, Task: id}) && waitsCancelled(n) && n.LeaseID == ticket {
		if _, err := e.cancelWaiting(ctx, n); err != nil {
			e.g.log.Warn("cancelled task's end not written; it reads cancelled", "task", id, "error", err.Error())
		}
	}
}

// errSettled stops an update of a record that reached a terminal status
// meanwhile.
var errSettled = errors.New("task: settled meanwhile")

// untoldKey marks the context of a task's settling that no agent was told
// of (its creation refused): it counts in no metric.
type untoldKey struct{}

// update applies change to the record as stored, reading it again after a
// conflict; a change refused with errSettled leaves it as it is. A change
// that ends the task counts in its status's metric (a change never applies
// to a task that had ended).
func (e *taskEngine) update(ctx context.Context, r *tasks.Record, change func(*tasks.Record) error) (*tasks.Record, error) {
	for range 8 {
		n, err := e.store.Update(ctx, r, change)
		switch {
		case err == nil:
			// Its status changed here: the next poll reads it.
			e.g.polls.forget(n.Owner, n.ID)
			if tasks.Terminal(n.Status) && !tasks.Terminal(r.Status) && ctx.Value(untoldKey{}) == nil {
				_ = e.g.deps.Metrics.Task(n.ServerID, n.Tool, string(n.Status))
			}
			return n, nil
		case errors.Is(err, errSettled):
			return r, nil
		case !errors.Is(err, tasks.ErrConflict):
			return nil, err
		}
		if r, err = e.store.Get(ctx, r.ID); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("task %s: its record kept changing", r.ID)
}

// RunTask is a task's worker (see EnableTasks): it claims the task's place
// and runs its call, writing the outcome into its record. It returns once
// the call was answered or cut off (an exchange cut off goes on in the
// background until its upstream stopped: Drain waits for it). A start that
// finds nothing to do (the task settled or cancelled, its ticket claimed
// by another start, its turn not come) returns nil.
func (g *Gateway) RunTask(ctx context.Context, ts lease.TaskStart) (err error) {
	// Its log record times the whole worker, as a request's record times
	// the request: under Lambda, the invocation.
	start := time.Now()
	defer func() {
		// A worker's panic is its task's, never the process's: logged as a
		// request's is; the task's lease lapses and its record reads as
		// stopped past its run_until.
		if p := recover(); p != nil {
			g.log.Error("panic", "task", ts.Task, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("task %s: worker panicked", ts.Task)
		}
	}()
	e, ok := g.deps.Tasks.(*taskEngine)
	if !ok {
		return errors.New("task: this gateway runs no tasks")
	}
	r, err := e.store.Get(ctx, ts.Task)
	if errors.Is(err, tasks.ErrNotFound) {
		e.withdraw(ctx, ts)
		return nil
	}
	if err != nil {
		// Its ticket stays: the start is made again (lease.StartTimeout).
		return err
	}
	// A record marked running under this ticket was marked by an earlier
	// claim of it, whose worker died or is late (its lease lapsed, and the
	// ticket waits again): its call may have been made, so it is never
	// made again; the ticket goes (once no worker holds it), and the
	// record's run_until tells its end.
	marked := r.StatusMessage == "running" && r.LeaseID == ts.Ticket
	if tasks.Terminal(r.Status) || r.CancelRequested || r.Kind != tasks.KindGateway || ts.Ticket != r.LeaseID || marked {
		e.withdraw(ctx, ts)
		if r.CancelRequested && !tasks.Terminal(r.Status) && r.Kind == tasks.KindGateway {
			// Cancelled before it ran, unless another start of it has
			// claimed its place and runs it: Cancel judges which.
			_, err := e.Cancel(ctx, r)
			return err
		}
		return nil
	}
	var who taskCaller
	var params mcp.CallToolParams
	if err := json.Unmarshal(r.Principal, &who); err != nil || who.Principal == nil {
		if e.withdraw(ctx, ts) {
			e.settle(ctx, r, nil, fault.New(fault.Internal, "the task's record cannot be read"), false)
		}
		return nil
	}
	p, fe := g.currentPrincipal(ctx, who.Principal)
	if fe != nil {
		if fe.Code == fault.StoreUnavailable {
			return fe // its ticket stays: the start is made again
		}
		if e.withdraw(ctx, ts) {
			e.settle(ctx, r, nil, fe, false)
		}
		return nil
	}
	var args struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	raw := roundParams(r)
	if err := errors.Join(json.Unmarshal(raw, &params), json.Unmarshal(raw, &args)); err != nil {
		if e.withdraw(ctx, ts) {
			e.settle(ctx, r, nil, fault.Wrap(err, fault.Internal, "the task's call cannot be read"), false)
		}
		return nil
	}
	if args.Arguments != nil {
		params.Arguments = args.Arguments // as a call's arguments reach the gateway: JSON, checked as such
	}
	rec := &record{id: "task-" + r.ID, principal: p, method: "tasks/run", tool: clip.String(r.Tool, clip.Name)}
	ctx = context.WithValue(ctx, recordCtx, rec)
	ctx = context.WithValue(ctx, callerCtx, &caller{principal: p, header: who.Header})
	ctx = context.WithValue(ctx, taskRunKey{}, true)
	if t := g.deps.Tracer; t != nil {
		// A trace of its own, linked to the request that made the task.
		var end func(RequestEnd)
		ctx, end = t.Task(ctx, TraceMeta{Traceparent: r.Traceparent, Tracestate: r.Tracestate},
			CallInfo{RequestID: rec.id, ServerID: r.ServerID, Tool: rec.tool, Principal: p})
		defer func() { end(rec.traceEnd(0)) }()
	}
	res, ferr, ran, cancelled, closing := e.run(ctx, ts, r, &params)
	if !ran {
		return nil
	}
	if cancelled {
		rec.outcome = "cancelled"
	}
	// An answered call's slot is given back (closing: the lease's release,
	// and the start of the task whose turn that makes) while the outcome
	// is written, and the worker ends once both are done. Neither's outcome
	// conditions the other, and either order is safe: an outcome written
	// before its release (or with the release lost) leaves the lease to
	// lapse, and the worker started for the ticket then finds the record
	// ended (or no longer naming the ticket) and makes no call; a release
	// landed before the outcome (or with it lost) leaves the record marked
	// running, and past its run_until it reads as failed, as for a worker
	// that died during its call. The slot is still held until the upstream
	// stopped: closing gives it back only then.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		defer func() {
			if p := recover(); p != nil {
				g.log.Error("panic", "task", ts.Task, "panic", p, "stack", string(debug.Stack()))
			}
		}()
		if closing != nil {
			closing()
		}
	}()
	// Even when the outcome's write panics (recovered below, the worker
	// failing): the release in flight is never left to a process that
	// may be frozen once the worker has returned.
	defer func() { <-closed }()
	if ferr == nil && res != nil && res.NeedsInput() {
		e.askInput(context.WithoutCancel(ctx), r, res)
	} else {
		e.settle(context.WithoutCancel(ctx), r, res, ferr, cancelled)
	}
	<-closed
	g.logTask(rec, r, start)
	return nil
}

// run claims the task's places and makes its call; ran is false when the
// claim found it was not this start's to run, cancelled true when the
// task's cancellation cut the call off.
func (e *taskEngine) run(ctx context.Context, ts lease.TaskStart, r *tasks.Record, params *mcp.CallToolParams) (res *mcp.CallToolResult, ferr *fault.Error, ran, cancelled bool, closing func()) {
	g := e.g
	srv, ferr := g.server(ctx, r.ServerID)
	if ferr != nil {
		if !e.withdraw(ctx, ts) {
			return nil, nil, false, false, nil // another start runs it
		}
		return nil, ferr, true, false, nil
	}
	c := g.newCall(ctx, srv, params)
	defer func() {
		if c.counted {
			g.obs.Finished(ctx, CallEnd{CallInfo: c.info(), Server: srv, Latency: time.Since(c.start), Lease: c.ls, Result: res, Fault: ferr})
		}
	}()
	if ferr := g.checkPolicy(ctx, c); ferr != nil {
		if !e.withdraw(ctx, ts) {
			return nil, nil, false, false, nil // another start runs it
		}
		return nil, ferr, true, false, nil
	}
	c.req = g.taskRequest(ctx, srv, c.tool, c.timeout)
	{
		ls, err := e.queue.Claim(ctx, c.req, ts.Ticket, ts.Mark)
		switch {
		case errors.Is(err, lease.ErrNotYourTurn), errors.Is(err, lease.ErrStartLapsed), errors.Is(err, lease.ErrClaimed), errors.Is(err, lease.ErrNoTicket):
			c.counted = false // not this start's to run: no call was made
			return nil, nil, false, false, nil
		case err != nil:
			fe := acquireFault(srv, c.tool, err)
			if ctx.Err() != nil || fe.Code == fault.StoreUnavailable {
				// The worker ends (its invocation's time, a shutdown) or
				// the store fails: no call was made, the task stays queued
				// (its ticket kept), and a worker is started again.
				c.counted = false
				g.log.Warn("task worker's claim failed; its task waits to be started again", "task", ts.Task, "server_id", r.ServerID, "error", err.Error())
				return nil, nil, false, false, nil
			}
			return nil, fe, true, false, nil
		}
		c.leases, c.ls = []*lease.Lease{ls}, ls
		c.rec.leaseID, c.rec.waited = ls.ID(), time.Since(r.CreatedAt)
		if kr, ok := g.principalRequest(ctx, c.timeout); ok && kr.TakesPlace() {
			kl, err := g.deps.Limiter.Acquire(ctx, kr)
			if err != nil {
				g.finish(ctx, ls, lease.Unused, c.rec)
				return nil, principalFault(err), true, false, nil
			}
			c.leases = append(c.leases, kl)
		}
	}
	callEnd, short := g.callEnd(ctx, c)
	// The claim has just read the item: what it says of the calls' length.
	running, _ := e.queue.Outlook(c.req, ts.Ticket)
	settled, taken, stop, attempt := false, false, false, 0
	// Its own mark is told by the attempt and the run_until it wrote: a
	// later claim's call ends later than this one's lease, an earlier
	// claim's may carry the same attempt (written on the record as this
	// worker read it before its claim).
	var until time.Time
	mine := func(n *tasks.Record) bool {
		return attempt > 0 && n.Attempt == attempt && n.LeaseID == ts.Ticket && n.RunUntil.Equal(until)
	}
	marked, err := e.update(ctx, r, func(n *tasks.Record) error {
		if tasks.Terminal(n.Status) {
			settled = true
			return errSettled
		}
		if stop = waitsCancelled(n); stop {
			// Cancelled since its start read it: no call.
			return errSettled
		}
		if n.StatusMessage == "running" && n.LeaseID == ts.Ticket && !mine(n) {
			// Marked by an earlier claim of this ticket (its worker died
			// or is late, its lease lapsed): its call may have been made,
			// so this claim makes none.
			taken = true
			return errSettled
		}
		taken = false
		n.StatusMessage, n.Attempt = "running", n.Attempt+1
		n.RunUntil = callEnd.Add(srv.CancelGrace + lease.DefaultMargin + taskWatch).Truncate(time.Millisecond)
		n.PollInterval = taskPoll(running, true, c.timeout, n.TTL)
		attempt, until = n.Attempt, n.RunUntil
		return nil
	})
	if err != nil {
		// Whether the mark landed is unknown: the record says. The call
		// is made only on a record marked running, so that a creation
		// that fails the task meanwhile (see refuse) never does so while
		// its call runs.
		n, gerr := e.store.Get(ctx, r.ID)
		switch {
		case gerr == nil && tasks.Terminal(n.Status):
			settled = true
		case gerr == nil && mine(n):
			marked, err = n, nil // it landed
		}
	}
	// A worker that marked the record past its call's deadline may have
	// let its lease lapse, and another claim of the ticket take the place
	// and mark the record as this one read it: it makes no call. Within
	// it, no other claim can have come (a lease lapses only past its
	// call's deadline), so the mark it saw was its own.
	late := err == nil && !settled && !taken && !stop && !time.Now().Before(c.ls.CallDeadline)
	if stop || settled || taken || late || err != nil {
		c.counted = false // no call is made under this claim
	}
	if stop && err == nil {
		// Its place and ticket are given back unused, and the task ends
		// cancelled, as one withdrawn (Cancel).
		for _, ls := range slices.Backward(c.leases) {
			g.finish(ctx, ls, lease.Unused, c.rec)
		}
		if _, err := e.cancelWaiting(context.WithoutCancel(ctx), marked); err != nil {
			g.log.Warn("task cancelled before its call not written so; its record reads cancelled", "task", r.ID, "error", err.Error())
		}
		return nil, nil, false, false, nil
	}
	if settled || taken || late || err != nil {
		// It ended before its call was made (its join refused although
		// it landed, see refuse), an earlier claim marked it, or it could
		// not be marked running (or only late): the call is not made, its
		// place given back unused (with its ticket).
		released := false
		for _, ls := range slices.Backward(c.leases) {
			released = g.finish(ctx, ls, lease.Unused, c.rec)
		}
		if late {
			g.log.Warn("task worker marked its record past its call's deadline; no call made", "task", r.ID)
		}
		if !settled && !taken && (!late || released) {
			// Its release removed lease and ticket on the expiry this
			// claim wrote: no other claim of the ticket came since, so a
			// mark of this attempt's on the record is its own, and no
			// call was made under it. It is taken back before the ticket
			// waits again, or the next start would take it for a call
			// that may have run.
			if released && attempt > 0 && !e.unmark(ctx, r, mine) {
				released = false
			}
			if !late {
				g.log.Warn("task record not marked running; its ticket is queued again", "task", r.ID, "error", err.Error())
			}
			e.requeue(ctx, c.req, ts, r, released)
		}
		return nil, nil, false, false, nil
	}
	// From here r is the record as marked: the outcome's write is
	// conditioned on it, not on the read before the mark, which the mark
	// made stale (a write refused, and a read, for nothing).
	*r = *marked
	g.obs.Acquired(ctx, c.info(), c.ls)
	g.obs.Waited(ctx, c.info(), c.rec.waited)
	// The call is cut off when the task is cancelled, as a synchronous
	// call is when its caller goes away.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go e.watch(cctx, cancel, r.ID)
	f := g.startFlight(cctx, srv, params, nil, c.leases, c.req.Hold, callEnd)
	if cut := g.await(cctx, f, callEnd); cut != nil {
		return nil, g.cutOff(f, cut, short), true, ctx.Err() == nil && errors.Is(cut, context.Canceled), nil
	}
	// The upstream has answered: the slot is given back (closing) while
	// the worker writes the outcome (see RunTask).
	res, ferr, closing = g.answer(f, c.rec, short)
	return res, ferr, true, false, closing
}

// watch cancels a running task's call once its record asks so.
func (e *taskEngine) watch(ctx context.Context, cancel context.CancelFunc, id string) {
	t := time.NewTicker(taskWatch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r, err := e.store.Get(ctx, id); err == nil && r.CancelRequested {
			cancel()
			return
		}
	}
}

// roundParams are the params of a task's call in its current round: the
// agent's, with the input responses tasks/update brought and the
// upstream's requestState, when the upstream asked for input.
func roundParams(r *tasks.Record) json.RawMessage {
	if len(r.InputResponses) == 0 && r.RequestState == "" {
		return r.Params
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(r.Params, &m) != nil {
		return r.Params
	}
	if len(r.InputResponses) > 0 {
		m["inputResponses"] = r.InputResponses
	}
	if r.RequestState != "" {
		m["requestState"], _ = json.Marshal(r.RequestState)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return r.Params
	}
	return out
}

// askInput puts a task whose upstream asked for input in input_required:
// its requests for the agent, the upstream's state for the next round.
func (e *taskEngine) askInput(ctx context.Context, r *tasks.Record, res *mcp.CallToolResult) {
	reqs, err := marshalPlain(res.InputRequests)
	if err != nil {
		e.settle(ctx, r, nil, fault.Wrap(err, fault.UpstreamError, "the tool's input requests cannot be encoded"), false)
		return
	}
	_, err = e.outcome(ctx, r, func(n *tasks.Record) error {
		if tasks.Terminal(n.Status) {
			return errSettled
		}
		if n.CancelRequested {
			// Asked to stop while its call ran: its round ended, it asks
			// nothing of the agent.
			n.Status, n.StatusMessage = tasks.StatusCancelled, "cancelled while it ran"
			n.Result, n.Error, n.InputRequests, n.InputResponses, n.RequestState = nil, nil, nil, nil, ""
			n.LeaseID, n.RunUntil = "", time.Time{}
			return nil
		}
		n.Status, n.StatusMessage = tasks.StatusInputRequired, "the tool asks for input: answer with tasks/update"
		n.InputRequests, n.RequestState, n.InputResponses, n.LeaseID, n.RunUntil = reqs, res.RequestState, nil, "", time.Time{}
		return nil
	})
	if errors.Is(err, tasks.ErrTooLarge) {
		e.settle(ctx, r, nil, fault.New(fault.UpstreamError, "the tool's input requests are larger than this gateway keeps (MAX_TASK_RESULT_BYTES)"), false)
		return
	}
	if err != nil {
		e.g.log.Error("task input requests not stored", "task", r.ID, "error", err.Error())
	}
}

// requeue puts back in the queue the ticket of task r, whose worker gave
// its claimed place back unused without making its call: a task whose
// record it could not mark running waits again for its turn, under the
// same ticket (the record names it), rather than being lost. released
// says the ticket's lease was released: a join cannot land beside a lease
// of the same id. When it cannot be queued again, the task fails, as one
// that never ran.
func (e *taskEngine) requeue(ctx context.Context, req lease.Request, ts lease.TaskStart, r *tasks.Record, released bool) {
	ctx = context.WithoutCancel(ctx)
	err := errors.New("its place could not be given back")
	if released {
		// Enqueue tries again while others' writes refuse its join, until
		// its context ends: bounded here, as a release is, so that a
		// worker never outlives its invocation on a key that keeps moving.
		qctx, cancel := context.WithTimeout(ctx, requeueTimeout)
		if _, err = e.queue.Enqueue(qctx, req, ts.Ticket, r.ID, r.CreatedAt.Add(r.TTL)); err == nil {
			e.stillWaits(qctx, ts.Key, ts.Ticket, r.ID)
		}
		cancel()
	}
	if err != nil {
		// Its join may have landed (its answer lost) and a worker marked
		// the record since: that worker runs it, and ends it.
		taken := func(n *tasks.Record) bool { return n.StatusMessage == "running" && n.LeaseID == ts.Ticket }
		e.g.log.Warn("task ticket not queued again", "task", r.ID, "lease", ts.Ticket, "error", err.Error())
		e.settleUnless(ctx, r, nil, fault.Wrap(err, fault.StoreUnavailable, "the task could not be started: its record could not be kept"), false, taken)
	}
}

// unmark takes back the running mark of a worker's (mine) on task r's
// record, if it landed, for a worker that made no call under it and whose
// claim was the ticket's last (see run); it reports whether the task may
// wait again: false when the record could not be written, or has ended.
// It is written as an outcome is (outcome): past the mark's run_until a
// poll may have read the task failed, and it ends so.
func (e *taskEngine) unmark(ctx context.Context, r *tasks.Record, mine func(*tasks.Record) bool) bool {
	ctx = context.WithoutCancel(ctx)
	// As stored: the record read before the mark shows none.
	n, err := e.store.Get(ctx, r.ID)
	if err == nil {
		n, err = e.outcome(ctx, n, func(n *tasks.Record) error {
			if tasks.Terminal(n.Status) || n.StatusMessage != "running" || !mine(n) {
				return errSettled // not its mark: nothing to take back
			}
			n.StatusMessage, n.RunUntil = "queued", time.Time{}
			return nil
		})
	}
	if err != nil {
		e.g.log.Warn("task record's running mark not taken back", "task", r.ID, "error", err.Error())
	}
	return err == nil && !tasks.Terminal(n.Status)
}

// withdraw takes a start's ticket out of the queue, if it has one; out
// reports whether it did (or there was none), so that no worker runs the
// task: only then may a start that will not run it end it. Another start
// of the same ticket may have claimed it and be running its call.
func (e *taskEngine) withdraw(ctx context.Context, ts lease.TaskStart) (out bool) {
	if ts.Ticket == "" {
		return true
	}
	err := e.queue.Withdraw(ctx, ts.Key, ts.Ticket, ts.Task)
	if err != nil && !errors.Is(err, lease.ErrNoTicket) && !errors.Is(err, lease.ErrClaimed) {
		e.g.log.Warn("task ticket not withdrawn", "server_id", ts.Key, "lease", ts.Ticket, "error", err.Error())
	}
	return err == nil
}

// settle writes a task's outcome into its record: completed with the
// call's result (a fault the agent would have got as a tool error
// included), failed with a JSON-RPC error for what a synchronous call
// answers as a protocol error, or cancelled.
func (e *taskEngine) settle(ctx context.Context, r *tasks.Record, res *mcp.CallToolResult, fe *fault.Error, cancelled bool) {
	e.settleUnless(ctx, r, res, fe, cancelled, nil)
}

// refuse settles task r, whose join Enqueue failed with fe, as failed —
// unless a worker took it meanwhile. The join may have landed although
// Enqueue failed (its answer lost, or its ticket claimed and gone before
// Enqueue looked again), and the ticket's worker made its call. A worker
// marks the record running (Attempt) before its call and makes no call on
// a record settled before that mark: so either the task fails here or its
// call is made, never both. taken is the record a worker took; ended
// reports that the task ended with no call made, here or by a worker that
// gave it up (neither: its end could not be written, and a worker may yet
// run it).
func (e *taskEngine) refuse(ctx context.Context, r *tasks.Record, fe *fault.Error) (taken *tasks.Record, ended bool) {
	took := func(n *tasks.Record) bool { return n.Attempt > r.Attempt }
	if e.settleUnless(ctx, r, nil, fe, false, took) {
		return nil, true
	}
	n, err := e.store.Get(ctx, r.ID)
	switch {
	case err != nil:
		return nil, false
	case took(n):
		return n, false
	}
	// Ended otherwise with no mark (a worker that gave it up), or not.
	return nil, tasks.Terminal(n.Status)
}

// refusal reports whether Enqueue's err is the queue's refusal of the
// join (full, an open breaker or pause, a rate), which no join landed
// before.
func refusal(err error) bool {
	var full *lease.FullError
	var open *lease.CircuitOpenError
	var rl *lease.RateLimitedError
	return errors.As(err, &full) || errors.As(err, &open) || errors.As(err, &rl)
}

// settleUnless is settle, but for a record that has ended or of which
// skip holds; stored reports whether it wrote the outcome.
func (e *taskEngine) settleUnless(ctx context.Context, r *tasks.Record, res *mcp.CallToolResult, fe *fault.Error, cancelled bool, skip func(*tasks.Record) bool) (stored bool) {
	var result, rpcErr json.RawMessage
	status, msg := tasks.StatusCompleted, ""
	switch {
	case cancelled:
		status, msg = tasks.StatusCancelled, "cancelled while it ran"
	case fe != nil && taskProtocolError(fe):
		status, msg = tasks.StatusFailed, fe.Message
		var ue *upstream.Error
		if re, ok := specError(fe); ok {
			rpcErr, _ = marshalPlain(rpcErrorObject{Code: re.Code, Message: re.Message})
		} else if errors.As(fe, &ue) && ue.Kind == upstream.KindRPC && ue.RPC != nil {
			// The upstream's own JSON-RPC error, as a synchronous call
			// relays it.
			var data any
			if len(ue.RPC.Data) > 0 {
				data = ue.RPC.Data
			}
			msg = ue.RPC.Message
			rpcErr, _ = marshalPlain(rpcErrorObject{Code: ue.RPC.Code, Message: ue.RPC.Message, Data: data})
		} else {
			data, _ := fault.MarshalJSON(fe.Detail())
			rpcErr, _ = marshalPlain(rpcErrorObject{Code: jsonrpc.CodeInvalidParams, Message: fe.Message, Data: json.RawMessage(data)})
		}
	case fe != nil:
		res = toolError(&record{}, fe)
		fallthrough
	default:
		b, err := marshalPlain(res)
		if err != nil {
			status, msg = tasks.StatusFailed, "the task's result cannot be encoded"
		}
		result = b
	}
	skipped := false
	_, err := e.outcome(ctx, r, func(n *tasks.Record) error {
		if tasks.Terminal(n.Status) || skip != nil && skip(n) {
			skipped = true
			return errSettled
		}
		skipped = false
		if waitsCancelled(n) {
			// Asked to stop before any call was made: it reads
			// cancelled already, and ends so, whatever ended its start.
			n.Status, n.StatusMessage, n.Result, n.Error = tasks.StatusCancelled, "cancelled before it ran", nil, nil
			return nil
		}
		n.Status, n.StatusMessage, n.Result, n.Error = status, clip.String(msg, clip.Message), result, rpcErr
		if status == tasks.StatusCancelled {
			n.Result, n.Error = nil, nil
		}
		return nil
	})
	if errors.Is(err, tasks.ErrTooLarge) {
		_, err = e.outcome(ctx, r, func(n *tasks.Record) error {
			if tasks.Terminal(n.Status) {
				return errSettled
			}
			n.Status, n.Result = tasks.StatusFailed, nil
			n.StatusMessage = "the task's result is larger than this gateway keeps (MAX_TASK_RESULT_BYTES)"
			n.Error, _ = marshalPlain(rpcErrorObject{Code: jsonrpc.CodeInternalError, Message: n.StatusMessage})
			return nil
		})
	}
	if err != nil {
		e.g.log.Error("task outcome not stored", "task", r.ID, "error", err.Error())
	}
	return err == nil && !skipped
}

// outcome writes change, a worker's outcome of task r, into its record.
// A running task's (r marked running: its run_until set) is written while
// polls still read it running: before its run_until less
// lease.DefaultMargin (their clocks may be ahead, and the write is in
// flight), the write's context ending then. Past that, a poll may have
// read the task stopped, failed (detailedTask): it is written failed so,
// and a terminal status once read never changes.
func (e *taskEngine) outcome(ctx context.Context, r *tasks.Record, change func(*tasks.Record) error) (*tasks.Record, error) {
	if r.RunUntil.IsZero() {
		return e.update(ctx, r, change)
	}
	by := r.RunUntil.Add(-lease.DefaultMargin)
	if time.Now().Before(by) {
		wctx, cancel := context.WithDeadline(ctx, by)
		n, err := e.update(wctx, r, func(n *tasks.Record) error {
			if !time.Now().Before(by) {
				return context.DeadlineExceeded
			}
			return change(n)
		})
		late := wctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)
		cancel()
		if !late {
			return n, err
		}
		e.g.log.Warn("task outcome came past its run_until; written failed, as polls may have read it", "task", r.ID)
	}
	return e.update(ctx, r, func(n *tasks.Record) error {
		if n.Status != tasks.StatusWorking || n.StatusMessage != "running" || !n.RunUntil.Equal(r.RunUntil) {
			// No longer the running record polls would read failed: the
			// late write landed after all (its answer late), or another
			// change came.
			return errSettled
		}
		stopped(n)
		return nil
	})
}

// stoppedMessage is the status message of a task whose worker stopped
// before it wrote its call's outcome.
const stoppedMessage = "the task's worker stopped before it wrote the call's outcome; the call may or may not have run"

// stopped makes r what a poll reads of a task whose worker stopped before
// it wrote its call's outcome: failed, saying so.
func stopped(r *tasks.Record) {
	r.Status, r.StatusMessage = tasks.StatusFailed, stoppedMessage
	r.Result, r.InputRequests, r.InputResponses, r.RequestState = nil, nil, nil, ""
	r.Error, _ = marshalPlain(rpcErrorObject{Code: jsonrpc.CodeInternalError, Message: stoppedMessage})
}

// taskProtocolError reports whether a synchronous call would have answered
// fe as a protocol error (callFault, rpcError): the protocol's own codes,
// the upstream's JSON-RPC error, an unknown tool, arguments refused.
func taskProtocolError(fe *fault.Error) bool {
	var ue *upstream.Error
	if _, ok := specError(fe); ok || errors.As(fe, &ue) && ue.Kind == upstream.KindRPC && ue.RPC != nil {
		return true
	}
	return !errors.Is(fe.Cause, errSchema) && (fe.Code == fault.NotFound || fe.Code == fault.BadRequest)
}

// logTask logs one record for a task's run, as a request's is logged.
func (g *Gateway) logTask(rec *record, r *tasks.Record, start time.Time) {
	rec.serverID = r.ServerID
	attrs := []any{"request_id", rec.id, "task", r.ID, "duration_ms", time.Since(start).Milliseconds()}
	attrs = append(attrs, rec.principal.LogAttrs()...)
	g.log.Info("task", rec.callAttrs(attrs)...)
}

// SweepTasks starts again the tasks whose turn came but whose worker never
// claimed their place (a start lost with its instance, an invocation never
// delivered): for each server, one read of its lease item, and a start for
// each task due (lease.StartDue) — every server, as tasks made while a
// tool ran as a task wait on once its item no longer says so; then, for a
// server running tasks or with tasks waiting, how many wait, an EMF
// record (TasksWaiting). A schedule runs it.
func (g *Gateway) SweepTasks(ctx context.Context) error {
	e, ok := g.deps.Tasks.(*taskEngine)
	if !ok {
		return nil
	}
	servers, _, err := g.deps.Registry.All(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, srv := range servers {
		req := g.taskRequest(ctx, srv, "", srv.Timeout)
		if err := e.queue.StartDue(ctx, req); err != nil {
			errs = append(errs, fmt.Errorf("server %s: %w", srv.ID, err))
			continue
		}
		// The item StartDue read: how many tasks wait there.
		if o, ok := e.queue.Outlook(req, ""); ok && (o.Tasks > 0 || runsTasks(srv)) {
			_ = g.deps.Metrics.TasksWaiting(srv.ID, o.Tasks)
		}
	}
	return errors.Join(errs...)
}

// runsTasks reports whether a tool of srv is one the gateway runs as a
// task (its item sets task_support optional or required).
func runsTasks(srv *registry.Server) bool {
	for _, t := range srv.Tools {
		if t.TaskSupport == registry.TaskOptional || t.TaskSupport == registry.TaskRequired {
			return true
		}
	}
	return false
}

// currentPrincipal is the principal a task runs for, as it is now: a key
// is read again (through the keys cache), so that a key revoked, narrowed
// or limited since the task was made is as it is for any call; an OAuth
// or IAM principal runs as it was when the task was made (its token is
// not kept).
func (g *Gateway) currentPrincipal(ctx context.Context, was *auth.Principal) (*auth.Principal, *fault.Error) {
	keys, ok := g.deps.Auth.(interface {
		KeyPrincipal(ctx context.Context, stateKey string) (*auth.Principal, error)
	})
	if !ok || was.Kind != auth.KindKey {
		return was, nil
	}
	p, err := keys.KeyPrincipal(ctx, was.StateKey)
	switch {
	case errors.Is(err, auth.ErrBadKey):
		return nil, fault.New(fault.Unauthorized, "the key that made the task was revoked")
	case err != nil:
		return nil, fault.Wrap(err, fault.StoreUnavailable, "cannot read the task's key right now").WithRetryAfter(storeRetryAfter)
	}
	return p, nil
}
