package main

// Isolation across the fleet, with several gateway OS processes sharing one
// store: a slow server flooded cannot take the function's concurrency from
// a fast one (bulkheads, behind a front that throttles as Lambda does), one
// tenant's flood does not make another wait behind it (fair shares), and
// one tenant's failing calls do not open a tool's breaker for another.

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// isolationEnv is the environment of the gateway processes of the
// isolation, back-pressure and rate-limit tests: a server item is read
// again after 200 ms.
var isolationEnv = []string{"REGISTRY_CACHE_TTL=200ms"}

// agentCall is one call as an agent sees it: the answer (Status -1 if
// none came), when it was sent and answered, and when the upstream
// started it (200 only).
type agentCall struct {
	testkit.Response
	sent, done time.Time
	entered    time.Time
}

// callVia makes one REST tool call at base (a gateway or a front).
func callVia(base, key, server, tool string, args map[string]any) agentCall {
	c := agentCall{sent: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := testkit.Post(ctx, base+"/mcp-rest/tools/call", key, map[string]any{"server_id": server, "name": tool, "arguments": args})
	c.done = time.Now()
	if err != nil {
		c.Status = -1
		return c
	}
	c.Response = r
	if r.Status == http.StatusOK {
		var res struct {
			StructuredContent demoupstream.SlowResult `json:"structuredContent"`
		}
		if json.Unmarshal(r.Body, &res) == nil && res.StructuredContent.EnteredAtMS > 0 {
			c.entered = time.UnixMilli(res.StructuredContent.EnteredAtMS)
		}
	}
	return c
}

// utilisation is the share of [from, to] during which the upstream had cap
// calls in flight, from its own entry and exit events.
func utilisation(events []demoupstream.Event, cap int, from, to time.Time) float64 {
	in, busy, last := 0, time.Duration(0), from
	for _, e := range events {
		at := e.At
		if at.Before(from) {
			at = from
		}
		if at.After(to) {
			at = to
		}
		if in >= cap {
			busy += at.Sub(last)
		}
		last = at
		if e.Enter {
			in++
		} else {
			in--
		}
	}
	if in >= cap {
		busy += to.Sub(last)
	}
	return busy.Seconds() / to.Sub(from).Seconds()
}

// TestBulkheadKeepsTheFunctionForOthers: 4 gateway processes behind a front
// admitting 12 requests at once (FUNCTION_CONCURRENCY 12, so each server may
// take 6: calls in flight and callers waiting). A slow server (cap 2, calls
// of 2 s) is flooded by 16 agents that retry when refused, after the delay
// the refusal advises; 3 agents call a fast, uncapped server through the
// same front. The slow server's waiters cannot fill the function: the fast
// server's calls succeed, and the slow server's cap stays busy. (Without
// the bulkhead, make bench measures, the slow server's waiters hold the
// front and the fast server's calls are throttled.)
func TestBulkheadKeepsTheFunctionForOthers(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv})
	gws := rig.Start(4, "FUNCTION_CONCURRENCY="+strconv.Itoa(floodFront))
	r := floodBehindFront(t, rig.Env, gws, "", 8*time.Second, 2*time.Second)
	t.Logf("fast server: %d of %d calls succeeded %v; slow server: %v; front throttled %d; slow cap busy %.0f%% of the run",
		r.fastOK, r.fastAll, r.fastCodes, r.slowCodes, r.throttled, 100*r.util)
	if r.fastAll == 0 || float64(r.fastOK) < 0.99*float64(r.fastAll) {
		t.Errorf("the fast server's calls succeeded %d of %d times; want at least 99%%", r.fastOK, r.fastAll)
	}
	if r.peak > 2 {
		t.Errorf("the slow server saw %d calls at once; cap 2", r.peak)
	}
	if r.slowCodes["429 AT_CAPACITY queue_full"] == 0 {
		t.Errorf("no slow caller was refused for a full queue: %v", r.slowCodes)
	}
	// The cap stays busy: refused callers come back when places are due.
	if r.util < 0.5 {
		t.Errorf("the slow server's cap was busy %.0f%% of the run", 100*r.util)
	}
}

// TestFairSharesBetweenTenants: cap 2, calls of 500 ms; key A runs 8
// callers in a loop, key B one, over 4 gateway processes. Each of B's calls
// gets the next place that frees. Between B's call being sent and its start
// at most 3 of A's calls start at the upstream, however many of A's wait: the
// two places may each go to A while B's own request is still on its way to
// the queue (a window far shorter than a call, so each place at most once),
// and once B has queued only a place freed beside B's can go to A. Served in
// arrival order B would wait behind A's seven other callers.
func TestFairSharesBetweenTenants(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv})
	gws := rig.Start(4)
	r := twoTenants(t, rig.Env, gws, "shared", 8*time.Second, 500*time.Millisecond)
	if len(r.b) < 3 {
		t.Fatalf("B made %d calls", len(r.b))
	}
	for _, c := range r.b {
		ahead := 0
		for _, e := range r.events {
			// Entries strictly between B's call being sent and its own
			// entry (which is reported to the millisecond).
			if e.Enter && e.At.After(c.sent) && e.At.Before(c.entered.Add(-time.Millisecond)) {
				ahead++
			}
		}
		if ahead > 3 {
			t.Errorf("%d of A's calls started while B's call waited (sent %v, started %v after)", ahead, c.sent.Format("15:04:05.000"), c.entered.Sub(c.sent))
		}
	}
	q := func(d []time.Duration, p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	t.Logf("B: %d calls, latency p50 %v p99 %v; A: %d calls, p50 %v p99 %v; cap busy %.0f%%", len(r.b), q(r.bLat, 0.5), q(r.bLat, 0.99),
		len(r.a), q(r.aLat, 0.5), q(r.aLat, 0.99), 100*utilisation(r.events, 2, r.start, r.end))
	if r.peak > 2 {
		t.Errorf("the upstream saw %d calls at once; cap 2", r.peak)
	}
}

// TestOneTenantCannotOpenTheBreakerForOthers: key A's own calls make a tool
// slow (its arguments), and time out; the breaker opens for A alone, on
// every process, and key B's calls of the same tool go through. On another
// server B's and C's calls fail until each tenant's own breaker opens: two
// tenants' open breakers open it for everyone, A included.
func TestOneTenantCannotOpenTheBreakerForOthers(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv, Demo: true})
	keyA, keyB, keyC := r.PutKey("*"), r.PutKey("*"), r.PutKey("*")
	gws := r.Start(3)
	r.PutServer(map[string]any{"server_id": "demo", "url": r.Demo.URL, "max_concurrent_requests": 8, "timeout": 1,
		"breaker": map[string]any{"failure_threshold": 3, "recovery_timeout": 60}})
	for i := range 4 {
		if c := callVia(gws[i%3].URL, keyA, "demo", "slow_tool", map[string]any{"ms": 5000}); c.Fault.Code != fault.UpstreamTimeout && c.Fault.Code != fault.CircuitOpen {
			t.Fatalf("A's slow call %d: %+v", i, c)
		}
	}
	// The cut-off calls tell the breaker when their slots come back.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Demo.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	for testkit.LeaseCount(t, r.Env, "demo", "leases") != 0 {
		time.Sleep(20 * time.Millisecond)
	}
	for i, g := range gws {
		if c := callVia(g.URL, keyA, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusServiceUnavailable || c.Fault.Code != fault.CircuitOpen {
			t.Errorf("A's call via process %d: %+v; want 503 CIRCUIT_OPEN", i, c)
		}
		if c := callVia(g.URL, keyB, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
			t.Errorf("B's call via process %d: %+v; want it through", i, c)
		}
	}
	// On another server, B's calls and C's fail: once both tenants'
	// own breakers are open, it opens for everyone, A included.
	r.PutServer(map[string]any{"server_id": "other", "url": r.Demo.URL, "max_concurrent_requests": 8, "timeout": 1,
		"breaker": map[string]any{"failure_threshold": 2, "recovery_timeout": 60}})
	for i, key := range []string{keyB, keyC, keyB, keyC} {
		if c := callVia(gws[i%3].URL, key, "other", "slow_tool", map[string]any{"ms": 5000}); c.Fault.Code != fault.UpstreamTimeout {
			t.Fatalf("slow call %d on the other server: %+v", i, c)
		}
	}
	if err := r.Demo.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	for testkit.LeaseCount(t, r.Env, "other", "leases") != 0 {
		time.Sleep(20 * time.Millisecond)
	}
	for i, g := range gws {
		if c := callVia(g.URL, keyA, "other", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusServiceUnavailable || c.Fault.Code != fault.CircuitOpen {
			t.Errorf("A's call on the other server via process %d: %+v; want 503 CIRCUIT_OPEN", i, c)
		}
	}
}
