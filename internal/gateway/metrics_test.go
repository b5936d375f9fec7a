package gateway

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/metrics/metricstest"
)

func TestMetricsRecords(t *testing.T) {
	h := newHarness(t)
	var out syncBuffer
	em := metrics.New(&out, metrics.Options{})
	lim := lease.New(h.env.Client, h.env.Tables.Leases, lease.Options{})
	h.url = h.newGatewayWith(lim, em, Options{})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "on_limit": "shed"})

	held := make(chan response, 1)
	go func() {
		held <- h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":30000,"gate":"g"}}`)
	}()
	waitInFlight(t, h, 1)
	h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":0}}`), 429, fault.AtCapacity)
	h.demo.OpenGate("g")
	<-held

	var ok, shed *metricstest.Record
	for line := range bytes.SplitSeq(bytes.TrimSpace([]byte(out.String())), []byte("\n")) {
		rec, err := metricstest.Parse(line)
		if err != nil {
			t.Fatalf("invalid EMF line %s: %v", line, err)
		}
		switch o, _ := rec.String(metrics.PropOutcome); o {
		case "ok":
			ok = rec
		case string(fault.AtCapacity):
			shed = rec
		}
	}
	if ok == nil || shed == nil {
		t.Fatalf("records: %s", out.String())
	}
	for _, name := range []string{metrics.MetricLatency, metrics.MetricQueueWait, metrics.MetricInFlight} {
		if _, _, found := ok.Metric(name); !found {
			t.Errorf("ok record has no %s: %s", name, out.String())
		}
	}
	if _, v, found := ok.Metric(metrics.MetricInFlight); !found || len(v) != 1 || v[0] != 1 {
		t.Errorf("InFlight = %v, want 1", v)
	}
	if _, v, found := shed.Metric(metrics.MetricShed); !found || len(v) != 1 || v[0] != 1 {
		t.Errorf("shed record: Shed = %v", v)
	}
	if s, _ := ok.String(metrics.DimServerID); s != "demo" {
		t.Errorf("ServerID = %q", s)
	}
	if s, _ := ok.String(metrics.DimTool); s != "slow_tool" {
		t.Errorf("Tool = %q", s)
	}
	// The caller is a property (never a dimension: callers are many).
	if s, _ := ok.String(metrics.PropPrincipal); s != "key:"+auth.HashKey(h.key)[:12] {
		t.Errorf("Principal = %q, want the key's principal id", s)
	}
	if strings.Contains(out.String(), h.key) {
		t.Error("a key appears in the metrics")
	}
}
