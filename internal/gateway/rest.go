package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
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
	if req.ServerID == "" {
		writeFault(w, r, fault.New(fault.BadRequest, "server_id is required"))
		return
	}
	if ferr := validToolName(req.Name); ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	args, ferr := arguments(req.Arguments)
	if ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	ctx := r.Context()
	srv, ferr := g.server(ctx, keyFrom(ctx), req.ServerID)
	if ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	params := &mcp.CallToolParams{Name: req.Name, Arguments: args, InputResponses: req.InputResponses, RequestState: req.RequestState}
	res, ferr := g.roundTrip(ctx, srv, params, client{principal: principalOf(keyFrom(ctx)), mrtr: true, caps: clientFromCaps(req.ClientCapabilities)}, nil)
	if ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// ListResponse is the body of GET /mcp-rest/tools/list.
type ListResponse struct {
	ServerID string      `json:"server_id"`
	Tools    []*mcp.Tool `json:"tools"`
}

func (g *Gateway) restList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.URL.Query().Get("server_id")
	if id == "" {
		writeFault(w, r, fault.New(fault.BadRequest, "the server_id query parameter is required"))
		return
	}
	srv, ferr := g.server(ctx, keyFrom(ctx), id)
	if ferr != nil {
		writeFault(w, r, ferr)
		return
	}
	lctx, cancel := g.boundedCtx(ctx, srv.Timeout)
	defer cancel()
	tools, err := g.deps.Upstream.Tools(lctx, srv)
	if err != nil {
		writeFault(w, r, upstreamFault(srv, err))
		return
	}
	recordFrom(ctx).outcome = "ok"
	writeJSON(w, http.StatusOK, ListResponse{ServerID: srv.ID, Tools: tools})
}

func validToolName(name string) *fault.Error {
	switch {
	case name == "":
		return fault.New(fault.BadRequest, "name (the tool to call) is required")
	case len(name) > maxToolName:
		return fault.New(fault.BadRequest, "name is longer than %d bytes", maxToolName)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fault.New(fault.BadRequest, "name contains invalid characters")
	}
	return nil
}

// arguments checks that raw is a JSON object (or absent, or null).
func arguments(raw json.RawMessage) (any, *fault.Error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return map[string]any{}, nil
	}
	if trimmed[0] != '{' {
		return nil, fault.New(fault.BadRequest, "arguments must be a JSON object")
	}
	return json.RawMessage(trimmed), nil
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
		return fault.New(fault.BadRequest, "unknown field %s", truncate(strings.TrimPrefix(err.Error(), fieldMsg), 80))
	default:
		return fault.New(fault.BadRequest, "invalid JSON: %s", truncate(fmt.Sprint(err), 120))
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
