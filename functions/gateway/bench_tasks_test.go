package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// tasks: n agents each make a task of one server's tool at once (cap 2,
// calls of 500 ms, timeout 10 s) through a front that admits 12 requests
// at once and answers 429 beyond, as Lambda does at a reserved
// concurrency of 12, before 3 gateway processes started with
// FUNCTION_CONCURRENCY=12 (TestQueuedTasksHoldNoFunctionConcurrency's
// fleet), and poll it at the pollIntervalMs they are told until it ends;
// then n agents make the same call synchronously on a server alike
// (on_limit queue, queue_timeout 600 s), each trying again after a 429:
// the front's shortly, the gateway's (its bulkhead full) after its
// Retry-After. For each:
//
//   - invocation-seconds per upstream call-second: what Lambda would bill
//     — every request the front admitted, from its admission to its
//     answer passed on (a synchronous caller's wait inside the gateway
//     counts whole, a poll its own short time, a refusal its own), and
//     for tasks each worker's run, which under Lambda is an invocation of
//     its own and in a process a goroutine: the duration_ms of its log
//     record ("task"), which times the worker from its start to its end
//     — over the upstream's own call-seconds (the sum of the calls'
//     lengths, from its entry and exit times);
//   - where the agents' share goes: a create's and a poll's own time in
//     the gateway (the mean duration_ms of their request records);
//   - where the workers' share goes: a worker's run beyond its upstream
//     call (the workers' summed duration_ms less the upstream's
//     call-seconds, per run);
//   - store requests per call, lease and tasks tables, polls included;
//   - the cap's utilisation: upstream busy time / (cap × makespan), the
//     makespan from the first request sent to the last call's exit;
//   - a place freed → the next call at the upstream, from its own entry
//     and exit times.
//
// The workers do not go through the front: under Lambda each is an
// asynchronous invocation, at most the cap of them at once per server.
// BENCH_TASKS_POLL (a duration, e.g. 3s) has the agents poll that often
// instead of at the pollIntervalMs they are told: what another interval
// would cost, on the same run.
func (b *bench) tasks() {
	t := b.t
	n, callLen := 100, 500*time.Millisecond
	if !b.cfg.full {
		n, callLen = 10, 100*time.Millisecond
	}
	const capacity, frontN, procs = 2, 12, 3
	gws := b.rig.Launch(t, procs, append(b.gatewayEnv(), "FUNCTION_CONCURRENCY="+strconv.Itoa(frontN))...)
	defer stopAll(gws)
	for _, id := range []string{"tasks_t", "tasks_s"} {
		b.rig.PutServer(map[string]any{"server_id": id, "url": b.rig.Demo.URL, "max_concurrent_requests": capacity,
			"on_limit": "queue", "queue_timeout": 600, "max_queued": 2 * n, "task_ttl": 600, "timeout": 10,
			"tools": map[string]any{"slow_tool": map[string]any{"task_support": "optional"}}})
		// One call of the run's length from each process: the server's
		// call length (call_ms) is known, as on a server in use, and the
		// tasks are told to poll by it.
		for _, g := range gws {
			if r := b.call(g.URL, id, "slow_tool", map[string]any{"ms": callLen.Milliseconds()}); r.status != http.StatusOK {
				t.Fatalf("warm-up: %d %s", r.status, r.body)
			}
		}
	}
	tk := b.tasksRun(gws, "tasks_t", n, capacity, callLen, true)
	sy := b.tasksRun(gws, "tasks_s", n, capacity, callLen, false)

	sc := fmt.Sprintf("tasks: %d agents on one server (cap %d, %v calls), tasks vs synchronous, front of %d, %d procs",
		n, capacity, callLen, frontN, procs)
	for _, r := range []tasksResult{tk, sy} {
		if r.peak > capacity {
			t.Errorf("%s, %s: the upstream saw %d calls at once; cap %d", sc, r.label, r.peak, capacity)
		}
		for _, f := range r.failed {
			t.Errorf("%s, %s: %s", sc, r.label, f)
		}
		if r.callSeconds == 0 {
			t.Errorf("%s, %s: no call reached the upstream", sc, r.label)
			return
		}
	}
	b.add(sc, "calls completed, tasks", float64(tk.completed), "calls", float64(n), "made", "all")
	b.add(sc, "calls completed, synchronous", float64(sy.completed), "calls", float64(n), "made", "all")
	b.add(sc, "upstream peak in flight, tasks", float64(tk.peak), "calls", capacity, "cap", "= cap")
	b.add(sc, "upstream peak in flight, synchronous", float64(sy.peak), "calls", capacity, "cap", "= cap")
	b.add(sc, "pollIntervalMs told", float64(tk.pollMS), "ms", 0, "", "")
	if every, err := time.ParseDuration(os.Getenv("BENCH_TASKS_POLL")); err == nil && every > 0 {
		b.add(sc, "the agents polled instead every (BENCH_TASKS_POLL)", ms(every), "ms", 0, "", "")
	}
	b.add(sc, "invocation-seconds per call-second, synchronous", sy.invocationRatio(), "", 0, "", "")
	b.add(sc, "invocation-seconds per call-second, tasks", tk.invocationRatio(), "", sy.invocationRatio(), "synchronous", "≤ 1.1")
	b.add(sc, "of which the agents' requests (creates, polls), tasks", tk.held.Seconds()/tk.callSeconds, "", 0, "", "")
	b.add(sc, "of which the workers' runs, tasks", tk.workerTime.Seconds()/tk.callSeconds, "", 0, "", "")
	b.add(sc, "worker runs logged, tasks", float64(tk.workers), "runs", float64(n), "tasks", "")
	if tk.workers > 0 {
		// What a worker spends around its call: its claim, its record's
		// marks, its outcome, its release and the next task's start.
		beyond := (tk.workerTime.Seconds() - tk.callSeconds) / float64(tk.workers)
		b.add(sc, "a worker's run beyond its upstream call (mean), tasks", beyond*1000, "ms", 0, "", "")
	}
	b.add(sc, "a create's time in the gateway (mean), tasks", ms(tk.createTime), "ms", 0, "", "")
	b.add(sc, "a poll's time in the gateway (mean), tasks", ms(tk.pollTime), "ms", 0, "", "")
	b.add(sc, "requests the front admitted, synchronous", float64(sy.admitted), "", 0, "", "")
	b.add(sc, "requests the front admitted, tasks", float64(tk.admitted), "", float64(sy.admitted), "synchronous", "")
	b.add(sc, "requests the front throttled (429), synchronous", float64(sy.throttled), "", 0, "", "")
	b.add(sc, "requests the front throttled (429), tasks", float64(tk.throttled), "", 0, "", "")
	b.add(sc, "refusals by the gateway (429, bulkhead), synchronous", float64(sy.refused), "", 0, "", "")
	b.add(sc, "polls per task", float64(tk.polls)/float64(n), "", 0, "", "")
	b.add(sc, "store requests per call (leases + tasks), synchronous", sy.storePerCall(n), "ops", 0, "", "")
	b.add(sc, "store requests per call (leases + tasks), tasks", tk.storePerCall(n), "ops", sy.storePerCall(n), "synchronous", "")
	b.add(sc, "of which lease-table requests, tasks", float64(tk.store.leaseOps())/float64(n), "ops", 0, "", "")
	b.add(sc, "of which tasks-table requests, tasks", float64(tk.store.taskOps())/float64(n), "ops", 0, "", "")
	rt := func(m meterCounts) float64 { return ms(m.leaseTime / time.Duration(max(1, m.leaseOps()))) }
	b.add(sc, "lease store round trip (mean), synchronous", rt(sy.store), "ms", 0, "", "")
	b.add(sc, "lease store round trip (mean), tasks", rt(tk.store), "ms", rt(sy.store), "synchronous", "")
	b.add(sc, "lease item peak size, synchronous", float64(sy.store.peakItem), "B", 0, "", "")
	b.add(sc, "lease item peak size, tasks", float64(tk.store.peakItem), "B", float64(sy.store.peakItem), "synchronous", "")
	b.add(sc, "failed conditional writes per call, synchronous", float64(sy.store.failedWrites)/float64(n), "", 0, "", "")
	b.add(sc, "failed conditional writes per call, tasks", float64(tk.store.failedWrites)/float64(n), "", 0, "", "")
	b.add(sc, "cap utilisation (busy / (cap × makespan)), synchronous", sy.utilisation, "", 0, "", "")
	b.add(sc, "cap utilisation (busy / (cap × makespan)), tasks", tk.utilisation, "", sy.utilisation, "synchronous", "")
	b.add(sc, "makespan, synchronous", ms(sy.makespan), "ms", float64(n)*ms(callLen)/capacity, "ideal", "")
	b.add(sc, "makespan, tasks", ms(tk.makespan), "ms", float64(n)*ms(callLen)/capacity, "ideal", "")
	b.add(sc, "place freed → next call at the upstream p50, synchronous", ms(quantile(sy.handoffs, 0.5)), "ms", 0, "", "")
	b.add(sc, "place freed → next call at the upstream p99, synchronous", ms(quantile(sy.handoffs, 0.99)), "ms", 0, "", "")
	b.add(sc, "place freed → next call at the upstream p50, tasks", ms(quantile(tk.handoffs, 0.5)), "ms",
		ms(quantile(sy.handoffs, 0.5)), "synchronous", "")
	b.add(sc, "place freed → next call at the upstream p99, tasks", ms(quantile(tk.handoffs, 0.99)), "ms",
		ms(quantile(sy.handoffs, 0.99)), "synchronous", "")
}

// tasksResult is one run of the tasks scenario.
type tasksResult struct {
	label               string
	completed           int
	failed              []string
	pollMS              int64
	polls               int64
	admitted, throttled int64         // by the front
	refused             int64         // by the gateway (429)
	held                time.Duration // the admitted requests' time, from admission to answer
	workers             int           // worker runs logged
	workerTime          time.Duration // their summed duration_ms
	createTime          time.Duration // the creates' mean duration_ms in the gateway's request records
	pollTime            time.Duration // the polls' mean, likewise
	callSeconds         float64       // the upstream's calls' summed lengths
	makespan            time.Duration
	utilisation         float64
	handoffs            []time.Duration
	peak                int
	store               meterCounts
}

func (r tasksResult) invocationRatio() float64 {
	return (r.held + r.workerTime).Seconds() / r.callSeconds
}

func (r tasksResult) storePerCall(n int) float64 {
	return float64(r.store.leaseOps()+r.store.taskOps()) / float64(n)
}

// tasksRun runs n agents at once on server id (cap capacity) through a
// new front before gws: each makes a task and polls it (asTasks), or makes the call
// synchronously.
func (b *bench) tasksRun(gws []*testkit.Gateway, id string, n, capacity int, callLen time.Duration, asTasks bool) tasksResult {
	t := b.t
	r := tasksResult{label: "synchronous"}
	if asTasks {
		r.label = "tasks"
	}
	front := testkit.StartFront(t, 12, gws)
	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		r.failed = append(r.failed, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var completed, polls, refused, pollMS atomic.Int64
	b.rig.Demo.Reset()
	b.rig.Demo.RecordEvents(true)
	b.meter.reset()
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if !asTasks {
				if b.syncAgent(front, id, callLen, &refused, fail) {
					completed.Add(1)
				}
				return
			}
			if b.taskAgent(front, id, callLen, &polls, &pollMS, fail) {
				completed.Add(1)
			}
		})
	}
	wg.Wait()
	r.store = b.meter.reset()
	events := b.rig.Demo.Events()
	b.rig.Demo.RecordEvents(false)
	r.peak = b.rig.Demo.Stats().Peak
	r.completed, r.polls, r.refused, r.pollMS = int(completed.Load()), polls.Load(), refused.Load(), pollMS.Load()
	r.admitted, r.throttled, r.held = front.Admitted.Load(), front.Throttled.Load(), time.Duration(front.Held.Load())
	if asTasks {
		// A worker logs its run after writing the outcome its agent read:
		// wait for the last records.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			r.workers, r.workerTime = 0, 0
			for _, g := range gws {
				for _, rec := range g.Records(testkit.Match{"msg": "task", "server_id": id}) {
					d, _ := rec["duration_ms"].(float64)
					r.workers++
					r.workerTime += time.Duration(d * float64(time.Millisecond))
				}
			}
			if r.workers >= n || time.Now().After(deadline) {
				break
			}
		}
		// Where the agents' share goes: each create's and each poll's own
		// time in the gateway, from its request record.
		sum, count := map[string]float64{}, map[string]int{}
		for _, g := range gws {
			for _, rec := range g.Records(testkit.Match{"msg": "request", "path": "/mcp/" + id}) {
				m, _ := rec["mcp_method"].(string)
				d, _ := rec["duration_ms"].(float64)
				sum[m] += d
				count[m]++
			}
		}
		mean := func(m string) time.Duration {
			return time.Duration(sum[m] / float64(max(count[m], 1)) * float64(time.Millisecond))
		}
		r.createTime, r.pollTime = mean("tools/call"), mean("tasks/get")
	}
	r.callSeconds, r.handoffs = upstreamCalls(events)
	if len(events) > 0 {
		r.makespan = events[len(events)-1].At.Sub(start)
		r.utilisation = r.callSeconds / (float64(capacity) * r.makespan.Seconds())
	}
	b.t.Logf("tasks scenario, %s: %d of %d completed in %v; front admitted %d, throttled %d; gateway refused %d; polls %d",
		r.label, r.completed, n, r.makespan.Round(time.Millisecond), r.admitted, r.throttled, r.refused, r.polls)
	return r
}

// upstreamCalls reads the upstream's entries and exits: the calls' summed
// lengths in seconds (the integral of the calls in flight), and for each
// entry that found a place freed before it, the time since that place
// freed (the earliest one not taken yet).
func upstreamCalls(events []demoupstream.Event) (float64, []time.Duration) {
	var busy float64
	var handoffs []time.Duration
	var free []time.Time
	inFlight := 0
	for i, e := range events {
		if i > 0 {
			busy += float64(inFlight) * e.At.Sub(events[i-1].At).Seconds()
		}
		if e.Enter {
			inFlight++
			if len(free) > 0 {
				handoffs = append(handoffs, e.At.Sub(free[0]))
				free = free[1:]
			}
		} else {
			inFlight--
			free = append(free, e.At)
		}
	}
	return busy, handoffs
}

// throttledByFront reports whether an answer is the front's own 429.
func throttledByFront(code int, body string) bool {
	return code == http.StatusTooManyRequests && strings.Contains(body, "Rate Exceeded.")
}

// shortly is how long an agent waits before trying again after the
// front's 429, as a client of a throttled function does.
func shortly() time.Duration { return time.Duration(50+rand.IntN(100)) * time.Millisecond }

// taskAgent makes a task of slow_tool on id through front and polls it
// until it ends (at the pollIntervalMs it is told, or BENCH_TASKS_POLL):
// true when it completed.
func (b *bench) taskAgent(front *testkit.Front, id string, callLen time.Duration, polls, pollMS *atomic.Int64, fail func(string, ...any)) bool {
	rpc := func(method, name string, params map[string]any) (int, map[string]json.RawMessage, string) {
		for {
			code, res, raw := taskRPC(front.URL, "/mcp/"+id, b.rig.Key, method, name, params)
			if !throttledByFront(code, raw) {
				return code, res, raw
			}
			time.Sleep(shortly())
		}
	}
	code, res, raw := rpc("tools/call", "slow_tool", map[string]any{"name": "slow_tool", "arguments": map[string]any{"ms": callLen.Milliseconds()}})
	var id2 string
	var poll int64
	_ = json.Unmarshal(res["taskId"], &id2)
	_ = json.Unmarshal(res["pollIntervalMs"], &poll)
	if code != http.StatusOK || id2 == "" || poll <= 0 {
		fail("making the task: HTTP %d %s", code, raw)
		return false
	}
	pollMS.Store(poll)
	every, _ := time.ParseDuration(os.Getenv("BENCH_TASKS_POLL"))
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
		wait := time.Duration(poll) * time.Millisecond
		if every > 0 {
			wait = every
		}
		time.Sleep(wait)
		code, res, raw = rpc("tasks/get", id2, map[string]any{"taskId": id2})
		polls.Add(1)
		var status string
		_ = json.Unmarshal(res["status"], &status)
		_ = json.Unmarshal(res["pollIntervalMs"], &poll)
		switch {
		case code != http.StatusOK || res == nil:
			fail("tasks/get: HTTP %d %s", code, raw)
			return false
		case status == "completed":
			return true
		case status != "working":
			fail("task %s: %s", status, raw)
			return false
		}
	}
	fail("a task still working after 5 minutes")
	return false
}

// syncAgent calls slow_tool on id synchronously through front until it
// is answered other than 429: true when it succeeded. It tries again after
// the front's 429 shortly, after the gateway's (counted in refused) when
// its Retry-After says.
func (b *bench) syncAgent(front *testkit.Front, id string, callLen time.Duration, refused *atomic.Int64, fail func(string, ...any)) bool {
	body, _ := json.Marshal(map[string]any{"server_id": id, "name": "slow_tool", "arguments": map[string]any{"ms": callLen.Milliseconds()}})
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/mcp-rest/tools/call", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+b.rig.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := b.http.Do(req)
		if err != nil {
			fail("call: %v", err)
			return false
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return true
		case throttledByFront(resp.StatusCode, string(raw)):
			time.Sleep(shortly())
		case resp.StatusCode == http.StatusTooManyRequests:
			refused.Add(1)
			wait := shortly()
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
				wait = time.Duration(s)*time.Second + wait
			}
			time.Sleep(wait)
		default:
			fail("call: HTTP %d %s", resp.StatusCode, raw)
			return false
		}
	}
	fail("a call not answered after 5 minutes")
	return false
}
