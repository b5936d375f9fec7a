package main

// Tenant isolation across the fleet: two keys (and a third where a rule
// needs two principals' signals), two gateway processes sharing one store,
// one test per rule. In each, one tenant's own calls — failures, probes,
// timeouts, the upstream's Retry-After, a flood of queued callers, a flood
// of relayed reads — and the test asserts that what the other tenant gets
// stays as it was; and keys of one team count as one tenant.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// tenantWait bounds every wait of the tenant tests: generous, as the
// machine is shared.
const tenantWait = 2 * time.Minute

// tenants is a rig of two gateway processes in front of a demo upstream.
func tenants(t *testing.T) (*testkit.Rig, []*testkit.Gateway) {
	t.Helper()
	r := testkit.NewRig(t, testkit.RigOptions{Env: fleetEnv, Demo: true})
	return r, r.Start(2)
}

// callAs makes one REST call of tool on server through gw with key (Status
// -1 if no answer came).
func callAs(t *testing.T, gw *testkit.Gateway, key, server, tool string, args map[string]any) testkit.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tenantWait)
	defer cancel()
	r, err := gw.CallTool(ctx, key, server, tool, args)
	if err != nil {
		t.Errorf("call of %s on %s: %v", tool, server, err)
		return testkit.Response{Status: -1}
	}
	return r
}

// eventually polls ok until it holds, failing the test after tenantWait.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(tenantWait)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", tenantWait, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holds waits until a request is held at the upstream, failing the test
// if what answered first.
func holds[T any](t *testing.T, r *testkit.Rig, answer <-chan T, what string) {
	t.Helper()
	eventually(t, what+" to be held at the upstream", func() bool {
		select {
		case a := <-answer:
			t.Fatalf("%s was answered instead of held: %+v", what, a)
		default:
		}
		return r.Demo.Stats().InFlight >= 1
	})
}

// sleepUntil waits until at, plus a little for the gateways' clocks.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at) + 100*time.Millisecond) }

// heldAndRefused waits until n answers came from answers and one request
// is held at the upstream, and returns the answers; it fails the test as
// soon as more than one is held there.
func heldAndRefused[T any](t *testing.T, r *testkit.Rig, answers <-chan T, n int) []T {
	t.Helper()
	deadline := time.Now().Add(tenantWait)
	var out []T
	for len(out) < n || r.Demo.Stats().InFlight < 1 {
		if s := r.Demo.Stats(); s.InFlight > 1 {
			t.Fatalf("%d requests held at the upstream at once, with %d of %d answered; want 1", s.InFlight, len(out), n+1)
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v: %d of %d answered, upstream %+v", tenantWait, len(out), n, r.Demo.Stats())
		}
		select {
		case a := <-answers:
			out = append(out, a)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return out
}

// fails makes key's call of slow_tool on server fail as an unwell upstream's
// does (HTTP 502), n times, and checks each was answered as a failure.
func fails(t *testing.T, gw *testkit.Gateway, key, server string, n int) {
	t.Helper()
	for i := range n {
		if c := callAs(t, gw, key, server, "slow_tool", map[string]any{"fail_status": 502}); c.Fault.Code != fault.UpstreamError {
			t.Fatalf("failing call %d: %d %+v; want UPSTREAM_ERROR", i, c.Status, c.Fault)
		}
	}
}

// TestTenantFailedProbeKeepsNoOtherOut: keys A and C each fail once (HTTP
// 502) on a breaker of threshold 1: each tenant's own breaker opens, and
// with two open, the tool's breaker opens for everyone: key B is refused.
// Once it is half-open, A's call is the probe, and fails: that shuts A's
// own entry again, not everyone's, as C's is no longer shut; B's next calls
// go through (the first probes for everyone, and succeeds). One tenant
// whose calls keep failing cannot hold the breaker open for the others.
func TestTenantFailedProbeKeepsNoOtherOut(t *testing.T) {
	r, gws := tenants(t)
	keyA, keyB, keyC := r.PutKey("*"), r.PutKey("*"), r.PutKey("*")
	demoServer(r, map[string]any{"server_id": "demo", "max_concurrent_requests": 8, "on_limit": "shed",
		"breaker": map[string]any{"failure_threshold": 1, "recovery_timeout": 10}})

	fails(t, gws[0], keyA, "demo", 1)
	fails(t, gws[1], keyC, "demo", 1)
	// Both tenants' entries and everyone's reopen at most 10 s from now.
	reopen := time.Now().Add(10 * time.Second)
	for i, g := range gws {
		if c := callAs(t, g, keyB, "demo", "slow_tool", map[string]any{"ms": 0}); c.Fault.Code != fault.CircuitOpen {
			t.Fatalf("B via process %d with two tenants' breakers open: %d %+v; want CIRCUIT_OPEN", i, c.Status, c.Fault)
		}
	}

	// Half-open: A's call probes, and fails.
	sleepUntil(reopen)
	fails(t, gws[0], keyA, "demo", 1)
	calls := r.Demo.Stats().Calls
	for i, g := range gws {
		if c := callAs(t, g, keyB, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
			t.Errorf("B via process %d after A's probe failed: %d %+v; want it through", i, c.Status, c.Fault)
		}
	}
	if got := r.Demo.Stats().Calls - calls; got != 2 {
		t.Errorf("B's calls reached the upstream %d times, want 2", got)
	}
	if c := callAs(t, gws[1], keyA, "demo", "slow_tool", map[string]any{"ms": 0}); c.Fault.Code != fault.CircuitOpen {
		t.Errorf("A after its probe failed: %d %+v; want CIRCUIT_OPEN (its own entry shut again)", c.Status, c.Fault)
	}
}

// TestTenantBreakerHasItsOwnProbe: key A's failures open the breaker for A
// alone. Once it is half-open, four of A's calls arrive at once over both
// processes: one is the probe and reaches the upstream, held there; the
// three others are refused. B's calls go through all along. The probe's
// success opens A's breaker again.
func TestTenantBreakerHasItsOwnProbe(t *testing.T) {
	r, gws := tenants(t)
	keyA, keyB := r.PutKey("*"), r.PutKey("*")
	demoServer(r, map[string]any{"server_id": "demo", "max_concurrent_requests": 8, "on_limit": "shed",
		"breaker": map[string]any{"failure_threshold": 2, "recovery_timeout": 2}})
	fails(t, gws[0], keyA, "demo", 2)
	reopen := time.Now().Add(2 * time.Second)
	for i, g := range gws {
		if c := callAs(t, g, keyA, "demo", "slow_tool", map[string]any{"ms": 0}); c.Fault.Code != fault.CircuitOpen {
			t.Errorf("A via process %d with its own breaker open: %d %+v; want CIRCUIT_OPEN", i, c.Status, c.Fault)
		}
		if c := callAs(t, g, keyB, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
			t.Errorf("B via process %d while A's breaker is open: %d %+v; want it through", i, c.Status, c.Fault)
		}
	}
	sleepUntil(reopen)
	r.Demo.Reset()
	answers := make(chan testkit.Response, 4)
	for i := range 4 {
		go func() {
			answers <- callAs(t, gws[i%2], keyA, "demo", "slow_tool", map[string]any{"ms": 60000, "gate": "probe"})
		}()
	}
	// Three are refused while the probe is held at the upstream.
	for _, c := range heldAndRefused(t, r, answers, 3) {
		if c.Fault.Code != fault.CircuitOpen {
			t.Errorf("one of A's calls while its probe runs: %d %+v; want CIRCUIT_OPEN", c.Status, c.Fault)
		}
	}
	if s := r.Demo.Stats(); s.Calls != 1 || s.InFlight != 1 {
		t.Errorf("the upstream saw %d of A's calls (%d in flight) after the recovery; want its one probe", s.Calls, s.InFlight)
	}
	for i, g := range gws {
		if c := callAs(t, g, keyB, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
			t.Errorf("B via process %d while A's probe runs: %d %+v; want it through", i, c.Status, c.Fault)
		}
	}
	r.Demo.OpenGate("probe")
	if c := <-answers; c.Status != http.StatusOK {
		t.Fatalf("A's probe: %d %+v", c.Status, c.Fault)
	}
	if c := callAs(t, gws[1], keyA, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
		t.Errorf("A after its probe succeeded: %d %+v; want it through", c.Status, c.Fault)
	}
}

// raiseLimit has B's calls, 6 at a time, raise server's adaptive limit to
// its ceiling, 4.
func raiseLimit(t *testing.T, r *testkit.Rig, gws []*testkit.Gateway, key, server string) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			for ctx.Err() == nil {
				callAs(t, gws[i%2], key, server, "slow_tool", map[string]any{"ms": 100})
			}
		})
	}
	eventually(t, "B's calls to raise the limit of "+server+" to 4", func() bool { return limitOf(t, r.Env, server) == 4 })
	stop()
	wg.Wait()
	eventually(t, "B's calls on "+server+" to end", func() bool { return testkit.LeaseCount(t, r.Env, server, lease.LeasesAttr) == 0 })
}

// TestTenantTimeoutsKeepTheAdaptiveLimit: B's calls raise an adaptive
// server's limit to its ceiling, 4. While B holds a place, A's calls fail,
// three in a row: evidence of A alone, which must not lower the limit B
// gets while B is there. On one server A's calls fail at once (HTTP 502)
// while B's tool call is held; on another they time out (its slow_tool's
// timeout is 1 s) while B's resource read is held (the server's timeout is
// 60 s).
func TestTenantTimeoutsKeepTheAdaptiveLimit(t *testing.T) {
	r, gws := tenants(t)
	keyA, keyB := r.PutKey("*"), r.PutKey("*")
	adaptive := func(id string, doc map[string]any) {
		doc["server_id"], doc["max_concurrent_requests"], doc["adaptive"] = id, 4, true
		doc["on_limit"], doc["queue_timeout"], doc["timeout"] = "queue", 60, 60
		demoServer(r, doc)
	}
	adaptive("failing", map[string]any{})
	adaptive("slow", map[string]any{"tools": map[string]any{"slow_tool": map[string]any{"timeout": 1}}})

	raiseLimit(t, r, gws, keyB, "failing")
	held := make(chan testkit.Response, 1)
	go func() {
		held <- callAs(t, gws[1], keyB, "failing", "slow_tool", map[string]any{"ms": 60000, "gate": "b"})
	}()
	holds(t, r, held, "B's call")
	fails(t, gws[0], keyA, "failing", 3)
	if got := limitOf(t, r.Env, "failing"); got != 4 {
		t.Errorf("after A's three failures, with B holding a place, the limit is %d; want it left at 4", got)
	}
	r.Demo.OpenGate("b")
	if c := <-held; c.Status != http.StatusOK {
		t.Errorf("B's held call: %d %+v", c.Status, c.Fault)
	}

	raiseLimit(t, r, gws, keyB, "slow")
	r.Demo.SetHang(true)
	defer r.Demo.SetHang(false)
	cs := agentSession(context.Background(), t, gws[1].URL+"/mcp/slow", keyB)
	read := make(chan error, 1)
	go func() {
		_, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "demo://slow/0"})
		read <- err
	}()
	holds(t, r, read, "B's read")
	eventually(t, "B's read to hold a place", func() bool { return testkit.LeaseCount(t, r.Env, "slow", lease.LeasesAttr) == 1 })
	for i := range 3 {
		if c := callAs(t, gws[i%2], keyA, "slow", "slow_tool", map[string]any{"ms": 5000}); c.Fault.Code != fault.UpstreamTimeout {
			t.Fatalf("A's call %d: %d %+v; want UPSTREAM_TIMEOUT", i, c.Status, c.Fault)
		}
		// Its place comes back once the upstream stops the call.
		eventually(t, "A's timed-out call to give its place back", func() bool {
			return testkit.LeaseCount(t, r.Env, "slow", lease.LeasesAttr) == 1
		})
	}
	if got := limitOf(t, r.Env, "slow"); got != 4 {
		t.Errorf("after A's three timeouts, with B holding a place, the limit is %d; want it left at 4", got)
	}
	r.Demo.SetHang(false)
	if err := <-read; err != nil {
		t.Errorf("B's read: %v", err)
	}
}

// TestTenantRetryAfterPausesItAlone: the upstream answers one of A's calls
// 429 with Retry-After: 60. A's calls to the server are refused, on both
// processes; B's go through. When B's call gets a 429 too, two tenants
// asked: everyone is paused, C included. On an OpenAPI server, the pause
// is the operation's alone. A server's max_pause (20) bounds the pause.
func TestTenantRetryAfterPausesItAlone(t *testing.T) {
	r, gws := tenants(t)
	keyA, keyB, keyC := r.PutKey("*"), r.PutKey("*"), r.PutKey("*")
	demoServer(r, map[string]any{"server_id": "demo", "max_concurrent_requests": 4, "on_limit": "shed"})
	r.PutServer(map[string]any{"server_id": "api", "transport": "openapi", "spec_url": r.Demo.SpecURL,
		"max_concurrent_requests": 4, "on_limit": "shed"})
	paused := func(c testkit.Response, most time.Duration) bool {
		return c.Fault.Code == fault.AtCapacity && c.Fault.Reason == lease.Paused && c.RetryAfter() > 0 && c.RetryAfter() <= most
	}

	if c := callAs(t, gws[0], keyA, "demo", "slow_tool", map[string]any{"retry_after": 60}); c.Fault.Code != fault.UpstreamError || c.RetryAfter() <= 0 {
		t.Fatalf("A's call answered 429 with Retry-After 60: %d %+v; want UPSTREAM_ERROR with a Retry-After", c.Status, c.Fault)
	}
	for i, g := range gws {
		if c := callAs(t, g, keyA, "demo", "slow_tool", map[string]any{"ms": 0}); !paused(c, time.Minute) {
			t.Errorf("A via process %d: %d %+v; want AT_CAPACITY paused", i, c.Status, c.Fault)
		}
		if c := callAs(t, g, keyB, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
			t.Errorf("B via process %d while A is paused: %d %+v; want it through", i, c.Status, c.Fault)
		}
	}
	// B's own 429: two tenants asked, everyone waits.
	callAs(t, gws[1], keyB, "demo", "slow_tool", map[string]any{"retry_after": 60})
	if c := callAs(t, gws[0], keyC, "demo", "slow_tool", map[string]any{"ms": 0}); !paused(c, time.Minute) {
		t.Errorf("C once A and B were both asked to pause: %d %+v; want AT_CAPACITY paused", c.Status, c.Fault)
	}

	// OpenAPI: A's slow_api is paused; its echo_api, and B's slow_api, are not.
	if c := callAs(t, gws[0], keyA, "api", "slow_api", map[string]any{"retry_after": 60}); c.Fault.Code != fault.UpstreamError {
		t.Fatalf("A's slow_api answered 429: %d %+v", c.Status, c.Fault)
	}
	for i, g := range gws {
		if c := callAs(t, g, keyA, "api", "slow_api", map[string]any{"ms": 0}); !paused(c, time.Minute) {
			t.Errorf("A's slow_api via process %d: %d %+v; want AT_CAPACITY paused", i, c.Status, c.Fault)
		}
		if c := callAs(t, g, keyA, "api", "echo_api", map[string]any{"body": map[string]any{"text": "hi"}}); c.Status != http.StatusOK {
			t.Errorf("A's echo_api via process %d while its slow_api is paused: %d %+v; want it through", i, c.Status, c.Fault)
		}
		if c := callAs(t, g, keyB, "api", "slow_api", map[string]any{"ms": 0}); c.Status != http.StatusOK {
			t.Errorf("B's slow_api via process %d while A's is paused: %d %+v; want it through", i, c.Status, c.Fault)
		}
	}

	// max_pause bounds what one answer imposes.
	demoServer(r, map[string]any{"server_id": "bounded", "max_concurrent_requests": 4, "on_limit": "shed", "max_pause": 20})
	if c := callAs(t, gws[0], keyA, "bounded", "slow_tool", map[string]any{"retry_after": 60}); c.Fault.Code != fault.UpstreamError || c.RetryAfter() <= 0 || c.RetryAfter() > 20*time.Second {
		t.Errorf("A's call answered Retry-After 60 on a server of max_pause 20: %d %+v; want UPSTREAM_ERROR retrying after at most 20 s", c.Status, c.Fault)
	}
	if c := callAs(t, gws[1], keyA, "bounded", "slow_tool", map[string]any{"ms": 0}); !paused(c, 20*time.Second) {
		t.Errorf("A on a server of max_pause 20: %d %+v; want AT_CAPACITY paused for at most 20 s", c.Status, c.Fault)
	}
}

// TestTenantFloodLeavesAQueuePlace: a server of one place and a queue of 4.
// A holds the place and floods the queue with five more callers: three
// wait and two are refused, as the last quarter of the queue is kept for
// another tenant. B's lone caller waits in it, and is served.
func TestTenantFloodLeavesAQueuePlace(t *testing.T) {
	r, gws := tenants(t)
	keyA, keyB := r.PutKey("*"), r.PutKey("*")
	demoServer(r, map[string]any{"server_id": "demo", "max_concurrent_requests": 1, "max_queued": 4,
		"on_limit": "queue", "queue_timeout": 90, "timeout": 60})
	held := make(chan testkit.Response, 1)
	go func() { held <- callAs(t, gws[0], keyA, "demo", "slow_tool", map[string]any{"ms": 60000, "gate": "q"}) }()
	holds(t, r, held, "A's call")

	answers := make(chan testkit.Response, 5)
	for i := range 5 {
		go func() { answers <- callAs(t, gws[i%2], keyA, "demo", "slow_tool", map[string]any{"ms": 0}) }()
	}
	var refused []testkit.Response
	eventually(t, "A's flood to queue or be refused", func() bool {
		for len(answers) > 0 {
			refused = append(refused, <-answers)
		}
		return len(refused)+testkit.LeaseCount(t, r.Env, "demo", lease.QueueAttr) == 5
	})
	if len(refused) != 2 {
		t.Errorf("%d of A's five callers were refused; want 2 (a queue of 4 keeps 1 for another tenant)", len(refused))
	}
	for _, c := range refused {
		if c.Fault.Code != fault.AtCapacity || c.Fault.Reason != lease.QueueFull {
			t.Errorf("A's refused caller: %d %+v; want AT_CAPACITY queue_full", c.Status, c.Fault)
		}
	}
	b := make(chan testkit.Response, 1)
	go func() { b <- callAs(t, gws[1], keyB, "demo", "slow_tool", map[string]any{"ms": 0}) }()
	eventually(t, "B's caller to queue or be answered", func() bool {
		return len(b) > 0 || testkit.LeaseCount(t, r.Env, "demo", lease.QueueAttr) == 4
	})
	r.Demo.OpenGate("q")
	if c := <-b; c.Status != http.StatusOK {
		t.Errorf("B's lone caller behind A's flood: %d %+v; want it served", c.Status, c.Fault)
	}
	if c := <-held; c.Status != http.StatusOK {
		t.Errorf("A's held call: %d %+v", c.Status, c.Fault)
	}
	for range 5 - len(refused) {
		if c := <-answers; c.Status != http.StatusOK {
			t.Errorf("A's queued caller: %d %+v", c.Status, c.Fault)
		}
	}
}

// relayDetail is the gateway's detail of a relayed request's JSON-RPC
// error; the zero Detail when it succeeded.
func relayDetail(t *testing.T, err error) fault.Detail {
	t.Helper()
	var rpcErr *jsonrpc.Error
	if err == nil || !errors.As(err, &rpcErr) {
		if err != nil {
			t.Errorf("relayed request: %v, want a JSON-RPC error", err)
		}
		return fault.Detail{}
	}
	var d fault.Detail
	_ = json.Unmarshal(rpcErr.Data, &d)
	return d
}

// readVia reads uri on /mcp/demo through gw with key.
func readVia(t *testing.T, gw *testkit.Gateway, key, uri string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tenantWait)
	defer cancel()
	_, err := agentSession(ctx, t, gw.URL+"/mcp/demo", key).ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	return err
}

// TestTenantReadFloodIsAdmitted: key A, limited to 1 call at a time and 2
// a minute, sends 12 resources/read at once over both processes to a
// server of 2 places: one reaches the upstream, eleven are refused; B's
// read takes the other place at once. A's second read passes, its third
// is refused for its rate.
func TestTenantReadFloodIsAdmitted(t *testing.T) {
	r, gws := tenants(t)
	keyA := r.PutKeyAs(auth.Key{Servers: []string{"*"}, MaxParallel: 1, RPMLimit: 2})
	keyB := r.PutKey("*")
	demoServer(r, map[string]any{"server_id": "demo", "max_concurrent_requests": 2, "on_limit": "shed"})
	r.Demo.SetHang(true)
	defer r.Demo.SetHang(false)
	answers := make(chan error, 12)
	for i := range 12 {
		go func() { answers <- readVia(t, gws[i%2], keyA, "demo://slow/0") }()
	}
	for _, err := range heldAndRefused(t, r, answers, 11) {
		if d := relayDetail(t, err); d.Code != fault.AtCapacity || d.Reason != "key_parallel" {
			t.Errorf("one of A's flood of reads: %+v (%v); want AT_CAPACITY key_parallel", d, err)
		}
	}
	if s := r.Demo.Stats(); s.Calls != 1 || s.InFlight != 1 {
		t.Errorf("the upstream saw %d of A's reads (%d in flight); want 1", s.Calls, s.InFlight)
	}
	b := make(chan error, 1)
	go func() { b <- readVia(t, gws[1], keyB, "demo://slow/0") }()
	eventually(t, "B's read to reach the upstream", func() bool { return r.Demo.Stats().InFlight == 2 })
	r.Demo.SetHang(false)
	if err := <-b; err != nil {
		t.Errorf("B's read during A's flood: %v", err)
	}
	if err := <-answers; err != nil {
		t.Errorf("A's admitted read: %v", err)
	}
	if err := readVia(t, gws[0], keyA, "demo://slow/0"); err != nil {
		t.Errorf("A's second read in the minute: %v", err)
	}
	if d := relayDetail(t, readVia(t, gws[1], keyA, "demo://slow/0")); d.Code != fault.RateLimited {
		t.Errorf("A's third read in the minute, rpm_limit 2: %+v; want RATE_LIMITED", d)
	}
	if s := r.Demo.Stats(); s.Calls != 3 {
		t.Errorf("the upstream saw %d reads; want A's 2 and B's 1", s.Calls)
	}
}

// TestTeamKeysShareOnePrincipal: keys A1 and A2 of team "platform", C of
// team "research" and D of none, on a server allowing one call at a time
// per principal. While A1's call is held, A2's is refused as the team's,
// and C's and D's go through. The keys' own limits stay their own: on a
// server without that cap, A1 and A2, each limited to one call at a time,
// hold one each.
func TestTeamKeysShareOnePrincipal(t *testing.T) {
	r, gws := tenants(t)
	keyA1 := r.PutKeyAs(auth.Key{Servers: []string{"*"}, Team: "platform", MaxParallel: 1})
	keyA2 := r.PutKeyAs(auth.Key{Servers: []string{"*"}, Team: "platform", MaxParallel: 1})
	keyC := r.PutKeyAs(auth.Key{Servers: []string{"*"}, Team: "research"})
	keyD := r.PutKey("*")
	demoServer(r, map[string]any{"server_id": "demo", "max_concurrent_requests": 8, "max_concurrent_per_principal": 1, "on_limit": "shed"})
	r.PutServer(map[string]any{"server_id": "free", "url": r.Demo.URL})

	held := make(chan testkit.Response, 1)
	go func() {
		held <- callAs(t, gws[0], keyA1, "demo", "slow_tool", map[string]any{"ms": 60000, "gate": "team"})
	}()
	holds(t, r, held, "A1's call")
	for i, g := range gws {
		if c := callAs(t, g, keyA2, "demo", "slow_tool", map[string]any{"ms": 0}); c.Fault.Code != fault.AtCapacity || c.Fault.Reason != lease.AtCapacity {
			t.Errorf("A2 via process %d while A1 of its team holds the team's one place: %d %+v; want AT_CAPACITY", i, c.Status, c.Fault)
		}
		for name, key := range map[string]string{"C": keyC, "D": keyD} {
			if c := callAs(t, g, key, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
				t.Errorf("%s via process %d while A1 holds its team's place: %d %+v; want it through", name, i, c.Status, c.Fault)
			}
		}
	}
	// The keys' own limits: A1 is at its max_parallel_requests, A2 is not.
	if c := callAs(t, gws[1], keyA1, "free", "slow_tool", map[string]any{"ms": 0}); c.Fault.Reason != "key_parallel" {
		t.Errorf("A1's second call at once: %d %+v; want AT_CAPACITY key_parallel", c.Status, c.Fault)
	}
	if c := callAs(t, gws[1], keyA2, "free", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
		t.Errorf("A2's call, its own limit free while A1's is taken: %d %+v; want it through", c.Status, c.Fault)
	}
	r.Demo.OpenGate("team")
	if c := <-held; c.Status != http.StatusOK {
		t.Errorf("A1's held call: %d %+v", c.Status, c.Fault)
	}
	// The team's label is the lease item's principal: one set, for both keys.
	go func() {
		held <- callAs(t, gws[1], keyA2, "demo", "slow_tool", map[string]any{"ms": 60000, "gate": "team2"})
	}()
	holds(t, r, held, "A2's call")
	if c := callAs(t, gws[0], keyA1, "demo", "slow_tool", map[string]any{"ms": 0}); c.Fault.Code != fault.AtCapacity {
		t.Errorf("A1 while A2 of its team holds the team's place: %d %+v; want AT_CAPACITY", c.Status, c.Fault)
	}
	r.Demo.OpenGate("team2")
	if c := <-held; c.Status != http.StatusOK {
		t.Errorf("A2's held call: %d %+v", c.Status, c.Fault)
	}
}
