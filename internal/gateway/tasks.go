package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// MCP tasks (SEP-2663), the agent's side: tasks/get, tasks/update and
// tasks/cancel, for the gateway's own tasks and for relayed ones alike.
//
// A task handle is the id of a task record, made by the gateway whoever
// runs the task: ≥128 random bits, bound to the principal that created the
// task and to its server. A handle that is malformed, unknown, expired,
// another principal's, another server's (on /mcp/{server_id}), or of a
// server or tool the caller may no longer use, is answered the same way:
// invalid params, "unknown task". On /mcp a handle finds its server
// through its record: the agent names only the task.
//
// Every request is checked in this order: Mcp-Name equals params.taskId
// (-32020; serveMCP, before anything else reads the request), the request
// declared the extension (-32021), the handle (-32602), then one
// consistent read of the record. tasks/get of a gateway task is that read
// and nothing else (or, sooner than the task's interval after the
// caller's last, that last read's record: taskPolls); of a relayed task, one request to the upstream, with
// its own id (in the body and in Mcp-Name), the answer's ids rewritten
// back. No tasks/ request takes a place under the server's cap.

// taskMethods are the extension's methods the gateway serves; tasks/result
// and tasks/list, which SEP-2663 removed, are unknown methods.
var taskMethods = map[string]bool{"tasks/get": true, "tasks/update": true, "tasks/cancel": true}

// taskRequestParams are a tasks/ request's params, read loosely so that
// each field is checked and answered here.
type taskRequestParams struct {
	mcp.ParamsBase
	TaskID         json.RawMessage `json:"taskId"`
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
}

// registerTaskMethods makes s accept the extension's methods; the
// middleware answers them.
func registerTaskMethods(s *mcp.Server) {
	for m := range taskMethods {
		if err := mcp.AddReceivingCustomMethod(s, m, func(context.Context, *mcp.ServerSession, *taskRequestParams) (*objectResult, error) {
			return nil, errors.New("unreachable: tasks/ requests are answered by the gateway's middleware")
		}); err != nil {
			panic(fmt.Sprintf("register %s: %v", m, err))
		}
	}
}

// errUnknownTask answers every handle the caller cannot use, whatever the
// reason, so that none can be told from another.
var errUnknownTask = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown task: no task of this caller has this id (it may have expired)"}

// checkTaskName checks, for a tasks/ request of protocol 2026-07-28 or
// later, that its Mcp-Name header is its params.taskId (SEP-2663, as
// SEP-2243 checks other names): nil when it is, or when taskId is not a
// string (refused later, as invalid params).
func checkTaskName(h http.Header, taskID json.RawMessage) error {
	var id string
	if json.Unmarshal(taskID, &id) != nil {
		return nil
	}
	name := h.Get("Mcp-Name")
	if rest, ok := strings.CutPrefix(name, "=?base64?"); ok && strings.HasSuffix(rest, "?=") {
		if b, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(rest, "?=")); err == nil {
			name = string(b)
		}
	}
	switch {
	case name == "":
		return errors.New("missing required Mcp-Name header: a tasks/ request names its task there")
	case name != id:
		return errors.New("header mismatch: the Mcp-Name header is not the request's params.taskId")
	}
	return nil
}

// objectResult is a result given as the members of a JSON object.
type objectResult struct {
	mcp.ResultBase
	fields map[string]json.RawMessage
}

func (r *objectResult) MarshalJSON() ([]byte, error) {
	out := make(map[string]json.RawMessage, len(r.fields)+1)
	for k, v := range r.fields {
		out[k] = v
	}
	if len(r.Meta) > 0 {
		m, err := marshalPlain(r.Meta)
		if err != nil {
			return nil, err
		}
		out["_meta"] = m
	}
	return marshalPlain(out)
}

// clone returns r with maps of its own (their values shared: never
// changed), for a result kept and answered more than once.
func (r *objectResult) clone() *objectResult {
	return &objectResult{ResultBase: mcp.ResultBase{Meta: maps.Clone(r.Meta)}, fields: maps.Clone(r.fields)}
}

func rawString(s string) json.RawMessage {
	b, _ := marshalPlain(s)
	return b
}

// ack is the empty acknowledgement of tasks/update and tasks/cancel.
func ack() *objectResult {
	return &objectResult{fields: map[string]json.RawMessage{"resultType": rawString(resultTypeComplete)}}
}

// taskRequest answers a tasks/ request.
func (sc *mcpScope) taskRequest(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
	p, _ := req.GetParams().(*taskRequestParams)
	if p == nil {
		p = &taskRequestParams{}
	}
	if !sc.declaresTasks(p.Meta) {
		return nil, sc.refuseRPC(missingTasks(method+" needs the client capability "+tasksExtension+", which this request did not declare in its _meta"), fault.BadRequest)
	}
	var id string
	if json.Unmarshal(p.TaskID, &id) != nil {
		return nil, sc.refuseRPC(&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params.taskId must be a string"}, fault.BadRequest)
	}
	var responses json.RawMessage
	if method == "tasks/update" {
		if responses = p.InputResponses; !isObject(responses) {
			return nil, sc.refuseRPC(&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params.inputResponses must be an object"}, fault.BadRequest)
		}
		if len(responses) > tasks.MaxInputResponsesBytes {
			// More than a task keeps, whoever runs it: nothing is read or
			// sent for it.
			return nil, sc.tooMuchInput()
		}
	}
	r, srv, err := sc.findTask(ctx, id, method == "tasks/get")
	if err != nil {
		return nil, err
	}
	if r.Kind == tasks.KindRelay {
		return sc.relayTaskRequest(ctx, method, r, srv, responses)
	}
	return sc.gatewayTaskRequest(ctx, method, r, responses)
}

// tooMuchInput refuses a tasks/update whose inputResponses are more than a
// task keeps.
func (sc *mcpScope) tooMuchInput() error {
	return sc.refuseRPC(&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
		Message: fmt.Sprintf("params.inputResponses are larger than a task keeps (%d bytes in all)", tasks.MaxInputResponsesBytes)}, fault.BadRequest)
}

// refuseRPC notes a protocol refusal in the request's record and returns
// it.
func (sc *mcpScope) refuseRPC(e *jsonrpc.Error, code fault.Code) error {
	sc.rec.fail(fault.New(code, "%s", e.Message))
	return e
}

// findTask reads the record of the handle id and checks that the caller
// may use it, and returns the server it belongs to; any handle the caller
// may not use is errUnknownTask. A poll (tasks/get) of a gateway task
// sooner than its interval after the caller's last is answered from the
// record that read gave (taskPolls), without reading the store.
func (sc *mcpScope) findTask(ctx context.Context, id string, poll bool) (*tasks.Record, *registry.Server, error) {
	unknown := func() error {
		sc.rec.fail(fault.New(fault.NotFound, "%s", errUnknownTask.Message))
		return errUnknownTask
	}
	if !tasks.ValidID(id) || !sc.g.tasksOn() {
		return nil, nil, unknown()
	}
	p := sc.caller.principal
	var r *tasks.Record
	if poll && p != nil {
		r = sc.g.polls.get(p.StateKey, id, time.Now())
	}
	if r == nil {
		gen, read := sc.g.polls.begin(), time.Now()
		var err error
		r, err = sc.g.deps.TaskStore.Get(ctx, id)
		switch {
		case errors.Is(err, tasks.ErrNotFound):
			return nil, nil, unknown()
		case err != nil:
			fe := fault.Wrap(err, fault.StoreUnavailable, "cannot read tasks right now").WithRetryAfter(storeRetryAfter)
			return nil, nil, sc.rpcError(fe, err)
		}
		if poll && r.Kind == tasks.KindGateway && p != nil && r.Owner == p.StateKey {
			sc.g.polls.put(r, read, gen)
		}
	}
	if p == nil || r.Owner == "" || r.Owner != p.StateKey {
		sc.g.log.Info("a task handle of another principal was refused", "request_id", sc.rec.id)
		return nil, nil, unknown()
	}
	srv := sc.srv
	if srv == nil {
		// On /mcp, the record names the server: the caller must still be
		// allowed it.
		s, ferr := sc.g.server(ctx, r.ServerID)
		switch {
		case ferr != nil && (ferr.Code == fault.NotFound || ferr.Code == fault.Forbidden):
			return nil, nil, unknown()
		case ferr != nil:
			return nil, nil, sc.rpcError(ferr, ferr)
		}
		srv = s
	}
	sc.rec.serverID, sc.rec.tool = clip.String(r.ServerID, clip.Short), clip.String(r.Tool, clip.Name)
	if r.ServerID != srv.ID || !sc.caller.sees(srv, r.Tool) {
		return nil, nil, unknown()
	}
	return r, srv, nil
}

// isObject reports whether raw is a JSON object.
func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// defaultPollInterval is the pollIntervalMs of a record that has none.
const defaultPollInterval = time.Second

// isoTime is a task timestamp as the wire writes it (ISO 8601, UTC).
func isoTime(t time.Time) json.RawMessage {
	return rawString(t.UTC().Format("2006-01-02T15:04:05.000Z"))
}

func rawInt(n int64) json.RawMessage { return json.RawMessage(fmt.Sprint(n)) }

// taskFields are the Task members of a gateway task's record (those of a
// CreateTaskResult).
func taskFields(r *tasks.Record) map[string]json.RawMessage {
	poll := r.PollInterval
	if poll <= 0 {
		poll = defaultPollInterval
	}
	f := map[string]json.RawMessage{
		"taskId":         rawString(r.ID),
		"status":         rawString(string(r.Status)),
		"createdAt":      isoTime(r.CreatedAt),
		"lastUpdatedAt":  isoTime(r.UpdatedAt),
		"ttlMs":          rawInt(r.TTL.Milliseconds()),
		"pollIntervalMs": rawInt(max(poll.Milliseconds(), 1)),
	}
	if r.StatusMessage != "" {
		f["statusMessage"] = rawString(r.StatusMessage)
	}
	return f
}

// createTaskResult is the CreateTaskResult of a gateway task: flat, the
// task's members and resultType "task", nothing of its outcome.
func createTaskResult(r *tasks.Record) *objectResult {
	f := taskFields(r)
	f["resultType"] = rawString("task")
	return &objectResult{fields: f}
}

// detailedTask is tasks/get's answer for a gateway task: its members and,
// by status, its result, its error or its input requests.
func detailedTask(r *tasks.Record) (*objectResult, error) {
	if waitsCancelled(r) {
		// Asked to stop before its call: no worker makes it, whether or
		// not its end was written yet (Cancel).
		c := r.Clone()
		c.Status, c.StatusMessage = tasks.StatusCancelled, "cancelled before it ran"
		r = c
	}
	if r.Stopped(time.Now()) {
		// Its worker ended without an outcome (its instance died): the
		// call may or may not have run, so the agent is told so.
		c := r.Clone()
		stopped(c)
		r = c
	}
	f := taskFields(r)
	f["resultType"] = rawString(resultTypeComplete)
	switch r.Status {
	case tasks.StatusCompleted:
		if !isObject(r.Result) {
			return nil, errors.New("task record: completed without a result")
		}
		res, err := completeResult(r.Result)
		if err != nil {
			return nil, err
		}
		f["result"] = res
	case tasks.StatusFailed:
		f["error"] = r.Error
		if !isObject(r.Error) {
			msg := r.StatusMessage
			if msg == "" {
				msg = "the task failed"
			}
			f["error"], _ = marshalPlain(rpcErrorObject{Code: jsonrpc.CodeInternalError, Message: msg})
		}
	case tasks.StatusInputRequired:
		if !isObject(r.InputRequests) {
			return nil, errors.New("task record: input_required without input requests")
		}
		f["inputRequests"] = r.InputRequests
	case tasks.StatusWorking, tasks.StatusCancelled:
	default:
		return nil, fmt.Errorf("task record: unknown status %q", clip.String(string(r.Status), clip.Short))
	}
	return &objectResult{fields: f}, nil
}

// completeResult is a task's result (a CallToolResult object) as a
// 2026-07-28 client gets it inlined: what the call would have answered,
// resultType "complete" included.
func completeResult(raw json.RawMessage) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("task record: result: %w", err)
	}
	if _, has := fields["resultType"]; has {
		return raw, nil
	}
	fields["resultType"] = rawString(resultTypeComplete)
	return marshalPlain(fields)
}

// gatewayTaskRequest answers a tasks/ request for a task the gateway runs.
func (sc *mcpScope) gatewayTaskRequest(ctx context.Context, method string, r *tasks.Record, responses json.RawMessage) (mcp.Result, error) {
	internal := func(err error, what string) error {
		return sc.rpcError(fault.Wrap(err, fault.Internal, "%s", what), err)
	}
	// A request the store failed (its fault, or the server's) may be
	// made again: each step of it is.
	failed := func(err error, what string) error {
		var fe *fault.Error
		if !errors.As(err, &fe) {
			fe = fault.Wrap(err, fault.StoreUnavailable, "%s", what).WithRetryAfter(storeRetryAfter)
		}
		return sc.rpcError(fe, err)
	}
	switch method {
	case "tasks/get":
		res, err := detailedTask(r)
		if err != nil {
			return nil, internal(err, "the task's record cannot be read")
		}
		sc.rec.outcome = "ok"
		return res, nil
	case "tasks/cancel":
		if !tasks.Terminal(r.Status) {
			if sc.g.deps.Tasks == nil {
				return nil, internal(errors.New("a gateway task with no engine to cancel it"), "this gateway runs no tasks now")
			}
			if _, err := sc.g.deps.Tasks.Cancel(ctx, r); err != nil {
				return nil, failed(err, "cannot cancel the task right now")
			}
		}
		sc.g.polls.forget(r.Owner, r.ID)
		sc.rec.outcome = "ok"
		return ack(), nil
	}
	// tasks/update: responses to the requests outstanding reach the
	// engine; any other key is ignored (SEP-2663), as is an update of a
	// task that asks for nothing.
	if r.Status == tasks.StatusInputRequired {
		if outstanding := outstandingResponses(r.InputRequests, responses); outstanding != nil {
			if sc.g.deps.Tasks == nil {
				return nil, internal(errors.New("a gateway task with no engine to update it"), "this gateway runs no tasks now")
			}
			// The round's requestState, the upstream's, is the record's.
			_, err := sc.g.deps.Tasks.Update(ctx, r, outstanding, r.RequestState)
			switch {
			case errors.Is(err, tasks.ErrTooLarge):
				// The agent's answers, with the round's earlier ones, are
				// more than a task keeps.
				return nil, sc.tooMuchInput()
			case err != nil:
				return nil, failed(err, "cannot update the task right now")
			}
			sc.g.polls.forget(r.Owner, r.ID)
		}
	}
	sc.rec.outcome = "ok"
	return ack(), nil
}

// outstandingResponses keeps of responses (a JSON object) the members
// whose keys requests (a JSON object) has, nil when none.
func outstandingResponses(requests, responses json.RawMessage) json.RawMessage {
	var asked, given map[string]json.RawMessage
	if json.Unmarshal(requests, &asked) != nil || json.Unmarshal(responses, &given) != nil {
		return nil
	}
	keep := map[string]json.RawMessage{}
	for k, v := range given {
		if _, ok := asked[k]; ok {
			keep[k] = v
		}
	}
	if len(keep) == 0 {
		return nil
	}
	out, err := marshalPlain(keep)
	if err != nil {
		return nil
	}
	return out
}

// relayTaskRequest sends a tasks/ request for a relayed task to its
// upstream, with the upstream's own id, and answers with the upstream's
// answer, its ids rewritten to the handle. It takes no place under the
// server's cap, and is bounded by the server's timeout. A tasks/get sooner
// than the interval the caller's last one was told is answered as that
// one was, without asking the upstream.
func (sc *mcpScope) relayTaskRequest(ctx context.Context, method string, r *tasks.Record, srv *registry.Server, responses json.RawMessage) (mcp.Result, error) {
	if method == "tasks/get" {
		// Sooner than the interval the caller's last poll was told: that
		// poll's answer, the upstream asked nothing (taskPolls).
		if res := sc.g.polls.relayed(r.Owner, r.ID, time.Now()); res != nil {
			sc.rec.outcome = "ok"
			return res, nil
		}
	}
	gen, sent := sc.g.polls.begin(), time.Now()
	rctx, cancel := sc.g.boundedCtx(ctx, srv.Timeout)
	defer cancel()
	raw, err := sc.g.deps.Upstream.TaskRequest(rctx, srv, sc.caller.upstream(srv), method, r.UpstreamID, responses)
	if err != nil {
		var ue *upstream.Error
		if errors.As(err, &ue) && ue.Kind == upstream.KindRPC {
			sc.rec.fail(upstreamFault(srv, err))
			return nil, rewriteError(ue.RPC, r.UpstreamID, r.ID)
		}
		return nil, sc.rpcError(upstreamFault(srv, err), err)
	}
	if method != "tasks/get" {
		// Its status may change: the next poll asks the upstream.
		sc.g.polls.forget(r.Owner, r.ID)
		sc.rec.outcome = "ok"
		return ack(), nil
	}
	res, err := relayedTask(raw, r, "complete", sc.g.maxResult)
	if err != nil {
		return nil, sc.rpcError(fault.Wrap(err, fault.UpstreamError, "server %q answered tasks/get with something other than a task", srv.ID), err)
	}
	var every int64
	if json.Unmarshal(res.fields["pollIntervalMs"], &every) == nil {
		sc.g.polls.putRelayed(r, res, time.Duration(every)*time.Millisecond, sent, gen)
	}
	sc.rec.outcome = "ok"
	return res, nil
}

// relayedTask is an upstream's task (its CreateTaskResult, or its answer
// to tasks/get) as the agent gets it: the upstream's id rewritten to the
// handle wherever it appears, ttlMs no longer than the handle lives,
// resultType set, and the protocol's own _meta keys dropped.
func relayedTask(raw json.RawMessage, r *tasks.Record, resultType string, limit int64) (*objectResult, error) {
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("task answer larger than %d bytes", limit)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("task answer: %w", err)
	}
	obj, ok := rewriteIDs(v, r.UpstreamID, r.ID).(map[string]any)
	if !ok {
		return nil, errors.New("task answer is not an object")
	}
	if id, _ := obj["taskId"].(string); id != r.ID {
		return nil, errors.New("task answer names another task")
	}
	switch s, _ := obj["status"].(string); tasks.Status(s) {
	case tasks.StatusWorking, tasks.StatusInputRequired, tasks.StatusCompleted, tasks.StatusFailed, tasks.StatusCancelled:
	default:
		return nil, fmt.Errorf("task answer has status %q", clip.String(s, clip.Short))
	}
	ttl := r.TTL.Milliseconds()
	if n, ok := obj["ttlMs"].(json.Number); ok {
		if up, err := n.Int64(); err == nil && up > 0 && up < ttl {
			ttl = up
		}
	}
	obj["ttlMs"] = ttl
	obj["pollIntervalMs"] = relayedPoll(obj["pollIntervalMs"], ttl)
	obj["resultType"] = resultType
	if res, ok := obj["result"].(map[string]any); ok {
		if _, has := res["resultType"]; !has {
			res["resultType"] = resultTypeComplete
		}
	}
	// The upstream keeps its own state: never shown (docs/tasks.md).
	delete(obj, "requestState")
	// A message meant for people: a string, cut to a task record's bound.
	// Timestamps: strings of a timestamp's length. Anything else is left
	// out, as an upstream that sent none.
	if msg, ok := obj["statusMessage"].(string); ok {
		obj["statusMessage"] = clip.String(strings.ToValidUTF8(msg, "\uFFFD"), tasks.MaxStatusMessageBytes-len("…"))
	} else {
		delete(obj, "statusMessage")
	}
	for _, k := range []string{"createdAt", "lastUpdatedAt"} {
		if t, ok := obj[k].(string); !ok || len(t) > maxRelayedTime {
			delete(obj, k)
		}
	}
	res := &objectResult{fields: map[string]json.RawMessage{}}
	if m, ok := obj["_meta"].(map[string]any); ok {
		res.Meta = mcp.Meta(forwardMeta(mcp.Meta(m)))
	}
	delete(obj, "_meta")
	for k, x := range obj {
		b, err := marshalPlain(x)
		if err != nil {
			return nil, err
		}
		res.fields[k] = b
	}
	return res, nil
}

// maxRelayedTime bounds an upstream task's createdAt and lastUpdatedAt
// (ISO 8601 timestamps, some 30 bytes): longer ones are left out.
const maxRelayedTime = 64

// relayedPoll is the pollIntervalMs an agent is told for a relayed task
// whose upstream said v: a whole number of milliseconds from minTaskPoll
// to the handle's ttl (ms), defaultPollInterval when v is no number.
func relayedPoll(v any, ttl int64) int64 {
	poll := float64(defaultPollInterval.Milliseconds())
	if n, ok := v.(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			poll = max(f, float64(minTaskPoll.Milliseconds()))
		}
	}
	return int64(min(poll, float64(ttl)))
}

// minEmbeddedID is the shortest upstream id rewritten where a text
// contains it: a shorter one ("1") could be part of anything.
const minEmbeddedID = 8

// replaceID returns s with the upstream id from replaced by to: s itself
// when it is the id, and where it contains it when the id is long enough
// to be told from other text.
func replaceID(s, from, to string) string {
	if s == from {
		return to
	}
	if len(from) >= minEmbeddedID {
		return strings.ReplaceAll(s, from, to)
	}
	return s
}

// rewriteIDs returns v (decoded JSON) with the upstream id from replaced
// by to in every string (replaceID), object keys included.
func rewriteIDs(v any, from, to string) any {
	switch x := v.(type) {
	case string:
		return replaceID(x, from, to)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[replaceID(k, from, to)] = rewriteIDs(e, from, to)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = rewriteIDs(e, from, to)
		}
	}
	return v
}

// rewriteError is an upstream's JSON-RPC error about a relayed task as the
// agent gets it: the upstream's id replaced by the handle.
func rewriteError(e *jsonrpc.Error, from, to string) *jsonrpc.Error {
	// Replaced before it is cut: a cut through the id would leave its head.
	out := &jsonrpc.Error{Code: e.Code, Message: clip.String(replaceID(e.Message, from, to), maxUpstreamMessage)}
	if len(e.Data) > 0 {
		var v any
		dec := json.NewDecoder(bytes.NewReader(e.Data))
		dec.UseNumber()
		if dec.Decode(&v) == nil {
			out.Data, _ = marshalPlain(rewriteIDs(v, from, to))
		}
	}
	return out
}
