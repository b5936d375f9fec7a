package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
)

// exchange.go: a flight is capped when one of its leases TakesPlace; a cut
// off capped call is kept in the background until its upstream stops or
// its cancel_grace ends, its lease renewed, and the grace's end is logged
// and counted as the cap possibly exceeded (MetricCapMayBeExceeded). A
// call with no cap admitted in its turn beside a ticket that needs its
// token holds nothing, as a charged one: cut off, it is closed at once,
// not held, renewed and counted against a cap its server does not have.
//
// Server demo: no cap, rpm_limit 600, timeout 0.3 s, cancel_grace 0.5 s;
// a task waits on its item (its ticket needs the server's token). A call
// of slow_tool is cut off at its timeout.
func TestACutOffCallWithNoCapIsNotHeldForACap(t *testing.T) {
	h, out, em := statelessHarness(t, Options{})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "rpm_limit": 600, "timeout": 0.3, "cancel_grace": 0.5})
	l := lease.New(h.env.Client, h.env.Tables.Leases, lease.Options{})
	task := lease.Request{Key: "demo", Cap: uncappedTask, Tool: "echo", Hold: time.Minute, Holder: "other", MaxQueued: 8,
		Rates: []lease.Rate{{Name: "server", PerMinute: 600}}}
	if _, err := l.Enqueue(context.Background(), task, "", "task-1", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":60000,"gate":"g"}}`), 504, fault.UpstreamTimeout)
	open := h.gw.Open()
	h.drain()
	recs := exchangeRecords(t, out, em)
	capped := 0
	for _, r := range recs {
		if _, v, ok := r.Metric(metrics.MetricCapMayBeExceeded); ok && len(v) == 1 && v[0] == 1 {
			capped++
		}
	}
	if open != 0 || capped != 0 {
		t.Errorf("a cut-off call on a server with no cap: %d exchanges held open after its answer, %d counted as possibly exceeding the cap; want none", open, capped)
	}
	h.demo.OpenGate("g")
}
