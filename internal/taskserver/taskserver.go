package taskserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Extension names the tasks extension in capabilities.
const Extension = "io.modelcontextprotocol/tasks"

// The JSON-RPC codes the extension answers with besides invalid params.
const (
	codeHeaderMismatch   = -32020
	codeMissingExtension = -32021
)

// Options configures a Server. The zero value is a synchronous server.
type Options struct {
	// Tasks makes the server implement the tasks extension itself (see
	// the package doc).
	Tasks bool
	// Step is how long failing_job and protocol_error_job work before
	// they fail; zero means 100ms.
	Step time.Duration
	// TTL is its tasks' ttlMs; zero means an hour.
	TTL time.Duration
	// PollInterval is its tasks' pollIntervalMs; zero means 100ms.
	PollInterval time.Duration
}

// Server is the MCP server; Handler serves it.
type Server struct {
	opts    Options
	handler http.Handler

	mu    sync.Mutex
	tasks map[string]*task
	stats Stats
}

// Stats is what a Server was asked.
type Stats struct {
	// Calls counts tools/call by tool.
	Calls map[string]int
	// Created counts the tasks it created.
	Created int
	// Requests counts tasks/get, tasks/update and tasks/cancel by method,
	// refused ones included.
	Requests map[string]int
	// Declared counts the tools/call that declared the extension.
	Declared int
	// WrongName counts tasks/ requests refused because Mcp-Name was not
	// their task id.
	WrongName int
}

// New returns a Server.
func New(opts Options) *Server {
	if opts.Step <= 0 {
		opts.Step = 100 * time.Millisecond
	}
	if opts.TTL <= 0 {
		opts.TTL = time.Hour
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 100 * time.Millisecond
	}
	s := &Server{opts: opts, tasks: map[string]*task{}, stats: Stats{Calls: map[string]int{}, Requests: map[string]int{}}}
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}
	if opts.Tasks {
		caps.Extensions = map[string]any{Extension: map[string]any{}}
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "taskserver", Version: "1"}, &mcp.ServerOptions{Capabilities: caps})
	if opts.Tasks {
		for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
			if err := mcp.AddReceivingCustomMethod(srv, m, func(context.Context, *mcp.ServerSession, *taskParams) (*jsonResult, error) {
				return nil, errors.New("unreachable: answered by the middleware")
			}); err != nil {
				panic(err)
			}
		}
	}
	srv.AddReceivingMiddleware(s.middleware)
	s.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	return s
}

// Handler serves MCP streamable HTTP (stateless, JSON answers).
func (s *Server) Handler() http.Handler { return s.handler }

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stats
	out.Calls, out.Requests = maps.Clone(s.stats.Calls), maps.Clone(s.stats.Requests)
	return out
}

// Running reports how many of its tasks have not ended.
func (s *Server) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.tasks {
		t.mu.Lock()
		if !terminal(t.status) {
			n++
		}
		t.mu.Unlock()
	}
	return n
}

// taskParams are a tasks/ request's params.
type taskParams struct {
	mcp.ParamsBase
	TaskID         string          `json:"taskId"`
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
}

// jsonResult is a result given as a JSON object.
type jsonResult struct {
	mcp.ResultBase
	v map[string]any
}

func (r *jsonResult) MarshalJSON() ([]byte, error) {
	out := maps.Clone(r.v)
	if len(r.Meta) > 0 {
		out["_meta"] = r.Meta
	}
	return json.Marshal(out)
}

func result(v map[string]any) *jsonResult { return &jsonResult{v: v} }

// declares reports whether a request's _meta declares the extension.
func declares(m mcp.Meta) bool {
	caps, _ := m[mcp.MetaKeyClientCapabilities].(map[string]any)
	exts, _ := caps["extensions"].(map[string]any)
	_, ok := exts[Extension]
	return ok
}

func missingExtension(what string) error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{Extension: map[string]any{}}}})
	return &jsonrpc.Error{Code: codeMissingExtension, Message: what + " needs the client capability " + Extension, Data: data}
}

func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

func (s *Server) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			return s.list(), nil
		case "tools/call":
			return s.call(ctx, req.(*mcp.CallToolRequest).Params)
		case "tasks/get", "tasks/update", "tasks/cancel":
			return s.taskRequest(method, req)
		}
		return next(ctx, method, req)
	}
}

func (s *Server) list() mcp.Result {
	tools := make([]map[string]any, 0, len(fixtures))
	for _, f := range fixtures {
		t := map[string]any{"name": f.name, "description": f.description, "inputSchema": f.schema}
		if s.opts.Tasks {
			t["execution"] = map[string]any{"taskSupport": f.support()}
		}
		tools = append(tools, t)
	}
	return result(map[string]any{"tools": tools, "resultType": "complete"})
}

func (s *Server) call(ctx context.Context, p *mcp.CallToolParamsRaw) (mcp.Result, error) {
	f, ok := fixtureNamed(p.Name)
	if !ok {
		return nil, invalidParams("unknown tool %q", p.Name)
	}
	declared := declares(p.Meta)
	s.mu.Lock()
	s.stats.Calls[f.name]++
	if declared {
		s.stats.Declared++
	}
	s.mu.Unlock()
	var args map[string]any
	if len(p.Arguments) > 0 {
		if err := json.Unmarshal(p.Arguments, &args); err != nil {
			return nil, invalidParams("arguments: %v", err)
		}
	}
	answered, err := answersOf(p)
	if err != nil {
		return nil, err
	}
	if s.opts.Tasks && f.required && !declared {
		return nil, missingExtension(fmt.Sprintf("tool %q", f.name))
	}
	if s.opts.Tasks && declared && f.tasks {
		if f.before != nil {
			// Input gathered before the task exists, synchronously.
			if missing := f.before.missing(answered); len(missing) > 0 {
				return inputRequired(missing, answered), nil
			}
		}
		return s.create(f, args, answered), nil
	}
	ask := func(_ context.Context, reqs map[string]any) (map[string]json.RawMessage, error) {
		if missing := missingOf(reqs, answered); len(missing) > 0 {
			return nil, &needInput{requests: missing}
		}
		return answered, nil
	}
	if f.before != nil {
		if missing := f.before.missing(answered); len(missing) > 0 {
			return inputRequired(missing, answered), nil
		}
	}
	o, err := f.run(ctx, s, args, answered, ask)
	var need *needInput
	if errors.As(err, &need) {
		return inputRequired(need.requests, answered), nil
	}
	if err != nil {
		return nil, err
	}
	if o.rpcErr != nil {
		return nil, o.rpcErr
	}
	o.result["resultType"] = "complete"
	return result(o.result), nil
}

// answersOf gathers a call's input responses so far: those of its
// requestState (the earlier rounds') and its inputResponses.
func answersOf(p *mcp.CallToolParamsRaw) (map[string]json.RawMessage, error) {
	answered := map[string]json.RawMessage{}
	if p.RequestState != "" {
		raw, err := base64.RawURLEncoding.DecodeString(p.RequestState)
		if err != nil || json.Unmarshal(raw, &answered) != nil {
			return nil, invalidParams("requestState is not one this server made")
		}
	}
	for k, v := range p.InputResponses {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, invalidParams("inputResponses[%q]: %v", k, err)
		}
		answered[k] = b
	}
	return answered, nil
}

// inputRequired is the input_required result asking for reqs, its
// requestState carrying the answers so far.
func inputRequired(reqs map[string]any, answered map[string]json.RawMessage) *jsonResult {
	state, _ := json.Marshal(answered)
	return result(map[string]any{
		"resultType":    "input_required",
		"inputRequests": reqs,
		"requestState":  base64.RawURLEncoding.EncodeToString(state),
	})
}

func missingOf(reqs map[string]any, answered map[string]json.RawMessage) map[string]any {
	missing := map[string]any{}
	for k, v := range reqs {
		if _, ok := answered[k]; !ok {
			missing[k] = v
		}
	}
	return missing
}

// needInput stops a synchronous job that asked for input it has not got.
type needInput struct{ requests map[string]any }

func (e *needInput) Error() string { return "input required" }

// task is one task of a Server in Tasks mode.
type task struct {
	id      string
	created time.Time
	cancel  context.CancelFunc

	mu            sync.Mutex
	status        string
	statusMessage string
	updated       time.Time
	result        map[string]any
	err           *jsonrpc.Error
	// asked are the input requests outstanding, answers those answered
	// and not yet taken by the job; wake tells the job of new answers.
	asked   map[string]any
	answers map[string]json.RawMessage
	wake    chan struct{}
}

func terminal(status string) bool {
	return status == "completed" || status == "failed" || status == "cancelled"
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// create starts a task running f and returns its CreateTaskResult.
func (s *Server) create(f fixture, args map[string]any, answered map[string]json.RawMessage) mcp.Result {
	ctx, cancel := context.WithCancel(context.Background())
	now := time.Now().UTC()
	t := &task{id: newID(), created: now, updated: now, cancel: cancel, status: "working", wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.tasks[t.id] = t
	s.stats.Created++
	s.mu.Unlock()
	go s.runTask(ctx, t, f, args, answered)
	t.mu.Lock()
	defer t.mu.Unlock()
	v := s.taskFields(t)
	v["resultType"] = "task"
	return result(v)
}

func (s *Server) runTask(ctx context.Context, t *task, f fixture, args map[string]any, answered map[string]json.RawMessage) {
	ask := func(ctx context.Context, reqs map[string]any) (map[string]json.RawMessage, error) {
		got := map[string]json.RawMessage{}
		t.mu.Lock()
		t.asked, t.answers, t.status, t.updated = maps.Clone(reqs), map[string]json.RawMessage{}, "input_required", time.Now().UTC()
		t.mu.Unlock()
		for {
			t.mu.Lock()
			for k, v := range t.answers {
				got[k] = v
				delete(t.asked, k)
			}
			t.answers = map[string]json.RawMessage{}
			done := len(t.asked) == 0
			if done {
				t.asked, t.status, t.updated = nil, "working", time.Now().UTC()
			}
			t.mu.Unlock()
			if done {
				return got, nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-t.wake:
			}
		}
	}
	o, err := f.run(ctx, s, args, answered, ask)
	t.mu.Lock()
	defer t.mu.Unlock()
	if terminal(t.status) {
		return
	}
	t.updated = time.Now().UTC()
	switch {
	case ctx.Err() != nil:
		t.status, t.statusMessage = "cancelled", "cancelled by tasks/cancel"
	case err != nil:
		t.status, t.err = "failed", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	case o.rpcErr != nil:
		t.status, t.err, t.statusMessage = "failed", o.rpcErr, o.rpcErr.Message
	default:
		t.status, t.result = "completed", o.result
	}
}

// taskFields are the Task fields of t; t.mu is held.
func (s *Server) taskFields(t *task) map[string]any {
	v := map[string]any{
		"taskId":         t.id,
		"status":         t.status,
		"createdAt":      t.created.Format(time.RFC3339Nano),
		"lastUpdatedAt":  t.updated.Format(time.RFC3339Nano),
		"ttlMs":          s.opts.TTL.Milliseconds(),
		"pollIntervalMs": s.opts.PollInterval.Milliseconds(),
	}
	if t.statusMessage != "" {
		v["statusMessage"] = t.statusMessage
	}
	return v
}

func (s *Server) taskRequest(method string, req mcp.Request) (mcp.Result, error) {
	p, _ := req.GetParams().(*taskParams)
	s.mu.Lock()
	s.stats.Requests[method]++
	s.mu.Unlock()
	if p == nil || p.TaskID == "" {
		return nil, invalidParams("taskId is required")
	}
	if extra := req.GetExtra(); extra != nil && extra.Header.Get("Mcp-Name") != p.TaskID {
		s.mu.Lock()
		s.stats.WrongName++
		s.mu.Unlock()
		return nil, &jsonrpc.Error{Code: codeHeaderMismatch, Message: "Mcp-Name is not the task id"}
	}
	if !declares(p.Meta) {
		return nil, missingExtension(method)
	}
	s.mu.Lock()
	t := s.tasks[p.TaskID]
	s.mu.Unlock()
	if t == nil {
		return nil, invalidParams("unknown task %q", p.TaskID)
	}
	switch method {
	case "tasks/cancel":
		t.mu.Lock()
		if !terminal(t.status) {
			t.status, t.statusMessage, t.updated = "cancelled", "cancelled by tasks/cancel", time.Now().UTC()
		}
		t.mu.Unlock()
		t.cancel()
		return result(map[string]any{"resultType": "complete"}), nil
	case "tasks/update":
		var responses map[string]json.RawMessage
		if len(p.InputResponses) == 0 || json.Unmarshal(p.InputResponses, &responses) != nil {
			return nil, invalidParams("inputResponses must be an object")
		}
		t.mu.Lock()
		for k, v := range responses {
			if _, ok := t.asked[k]; ok {
				t.answers[k] = v
			}
		}
		t.mu.Unlock()
		select {
		case t.wake <- struct{}{}:
		default:
		}
		return result(map[string]any{"resultType": "complete"}), nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	v := s.taskFields(t)
	v["resultType"] = "complete"
	switch t.status {
	case "completed":
		v["result"] = t.result
	case "failed":
		v["error"] = t.err
	case "input_required":
		// What is still outstanding: answers given but not yet taken by
		// the job count as answered.
		open := map[string]any{}
		for _, k := range slices.Sorted(maps.Keys(t.asked)) {
			if _, ok := t.answers[k]; !ok {
				open[k] = t.asked[k]
			}
		}
		v["inputRequests"] = open
	}
	return result(v), nil
}
