package main

// Fleet-wide resilience: per-tool caps, the shared circuit breaker and its
// single half-open probe, and what clock skew does to the guarantee, each
// across several gateway OS processes.

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// breakerOpenUntil reads when the breaker of tool on "demo" reopens.
func breakerOpenUntil(f *testkit.Rig, tool string) time.Time {
	f.T.Helper()
	out, err := f.Env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(f.Env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "demo"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		f.T.Fatal(err)
	}
	for _, b := range lease.Describe(out.Item, time.Now(), 0, 0, nil).Breakers {
		if b.Name == tool && b.OpenUntil != nil {
			return *b.OpenUntil
		}
	}
	return time.Time{}
}

// waitBreakerOpen waits until tool's breaker is open and returns until
// when; a breaker that does not open within a minute fails the test.
func waitBreakerOpen(f *testkit.Rig, tool string) time.Time {
	f.T.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if until := breakerOpenUntil(f, tool); !until.IsZero() {
			return until
		}
		if time.Now().After(deadline) {
			f.T.Fatal("the breaker did not open")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, wait func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := wait(ctx); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestFleetStalledTool is the seed scenario: a stalled tool (cap 2,
// timeout 1 s, each call sleeping 5 s) flooded with 8 calls over 3
// processes while a healthy tool of the same server is called.
func TestFleetStalledTool(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(3)
	demoServer(f, map[string]any{"server_id": "demo", "max_concurrent_requests": 10, "on_limit": "shed",
		"tools":   map[string]any{"slow_tool": map[string]any{"max_concurrent": 2, "timeout": 1}},
		"breaker": map[string]any{"failure_threshold": 2, "recovery_timeout": 30}})

	stalled := make(chan outcome, 2)
	for i := range 2 {
		go func() { stalled <- slow(f, i, map[string]any{"ms": 5000}) }()
	}
	waitFor(t, "2 stalled calls", func(ctx context.Context) error { return f.Demo.WaitInFlight(ctx, 2) })

	// The other 6 of the 8 are shed at once, with a retryable error.
	var wg sync.WaitGroup
	shed := make([]outcome, 6)
	for i := range shed {
		wg.Go(func() { shed[i] = slow(f, i, map[string]any{"ms": 5000}) })
	}
	healthy := demoCall(f, 2, "echo", map[string]any{"text": "still here"})
	wg.Wait()
	for i, o := range shed {
		if o.Status != http.StatusTooManyRequests || o.Fault.Code != fault.AtCapacity || !o.Fault.Retryable {
			t.Errorf("flood call %d: %d %s, want 429 AT_CAPACITY", i, o.Status, o.Body)
		}
	}
	if healthy.Status != http.StatusOK {
		t.Errorf("healthy tool during the flood: %d %s", healthy.Status, healthy.Body)
	}

	// The 2 that ran time out, and that opens the breaker fleet-wide.
	for range 2 {
		if o := <-stalled; o.Status != http.StatusGatewayTimeout || o.Fault.Code != fault.UpstreamTimeout {
			t.Errorf("stalled call: %d %s, want 504 UPSTREAM_TIMEOUT", o.Status, o.Body)
		}
	}
	// The gateways told the upstream to stop them: it goes idle long
	// before the calls' 5 s.
	idle := time.Now()
	waitFor(t, "the upstream to drop the timed-out calls", f.Demo.WaitIdle)
	t.Logf("upstream idle %v after the timeouts", time.Since(idle).Round(time.Millisecond))
	// Then their slots come back, telling the breaker.
	waitNoLease(t, f.Env, "demo")
	calls := f.Demo.Stats().Calls
	for i := range f.Gateways() {
		start := time.Now()
		o := slow(f, i, map[string]any{"ms": 0})
		if o.Status != http.StatusServiceUnavailable || o.Fault.Code != fault.CircuitOpen || o.Header.Get("Retry-After") == "" {
			t.Errorf("process %d after the breaker opened: %d %s, want 503 CIRCUIT_OPEN with Retry-After", i, o.Status, o.Body)
		}
		t.Logf("process %d refused in %v (tool timeout 1s)", i, time.Since(start).Round(time.Millisecond))
	}
	if got := f.Demo.Stats().Calls; got != calls {
		t.Errorf("%d calls reached the stalled tool through the open breaker", got-calls)
	}
	if p := f.Demo.Stats().Peak; p > 2 {
		t.Errorf("the stalled tool saw %d calls at once, cap 2", p)
	}
	// Other tools of the server still answer.
	if o := demoCall(f, 0, "echo", map[string]any{"text": "x"}); o.Status != http.StatusOK {
		t.Errorf("healthy tool with the breaker open: %d %s", o.Status, o.Body)
	}
}

// TestFleetHalfOpenProbe: after the recovery time, many callers on several
// processes, and exactly one probe reaches the upstream.
func TestFleetHalfOpenProbe(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(3)
	demoServer(f, map[string]any{"server_id": "demo", "max_concurrent_requests": 20,
		"tools":   map[string]any{"slow_tool": map[string]any{"timeout": 0.3}},
		"breaker": map[string]any{"failure_threshold": 2, "recovery_timeout": 1}})
	// Two principals' calls fail until each one's own breaker opens: it
	// opens for everyone.
	other := f.PutKey("*")
	for i, key := range []string{f.Key, f.Key, other, other} {
		if o := demoCallAs(f, key, i, "slow_tool", map[string]any{"ms": 5000}); o.Fault.Code != fault.UpstreamTimeout {
			t.Fatalf("opening call %d: %d %s", i, o.Status, o.Body)
		}
	}
	// The cut-off call tells its breaker when its slot comes back: the
	// release, then the write that opens the breaker.
	waitNoLease(t, f.Env, "demo")
	openUntil := waitBreakerOpen(f, "slow_tool")
	// Give the probe time to be held while the others arrive.
	testkit.UpdateServer(t, f.Env, "demo", "tools", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"slow_tool": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"timeout": &types.AttributeValueMemberN{Value: "30"}}},
	}})
	time.Sleep(time.Until(openUntil) + 400*time.Millisecond) // recovery time, and the 200 ms registry cache
	f.Demo.Reset()

	const callers = 12
	results := make(chan outcome, callers)
	for i := range callers {
		go func() { results <- slow(f, i, map[string]any{"ms": 30000, "gate": "probe"}) }()
	}
	waitFor(t, "the probe", func(ctx context.Context) error { return f.Demo.WaitCalls(ctx, 1) })
	// The probe is held at its gate: every other caller can only come back
	// by being refused. A second call let through would hang here.
	timeout := time.After(time.Minute)
	for range callers - 1 {
		select {
		case o := <-results:
			if o.Status != http.StatusServiceUnavailable || o.Fault.Code != fault.CircuitOpen {
				t.Errorf("caller during the probe: %d %s, want 503 CIRCUIT_OPEN", o.Status, o.Body)
			}
		case <-timeout:
			t.Fatalf("callers still waiting while the probe runs; upstream saw %d calls", f.Demo.Stats().Calls)
		}
	}
	if calls := f.Demo.Stats().Calls; calls != 1 {
		t.Errorf("upstream saw %d calls while half-open, want exactly 1 probe", calls)
	}
	f.Demo.OpenGate("probe")
	if o := <-results; o.Status != http.StatusOK {
		t.Errorf("probe: %d %s", o.Status, o.Body)
	}
	// The probe's success closed the breaker for everyone.
	if o := slow(f, 1, map[string]any{"ms": 0}); o.Status != http.StatusOK {
		t.Errorf("after the probe: %d %s", o.Status, o.Body)
	}
}

// TestFleetClockSkew shows the margin's effect. Instance A holds the only
// slot for a call that times out after 3 s; its lease expires 3 s + 1 s
// margin after it was taken, by A's clock. Instance B's clock is offset
// by GATEWAY_TEST_CLOCK_OFFSET. Within the margin, B never reaches the
// upstream while A's call runs; beyond it, B purges A's lease early and
// the upstream sees 2 calls at once: exactly the guarantee docs/admission.md
// states.
func TestFleetClockSkew(t *testing.T) {
	for _, tc := range []struct {
		name     string
		offset   string
		wantPeak int
	}{
		{"within margin", "500ms", 1},
		{"beyond margin", "3s", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testkit.NewRig(t, fleetOptions)
			f.StartGateway()
			f.StartGateway("GATEWAY_TEST_CLOCK_OFFSET=" + tc.offset)
			demoServer(f, map[string]any{"server_id": "demo", "max_concurrent_requests": 1, "timeout": 3, "queue_timeout": 30})
			a := make(chan outcome, 1)
			go func() { a <- slow(f, 0, map[string]any{"ms": 60000, "gate": "never"}) }()
			waitFor(t, "A's call", func(ctx context.Context) error { return f.Demo.WaitInFlight(ctx, 1) })
			b := slow(f, 1, map[string]any{"ms": 0})
			if b.Status != http.StatusOK {
				t.Fatalf("B: %d %s", b.Status, b.Body)
			}
			<-a
			if p := f.Demo.Stats().Peak; p != tc.wantPeak {
				t.Errorf("clock offset %s: upstream peak %d, want %d", tc.offset, p, tc.wantPeak)
			}
		})
	}
}

// waitNoLease waits until the leases item of id holds no lease: the calls'
// slots were given back (a cut-off call's once its upstream stopped).
func waitNoLease(t *testing.T, env *storetest.Env, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for testkit.LeaseCount(t, env, id, lease.LeasesAttr) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a lease of %s is still held after a minute", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
