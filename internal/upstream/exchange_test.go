package upstream

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// upstreamMode is one way an upstream can be served.
type upstreamMode struct {
	name      string
	transport registry.Transport
	opts      demoupstream.HandlerOptions
	// stopsOnClose is what the server's item declares.
	stopsOnClose bool
	// want is how Stop learns that the upstream stopped ("" = it cannot:
	// the late answer is awaited).
	want Stop
}

var upstreamModes = []upstreamMode{
	{name: "stateful-sse", transport: registry.TransportHTTP, want: StopAcknowledged},
	{name: "stateful-json", transport: registry.TransportHTTP, opts: demoupstream.HandlerOptions{JSONResponse: true}, want: StopAcknowledged},
	{name: "stateless-sse", transport: registry.TransportHTTP, opts: demoupstream.HandlerOptions{Stateless: true}},
	{name: "stateless-json", transport: registry.TransportHTTP, opts: demoupstream.HandlerOptions{Stateless: true, JSONResponse: true}},
	{name: "legacy-sse", transport: registry.TransportSSE, want: StopAcknowledged},
	{name: "openapi", transport: registry.TransportOpenAPI},
	{name: "stateless-propagate-stops-on-close", transport: registry.TransportHTTP, opts: demoupstream.HandlerOptions{Stateless: true, PropagateCancellation: true}, stopsOnClose: true, want: StopClosed},
	{name: "openapi-stops-on-close", transport: registry.TransportOpenAPI, stopsOnClose: true, want: StopClosed},
}

func (m upstreamMode) start(t *testing.T) (*demoupstream.Demo, *registry.Server) {
	t.Helper()
	d := demoupstream.New()
	hs := httptest.NewServer(d.HandlerWith(m.opts))
	t.Cleanup(hs.Close)
	srv := &registry.Server{ID: "demo", Transport: m.transport, Timeout: 10 * time.Second, StopsOnClose: m.stopsOnClose}
	switch m.transport {
	case registry.TransportSSE:
		srv.URL = hs.URL + "/sse"
	case registry.TransportOpenAPI:
		srv.SpecURL = hs.URL + "/openapi.json"
	default:
		srv.URL = hs.URL + "/mcp"
	}
	return d, srv
}

// slowParams calls the demo's slow instrument for ms, or until gate opens.
func slowParams(srv *registry.Server, ms int, gate string) *mcp.CallToolParams {
	args := map[string]any{"ms": ms}
	if gate != "" {
		args["gate"] = gate
	}
	if srv.Transport == registry.TransportOpenAPI {
		return &mcp.CallToolParams{Name: "slow_api", Arguments: args}
	}
	return &mcp.CallToolParams{Name: "slow_tool", Arguments: args}
}

func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestExchangeStop: what Stop can learn from each kind of upstream. Those
// that honour cancellation are known to stop as soon as they do; for the
// others the exchange stays open, its late answer still readable.
func TestExchangeStop(t *testing.T) {
	for _, m := range upstreamModes {
		t.Run(m.name, func(t *testing.T) {
			d, srv := m.start(t)
			p := New(Options{AllowLocal: true})
			defer p.Close()
			// The call holds until its gate opens (or a minute passes).
			x := p.Start(context.Background(), srv, Caller{}, slowParams(srv, 60000, "g"), nil)
			defer x.Close()
			if err := d.WaitInFlight(waitCtx(t), 1); err != nil {
				t.Fatal(err)
			}
			x.Stop()
			if m.want != "" {
				select {
				case <-x.Stopped():
				case <-waitCtx(t).Done():
					t.Fatal("the upstream did not stop")
				}
				// A Go SDK server answers a cancelled call (with an
				// error), which may come before the acknowledgement.
				if got := x.StoppedBy(); got != m.want && !(m.want == StopAcknowledged && got == StopAnswered) {
					t.Errorf("stopped by %q, want %q", got, m.want)
				}
				if x.StoppedBy() == StopAnswered {
					res, err := x.Result()
					if err == nil && res != nil && len(res.Content) > 0 {
						t.Logf("answer to the cancelled call: isError %v, %q", res.IsError, text(t, res))
					}
				}
				// It stopped because it was told to: the call was
				// cancelled, not answered.
				if err := d.WaitIdle(waitCtx(t)); err != nil {
					t.Fatal(err)
				}
				if s := d.Stats(); s.Cancelled != 1 || s.Completed != 0 {
					t.Errorf("upstream stats %+v, want the call cancelled", s)
				}
				return
			}
			// Nothing tells this upstream to stop without losing the
			// answer: the exchange waits for it.
			if s := d.Stats(); s.InFlight != 1 {
				t.Fatalf("upstream stats %+v after Stop, want the call still running", s)
			}
			select {
			case <-x.Stopped():
				t.Fatalf("stopped by %q while the upstream still runs the call", x.StoppedBy())
			default:
			}
			d.OpenGate("g")
			res, err := x.Result()
			if err != nil || res == nil || res.IsError {
				t.Fatalf("late answer: %v %+v", err, res)
			}
			<-x.Stopped()
			if got := x.StoppedBy(); got != StopAnswered {
				t.Errorf("stopped by %q, want answered", got)
			}
			if s := d.Stats(); s.Completed != 1 {
				t.Errorf("upstream stats %+v, want the call completed", s)
			}
		})
	}
}

// TestExchangeStopBeforeSent: a call stopped before its request went out
// is never sent, and is known at once not to run upstream.
func TestExchangeStopBeforeSent(t *testing.T) {
	d, srv := upstreamModes[2].start(t) // stateless: nothing else would tell
	p := New(Options{AllowLocal: true})
	defer p.Close()
	// Warm the session, so the call's request is the next thing sent.
	if _, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil); err != nil {
		t.Fatal(err)
	}
	x := &Exchange{p: p, srv: srv, done: make(chan struct{}), stopped: make(chan struct{})}
	x.ctx, x.cancel = context.WithCancelCause(context.Background())
	x.Stop()
	x.run(slowParams(srv, 60000, ""), nil)
	if got := x.StoppedBy(); got != StopUnsent {
		t.Errorf("stopped by %q, want unsent", got)
	}
	if _, err := x.Result(); err == nil {
		t.Error("a call stopped before it was sent returned no error")
	}
	if n := d.Stats().Calls; n != 0 {
		t.Errorf("the upstream saw %d calls, want none", n)
	}
	// The session is still good.
	if _, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil); err != nil {
		t.Fatal(err)
	}
	if n := p.Connects(); n != 1 {
		t.Errorf("%d sessions, want 1", n)
	}
}

// TestExchangeClose: closing an exchange aborts its request, the SDK tells
// a stateful upstream, and the session is kept.
func TestExchangeClose(t *testing.T) {
	d, srv := upstreamModes[0].start(t)
	p := New(Options{AllowLocal: true})
	defer p.Close()
	x := p.Start(context.Background(), srv, Caller{}, slowParams(srv, 60000, ""), nil)
	if err := d.WaitInFlight(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if got := x.StoppedBy(); got != "" {
		t.Errorf("a closed exchange is stopped by %q", got)
	}
	// The SDK tells a stateful upstream when the call is aborted.
	if err := d.WaitIdle(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CallTool(context.Background(), srv, Caller{}, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil); err != nil {
		t.Fatal(err)
	}
	if n := p.Connects(); n != 1 {
		t.Errorf("%d sessions, want 1 (the closed exchange's session kept)", n)
	}
}

// TestStatelessIgnoresAbort measures why a stateless upstream's late answer
// is awaited: aborting the call (the SDK then closes the request and sends
// notifications/cancelled, which a stateless server takes for an unrelated
// request) does not stop the Go SDK's stateless server, which runs the call
// to its end, for 2026-07-28 as for 2025-11-25 requests.
func TestStatelessIgnoresAbort(t *testing.T) {
	for _, m := range upstreamModes[2:4] {
		t.Run(m.name, func(t *testing.T) {
			d, srv := m.start(t)
			p := New(Options{AllowLocal: true})
			defer p.Close()
			x := p.Start(context.Background(), srv, Caller{}, slowParams(srv, 60000, "g"), nil)
			if err := d.WaitInFlight(waitCtx(t), 1); err != nil {
				t.Fatal(err)
			}
			x.Close()
			if s := d.Stats(); s.InFlight != 1 {
				t.Fatalf("upstream stats %+v after the abort, want the call still running", s)
			}
			d.OpenGate("g")
			if err := d.WaitIdle(waitCtx(t)); err != nil {
				t.Fatal(err)
			}
			if s := d.Stats(); s.Completed != 1 || s.Cancelled != 0 {
				t.Errorf("upstream stats %+v, want the aborted call run to its end", s)
			}
		})
	}
}

// peekRequest finds a request's id and method wherever they are, as a
// decoder of the whole body would, and reads the body only as far as it
// needs: arguments after them, valid or not, are never looked at.
func TestPeekRequest(t *testing.T) {
	for _, c := range []struct {
		body, id, method string
		ok               bool
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,2,{"b":"c"}]}}}`, "7", "tools/call", true},
		{`{"jsonrpc":"2.0","params":{"arguments":{"id":1,"method":"no"}},"method":"tools/call","id":"s-1"}`, `"s-1"`, "tools/call", true},
		{`{"ID":3,"Method":"tools/call"}`, "3", "tools/call", true},
		{`{"id":4,"method":"tools/call","params":{"arguments":` + strings.Repeat("[", 5000), "4", "tools/call", true},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}`, "", "", false},
		{`{"jsonrpc":"2.0","id":5,"result":{}}`, "", "", false},
		{`{"id":6,"method":7}`, "", "", false},
		{`[{"id":1,"method":"tools/call"}]`, "", "", false},
		{`not json`, "", "", false},
	} {
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		msg, ok := peekRequest(req)
		if ok != c.ok || ok && (string(msg.ID) != c.id || msg.Method != c.method) {
			t.Errorf("%.60s: id %s, method %q, ok %v; want %s, %q, %v", c.body, msg.ID, msg.Method, ok, c.id, c.method, c.ok)
		}
		if b, _ := io.ReadAll(req.Body); string(b) != c.body {
			t.Errorf("%.60s: the body was consumed", c.body)
		}
	}
}
