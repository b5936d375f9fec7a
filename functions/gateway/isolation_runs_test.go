package main

// The isolation runs that TestBulkheadKeepsTheFunctionForOthers and
// TestFairSharesBetweenTenants check and make bench measures.

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// floodFront is how many requests the flood's front admits at once, as
// Lambda admits a function's reserved concurrency.
const floodFront = 12

// floodResult is what the slow-server flood did.
type floodResult struct {
	fastOK, fastAll      int
	fast                 []agentCall    // the fast server's calls
	fastCodes, slowCodes map[string]int // "<status> <code>[ <reason>]" → count
	throttled            int64          // requests the front answered 429 itself
	util                 float64        // share of the run the slow server's cap was full
	peak                 int            // the slow server's most calls at once
}

// floodBehindFront runs gws behind a front admitting floodFront requests at
// once: a slow server (cap 2, calls of slow), named prefix+"slow", is
// flooded by 16 agents that retry when refused, after the delay the
// refusal advises, while 3 agents call a fast, uncapped server,
// prefix+"fast", through the same front, for run.
func floodBehindFront(t testing.TB, env *storetest.Env, gws []*testkit.Gateway, prefix string, run, slowCall time.Duration) floodResult {
	t.Helper()
	slow, fast := testkit.StartDemo(t), testkit.StartDemo(t)
	slowID, fastID := prefix+"slow", prefix+"fast"
	key := testkit.PutKey(t, env, "*")
	front := testkit.StartFront(t, floodFront, gws)
	testkit.PutServer(t, env, map[string]any{"server_id": slowID, "url": slow.URL, "max_concurrent_requests": 2, "timeout": 10})
	testkit.PutServer(t, env, map[string]any{"server_id": fastID, "url": fast.URL})
	for range len(gws) { // warm each process's sessions and tool lists
		if c := callVia(front.URL, key, fastID, "echo", map[string]any{"text": "x"}); c.Status != http.StatusOK {
			t.Fatalf("warm-up: %+v", c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r, err := testkit.Do(ctx, http.MethodGet, front.URL+"/mcp-rest/tools/list?server_id="+slowID, http.Header{"Authorization": {"Bearer " + key}}, nil)
		cancel()
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("warm-up list: %v %d", err, r.Status)
		}
	}
	slow.Reset()
	slow.RecordEvents(true)
	defer slow.RecordEvents(false)
	start := time.Now()
	end := start.Add(run)
	var mu sync.Mutex
	res := floodResult{fastCodes: map[string]int{}, slowCodes: map[string]int{}}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 60 * time.Millisecond) // the flood arrives over a second
			for time.Now().Before(end) {
				c := callVia(front.URL, key, slowID, "slow_tool", map[string]any{"ms": slowCall.Milliseconds()})
				mu.Lock()
				res.slowCodes[strconv.Itoa(c.Status)+" "+string(c.Fault.Code)+" "+c.Fault.Reason]++
				mu.Unlock()
				if c.Status != http.StatusOK {
					time.Sleep(min(max(c.RetryAfter(), 100*time.Millisecond), time.Until(end)))
				}
			}
		})
	}
	for range 3 {
		wg.Go(func() {
			for time.Now().Before(end) {
				c := callVia(front.URL, key, fastID, "echo", map[string]any{"text": "x"})
				mu.Lock()
				res.fast = append(res.fast, c)
				res.fastAll++
				if c.Status == http.StatusOK {
					res.fastOK++
				}
				res.fastCodes[strconv.Itoa(c.Status)+" "+string(c.Fault.Code)]++
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	res.util = utilisation(slow.Events(), 2, start, end)
	res.throttled = front.Throttled.Load()
	res.peak = slow.Stats().Peak
	return res
}

// tenantsResult is what the two tenants' run did.
type tenantsResult struct {
	keyA, keyB string
	a, b       []agentCall          // key A's and key B's calls
	aLat, bLat []time.Duration      // their latencies, sent to answered, sorted
	events     []demoupstream.Event // the upstream's entries and exits
	start, end time.Time
	peak       int // the upstream's most calls at once
}

// twoTenants runs key A's 8 looping callers and key B's one against a
// server named id (cap 2, calls of call), spread over gws, for run.
func twoTenants(t testing.TB, env *storetest.Env, gws []*testkit.Gateway, id string, run, call time.Duration) tenantsResult {
	t.Helper()
	demo := testkit.StartDemo(t)
	keyA, keyB := testkit.PutKey(t, env, "*"), testkit.PutKey(t, env, "*")
	testkit.PutServer(t, env, map[string]any{"server_id": id, "url": demo.URL, "max_concurrent_requests": 2, "timeout": 10, "queue_timeout": 30})
	for _, g := range gws {
		if c := callVia(g.URL, keyA, id, "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
			t.Fatalf("warm-up: %+v", c)
		}
	}
	demo.Reset()
	demo.RecordEvents(true)
	defer demo.RecordEvents(false)
	r := tenantsResult{keyA: keyA, keyB: keyB, start: time.Now()}
	r.end = r.start.Add(run)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 9 {
		key := keyA
		if i == 8 {
			key = keyB
		}
		wg.Go(func() {
			for time.Now().Before(r.end) {
				c := callVia(gws[i%len(gws)].URL, key, id, "slow_tool", map[string]any{"ms": call.Milliseconds()})
				mu.Lock()
				if key == keyB {
					r.b = append(r.b, c)
				} else {
					r.a = append(r.a, c)
				}
				mu.Unlock()
				if c.Status != http.StatusOK {
					t.Errorf("a call failed: %+v", c)
					return
				}
			}
		})
	}
	wg.Wait()
	r.events = demo.Events()
	r.peak = demo.Stats().Peak
	r.aLat, r.bLat = latencies(r.a), latencies(r.b)
	return r
}

// latencies are calls' times from sent to answered, sorted.
func latencies(calls []agentCall) []time.Duration {
	out := make([]time.Duration, len(calls))
	for i, c := range calls {
		out[i] = c.done.Sub(c.sent)
	}
	slices.Sort(out)
	return out
}
