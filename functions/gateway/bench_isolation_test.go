package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// waiters: W callers queued on one server item (cap 2, calls of 500 ms,
// on_limit queue, room for 2W up to the registry's 1,000: all of one key,
// whose principal may not take the last quarter of the queue while it has
// callers in it, so 750 is the most that can wait), spread over the bench's gateway processes, each calling
// again as soon as it is answered, so W - 2 wait at any time. Once they all
// wait, the store's traffic is counted for a few seconds of that steady
// state: what waiting costs the item, in requests and in write units (each
// write charged for the item's size as the store returned it), against
// the number waiting. Waiters renew nothing, so the write units per second
// should grow with the item's size alone, linearly in W.
func (b *bench) waiters() {
	t := b.t
	counts, window := []int{10, 100, 750}, 6*time.Second
	if !b.cfg.full {
		counts, window = []int{10}, 500*time.Millisecond
	}
	const capacity, callMS = 2, 500
	first := 0.0 // write units per second per waiter at the fewest waiters
	for _, w := range counts {
		id := fmt.Sprintf("waiters_%d", w)
		b.rig.PutServer(map[string]any{"server_id": id, "url": b.rig.Demo.URL, "max_concurrent_requests": capacity,
			"on_limit": "queue", "max_queued": min(2*w, registry.MaxQueuedLimit), "queue_timeout": 600, "timeout": 60})
		b.warm(b.rig.Gateways(), id)
		b.rig.Demo.Reset()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range w {
			wg.Go(func() {
				g := b.rig.Gateway(i)
				for ctx.Err() == nil {
					if c := b.callCtx(ctx, g.URL, id, "slow_tool", map[string]any{"ms": callMS}); c.status != http.StatusOK && ctx.Err() == nil {
						t.Errorf("waiters %d: call failed: %d %s", w, c.status, c.body)
						time.Sleep(100 * time.Millisecond)
					}
				}
			})
		}
		// Steady state: every caller holds or waits (but for one between
		// its answer and its next call).
		ready := time.Now().Add(time.Minute + time.Duration(w)*200*time.Millisecond)
		for n := 0; n < w-1; n = b.waiting(id) + testkit.LeaseCount(t, b.rig.Env, id, lease.LeasesAttr) {
			if time.Now().After(ready) {
				// The store cannot take them all in: measured as it
				// stands (the mean waiting is reported).
				t.Logf("waiters %d: only %d callers held or waited at the deadline", w, n)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.meter.reset()
		callsBefore := b.rig.Demo.Stats().Calls
		start := time.Now()
		var queued []int
		for time.Since(start) < window {
			queued = append(queued, b.waiting(id))
			time.Sleep(window / 20)
		}
		m := b.meter.reset()
		secs := time.Since(start).Seconds()
		calls := b.rig.Demo.Stats().Calls - callsBefore
		cancel()
		wg.Wait()
		b.drained(id)
		if p := b.rig.Demo.Stats().Peak; p > capacity {
			t.Errorf("waiters %d: the upstream saw %d calls in flight, cap %d", w, p, capacity)
		}
		sc := fmt.Sprintf("waiters: %d callers queued on one item (cap %d, %d ms calls, %d procs)", w, capacity, callMS, len(b.rig.Gateways()))
		meanQueued := 0.0
		for _, q := range queued {
			meanQueued += float64(q) / float64(len(queued))
		}
		perSec := func(n int) float64 { return float64(n) / secs }
		b.add(sc, "callers waiting (mean of samples)", meanQueued, "", 0, "", "")
		b.add(sc, "upstream calls per second", perSec(calls), "calls/s", capacity*1000/callMS, "cap / call length", "")
		b.add(sc, "lease writes per second", perSec(m.leaseWrites()), "ops/s", 0, "", "")
		if calls > 0 {
			b.add(sc, "lease writes per call", float64(m.leaseWrites())/float64(calls), "ops", 0, "", "")
		}
		b.add(sc, "failed conditional writes per second", perSec(m.failedWrites), "ops/s", 0, "", "")
		b.add(sc, "write units per second", perSec(m.writeUnits), "WCU/s", 1000, "one item's limit", "")
		b.add(sc, "reads per second", perSec(m.leaseReads()), "ops/s", 0, "", "")
		b.add(sc, "read units per second (consistent reads)", perSec(m.readUnits), "RCU/s", 3000, "one partition's limit", "")
		b.add(sc, "lease store round trip (mean)", ms(m.leaseTime/time.Duration(max(1, m.leaseOps()))), "ms", 0, "", "")
		b.add(sc, "item peak size", float64(m.peakItem), "B", 0, "", "≪ 400 KB")
		perWaiter := func(n int) float64 { return perSec(n) / float64(w) }
		b.add(sc, "writes per waiter-second", perWaiter(m.leaseWrites()), "ops", 0, "", "")
		b.add(sc, "reads per waiter-second", perWaiter(m.leaseReads()), "ops", 0, "", "")
		b.add(sc, "read units per waiter-second", perWaiter(m.readUnits), "RCU", 0, "", "")
		per := perWaiter(m.writeUnits)
		if first == 0 {
			first = per
			b.add(sc, "write units per waiter-second", per, "WCU", 0, "", "")
			continue
		}
		b.add(sc, "write units per waiter-second", per, "WCU", first, fmt.Sprintf("at %d", counts[0]), "≤ 1 × (not quadratic)")
	}
}

// waiting is how many callers wait in the queue of the item of key.
func (b *bench) waiting(key string) int {
	return testkit.LeaseCount(b.t, b.rig.Env, key, lease.QueueAttr)
}

// drained waits until the item of key holds no lease and no ticket, after
// its callers left.
func (b *bench) drained(key string) {
	deadline := time.Now().Add(time.Minute)
	for testkit.LeaseCount(b.t, b.rig.Env, key, lease.LeasesAttr)+b.waiting(key) > 0 {
		if time.Now().After(deadline) {
			b.t.Errorf("%s: leases or tickets left a minute after every caller left", key)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bulkhead: the slow-server flood behind a Lambda-like front (see
// floodBehindFront) over 4 fresh gateway processes, first started without
// FUNCTION_CONCURRENCY (no bulkhead: the slow server's waiters may hold
// the front), then with it set to the front's concurrency.
func (b *bench) bulkhead() {
	run, slowCall := 8*time.Second, 2*time.Second
	if !b.cfg.full {
		run, slowCall = 500*time.Millisecond, 100*time.Millisecond
	}
	sc := fmt.Sprintf("bulkhead: 16 agents flood a slow server (cap 2, %v calls), 3 call a fast one, behind a front of %d, 4 procs, %v",
		slowCall, floodFront, run)
	var unset float64
	for _, fc := range []string{"", strconv.Itoa(floodFront)} {
		var env []string
		label := "FUNCTION_CONCURRENCY unset"
		if fc != "" {
			env = []string{"FUNCTION_CONCURRENCY=" + fc}
			label = "FUNCTION_CONCURRENCY=" + fc
		}
		gws := b.rig.Launch(b.t, 4, slices.Concat(isolationEnv, env)...)
		r := floodBehindFront(b.t, b.rig.Env, gws, fmt.Sprintf("bulkhead%s_", fc), run, slowCall)
		stopAll(gws)
		b.t.Logf("%s, %s: fast server %v; slow server %v", sc, label, r.fastCodes, r.slowCodes)
		if r.peak > 2 {
			b.t.Errorf("%s, %s: the slow server saw %d calls at once; cap 2", sc, label, r.peak)
		}
		if r.fastAll == 0 {
			b.t.Errorf("%s, %s: no call of the fast server completed", sc, label)
			continue
		}
		rate := float64(r.fastOK) / float64(r.fastAll)
		if fc == "" {
			unset = rate
			b.add(sc, "fast server's calls succeeded (ok/all), "+label, rate, "", 0, "", "")
		} else {
			b.add(sc, "fast server's calls succeeded (ok/all), "+label, rate, "", unset, "unset", "≥ 0.99")
		}
		b.add(sc, "fast server's calls made, "+label, float64(r.fastAll), "calls", 0, "", "")
		b.add(sc, "requests the front throttled (429), "+label, float64(r.throttled), "", 0, "", "")
		b.add(sc, "slow server's cap busy (share of the run), "+label, r.util, "", 0, "", "")
	}
}

// stopAll stops gateway processes, all at once.
func stopAll(gws []*testkit.Gateway) {
	var wg sync.WaitGroup
	for _, g := range gws {
		wg.Go(g.Stop)
	}
	wg.Wait()
}

// tenants: key A's 8 looping callers and key B's one on one server (cap 2),
// over the bench's gateway processes (see twoTenants). Fair shares give B
// each place that frees while it waits; in arrival order it would wait
// behind A's seven other callers, about 4 calls' length.
func (b *bench) tenants() {
	run, callLen := 10*time.Second, 500*time.Millisecond
	if !b.cfg.full {
		run, callLen = 500*time.Millisecond, 100*time.Millisecond
	}
	r := twoTenants(b.t, b.rig.Env, b.rig.Gateways(), "tenants", run, callLen)
	sc := fmt.Sprintf("two tenants: key A 8 callers, key B one, cap 2, %v calls, %d procs, %v", callLen, len(b.rig.Gateways()), run)
	if r.peak > 2 {
		b.t.Errorf("%s: the upstream saw %d calls at once; cap 2", sc, r.peak)
	}
	if len(r.b) == 0 || len(r.a) == 0 {
		b.t.Errorf("%s: A made %d calls, B %d", sc, len(r.a), len(r.b))
		return
	}
	call := ms(callLen)
	b.add(sc, "B's calls", float64(len(r.b)), "calls", 0, "", "")
	b.add(sc, "B's latency p50", ms(quantile(r.bLat, 0.5)), "ms", call, "call", "")
	b.add(sc, "B's latency p99", ms(quantile(r.bLat, 0.99)), "ms", call, "call", "≤ 2.5 × call")
	b.add(sc, "A's calls", float64(len(r.a)), "calls", 0, "", "")
	b.add(sc, "A's latency p50", ms(quantile(r.aLat, 0.5)), "ms", call, "call", "")
	b.add(sc, "A's latency p99", ms(quantile(r.aLat, 0.99)), "ms", call, "call", "")
	b.add(sc, "upstream busy (cap full, share of the run)", utilisation(r.events, 2, r.start, r.end), "", 0, "", "≥ 0.8")
}

// rateLimits: one caller, calls one at a time through one gateway process,
// counting the lease-table requests each costs with and without request
// rate limits (none of them reached). A server's bucket is charged in the
// write that admits the call; a key's limits live in the key's own item.
func (b *bench) rateLimits() {
	t := b.t
	n := max(b.cfg.soloCalls/4, 5)
	const plenty = registry.MaxRPMLimit // the highest rpm_limit, which no run reaches
	variants := []struct {
		label    string
		server   map[string]any
		key      map[string]int // the key item's limits
		baseline string         // the label of the variant to set it against
	}{
		{label: "capped server (cap 8), no rate limit", server: map[string]any{"max_concurrent_requests": 8}},
		{label: "capped server with rpm_limit", server: map[string]any{"max_concurrent_requests": 8, "rpm_limit": plenty},
			baseline: "capped server (cap 8), no rate limit"},
		{label: "uncapped server with rpm_limit", server: map[string]any{"rpm_limit": plenty}},
		{label: "capped server, key with rpm_limit", server: map[string]any{"max_concurrent_requests": 8},
			key: map[string]int{"rpm_limit": plenty}, baseline: "capped server (cap 8), no rate limit"},
		{label: "capped server, key with max_parallel_requests and rpm_limit", server: map[string]any{"max_concurrent_requests": 8},
			key: map[string]int{"max_parallel_requests": 64, "rpm_limit": plenty}, baseline: "capped server (cap 8), no rate limit"},
	}
	sc := fmt.Sprintf("rate limits: one caller, %d calls each, uncontended", n)
	perCall := map[string]float64{}
	g := b.rig.Gateway(0).URL
	for i, v := range variants {
		id := fmt.Sprintf("rl_%d", i)
		doc := map[string]any{"server_id": id, "url": b.rig.Demo.URL}
		maps.Copy(doc, v.server)
		b.rig.PutServer(doc)
		key := b.rig.PutKey("*")
		for attr, limit := range v.key {
			testkit.UpdateKey(t, b.rig.Env, key, attr, limit)
		}
		for range 3 { // the process's registry and key caches, the upstream session
			if c := callVia(g, key, id, "echo", map[string]any{"text": "x"}); c.Status != http.StatusOK {
				t.Fatalf("%s: warm-up: %+v", v.label, c)
			}
		}
		b.meter.reset()
		for range n {
			if c := callVia(g, key, id, "echo", map[string]any{"text": "x"}); c.Status != http.StatusOK {
				t.Fatalf("%s: call: %+v", v.label, c)
			}
		}
		m := b.meter.reset()
		perCall[v.label] = float64(m.leaseOps()) / float64(n)
		against, goal := 0.0, ""
		if v.baseline != "" {
			against = perCall[v.baseline]
			if v.key == nil {
				goal = "= no rate limit"
			}
		}
		b.add(sc, "lease requests per call, "+v.label, perCall[v.label], "ops", against, "without", goal)
		if r := m.leaseReads(); r > 0 {
			b.add(sc, "of which reads, "+v.label, float64(r)/float64(n), "ops", 0, "", "0")
		}
	}
	b.rateBurst()
}

// rateBurst: calls sent at once, spread over the bench's gateway
// processes, none of which has seen the server's item yet, counting the
// lease-table requests they cost with and without a server rpm_limit, on a
// capped server (cap 40: no call waits, the bucket rides the acquire) and
// an uncapped one (the bucket alone). 20 calls against rpm_limit 20 are
// all admitted; 40 are admitted 20 (21 if a token comes back meanwhile),
// the rest refused RATE_LIMITED. A refused call's cost is the 40 calls'
// requests less the admitted calls' at the 20-call burst's cost per call.
func (b *bench) rateBurst() {
	t := b.t
	const capacity, limit = 40, 20
	sc := fmt.Sprintf("rate limits: a burst, calls at once over %d procs", len(b.rig.Gateways()))
	capped := map[string]any{"max_concurrent_requests": capacity}
	limited := map[string]any{"max_concurrent_requests": capacity, "rpm_limit": limit}
	uncapped := map[string]any{"rpm_limit": limit}
	runs := []struct {
		label  string
		calls  int
		server map[string]any
		// all is the label of the run of calls all admitted under the same
		// server, by which this one's refused calls are costed.
		all string
	}{
		{label: "cap 40, no rate limit, 20 calls", calls: 20, server: capped},
		{label: "cap 40, rpm_limit 20, 20 calls", calls: 20, server: limited},
		{label: "cap 40, rpm_limit 20, 40 calls", calls: 40, server: limited, all: "cap 40, rpm_limit 20, 20 calls"},
		{label: "uncapped, rpm_limit 20, 20 calls", calls: 20, server: uncapped},
		{label: "uncapped, rpm_limit 20, 40 calls", calls: 40, server: uncapped, all: "uncapped, rpm_limit 20, 20 calls"},
	}
	perAdmitted := map[string]float64{}
	for i, r := range runs {
		id := fmt.Sprintf("rl_burst_%d", i)
		doc := map[string]any{"server_id": id, "url": b.rig.Demo.URL}
		maps.Copy(doc, r.server)
		b.rig.PutServer(doc)
		for _, g := range b.rig.Gateways() { // each process's registry and tool list, taking no token
			resp, err := testkit.Do(context.Background(), http.MethodGet, g.URL+"/mcp-rest/tools/list?server_id="+id,
				http.Header{"Authorization": {"Bearer " + b.rig.Key}}, nil)
			if err != nil || resp.Status != http.StatusOK {
				t.Fatalf("%s: warm-up: %v %+v", r.label, err, resp)
			}
		}
		b.rig.Demo.Reset()
		b.meter.reset()
		calls := testkit.Burst(r.calls, func(i int) agentCall {
			return callVia(b.rig.Gateway(i).URL, b.rig.Key, id, "slow_tool", map[string]any{"ms": 0})
		})
		m := b.meter.reset()
		admitted, refused := 0, 0
		for _, c := range calls {
			switch {
			case c.Status == http.StatusOK:
				admitted++
			case c.Status == http.StatusTooManyRequests && c.Fault.Code == fault.RateLimited:
				refused++
			default:
				t.Errorf("%s: unexpected answer: %d %+v", r.label, c.Status, c.Fault)
			}
		}
		if got := b.rig.Demo.Stats().Calls; got != admitted {
			t.Errorf("%s: the upstream received %d calls; %d were admitted", r.label, got, admitted)
		}
		if admitted == 0 || r.all != "" && refused == 0 || r.all == "" && refused > 0 {
			t.Errorf("%s: %d admitted, %d refused", r.label, admitted, refused)
			continue
		}
		ops := float64(m.leaseOps())
		perAdmitted[r.label] = ops / float64(admitted)
		if r.all == "" {
			against := 0.0
			if i == 1 {
				against = perAdmitted[runs[0].label]
			}
			b.add(sc, "lease requests per call, "+r.label, perAdmitted[r.label], "ops", against, "without", "")
		} else {
			b.add(sc, "calls admitted, "+r.label, float64(admitted), "calls", limit, "rpm_limit", "20 (21 at most)")
			b.add(sc, "lease requests per admitted call (all requests / admitted), "+r.label, perAdmitted[r.label], "ops", perAdmitted[r.all], "every call admitted", "")
			b.add(sc, "lease requests per refused call (beyond the admitted calls' cost), "+r.label,
				(ops-float64(admitted)*perAdmitted[r.all])/float64(refused), "ops", 0, "", "")
		}
		b.add(sc, "of which failed conditional writes, per call sent, "+r.label, float64(m.failedWrites)/float64(r.calls), "ops", 0, "", "")
		b.add(sc, "of which reads, per call sent, "+r.label, float64(m.leaseReads())/float64(r.calls), "ops", 0, "", "")
	}
}
