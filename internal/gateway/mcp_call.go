package gateway

import (
	"context"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// callTool answers tools/call: hctx is the SDK's handler context (for
// notifications to the agent), ctx the scoped one for upstream work.
func (sc *mcpScope) callTool(hctx, ctx context.Context, req *mcp.CallToolRequest) (mcp.Result, error) {
	p := req.Params
	sc.noteTool(p.Name)
	if ferr := validToolName(p.Name); ferr != nil {
		return nil, sc.refuse(ferr)
	}
	srv, tool, ferr := sc.resolveTool(ctx, p.Name)
	if ferr != nil {
		switch ferr.Code {
		case fault.NotFound, fault.Forbidden:
			return nil, sc.refuse(ferr)
		}
		return toolError(sc.rec, ferr), nil
	}
	sc.rec.tool = clip.String(tool, clip.Name)
	args, ferr := sc.g.arguments(p.Arguments)
	if ferr != nil {
		return nil, sc.refuse(ferr)
	}
	params := &mcp.CallToolParams{Meta: forwardMeta(p.Meta), Name: tool, Arguments: args,
		InputResponses: p.InputResponses, RequestState: p.RequestState}
	cl := client{principal: principalOf(sc.caller.principal), protocol: sc.protocol, mrtr: sc.protocol >= protocolMRTR, caps: clientFromCaps(p.Meta[mcp.MetaKeyClientCapabilities])}
	if sc.g.tasksOn() {
		mode := sc.g.toolMode(ctx, srv, sc.caller, tool)
		cl.tasks, cl.mode = sc.declaresTasks(p.Meta), &mode
		retry := p.RequestState != "" || len(p.InputResponses) > 0
		if cl.tasks && mode.support != registry.TaskForbidden && !mode.relay && !retry {
			return sc.createTask(ctx, srv, params, cl)
		}
	}
	var l *upstream.Listener
	if sc.stream {
		l = relayNotifications(hctx, req)
		// A 2026-07-28 upstream logs only at the level the request names;
		// the agent's own level is applied when relaying.
		if params.Meta == nil {
			params.Meta = mcp.Meta{}
		}
		params.Meta[mcp.MetaKeyLogLevel] = "debug"
	}
	res, task, fe := sc.g.roundTrip(ctx, srv, params, cl, l)
	if task != nil {
		return sc.relayCreated(ctx, srv, tool, task)
	}
	if fe == nil {
		var out mcp.Result
		out, fe = sc.g.encodeResult(srv, res)
		if fe == nil {
			return out, nil
		}
		sc.rec.outcome = ""
	}
	return sc.callFault(fe)
}

// toolError reports a gateway failure as a tool result with isError, its
// structured content carrying the same code, retryable and retry_after_ms as
// the REST route's error body.
func toolError(rec *record, fe *fault.Error) *mcp.CallToolResult {
	rec.fail(fe)
	d := fe.Detail()
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s: %s", d.Code, d.Message)}},
		StructuredContent: fault.Body{Error: d},
	}
}

// relayNotifications forwards the upstream's progress and log messages for
// this call to the agent, on the call's own response stream: ctx is the
// call's, which tells the SDK which stream.
func relayNotifications(ctx context.Context, req *mcp.CallToolRequest) *upstream.Listener {
	ss := req.Session
	token := req.Params.GetProgressToken()
	return &upstream.Listener{
		Progress: func(_ context.Context, p *mcp.ProgressNotificationParams) {
			if token == nil {
				return
			}
			_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: p.Progress, Total: p.Total, Message: p.Message,
			})
		},
		Log: func(_ context.Context, p *mcp.LoggingMessageParams) {
			_ = ss.Log(ctx, p)
		},
	}
}

// valueOf copies a request's params; a request may omit them.
func valueOf[P any](p *P) P {
	if p == nil {
		var zero P
		return zero
	}
	return *p
}
