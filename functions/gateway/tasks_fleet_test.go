package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/testkit"
)

// taskRPC sends one JSON-RPC request of protocol 2026-07-28 to base+path
// with key, declaring the tasks extension, and returns its HTTP status and
// result (nil for an error, whose raw answer is returned).
func taskRPC(base, path, key, method, name string, params map[string]any) (int, map[string]json.RawMessage, string) {
	p := map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
	}}
	for k, v := range params {
		p[k] = v
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": p})
	req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", name)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1, nil, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for line := range bytes.Lines(raw) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok && bytes.Contains(d, []byte(`"id"`)) {
			raw = bytes.TrimSpace(d)
		}
	}
	var msg struct {
		Result map[string]json.RawMessage `json:"result"`
	}
	if json.Unmarshal(raw, &msg) != nil || msg.Result == nil {
		return resp.StatusCode, nil, string(raw)
	}
	return resp.StatusCode, msg.Result, string(raw)
}

// TestQueuedTasksHoldNoFunctionConcurrency: 100 agents of two keys (80 of
// A, 20 of B) each make a task of a tool of a server with a cap of 2 (calls
// of 500 ms) at once, through 3 gateway processes behind a front that, as
// Lambda does, admits at most FUNCTION_CONCURRENCY (12) requests at once
// and answers 429 beyond (an agent tries again shortly, as a client of a
// throttled function does), and poll it as pollIntervalMs says. Every one
// gets its handle (no 429 from the gateway, only the front's). Many more
// tasks wait in the server's queue at once than the front could hold
// requests — so a waiting task holds none — and every task completes, B's
// among them, the upstream never seeing more than the cap. (The workers
// run in the gateway processes, not through the front: under Lambda each
// is an invocation, at most the cap of them at once per server.)
func TestQueuedTasksHoldNoFunctionConcurrency(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv})
	up := testkit.StartBatch(t, 4, 500*time.Millisecond)
	keyA, keyB := rig.PutKey("*"), rig.PutKey("*")
	gws := rig.Start(3, "FUNCTION_CONCURRENCY=12")
	rig.PutServer(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 2, "max_queued": 200, "task_ttl": 600, "timeout": 10,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	front := testkit.StartFront(t, 12, gws)
	var gatewayBusy atomic.Int64 // 429s of the gateway's own
	// rpc is taskRPC through the front, tried again after a 429.
	rpc := func(key, method, name string, params map[string]any) (int, map[string]json.RawMessage, string) {
		for {
			code, res, raw := taskRPC(front.URL, "/mcp/batch", key, method, name, params)
			if code != http.StatusTooManyRequests {
				return code, res, raw
			}
			if !strings.Contains(raw, "Rate Exceeded.") {
				gatewayBusy.Add(1)
			}
			time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
		}
	}

	type outcome struct {
		key, status, raw string
		at               time.Time
	}
	var mu sync.Mutex
	var outcomes []outcome
	var wg sync.WaitGroup
	done := make(chan struct{})
	mostWaiting := 0
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			mostWaiting = max(mostWaiting, testkit.LeaseCount(t, rig.Env, "batch", "tasks"))
		}
	})
	for i := range 100 {
		key, who := keyA, "A"
		if i%5 == 4 {
			key, who = keyB, "B"
		}
		wg.Go(func() {
			note := func(status, raw string) {
				mu.Lock()
				outcomes = append(outcomes, outcome{who, status, raw, time.Now()})
				mu.Unlock()
			}
			code, res, raw := rpc(key, "tools/call", "work", map[string]any{"name": "work", "arguments": map[string]any{}})
			if code != http.StatusOK || res == nil {
				note(fmt.Sprintf("create: HTTP %d", code), raw)
				return
			}
			var id string
			var poll int64
			_ = json.Unmarshal(res["taskId"], &id)
			_ = json.Unmarshal(res["pollIntervalMs"], &poll)
			if id == "" {
				note("create: no task", raw)
				return
			}
			for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
				time.Sleep(time.Duration(poll) * time.Millisecond)
				code, res, raw = rpc(key, "tasks/get", id, map[string]any{"taskId": id})
				if code != http.StatusOK || res == nil {
					note(fmt.Sprintf("tasks/get: HTTP %d", code), raw)
					return
				}
				var status string
				_ = json.Unmarshal(res["status"], &status)
				if status != "working" {
					// When it ended, as its record says: the poll that
					// finds it comes up to a poll interval later.
					var updated time.Time
					if err := json.Unmarshal(res["lastUpdatedAt"], &updated); err != nil {
						note("tasks/get: no lastUpdatedAt", raw)
						return
					}
					mu.Lock()
					outcomes = append(outcomes, outcome{who, status, raw, updated})
					mu.Unlock()
					return
				}
			}
			note("still working after 2 minutes", raw)
		})
	}
	wg.Wait()
	close(done)
	sampler.Wait()
	completed := map[string]int{}
	var doneA []time.Time
	var lastB time.Time
	for _, o := range outcomes {
		if o.status == "completed" {
			completed[o.key]++
			if o.key == "A" {
				doneA = append(doneA, o.at)
			} else if o.at.After(lastB) {
				lastB = o.at
			}
		} else {
			t.Errorf("a task of %s: %s: %s", o.key, o.status, o.raw)
		}
	}
	st := up.Stats()
	t.Logf("tasks completed: A %d of 80, B %d of 20; at most %d waiting at once in the server's queue; front throttled %d, the gateway %d; upstream served %d, peak %d",
		completed["A"], completed["B"], mostWaiting, front.Throttled.Load(), gatewayBusy.Load(), st.Served, st.Peak)
	if completed["A"] != 80 || completed["B"] != 20 {
		t.Errorf("completed: A %d of 80, B %d of 20", completed["A"], completed["B"])
	}
	if n := gatewayBusy.Load(); n != 0 {
		t.Errorf("the gateway answered 429 %d times; a task waits in the queue instead", n)
	}
	if mostWaiting <= 12 {
		t.Errorf("at most %d tasks waited at once; with 100 made, more than the front's 12 requests should have", mostWaiting)
	}
	if st.Peak > 2 {
		t.Errorf("the upstream saw %d calls at once; cap 2", st.Peak)
	}
	// Fair shares, as between synchronous callers: B, holding fewer
	// places, gets every other one while its tasks wait, so they are all
	// done before half of A's (in arrival order, B's last would come with
	// A's last).
	slices.SortFunc(doneA, time.Time.Compare)
	if len(doneA) > 0 && !lastB.Before(doneA[len(doneA)/2]) {
		t.Errorf("B's last task was done %v after half of A's; fair shares serve B's first", lastB.Sub(doneA[len(doneA)/2]))
	}
}

// TestKilledWorkersTaskEndsAndItsPlaceComesBack: the gateway process
// running a task's call is killed (SIGKILL) while the upstream works on
// it. The task still ends — read through another process, it is failed
// once its run_until has passed, saying the call may or may not have run —
// and its place under the cap of 1 comes back when its lease lapses: the
// next task runs.
func TestKilledWorkersTaskEndsAndItsPlaceComesBack(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv})
	slow := testkit.StartBatch(t, 1, time.Minute)
	fast := testkit.StartBatch(t, 4, 10*time.Millisecond)
	key := rig.PutKey("*")
	tools := map[string]any{"work": map[string]any{"task_support": "optional"}}
	rig.PutServer(map[string]any{"server_id": "slow", "url": slow.URL, "max_concurrent_requests": 1, "timeout": 5, "cancel_grace": 1, "task_ttl": 600, "tools": tools})
	a := rig.StartGateway()
	code, res, raw := taskRPC(a.URL, "/mcp/slow", key, "tools/call", "work", map[string]any{"name": "work", "arguments": map[string]any{}})
	if code != http.StatusOK || res == nil {
		t.Fatalf("making the task: HTTP %d %s", code, raw)
	}
	var id string
	_ = json.Unmarshal(res["taskId"], &id)
	for deadline := time.Now().Add(30 * time.Second); len(slow.Stats().Arrivals) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the task's call never reached the upstream")
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.Kill()
	// The killed task's ticket waits again once its lease lapses, ahead
	// of the next task; a start for it is made again by the sweep (or the
	// next request that sees it) once its last is 10 s old. The surviving
	// process sweeps every second, not every minute, so the test does not
	// wait a minute for it.
	b := rig.StartGateway("TASK_SWEEP_INTERVAL=1s")
	var status string
	for deadline := time.Now().Add(time.Minute); ; {
		_, res, raw = taskRPC(b.URL, "/mcp/slow", key, "tasks/get", id, map[string]any{"taskId": id})
		_ = json.Unmarshal(res["status"], &status)
		if status != "working" || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if status != "failed" || !strings.Contains(raw, "may or may not have run") {
		t.Errorf("the task whose worker was killed: %s; want failed, saying the call may or may not have run", raw)
	}
	// Its place comes back with its lease's expiry: a task of the same
	// server, now served fast, runs through the surviving process.
	rig.PutServer(map[string]any{"server_id": "slow", "url": fast.URL, "max_concurrent_requests": 1, "timeout": 5, "cancel_grace": 1, "task_ttl": 600, "tools": tools})
	time.Sleep(500 * time.Millisecond) // the registry cache (REGISTRY_CACHE_TTL=200ms)
	code, res, raw = taskRPC(b.URL, "/mcp/slow", key, "tools/call", "work", map[string]any{"name": "work", "arguments": map[string]any{}})
	if code != http.StatusOK || res == nil {
		t.Fatalf("the next task: HTTP %d %s", code, raw)
	}
	_ = json.Unmarshal(res["taskId"], &id)
	for deadline := time.Now().Add(time.Minute); ; {
		_, res, raw = taskRPC(b.URL, "/mcp/slow", key, "tasks/get", id, map[string]any{"taskId": id})
		_ = json.Unmarshal(res["status"], &status)
		if status != "working" || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if status != "completed" {
		t.Errorf("the next task, after the killed one's lease lapsed: %s; want completed", raw)
	}
}
