package gateway

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// Which tools are task-supporting, and who runs their tasks (docs/tasks.md).
//
// A tool's item may set task_support: then the gateway makes the task
// itself (a gateway task, run by the engine), and calls the upstream
// synchronously; without an engine, such a tool supports no task. An item
// that sets none leaves it to the upstream: a tool the upstream lists as
// task-supporting, on an upstream that declares the extension, is relayed
// (the caller's declaration is forwarded and the upstream's task handed on
// under a gateway handle). Any other tool is forbidden. Without a task
// store the gateway offers no task at all.

// tasksExtension names the tasks extension (SEP-2663).
const tasksExtension = upstream.TasksExtension

// taskMode is how the gateway treats one tool's calls for tasks.
type taskMode struct {
	// support is the tool's execution.taskSupport as the gateway lists
	// it: registry.TaskForbidden, TaskOptional or TaskRequired.
	support string
	// relay: the upstream makes the task, the gateway relays it.
	relay bool
}

var forbidden = taskMode{support: registry.TaskForbidden}

// tasksOn reports whether the gateway offers tasks at all.
func (g *Gateway) tasksOn() bool { return g.deps.TaskStore != nil }

// gatewayTasks reports whether the gateway makes tasks itself.
func (g *Gateway) gatewayTasks() bool { return g.deps.TaskStore != nil && g.deps.Tasks != nil }

// modeOf is the mode of tool t of srv, as the upstream lists it, when the
// upstream does (upDeclares) or does not declare the tasks extension.
func (g *Gateway) modeOf(srv *registry.Server, t *mcp.Tool, upDeclares bool) taskMode {
	if !g.tasksOn() || t == nil {
		return forbidden
	}
	switch item := srv.TaskSupport(t.Name); item {
	case registry.TaskForbidden:
		return forbidden
	case registry.TaskOptional, registry.TaskRequired:
		if g.gatewayTasks() {
			return taskMode{support: item}
		}
		return forbidden
	}
	switch up := upstream.TaskSupport(t); up {
	case registry.TaskOptional, registry.TaskRequired:
		if upDeclares && srv.Transport == registry.TransportHTTP {
			return taskMode{support: up, relay: true}
		}
	}
	return forbidden
}

// upstreamDeclares reports whether srv's upstream declares the tasks
// extension, as c's session learnt it (false when that cannot be known).
func (g *Gateway) upstreamDeclares(ctx context.Context, srv *registry.Server, c *caller) bool {
	if srv.Transport != registry.TransportHTTP {
		return false
	}
	ictx, cancel := g.boundedCtx(ctx, srv.Timeout)
	defer cancel()
	info, err := g.deps.Upstream.Info(ictx, srv, c.upstream(srv))
	return err == nil && upstream.DeclaresTasks(info)
}

// toolMode is the mode of the tool named tool (the upstream's name) of
// srv, for c: forbidden when the tool cannot be found.
func (g *Gateway) toolMode(ctx context.Context, srv *registry.Server, c *caller, tool string) taskMode {
	if !g.tasksOn() {
		return forbidden
	}
	t := &mcp.Tool{Name: tool}
	if srv.TaskSupport(tool) == "" {
		lctx, cancel := g.boundedCtx(ctx, srv.Timeout)
		found, err := g.deps.Upstream.Tool(lctx, srv, c.upstream(srv), tool)
		cancel()
		if err != nil || upstream.TaskSupport(found) == "" {
			return forbidden
		}
		t = found
	}
	return g.modeOf(srv, t, upstream.TaskSupport(t) != "" && g.upstreamDeclares(ctx, srv, c))
}

// modes are the modes of tools (as srv lists them), by name; the
// upstream's declaration is asked for only when a tool needs it.
func (g *Gateway) modes(ctx context.Context, srv *registry.Server, c *caller, tools []*mcp.Tool) map[string]taskMode {
	out := make(map[string]taskMode, len(tools))
	if !g.tasksOn() {
		return out
	}
	declares, asked := false, false
	for _, t := range tools {
		if srv.TaskSupport(t.Name) == "" && upstream.TaskSupport(t) != "" && !asked {
			declares, asked = g.upstreamDeclares(ctx, srv, c), true
		}
		out[t.Name] = g.modeOf(srv, t, declares)
	}
	return out
}

// anyTasks reports whether one of modes supports tasks.
func anyTasks(modes map[string]taskMode) bool {
	for _, m := range modes {
		if m.support != registry.TaskForbidden {
			return true
		}
	}
	return false
}

// declaresTasks reports whether a request's _meta declares the tasks
// extension in its clientCapabilities (SEP-2663: per request; there is no
// session to declare it in). The extension is not defined before protocol
// 2026-07-28: an earlier request never declares it.
func (sc *mcpScope) declaresTasks(m mcp.Meta) bool {
	if sc.protocol < protocolMRTR {
		return false
	}
	var caps map[string]any
	switch v := m[mcp.MetaKeyClientCapabilities].(type) {
	case map[string]any:
		caps = v
	case json.RawMessage:
		_ = json.Unmarshal(v, &caps)
	}
	exts, _ := caps["extensions"].(map[string]any)
	_, ok := exts[tasksExtension].(map[string]any)
	return ok
}

// missingTasks is the -32021 error of a request that needs the tasks
// extension and did not declare it, with data.requiredCapabilities.
func missingTasks(msg string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}})
	return &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities, Message: msg, Data: data}
}

// withTasksCapability returns caps (a client's declared capabilities, as
// forwarded upstream) with the tasks extension declared too.
func withTasksCapability(caps map[string]any) map[string]any {
	out := maps.Clone(caps)
	if out == nil {
		out = map[string]any{}
	}
	out["extensions"] = map[string]any{tasksExtension: map[string]any{}}
	return out
}

// listsExecution reports whether tools/list shows each tool's
// execution.taskSupport: to a 2026-07-28 request, from a gateway that
// offers tasks. (To an earlier client, execution.taskSupport would announce
// the 2025-11-25 experimental tasks, which the gateway does not serve.)
func (sc *mcpScope) listsExecution() bool {
	return sc.g.tasksOn() && sc.protocol >= protocolMRTR
}

// offersTasks reports whether the request's endpoint has a task-supporting
// tool for the caller: its server's (/mcp/{server_id}), or any of the
// caller's servers' (/mcp). A list that cannot be had counts as none.
func (sc *mcpScope) offersTasks(ctx context.Context) bool {
	if !sc.g.tasksOn() {
		return false
	}
	if sc.srv != nil {
		lctx, cancel := sc.g.boundedCtx(ctx, sc.srv.Timeout)
		defer cancel()
		ls, err := sc.g.deps.Upstream.ToolListing(lctx, sc.srv, sc.caller.upstream(sc.srv))
		return err == nil && anyTasks(sc.g.modes(ctx, sc.srv, sc.caller, sc.caller.visible(sc.srv, ls.Tools)))
	}
	all, err := sc.g.allTools(ctx, sc.caller)
	if err != nil {
		return false
	}
	for _, st := range all {
		if st.srv != nil && anyTasks(sc.g.modes(ctx, st.srv, sc.caller, st.tools)) {
			return true
		}
	}
	return false
}

// listedTools is a tools/list result that shows each tool's
// execution.taskSupport, which the SDK's Tool cannot carry.
type listedTools struct {
	*mcp.ListToolsResult
	support map[string]string // by listed name
}

// withExecution shows modes (by listed name) in res.
func withExecution(res *mcp.ListToolsResult, modes map[string]taskMode) *listedTools {
	out := &listedTools{ListToolsResult: res, support: make(map[string]string, len(res.Tools))}
	for _, t := range res.Tools {
		out.support[t.Name] = registry.TaskForbidden
		if m, ok := modes[t.Name]; ok {
			out.support[t.Name] = m.support
		}
	}
	return out
}

func (r *listedTools) MarshalJSON() ([]byte, error) {
	raw, err := json.Marshal(r.ListToolsResult)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	var tools []map[string]json.RawMessage
	if err := json.Unmarshal(fields["tools"], &tools); err != nil {
		return nil, err
	}
	for _, t := range tools {
		var name string
		_ = json.Unmarshal(t["name"], &name)
		t["execution"], _ = json.Marshal(map[string]string{"taskSupport": r.support[name]})
	}
	if fields["tools"], err = json.Marshal(tools); err != nil {
		return nil, err
	}
	return json.Marshal(fields)
}
