package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

func waitInFlight(t *testing.T, h *harness, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.demo.WaitInFlight(ctx, n); err != nil {
		t.Fatal(err)
	}
}

func TestToolCapLeavesOtherToolsTheirShare(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 3, "on_limit": "shed",
		"tools": map[string]any{"slow_tool": map[string]any{"max_concurrent": 1}}})
	held := make(chan response, 1)
	go func() {
		held <- h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":30000,"gate":"g"}}`)
	}()
	waitInFlight(t, h, 1)
	d := h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":0}}`), 429, fault.AtCapacity)
	if !strings.Contains(d.Message, "tool") {
		t.Errorf("message %q does not say the tool is at capacity", d.Message)
	}
	// The server still has room for its other tools.
	if r := h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`); r.status != 200 {
		t.Errorf("other tool during the flood: %d %s", r.status, r.body)
	}
	h.demo.OpenGate("g")
	<-held
	if n := testkit.LeaseCount(t, h.env, "demo", lease.ToolAttr("slow_tool")); n != 0 {
		t.Errorf("%d tool leases left", n)
	}
}

func TestToolTimeout(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 2, "timeout": 30,
		"tools": map[string]any{"slow_tool": map[string]any{"timeout": 0.2}}})
	h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":30000}}`), 504, fault.UpstreamTimeout)
}

func TestBreakerOpensAndRefuses(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "timeout": 0.2,
		"breaker": map[string]any{"failure_threshold": 2, "recovery_timeout": 60, "excluded_tools": []any{"fail_tool"}}})
	for range 2 {
		h.expectFault(h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":30000}}`), 504, fault.UpstreamTimeout)
		// A cut-off call tells its breaker when it gives its slot back.
		h.drain()
	}
	calls := h.demo.Stats().Calls
	r := h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":0}}`)
	h.expectFault(r, 503, fault.CircuitOpen)
	if ra := r.header.Get("Retry-After"); ra == "" || ra > "60" || len(ra) > 2 {
		t.Errorf("Retry-After = %q, want the recovery time left", ra)
	}
	if h.demo.Stats().Calls != calls {
		t.Error("a call reached the upstream through an open breaker")
	}
	// Other tools of the server are not cut off; a tool's own error result
	// is a business answer, not a failure.
	for range 3 {
		if r := h.call(h.key, `{"server_id":"demo","name":"fail_tool"}`); r.status != 200 {
			t.Errorf("excluded tool: %d %s", r.status, r.body)
		}
	}
	if r := h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`); r.status != 200 {
		t.Errorf("other tool: %d %s", r.status, r.body)
	}
	// The only caller's own failures open it for that caller.
	if !strings.Contains(h.logs.String(), `"msg":"circuit breaker opened for principal"`) {
		t.Error("the opening is not in the log")
	}
}

func TestToolErrorsDoNotOpenTheBreaker(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "breaker": map[string]any{"failure_threshold": 1}})
	for range 3 {
		if r := h.call(h.key, `{"server_id":"demo","name":"fail_tool"}`); r.status != 200 {
			t.Fatalf("fail_tool: %d %s", r.status, r.body)
		}
	}
}

// newGateway builds a gateway on h's store with its own limiter and options.
func (h *harness) newGateway(lim *lease.Limiter, opts Options) string {
	h.t.Helper()
	return h.newGatewayWith(lim, nil, opts)
}

// newGatewayWith is newGateway with a metrics emitter.
func (h *harness) newGatewayWith(lim *lease.Limiter, em *metrics.Emitter, opts Options) string {
	h.t.Helper()
	pool := upstream.New(upstream.Options{AllowLocal: true})
	h.t.Cleanup(pool.Close)
	opts.Logger = slog.New(slog.NewJSONHandler(h.logs, nil))
	g, err := New(Deps{
		Auth:     auth.New(h.env.Client, h.env.Tables.Keys, auth.Options{}),
		Registry: registry.New(h.env.Client, h.env.Tables.Servers, registry.Options{CacheTTL: -1}),
		Limiter:  lim,
		Upstream: pool,
		Metrics:  em,
	}, opts)
	if err != nil {
		h.t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	h.t.Cleanup(srv.Close)
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	h.gw = g
	return srv.URL
}

func TestStoreErrorPolicy(t *testing.T) {
	h := newHarness(t)
	// A limiter whose table does not exist: every lease write fails.
	broken := lease.New(h.env.Client, "no-such-leases-table", lease.Options{})
	h.url = h.newGateway(broken, Options{})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1})
	r := h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`)
	h.expectFault(r, 503, fault.StoreUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("STORE_UNAVAILABLE without Retry-After")
	}
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "on_store_error": "allow"})
	if r := h.call(h.key, `{"server_id":"demo","name":"echo","arguments":{"text":"x"}}`); r.status != 200 {
		t.Fatalf("on_store_error allow: %d %s", r.status, r.body)
	}
	if !strings.Contains(h.logs.String(), `"uncapped":true`) {
		t.Error("the uncapped call is not in the log")
	}
}

func TestLongCallRenewsItsLease(t *testing.T) {
	h := newHarness(t)
	lim := lease.New(h.env.Client, h.env.Tables.Leases, lease.Options{Margin: 200 * time.Millisecond})
	h.url = h.newGateway(lim, Options{MaxLeaseHold: time.Second})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "timeout": 30})
	done := make(chan response, 1)
	go func() {
		done <- h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":30000,"gate":"g"}}`)
	}()
	waitInFlight(t, h, 1)
	first := leaseExpiry(t, h)
	// The lease (1 s hold) must be renewed for the call to go on: wait for
	// a renewal to show in the item.
	deadline := time.Now().Add(30 * time.Second)
	for leaseExpiry(t, h) == first {
		if time.Now().After(deadline) {
			t.Fatal("the lease was never renewed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.demo.OpenGate("g")
	if r := <-done; r.status != 200 {
		t.Fatalf("long call: %d %s", r.status, r.body)
	}
	if n := testkit.LeaseCount(t, h.env, "demo", lease.LeasesAttr); n != 0 {
		t.Errorf("%d leases left", n)
	}
}

func TestLostLeaseStopsTheCall(t *testing.T) {
	h := newHarness(t)
	lim := lease.New(h.env.Client, h.env.Tables.Leases, lease.Options{Margin: 200 * time.Millisecond})
	h.url = h.newGateway(lim, Options{MaxLeaseHold: time.Second})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "timeout": 30})
	done := make(chan response, 1)
	go func() {
		done <- h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":30000,"gate":"never"}}`)
	}()
	waitInFlight(t, h, 1)
	// Another instance purges the lease (as it would after a clock jump).
	_, err := h.env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                aws.String(h.env.Tables.Leases),
		Key:                      map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "demo"}},
		UpdateExpression:         aws.String("SET #l = :empty"),
		ExpressionAttributeNames: map[string]string{"#l": lease.LeasesAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":empty": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := <-done // ends only because its renewal found the lease gone
	h.expectFault(r, 503, fault.StoreUnavailable)
	if !strings.Contains(r.fault(t).Message, "slot") {
		t.Errorf("message = %q", r.fault(t).Message)
	}
}

// leaseExpiry returns the expiry of the one lease on "demo".
func leaseExpiry(t *testing.T, h *harness) string {
	t.Helper()
	out, err := h.env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(h.env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "demo"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := out.Item[lease.LeasesAttr].(*types.AttributeValueMemberM)
	if m == nil || len(m.Value) != 1 {
		t.Fatalf("leases = %v, want one", out.Item[lease.LeasesAttr])
	}
	for _, v := range m.Value {
		b, _ := json.Marshal(v)
		return string(b)
	}
	return ""
}

// countingAPI counts the lease writes a limiter sends.
type countingAPI struct {
	lease.API
	mu     sync.Mutex
	writes int
}

func (c *countingAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.API.UpdateItem(ctx, in, opts...)
}

// A call longer than its lease's hold renews it about twice per hold, and
// not back to back once less than a hold is left.
func TestRenewalsOfALongCall(t *testing.T) {
	h := newHarness(t)
	api := &countingAPI{API: h.env.Client}
	lim := lease.New(api, h.env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond})
	h.url = h.newGateway(lim, Options{MaxLeaseHold: time.Second})
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "timeout": 3})
	if r := h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":0}}`); r.status != 200 {
		t.Fatalf("warm-up: %d %s", r.status, r.body)
	}
	api.mu.Lock()
	api.writes = 0
	api.mu.Unlock()
	// Most of a 3 s timeout with a 1 s hold: renewals at about 0.5, 1, 1.5
	// and 2 s, the last covering the rest of the call's time.
	if r := h.call(h.key, `{"server_id":"demo","name":"slow_tool","arguments":{"ms":2900}}`); r.status != 200 {
		t.Fatalf("long call: %d %s", r.status, r.body)
	}
	api.mu.Lock()
	renewals := api.writes - 2 // less the acquire and the release
	api.mu.Unlock()
	if renewals < 1 || renewals > 6 {
		t.Errorf("%d renewal writes in a 2.9 s call with a 1 s hold, want 1 to 6", renewals)
	}
	t.Logf("%d renewal writes", renewals)
}
