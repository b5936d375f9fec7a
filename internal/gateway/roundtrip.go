package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/roundtrip"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// Multi-round-trip requests (MCP 2026-07-28, SEP-2322). An upstream may
// answer a tool call with resultType "input_required": input requests for
// the client (elicitation, sampling, roots) and an opaque requestState. The
// gateway holds no slot and keeps nothing while the client answers: the
// call's lease is released like any other call's, the upstream's state is
// sealed into the result (package roundtrip), and the client's retry is a
// new call that takes a slot again.

// protocolMRTR is the first protocol version with input-required results.
const protocolMRTR = "2026-07-28"

// inputKinds are the client capabilities an upstream's input requests need,
// and the only ones the gateway passes on.
var inputKinds = []string{"elicitation", "roots", "sampling"}

// client is who makes a tool call and what it can take.
type client struct {
	// principal identifies the caller, for binding request states.
	principal string
	// protocol is the MCP protocol version of the request ("" for REST).
	protocol string
	// mrtr: the client can take an input_required result.
	mrtr bool
	// caps are the client's declared capabilities among inputKinds, as it
	// wrote them.
	caps map[string]any
	// tasks: the request declared the tasks extension. mode is the tool's
	// task mode, when the caller worked it out (nil: roundTrip does).
	tasks bool
	mode  *taskMode
}

// clientFromCaps reads declared capabilities (a JSON object), keeping only
// the input kinds the gateway can relay.
func clientFromCaps(raw any) map[string]any {
	var m map[string]any
	switch v := raw.(type) {
	case map[string]any:
		m = v
	case json.RawMessage:
		_ = json.Unmarshal(v, &m)
	}
	out := map[string]any{}
	for _, k := range inputKinds {
		if v, ok := m[k]; ok && v != nil {
			out[k] = v
		}
	}
	return out
}

// principalOf names p at full strength, for binding request states.
func principalOf(p *auth.Principal) string {
	if p == nil {
		return ""
	}
	return p.StateKey
}

// stateRefused is the JSON-RPC error for a requestState the gateway will
// not accept: invalid params, as for any malformed argument.
func stateRefused(err error) *fault.Error {
	return fault.Wrap(&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}, fault.BadRequest, "%s", err.Error())
}

// roundTrip runs one tool call that may be part of a multi-round trip:
// it opens the client's sealed requestState (refusing it before any
// upstream call), makes the call through the semaphore, and seals the
// upstream's state if it asks for input. A call of a relayed task-capable
// tool from a client that declared the tasks extension forwards the
// declaration, and may come back as the upstream's task instead of a
// result; a call of a tool that runs only as a task, from one that did
// not, is refused once the tool is known (tasks_call.go).
func (g *Gateway) roundTrip(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams, c client, l *upstream.Listener) (*mcp.CallToolResult, *upstream.Task, *fault.Error) {
	if c.principal == "" {
		return nil, nil, fault.New(fault.Internal, "a tool call without a principal")
	}
	mode := forbidden
	switch {
	case c.mode != nil:
		mode = *c.mode
	case g.tasksOn():
		mode = g.toolMode(ctx, srv, callerFrom(ctx), params.Name)
	}
	if mode.support == registry.TaskRequired && !c.tasks {
		if ferr := g.tool(ctx, srv, params); ferr != nil {
			return nil, nil, ferr
		}
		return nil, nil, requiredTaskFault(srv, params.Name)
	}
	relay := c.tasks && mode.relay
	res, task, ferr := g.exchangeRound(ctx, srv, params, c, l, relay)
	if task != nil && !relay {
		// Nobody holds a handle to it: it is told to stop.
		var up struct {
			TaskID string `json:"taskId"`
		}
		if json.Unmarshal(task.Raw, &up) == nil && validUpstreamTaskID(up.TaskID) {
			g.cancelUpstreamTask(ctx, srv, callerFrom(ctx).upstream(srv), up.TaskID, recordFrom(ctx).id)
		}
		return nil, nil, fault.New(fault.UpstreamError, "server %q answered tool %q with a task, which this call did not ask for", srv.ID, clip.String(params.Name, clip.Name))
	}
	return res, task, ferr
}

// exchangeRound is roundTrip's call: relay forwards the tasks extension.
func (g *Gateway) exchangeRound(ctx context.Context, srv *registry.Server, params *mcp.CallToolParams, c client, l *upstream.Listener, relay bool) (*mcp.CallToolResult, *upstream.Task, *fault.Error) {
	// Arguments as the routes read them are already JSON: checked, not
	// encoded again (a request state's digest reads them as written).
	args, ok := params.Arguments.(json.RawMessage)
	if !ok || !json.Valid(args) {
		var err error
		if args, err = json.Marshal(params.Arguments); err != nil {
			return nil, nil, fault.New(fault.BadRequest, "arguments cannot be encoded")
		}
	}
	// What a request state is bound to: only a call that brings one or
	// gets one needs it, and its digest of the arguments is most of a
	// call's JSON work.
	bind := func() roundtrip.Binding {
		return roundtrip.Binding{Principal: c.principal, Server: srv.ID, Tool: params.Name, Args: roundtrip.Digest(args), Upstream: upstreamOf(srv)}
	}
	if params.RequestState != "" {
		opened, err := g.states.Open(params.RequestState, bind())
		if err != nil {
			var refused *roundtrip.RefusedError
			if !errors.As(err, &refused) {
				return nil, nil, fault.Wrap(err, fault.Internal, "cannot check requestState")
			}
			recordFrom(ctx).tool = clip.String(params.Name, clip.Name)
			return nil, nil, stateRefused(err)
		}
		params.RequestState = opened.State
		// Spent once the call went upstream; a call refused or shed
		// before that leaves it usable.
		defer func() { opened.Done(recordFrom(ctx).sent) }()
	}
	if params.Meta == nil {
		params.Meta = mcp.Meta{}
	}
	// The upstream asks only for what this client can answer.
	params.Meta[mcp.MetaKeyClientCapabilities] = c.caps
	if relay {
		params.Meta[mcp.MetaKeyClientCapabilities] = withTasksCapability(c.caps)
	}
	res, task, ferr := g.callTool(ctx, srv, params, l)
	if ferr != nil || task != nil || res == nil || !res.NeedsInput() {
		return res, task, ferr
	}
	if !c.mrtr {
		return nil, nil, fault.New(fault.BadRequest,
			"tool %q of server %q needs input from the client (%s); relaying it needs MCP protocol %s or later, and this request uses %s",
			clip.String(params.Name, clip.Name), srv.ID, strings.Join(kindsOf(res.InputRequests), ", "), protocolMRTR, versionOrDefault(c.protocol))
	}
	var missing []string
	for _, k := range kindsOf(res.InputRequests) {
		if _, ok := c.caps[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		caps := map[string]any{}
		for _, k := range missing {
			caps[k] = map[string]any{}
		}
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": caps})
		msg := fmt.Sprintf("tool %q of server %q needs the client capabilities %s, which this request did not declare", clip.String(params.Name, clip.Name), srv.ID, strings.Join(missing, ", "))
		return nil, nil, fault.Wrap(&jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities, Message: msg, Data: data}, fault.BadRequest, "%s", msg)
	}
	sealed, err := g.states.Seal(bind(), res.RequestState)
	if err != nil {
		return nil, nil, fault.Wrap(err, fault.Internal, "cannot seal requestState")
	}
	res.RequestState = sealed
	recordFrom(ctx).outcome = "input_required"
	return res, nil, nil
}

// upstreamOf names the upstream srv's calls reach (its URL, transport,
// credential reference and headers, hashed): a request state is bound to
// it, so a server id pointed at another upstream never hands the new one
// the old one's state.
func upstreamOf(srv *registry.Server) string { return srv.IdentityHash() }

// kindsOf lists the capabilities input requests need, sorted.
func kindsOf(reqs mcp.InputRequestMap) []string {
	set := map[string]bool{}
	for _, r := range reqs {
		switch r.(type) {
		case *mcp.ElicitParams:
			set["elicitation"] = true
		case *mcp.CreateMessageParams, *mcp.CreateMessageWithToolsParams:
			set["sampling"] = true
		case *mcp.ListRootsParams:
			set["roots"] = true
		default:
			set["unknown"] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func versionOrDefault(v string) string {
	if v == "" {
		return "2025-03-26 (no MCP-Protocol-Version header)"
	}
	return clip.String(v, 32)
}

// specError returns the JSON-RPC error of a protocol code the spec
// reserves (-32020 to -32099, and invalid params) that caused fe, to be
// relayed to an MCP client as it is.
func specError(fe *fault.Error) (*jsonrpc.Error, bool) {
	var re *jsonrpc.Error
	if fe == nil || !errors.As(fe.Cause, &re) {
		return nil, false
	}
	if specCode(re.Code) {
		return re, true
	}
	return nil, false
}

// specCode reports the JSON-RPC codes the MCP spec defines in -32020 to
// -32099: they belong to the protocol, never to the gateway, and are
// relayed unchanged.
func specCode(code int64) bool { return code <= -32020 && code >= -32099 }
