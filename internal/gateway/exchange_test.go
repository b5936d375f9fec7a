package gateway

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/metrics/metricstest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// statelessHarness is a harness whose demo upstream is stateless: nothing
// the gateway says stops a call it runs, so a cut-off call's slot waits for
// its late answer. Its gateway writes EMF records to em.
func statelessHarness(t *testing.T, opts Options) (*harness, *syncBuffer, *metrics.Emitter) {
	t.Helper()
	h := newHarness(t)
	h.demo = testkit.StartDemoWith(t, demoupstream.HandlerOptions{Stateless: true, JSONResponse: true})
	out := &syncBuffer{}
	em := metrics.New(out, metrics.Options{})
	h.url = h.newGatewayWith(lease.New(h.env.Client, h.env.Tables.Leases, lease.Options{Margin: 200 * time.Millisecond}), em, opts)
	return h, out, em
}

// exchangeRecords returns the EMF records of exchanges closed after their
// answers.
func exchangeRecords(t *testing.T, out *syncBuffer, em *metrics.Emitter) []*metricstest.Record {
	t.Helper()
	var recs []*metricstest.Record
	for line := range bytes.SplitSeq(bytes.TrimSpace([]byte(out.String())), []byte("\n")) {
		rec, err := metricstest.Parse(line)
		if err != nil {
			t.Fatalf("invalid EMF line %s: %v", line, err)
		}
		if _, _, ok := rec.Metric(metrics.MetricHeldAfterAnswer); ok {
			recs = append(recs, rec)
		}
	}
	return recs
}

// TestCutOffCallKeepsItsSlot: the agent is answered at its timeout, but the
// slot stays taken (renewed past its lease's own hold) until the upstream's
// late answer arrives; then it is given back, and that is counted.
func TestCutOffCallKeepsItsSlot(t *testing.T) {
	h, out, em := statelessHarness(t, Options{MaxLeaseHold: time.Second})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "timeout": 0.3, "on_limit": "shed"})
	h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":60000,"gate":"g"}}`), 504, fault.UpstreamTimeout)
	if n := h.gw.Open(); n != 1 {
		t.Fatalf("%d exchanges open after the answer, want 1", n)
	}
	// The lease outlives its first hold (0.3 s + 0.2 s margin): it is
	// renewed while the exchange is open.
	first := leaseExpiry(t, h)
	deadline := time.Now().Add(30 * time.Second)
	for leaseExpiry(t, h) == first {
		if time.Now().After(deadline) {
			t.Fatal("the lease of a cut-off call was not renewed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Meanwhile the slot is taken.
	h.expectFault(h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`), 429, fault.AtCapacity)
	if s := h.demo.Stats(); s.InFlight != 1 {
		t.Fatalf("upstream stats %+v, want the cut-off call still running", s)
	}
	h.demo.OpenGate("g")
	h.drain()
	if n := testkit.LeaseCount(t, h.env, "demo", lease.LeasesAttr); n != 0 {
		t.Errorf("%d leases after the late answer", n)
	}
	if r := h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`); r.status != http.StatusOK {
		t.Errorf("call after the late answer: %d %s", r.status, r.body)
	}
	recs := exchangeRecords(t, out, em)
	if len(recs) != 1 {
		t.Fatalf("%d exchange records, want 1: %s", len(recs), out.String())
	}
	if by, _ := recs[0].String(metrics.PropStoppedBy); by != "answered" {
		t.Errorf("StoppedBy = %q, want answered", by)
	}
	if _, _, ok := recs[0].Metric(metrics.MetricCapMayBeExceeded); ok {
		t.Error("CapMayBeExceeded counted for an exchange whose upstream answered")
	}
}

// TestGraceEndFreesTheSlot: when the upstream does not answer within
// cancel_grace, the exchange is closed and the slot freed, and that is
// logged and counted as possibly exceeding the cap.
func TestGraceEndFreesTheSlot(t *testing.T) {
	h, out, em := statelessHarness(t, Options{})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "timeout": 0.3, "cancel_grace": 0.5})
	h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":60000,"gate":"g"}}`), 504, fault.UpstreamTimeout)
	h.drain()
	if n := testkit.LeaseCount(t, h.env, "demo", lease.LeasesAttr); n != 0 {
		t.Errorf("%d leases after the grace", n)
	}
	if s := h.demo.Stats(); s.InFlight != 1 {
		t.Errorf("upstream stats %+v: the call should still run when its grace ends", s)
	}
	recs := exchangeRecords(t, out, em)
	if len(recs) != 1 {
		t.Fatalf("%d exchange records, want 1: %s", len(recs), out.String())
	}
	if _, v, ok := recs[0].Metric(metrics.MetricCapMayBeExceeded); !ok || len(v) != 1 || v[0] != 1 {
		t.Errorf("CapMayBeExceeded = %v, want 1", v)
	}
	if !strings.Contains(h.logs.String(), `"cause":"cancel grace over"`) {
		t.Errorf("the grace's end is not in the log:\n%s", h.logs.String())
	}
	h.demo.OpenGate("g")
}

// TestShutdownCutsOffAndDrains: shutdown answers calls still waiting for
// their upstreams, and gives their slots back, at the latest when its own
// bound ends.
func TestShutdownCutsOffAndDrains(t *testing.T) {
	h, _, _ := statelessHarness(t, Options{})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "timeout": 30})
	done := make(chan response, 1)
	go func() {
		done <- h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":60000,"gate":"g"}}`)
	}()
	waitInFlight(t, h, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if n := h.gw.Shutdown(ctx); n != 1 {
		t.Errorf("Shutdown closed %d exchanges, want 1 (the stateless upstream never stops)", n)
	}
	d := h.expectFault(<-done, 504, fault.UpstreamTimeout)
	if !strings.Contains(d.Message, "shutting down") {
		t.Errorf("message %q does not say the gateway is shutting down", d.Message)
	}
	if n := testkit.LeaseCount(t, h.env, "demo", lease.LeasesAttr); n != 0 {
		t.Errorf("%d leases after shutdown", n)
	}
	// Later calls are not sent.
	calls := h.demo.Stats().Calls
	h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":0}}`), 504, fault.UpstreamTimeout)
	if h.demo.Stats().Calls != calls {
		t.Error("a call reached the upstream after shutdown")
	}
	h.demo.OpenGate("g")
}

// TestCallerGoneTellsTheBreakerNothing: a call cut off because its caller
// went away keeps its slot until the upstream stops, and is not counted as
// a failure by the breaker.
func TestCallerGoneTellsTheBreakerNothing(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1,
		"breaker": map[string]any{"failure_threshold": 1, "recovery_timeout": 60}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/mcp-rest/tools/call",
		strings.NewReader(`{"server_id":"demo","name":"slow_tool","arguments":{"ms":60000,"gate":"g"}}`))
	req.Header.Set("Authorization", "Bearer "+h.key)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitInFlight(t, h, 1)
	cancel()
	<-errc
	// The (stateful) upstream is told, stops, and the slot comes back.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := h.demo.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	h.drain()
	if r := h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`); r.status != http.StatusOK {
		t.Errorf("call after the caller left: %d %s (the breaker must not count it)", r.status, r.body)
	}
	if !strings.Contains(h.logs.String(), `"code":"UPSTREAM_TIMEOUT"`) {
		t.Error("the cut-off call is not logged with its code")
	}
}

// TestBrokenConnectionKeepsItsSlot: a connection that breaks after the call
// was sent is not the upstream's answer (a stateless upstream goes on with
// the call): the agent is answered at once, but the slot is held as a
// cut-off call's is, until cancel_grace ends, and that end is logged and
// counted as possibly exceeding the cap.
func TestBrokenConnectionKeepsItsSlot(t *testing.T) {
	h := newHarness(t)
	out := &syncBuffer{}
	em := metrics.New(out, metrics.Options{})
	h.url = h.newGatewayWith(lease.New(h.env.Client, h.env.Tables.Leases, lease.Options{Margin: 200 * time.Millisecond}), em, Options{})
	hostile := testkit.StartHostile(t)
	h.server(map[string]any{"server_id": "flaky", "url": hostile.URL, "max_concurrent_requests": 1, "timeout": 30,
		"cancel_grace": 2, "on_limit": "shed", "allow_local": true})
	h.expectFault(h.call(h.key, `{"server_id":"flaky","name":"broken_stream"}`), 502, fault.UpstreamError)
	if n := h.gw.Open(); n != 1 {
		t.Fatalf("%d exchanges open after the answer, want the broken one", n)
	}
	// Its slot is still taken.
	h.expectFault(h.call(h.key, `{"server_id":"flaky","name":"echo"}`), 429, fault.AtCapacity)
	h.drain()
	if n := testkit.LeaseCount(t, h.env, "flaky", lease.LeasesAttr); n != 0 {
		t.Errorf("%d leases after the grace", n)
	}
	recs := exchangeRecords(t, out, em)
	if len(recs) != 1 {
		t.Fatalf("%d exchange records, want 1: %s", len(recs), out.String())
	}
	if _, v, ok := recs[0].Metric(metrics.MetricCapMayBeExceeded); !ok || len(v) != 1 || v[0] != 1 {
		t.Errorf("CapMayBeExceeded = %v, want 1", v)
	}
}

// heldWriter is an EMF output that holds the write of an exchange's
// record (HeldAfterAnswer) until release is closed, telling entered when
// it starts.
type heldWriter struct {
	syncBuffer
	once             sync.Once
	entered, release chan struct{}
}

func (w *heldWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(metrics.MetricHeldAfterAnswer)) {
		w.once.Do(func() { close(w.entered) })
		<-w.release
	}
	return w.syncBuffer.Write(p)
}

// TestDrainWaitsForAnExchangesRecord: an exchange that outlived its
// answer counts as open until its log line and EMF record are written, so
// that a process draining before it exits (Shutdown) loses neither. Drain
// told none was open while the record of one was still being written.
func TestDrainWaitsForAnExchangesRecord(t *testing.T) {
	h := newHarness(t)
	h.demo = testkit.StartDemoWith(t, demoupstream.HandlerOptions{Stateless: true, JSONResponse: true})
	out := &heldWriter{entered: make(chan struct{}), release: make(chan struct{})}
	h.url = h.newGatewayWith(lease.New(h.env.Client, h.env.Tables.Leases, lease.Options{Margin: 200 * time.Millisecond}),
		metrics.New(out, metrics.Options{}), Options{})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "timeout": 0.3, "cancel_grace": 0.5})
	h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":60000,"gate":"g"}}`), 504, fault.UpstreamTimeout)
	defer h.demo.OpenGate("g")
	<-out.entered // the grace is over: the exchange is writing its record
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no waiting: what is open now
	if n := h.gw.Drain(ctx); n != 1 {
		t.Errorf("Drain, while the exchange's record was being written: %d exchanges open; want 1", n)
	}
	close(out.release)
	h.drain()
	if recs := exchangeRecords(t, &out.syncBuffer, nil); len(recs) != 1 {
		t.Errorf("%d exchange records after the drain, want 1", len(recs))
	}
}
