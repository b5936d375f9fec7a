package main

// TestBench measures what the fleet-wide cap costs: store operations per
// call against their floor, the gateway's overhead against calling the
// upstream directly (with tracing off and on), how fully a saturated cap is used across 4 gateway
// processes, the in-process design other gateways ship on the same
// workload, one hot item's throughput and size, and the gateway's cold
// start and memory; then isolation and rate limits
// (bench_isolation_test.go): what callers queued on one item cost it,
// bulkheads behind a Lambda-like front, two tenants sharing a cap,
// waiting tasks against synchronous waiters behind that front
// (bench_tasks_test.go), and the store requests rate limits add.
//
// `make bench` runs it in full (MCPGATE_BENCH=1) and writes
// results/bench.json; `make test` runs every scenario briefly and checks
// only that each completes and the cap held, never a timing. BENCH_ONLY
// (comma-separated scenario names, as benchScenarios lists them) runs
// only those.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// benchConfig sizes the run: the full bench and the smoke version in
// `make test` differ only here.
type benchConfig struct {
	full         bool
	soloCalls    int           // sequential calls in the uncontended scenario
	rounds       int           // calls per caller in each saturation run
	hotFor       time.Duration // how long the hot-key scenario runs
	coldStarts   int
	buildLambda  bool // build the arm64 bootstrap to report its size
	procs        int  // gateway processes
	toolDuration time.Duration
	varRounds    int // calls per caller in the variable-duration run
}

var (
	fullBench = benchConfig{full: true, soloCalls: 400, rounds: 20, hotFor: 10 * time.Second,
		coldStarts: 5, buildLambda: true, procs: 4, toolDuration: 100 * time.Millisecond, varRounds: 10}
	smokeBench = benchConfig{soloCalls: 10, rounds: 1, hotFor: 300 * time.Millisecond,
		coldStarts: 1, procs: 4, toolDuration: 100 * time.Millisecond, varRounds: 1}
)

// benchChildEnv makes the test binary, started by the bench, act as one of
// its child processes instead of running tests (see benchChild).
const benchChildEnv = "MCPGATE_BENCH_CHILD"

// benchScenarios are the bench's scenarios in the order they run, by the
// names BENCH_ONLY takes.
var benchScenarios = []struct {
	name string
	run  func(*bench)
}{
	{"uncontended", (*bench).uncontended},
	{"traced", (*bench).traced},
	{"saturation", (*bench).saturations},
	{"hotkey", (*bench).hotKey},
	{"itemsize", (*bench).itemSizes},
	{"coldstart", (*bench).coldStart},
	{"coldfleet", (*bench).coldFleet},
	{"waiters", (*bench).waiters},
	{"bulkhead", (*bench).bulkhead},
	{"tenants", (*bench).tenants},
	{"tasks", (*bench).tasks},
	{"ratelimits", (*bench).rateLimits},
	{"adaptive", (*bench).adaptive},
}

func TestBench(t *testing.T) {
	cfg := smokeBench
	if os.Getenv("MCPGATE_BENCH") == "1" {
		cfg = fullBench
	}
	var names []string
	for _, s := range benchScenarios {
		names = append(names, s.name)
	}
	// queuecost is the bench's scenario that runs in-process, in
	// internal/lease (TestQueueCostGrowsLinearly): named here so that
	// BENCH_ONLY may name it.
	only, err := benchOnly(os.Getenv("BENCH_ONLY"), append(names, "queuecost"))
	if err != nil {
		t.Fatal(err)
	}
	b := newBench(t, cfg)
	for _, s := range benchScenarios {
		if only == nil || only[s.name] {
			start := time.Now()
			s.run(b)
			t.Logf("scenario %s took %v", s.name, time.Since(start).Round(time.Millisecond))
		}
	}
	b.report()
}

// benchOnly reads BENCH_ONLY, a comma-separated list of scenario names:
// nil (every scenario) when it is empty.
func benchOnly(v string, names []string) (map[string]bool, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	only := map[string]bool{}
	for n := range strings.SplitSeq(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(names, n) {
			return nil, fmt.Errorf("BENCH_ONLY=%q: no scenario %q; the scenarios are %s", v, n, strings.Join(names, ", "))
		}
		only[n] = true
	}
	return only, nil
}

// saturations runs the saturation scenarios, then reports the gateway
// processes' memory after them.
func (b *bench) saturations() {
	fixed := b.fixedWorkload()
	for _, c := range []int{1, 2, 8} {
		ours := b.saturation("ours", c, fixed)
		base := b.saturation("in-process", c, fixed)
		b.compare(fmt.Sprintf("saturation C=%d, %d callers, %d procs", c, 5*c, b.cfg.procs), ours, &base)
		if c == 2 {
			b.drawCap(ours, base)
		}
	}
	// On Lambda an instance serves one request at a time: no two waiters
	// share a process, so every hand-off goes through the store.
	b.compare("saturation C=2, 10 callers, one per process (as on Lambda)", b.saturation("one per process", 2, fixed), nil)
	// Real tool calls vary in length.
	b.compare("variable calls (log-normal, median 300 ms), C=2, 10 callers, one per process",
		b.saturation("one per process", 2, b.variableWorkload()), nil)
	b.memory()
}

type bench struct {
	t   *testing.T
	cfg benchConfig
	// rig is the store, the demo upstream, a key, and the bench's
	// gateway processes, which talk to the store through meter.
	rig   *testkit.Rig
	meter *storeMeter
	http  *http.Client
	rows  []benchRow
	runs  int // saturation runs so far, naming their servers
}

// benchRow is one figure of the table.
type benchRow struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	// Baseline is what Value is compared with, named by Against; Ratio is
	// Value / Baseline.
	Baseline float64 `json:"baseline,omitempty"`
	Against  string  `json:"against,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	Goal     string  `json:"goal,omitempty"`
}

func (b *bench) add(scenario, metric string, value float64, unit string, baseline float64, against, goal string) {
	r := benchRow{Scenario: scenario, Metric: metric, Value: value, Unit: unit, Baseline: baseline, Against: against, Goal: goal}
	if baseline != 0 {
		r.Ratio = value / baseline
	}
	b.rows = append(b.rows, r)
}

func newBench(t *testing.T, cfg benchConfig) *bench {
	r := testkit.NewRig(t, testkit.RigOptions{Demo: true, Key: true})
	b := &bench{t: t, cfg: cfg, rig: r,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}}
	b.meter = startStoreMeter(t, r.Env)
	// The uncontended scenario's server, which cold starts call too.
	r.PutServer(map[string]any{"server_id": "solo", "url": r.Demo.URL, "max_concurrent_requests": 8})
	r.Start(cfg.procs, b.gatewayEnv()...)
	return b
}

// gatewayEnv points a gateway process at the metered store, with
// BENCH_GATEWAY_ENV's variables (space-separated NAME=value; for
// instance AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256, which runs it with the
// memory limit and threads of the template's function).
func (b *bench) gatewayEnv() []string {
	return append([]string{"AWS_ENDPOINT_URL_DYNAMODB=" + b.meter.URL}, strings.Fields(os.Getenv("BENCH_GATEWAY_ENV"))...)
}

// call is one tool call through the REST route, as an agent makes it.
type call struct {
	sent, done time.Time
	status     int
	body       []byte
}

func (b *bench) call(base, server, tool string, args map[string]any) call {
	return b.callCtx(context.Background(), base, server, tool, args)
}

// callCtx is a call whose agent leaves when ctx ends.
func (b *bench) callCtx(ctx context.Context, base, server, tool string, args map[string]any) call {
	body, _ := json.Marshal(map[string]any{"server_id": server, "name": tool, "arguments": args})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/mcp-rest/tools/call", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+b.rig.Key)
	req.Header.Set("Content-Type", "application/json")
	c := call{sent: time.Now()}
	resp, err := b.http.Do(req)
	if err != nil {
		c.done, c.body = time.Now(), []byte(err.Error())
		return c
	}
	c.body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	c.done, c.status = time.Now(), resp.StatusCode
	return c
}

// uncontended: one caller, a capped server, a tool that answers at once.
func (b *bench) uncontended() {
	t := b.t
	n := b.cfg.soloCalls
	args := map[string]any{"text": "x"}

	cs := connectDirect(t, b.rig.Demo.URL)
	direct := make([]time.Duration, 0, n)
	for i := range n + 5 {
		start := time.Now()
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: args}); err != nil {
			t.Fatal(err)
		}
		if i >= 5 { // the first few warm the connection
			direct = append(direct, time.Since(start))
		}
	}
	gw := b.rig.Gateway(0).URL
	for range 5 {
		if c := b.call(gw, "solo", "echo", args); c.status != http.StatusOK {
			t.Fatalf("warm-up call: %d %s", c.status, c.body)
		}
	}
	b.meter.reset()
	through := make([]time.Duration, 0, n)
	// beyondStore is each call's time less its own store round trips (the
	// calls come one at a time, and both writes are made before the
	// answer).
	beyondStore := make([]time.Duration, 0, n)
	for range n {
		before := b.meter.leaseTimeSoFar()
		c := b.call(gw, "solo", "echo", args)
		if c.status != http.StatusOK {
			t.Fatalf("call: %d %s", c.status, c.body)
		}
		through = append(through, c.done.Sub(c.sent))
		beyondStore = append(beyondStore, c.done.Sub(c.sent)-(b.meter.leaseTimeSoFar()-before))
	}
	m := b.meter.reset()
	perCall := func(x int) float64 { return float64(x) / float64(n) }
	writes, reads := perCall(m.leaseWrites()), perCall(m.leaseReads())
	const sc = "uncontended capped call"
	b.add(sc, "lease writes per call", writes, "ops", 2, "floor", "2")
	b.add(sc, "lease reads per call", reads, "ops", 0, "", "0")
	b.add(sc, "registry+key reads per call", perCall(m.otherOps()), "ops", 0, "", "")
	dp50, dp99 := quantile(direct, 0.5), quantile(direct, 0.99)
	tp50, tp99 := quantile(through, 0.5), quantile(through, 0.99)
	b.add(sc, "direct call p50", ms(dp50), "ms", 0, "", "")
	b.add(sc, "through gateway p50", ms(tp50), "ms", ms(dp50), "direct", "")
	b.add(sc, "overhead p50", ms(tp50-dp50), "ms", 0, "", "")
	b.add(sc, "overhead p99", ms(tp99-dp99), "ms", 0, "", "")
	storePerCall := m.leaseTime / time.Duration(n)
	b.add(sc, "lease store time per call", ms(storePerCall), "ms", 0, "", "")
	beyond := mean(through) - mean(direct) - storePerCall
	b.add(sc, "overhead beyond store round trips (mean)", ms(beyond), "ms", 0, "", "")
	// Both over the direct call's median: its p99, a handful of calls on
	// a shared machine, is mostly the machine's noise.
	b.add(sc, "overhead beyond store round trips p50", ms(quantile(beyondStore, 0.5)-dp50), "ms", 0, "", "")
	b.add(sc, "overhead beyond store round trips p99 (over direct p50)", ms(quantile(beyondStore, 0.99)-dp50), "ms", 0, "", "")
	// The meter sits between the gateway and the store: its own work on
	// each request (reading, counting, sizing the item returned) is in
	// the figure above, and would not be there in production.
	proxyPerCall := m.proxyTime / time.Duration(n)
	b.add(sc, "metering proxy's own time per call (in the figure above)", ms(proxyPerCall), "ms", 0, "", "")
	b.add(sc, "overhead beyond store round trips and the proxy (mean)", ms(beyond-proxyPerCall), "ms", 0, "", "")
	if writes < 2 {
		t.Errorf("%.2f lease writes per capped call: the acquire and release did not both reach the store", writes)
	}
	// A profile needs more calls than the latencies for enough samples.
	if os.Getenv("BENCH_PROFILE") != "" {
		n *= 5
	}
	b.uncontendedCost(n, args, dp50, dp99)
}

// traced: the uncontended call with tracing off and on. A gateway process
// exporting its spans over OTLP/HTTP to the Collector's receiver on
// loopback (infra/otelcol, as TestTracesToCollector starts it) and one
// without tracing answer the same capped call in turn, each against the
// direct call made just before, so the machine's drifts fall on both.
func (b *bench) traced() {
	t := b.t
	n := b.cfg.soloCalls
	args := map[string]any{"text": "x"}
	endpoint, spansFile := startCollector(t)
	var on *testkit.Gateway
	var wg sync.WaitGroup
	wg.Go(func() {
		on = b.rig.Launch(t, 1, append(b.gatewayEnv(), "OTEL_TRACES_EXPORTER=otlp",
			"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_BSP_SCHEDULE_DELAY=1000", "OTEL_SERVICE_NAME=mcpgate-bench")...)[0]
	})
	cs := connectDirect(t, b.rig.Demo.URL)
	wg.Wait()
	off := b.rig.Gateway(0).URL
	for range 5 {
		for _, gw := range []string{off, on.URL} {
			if c := b.call(gw, "solo", "echo", args); c.status != http.StatusOK {
				t.Fatalf("warm-up call: %d %s", c.status, c.body)
			}
		}
	}
	direct := func() time.Duration {
		start := time.Now()
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: args}); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	var dOff, dOn, tOff, tOn []time.Duration
	for i := range n {
		gws := []string{off, on.URL}
		if i%2 == 1 {
			gws[0], gws[1] = gws[1], gws[0]
		}
		for _, gw := range gws {
			d := direct()
			c := b.call(gw, "solo", "echo", args)
			if c.status != http.StatusOK {
				t.Fatalf("call: %d %s", c.status, c.body)
			}
			if gw == off {
				dOff, tOff = append(dOff, d), append(tOff, c.done.Sub(c.sent))
			} else {
				dOn, tOn = append(dOn, d), append(tOn, c.done.Sub(c.sent))
			}
		}
	}
	// The spans reach the receiver: tracing was on.
	exported := 0
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		exported = 0
		for _, s := range readSpans(t, spansFile) {
			if s.Service == "mcpgate-bench" && s.Kind == "Server" {
				exported++
			}
		}
		if exported >= n+5 {
			break
		}
	}
	const sc = "uncontended, tracing off / on"
	offP50, offP99 := quantile(tOff, 0.5)-quantile(dOff, 0.5), quantile(tOff, 0.99)-quantile(dOff, 0.99)
	onP50, onP99 := quantile(tOn, 0.5)-quantile(dOn, 0.5), quantile(tOn, 0.99)-quantile(dOn, 0.99)
	b.add(sc, "direct call p50", ms(quantile(dOff, 0.5)), "ms", 0, "", "")
	b.add(sc, "overhead p50, tracing off", ms(offP50), "ms", 0, "", "")
	b.add(sc, "overhead p99, tracing off", ms(offP99), "ms", 0, "", "")
	b.add(sc, "overhead p50, tracing on", ms(onP50), "ms", ms(offP50), "off", "")
	b.add(sc, "overhead p99, tracing on", ms(onP99), "ms", ms(offP99), "off", "")
	b.add(sc, "tracing's cost p50 (on − off)", ms(onP50-offP50), "ms", 0, "", "")
	b.add(sc, "tracing's cost p99 (on − off)", ms(onP99-offP99), "ms", 0, "", "")
	b.add(sc, "SERVER spans exported per traced call", float64(exported)/float64(n+5), "", 0, "", "1")
	if exported < n {
		t.Errorf("%d SERVER spans exported for %d traced calls", exported, n+5)
	}
}

func connectDirect(t *testing.T, endpoint string) *mcp.ClientSession {
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// satResult is one saturation run.
type satResult struct {
	cap, calls, failed int
	peak               int
	wall, ideal        time.Duration
	// idealP99 is the p99 call latency of a perfect fleet-wide FIFO queue
	// on the same workload (see fifoIdeal).
	idealP99      time.Duration
	latency       []time.Duration
	handoffs      []time.Duration
	waiterSeconds float64
	store         meterCounts
	start         time.Time            // when the callers started
	events        []demoupstream.Event // the upstream's entries and exits
}

// workload is what the callers of a saturation run ask slow_tool to do:
// rounds calls each, caller i's call r lasting dur(i, r).
type workload struct {
	rounds int
	dur    func(i, r int) time.Duration
}

// fixedWorkload: every call lasts cfg.toolDuration.
func (b *bench) fixedWorkload() workload {
	return workload{rounds: b.cfg.rounds, dur: func(int, int) time.Duration { return b.cfg.toolDuration }}
}

// variableWorkload: call lengths drawn from a log-normal distribution with
// a median of 300 ms and σ = 0.6 (p10 ≈ 140 ms, p90 ≈ 650 ms), capped at
// 3 s, the same for every run (seeded by caller and round).
func (b *bench) variableWorkload() workload {
	return workload{rounds: b.cfg.varRounds, dur: func(i, r int) time.Duration {
		rng := mrand.New(mrand.NewPCG(uint64(i), uint64(r)))
		d := time.Duration(300 * math.Exp(0.6*rng.NormFloat64()) * float64(time.Millisecond))
		return min(d.Round(time.Millisecond), 3*time.Second)
	}}
}

// fifoIdeal runs the workload of callers through a perfect fleet-wide FIFO
// queue with c places and no overhead: every caller sends its first call
// at 0 and its next the moment the previous one answers. It returns the
// makespan and the p99 call latency (queueing plus the call itself). With
// every call lasting d and callers a multiple of c, a call's latency is
// callers / c × d once the first round is past.
func fifoIdeal(w workload, callers, c int) (makespan, p99 time.Duration) {
	type job struct {
		caller, round int
		arrive, end   time.Duration
	}
	var queue, running []job
	for i := range callers {
		queue = append(queue, job{caller: i})
	}
	var now time.Duration
	var lat []time.Duration
	for len(queue)+len(running) > 0 {
		for len(running) < c && len(queue) > 0 {
			j := queue[0]
			queue = queue[1:]
			j.end = now + w.dur(j.caller, j.round)
			lat = append(lat, j.end-j.arrive)
			running = append(running, j)
		}
		first := 0
		for k, j := range running {
			if j.end < running[first].end {
				first = k
			}
		}
		j := running[first]
		running = slices.Delete(running, first, first+1)
		now = j.end
		if j.round+1 < w.rounds {
			queue = append(queue, job{caller: j.caller, round: j.round + 1, arrive: now})
		}
	}
	return now, quantile(lat, 0.99)
}

// saturation runs 5×cap callers, each making the workload's calls of
// slow_tool in a row, spread over the gateway processes: "ours" through
// the fleet-wide cap, "one per process" the same with a gateway process
// per caller, "in-process" through processes that each hold a semaphore
// of size cap (and no store limit).
func (b *bench) saturation(design string, c int, w workload) satResult {
	t := b.t
	b.runs++
	id := fmt.Sprintf("sat%d_%s_%d", b.runs, strings.NewReplacer("-", "", " ", "").Replace(design), c)
	doc := map[string]any{"server_id": id, "url": b.rig.Demo.URL, "queue_timeout": 300, "timeout": 60}
	gws := b.rig.Gateways()
	var extra []*testkit.Gateway // processes of this run alone, stopped once it is over
	switch design {
	case "ours":
		doc["max_concurrent_requests"] = c
	case "one per process":
		doc["max_concurrent_requests"] = c
		extra = b.rig.Launch(t, 5*c, b.gatewayEnv()...)
		gws = extra
	default:
		extra = b.baselineFleet(c)
		gws = extra
	}
	b.rig.PutServer(doc)
	b.warm(gws, id)
	callers := 5 * c
	b.rig.Demo.Reset()
	b.rig.Demo.RecordEvents(true)
	b.meter.reset()
	calls := make([][]call, callers)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			g := gws[i%len(gws)]
			for r := range w.rounds {
				args := map[string]any{"ms": w.dur(i, r).Milliseconds()}
				calls[i] = append(calls[i], b.call(g.URL, id, "slow_tool", args))
			}
		})
	}
	wg.Wait()
	r := satResult{cap: c, wall: time.Since(start), store: b.meter.reset(), peak: b.rig.Demo.Stats().Peak}
	r.ideal, r.idealP99 = fifoIdeal(w, callers, c)
	for _, g := range extra {
		g.Stop()
	}
	events := b.rig.Demo.Events()
	b.rig.Demo.RecordEvents(false)
	r.start, r.events = start, events
	var sent, entered float64
	for _, cc := range calls {
		for _, x := range cc {
			r.calls++
			if x.status != http.StatusOK {
				r.failed++
				t.Errorf("%s cap %d: call failed: %d %s", design, c, x.status, x.body)
				continue
			}
			r.latency = append(r.latency, x.done.Sub(x.sent))
			sent += float64(x.sent.UnixNano()) / 1e9
		}
	}
	slots := make([]time.Time, 0, c) // when each freed slot became free
	for _, e := range events {
		if e.Enter {
			entered += float64(e.At.UnixNano()) / 1e9
			if len(slots) > 0 {
				r.handoffs = append(r.handoffs, e.At.Sub(slots[0]))
				slots = slots[1:]
			}
		} else {
			slots = append(slots, e.At)
		}
	}
	r.waiterSeconds = entered - sent
	if design != "in-process" {
		if r.peak > c {
			t.Errorf("cap %d: the upstream saw %d calls in flight", c, r.peak)
		}
		if n := testkit.LeaseCount(t, b.rig.Env, id, lease.LeasesAttr); n != 0 {
			t.Errorf("cap %d: %d leases left after the run", c, n)
		}
	}
	return r
}

// warm calls server id once through each of gws, to fill every process's
// registry cache and open its upstream session.
func (b *bench) warm(gws []*testkit.Gateway, id string) {
	for _, g := range gws {
		if r := b.call(g.URL, id, "slow_tool", map[string]any{"ms": 0}); r.status != http.StatusOK {
			b.t.Fatalf("warm-up: %d %s", r.status, r.body)
		}
	}
}

// baselineFleet starts cfg.procs gateway processes that cap calls with an
// in-process semaphore of size c, the design other gateways ship.
func (b *bench) baselineFleet(c int) []*testkit.Gateway {
	self, err := os.Executable()
	if err != nil {
		b.t.Fatal(err)
	}
	return b.rig.LaunchBinary(b.t, self, b.cfg.procs, append(b.gatewayEnv(), benchChildEnv+"=baseline", "BENCH_CAP="+strconv.Itoa(c))...)
}

// compare reports a saturation run, beside the in-process design's run on
// the same workload when base is not nil.
func (b *bench) compare(sc string, ours satResult, base *satResult) {
	c := ours.cap
	b.add(sc, "calls", float64(ours.calls), "", 0, "", "")
	b.add(sc, "upstream peak in flight", float64(ours.peak), "calls", float64(c), "cap", "= cap")
	if base != nil {
		b.add(sc, "in-process design: upstream peak", float64(base.peak), "calls", float64(c), "cap", "")
	}
	util := ours.ideal.Seconds() / ours.wall.Seconds()
	b.add(sc, "slot utilisation (ideal/measured makespan)", util, "", 1, "ideal", "≥ 0.95")
	b.add(sc, "release→next acquire p50", ms(quantile(ours.handoffs, 0.5)), "ms", 25, "goal", "≤ 25")
	b.add(sc, "release→next acquire p99", ms(quantile(ours.handoffs, 0.99)), "ms", 100, "goal", "≤ 100")
	waitOps := float64(ours.store.leaseOps() - 2*ours.calls)
	perWaiter := 0.0
	if ours.waiterSeconds > 0 {
		perWaiter = waitOps / ours.waiterSeconds
	}
	b.add(sc, "store requests per waiter-second", perWaiter, "req/s", 10, "goal", "≤ 10")
	b.add(sc, "lease writes per call", float64(ours.store.leaseWrites())/float64(ours.calls), "ops", 2, "uncontended", "")
	b.add(sc, "failed conditional writes per call", float64(ours.store.failedWrites)/float64(ours.calls), "", 0, "", "")
	if base == nil {
		b.add(sc, "call latency p50", ms(quantile(ours.latency, 0.5)), "ms", 0, "", "")
		b.add(sc, "call latency p99", ms(quantile(ours.latency, 0.99)), "ms", ms(ours.idealP99), "ideal FIFO", "≤ 1.5 × ideal")
		if ours.failed > 0 {
			b.add(sc, "failed calls", float64(ours.failed), "calls", 0, "", "0")
		}
		return
	}
	b.add(sc, "call latency p50", ms(quantile(ours.latency, 0.5)), "ms", ms(quantile(base.latency, 0.5)), "in-process", "")
	b.add(sc, "call latency p99", ms(quantile(ours.latency, 0.99)), "ms", ms(quantile(base.latency, 0.99)), "in-process", "")
	b.add(sc, "call latency p99 vs ideal FIFO", ms(quantile(ours.latency, 0.99)), "ms", ms(ours.idealP99), "ideal FIFO", "")
	if base.failed+ours.failed > 0 {
		b.add(sc, "failed calls", float64(ours.failed), "calls", float64(base.failed), "in-process", "0")
	}
}

func (b *bench) memory() {
	var peak int64
	for _, g := range b.rig.Gateways() {
		rss, err := g.PeakRSS()
		if err != nil {
			b.t.Logf("peak RSS: %v", err)
			return
		}
		peak = max(peak, rss)
	}
	b.add("gateway process", "peak RSS after the saturation runs", float64(peak)/(1<<20), "MiB", 0, "", "")
}

// hotKey: 4 processes acquire and release on one item as fast as they can,
// under a cap they never reach, so only write contention limits them.
func (b *bench) hotKey() {
	t := b.t
	const capacity, workers = 64, 4
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type child struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}
	kids := make([]child, b.cfg.procs)
	for i := range kids {
		cmd := exec.Command(self)
		cmd.Env = append(append(os.Environ(), b.rig.Env.Vars()...), b.gatewayEnv()...)
		cmd.Env = append(cmd.Env, benchChildEnv+"=hotkey", "BENCH_CAP="+strconv.Itoa(capacity),
			"BENCH_WORKERS="+strconv.Itoa(workers), "BENCH_FOR="+b.cfg.hotFor.String())
		cmd.Stderr = os.Stderr
		storetest.SetParentDeathSignal(cmd)
		in, _ := cmd.StdinPipe()
		outPipe, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		kids[i] = child{cmd, in, bufio.NewReader(outPipe)}
	}
	for _, k := range kids { // each says it is ready, then all start together
		if line, err := k.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
			t.Fatalf("hot-key child: %q %v", line, err)
		}
	}
	b.meter.reset()
	for _, k := range kids {
		io.WriteString(k.in, "go\n")
	}
	var pairs, errs int
	for _, k := range kids {
		var res hotResult
		line, err := k.out.ReadString('\n')
		if err != nil || json.Unmarshal([]byte(line), &res) != nil {
			t.Fatalf("hot-key child result %q: %v", line, err)
		}
		pairs += res.Pairs
		errs += res.Errors
	}
	m := b.meter.reset()
	sc := fmt.Sprintf("hot key (%d procs × %d workers, cap %d)", b.cfg.procs, workers, capacity)
	b.add(sc, "acquire+release pairs per second", float64(pairs)/b.cfg.hotFor.Seconds(), "pairs/s", 0, "", "")
	if pairs > 0 {
		b.add(sc, "failed conditional writes per pair", float64(m.failedWrites)/float64(pairs), "", 0, "", "")
		b.add(sc, "lease requests per pair", float64(m.leaseOps())/float64(pairs), "ops", 2, "floor", "")
	}
	if errs > 0 {
		b.add(sc, "acquire or release errors", float64(errs), "", 0, "", "0")
	}
	if pairs == 0 {
		t.Error("hot key: no acquire+release pair completed")
	}
	if n := testkit.LeaseCount(t, b.rig.Env, "hot", lease.LeasesAttr); n != 0 {
		t.Errorf("hot key: %d leases left", n)
	}
}

type hotResult struct{ Pairs, Errors int }

// itemSizes fills an item with n live leases, each labelled with its
// caller as the gateway labels them, and reports its size; at 8 leases,
// also with 16 callers queued.
func (b *bench) itemSizes() {
	t := b.t
	l := lease.New(b.rig.Env.Client, b.rig.Env.Tables.Leases, lease.Options{})
	for _, n := range []int{8, 64, 512} {
		key := fmt.Sprintf("size_%d", n)
		held := make([]*lease.Lease, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range held {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				ls, err := l.Acquire(context.Background(), lease.Request{Key: key, Holder: "k:0123abcd",
					Cap: n, Hold: time.Minute, Wait: time.Minute, MaxQueued: 64})
				if err != nil {
					t.Error(err)
					return
				}
				held[i] = ls
			})
		}
		wg.Wait()
		if got := testkit.LeaseCount(t, b.rig.Env, key, lease.LeasesAttr); got != n {
			t.Errorf("item holds %d leases, want %d", got, n)
		}
		size := b.itemBytes(key)
		sc := "lease item size"
		b.add(sc, fmt.Sprintf("bytes with %d leases held", n), float64(size), "B", 0, "", "")
		b.add(sc, fmt.Sprintf("write units per operation at %d", n), float64(store.WriteUnits(size)), "WCU", 1, "1 KB item", "")
		if n == 8 {
			size := b.queuedSize(l, key, n, 16)
			b.add(sc, "bytes with 8 leases held and 16 callers queued", float64(size), "B", 0, "", "")
			b.add(sc, "write units per operation then", float64(store.WriteUnits(size)), "WCU", 1, "1 KB item", "")
		}
		for _, ls := range held {
			// ErrNotHeld: a release whose answer was lost and retried
			// (the leases left are checked below).
			if ls != nil {
				if _, err := ls.Finish(context.Background(), lease.Success); err != nil && !errors.Is(err, lease.ErrNotHeld) {
					t.Error(err)
				}
			}
		}
		if left := testkit.LeaseCount(t, b.rig.Env, key, lease.LeasesAttr); left != 0 {
			t.Errorf("%d leases left after releasing all", left)
		}
	}
}

// queuedSize queues callers for the full item of key and returns its size
// once they all wait, then lets them go.
func (b *bench) queuedSize(l *lease.Limiter, key string, capacity, callers int) int {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			// Each of its own principal, as the gateway labels them: one
			// principal may not take the last places of a queue.
			_, _ = l.Acquire(ctx, lease.Request{Key: key, Holder: fmt.Sprintf("k:%016x", i),
				Cap: capacity, Hold: time.Minute, Wait: time.Minute, MaxQueued: callers})
		})
	}
	defer func() { cancel(); wg.Wait() }()
	for testkit.LeaseCount(b.t, b.rig.Env, key, lease.QueueAttr) < callers {
		time.Sleep(10 * time.Millisecond)
	}
	return b.itemBytes(key)
}

// itemBytes is the size of the lease item of key, as DynamoDB counts it.
func (b *bench) itemBytes(key string) int {
	out, err := b.rig.Env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(b.rig.Env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return store.ItemSize(out.Item)
}

// coldStart times a new gateway process from exec to listening, and to its
// first tool call answered (registry read, key check, upstream session).
func (b *bench) coldStart() {
	t := b.t
	var listen, first []time.Duration
	for range b.cfg.coldStarts {
		start := time.Now()
		g := b.rig.Launch(t, 1, b.gatewayEnv()...)[0]
		listen = append(listen, time.Since(start))
		if c := b.call(g.URL, "solo", "echo", map[string]any{"text": "x"}); c.status != http.StatusOK {
			t.Fatalf("first call: %d %s", c.status, c.body)
		}
		first = append(first, time.Since(start))
		g.Stop()
	}
	sc := "cold start (local process)"
	b.add(sc, "exec → listening (median)", ms(quantile(listen, 0.5)), "ms", 0, "", "")
	b.add(sc, "exec → first call answered (median)", ms(quantile(first, 0.5)), "ms", 0, "", "")
	if b.cfg.buildLambda {
		root, err := storetest.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "bootstrap")
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out, "./functions/gateway")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build bootstrap: %v\n%s", err, o)
		}
		fi, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		b.add(sc, "bootstrap size (linux/arm64, stripped)", float64(fi.Size())/(1<<20), "MiB", 0, "", "")
	}
}

func (b *bench) report() {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmetric\tvalue\tunit\tvs\tratio\tgoal")
	last := ""
	for _, r := range b.rows {
		sc := r.Scenario
		if sc == last {
			sc = ""
		}
		last = r.Scenario
		vs, ratio := "", ""
		if r.Baseline != 0 {
			vs = fmt.Sprintf("%s %s", trim(r.Baseline), r.Against)
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sc, r.Metric, trim(r.Value), r.Unit, vs, ratio, r.Goal)
	}
	tw.Flush()
	machine := machineInfo()
	fmt.Printf("\nmcpgate bench, %s, %s\n\n%s", time.Now().UTC().Format("2006-01-02"), machine, buf.String())
	if !b.cfg.full {
		return
	}
	root, err := storetest.RepoRoot()
	if err != nil {
		b.t.Fatal(err)
	}
	dir := filepath.Join(root, "results")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	doc, _ := json.MarshalIndent(map[string]any{
		"date": time.Now().UTC().Format(time.RFC3339), "machine": machine, "rows": b.rows,
	}, "", "  ")
	path := filepath.Join(dir, "bench.json")
	if err := os.WriteFile(path, append(doc, '\n'), 0o644); err != nil {
		b.t.Fatal(err)
	}
	fmt.Println("\nwritten to", path)
}

func machineInfo() string {
	cpu := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s/%s, %s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func trim(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// storeMeter is an HTTP proxy in front of dynalite that counts what the
// gateway processes send: operations by table, failed conditional writes,
// the time lease-table operations take, and what lease-table writes and
// reads cost in capacity units, from the items the writes return.
type storeMeter struct {
	URL    string
	target string
	leases string
	tasks  string // the tasks table, counted apart
	client *http.Client
	mu     sync.Mutex
	counts meterCounts
	sizes  map[string]int // each lease item's size, as last returned
}

type meterCounts struct {
	ops          map[string]int // "<table kind> <operation>"
	failedWrites int            // ConditionalCheckFailed on the leases table
	leaseTime    time.Duration  // summed round trips of lease-table operations
	// proxyTime is the meter's own time on lease-table operations, besides
	// their round trips: reading, counting and sizing, and answering.
	proxyTime time.Duration
	// writeUnits is what the lease-table writes cost: a write is charged
	// for the larger of the item before it and after it, a failed one
	// for the item it found, ceil(size / 1 KB) each.
	writeUnits int
	// readUnits is what the lease-table reads cost, consistent, at
	// ceil(size / 4 KB) each, the item's size as the last write returned.
	readUnits int
	peakItem  int // the largest lease item a write returned, in bytes
}

func (m meterCounts) leaseWrites() int { return m.ops["leases UpdateItem"] }
func (m meterCounts) leaseReads() int  { return m.ops["leases GetItem"] }
func (m meterCounts) leaseOps() int {
	n := 0
	for k, v := range m.ops {
		if strings.HasPrefix(k, "leases ") {
			n += v
		}
	}
	return n
}
func (m meterCounts) taskOps() int {
	n := 0
	for k, v := range m.ops {
		if strings.HasPrefix(k, "tasks ") {
			n += v
		}
	}
	return n
}
func (m meterCounts) otherOps() int {
	n := 0
	for k, v := range m.ops {
		if !strings.HasPrefix(k, "leases ") && !strings.HasPrefix(k, "tasks ") {
			n += v
		}
	}
	return n
}

func startStoreMeter(t *testing.T, env *storetest.Env) *storeMeter {
	m := &storeMeter{target: env.Endpoint, leases: env.Tables.Leases, tasks: env.Tables.Tasks, sizes: map[string]int{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	m.counts.ops = map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

func (m *storeMeter) serve(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var in struct {
		TableName string
		Key       json.RawMessage
	}
	_ = json.Unmarshal(body, &in)
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	kind := "other"
	switch {
	case in.TableName == m.leases && bytes.Contains(body, []byte(`"`+catalog.KeyPrefix)):
		kind = "catalog" // the tool catalog shares the leases table
	case in.TableName == m.leases:
		kind = "leases"
	case in.TableName == m.tasks:
		kind = "tasks"
	}
	u, _ := url.Parse(m.target)
	u.Path = r.URL.Path
	out, _ := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(body))
	out.Header = r.Header.Clone()
	start := time.Now()
	resp, err := m.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	rt := time.Since(start)
	write := kind == "leases" && op == "UpdateItem"
	var size int
	var sized bool
	if write {
		size, sized = returnedItemSize(rb)
	}
	m.mu.Lock()
	m.counts.ops[kind+" "+op]++
	if kind == "leases" {
		m.counts.leaseTime += rt
		if resp.StatusCode == http.StatusBadRequest && bytes.Contains(rb, []byte("ConditionalCheckFailed")) {
			m.counts.failedWrites++
		}
		// Sizes come from the writes' answers alone: the reads' are
		// many and large, and decoding them would load the meter.
		before := m.sizes[string(in.Key)]
		if !sized {
			size = before
		}
		m.sizes[string(in.Key)] = size
		switch op {
		case "UpdateItem":
			m.counts.writeUnits += store.WriteUnits(max(before, size))
		case "GetItem":
			m.counts.readUnits += max(1, (size+4095)/4096)
		}
		m.counts.peakItem = max(m.counts.peakItem, size)
	}
	m.mu.Unlock()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(rb)
	if kind == "leases" {
		m.mu.Lock()
		m.counts.proxyTime += time.Since(arrived) - rt
		m.mu.Unlock()
	}
}

// returnedItemSize is the size of the item a store answer carries (an
// UpdateItem's Attributes, a GetItem's Item, or the Item of a failed
// conditional write), as DynamoDB counts it; false when it carries none.
func returnedItemSize(answer []byte) (int, bool) {
	var out struct{ Attributes, Item map[string]json.RawMessage }
	if json.Unmarshal(answer, &out) != nil {
		return 0, false
	}
	item := out.Attributes
	if item == nil {
		item = out.Item
	}
	if item == nil {
		return 0, false
	}
	return store.ItemSize(wireItem(item)), true
}

// wireItem decodes an item from DynamoDB's JSON wire format.
func wireItem(raw map[string]json.RawMessage) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, len(raw))
	for k, v := range raw {
		item[k] = wireValue(v)
	}
	return item
}

func wireValue(raw json.RawMessage) types.AttributeValue {
	var v struct {
		S, N, B    *string
		BOOL, NULL *bool
		SS, NS, BS []string
		L          []json.RawMessage
		M          map[string]json.RawMessage
	}
	_ = json.Unmarshal(raw, &v)
	switch {
	case v.S != nil:
		return &types.AttributeValueMemberS{Value: *v.S}
	case v.N != nil:
		return &types.AttributeValueMemberN{Value: *v.N}
	case v.B != nil:
		b, _ := base64.StdEncoding.DecodeString(*v.B)
		return &types.AttributeValueMemberB{Value: b}
	case v.BOOL != nil:
		return &types.AttributeValueMemberBOOL{Value: *v.BOOL}
	case v.SS != nil:
		return &types.AttributeValueMemberSS{Value: v.SS}
	case v.NS != nil:
		return &types.AttributeValueMemberNS{Value: v.NS}
	case v.BS != nil:
		bs := make([][]byte, len(v.BS))
		for i, s := range v.BS {
			bs[i], _ = base64.StdEncoding.DecodeString(s)
		}
		return &types.AttributeValueMemberBS{Value: bs}
	case v.L != nil:
		l := make([]types.AttributeValue, len(v.L))
		for i, e := range v.L {
			l[i] = wireValue(e)
		}
		return &types.AttributeValueMemberL{Value: l}
	case v.M != nil:
		return &types.AttributeValueMemberM{Value: wireItem(v.M)}
	}
	return &types.AttributeValueMemberNULL{Value: true}
}

// reset returns the counts so far and starts new ones.
// leaseTimeSoFar is the lease-table round trips' time summed since the
// last reset.
func (m *storeMeter) leaseTimeSoFar() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts.leaseTime
}

func (m *storeMeter) reset() meterCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counts
	m.counts = meterCounts{ops: map[string]int{}}
	return c
}

// benchChild runs the test binary as one of the bench's child processes.
func benchChild(mode string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch mode {
	case "baseline":
		err = baselineGateway(ctx)
	case "hotkey":
		err = hotKeyChild(ctx)
	case "profile":
		err = profileGateway(ctx)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	return 0
}

// baselineGateway is the gateway with an in-process semaphore of BENCH_CAP
// in front of its tool calls, as other gateways cap them.
func baselineGateway(ctx context.Context) error {
	c, err := strconv.Atoi(os.Getenv("BENCH_CAP"))
	if err != nil || c <= 0 {
		return fmt.Errorf("BENCH_CAP=%q", os.Getenv("BENCH_CAP"))
	}
	sem := make(chan struct{}, c)
	return run(ctx, os.Getenv, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/mcp-rest/tools/call" {
				select {
				case sem <- struct{}{}:
					defer func() { <-sem }()
				case <-r.Context().Done():
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	})
}

// hotKeyChild acquires and releases on the item "hot" with BENCH_WORKERS
// goroutines for BENCH_FOR, from "go" on stdin, and prints its counts.
func hotKeyChild(ctx context.Context) error {
	capacity, _ := strconv.Atoi(os.Getenv("BENCH_CAP"))
	workers, _ := strconv.Atoi(os.Getenv("BENCH_WORKERS"))
	d, err := time.ParseDuration(os.Getenv("BENCH_FOR"))
	if err != nil || capacity <= 0 || workers <= 0 {
		return fmt.Errorf("BENCH_CAP, BENCH_WORKERS and BENCH_FOR must be set")
	}
	db, err := store.NewClient(ctx)
	if err != nil {
		return err
	}
	tables, err := store.TablesFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	l := lease.New(db, tables.Leases, lease.Options{})
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	end := time.Now().Add(d)
	var mu sync.Mutex
	var res hotResult
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				ls, err := l.Acquire(ctx, lease.Request{Key: "hot", Cap: capacity, Holder: "k:0123abcd",
					Hold: 10 * time.Second, Wait: 10 * time.Second, MaxQueued: 64})
				if err == nil {
					if _, err = ls.Finish(ctx, lease.Success); errors.Is(err, lease.ErrNotHeld) {
						err = nil // a lost answer, retried; the parent counts what is left
					}
				}
				mu.Lock()
				if err != nil {
					res.Errors++
				} else {
					res.Pairs++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	return nil
}

func TestReturnedItemSize(t *testing.T) {
	answer := `{"Attributes":{"limiter_key":{"S":"srv"},"seq":{"N":"120"},"on":{"BOOL":true},"gone":{"NULL":true},` +
		`"leases":{"M":{"a.1":{"N":"1764800000000"}}},"principal:k:0123abcd":{"SS":["a.1","b.2"]},` +
		`"l":{"L":[{"S":"x"},{"NS":["1","22"]}]},"b":{"B":"AAEC"},"bs":{"BS":["AAEC","AQ=="]}}}`
	item := map[string]types.AttributeValue{
		"limiter_key":          &types.AttributeValueMemberS{Value: "srv"},
		"seq":                  &types.AttributeValueMemberN{Value: "120"},
		"on":                   &types.AttributeValueMemberBOOL{Value: true},
		"gone":                 &types.AttributeValueMemberNULL{Value: true},
		"leases":               &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a.1": &types.AttributeValueMemberN{Value: "1764800000000"}}},
		"principal:k:0123abcd": &types.AttributeValueMemberSS{Value: []string{"a.1", "b.2"}},
		"l":                    &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}, &types.AttributeValueMemberNS{Value: []string{"1", "22"}}}},
		"b":                    &types.AttributeValueMemberB{Value: []byte{0, 1, 2}},
		"bs":                   &types.AttributeValueMemberBS{Value: [][]byte{{0, 1, 2}, {1}}},
	}
	if got, ok := returnedItemSize([]byte(answer)); !ok || got != store.ItemSize(item) {
		t.Errorf("returnedItemSize = %d, %v; want %d", got, ok, store.ItemSize(item))
	}
	if _, ok := returnedItemSize([]byte(`{"__type":"x#ConditionalCheckFailedException"}`)); ok {
		t.Error("an answer without an item has a size")
	}
}

func TestFIFOIdeal(t *testing.T) {
	w := workload{rounds: 20, dur: func(int, int) time.Duration { return 100 * time.Millisecond }}
	makespan, p99 := fifoIdeal(w, 10, 2)
	if makespan != 10*time.Second || p99 != 500*time.Millisecond {
		t.Errorf("10 callers × 20 calls of 100 ms through 2 places: makespan %v, p99 %v; want 10s and 500ms", makespan, p99)
	}
}
