package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// swappable serves the current handler.
type swappable struct {
	mu sync.Mutex
	h  http.Handler
}

func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

func (s *swappable) swap(h http.Handler) {
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
}

func demoServer(t *testing.T, transport registry.Transport) (*demoupstream.Demo, *swappable, *registry.Server) {
	t.Helper()
	d := demoupstream.New()
	sw := &swappable{h: d.Handler()}
	hs := httptest.NewServer(sw)
	t.Cleanup(hs.Close)
	path := "/mcp"
	if transport == registry.TransportSSE {
		path = "/sse"
	}
	return d, sw, &registry.Server{ID: "demo", URL: hs.URL + path, Transport: transport, Timeout: 10 * time.Second}
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil || len(res.Content) == 0 {
		t.Fatalf("empty result %+v", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T, want text", res.Content[0])
	}
	return tc.Text
}

func TestCallBothTransports(t *testing.T) {
	for _, tr := range []registry.Transport{registry.TransportHTTP, registry.TransportSSE} {
		t.Run(string(tr), func(t *testing.T) {
			_, _, srv := demoServer(t, tr)
			p := New(Options{AllowLocal: true})
			defer p.Close()
			res, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := text(t, res); got != "hi" {
				t.Errorf("echo = %q, want hi", got)
			}
			tools, err := p.Tools(context.Background(), srv, Caller{})
			if err != nil {
				t.Fatal(err)
			}
			if len(tools) != 3 {
				t.Errorf("%d tools, want 3", len(tools))
			}
		})
	}
}

func TestSessionsAreReused(t *testing.T) {
	_, _, srv := demoServer(t, registry.TransportHTTP)
	p := New(Options{AllowLocal: true})
	defer p.Close()
	for range 5 {
		if _, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.Connects(); n != 1 {
		t.Errorf("%d sessions for 5 sequential calls, want 1", n)
	}
}

// An answered call's connection is kept for the next one: the gateway
// closes each exchange as soon as it has the answer, while the SDK may not
// have read the end of the answer's event stream yet; cutting the request
// then would close the connection, and the next call would dial another.
func TestAnsweredCallsKeepTheirConnection(t *testing.T) {
	var conns atomic.Int32
	hs := httptest.NewUnstartedServer(demoupstream.New().Handler())
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	srv := &registry.Server{ID: "demo", URL: hs.URL + "/mcp", Transport: registry.TransportHTTP, Timeout: 10 * time.Second}
	p := New(Options{AllowLocal: true})
	defer p.Close()
	const calls = 200
	for range calls {
		x := p.Start(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil)
		if _, err := x.Result(); err != nil {
			t.Fatal(err)
		}
		x.Close()
	}
	// The session's handshake and its stream may take a connection or
	// two; the calls need one between them.
	if n := conns.Load(); n > 4 {
		t.Errorf("%d connections for %d sequential calls, want at most 4", n, calls)
	}
}

func TestLostSessionIsReplaced(t *testing.T) {
	_, sw, srv := demoServer(t, registry.TransportHTTP)
	p := New(Options{AllowLocal: true})
	defer p.Close()
	call := func() error {
		_, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil)
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	// The upstream restarts and forgets every session.
	sw.swap(demoupstream.New().Handler())
	if err := call(); err != nil {
		t.Fatalf("call after upstream restart: %v", err)
	}
	if n := p.Connects(); n != 2 {
		t.Errorf("%d sessions, want 2 (the lost one replaced once)", n)
	}
}

func TestTimeout(t *testing.T) {
	d, _, srv := demoServer(t, registry.TransportHTTP)
	p := New(Options{AllowLocal: true})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := p.CallTool(ctx, srv, Caller{}, &mcp.CallToolParams{Name: "slow_tool", Arguments: map[string]any{"ms": 60000}}, nil)
	var ue *Error
	if !errors.As(err, &ue) || ue.Kind != KindTimeout {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if !ue.Infrastructure() {
		t.Error("timeout is not an infrastructure failure")
	}
	// The upstream was told to stop: its call ends long before its 60 s.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := d.WaitIdle(wctx); err != nil {
		t.Fatalf("the upstream still runs the timed-out call: %v", err)
	}
	// The session survives a cancelled call.
	if _, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil); err != nil {
		t.Fatal(err)
	}
	if n := p.Connects(); n != 1 {
		t.Errorf("%d sessions, want 1 (kept after the cancelled call)", n)
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	p := New(Options{AllowLocal: true})
	srv := &registry.Server{ID: "gone", URL: "http://" + addr + "/mcp", Transport: registry.TransportHTTP}
	_, err = p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo"}, nil)
	var ue *Error
	if !errors.As(err, &ue) || ue.Kind != KindUnavailable {
		t.Fatalf("err = %v, want unavailable", err)
	}
}

func TestUpstream5xxIsUnavailable(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer hs.Close()
	p := New(Options{AllowLocal: true})
	_, err := p.CallTool(context.Background(), &registry.Server{ID: "sick", URL: hs.URL, Transport: registry.TransportHTTP}, Caller{}, &mcp.CallToolParams{Name: "echo"}, nil)
	var ue *Error
	if !errors.As(err, &ue) || ue.Kind != KindUnavailable {
		t.Fatalf("err = %v, want unavailable", err)
	}
}

func TestToolLookup(t *testing.T) {
	_, _, srv := demoServer(t, registry.TransportHTTP)
	p := New(Options{AllowLocal: true})
	defer p.Close()
	if _, err := p.Tool(context.Background(), srv, Caller{}, "slow_tool"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Tool(context.Background(), srv, Caller{}, "no_such_tool"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("err = %v, want ErrUnknownTool", err)
	}
}

func TestResponseSizeLimit(t *testing.T) {
	_, _, srv := demoServer(t, registry.TransportHTTP)
	p := New(Options{AllowLocal: true, MaxResponseBytes: 2048})
	defer p.Close()
	big := make([]byte, 8192)
	for i := range big {
		big[i] = 'a'
	}
	_, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": string(big)}}, nil)
	if err == nil {
		t.Fatal("oversized response accepted")
	}
}
