package testkit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StartStateful runs, on loopback, a stateful MCP upstream (streamable
// HTTP with sessions) whose remember tool keeps a value per session and
// whose recall tool returns it: what one session remembers, another must
// never recall. It returns the endpoint URL.
func StartStateful(t testing.TB) string {
	t.Helper()
	var mu sync.Mutex
	kept := map[string]string{} // session id → value
	s := mcp.NewServer(&mcp.Implementation{Name: "stateful", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "remember", Description: "Keeps v for this session."},
		func(_ context.Context, req *mcp.CallToolRequest, in struct {
			V string `json:"v"`
		}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			kept[req.Session.ID()] = in.V
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "kept"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "recall", Description: "Returns what this session kept."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			v := kept[req.Session.ID()]
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "recalled: " + v}}}, nil, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}
