package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// Tasks (the io.modelcontextprotocol/tasks extension, SEP-2663). An
// upstream that declares the extension may list a tool's
// execution.taskSupport and answer a tools/call that declared the extension
// with a CreateTaskResult (resultType "task") instead of a CallToolResult;
// the task is then polled with tasks/get, given input with tasks/update and
// stopped with tasks/cancel, each naming the task in the Mcp-Name header.
//
// The SDK knows none of this: its Tool has no execution, and it decodes a
// CreateTaskResult as an empty CallToolResult. So the pool reads those
// answers itself, as they come off the wire (capture): a tool list's
// taskSupport is kept in the tool's _meta under TaskSupportKey (so that it
// travels with the list, through the fleet's catalog too), and a call's
// CreateTaskResult is kept by its Exchange (Task). The tasks/ methods are
// sent as the SDK's custom methods (TaskRequest).

// TasksExtension names the tasks extension in capabilities.
const TasksExtension = "io.modelcontextprotocol/tasks"

// TaskSupportKey is the _meta key of a listed tool under which the pool
// keeps the execution.taskSupport its upstream listed. It is the gateway's
// own: Listed removes it before a tool is shown to anyone.
const TaskSupportKey = "mcpgate/taskSupport"

// maxTaskAnswer bounds the CreateTaskResult the pool takes from an
// upstream: a task handle and its metadata, never a result.
const maxTaskAnswer = 64 << 10

// DeclaresTasks reports whether an upstream's discovery answer declares the
// tasks extension: capabilities.extensions names it, in protocol 2026-07-28
// or later (the extension is not defined before).
func DeclaresTasks(info *mcp.InitializeResult) bool {
	if info == nil || info.Capabilities == nil || info.ProtocolVersion < "2026-07-28" {
		return false
	}
	_, ok := info.Capabilities.Extensions[TasksExtension]
	return ok
}

// TaskSupport returns the execution.taskSupport an upstream listed for t
// ("optional" or "required"; "forbidden" or "" when it listed none).
func TaskSupport(t *mcp.Tool) string {
	if t == nil {
		return ""
	}
	s, _ := t.Meta[TaskSupportKey].(string)
	return s
}

// Listed returns t as the gateway shows it: without TaskSupportKey (a copy,
// when it has the key; t itself, shared, otherwise).
func Listed(t *mcp.Tool) *mcp.Tool {
	if _, ok := t.Meta[TaskSupportKey]; !ok {
		return t
	}
	c := *t
	c.Meta = make(mcp.Meta, len(t.Meta)-1)
	for k, v := range t.Meta {
		if k != TaskSupportKey {
			c.Meta[k] = v
		}
	}
	if len(c.Meta) == 0 {
		c.Meta = nil
	}
	return &c
}

// declaresTasksMeta reports whether a request's _meta declares the tasks
// extension in its clientCapabilities.
func declaresTasksMeta(m mcp.Meta) bool {
	caps, _ := m[mcp.MetaKeyClientCapabilities].(map[string]any)
	exts, _ := caps["extensions"].(map[string]any)
	_, ok := exts[TasksExtension]
	return ok
}

// Task is an upstream's CreateTaskResult to a tools/call, as it came.
type Task struct {
	// Raw is the result object (resultType "task", taskId, status, …),
	// at most maxTaskAnswer bytes.
	Raw json.RawMessage
}

// Task returns the upstream's CreateTaskResult, once Done is closed, when
// the call declared the tasks extension and the upstream answered it with
// a task (Result's result is then empty); nil otherwise.
func (x *Exchange) Task() *Task {
	<-x.done
	return x.task
}

// taskAnswer finds whether res, the SDK's reading of a tools/call answer
// captured in c, was a CreateTaskResult, and returns it.
func taskAnswer(res *mcp.CallToolResult, c *capture) (*Task, error) {
	raw, over := c.result()
	if over {
		// Too large to be kept: it is a task only if the SDK read
		// nothing else in it.
		if res != nil && len(res.Content) == 0 && res.StructuredContent == nil && res.InputRequests == nil {
			if b, err := json.Marshal(res); err == nil && resultType(b) == "task" {
				return nil, &LimitError{What: "task answer", Limit: maxTaskAnswer}
			}
		}
		return nil, nil
	}
	if raw == nil || resultType(raw) != "task" {
		return nil, nil
	}
	return &Task{Raw: raw}, nil
}

// resultType is the resultType member of a result object, "" if none.
func resultType(raw json.RawMessage) string {
	var r struct {
		ResultType string `json:"resultType"`
	}
	_ = json.Unmarshal(raw, &r)
	return r.ResultType
}

// taskMethods are the extension's methods a relay sends upstream.
var taskMethods = []string{"tasks/get", "tasks/update", "tasks/cancel"}

// taskParams are a tasks/ request's params.
type taskParams struct {
	mcp.ParamsBase
	TaskID         string          `json:"taskId"`
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
}

// rawResult is a result kept as it came.
type rawResult struct {
	mcp.ResultBase
	raw json.RawMessage
}

func (r *rawResult) UnmarshalJSON(b []byte) error {
	r.raw = append(json.RawMessage(nil), b...)
	return nil
}

// registerTaskMethods lets the pool's client send the extension's methods.
func registerTaskMethods(c *mcp.Client) {
	for _, m := range taskMethods {
		if err := mcp.AddSendingCustomMethod[*taskParams, *rawResult](c, m); err != nil {
			panic(fmt.Sprintf("register %s: %v", m, err))
		}
	}
}

// ErrNotTaskMethod refuses a TaskRequest for another method than
// tasks/get, tasks/update or tasks/cancel.
var ErrNotTaskMethod = errors.New("not a tasks method")

// TaskRequest sends method (tasks/get, tasks/update or tasks/cancel) for
// the upstream's task id to srv, for c: declaring the tasks extension,
// with id in the Mcp-Name header too, and inputResponses (a JSON object)
// for tasks/update. It returns the upstream's result as it came.
func (p *Pool) TaskRequest(ctx context.Context, srv *registry.Server, c Caller, method, id string, inputResponses json.RawMessage) (json.RawMessage, error) {
	known := false
	for _, m := range taskMethods {
		known = known || m == method
	}
	if !known {
		return nil, fmt.Errorf("%w: %q", ErrNotTaskMethod, method)
	}
	ctx = context.WithValue(ctx, taskNameKey{}, id)
	var out json.RawMessage
	err := p.Do(ctx, srv, c, nil, func(ctx context.Context, cs *mcp.ClientSession) error {
		params := &taskParams{TaskID: id, InputResponses: inputResponses}
		params.Meta = mcp.Meta{mcp.MetaKeyClientCapabilities: map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}
		var end func(error)
		if p.trace != nil {
			ctx, end = p.trace.Send(ctx, method, srv, params.Meta)
		}
		res, err := mcp.CallCustomMethod[*taskParams, *rawResult](ctx, cs, method, params)
		if end != nil {
			end(err)
		}
		if err != nil {
			return err
		}
		out = res.raw
		return nil
	})
	return out, err
}

type taskNameKey struct{}

// addTaskName returns a tasks/ request with its Mcp-Name header set to the
// task id TaskRequest put in its context (a copy: a RoundTripper leaves its
// request alone). The SDK sets Mcp-Name only for the methods it knows.
func addTaskName(req *http.Request) *http.Request {
	id, ok := req.Context().Value(taskNameKey{}).(string)
	if !ok {
		return req
	}
	switch req.Header.Get("Mcp-Method") {
	case "tasks/get", "tasks/update", "tasks/cancel":
	default:
		return req
	}
	out := req.Clone(req.Context())
	out.Header.Set("Mcp-Name", id)
	return out
}

// listedTaskSupport sets TaskSupportKey on the tools of res, one page of
// an upstream's tools/list, from the page as captured by c: the
// execution.taskSupport of each tool that lists one, removed from each
// that does not. A page the SDK answered from its own cache (nothing
// captured) keeps the keys set when it was first read.
func listedTaskSupport(res *mcp.ListToolsResult, c *capture) {
	raw, over := c.result()
	c.reset()
	if raw == nil || over {
		return
	}
	var page struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	if json.Unmarshal(raw, &page) != nil {
		return
	}
	support := make(map[string]string, len(page.Tools))
	for _, t := range page.Tools {
		switch s := t.Execution.TaskSupport; s {
		case "optional", "required":
			support[t.Name] = s
		}
	}
	for _, t := range res.Tools {
		if t == nil {
			continue
		}
		if s, ok := support[t.Name]; ok {
			if t.Meta == nil {
				t.Meta = mcp.Meta{}
			}
			t.Meta[TaskSupportKey] = s
		} else {
			delete(t.Meta, TaskSupportKey)
		}
	}
}

type captureKey struct{}

// capture keeps the raw answer to the requests of one MCP method sent with
// its context (withCapture): the last one's body, up to limit bytes.
type capture struct {
	method string
	limit  int
	mu     sync.Mutex
	ctype  string
	body   []byte
	over   bool
}

// withCapture makes the answers to method's requests sent with ctx kept in
// the capture returned, up to limit bytes each.
func withCapture(ctx context.Context, method string, limit int) (context.Context, *capture) {
	c := &capture{method: method, limit: limit}
	return context.WithValue(ctx, captureKey{}, c), c
}

// captureAnswer tees the body of resp, the answer to req, into req's
// capture when it has one for req's method.
func captureAnswer(req *http.Request, resp *http.Response) {
	c, _ := req.Context().Value(captureKey{}).(*capture)
	if c == nil || req.Method != http.MethodPost || req.Header.Get("Mcp-Method") != c.method {
		return
	}
	c.mu.Lock()
	c.ctype, _, _ = mime.ParseMediaType(resp.Header.Get("Content-Type"))
	c.body, c.over = c.body[:0], false
	c.mu.Unlock()
	resp.Body = &captureBody{rc: resp.Body, c: c}
}

type captureBody struct {
	rc io.ReadCloser
	c  *capture
}

func (b *captureBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.c.add(p[:n])
	return n, err
}

func (b *captureBody) Close() error { return b.rc.Close() }

func (c *capture) add(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return
	}
	if len(c.body)+len(p) > c.limit {
		c.over, c.body = true, nil
		return
	}
	c.body = append(c.body, p...)
}

func (c *capture) reset() {
	c.mu.Lock()
	c.body, c.over, c.ctype = nil, false, ""
	c.mu.Unlock()
}

// result returns the result object of the JSON-RPC response captured (nil
// when none was, or it was an error), and whether the answer was larger
// than the capture keeps.
func (c *capture) result() (json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return nil, true
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	if c.ctype != "text/event-stream" {
		if json.Unmarshal(c.body, &msg) != nil {
			return nil, false
		}
		return msg.Result, false
	}
	// An event stream: the response is the event whose data has an id
	// and a result (notifications come before it).
	var found json.RawMessage
	var data []byte
	flush := func() {
		msg.ID, msg.Result = nil, nil
		if len(data) > 0 && json.Unmarshal(data, &msg) == nil && len(msg.ID) > 0 && len(msg.Result) > 0 {
			found = append(json.RawMessage(nil), msg.Result...)
		}
		data = data[:0]
	}
	sc := bufio.NewScanner(bytes.NewReader(c.body))
	sc.Buffer(make([]byte, 0, 4096), c.limit+1)
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(line) == 0 {
			flush()
			continue
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
		}
	}
	flush()
	return found, false
}
