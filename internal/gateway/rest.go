package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// maxToolName bounds tool names in requests.
const maxToolName = 256

// CallRequest is the body of POST /mcp-rest/tools/call (LiteLLM's shape).
// The last three fields carry a multi-round-trip call (MCP 2026-07-28):
// the input kinds the caller can answer, and, on the retry, its answers
// and the requestState of the input_required result.
type CallRequest struct {
	ServerID  string          `json:"server_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ClientCapabilities are the client capabilities (elicitation,
	// sampling, roots) the caller declares, as in MCP.
	ClientCapabilities map[string]any `json:"client_capabilities,omitempty"`
	// InputResponses answer the previous result's inputRequests.
	InputResponses mcp.InputResponseMap `json:"input_responses,omitempty"`
	// RequestState is the previous result's requestState.
	RequestState string `json:"request_state,omitempty"`
}

func (g *Gateway) restCall(w http.ResponseWriter, r *http.Request) {
	var req CallRequest
	if ferr := g.decodeJSON(w, r, &req); ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	if ferr := validToolName(req.Name); ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	id, tool := req.ServerID, req.Name
	if id == "" {
		// As LiteLLM does: a prefixed name, "<server_id>-<tool>", as the
		// aggregated /mcp lists it, names the server.
		var ok bool
		if id, tool, ok = strings.Cut(req.Name, ToolSeparator); !ok || id == "" || tool == "" {
			writeFault(w, r, fault.New(fault.BadRequest, "server_id is required, or a name of the form <server_id>%s<tool>", ToolSeparator))
			return
		}
	}
	args, ferr := g.arguments(req.Arguments)
	if ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	ctx := r.Context()
	srv, ferr := g.server(ctx, id)
	if ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	params := &mcp.CallToolParams{Name: tool, Arguments: args, InputResponses: req.InputResponses, RequestState: req.RequestState}
	res, _, ferr := g.roundTrip(ctx, srv, params, client{principal: principalOf(principalFrom(ctx)), mrtr: true, caps: clientFromCaps(req.ClientCapabilities)}, nil)
	if ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	body, ferr := g.encodeAnswer(srv, res)
	if ferr != nil {
		recordFrom(ctx).outcome = ""
		writeFault(w, r, ferr)
		return
	}
	writeEncoded(w, http.StatusOK, body)
}

// ListResponse is the body of GET /mcp-rest/tools/list.
type ListResponse struct {
	// ServerID is the server asked for; empty when every server the key
	// may call was listed.
	ServerID string `json:"server_id,omitempty"`
	// Tools are the tools, each with its server.
	Tools []ListedTool `json:"tools"`
	// Unavailable are the servers whose tools could not be listed this
	// time (listing every server only); the others are listed anyway.
	Unavailable []UnavailableServer `json:"unavailable,omitempty"`
}

// ListedTool is an upstream's tool under its own name, with the server it
// belongs to: call it with {"server_id": ServerID, "name": Name}, or with
// the name "<server_id>-<name>" alone. MCPInfo carries the same, as
// LiteLLM's REST listing does.
type ListedTool struct {
	Tool     *mcp.Tool
	ServerID string
	MCPInfo  MCPInfo
}

// MCPInfo says which server a listed tool belongs to, in LiteLLM's shape.
type MCPInfo struct {
	ServerID    string `json:"server_id"`
	ServerName  string `json:"server_name"`
	Description string `json:"description,omitempty"`
}

// MarshalJSON writes the tool's own fields (name, description,
// inputSchema, …) with server_id and mcp_info beside them.
func (t ListedTool) MarshalJSON() ([]byte, error) {
	raw, err := json.Marshal(t.Tool)
	if err != nil {
		return nil, err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	if fields["server_id"], err = json.Marshal(t.ServerID); err != nil {
		return nil, err
	}
	if fields["mcp_info"], err = json.Marshal(t.MCPInfo); err != nil {
		return nil, err
	}
	return json.Marshal(fields)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *ListedTool) UnmarshalJSON(b []byte) error {
	var own struct {
		ServerID string  `json:"server_id"`
		MCPInfo  MCPInfo `json:"mcp_info"`
	}
	if err := json.Unmarshal(b, &own); err != nil {
		return err
	}
	t.Tool = &mcp.Tool{}
	if err := json.Unmarshal(b, t.Tool); err != nil {
		return err
	}
	t.ServerID, t.MCPInfo = own.ServerID, own.MCPInfo
	return nil
}

// UnavailableServer is a server whose tools could not be listed.
type UnavailableServer struct {
	ServerID string       `json:"server_id"`
	Error    fault.Detail `json:"error"`
}

func listed(srv *registry.Server, tools []*mcp.Tool) []ListedTool {
	out := make([]ListedTool, len(tools))
	for i, t := range tools {
		out[i] = ListedTool{Tool: upstream.Listed(t), ServerID: srv.ID, MCPInfo: MCPInfo{ServerID: srv.ID, ServerName: srv.ID, Description: srv.Description}}
	}
	return out
}

func (g *Gateway) restList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.URL.Query().Get("server_id")
	if id == "" {
		all, err := g.allTools(ctx, callerFrom(ctx))
		if err != nil {
			writeFault(w, r, fault.Wrap(err, fault.StoreUnavailable, "cannot read the server registry right now").WithRetryAfter(storeRetryAfter))
			return
		}
		resp := ListResponse{Tools: []ListedTool{}}
		for _, st := range all {
			if st.err != nil {
				resp.Unavailable = append(resp.Unavailable, UnavailableServer{ServerID: st.id, Error: st.err.Detail()})
				continue
			}
			resp.Tools = append(resp.Tools, listed(st.srv, st.tools)...)
		}
		recordFrom(ctx).outcome = "ok"
		writeJSON(w, http.StatusOK, resp)
		return
	}
	srv, ferr := g.server(ctx, id)
	if ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	lctx, cancel := g.boundedCtx(ctx, srv.Timeout)
	defer cancel()
	tools, err := g.deps.Upstream.Tools(lctx, srv, callerFrom(ctx).upstream(srv))
	if err != nil {
		writeFault(w, r, upstreamFault(srv, err))
		return
	}
	recordFrom(ctx).outcome = "ok"
	writeJSON(w, http.StatusOK, ListResponse{ServerID: srv.ID, Tools: listed(srv, callerFrom(ctx).visible(srv, tools))})
}

// validToolName checks the name a call gives its tool: 1 to maxToolName
// bytes of UTF-8 holding no character clip.Escape replaces.
func validToolName(name string) *fault.Error {
	switch {
	case name == "":
		return fault.New(fault.BadRequest, "name (the tool to call) is required")
	case len(name) > maxToolName:
		return fault.New(fault.BadRequest, "name is longer than %d bytes", maxToolName)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, clip.IsEscaped):
		// A control or bidirectional character: never a tool's name, and
		// never written to the log, a span or a metric as a valid one.
		return fault.New(fault.BadRequest, "name contains invalid characters")
	}
	return nil
}

// decodeJSON reads one JSON object from the request body into v, strictly:
// bounded size, JSON content type, no unknown fields, nothing after it.
func (g *Gateway) decodeJSON(w http.ResponseWriter, r *http.Request, v any) *fault.Error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return fault.New(fault.BadRequest, "Content-Type must be application/json")
		}
	}
	body := http.MaxBytesReader(w, r.Body, g.maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonFault(err, g.maxBody)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return jsonFault(err, g.maxBody)
		}
		return fault.New(fault.BadRequest, "unexpected data after the JSON object")
	}
	return nil
}

func jsonFault(err error, limit int64) *fault.Error {
	var (
		tooBig   *http.MaxBytesError
		syntax   *json.SyntaxError
		typeErr  *json.UnmarshalTypeError
		fieldMsg = "json: unknown field "
	)
	switch {
	case errors.As(err, &tooBig):
		return fault.New(fault.PayloadTooLarge, "request body is larger than %d bytes", limit)
	case errors.Is(err, io.EOF):
		return fault.New(fault.BadRequest, "request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fault.New(fault.BadRequest, "request body is truncated JSON")
	case errors.As(err, &syntax):
		return fault.New(fault.BadRequest, "malformed JSON at byte %d", syntax.Offset)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return fault.New(fault.BadRequest, "request body must be a JSON object")
		}
		return fault.New(fault.BadRequest, "%s must be %s, not %s", typeErr.Field, jsonType(typeErr.Type.Kind().String()), typeErr.Value)
	case strings.HasPrefix(err.Error(), fieldMsg):
		return fault.New(fault.BadRequest, "unknown field %s", clip.String(strings.TrimPrefix(err.Error(), fieldMsg), 80))
	default:
		return fault.New(fault.BadRequest, "invalid JSON: %s", clip.String(fmt.Sprint(err), 120))
	}
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "slice":
		return "a JSON value"
	case "map", "struct":
		return "an object"
	case "bool":
		return "a boolean"
	default:
		return "a number"
	}
}
