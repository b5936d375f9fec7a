package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/taskserver"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// recordingEngine is a TaskEngine for the front's tests: it stores the
// records of the tasks it is asked to make in the real tasks table, and
// records what it was asked. It runs nothing: the tests write outcomes
// into the records themselves.
type recordingEngine struct {
	store *tasks.Store
	// refuse, when set, is Create's answer.
	refuse *fault.Error

	mu      sync.Mutex
	creates []engineCreate
	cancels []string
	updates []engineUpdate
}

type engineCreate struct {
	server, tool, owner, protocol string
	params                        json.RawMessage
}

type engineUpdate struct {
	id, requestState string
	responses        json.RawMessage
}

func (e *recordingEngine) Create(ctx context.Context, srv *registry.Server, p *auth.Principal, params json.RawMessage, tool, protocol string) (*tasks.Record, *fault.Error) {
	e.mu.Lock()
	e.creates = append(e.creates, engineCreate{server: srv.ID, tool: tool, owner: p.StateKey, protocol: protocol, params: params})
	e.mu.Unlock()
	if e.refuse != nil {
		return nil, e.refuse
	}
	id, err := tasks.NewID()
	if err != nil {
		return nil, fault.Wrap(err, fault.Internal, "id")
	}
	r := &tasks.Record{ID: id, Kind: tasks.KindGateway, ServerID: srv.ID, Tool: tool, Owner: p.StateKey, OwnerID: p.ID,
		Status: tasks.StatusWorking, TTL: srv.TaskTTL, PollInterval: 250 * time.Millisecond, Params: params, Protocol: protocol}
	if err := e.store.Create(ctx, r); err != nil {
		return nil, fault.Wrap(err, fault.StoreUnavailable, "store")
	}
	return r, nil
}

func (e *recordingEngine) Cancel(ctx context.Context, r *tasks.Record) (*tasks.Record, error) {
	e.mu.Lock()
	e.cancels = append(e.cancels, r.ID)
	e.mu.Unlock()
	return e.store.Update(ctx, r, func(c *tasks.Record) error {
		c.Status, c.CancelRequested = tasks.StatusCancelled, true
		return nil
	})
}

func (e *recordingEngine) Update(ctx context.Context, r *tasks.Record, responses json.RawMessage, requestState string) (*tasks.Record, error) {
	e.mu.Lock()
	e.updates = append(e.updates, engineUpdate{id: r.ID, requestState: requestState, responses: responses})
	e.mu.Unlock()
	return e.store.Update(ctx, r, func(c *tasks.Record) error {
		c.Status, c.InputRequests, c.RequestState, c.InputResponses = tasks.StatusWorking, nil, "", responses
		return nil
	})
}

func (e *recordingEngine) counts() (creates, cancels, updates int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.creates), len(e.cancels), len(e.updates)
}

// taskHarness is a harness whose gateway keeps tasks in the test store's
// tasks table, with the engine newEngine makes (nil: no gateway tasks).
func taskHarness(t *testing.T, newEngine func(*tasks.Store) TaskEngine) (*harness, *tasks.Store) {
	t.Helper()
	return taskHarnessWith(t, Options{}, newEngine)
}

// taskHarnessWith is taskHarness with opts for the gateway.
func taskHarnessWith(t *testing.T, opts Options, newEngine func(*tasks.Store) TaskEngine) (*harness, *tasks.Store) {
	t.Helper()
	var ts *tasks.Store
	h := newHarnessDeps(t, opts, func(d *Deps, env *storetest.Env) {
		ts = &tasks.Store{DB: env.Client, Table: env.Tables.Tasks}
		d.TaskStore = ts
		if newEngine != nil {
			d.Tasks = newEngine(ts)
		}
	})
	return h, ts
}

// startTaskServer starts a taskserver upstream on loopback: implementing
// the tasks extension itself (withTasks), or plain and synchronous.
func startTaskServer(t *testing.T, withTasks bool, wrap func(http.Handler) http.Handler) (*taskserver.Server, string) {
	t.Helper()
	s := taskserver.New(taskserver.Options{Tasks: withTasks})
	var hd http.Handler = s.Handler()
	if wrap != nil {
		hd = wrap(hd)
	}
	hs := httptest.NewServer(hd)
	t.Cleanup(hs.Close)
	return s, hs.URL
}

// rpcAnswer is a JSON-RPC answer.
type rpcAnswer struct {
	status int
	raw    []byte
	result map[string]json.RawMessage
	err    *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
}

// str reads the string member k of the result.
func (a rpcAnswer) str(t *testing.T, k string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(a.result[k], &s); err != nil {
		t.Fatalf("result.%s is not a string: %s", k, a.raw)
	}
	return s
}

// code is the error's code, 0 for a result.
func (a rpcAnswer) code() int {
	if a.err == nil {
		return 0
	}
	return a.err.Code
}

// rpcOpts are what a test request varies.
type rpcOpts struct {
	// declare declares the tasks extension in the request's _meta.
	declare bool
	// name, when set, is the Mcp-Name header; otherwise params.name or
	// params.taskId. "-" sends none.
	name string
	// version is the protocol version (2026-07-28 by default).
	version string
	// header is added to the request's headers.
	header http.Header
}

// rpc sends one JSON-RPC request of protocol 2026-07-28 (stateless, the
// SEP-2243 headers set) to path with key.
func (h *harness) rpc(path, key, method string, params map[string]any, o rpcOpts) rpcAnswer {
	h.t.Helper()
	if o.version == "" {
		o.version = "2026-07-28"
	}
	caps := map[string]any{}
	if o.declare {
		caps["extensions"] = map[string]any{tasksExtension: map[string]any{}}
	}
	p := map[string]any{"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": o.version, "io.modelcontextprotocol/clientCapabilities": caps}}
	for k, v := range params {
		p[k] = v
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": p})
	req, _ := http.NewRequest(http.MethodPost, h.url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", o.version)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Method", method)
	name := o.name
	if name == "" {
		name, _ = params["name"].(string)
		if id, ok := params["taskId"].(string); ok {
			name = id
		}
	}
	if name != "" && name != "-" {
		req.Header.Set("Mcp-Name", name)
	}
	for k, vs := range o.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.HasPrefix(raw, []byte("event:")) {
		for line := range bytes.Lines(raw) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok && bytes.Contains(d, []byte(`"id"`)) {
				raw = bytes.TrimSpace(d)
			}
		}
	}
	a := rpcAnswer{status: resp.StatusCode, raw: raw}
	var msg struct {
		Result map[string]json.RawMessage `json:"result"`
		Error  *struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		h.t.Fatalf("%s %s: not a JSON-RPC answer (HTTP %d): %s", method, path, resp.StatusCode, raw)
	}
	a.result, a.err = msg.Result, msg.Error
	return a
}

// discoverTasks reports whether server/discover on path advertises the
// tasks extension to key.
func (h *harness) discoverTasks(path, key string) bool {
	h.t.Helper()
	a := h.rpc(path, key, "server/discover", nil, rpcOpts{})
	if a.err != nil {
		h.t.Fatalf("server/discover %s: %s", path, a.raw)
	}
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	_ = json.Unmarshal(a.result["capabilities"], &caps)
	_, ok := caps.Extensions[tasksExtension]
	return ok
}

// listedSupport is execution.taskSupport of each tool tools/list on path
// shows key.
func (h *harness) listedSupport(path, key string) map[string]string {
	h.t.Helper()
	a := h.rpc(path, key, "tools/list", nil, rpcOpts{})
	var tools []struct {
		Name      string `json:"name"`
		Execution *struct {
			TaskSupport string `json:"taskSupport"`
		} `json:"execution"`
		Meta map[string]any `json:"_meta"`
	}
	if err := json.Unmarshal(a.result["tools"], &tools); err != nil {
		h.t.Fatalf("tools/list %s: %s", path, a.raw)
	}
	out := map[string]string{}
	for _, t := range tools {
		if _, leaked := t.Meta["mcpgate/taskSupport"]; leaked {
			h.t.Errorf("tools/list %s shows the pool's own _meta key on %s", path, t.Name)
		}
		if t.Execution != nil {
			out[t.Name] = t.Execution.TaskSupport
		} else {
			out[t.Name] = "(none)"
		}
	}
	return out
}

// unknownTask checks that a is the answer to a handle the caller cannot
// use: invalid params, the same message whatever the reason.
func unknownTask(t *testing.T, what string, a rpcAnswer) {
	t.Helper()
	if a.code() != -32602 || a.err.Message != errUnknownTask.Message {
		t.Errorf("%s: %s, want -32602 %q", what, a.raw, errUnknownTask.Message)
	}
}

// TestGatewayTasks: a server whose item makes tools task-supporting, over
// a plain synchronous upstream, through the engine. Negotiation
// (server/discover, tools/list), the -32021 of a required tool called
// without the extension, CreateTaskResult, the DetailedTask of each
// status, tasks/update and tasks/cancel reaching the engine, and the
// refusals: -32601 for the removed methods, -32021 for an undeclared
// tasks/ request, -32020 for a mismatched Mcp-Name.
func TestGatewayTasks(t *testing.T) {
	var engine *recordingEngine
	h, ts := taskHarness(t, func(s *tasks.Store) TaskEngine {
		engine = &recordingEngine{store: s}
		return engine
	})
	up, url := startTaskServer(t, false, nil)
	h.server(map[string]any{"server_id": "plain", "url": url, "task_ttl": 120, "tools": map[string]any{
		"slow_compute": map[string]any{"task_support": "optional"},
		"failing_job":  map[string]any{"task_support": "required"},
	}})
	demoOnly := testkit.PutKey(t, h.env, "demo")

	// Negotiation.
	if !h.discoverTasks("/mcp/plain", h.key) || !h.discoverTasks("/mcp", h.key) {
		t.Error("server/discover does not advertise the tasks extension where a tool supports tasks")
	}
	if h.discoverTasks("/mcp/demo", h.key) || h.discoverTasks("/mcp", demoOnly) {
		t.Error("server/discover advertises the tasks extension where no tool supports tasks")
	}
	want := map[string]string{"greet": "forbidden", "slow_compute": "optional", "failing_job": "required", "confirm_delete": "forbidden"}
	got := h.listedSupport("/mcp/plain", h.key)
	for name, w := range want {
		if got[name] != w {
			t.Errorf("tools/list /mcp/plain: %s taskSupport %q, want %q", name, got[name], w)
		}
	}
	if agg := h.listedSupport("/mcp", h.key); agg["plain"+ToolSeparator+"failing_job"] != "required" || agg["demo"+ToolSeparator+"echo"] != "forbidden" {
		t.Errorf("tools/list /mcp: %v", agg)
	}

	// A required tool, the extension undeclared: -32021 naming it.
	a := h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "failing_job", "arguments": map[string]any{}}, rpcOpts{})
	var data struct {
		Required struct {
			Extensions map[string]any `json:"extensions"`
		} `json:"requiredCapabilities"`
	}
	if a.code() != -32021 || json.Unmarshal(a.err.Data, &data) != nil || data.Required.Extensions[tasksExtension] == nil {
		t.Errorf("required tool without the extension: %s, want -32021 with data.requiredCapabilities", a.raw)
	}
	// REST callers never declare it: BAD_REQUEST.
	h.expectFault(h.call(h.key, `{"server_id":"plain","name":"failing_job","arguments":{}}`), http.StatusBadRequest, fault.BadRequest)
	if up.Stats().Calls["failing_job"] != 0 {
		t.Error("a required tool's undeclared call reached the upstream")
	}
	// Optional, undeclared: synchronous, as before.
	a = h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 0, "label": "now"}}, rpcOpts{})
	if a.err != nil || a.str(t, "resultType") != "complete" || !strings.Contains(string(a.result["content"]), "computed now") {
		t.Errorf("optional tool without the extension: %s, want its result", a.raw)
	}
	if c, _, _ := engine.counts(); c != 0 {
		t.Fatalf("the engine was asked to create %d tasks for undeclared calls", c)
	}

	// Declared: a gateway task.
	a = h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 1, "label": "later"}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "task" || a.str(t, "status") != "working" {
		t.Fatalf("declared call: %s, want a CreateTaskResult", a.raw)
	}
	id := a.str(t, "taskId")
	for _, k := range []string{"ttlMs", "pollIntervalMs"} {
		var n json.Number
		if err := json.Unmarshal(a.result[k], &n); err != nil || strings.ContainsAny(n.String(), ".eE") {
			t.Errorf("CreateTaskResult %s = %s, want an integer", k, a.result[k])
		}
	}
	if string(a.result["ttlMs"]) != "120000" || string(a.result["pollIntervalMs"]) != "250" {
		t.Errorf("CreateTaskResult ttlMs %s pollIntervalMs %s, want 120000 and 250", a.result["ttlMs"], a.result["pollIntervalMs"])
	}
	for _, k := range []string{"createdAt", "lastUpdatedAt"} {
		if _, err := time.Parse(time.RFC3339, a.str(t, k)); err != nil {
			t.Errorf("CreateTaskResult %s: %v", k, err)
		}
	}
	if len(engine.creates) != 1 || engine.creates[0].tool != "slow_compute" || engine.creates[0].server != "plain" || engine.creates[0].protocol != "2026-07-28" {
		t.Fatalf("engine creates %+v", engine.creates)
	}
	var params struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.Unmarshal(engine.creates[0].params, &params); err != nil || params.Name != "slow_compute" || params.Arguments["label"] != "later" {
		t.Errorf("the engine got params %s", engine.creates[0].params)
	}
	if up.Stats().Calls["slow_compute"] != 1 {
		t.Errorf("the upstream was called %d times; the task's call is the engine's to make", up.Stats().Calls["slow_compute"])
	}
	// Arguments the tool refuses are refused before the engine is asked.
	a = h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": "soon"}}, rpcOpts{declare: true})
	if a.str(t, "resultType") == "task" {
		t.Errorf("invalid arguments made a task: %s", a.raw)
	}
	// An admission refusal comes back as it would for a synchronous call.
	engine.refuse = fault.New(fault.AtCapacity, "queue full").WithRetryAfter(time.Second)
	a = h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 1}}, rpcOpts{declare: true})
	if a.err != nil || string(a.result["isError"]) != "true" || !strings.Contains(string(a.raw), "AT_CAPACITY") {
		t.Errorf("a refused task: %s, want the tool error a refused call gets", a.raw)
	}
	engine.refuse = nil
	if c, _, _ := engine.counts(); c != 2 {
		t.Errorf("engine creates %d, want 2 (the invalid call is refused before it)", c)
	}

	get := func(path, key, id string) rpcAnswer {
		return h.rpc(path, key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	}
	a = get("/mcp/plain", h.key, id)
	if a.err != nil || a.str(t, "resultType") != "complete" || a.str(t, "status") != "working" || a.str(t, "taskId") != id {
		t.Fatalf("tasks/get: %s", a.raw)
	}
	// The removed methods, and tasks/ requests without the extension or
	// with another Mcp-Name.
	for _, m := range []string{"tasks/result", "tasks/list"} {
		if a := h.rpc("/mcp/plain", h.key, m, map[string]any{"taskId": id}, rpcOpts{declare: true}); a.code() != -32601 {
			t.Errorf("%s: %s, want -32601", m, a.raw)
		}
	}
	for _, m := range []string{"tasks/get", "tasks/cancel", "tasks/update"} {
		if a := h.rpc("/mcp/plain", h.key, m, map[string]any{"taskId": id, "inputResponses": map[string]any{}}, rpcOpts{}); a.code() != -32021 {
			t.Errorf("%s undeclared: %s, want -32021", m, a.raw)
		}
		if a := h.rpc("/mcp/plain", h.key, m, map[string]any{"taskId": id, "inputResponses": map[string]any{}}, rpcOpts{declare: true, name: "tsk_someoneelse"}); a.code() != -32020 || a.status != http.StatusBadRequest {
			t.Errorf("%s with another Mcp-Name: HTTP %d %s, want 400 -32020", m, a.status, a.raw)
		}
		if a := h.rpc("/mcp/plain", h.key, m, map[string]any{"taskId": id, "inputResponses": map[string]any{}}, rpcOpts{declare: true, name: "-"}); a.code() != -32020 {
			t.Errorf("%s without Mcp-Name: %s, want -32020", m, a.raw)
		}
	}

	// The DetailedTask of each status, from the record as it is. The
	// record is written here as a worker elsewhere would write it; this
	// instance reads it again once the interval of its last read has
	// passed, a wait the test skips by forgetting that read.
	update := func(rec *tasks.Record, change func(*tasks.Record) error) (*tasks.Record, error) {
		defer h.gw.polls.forget(rec.Owner, rec.ID)
		return ts.Update(t.Context(), rec, change)
	}
	rec, err := ts.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := update(rec, func(r *tasks.Record) error {
		r.Status, r.StatusMessage = tasks.StatusInputRequired, "asks"
		r.InputRequests = json.RawMessage(`{"confirm":{"method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object"}}}}`)
		r.RequestState = "upstream-state"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	a = get("/mcp/plain", h.key, id)
	if a.str(t, "status") != "input_required" || a.str(t, "statusMessage") != "asks" || !bytes.Contains(a.result["inputRequests"], []byte("elicitation/create")) {
		t.Errorf("input_required: %s", a.raw)
	}
	if _, has := a.result["requestState"]; has {
		t.Errorf("tasks/get shows a requestState: %s", a.raw)
	}
	// tasks/update: the outstanding key reaches the engine, the other is
	// dropped; the answer is an empty ack.
	a = h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{
		"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}},
		"never":   map[string]any{"action": "decline"},
	}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "complete" || len(a.result) != 2 || a.result["_meta"] == nil {
		t.Errorf("tasks/update: %s, want an empty ack", a.raw)
	}
	if len(engine.updates) != 1 || engine.updates[0].id != id || engine.updates[0].requestState != "upstream-state" ||
		!bytes.Contains(engine.updates[0].responses, []byte("confirm")) || bytes.Contains(engine.updates[0].responses, []byte("never")) {
		t.Errorf("engine updates %+v", engine.updates)
	}
	a = h.rpc("/mcp/plain", h.key, "tasks/update", map[string]any{"taskId": id, "inputResponses": "yes"}, rpcOpts{declare: true})
	if a.code() != -32602 {
		t.Errorf("tasks/update with inputResponses not an object: %s, want -32602", a.raw)
	}

	rec, _ = ts.Get(t.Context(), id)
	if _, err := update(rec, func(r *tasks.Record) error {
		r.Status, r.StatusMessage = tasks.StatusCompleted, ""
		r.Result = json.RawMessage(`{"content":[{"type":"text","text":"done"}],"isError":true}`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	a = get("/mcp", h.key, id) // on /mcp the record names its server
	var result struct {
		IsError    bool   `json:"isError"`
		ResultType string `json:"resultType"`
	}
	if a.str(t, "status") != "completed" || json.Unmarshal(a.result["result"], &result) != nil || !result.IsError || result.ResultType != "complete" {
		t.Errorf("completed: %s, want the result inlined", a.raw)
	}
	// tasks/cancel: an ack; a task that has ended is not the engine's.
	a = h.rpc("/mcp/plain", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "complete" {
		t.Errorf("tasks/cancel of an ended task: %s", a.raw)
	}
	if _, c, _ := engine.counts(); c != 0 {
		t.Errorf("the engine was asked to cancel an ended task")
	}

	// A failed task shows its error; a running one's cancel reaches the
	// engine.
	a = h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "failing_job", "arguments": map[string]any{}}, rpcOpts{declare: true})
	failed := a.str(t, "taskId")
	rec, _ = ts.Get(t.Context(), failed)
	if _, err := update(rec, func(r *tasks.Record) error {
		r.Status, r.StatusMessage = tasks.StatusFailed, "upstream went away"
		r.Error = json.RawMessage(`{"code":-32603,"message":"upstream went away"}`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	a = get("/mcp/plain", h.key, failed)
	var rpcErr struct {
		Code int `json:"code"`
	}
	if a.str(t, "status") != "failed" || json.Unmarshal(a.result["error"], &rpcErr) != nil || rpcErr.Code != -32603 {
		t.Errorf("failed: %s, want the error", a.raw)
	}
	a = h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 1}}, rpcOpts{declare: true})
	running := a.str(t, "taskId")
	a = h.rpc("/mcp/plain", h.key, "tasks/cancel", map[string]any{"taskId": running}, rpcOpts{declare: true})
	if a.err != nil || len(engine.cancels) != 1 || engine.cancels[0] != running {
		t.Errorf("tasks/cancel of a running task: %s; engine cancels %v", a.raw, engine.cancels)
	}
	if a := get("/mcp/plain", h.key, running); a.str(t, "status") != "cancelled" {
		t.Errorf("after cancel: %s", a.raw)
	}

	// A call that carries a round's answers stays synchronous.
	a = h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 0}, "inputResponses": map[string]any{}}, rpcOpts{declare: true, version: "2025-11-25"})
	if a.err != nil && a.code() != -32602 || a.result != nil && string(a.result["resultType"]) == `"task"` {
		t.Errorf("a call of protocol 2025-11-25 declaring the extension: %s", a.raw)
	}
}

// TestTaskHandlesAreBound: another key's handle, a forged one, an
// over-long one, one of another server, and one whose server or tool the
// caller may no longer use are answered exactly as an unknown id, and
// reach neither the engine nor the record's task.
func TestTaskHandlesAreBound(t *testing.T) {
	var engine *recordingEngine
	h, _ := taskHarness(t, func(s *tasks.Store) TaskEngine {
		engine = &recordingEngine{store: s}
		return engine
	})
	_, url := startTaskServer(t, false, nil)
	item := map[string]any{"server_id": "plain", "url": url, "tools": map[string]any{
		"slow_compute": map[string]any{"task_support": "optional"}, "multi_input": map[string]any{"task_support": "optional"},
	}}
	h.server(item)
	h.server(map[string]any{"server_id": "twin", "url": url, "tools": map[string]any{"slow_compute": map[string]any{"task_support": "optional"}}})
	a := h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 1}}, rpcOpts{declare: true})
	id := a.str(t, "taskId")
	other := testkit.PutKey(t, h.env, "*")
	narrow := testkit.PutKeyWithTools(t, h.env, []string{"plain"}, []string{"multi_input"})
	forged, _ := tasks.NewID()

	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		params := func(id string) map[string]any {
			return map[string]any{"taskId": id, "inputResponses": map[string]any{"confirm": map[string]any{"action": "accept"}}}
		}
		unknownTask(t, m+" by another key", h.rpc("/mcp/plain", other, m, params(id), rpcOpts{declare: true}))
		unknownTask(t, m+" by another key on /mcp", h.rpc("/mcp", other, m, params(id), rpcOpts{declare: true}))
		unknownTask(t, m+" by a key that may no longer call the tool", h.rpc("/mcp/plain", narrow, m, params(id), rpcOpts{declare: true}))
		unknownTask(t, m+" of another server", h.rpc("/mcp/twin", h.key, m, params(id), rpcOpts{declare: true}))
		unknownTask(t, m+" forged", h.rpc("/mcp/plain", h.key, m, params(forged), rpcOpts{declare: true}))
		unknownTask(t, m+" over-long", h.rpc("/mcp/plain", h.key, m, params(id+strings.Repeat("A", 2000)), rpcOpts{declare: true}))
		unknownTask(t, m+" not a handle", h.rpc("/mcp/plain", h.key, m, params("../../"+id), rpcOpts{declare: true}))
	}
	if _, c, u := engine.counts(); c != 0 || u != 0 {
		t.Errorf("refused handles reached the engine: %d cancels, %d updates", c, u)
	}
	if a := h.rpc("/mcp/plain", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true}); a.str(t, "status") != "working" {
		t.Errorf("the owner's task after the others' tries: %s", a.raw)
	}
	// The tool taken from the owner's reach: unknown too.
	item["disallowed_tools"] = []any{"slow_compute"}
	h.server(item)
	unknownTask(t, "tasks/get of a task of a tool disallowed since", h.rpc("/mcp", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true}))
	if !strings.Contains(h.logs.String(), "a task handle of another principal was refused") {
		t.Error("no log of another principal's handle")
	}
}

// TestNoTasksWithoutStore: a gateway that keeps no task records offers
// none: no extension, no execution in tools/list, the tasks/ methods
// unknown, a declared call of an upstream's task-supporting tool answered
// synchronously.
func TestNoTasksWithoutStore(t *testing.T) {
	h := newHarness(t)
	up, url := startTaskServer(t, true, nil)
	h.server(map[string]any{"server_id": "up", "url": url, "tools": map[string]any{"slow_compute": map[string]any{"task_support": "optional"}}})
	if h.discoverTasks("/mcp/up", h.key) || h.discoverTasks("/mcp", h.key) {
		t.Error("the extension advertised without a task store")
	}
	if got := h.listedSupport("/mcp/up", h.key); got["slow_compute"] != "(none)" {
		t.Errorf("tools/list shows execution without a task store: %v", got)
	}
	if a := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": "tsk_x"}, rpcOpts{declare: true}); a.code() != -32601 {
		t.Errorf("tasks/get: %s, want -32601", a.raw)
	}
	a := h.rpc("/mcp/up", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 0}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") == "task" || up.Stats().Created != 0 {
		t.Errorf("declared call without a task store: %s; upstream created %d tasks", a.raw, up.Stats().Created)
	}
}

// pollTask polls tasks/get on path until the task's status is not
// working (or the test's deadline), and returns the last answer.
func (h *harness) pollTask(path, key, id string) rpcAnswer {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		a := h.rpc(path, key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
		if a.err != nil || a.str(h.t, "status") != "working" || time.Now().After(deadline) {
			return a
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inputTask registers server "plain" over a task server, its
// confirm_delete tool task-supporting (item's extra attributes merged in),
// makes a declared task of confirm_delete, and polls it until the tool asks
// for input; it returns the task's id and that answer.
func (h *harness) inputTask(extra map[string]any) (string, rpcAnswer) {
	h.t.Helper()
	_, url := startTaskServer(h.t, false, nil)
	item := map[string]any{"server_id": "plain", "url": url, "task_ttl": 120,
		"tools": map[string]any{"confirm_delete": map[string]any{"task_support": "optional"}}}
	maps.Copy(item, extra)
	h.server(item)
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": map[string]any{
		"extensions": map[string]any{tasksExtension: map[string]any{}}, "elicitation": map[string]any{}}}
	a := h.rpc("/mcp/plain", h.key, "tools/call", map[string]any{"name": "confirm_delete", "arguments": map[string]any{"filename": "a.txt"}, "_meta": meta}, rpcOpts{declare: true})
	if a.err != nil || a.str(h.t, "resultType") != "task" {
		h.t.Fatalf("a declared call of confirm_delete: %s, want a CreateTaskResult", a.raw)
	}
	id := a.str(h.t, "taskId")
	a = h.pollTask("/mcp/plain", h.key, id)
	if a.err != nil || a.str(h.t, "status") != "input_required" || !strings.Contains(string(a.result["inputRequests"]), "confirm") {
		h.t.Fatalf("the task: %s, want input_required asking to confirm", a.raw)
	}
	return id, a
}

// TestTaskRelay: a task-capable upstream whose item sets no task_support
// is relayed: its tools list their own taskSupport, a declared call gets
// the upstream's task under a gateway handle (a relay record binding it to
// the upstream's id, which no answer shows), and tasks/get, tasks/update
// and tasks/cancel reach the upstream's task. The call's place is held for
// the creating exchange only. An item that sets task_support makes the
// gateway run the task itself instead.
func TestTaskRelay(t *testing.T) {
	var engine *recordingEngine
	h, ts := taskHarness(t, func(s *tasks.Store) TaskEngine {
		engine = &recordingEngine{store: s}
		return engine
	})
	up, url := startTaskServer(t, true, nil)
	h.server(map[string]any{"server_id": "up", "url": url, "max_concurrent_requests": 1, "on_limit": "shed"})
	h.server(map[string]any{"server_id": "own", "url": url, "tools": map[string]any{"slow_compute": map[string]any{"task_support": "optional"}}})

	if !h.discoverTasks("/mcp/up", h.key) {
		t.Error("server/discover does not advertise the extension for a task-capable upstream")
	}
	got := h.listedSupport("/mcp/up", h.key)
	for name, w := range map[string]string{"greet": "forbidden", "slow_compute": "optional", "failing_job": "required"} {
		if got[name] != w {
			t.Errorf("tools/list: %s taskSupport %q, want %q", name, got[name], w)
		}
	}

	call := func(path, tool string, args map[string]any) rpcAnswer {
		t.Helper()
		return h.rpc(path, h.key, "tools/call", map[string]any{"name": tool, "arguments": args}, rpcOpts{declare: true})
	}
	// Two long tasks under a cap of one, the second not shed: a relayed
	// task holds its place only while the upstream makes it.
	a := call("/mcp/up", "slow_compute", map[string]any{"seconds": 30})
	b := call("/mcp/up", "slow_compute", map[string]any{"seconds": 0.2, "label": "quick"})
	if a.err != nil || a.str(t, "resultType") != "task" || b.err != nil || b.str(t, "resultType") != "task" {
		t.Fatalf("relayed calls: %s / %s, want two CreateTaskResults", a.raw, b.raw)
	}
	long, quick := a.str(t, "taskId"), b.str(t, "taskId")
	if !tasks.ValidID(long) || up.Stats().Created != 2 {
		t.Fatalf("handle %q; upstream created %d tasks", long, up.Stats().Created)
	}
	rec, err := ts.Get(t.Context(), quick)
	if err != nil || rec.Kind != tasks.KindRelay || rec.UpstreamID == "" || rec.UpstreamID == quick || rec.ServerID != "up" {
		t.Fatalf("relay record %+v, %v", rec, err)
	}
	if bytes.Contains(b.raw, []byte(rec.UpstreamID)) {
		t.Errorf("the CreateTaskResult shows the upstream's id: %s", b.raw)
	}
	done := h.pollTask("/mcp/up", h.key, quick)
	if done.str(t, "status") != "completed" || done.str(t, "taskId") != quick || !bytes.Contains(done.result["result"], []byte("computed quick")) {
		t.Errorf("relayed tasks/get: %s", done.raw)
	}
	if bytes.Contains(done.raw, []byte(rec.UpstreamID)) {
		t.Errorf("tasks/get shows the upstream's id: %s", done.raw)
	}
	if s := done.str(t, "resultType"); s != "complete" || !bytes.Contains(done.result["result"], []byte(`"resultType":"complete"`)) {
		t.Errorf("tasks/get resultType %q, its result %s: want both complete", s, done.result["result"])
	}

	// On /mcp, under the tool's prefixed name.
	a = call("/mcp", "up"+ToolSeparator+"slow_compute", map[string]any{"seconds": 0, "label": "aggregated"})
	if a.err != nil || a.str(t, "resultType") != "task" {
		t.Fatalf("relayed call on /mcp: %s", a.raw)
	}
	if done := h.pollTask("/mcp", h.key, a.str(t, "taskId")); !bytes.Contains(done.result["result"], []byte("computed aggregated")) {
		t.Errorf("relayed task on /mcp: %s", done.raw)
	}

	// Input through tasks/update.
	a = call("/mcp/up", "confirm_delete", map[string]any{"filename": "notes.txt"})
	id := a.str(t, "taskId")
	ask := h.pollTask("/mcp/up", h.key, id)
	if ask.str(t, "status") != "input_required" || !bytes.Contains(ask.result["inputRequests"], []byte("elicitation/create")) {
		t.Fatalf("relayed input_required: %s", ask.raw)
	}
	a = h.rpc("/mcp/up", h.key, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{
		"confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}},
	}}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "complete" {
		t.Fatalf("relayed tasks/update: %s", a.raw)
	}
	if done := h.pollTask("/mcp", h.key, id); done.str(t, "status") != "completed" || !bytes.Contains(done.result["result"], []byte("deleted notes.txt")) {
		t.Errorf("after tasks/update: %s", done.raw)
	}
	// A JSON-RPC error of the upstream's task.
	a = call("/mcp/up", "protocol_error_job", map[string]any{})
	if f := h.pollTask("/mcp/up", h.key, a.str(t, "taskId")); f.str(t, "status") != "failed" || !bytes.Contains(f.result["error"], []byte("-32603")) {
		t.Errorf("relayed failure: %s", f.raw)
	}

	// Another key's tries reach neither the record's task nor the upstream.
	before := up.Stats().Requests
	other := testkit.PutKey(t, h.env, "*")
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		unknownTask(t, m+" of a relayed task by another key", h.rpc("/mcp/up", other, m, map[string]any{"taskId": long, "inputResponses": map[string]any{}}, rpcOpts{declare: true}))
	}
	if after := up.Stats().Requests; after["tasks/get"] != before["tasks/get"] || after["tasks/cancel"] != before["tasks/cancel"] || after["tasks/update"] != before["tasks/update"] {
		t.Errorf("another key's requests reached the upstream: %v → %v", before, after)
	}

	// Cancel reaches the upstream's task.
	a = h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": long}, rpcOpts{declare: true})
	if a.err != nil || a.str(t, "resultType") != "complete" {
		t.Fatalf("relayed tasks/cancel: %s", a.raw)
	}
	if c := h.pollTask("/mcp/up", h.key, long); c.str(t, "status") != "cancelled" {
		t.Errorf("after tasks/cancel: %s", c.raw)
	}
	if up.Stats().WrongName != 0 {
		t.Errorf("the upstream refused %d relayed requests for their Mcp-Name", up.Stats().WrongName)
	}

	// A required tool, undeclared: refused before the upstream.
	a = h.rpc("/mcp/up", h.key, "tools/call", map[string]any{"name": "failing_job", "arguments": map[string]any{}}, rpcOpts{})
	if a.code() != -32021 || up.Stats().Calls["failing_job"] != 0 {
		t.Errorf("required relayed tool undeclared: %s; upstream calls %d", a.raw, up.Stats().Calls["failing_job"])
	}

	// The item's task_support: the gateway's own task, not the upstream's.
	created := up.Stats().Created
	a = call("/mcp/own", "slow_compute", map[string]any{"seconds": 0})
	if a.str(t, "resultType") != "task" || len(engine.creates) != 1 || up.Stats().Created != created {
		t.Errorf("item task_support over a task-capable upstream: %s; engine creates %d; upstream created %d more", a.raw, len(engine.creates), up.Stats().Created-created)
	}
}

// rewriteAnswers wraps an upstream so that change may alter each JSON
// result it answers, by the request's Mcp-Method.
func rewriteAnswers(change func(method string, result map[string]any)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			var msg map[string]any
			if json.Unmarshal(body, &msg) == nil {
				if res, ok := msg["result"].(map[string]any); ok {
					change(r.Header.Get("Mcp-Method"), res)
					body, _ = json.Marshal(msg)
				}
			}
			for k, v := range rec.Header() {
				if k != "Content-Length" {
					w.Header()[k] = v
				}
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body)
		})
	}
}

// TestRelayHostileUpstream: what an upstream answers about its tasks is
// bounded and checked: an id too long to name a task, a tasks/get answer
// about another task, with an unknown status, or too large, never reaches
// the agent as a task; the upstream's id inside its texts is rewritten.
func TestRelayHostileUpstream(t *testing.T) {
	h, ts := taskHarnessWith(t, Options{MaxResultBytes: 1 << 20}, nil)
	var mode atomic.Value
	mode.Store("")
	_, url := startTaskServer(t, true, rewriteAnswers(func(method string, res map[string]any) {
		id, _ := res["taskId"].(string)
		switch m := mode.Load().(string); {
		case method == "tools/call" && m == "long-id":
			res["taskId"] = strings.Repeat("x", 600)
		case method == "tasks/get" && m == "other":
			res["taskId"] = "someone-elses-task"
		case method == "tasks/get" && m == "status":
			res["status"] = "exploded"
		case method == "tasks/get" && m == "huge":
			res["status"], res["result"] = "completed", map[string]any{"content": []any{map[string]any{"type": "text", "text": strings.Repeat("y", 2<<20)}}}
		case method == "tasks/get" && m == "chatty":
			res["statusMessage"] = strings.Repeat("z", 100<<10)
		case method == "tasks/get" && m == "echo":
			res["statusMessage"] = "working on " + id + "\x1b[31m"
		}
	}))
	h.server(map[string]any{"server_id": "up", "url": url})
	call := func() rpcAnswer {
		return h.rpc("/mcp/up", h.key, "tools/call", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 30}}, rpcOpts{declare: true})
	}

	mode.Store("long-id")
	a := call()
	if a.err != nil || string(a.result["isError"]) != "true" || a.result["taskId"] != nil {
		t.Errorf("an upstream task id of 600 bytes: %s, want a tool error", a.raw)
	}
	mode.Store("")
	a = call()
	id := a.str(t, "taskId")
	for _, m := range []string{"other", "status", "huge"} {
		mode.Store(m)
		a := h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
		if a.err == nil || len(a.raw) > 4096 || bytes.Contains(a.raw, []byte("someone-elses-task")) {
			t.Errorf("tasks/get answered %q by the upstream: %.300s, want a short error", m, a.raw)
		}
	}
	mode.Store("chatty")
	a = h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	if msg := a.str(t, "statusMessage"); len(msg) > tasks.MaxStatusMessageBytes {
		t.Errorf("a statusMessage of %d bytes went out, more than %d", len(msg), tasks.MaxStatusMessageBytes)
	}
	// A task of its own: a poll within the interval the last was told is
	// answered as that one was (taskPolls).
	mode.Store("")
	h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
	id = call().str(t, "taskId")
	rec, err := ts.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	mode.Store("echo")
	a = h.rpc("/mcp/up", h.key, "tasks/get", map[string]any{"taskId": id}, rpcOpts{declare: true})
	if msg := a.str(t, "statusMessage"); msg != "working on "+id+"\x1b[31m" || bytes.Contains(a.raw, []byte(rec.UpstreamID)) {
		t.Errorf("statusMessage %q (raw %s), want the upstream's id rewritten to the handle", msg, a.raw)
	}
	if bytes.Contains(a.raw, []byte("\x1b")) {
		t.Errorf("a control character went out unescaped: %q", a.raw)
	}
	mode.Store("")
	h.rpc("/mcp/up", h.key, "tasks/cancel", map[string]any{"taskId": id}, rpcOpts{declare: true})
}
