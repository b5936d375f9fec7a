package main

// These tests run the real gateway binary as several OS processes sharing
// one dynalite, in front of a demo upstream on loopback: the fleet-wide cap
// must hold across processes, not just goroutines.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/secret/secrettest"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(benchChildEnv); mode != "" {
		os.Exit(benchChild(mode))
	}
	code := m.Run()
	testkit.CleanupBinaries()
	removeLambdaBinaries()
	removeOtelcol()
	storetest.StopShared()
	secrettest.StopShared()
	os.Exit(code)
}

// fleetEnv is the environment of the fleet tests' gateway processes: a
// lease lapses 1 s after its call's timeout, and a server item is read
// again after 200 ms.
var fleetEnv = []string{"LEASE_MARGIN=1s", "REGISTRY_CACHE_TTL=200ms"}

// fleetOptions are the fleet tests' rig: gateway processes with fleetEnv
// in front of a demo upstream, and a key for every server.
var fleetOptions = testkit.RigOptions{Env: fleetEnv, Demo: true, Key: true}

// demoServer puts a server item whose url is the rig's demo upstream.
func demoServer(r *testkit.Rig, doc map[string]any) {
	r.T.Helper()
	doc["url"] = r.Demo.URL
	r.PutServer(doc)
}

// outcome is a gateway's answer to a slow_tool call, with the demo
// upstream's result decoded when it is a 200.
type outcome struct {
	testkit.Response
	result demoupstream.SlowResult
}

// slow calls slow_tool through gateway i.
func slow(r *testkit.Rig, i int, args map[string]any) outcome {
	return demoCall(r, i, "slow_tool", args)
}

// demoCall calls a tool of server "demo" through gateway i.
func demoCall(r *testkit.Rig, i int, tool string, args map[string]any) outcome {
	return demoCallAs(r, r.Key, i, tool, args)
}

// demoCallAs is demoCall with another key.
func demoCallAs(r *testkit.Rig, key string, i int, tool string, args map[string]any) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := r.Gateway(i).CallTool(ctx, key, "demo", tool, args)
	if err != nil {
		r.T.Errorf("call via gateway %d: %v", i, err)
		return outcome{}
	}
	return parseOutcome(r.T, resp)
}

func parseOutcome(t testing.TB, r testkit.Response) outcome {
	o := outcome{Response: r}
	if r.Status == http.StatusOK {
		var res struct {
			StructuredContent demoupstream.SlowResult `json:"structuredContent"`
			IsError           bool                    `json:"isError"`
		}
		if err := json.Unmarshal(r.Body, &res); err != nil {
			t.Errorf("result %s: %v", r.Body, err)
		}
		o.result = res.StructuredContent
	}
	return o
}

// slowBurst makes n concurrent slow_tool calls spread over the processes.
func slowBurst(r *testkit.Rig, n int, args map[string]any) []outcome {
	return testkit.Burst(n, func(i int) outcome { return slow(r, i, args) })
}

// demoLeases is how many leases the item of server "demo" holds.
func demoLeases(r *testkit.Rig) int {
	return testkit.LeaseCount(r.T, r.Env, "demo", lease.LeasesAttr)
}

func allOK(t *testing.T, outs []outcome) (peak int) {
	t.Helper()
	for i, o := range outs {
		if o.Status != http.StatusOK {
			t.Errorf("call %d: status %d %s", i, o.Status, o.Body)
			continue
		}
		peak = max(peak, o.result.InFlightAtEntry)
	}
	return peak
}

// TestFleetCap is the core experiment: a backend registered with
// max_concurrent_requests 2, six concurrent calls over three processes.
func TestFleetCap(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(3)
	demoServer(f, map[string]any{"server_id": "demo", "max_concurrent_requests": 2, "queue_timeout": 60})
	// Each call ends as soon as 2 are in flight together (or after 3 s):
	// a cap that held the calls to 1 would make every call wait the full
	// 3 s and show a peak of 1.
	outs := slowBurst(f, 6, map[string]any{"ms": 3000, "until_in_flight": 2})
	peak := allOK(t, outs)
	for i, o := range outs {
		t.Logf("call %d: in flight at entry %d, held %d ms", i, o.result.InFlightAtEntry, o.result.SleptMS)
	}
	if peak != 2 || f.Demo.Stats().Peak != 2 {
		t.Errorf("upstream peak = %d (stats %d), want exactly the cap, 2", peak, f.Demo.Stats().Peak)
	}
	if n := demoLeases(f); n != 0 {
		t.Errorf("%d leases left", n)
	}
	t.Logf("6 calls over 3 processes, cap 2: upstream peak %d", f.Demo.Stats().Peak)
}

// TestFleetUnlimited: without a cap (absent, 0, -1) all six run at once.
func TestFleetUnlimited(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(3)
	for _, cap := range []any{nil, 0, -1} {
		t.Run(fmt.Sprint(cap), func(t *testing.T) {
			doc := map[string]any{"server_id": "demo"}
			if cap != nil {
				doc["max_concurrent_requests"] = cap
			}
			demoServer(f, doc)
			time.Sleep(400 * time.Millisecond) // let every process's 200 ms registry cache expire
			f.Demo.Reset()
			// Each call waits until all 6 are in flight: only an
			// uncapped gateway lets them finish before 60 s.
			outs := slowBurst(f, 6, map[string]any{"ms": 60000, "until_in_flight": 6})
			if peak := allOK(t, outs); peak != 6 {
				t.Errorf("peak = %d, want 6", peak)
			}
		})
	}
	out, err := f.Env.Client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(f.Env.Tables.Leases)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 0 {
		t.Errorf("uncapped calls wrote %d lease items", len(out.Items))
	}
}

// TestFleetShed: with on_limit shed, calls beyond the cap are refused at
// once, while the holders still run.
func TestFleetShed(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(3)
	demoServer(f, map[string]any{"server_id": "demo", "max_concurrent_requests": 2, "on_limit": "shed"})
	held := make(chan outcome, 2)
	for i := range 2 {
		go func() { held <- slow(f, i, map[string]any{"ms": 60000, "gate": "hold"}) }()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Demo.WaitInFlight(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// The gate is still closed: these can only return by being shed.
	for i, o := range slowBurst(f, 4, map[string]any{"ms": 0}) {
		if o.Status != http.StatusTooManyRequests || o.Fault.Code != fault.AtCapacity || !o.Fault.Retryable {
			t.Errorf("call %d: %d %s, want 429 AT_CAPACITY", i, o.Status, o.Body)
		}
		if ra, err := strconv.Atoi(o.Header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("call %d: Retry-After %q", i, o.Header.Get("Retry-After"))
		}
	}
	f.Demo.OpenGate("hold")
	for range 2 {
		if o := <-held; o.Status != http.StatusOK {
			t.Errorf("held call: %d %s", o.Status, o.Body)
		}
	}
	if p := f.Demo.Stats().Peak; p > 2 {
		t.Errorf("upstream peak %d, cap 2", p)
	}
	if calls := f.Demo.Stats().Calls; calls != 2 {
		t.Errorf("upstream saw %d calls, want only the 2 holders", calls)
	}
}

// leaseExpiries reads the live leases of the demo item: id → expiry.
func leaseExpiries(f *testkit.Rig) map[string]time.Time {
	out, err := f.Env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(f.Env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "demo"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		f.T.Fatal(err)
	}
	exps := map[string]time.Time{}
	if m, ok := out.Item[lease.LeasesAttr].(*types.AttributeValueMemberM); ok {
		for id, v := range m.Value {
			ms, _ := strconv.ParseInt(v.(*types.AttributeValueMemberN).Value, 10, 64)
			exps[id] = time.UnixMilli(ms)
		}
	}
	return exps
}

// TestFleetCrashSafety: a process killed with -9 while holding a lease
// costs its slot only until the lease expires.
func TestFleetCrashSafety(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(2)
	// timeout 2 s + margin 1 s: the lease lapses 3 s after it was taken.
	demoServer(f, map[string]any{"server_id": "demo", "max_concurrent_requests": 1, "timeout": 2, "queue_timeout": 30})
	crashed := make(chan struct{})
	go func() {
		defer close(crashed)
		// This call dies with its gateway.
		_, _ = f.Gateway(0).CallTool(context.Background(), f.Key, "demo", "slow_tool", map[string]any{"ms": 60000, "gate": "never"})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Demo.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	exps := leaseExpiries(f)
	if len(exps) != 1 {
		t.Fatalf("leases = %v, want the one held", exps)
	}
	var expiry time.Time
	for _, e := range exps {
		expiry = e
	}
	f.Gateway(0).Kill()
	<-crashed

	o := slow(f, 1, map[string]any{"ms": 0})
	if o.Status != http.StatusOK {
		t.Fatalf("call after the crash: %d %s", o.Status, o.Body)
	}
	entered := time.UnixMilli(o.result.EnteredAtMS)
	if entered.Before(expiry) {
		t.Errorf("the slot was reused at %v, before the crashed lease expired at %v", entered, expiry)
	}
	if late := entered.Sub(expiry); late > time.Second {
		t.Errorf("the slot came back %v after the lease expired, want at most 1s", late)
	}
	t.Logf("slot reclaimed %v after the dead lease expired", entered.Sub(expiry).Round(time.Millisecond))
	if n := demoLeases(f); n != 0 {
		t.Errorf("%d leases left", n)
	}
	// Later calls go straight through.
	if o := slow(f, 1, map[string]any{"ms": 0}); o.Status != http.StatusOK {
		t.Errorf("later call: %d %s", o.Status, o.Body)
	}
}

// TestFleetLiveCapChange: an admin's update of max_concurrent_requests
// reaches every process within the registry cache time.
func TestFleetLiveCapChange(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(3)
	demoServer(f, map[string]any{"server_id": "demo", "max_concurrent_requests": 1, "queue_timeout": 60})
	setCap := func(n int) {
		testkit.UpdateServer(t, f.Env, "demo", "max_concurrent_requests", &types.AttributeValueMemberN{Value: strconv.Itoa(n)})
		// Every process reads the item again after its 200 ms cache.
		time.Sleep(400 * time.Millisecond)
		f.Demo.Reset()
	}
	if peak := allOK(t, slowBurst(f, 6, map[string]any{"ms": 100, "until_in_flight": 3})); peak != 1 {
		t.Errorf("cap 1: peak %d", peak)
	}
	setCap(3)
	// Calls end early once 3 run together: only a cap of 3 lets them.
	if peak := allOK(t, slowBurst(f, 6, map[string]any{"ms": 10000, "until_in_flight": 3})); peak != 3 {
		t.Errorf("cap raised to 3: peak %d, want 3", peak)
	}
	setCap(1)
	if peak := allOK(t, slowBurst(f, 6, map[string]any{"ms": 100, "until_in_flight": 3})); peak != 1 {
		t.Errorf("cap lowered to 1: peak %d, want 1", peak)
	}
}

// bearer adds the Authorization header to every request.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// agentSession connects an MCP client to endpoint with key, as an agent
// does; the session is closed when the test ends.
func agentSession(ctx context.Context, t *testing.T, endpoint, key string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{key}}, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestFleetCapThroughMCP is the core experiment driven by MCP clients on
// the aggregated endpoint: the same fleet-wide slot is taken.
func TestFleetCapThroughMCP(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(3)
	demoServer(f, map[string]any{"server_id": "demo", "max_concurrent_requests": 2, "queue_timeout": 60})
	outs := make([]demoupstream.SlowResult, 6)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() {
			c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
			cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
				Endpoint:             f.Gateway(i).URL + "/mcp",
				HTTPClient:           &http.Client{Transport: bearer{f.Key}},
				DisableStandaloneSSE: true,
			}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer cs.Close()
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
				Name: "demo" + "-slow_tool", Arguments: map[string]any{"ms": 3000, "until_in_flight": 2},
			})
			if err != nil || res.IsError {
				t.Errorf("call %d: %v %+v", i, err, res)
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, &outs[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	peak := 0
	for i, o := range outs {
		t.Logf("call %d: in flight at entry %d, held %d ms", i, o.InFlightAtEntry, o.SleptMS)
		peak = max(peak, o.InFlightAtEntry)
	}
	if peak != 2 || f.Demo.Stats().Peak != 2 {
		t.Errorf("upstream peak through MCP = %d (stats %d), want exactly the cap, 2", peak, f.Demo.Stats().Peak)
	}
	if n := demoLeases(f); n != 0 {
		t.Errorf("%d leases left", n)
	}
}

// TestFleetCapOpenAPI is the second experiment: an OpenAPI-backed server
// with max_concurrent_requests 2, six concurrent calls over three
// processes, through the same semaphore.
func TestFleetCapOpenAPI(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(3)
	f.PutServer(map[string]any{"server_id": "api", "transport": "openapi", "spec_url": f.Demo.SpecURL,
		"max_concurrent_requests": 2, "queue_timeout": 60})
	outs := make([]demoupstream.SlowResult, 6)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() {
			r, err := f.Gateway(i).CallTool(context.Background(), f.Key, "api", "slow_api", map[string]any{"ms": 3000, "until_in_flight": 2})
			if err != nil || r.Status != http.StatusOK {
				t.Errorf("call %d: %v %d %s", i, err, r.Status, r.Body)
				return
			}
			var res struct {
				StructuredContent demoupstream.SlowResult `json:"structuredContent"`
			}
			if err := json.Unmarshal(r.Body, &res); err != nil {
				t.Error(err)
			}
			outs[i] = res.StructuredContent
		})
	}
	wg.Wait()
	peak := 0
	for _, o := range outs {
		peak = max(peak, o.InFlightAtEntry)
	}
	if peak != 2 || f.Demo.Stats().Peak != 2 {
		t.Errorf("OpenAPI upstream peak = %d (stats %d), want exactly the cap, 2", peak, f.Demo.Stats().Peak)
	}
	if n := testkit.LeaseCount(t, f.Env, "api", lease.LeasesAttr); n != 0 {
		t.Errorf("%d leases left", n)
	}
}

// statusLease is a lease as `mcpgate status --json` shows it.
type statusLease struct{ ID, Holder, Caller string }

// statusLeases runs `mcpgate status SERVER_ID --json` against env and
// returns the leases it shows.
func statusLeases(t *testing.T, env *storetest.Env, serverID string) []statusLease {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t, "./cmd/mcpgate"), "status", serverID, "--json")
	cmd.Env = append(os.Environ(), env.Vars()...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mcpgate status: %v", err)
	}
	var rep struct {
		Limiters []struct {
			Slots []struct{ Leases []statusLease }
		}
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	var leases []statusLease
	for _, l := range rep.Limiters {
		for _, s := range l.Slots {
			leases = append(leases, s.Leases...)
		}
	}
	return leases
}

// TestFleetStatus: the admin CLI's status shows the live leases of a
// multi-process run, with their holders, and none after.
func TestFleetStatus(t *testing.T) {
	f := testkit.NewRig(t, fleetOptions)
	f.Start(2)
	demoServer(f, map[string]any{"server_id": "demo", "max_concurrent_requests": 2})
	status := func() []statusLease { return statusLeases(t, f.Env, "demo") }
	held := make(chan outcome, 2)
	for i := range 2 {
		go func() { held <- slow(f, i, map[string]any{"ms": 60000, "gate": "g"}) }()
	}
	waitFor(t, "2 calls", func(ctx context.Context) error { return f.Demo.WaitInFlight(ctx, 2) })
	live := status()
	holders := map[string]bool{}
	for _, l := range live {
		holders[l.Holder] = true
	}
	if len(live) != 2 || len(holders) != 2 {
		t.Errorf("status during the run: %+v, want 2 leases held by the 2 processes", live)
	}
	f.Demo.OpenGate("g")
	for range 2 {
		<-held
	}
	if after := status(); len(after) != 0 {
		t.Errorf("status after the run: %+v, want none", after)
	}
}
