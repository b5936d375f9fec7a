package main

// The soak: thousands of calls over six gateway processes while processes
// are killed (-9) and restarted, the store goes away and comes back, and
// the upstream stalls. It runs with `make soak` (MCPGATE_SOAK=1), which
// .ci/run also runs; SOAK_CALLS and SOAK_PROCS change its size.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// allowed are the codes a call may end with under faults: each says what
// happened and whether to retry.
var allowed = map[fault.Code]bool{
	fault.AtCapacity: true, fault.QueueTimeout: true, fault.CircuitOpen: true,
	fault.UpstreamTimeout: true, fault.UpstreamError: true, fault.StoreUnavailable: true,
}

// TestSoak runs the soak against a stateful upstream, which stops a call
// when told, and against a stateless one, which runs every call to its end
// whatever the gateway says: its cut-off calls keep their slots until their
// late answers.
func TestSoak(t *testing.T) {
	if os.Getenv("MCPGATE_SOAK") == "" {
		t.Skip("the soak runs with `make soak` (MCPGATE_SOAK=1)")
	}
	t.Run("stateful", func(t *testing.T) { soak(t, demoupstream.HandlerOptions{}) })
	t.Run("stateless", func(t *testing.T) { soak(t, demoupstream.HandlerOptions{Stateless: true, JSONResponse: true}) })
}

// soakHold is the LEASE_HOLD of the soak's gateways: a lease renewed while
// a cut-off call waits for its upstream is renewed for this long at most,
// so a killed process's lease lapses within it (and the margin).
const soakHold = 3 * time.Second

func soak(t *testing.T, upstream demoupstream.HandlerOptions) {
	const cap = 3
	total, procs, workers := envInt("SOAK_CALLS", 2000), envInt("SOAK_PROCS", 6), 24
	r := testkit.NewRig(t, testkit.RigOptions{Demo: true, DemoWith: upstream, Key: true})
	proxy := testkit.NewProxy(t, strings.TrimPrefix(r.Env.Endpoint, "http://"))
	r.PutServer(map[string]any{
		"server_id": "demo", "url": r.Demo.URL, "max_concurrent_requests": cap, "timeout": 2, "queue_timeout": 3, "cancel_grace": 10,
		"breaker": map[string]any{"failure_threshold": 4, "recovery_timeout": 1, "excluded_tools": []any{"echo"}},
	})
	r.Start(procs, "LEASE_MARGIN=1s", "LEASE_HOLD="+soakHold.String(), "REGISTRY_CACHE_TTL=500ms", "AWS_ENDPOINT_URL_DYNAMODB=http://"+proxy.Addr)

	var (
		done, died, next atomic.Int64
		mu               sync.Mutex
		counts           = map[string]int{}
		failures         []string
	)
	note := func(outcome string) {
		mu.Lock()
		counts[outcome]++
		mu.Unlock()
	}
	fail := func(msg string) {
		mu.Lock()
		failures = append(failures, msg)
		mu.Unlock()
	}

	// Faults, triggered by progress: a kill -9 and restart every eighth of
	// the run, the store away for 1.5 s at a third, the upstream stalled
	// for 3 s at two thirds.
	progress := make(chan int64, 1024)
	chaos := make(chan struct{})
	go func() {
		defer close(chaos)
		killEvery := int64(total / 8)
		nextKill, storeDone, hangDone := killEvery, false, false
		for n := range progress {
			switch {
			case n >= nextKill && n < int64(total)-killEvery/2:
				nextKill += killEvery
				slot := rand.IntN(procs)
				r.Replace(slot)
				note("(fault) process killed and restarted")
			case !storeDone && n >= int64(total/3):
				storeDone = true
				proxy.Stop()
				time.Sleep(1500 * time.Millisecond) // the outage itself
				proxy.Start(t)
				note("(fault) store stopped and restarted")
			case !hangDone && n >= int64(2*total/3):
				hangDone = true
				r.Demo.SetHang(true)
				time.Sleep(3 * time.Second) // the stall itself
				r.Demo.SetHang(false)
				note("(fault) upstream hung for 3s")
			}
		}
	}()

	client := &http.Client{Timeout: 30 * time.Second}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				i := next.Add(1)
				if i > int64(total) {
					return
				}
				tool, args := "slow_tool", map[string]any{"ms": rng.IntN(40)}
				if rng.IntN(5) == 0 {
					tool, args = "echo", map[string]any{"text": "soak"}
				}
				gw := r.Gateway(rng.IntN(procs))
				callStart := time.Now()
				ctx, cancel := context.WithCancel(context.Background())
				resp, err := testkit.Post(ctx, gw.URL+"/mcp-rest/tools/call", r.Key, map[string]any{"server_id": "demo", "name": tool, "arguments": args})
				cancel()
				switch {
				case err != nil && errors.Is(err, context.DeadlineExceeded) || err != nil && strings.Contains(err.Error(), "Client.Timeout"):
					fail(fmt.Sprintf("call %d hung past %v", i, client.Timeout))
				case err != nil:
					// The process serving it was killed.
					died.Add(1)
					note("(transport) gateway process died mid-call")
				case resp.Status == http.StatusOK:
					note("ok")
				default:
					o := parseOutcome(t, resp)
					if !allowed[o.Fault.Code] || o.Fault.Code.Status() != resp.Status || !o.Fault.Retryable {
						fail(fmt.Sprintf("call %d: %d %s", i, resp.Status, resp.Body))
					} else {
						note(string(o.Fault.Code))
					}
					// A well-behaved client waits as told (here at most
					// 300 ms) before its next call.
					if ms := o.Fault.RetryAfterMS; ms > 0 {
						time.Sleep(min(time.Duration(ms)*time.Millisecond, 300*time.Millisecond))
					}
				}
				if took := time.Since(callStart); took > 20*time.Second {
					fail(fmt.Sprintf("call %d took %v", i, took))
				}
				select {
				case progress <- done.Add(1):
				default:
				}
			}
		})
	}
	wg.Wait()
	close(progress)
	<-chaos
	elapsed := time.Since(start)

	// Let every lease of a killed process expire, then one call per
	// process: its release removes leases whose holders died.
	time.Sleep(soakHold + time.Second + 500*time.Millisecond) // hold + margin, and slack
	for i := range procs {
		resp, err := testkit.Post(context.Background(), r.Gateway(i).URL+"/mcp-rest/tools/call", r.Key,
			map[string]any{"server_id": "demo", "name": "slow_tool", "arguments": map[string]any{"ms": 0}})
		if err != nil || resp.Status != http.StatusOK {
			t.Errorf("call after the soak via process %d: %v %d %s", i, err, resp.Status, resp.Body)
		}
	}
	left := testkit.LeaseCount(t, r.Env, "demo", lease.LeasesAttr)

	var lines []string
	for k, v := range counts {
		lines = append(lines, fmt.Sprintf("  %-40s %d", k, v))
	}
	sort.Strings(lines)
	t.Logf("soak: %d calls over %d processes (%d workers) in %v; upstream peak %d (cap %d); %d leases left\n%s",
		total, procs, workers, elapsed.Round(time.Millisecond), r.Demo.Stats().Peak, cap, left, strings.Join(lines, "\n"))
	for _, f := range failures {
		t.Error(f)
	}
	if p := r.Demo.Stats().Peak; p > cap {
		t.Errorf("the upstream saw %d calls at once, cap %d", p, cap)
	}
	if counts["ok"] == 0 {
		t.Error("no call succeeded")
	}
	if left != 0 {
		t.Errorf("%d leases left in the item after the run", left)
	}
}
