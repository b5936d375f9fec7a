package metrics_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/metrics/metricstest"
)

type wantMetric struct {
	unit  Unit
	value float64
}

// checkRecord checks r's metrics (exactly want), string members and
// dimension sets.
func checkRecord(t *testing.T, r *metricstest.Record, metrics map[string]wantMetric, strs map[string]string, sets string) {
	t.Helper()
	if len(r.Directives) != 1 {
		t.Fatalf("got %d directives, want 1", len(r.Directives))
	}
	d := r.Directives[0]
	if got := fmt.Sprint(d.Dimensions); got != sets {
		t.Errorf("dimension sets = %s, want %s", got, sets)
	}
	var names []string
	for _, m := range d.Metrics {
		names = append(names, m.Name)
	}
	for name, want := range metrics {
		def, vs, ok := r.Metric(name)
		if !ok {
			t.Errorf("metric %s missing (have %v)", name, names)
			continue
		}
		if def.Unit != want.unit || len(vs) != 1 || vs[0] != want.value {
			t.Errorf("metric %s = %v %s, want %v %s", name, vs, def.Unit, want.value, want.unit)
		}
	}
	if len(d.Metrics) != len(metrics) {
		t.Errorf("metrics = %v, want exactly %d", names, len(metrics))
	}
	for name, want := range strs {
		got, ok := r.String(name)
		if want == "" {
			if ok {
				t.Errorf("member %s = %q, want it absent", name, got)
			}
			continue
		}
		if got != want {
			t.Errorf("member %s = %q, want %q", name, got, want)
		}
	}
}

func TestCall(t *testing.T) {
	full := Call{
		ServerID: "github", Tool: "search", Outcome: "ok",
		Latency: 12345678 * time.Nanosecond, QueueWait: 250 * time.Millisecond,
		InFlightAfterAcquire: 4, InFlightKnown: true,
		RequestID: "req-1", LeaseID: "i-1.7",
	}
	both := "[[ServerID] [ServerID Tool]]"
	type callCase struct {
		name    string
		call    Call
		metrics map[string]wantMetric
		strs    map[string]string
		sets    string
	}
	// Each fault code counts once, under its own metric.
	var counters []callCase
	for _, c := range []struct{ metric, code string }{
		{"Shed", "AT_CAPACITY"},
		{"QueueTimeout", "QUEUE_TIMEOUT"},
		{"CircuitOpen", "CIRCUIT_OPEN"},
		{"RateLimited", "RATE_LIMITED"},
		{"StoreError", "STORE_UNAVAILABLE"},
		{"UpstreamTimeout", "UPSTREAM_TIMEOUT"},
		{"UpstreamError", "UPSTREAM_ERROR"},
	} {
		counters = append(counters, callCase{
			name:    "counter " + c.metric,
			call:    Call{ServerID: "s", Tool: "t", Outcome: c.code},
			metrics: map[string]wantMetric{"Latency": {Milliseconds, 0}, "QueueWait": {Milliseconds, 0}, c.metric: {Count, 1}},
			strs:    map[string]string{"Outcome": c.code},
			sets:    both,
		})
	}
	for _, tc := range append(counters, []callCase{
		{
			name: "ok with in-flight",
			call: full,
			metrics: map[string]wantMetric{
				"Latency": {Milliseconds, 12.345}, "QueueWait": {Milliseconds, 250}, "InFlight": {Count, 4},
			},
			strs: map[string]string{"ServerID": "github", "Tool": "search", "Outcome": "ok", "RequestID": "req-1", "LeaseID": "i-1.7"},
			sets: both,
		},
		{
			name: "in-flight zero is still written when known",
			call: Call{ServerID: "s", Tool: "t", InFlightKnown: true},
			metrics: map[string]wantMetric{
				"Latency": {Milliseconds, 0}, "QueueWait": {Milliseconds, 0}, "InFlight": {Count, 0},
			},
			strs: map[string]string{"Outcome": "", "RequestID": "", "LeaseID": ""},
			sets: both,
		},
		{
			name: "in-flight not known: not written",
			call: Call{ServerID: "s", Tool: "t", Outcome: "UPSTREAM_ERROR", Latency: time.Second, InFlightAfterAcquire: 9},
			metrics: map[string]wantMetric{
				"Latency": {Milliseconds, 1000}, "QueueWait": {Milliseconds, 0}, "UpstreamError": {Count, 1},
			},
			strs: map[string]string{"Outcome": "UPSTREAM_ERROR"},
			sets: both,
		},
		{
			name:    "shed",
			call:    Call{ServerID: "s", Tool: "t", Outcome: "AT_CAPACITY"},
			metrics: map[string]wantMetric{"Latency": {Milliseconds, 0}, "QueueWait": {Milliseconds, 0}, "Shed": {Count, 1}},
			strs:    map[string]string{"Outcome": "AT_CAPACITY", "LeaseID": ""},
			sets:    both,
		},
		{
			name:    "no tool: server set only",
			call:    Call{ServerID: "s", Outcome: "NOT_FOUND"},
			metrics: map[string]wantMetric{"Latency": {Milliseconds, 0}, "QueueWait": {Milliseconds, 0}},
			strs:    map[string]string{"ServerID": "s", "Tool": ""},
			sets:    "[[ServerID]]",
		},
	}...) {
		t.Run(tc.name, func(t *testing.T) {
			e, lines := newTest(t, Options{})
			if err := e.Call(tc.call); err != nil {
				t.Fatalf("Call: %v", err)
			}
			got := lines()
			if len(got) != 1 {
				t.Fatalf("got %d lines, want 1", len(got))
			}
			checkRecord(t, mustParse(t, got[0]), tc.metrics, tc.strs, tc.sets)
		})
	}
}

func TestCallWithoutServerIsInvalid(t *testing.T) {
	e, lines := newTest(t, Options{})
	if err := e.Call(Call{Tool: "t"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Call: got %v, want ErrInvalid", err)
	}
	if got := lines(); len(got) != 0 {
		t.Errorf("wrote %q, want nothing", got)
	}
}

func TestBreakerTransition(t *testing.T) {
	e, lines := newTest(t, Options{})
	if err := e.BreakerTransition("github", "search", "closed", "open"); err != nil {
		t.Fatal(err)
	}
	if err := e.BreakerTransition("github", "", "half_open", "closed"); err != nil {
		t.Fatal(err)
	}
	got := lines()
	if len(got) != 2 {
		t.Fatalf("got %d lines, want 2", len(got))
	}
	checkRecord(t, mustParse(t, got[0]),
		map[string]wantMetric{"BreakerTransition": {Count, 1}},
		map[string]string{"ServerID": "github", "Tool": "search", "From": "closed", "To": "open"},
		"[[ServerID] [ServerID Tool]]")
	checkRecord(t, mustParse(t, got[1]),
		map[string]wantMetric{"BreakerTransition": {Count, 1}},
		map[string]string{"ServerID": "github", "Tool": "", "From": "half_open", "To": "closed"},
		"[[ServerID]]")
}

func TestExchange(t *testing.T) {
	e, lines := newTest(t, Options{})
	if err := e.Exchange(Exchange{ServerID: "batch", Tool: "run", Held: 2500 * time.Millisecond, StoppedBy: "answered", RequestID: "r1"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Exchange(Exchange{ServerID: "batch", Tool: "run", Held: time.Minute}); err != nil {
		t.Fatal(err)
	}
	got := lines()
	if len(got) != 2 {
		t.Fatalf("got %d lines, want 2", len(got))
	}
	checkRecord(t, mustParse(t, got[0]),
		map[string]wantMetric{"HeldAfterAnswer": {Milliseconds, 2500}},
		map[string]string{"ServerID": "batch", "Tool": "run", "StoppedBy": "answered", "RequestID": "r1"},
		"[[ServerID] [ServerID Tool]]")
	checkRecord(t, mustParse(t, got[1]),
		map[string]wantMetric{"HeldAfterAnswer": {Milliseconds, 60000}, "CapMayBeExceeded": {Count, 1}},
		map[string]string{"StoppedBy": "unknown"},
		"[[ServerID] [ServerID Tool]]")
}

func TestStoreStats(t *testing.T) {
	e, lines := newTest(t, Options{})
	if err := e.StoreStats(StoreStats{Calls: 4, Writes: 10, FailedWrites: 2, Reads: 3}); err != nil {
		t.Fatal(err)
	}
	if err := e.StoreStats(StoreStats{}); err != nil {
		t.Fatal(err)
	}
	got := lines()
	if len(got) != 2 {
		t.Fatalf("got %d lines, want 2", len(got))
	}
	checkRecord(t, mustParse(t, got[0]), map[string]wantMetric{
		"StoreCalls": {Count, 4}, "StoreWrites": {Count, 10}, "StoreFailedWrites": {Count, 2}, "StoreReads": {Count, 3},
		"StoreWritesPerCall": {None, 2.5}, "StoreReadsPerCall": {None, 0.75},
	}, nil, "[[]]")
	checkRecord(t, mustParse(t, got[1]), map[string]wantMetric{
		"StoreCalls": {Count, 0}, "StoreWrites": {Count, 0}, "StoreFailedWrites": {Count, 0}, "StoreReads": {Count, 0},
	}, nil, "[[]]")
}
