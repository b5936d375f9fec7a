package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// startsTracer records what each request's SERVER span starts with, and
// makes no span.
type startsTracer struct {
	mu     sync.Mutex
	starts []RequestStart
}

func (s *startsTracer) Request(ctx context.Context, _ http.Header, _ TraceMeta, r RequestStart) (context.Context, func(RequestEnd)) {
	s.mu.Lock()
	s.starts = append(s.starts, r)
	s.mu.Unlock()
	return ctx, func(RequestEnd) {}
}

func (s *startsTracer) Admission(context.Context, CallInfo) func(AdmissionEnd) {
	return func(AdmissionEnd) {}
}

func (s *startsTracer) Exchange(ctx context.Context, _ CallInfo, _ *registry.Server, _ mcp.Meta) (context.Context, ExchangeSpan) {
	return ctx, noExchange{}
}

func (s *startsTracer) Send(ctx context.Context, _ string, _ *registry.Server, _ mcp.Meta) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func (s *startsTracer) Current(context.Context) TraceMeta { return TraceMeta{} }

func (s *startsTracer) Task(ctx context.Context, _ TraceMeta, _ CallInfo) (context.Context, func(RequestEnd)) {
	return ctx, func(RequestEnd) {}
}

// last returns the start of the latest request, failing if there is none.
func (s *startsTracer) last(t *testing.T) RequestStart {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.starts) == 0 {
		t.Fatal("no request span started")
	}
	return s.starts[len(s.starts)-1]
}

type noExchange struct{}

func (noExchange) Answered(*fault.Error, bool)         {}
func (noExchange) CutOff(*fault.Error, bool)           {}
func (noExchange) Closed(upstream.Stop, time.Duration) {}

// TestRequestSpanStart: a request's SERVER span is started with its route's
// pattern as http.route (never the path, which names a server), and a REST
// call's with the tool it names as its target, as on the MCP routes; the
// REST handler still reads the whole body, and still refuses one over the
// limit.
func TestRequestSpanStart(t *testing.T) {
	tr := &startsTracer{}
	h := newTracedHarness(t, Options{}, tr)
	key := bearerHeader(h.key)
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		want                     RequestStart
	}{
		{"mcp server route", http.MethodPost, "/mcp/demo", mcpToolList, 200,
			RequestStart{Method: "tools/list", Target: "demo", Route: "/mcp/{server_id}"}},
		{"mcp aggregated", http.MethodPost, "/mcp", mcpToolList, 200,
			RequestStart{Method: "tools/list", Route: "/mcp"}},
		{"rest call", http.MethodPost, "/mcp-rest/tools/call", echoCall, 200,
			RequestStart{Method: "tools/call", Target: "echo", Route: "/mcp-rest/tools/call"}},
		{"rest call, prefixed name", http.MethodPost, "/mcp-rest/tools/call", `{"name":"demo-echo","arguments":{"text":"y"}}`, 200,
			RequestStart{Method: "tools/call", Target: "demo-echo", Route: "/mcp-rest/tools/call"}},
		{"rest call over the limit", http.MethodPost, "/mcp-rest/tools/call", `{"server_id":"demo","name":"echo","arguments":{"text":"` + strings.Repeat("z", 5000) + `"}}`, 413,
			RequestStart{Method: "tools/call", Route: "/mcp-rest/tools/call"}},
		{"rest list", http.MethodGet, "/mcp-rest/tools/list?server_id=demo", "", 200,
			RequestStart{Method: "tools/list", Route: "/mcp-rest/tools/list"}},
	} {
		r := h.send(c.method, c.path, key, c.body)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, r.status, c.status, r.body)
		}
		got := tr.last(t)
		got.GatewayID, got.Protocol, got.RequestID = "", "", ""
		if got != c.want {
			t.Errorf("%s: span started with %+v, want %+v", c.name, got, c.want)
		}
	}
}
