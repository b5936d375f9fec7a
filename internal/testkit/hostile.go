package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hostile is an MCP upstream that misbehaves on purpose, written with
// net/http alone (no SDK server to keep it honest). It speaks stateless
// streamable HTTP at /mcp and answers:
//
//   - tools/list: its tools, unless the endpoint's query asks for huge
//     pages: ?pages=N&page_bytes=B lists N pages (0: without end) of one
//     tool whose description is B bytes, each page naming a next one;
//   - tools/call of huge_result {"bytes": N, "char": "<"}: a result of N
//     such characters; endless_sse: an event stream of log messages that
//     never carries the result; endless_progress: progress notifications
//     without end; slow_drip: a JSON answer written one byte every 100 ms;
//     reject {"bad": true}: HTTP 400 with a plain-text body, as a server
//     that cannot parse the arguments; invalid_params {"bad": true}:
//     JSON-RPC -32602 (both answer "ok" without "bad"); list_changed_flood
//     {"count": N}: an event stream of N notifications/tools/list_changed,
//     then the result "flooded"; broken_stream: an event stream that
//     breaks its connection after one notification, without a result, as
//     a network failure mid-call would; echo: its arguments back as text.
//     Every tool takes any object.
//
// /redirect?to=URL answers 307 to URL, and GET /sse?endpoint=URL is an
// HTTP+SSE stream whose endpoint event is URL. Every stream stops when its
// client goes away or the test ends.
//
// It is also a plain HTTP API, described at /openapi.json: GET
// /api/v1/users/{id}/profile (operation getProfile, with a query object
// "page" of declared properties size and cursor, and a header X-Trace) and
// every other path under /api/ answer 200 with what they received; APIHits
// lists the requests.
type Hostile struct {
	// URL is the streamable-HTTP endpoint, http://127.0.0.1:port/mcp.
	URL string
	// Base is http://127.0.0.1:port.
	Base string

	mu      sync.Mutex
	calls   map[string]int
	apiHits []string
	done    chan struct{}
}

// HostileTools are the tools Hostile lists on a plain /mcp.
var HostileTools = []string{"broken_stream", "echo", "endless_progress", "endless_sse", "huge_result", "invalid_params", "list_changed_flood", "reject", "slow_drip"}

// StartHostile starts a Hostile upstream on 127.0.0.1 until the test ends.
func StartHostile(t testing.TB) *Hostile {
	t.Helper()
	h := &Hostile{calls: map[string]int{}, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mcp", h.serveMCP)
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("GET /sse", h.serveSSE)
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, hostileAPISpec)
	})
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		hit := r.Method + " " + r.URL.EscapedPath()
		if r.URL.RawQuery != "" {
			hit += "?" + r.URL.RawQuery
		}
		if v := r.Header.Get("X-Trace"); v != "" {
			hit += " X-Trace: " + v
		}
		h.mu.Lock()
		h.apiHits = append(h.apiHits, hit)
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"received": hit})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(h.done)
		srv.CloseClientConnections()
		srv.Close()
	})
	h.Base = srv.URL
	h.URL = srv.URL + "/mcp"
	return h
}

// APIHits lists the requests its plain HTTP API received, as
// "METHOD /escaped/path?query [X-Trace: value]".
func (h *Hostile) APIHits() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.apiHits...)
}

// hostileAPISpec describes the plain HTTP API.
const hostileAPISpec = `{
  "openapi": "3.0.3",
  "info": {"title": "users", "version": "1"},
  "servers": [{"url": "/api/v1"}],
  "paths": {"/users/{id}/profile": {"get": {
    "operationId": "getProfile",
    "parameters": [
      {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
      {"name": "page", "in": "query", "schema": {"type": "object", "properties": {"size": {"type": "integer"}, "cursor": {"type": "string"}}}},
      {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}
    ],
    "responses": {"200": {"description": "the profile"}}}}}
}`

// Calls returns how many tools/call requests named tool.
func (h *Hostile) Calls(tool string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[tool]
}

type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method"`
	Params struct {
		Name      string          `json:"name"`
		Cursor    string          `json:"cursor"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      struct {
			ProgressToken any `json:"progressToken"`
		} `json:"_meta"`
	} `json:"params"`
}

func (h *Hostile) serveMCP(w http.ResponseWriter, r *http.Request) {
	var msg rpcMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&msg); err != nil {
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return
	}
	if len(msg.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	switch msg.Method {
	case "initialize":
		writeRPC(w, msg.ID, map[string]any{
			"protocolVersion": "2025-11-25",
			"capabilities":    map[string]any{"tools": map[string]any{}, "logging": map[string]any{}},
			"serverInfo":      map[string]any{"name": "hostile", "version": "1"},
		})
	case "ping":
		writeRPC(w, msg.ID, map[string]any{})
	case "tools/list":
		h.list(w, r, msg)
	case "tools/call":
		h.mu.Lock()
		h.calls[msg.Params.Name]++
		h.mu.Unlock()
		h.call(w, r, msg)
	default:
		writeRPCError(w, msg.ID, -32601, "method not found")
	}
}

func (h *Hostile) list(w http.ResponseWriter, r *http.Request, msg rpcMessage) {
	q := r.URL.Query()
	if q.Get("page_bytes") == "" {
		tools := make([]map[string]any, len(HostileTools))
		for i, name := range HostileTools {
			tools[i] = map[string]any{"name": name, "inputSchema": map[string]any{"type": "object"}}
		}
		writeRPC(w, msg.ID, map[string]any{"tools": tools})
		return
	}
	pages, _ := strconv.Atoi(q.Get("pages"))
	size, _ := strconv.Atoi(q.Get("page_bytes"))
	page, _ := strconv.Atoi(msg.Params.Cursor)
	result := map[string]any{"tools": []map[string]any{{
		"name":        fmt.Sprintf("padded_%d", page),
		"description": strings.Repeat("<", size),
		"inputSchema": map[string]any{"type": "object"},
	}}}
	if pages == 0 || page+1 < pages {
		result["nextCursor"] = strconv.Itoa(page + 1)
	}
	writeRPC(w, msg.ID, result)
}

func (h *Hostile) call(w http.ResponseWriter, r *http.Request, msg rpcMessage) {
	var args struct {
		Bytes int    `json:"bytes"`
		Char  string `json:"char"`
		Bad   bool   `json:"bad"`
		Count int    `json:"count"`
	}
	_ = json.Unmarshal(msg.Params.Arguments, &args)
	switch msg.Params.Name {
	case "echo":
		writeRPC(w, msg.ID, textResult(string(msg.Params.Arguments)))
	case "huge_result":
		if args.Char == "" {
			args.Char = "<"
		}
		writeRPC(w, msg.ID, textResult(strings.Repeat(args.Char, args.Bytes)))
	case "reject", "invalid_params":
		switch {
		case !args.Bad:
			writeRPC(w, msg.ID, textResult("ok"))
		case msg.Params.Name == "reject":
			http.Error(w, "Bad Request", http.StatusBadRequest)
		default:
			writeRPCError(w, msg.ID, -32602, "invalid params: the arguments do not fit")
		}
	case "list_changed_flood":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		var buf bytes.Buffer
		for range args.Count {
			buf.WriteString("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": textResult("flooded")})
		fmt.Fprintf(&buf, "data: %s\n\n", b)
		_, _ = w.Write(buf.Bytes())
	case "broken_stream":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/message", "params": map[string]any{"level": "info", "data": "working"}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		flush(w)
		// The connection breaks: the client sees the stream end mid-call.
		panic(http.ErrAbortHandler)
	case "slow_drip":
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": textResult("drip")})
		w.Header().Set("Content-Type", "application/json")
		for _, b := range body {
			if !h.pause(r, 100*time.Millisecond) {
				return
			}
			_, _ = w.Write([]byte{b})
			flush(w)
		}
	case "endless_sse", "endless_progress":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		pad := strings.Repeat("x", 1024)
		for i := 0; ; i++ {
			var note map[string]any
			if msg.Params.Name == "endless_progress" {
				note = map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": map[string]any{
					"progressToken": msg.Params.Meta.ProgressToken, "progress": i, "message": "still working"}}
			} else {
				note = map[string]any{"jsonrpc": "2.0", "method": "notifications/message", "params": map[string]any{
					"level": "debug", "data": pad}}
			}
			b, _ := json.Marshal(note)
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return
			}
			flush(w)
			if !h.pause(r, time.Millisecond) {
				return
			}
		}
	default:
		writeRPCError(w, msg.ID, -32602, "unknown tool")
	}
}

// serveSSE is the HTTP+SSE transport's stream, naming an endpoint that
// may be anywhere.
func (h *Hostile) serveSSE(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: endpoint\ndata: %s\n\n", r.URL.Query().Get("endpoint"))
	flush(w)
	select {
	case <-r.Context().Done():
	case <-h.done:
	}
}

// pause waits d, reporting false if the client went away or the test ended.
func (h *Hostile) pause(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-h.done:
	}
	return false
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func textResult(s string) map[string]any {
	return map[string]any{"content": []map[string]any{{"type": "text", "text": s}}}
}

func writeRPC(w http.ResponseWriter, id json.RawMessage, result any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

func writeRPCError(w http.ResponseWriter, id json.RawMessage, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}
