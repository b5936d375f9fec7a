package testkit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StatefulOptions configure StartStatefulWith.
type StatefulOptions struct {
	// Private marks its tool lists cacheScope "private" (SEP-2549): they
	// show the session's state, which must not reach another caller.
	Private bool
	// TTL is the ttlMs its tool lists carry; zero means none.
	TTL time.Duration
}

// Stateful is a stateful MCP upstream on loopback.
type Stateful struct {
	// URL is its streamable-HTTP endpoint.
	URL   string
	lists atomic.Int64
}

// Lists is how many tools/list requests it has answered.
func (s *Stateful) Lists() int64 { return s.lists.Load() }

// StartStateful runs, on loopback, a stateful MCP upstream (streamable
// HTTP with sessions) whose remember tool keeps a value per session and
// whose recall tool returns it: what one session remembers, another must
// never recall. It returns the endpoint URL.
func StartStateful(t testing.TB) string { return StartStatefulWith(t, StatefulOptions{}).URL }

// StartStatefulWith is StartStateful with options. Its tool list shows
// each session's state too: the description of its notes tool quotes what
// the session remembered, as a server with dynamic toolsets or
// descriptions built from session data would.
func StartStatefulWith(t testing.TB, opts StatefulOptions) *Stateful {
	t.Helper()
	up := &Stateful{}
	var mu sync.Mutex
	kept := map[string]string{} // session id → value
	keptBy := func(ss *mcp.ServerSession) string {
		mu.Lock()
		defer mu.Unlock()
		return kept[ss.ID()]
	}
	sopts := &mcp.ServerOptions{}
	if opts.Private || opts.TTL > 0 {
		sopts.SetCacheable = func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.TTLMs = int(opts.TTL.Milliseconds())
			if opts.Private {
				c.CacheScope = "private"
			}
		}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "stateful", Version: "1"}, sopts)
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
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "recalled: " + keptBy(req.Session)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "notes", Description: "Notes of this session: (none)"},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: keptBy(req.Session)}}}, nil, nil
		})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			lr, ok := res.(*mcp.ListToolsResult)
			if method != "tools/list" || err != nil || !ok {
				return res, err
			}
			up.lists.Add(1)
			v := keptBy(req.GetSession().(*mcp.ServerSession))
			if v == "" {
				return res, nil
			}
			out := *lr
			out.Tools = make([]*mcp.Tool, len(lr.Tools))
			for i, tool := range lr.Tools {
				if tool.Name == "notes" {
					c := *tool
					c.Description = "Notes of this session: " + v
					tool = &c
				}
				out.Tools[i] = tool
			}
			return &out, nil
		}
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	up.URL = srv.URL + "/mcp"
	return up
}
