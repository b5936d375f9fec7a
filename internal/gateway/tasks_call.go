package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// A tools/call of a task-supporting tool (tasks_support.go) by a request
// that declared the tasks extension:
//
//   - a gateway task (the item sets task_support): checked as a
//     synchronous call is before admission (the caller allowed, the tool
//     seen, its arguments valid), then handed to the engine, which stores
//     the task and queues it; the agent gets the CreateTaskResult once the
//     record is stored. A call that carries input for an earlier
//     input_required round (requestState, inputResponses) is a synchronous
//     call's retry and stays one.
//   - a relayed task (the upstream's own): the call is made as a
//     synchronous one, through admission, with the caller's declaration
//     forwarded; if the upstream answers with a task, the gateway stores a
//     record binding a handle of its own to the upstream's id and answers
//     with the upstream's CreateTaskResult under that handle. The call's
//     place under the server's cap is held for that exchange only: the
//     upstream's task then runs outside the cap.
//
// A request that did not declare the extension never gets a
// CreateTaskResult, and a call of a tool whose support is required is
// refused with -32021 (MCP) or BAD_REQUEST (REST), once the tool is known to
// exist, be visible and take its arguments.

// maxTaskParams bounds the params of a call made a gateway task, which are
// stored in its record.
const maxTaskParams = 64 << 10

// maxUpstreamTaskID bounds an upstream's task id.
const maxUpstreamTaskID = 512

// createTask makes a gateway task of a tools/call of srv (params as the
// upstream is to get them, cl the caller's client) and answers its
// CreateTaskResult.
func (sc *mcpScope) createTask(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams, cl client) (mcp.Result, error) {
	if ferr := sc.g.tool(ctx, srv, params); ferr != nil {
		return sc.callFault(ferr)
	}
	call := *params
	call.Meta = mcp.Meta{}
	for k, v := range params.Meta {
		call.Meta[k] = v
	}
	// The upstream asks only for what the agent can answer (roundTrip).
	call.Meta[mcp.MetaKeyClientCapabilities] = cl.caps
	raw, err := marshalPlain(&call)
	if err != nil {
		return sc.callFault(fault.New(fault.BadRequest, "arguments cannot be encoded"))
	}
	if len(raw) > maxTaskParams {
		return sc.callFault(fault.New(fault.BadRequest, "the call is too large to run as a task (%d bytes, at most %d): call it without the tasks extension, or with less", len(raw), maxTaskParams))
	}
	r, fe := sc.g.deps.Tasks.Create(ctx, srv, sc.caller.principal, raw, params.Name, sc.protocol)
	if fe != nil {
		return sc.callFault(fe)
	}
	if r == nil {
		return sc.callFault(fault.New(fault.Internal, "the task engine made no task"))
	}
	sc.rec.outcome = "task"
	return createTaskResult(r), nil
}

// callFault answers a tools/call that failed with fe: a protocol error for
// the caller's mistakes and the protocol's own codes, a tool error
// (isError) for the rest.
func (sc *mcpScope) callFault(fe *fault.Error) (mcp.Result, error) {
	if re, ok := specError(fe); ok {
		// The protocol's own errors (a header mismatch, a missing client
		// capability) reach the client as they are.
		sc.rec.fail(fe)
		return nil, re
	}
	switch {
	case errors.Is(fe.Cause, errSchema):
		// Input validation: a tool execution error, as the upstream's own
		// SDK reports it, so the model can correct its arguments.
		return toolError(sc.rec, fe), nil
	case fe.Code == fault.NotFound || fe.Code == fault.BadRequest:
		// Unknown tool, or arguments the gateway or the upstream
		// refused: the caller's mistake, a protocol error.
		return nil, sc.refuse(fe)
	}
	return toolError(sc.rec, fe), nil
}

// requiredTaskFault refuses a call of a tool that runs only as a task, from
// a request that did not declare the extension.
func requiredTaskFault(srv *registry.Server, tool string) *fault.Error {
	msg := fmt.Sprintf("tool %q of server %q runs only as a task: call it over MCP (2026-07-28), declaring the client capability %s",
		clip.String(tool, clip.Name), srv.ID, tasksExtension)
	return fault.Wrap(missingTasks(msg), fault.BadRequest, "%s", msg)
}

// relayCreated answers a tools/call that the upstream of srv answered with
// a task: it stores the record binding a new handle to the upstream's id,
// and answers the upstream's CreateTaskResult under the handle.
func (sc *mcpScope) relayCreated(ctx context.Context, srv *registry.Server, tool string, t *upstream.Task) (mcp.Result, error) {
	// Each member is read apart: one of a wrong type (checked by
	// relayedTask) leaves the task id known, so that the task can be told
	// to stop.
	var members map[string]json.RawMessage
	var up struct {
		TaskID        string
		Status        tasks.Status
		StatusMessage string
		TTLMs, PollMs json.RawMessage
	}
	if json.Unmarshal(t.Raw, &members) != nil || json.Unmarshal(members["taskId"], &up.TaskID) != nil || !validUpstreamTaskID(up.TaskID) {
		fe := fault.New(fault.UpstreamError, "server %q answered with a task the gateway cannot use (its taskId is missing or not a plain string of at most %d characters)", srv.ID, maxUpstreamTaskID)
		return toolError(sc.rec, fe), nil
	}
	_ = json.Unmarshal(members["status"], &up.Status)
	_ = json.Unmarshal(members["statusMessage"], &up.StatusMessage)
	up.TTLMs, up.PollMs = members["ttlMs"], members["pollIntervalMs"]
	id, err := tasks.NewID()
	if err != nil {
		sc.g.cancelUpstreamTask(ctx, srv, sc.caller.upstream(srv), up.TaskID, sc.rec.id)
		return toolError(sc.rec, fault.Wrap(err, fault.Internal, "cannot make a task handle")), nil
	}
	// The handle lives no longer than the upstream keeps its task, nor
	// than the item allows; a poll interval fits within it.
	ttl := srv.TaskTTL
	if ms, ok := positiveMs(up.TTLMs); ok && ms < ttl {
		ttl = max(ms, tasks.MinTTL)
	}
	ttl = min(max(ttl, tasks.MinTTL), tasks.MaxTTL)
	poll, _ := positiveMs(up.PollMs)
	poll = min(poll, ttl)
	now := time.Now()
	r := &tasks.Record{
		ID: id, Kind: tasks.KindRelay, ServerID: srv.ID, Tool: tool,
		Owner: sc.caller.principal.StateKey, OwnerID: sc.caller.principal.ID,
		Status: up.Status, StatusMessage: clip.String(strings.ToValidUTF8(up.StatusMessage, "\uFFFD"), tasks.MaxStatusMessageBytes-len("…")),
		CreatedAt: now, UpdatedAt: now, TTL: ttl, PollInterval: poll,
		Protocol: sc.protocol, UpstreamID: up.TaskID,
	}
	res, err := relayedTask(t.Raw, r, "task", maxUpstreamTaskAnswer)
	if err != nil {
		// The upstream's task has no handle: it is told to stop.
		sc.g.cancelUpstreamTask(ctx, srv, sc.caller.upstream(srv), up.TaskID, sc.rec.id)
		return toolError(sc.rec, fault.Wrap(err, fault.UpstreamError, "server %q answered with a task the gateway cannot use; it was cancelled", srv.ID)), nil
	}
	// A CreateTaskResult carries the task, not its outcome.
	for _, k := range []string{"result", "error", "inputRequests", "requestState"} {
		delete(res.fields, k)
	}
	if err := sc.g.deps.TaskStore.Create(ctx, r); err != nil {
		// The upstream's task has no handle: it is told to stop.
		sc.g.cancelUpstreamTask(ctx, srv, sc.caller.upstream(srv), up.TaskID, sc.rec.id)
		fe := fault.Wrap(err, fault.StoreUnavailable, "cannot record the task of server %q right now; it was cancelled", srv.ID).WithRetryAfter(storeRetryAfter)
		if errors.Is(err, tasks.ErrInvalid) || errors.Is(err, tasks.ErrTooLarge) {
			fe = fault.Wrap(err, fault.UpstreamError, "server %q answered with a task the gateway cannot record; it was cancelled", srv.ID)
		}
		return toolError(sc.rec, fe), nil
	}
	sc.rec.outcome = "task"
	return res, nil
}

// cancelUpstreamTask tells the upstream of srv to stop its task id, which
// no agent holds a handle to (the gateway could not use or record it), as
// caller c; a failure is logged, for request requestID.
func (g *Gateway) cancelUpstreamTask(ctx context.Context, srv *registry.Server, c upstream.Caller, id, requestID string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, err := g.deps.Upstream.TaskRequest(cctx, srv, c, "tasks/cancel", id, nil); err != nil {
		g.log.Warn("an upstream task no agent holds a handle to was not cancelled", "request_id", requestID, "server_id", srv.ID, "error", err.Error())
	}
}

// maxUpstreamTaskAnswer bounds an upstream's CreateTaskResult (as the pool
// does).
const maxUpstreamTaskAnswer = 64 << 10

// validUpstreamTaskID reports whether id can name an upstream's task in a
// request body and in its Mcp-Name header: 1 to maxUpstreamTaskID
// printable ASCII characters, no space at either end.
func validUpstreamTaskID(id string) bool {
	if id == "" || len(id) > maxUpstreamTaskID || id[0] == ' ' || id[len(id)-1] == ' ' {
		return false
	}
	for _, c := range []byte(id) {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// positiveMs reads a positive whole number of milliseconds.
func positiveMs(raw json.RawMessage) (time.Duration, bool) {
	var n float64
	if json.Unmarshal(raw, &n) != nil || n <= 0 || n > float64(registry.MaxTaskTTL.Milliseconds()) {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}
