package upstream

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

func callErr(t *testing.T, p *Pool, srv *registry.Server, tool string, args any) *Error {
	t.Helper()
	_, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: tool, Arguments: args}, nil)
	var ue *Error
	if !errors.As(err, &ue) {
		t.Fatalf("%s: err = %v, want an *Error", tool, err)
	}
	return ue
}

// TestRefusalsAreAboutTheRequest: an upstream's HTTP 4xx or invalid
// params, and an answer too large, are about the request; its 5xx, 408
// and 429 about its health.
func TestRefusalsAreAboutTheRequest(t *testing.T) {
	h := testkit.StartHostile(t)
	p := New(Options{AllowLocal: true, MaxResponseBytes: 1 << 20})
	defer p.Close()
	srv := &registry.Server{ID: "h", URL: h.URL, Transport: registry.TransportHTTP, Timeout: 10 * time.Second}
	if e := callErr(t, p, srv, "reject", map[string]any{"bad": true}); e.Kind != KindRejected || e.Status != 400 || !e.AboutRequest() || e.Infrastructure() {
		t.Errorf("HTTP 400: %v (status %d), want rejected, about the request", e, e.Status)
	}
	if e := callErr(t, p, srv, "invalid_params", map[string]any{"bad": true}); e.Kind != KindRPC || !e.AboutRequest() || e.Infrastructure() {
		t.Errorf("invalid params: %v, want about the request", e)
	}
	e := callErr(t, p, srv, "huge_result", map[string]any{"bytes": 2 << 20})
	var le *LimitError
	if e.Kind != KindTooLarge || !errors.As(e, &le) || le.Limit != 1<<20 || !e.AboutRequest() {
		t.Errorf("answer over the limit: %v, want too large (1 MiB), about the request", e)
	}
	// At the limit exactly is fine.
	if _, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "huge_result", Arguments: map[string]any{"bytes": 1<<20 - 200}}, nil); err != nil {
		t.Errorf("answer under the limit: %v", err)
	}
	for _, status := range []int{http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusBadGateway} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "busy", status) }))
		e := callErr(t, p, &registry.Server{ID: "busy", URL: hs.URL, Transport: registry.TransportHTTP}, "echo", nil)
		if e.AboutRequest() || !e.Infrastructure() {
			t.Errorf("HTTP %d: %v, want an infrastructure failure", status, e)
		}
		hs.Close()
	}
}

// TestToolListBounds: a tool list is bounded in bytes and in pages.
func TestToolListBounds(t *testing.T) {
	h := testkit.StartHostile(t)
	for _, tc := range []struct {
		name, query string
		opts        Options
		what        string
	}{
		{"huge pages", "pages=0&page_bytes=3000000", Options{AllowLocal: true, MaxListBytes: 1 << 20}, "tool list"},
		{"many pages", "pages=0&page_bytes=10", Options{AllowLocal: true, MaxListPages: 5}, "tool list pages"},
	} {
		p := New(tc.opts)
		srv := &registry.Server{ID: "h", URL: h.URL + "?" + tc.query, Transport: registry.TransportHTTP}
		_, err := p.Tools(context.Background(), srv, Caller{})
		var le *LimitError
		if !errors.As(err, &le) || le.What != tc.what {
			t.Errorf("%s: %v, want a %s limit", tc.name, err, tc.what)
		}
		p.Close()
	}
	p := New(Options{AllowLocal: true, MaxListPages: 5})
	defer p.Close()
	if tools, err := p.Tools(context.Background(), &registry.Server{ID: "h", URL: h.URL + "?pages=5&page_bytes=10", Transport: registry.TransportHTTP}, Caller{}); err != nil || len(tools) != 5 {
		t.Errorf("5 pages with a bound of 5: %d tools, %v", len(tools), err)
	}
}

// TestSessionsStayOnTheirOrigin: neither a redirect nor the HTTP+SSE
// endpoint event takes a session to another origin.
func TestSessionsStayOnTheirOrigin(t *testing.T) {
	h := testkit.StartHostile(t)
	var hits atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer sink.Close()
	p := New(Options{AllowLocal: true})
	defer p.Close()
	for _, srv := range []*registry.Server{
		{ID: "redirect", Transport: registry.TransportHTTP, URL: h.Base + "/redirect?to=" + url.QueryEscape(sink.URL+"/mcp")},
		{ID: "endpoint", Transport: registry.TransportSSE, URL: h.Base + "/sse?endpoint=" + url.QueryEscape(sink.URL+"/messages")},
	} {
		e := callErr(t, p, srv, "echo", nil)
		// (The SDK keeps only the text of some causes.)
		if !strings.Contains(e.Error(), errOtherOrigin.Error()) {
			t.Errorf("%s: %v, want a refused request to another origin", srv.ID, e)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the other origin received %d requests", n)
	}
}

// TestSSEStreamBoundedPerRequest: an HTTP+SSE session's one stream carries
// every answer it serves and whatever the upstream sends between them. What
// arrives while a request is in flight counts against that request, as a
// streamable-HTTP answer would: log messages sent during a tools/list count
// against the list's byte bound. The stream is bounded per request, not once
// for its life: a session serving many answers within the bound goes on.
func TestSSEStreamBoundedPerRequest(t *testing.T) {
	var chatty atomic.Bool
	s := mcp.NewServer(&mcp.Implementation{Name: "chatty", Version: "1"}, nil)
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" && chatty.Load() {
				ss := req.GetSession().(*mcp.ServerSession)
				for range 64 {
					_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: strings.Repeat("x", 1024)})
				}
			}
			return next(ctx, method, req)
		}
	})
	s.AddTool(&mcp.Tool{Name: "chunk", InputSchema: &jsonschema.Schema{Type: "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("c", 20<<10)}}}, nil
	})
	hs := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)
	srv := &registry.Server{ID: "chatty", URL: hs.URL, Transport: registry.TransportSSE, Timeout: 10 * time.Second}

	p := New(Options{AllowLocal: true, MaxResponseBytes: 64 << 10, MaxListBytes: 32 << 10, MaxIdle: 1})
	defer p.Close()
	for i := range 6 { // 120 KiB of answers on one session, 20 KiB each
		if _, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "chunk"}, nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := p.Connects(); n != 1 {
		t.Errorf("%d sessions opened, want 1 to serve every call", n)
	}
	chatty.Store(true)
	_, err := p.Tools(context.Background(), srv, Caller{})
	var le *LimitError
	if !errors.As(err, &le) || le.What != "tool list" {
		t.Errorf("a list with 64 KiB of log messages, bound 32 KiB: %v; want the tool list's limit", err)
	}
}
