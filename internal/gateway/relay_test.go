package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// relayFault is the gateway's detail in the JSON-RPC error of a relayed
// request, the zero Detail when it succeeded.
func relayFault(t *testing.T, err error) fault.Detail {
	t.Helper()
	if err == nil {
		return fault.Detail{}
	}
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) {
		t.Fatalf("relayed request: %v, want a JSON-RPC error", err)
	}
	var d fault.Detail
	if err := json.Unmarshal(rpcErr.Data, &d); err != nil {
		t.Fatalf("relayed request: error %+v has no gateway detail", rpcErr)
	}
	return d
}

// relayedRequests send each request the gateway relays to the demo
// upstream, which holds it ms milliseconds.
var relayedRequests = map[string]func(ctx context.Context, cs *mcp.ClientSession, ms string) error{
	"resources/read": func(ctx context.Context, cs *mcp.ClientSession, ms string) error {
		_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://slow/" + ms})
		return err
	},
	"prompts/get": func(ctx context.Context, cs *mcp.ClientSession, ms string) error {
		_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "slow_prompt", Arguments: map[string]string{"ms": ms}})
		return err
	},
	"completion/complete": func(ctx context.Context, cs *mcp.ClientSession, ms string) error {
		_, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "slow_prompt"},
			Argument: mcp.CompleteParamsArgument{Name: "ms", Value: ms}})
		return err
	},
}

// TestRelaysTakeAPlace: resources/read, prompts/get and
// completion/complete on /mcp/{server_id} take a place under the server's
// cap as a tool call does, and give it back when they return; the lists
// take none.
func TestRelaysTakeAPlace(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 1, "on_limit": "shed"})
	ctx := context.Background()
	for method, send := range relayedRequests {
		t.Run(method, func(t *testing.T) {
			holder := h.connect("/mcp/demo", h.key, "2025-11-25", nil)
			other := h.connect("/mcp/demo", h.key, "2025-11-25", nil)
			h.demo.SetHang(true)
			done := make(chan error, 1)
			go func() { done <- send(ctx, holder, "60000") }()
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := h.demo.WaitInFlight(wctx, 1); err != nil {
				t.Fatal(err)
			}
			if n := testkit.LeaseCount(t, h.env, "demo", lease.LeasesAttr); n != 1 {
				t.Errorf("%s holds %d places, want 1", method, n)
			}
			// The one place is taken: every relayed request, and a tool
			// call, is refused; the lists are not admitted.
			for m, s := range relayedRequests {
				if d := relayFault(t, s(ctx, other, "0")); d.Code != fault.AtCapacity {
					t.Errorf("%s while %s holds the place: %+v, want AT_CAPACITY", m, method, d)
				}
			}
			res, err := other.CallTool(ctx, &mcp.CallToolParams{Name: "slow_tool", Arguments: map[string]any{"ms": 0}})
			if err != nil || !res.IsError {
				t.Errorf("a tool call while %s holds the place: %+v, %v; want AT_CAPACITY", method, res, err)
			}
			if _, err := other.ListResources(ctx, nil); err != nil {
				t.Errorf("resources/list while %s holds the place: %v", method, err)
			}
			if _, err := other.ListPrompts(ctx, nil); err != nil {
				t.Errorf("prompts/list while %s holds the place: %v", method, err)
			}
			if calls := h.demo.Stats().Calls; calls != 1 {
				t.Errorf("the upstream saw %d requests, want the one that holds the place", calls)
			}
			h.demo.SetHang(false)
			if err := <-done; err != nil {
				t.Fatalf("%s: %v", method, err)
			}
			// Given back on return.
			if n := testkit.LeaseCount(t, h.env, "demo", lease.LeasesAttr); n != 0 {
				t.Errorf("%s left %d places taken", method, n)
			}
			if err := send(ctx, other, "0"); err != nil {
				t.Errorf("%s once the place is free: %v", method, err)
			}
			h.demo.Reset()
		})
	}
}

// TestRelaysTakeTheKeysLimits: a key's max_parallel_requests and rpm_limit
// count its relayed requests, on a server with no limits of its own.
func TestRelaysTakeTheKeysLimits(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	key := testkit.PutKeyAs(t, h.env, auth.Key{Servers: []string{"*"}, MaxParallel: 1, RPMLimit: 2})
	cs := h.connect("/mcp/demo", key, "2025-11-25", nil)
	h.demo.SetHang(true)
	done := make(chan error, 1)
	go func() { done <- relayedRequests["resources/read"](ctx, cs, "60000") }()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.demo.WaitInFlight(wctx, 1); err != nil {
		t.Fatal(err)
	}
	if d := relayFault(t, relayedRequests["prompts/get"](ctx, cs, "0")); d.Code != fault.AtCapacity || d.Reason != "key_parallel" {
		t.Errorf("a second request of a key limited to 1 at a time: %+v, want AT_CAPACITY key_parallel", d)
	}
	h.demo.SetHang(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Its first read and a refusal gave back its token: one left of 2.
	if err := relayedRequests["completion/complete"](ctx, cs, "0"); err != nil {
		t.Errorf("the key's second request: %v", err)
	}
	if d := relayFault(t, relayedRequests["resources/read"](ctx, cs, "0")); d.Code != fault.RateLimited {
		t.Errorf("the key's third request in a minute, rpm_limit 2: %+v, want RATE_LIMITED", d)
	}
	if calls := h.demo.Stats().Calls; calls != 2 {
		t.Errorf("the upstream saw %d requests of the key, want 2", calls)
	}
}

// TestRelaysArePausedPerPrincipal: an upstream's 429 with Retry-After to
// one key's tool call pauses that key's relayed requests to the server,
// on the server's lease item, and not another key's.
func TestRelaysArePausedPerPrincipal(t *testing.T) {
	h := newHarness(t)
	h.server(map[string]any{"server_id": "demo", "url": h.demo.URL, "max_concurrent_requests": 4, "on_limit": "shed", "max_pause": 30})
	ctx := context.Background()
	other := testkit.PutKey(t, h.env, "*")
	a := h.connect("/mcp/demo", h.key, "2025-11-25", nil)
	b := h.connect("/mcp/demo", other, "2025-11-25", nil)
	res, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "slow_tool", Arguments: map[string]any{"retry_after": 60}})
	if err != nil || !res.IsError {
		t.Fatalf("a call answered 429: %+v, %v", res, err)
	}
	for m, s := range relayedRequests {
		d := relayFault(t, s(ctx, a, "0"))
		if d.Code != fault.AtCapacity || d.Reason != lease.Paused || d.RetryAfterMS <= 0 || d.RetryAfterMS > 30000 {
			t.Errorf("%s of the paused key: %+v; want AT_CAPACITY paused, at most max_pause (30 s)", m, d)
		}
		if err := s(ctx, b, "0"); err != nil {
			t.Errorf("%s of another key: %v; want it through", m, err)
		}
	}
}
