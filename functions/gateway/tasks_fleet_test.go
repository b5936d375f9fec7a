package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
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

// TestQueuedTasksHoldNoFunctionConcurrency: 24 agents of two keys (20 of
// A, 4 of B) each make a task of a tool of a server with a cap of 2 (calls
// of 500 ms), through 3 gateway processes behind a front that, as Lambda
// does, admits at most FUNCTION_CONCURRENCY (4) requests at once and
// answers 429 beyond (an agent tries again shortly, as a client of a
// throttled function does), and poll it as pollIntervalMs says. Many more
// tasks wait in the server's queue at once than the front could hold
// requests — so a waiting task holds none — and every task completes, B's
// among them, the upstream never seeing more than the cap. (The workers
// run in the gateway processes, not through the front: under Lambda each
// is an invocation, at most the cap of them at once per server.)
func TestQueuedTasksHoldNoFunctionConcurrency(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv})
	up := testkit.StartBatch(t, 4, 500*time.Millisecond)
	keyA, keyB := rig.PutKey("*"), rig.PutKey("*")
	gws := rig.Start(3, "FUNCTION_CONCURRENCY=4")
	rig.PutServer(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 2, "task_ttl": 600, "timeout": 10,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	front := testkit.StartFront(t, 4, gws)
	// rpc is taskRPC through the front, tried again after a 429.
	rpc := func(key, method, name string, params map[string]any) (int, map[string]json.RawMessage, string) {
		for {
			code, res, raw := taskRPC(front.URL, "/mcp/batch", key, method, name, params)
			if code != http.StatusTooManyRequests {
				return code, res, raw
			}
			time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
		}
	}

	type outcome struct {
		key, status, raw string
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
	for i := range 24 {
		key, who := keyA, "A"
		if i%6 == 5 {
			key, who = keyB, "B"
		}
		wg.Go(func() {
			note := func(status, raw string) {
				mu.Lock()
				outcomes = append(outcomes, outcome{who, status, raw})
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
					note(status, raw)
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
	for _, o := range outcomes {
		if o.status == "completed" {
			completed[o.key]++
		} else {
			t.Errorf("a task of %s: %s: %s", o.key, o.status, o.raw)
		}
	}
	st := up.Stats()
	t.Logf("tasks completed: A %d of 20, B %d of 4; at most %d waiting at once in the server's queue; front throttled %d; upstream served %d, peak %d",
		completed["A"], completed["B"], mostWaiting, front.Throttled.Load(), st.Served, st.Peak)
	if completed["A"] != 20 || completed["B"] != 4 {
		t.Errorf("completed: A %d of 20, B %d of 4", completed["A"], completed["B"])
	}
	if mostWaiting <= 4 {
		t.Errorf("at most %d tasks waited at once; with 24 made, more than the front's 4 requests should have", mostWaiting)
	}
	if st.Peak > 2 {
		t.Errorf("the upstream saw %d calls at once; cap 2", st.Peak)
	}
}
