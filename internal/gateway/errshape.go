package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/mcpgate/mcpgate/internal/clip"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpgate/mcpgate/internal/fault"
)

// Every error answer has one of two JSON shapes, by route:
//
//   - REST routes, /health and unknown paths: the fault body,
//     {"error": {"code": "AT_CAPACITY", "message": …, "retryable": …, "retry_after_ms": …}}.
//   - /mcp and /mcp/{server_id}: a JSON-RPC error response, which MCP
//     clients parse, whose error.data is that same object:
//     {"jsonrpc": "2.0", "id": …, "error": {"code": -32600, "message": …, "data": {"code": "BAD_REQUEST", …}}}.
//
// The HTTP status and Retry-After header are the same either way. This
// covers what the MCP Go SDK refuses itself (wrong Accept or Content-Type,
// an unsupported MCP-Protocol-Version, …), which it answers in plain text:
// sdkAnswer rewrites those into the MCP shape.

// isMCPPath reports whether path is under the MCP endpoint.
func isMCPPath(path string) bool { return path == "/mcp" || strings.HasPrefix(path, "/mcp/") }

// rpcCode is the JSON-RPC error code for an HTTP-level refusal: invalid
// request for the caller's mistakes, internal error for the rest (the
// data's gateway code says which).
func rpcCode(c fault.Code) int64 {
	if s := c.Status(); s >= 400 && s < 500 && c != fault.AtCapacity && c != fault.QueueTimeout && c != fault.RateLimited {
		return jsonrpc.CodeInvalidRequest
	}
	return jsonrpc.CodeInternalError
}

// rpcResponse is a JSON-RPC error response.
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   rpcErrorObject  `json:"error"`
}

type rpcErrorObject struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// writeRPCFault writes e as a JSON-RPC error response to the request with
// id (nil when unknown), with e's HTTP status and Retry-After.
func writeRPCFault(w http.ResponseWriter, id json.RawMessage, code int64, e *fault.Error) {
	d := e.Detail()
	if e.Challenge != "" {
		w.Header().Set("WWW-Authenticate", e.Challenge)
	}
	writeRPCError(w, e.Code.Status(), e.RetryAfterHeader(), id, code, d.Message, d)
}

// writeRPCError writes the one JSON-RPC error response every MCP route
// answers with: {"jsonrpc": "2.0", "id": id, "error": {code, message,
// data}}, id null when unknown (nil or empty), data left out when nil,
// with status and (when not empty) Retry-After.
func writeRPCError(w http.ResponseWriter, status int, retryAfter string, id json.RawMessage, code int64, message string, data any) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	writeRPC(w, status, retryAfter, rpcResponse{JSONRPC: "2.0", ID: id, Error: rpcErrorObject{Code: code, Message: message, Data: data}})
}

func writeRPC(w http.ResponseWriter, status int, retryAfter string, resp any) {
	h := w.Header()
	h.Del("Content-Length")
	h.Del("X-Content-Type-Options")
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_ = fault.JSONEncoder(w).Encode(resp)
}

// maxRefusal bounds what is kept of an SDK refusal's body.
const maxRefusal = 16 << 10

// sdkAnswer passes the SDK's successful answers (JSON or a stream) through
// untouched and holds back its refusals (status >= 400), which finish
// writes in the gateway's MCP error shape.
type sdkAnswer struct {
	http.ResponseWriter
	status  int
	refused bool
	body    bytes.Buffer
}

func (w *sdkAnswer) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if code >= 400 {
		w.refused = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *sdkAnswer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.refused {
		w.body.Write(p[:min(len(p), max(0, maxRefusal-w.body.Len()))])
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Flush passes flushes through, for streamed answers.
func (w *sdkAnswer) Flush() {
	if w.refused {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *sdkAnswer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes a held-back refusal of the request with id: a plain-text
// one becomes a JSON-RPC error whose data carries the gateway's code; a
// JSON-RPC error the SDK wrote keeps its code and message and gains the
// gateway's fields in its data (an object's own fields are kept). It
// returns the fault, for the log; nil when nothing was refused.
func (w *sdkAnswer) finish(id json.RawMessage) *fault.Error {
	if !w.refused {
		return nil
	}
	code := statusCode(w.status)
	text := strings.TrimSpace(w.body.String())
	var resp struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *struct {
			Code    int64           `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if json.Unmarshal(w.body.Bytes(), &resp) == nil && resp.Error != nil {
		fe := fault.New(code, "%s", resp.Error.Message)
		data := map[string]any{}
		if len(resp.Error.Data) > 0 && string(resp.Error.Data) != "null" && json.Unmarshal(resp.Error.Data, &data) != nil {
			// Data of another kind is the protocol's: keep it as it is.
			writeRPCError(w.ResponseWriter, w.status, "", resp.ID, resp.Error.Code, resp.Error.Message, resp.Error.Data)
			return fe
		}
		d := fe.Detail()
		for k, v := range map[string]any{"code": d.Code, "message": d.Message, "retryable": d.Retryable} {
			if _, ok := data[k]; !ok {
				data[k] = v
			}
		}
		writeRPCError(w.ResponseWriter, w.status, "", resp.ID, resp.Error.Code, resp.Error.Message, data)
		return fe
	}
	var fe *fault.Error
	if w.status >= 500 {
		// Never the SDK's internal text to a client; the log keeps it.
		fe = fault.Wrap(errors.New(clip.String(text, clip.Message)), code, "internal error")
	} else {
		fe = fault.New(code, "%s", clip.String(text, 500))
	}
	d := fe.Detail()
	writeRPCError(w.ResponseWriter, w.status, "", id, rpcCode(code), d.Message, d)
	return fe
}

// statusCode is the gateway code for an HTTP status the SDK answered with.
func statusCode(status int) fault.Code {
	switch status {
	case http.StatusUnauthorized:
		return fault.Unauthorized
	case http.StatusForbidden:
		return fault.Forbidden
	case http.StatusNotFound:
		return fault.NotFound
	case http.StatusMethodNotAllowed:
		return fault.MethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return fault.PayloadTooLarge
	}
	if status >= 500 {
		return fault.Internal
	}
	// 400, 406, 409, 415 and the rest: the request is not acceptable.
	return fault.BadRequest
}
