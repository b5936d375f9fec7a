package main

// Request-rate limits, fleet-wide, over several gateway processes sharing
// one store: per server, per principal on a server, per tool and per key,
// judged by the upstream's own count of the calls it received.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// burstVia makes n calls of slow_tool (at once, not sleeping) at once,
// spread over gws, as key: the demo upstream counts them.
func burstVia(gws []*testkit.Gateway, key, server string, n int) []agentCall {
	return testkit.Burst(n, func(i int) agentCall {
		return callVia(gws[i%len(gws)].URL, key, server, "slow_tool", map[string]any{"ms": 0})
	})
}

// tally counts a burst's answers: admitted (200), rate limited (429
// RATE_LIMITED, each with a wait in both forms: retry_after_ms in the
// body and the Retry-After header, its whole seconds rounded up), and the
// longest advised wait.
func tally(t *testing.T, calls []agentCall) (ok, limited int, wait time.Duration) {
	t.Helper()
	for _, c := range calls {
		switch {
		case c.Status == http.StatusOK:
			ok++
		case c.Status == http.StatusTooManyRequests && c.Fault.Code == fault.RateLimited && retryAfterAgrees(c.Response):
			limited++
			wait = max(wait, c.RetryAfter())
		default:
			t.Errorf("unexpected answer: %d, Retry-After %q, %+v", c.Status, c.Header.Get("Retry-After"), c.Fault)
		}
	}
	return ok, limited, wait
}

// retryAfterAgrees reports whether an answer advises a wait in its body
// (retry_after_ms) and its Retry-After header, the header being that wait
// in whole seconds, rounded up.
func retryAfterAgrees(r testkit.Response) bool {
	secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
	ms := r.Fault.RetryAfterMS
	return err == nil && ms > 0 && secs >= 1 && int64(secs)*1000 >= ms && int64(secs-1)*1000 < ms
}

// TestRateLimitAcrossTheFleet: 40 calls at once against rpm_limit 30, over
// 4 processes: 30 (31 at most, a token refilled meanwhile) are admitted
// and reach the upstream, the rest are answered RATE_LIMITED with a wait
// (Retry-After and retry_after_ms), and a call after that wait passes.
func TestRateLimitAcrossTheFleet(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv, Demo: true, Key: true})
	gws := r.Start(4)
	r.PutServer(map[string]any{"server_id": "paid", "url": r.Demo.URL, "rpm_limit": 30})
	ok, limited, wait := tally(t, burstVia(gws, r.Key, "paid", 40))
	if ok < 30 || ok > 31 || ok+limited != 40 {
		t.Errorf("%d admitted, %d rate limited of 40; want 30 (31 at most) admitted, the rest limited", ok, limited)
	}
	if got := r.Demo.Stats().Calls; got != ok {
		t.Errorf("the upstream received %d calls; %d were admitted", got, ok)
	}
	if wait > 2*time.Second+100*time.Millisecond {
		t.Errorf("advised wait %v; a token comes every 2 s", wait)
	}
	time.Sleep(wait)
	if c := callVia(gws[0].URL, r.Key, "paid", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
		t.Errorf("a call after the advised wait: %+v", c)
	}
}

// TestRateLimitPerPrincipalAndTool: rpm_limit_per_principal limits each key
// on its own; a tool's rpm_limit limits that tool, whoever calls, below
// what the callers' own buckets would let through.
func TestRateLimitPerPrincipalAndTool(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv, Demo: true})
	keyA, keyB, keyC := r.PutKey("*"), r.PutKey("*"), r.PutKey("*")
	gws := r.Start(2)
	r.PutServer(map[string]any{"server_id": "shared", "url": r.Demo.URL, "rpm_limit_per_principal": 5,
		"tools": map[string]any{"slow_tool": map[string]any{"rpm_limit": 3}}})
	echo := func(key string, n int) []agentCall {
		return testkit.Burst(n, func(i int) agentCall {
			return callVia(gws[i%len(gws)].URL, key, "shared", "echo", map[string]any{"text": "x"})
		})
	}
	if ok, limited, _ := tally(t, echo(keyA, 8)); ok != 5 || limited != 3 {
		t.Errorf("key A: %d admitted, %d limited of 8; want 5 and 3", ok, limited)
	}
	if ok, _, _ := tally(t, echo(keyB, 2)); ok != 2 {
		t.Errorf("key B: %d of 2 admitted after A used its share; want both", ok)
	}
	// The tool's own bucket: 3 of slow_tool a minute, whoever calls. C,
	// with all 5 of its own tokens, sends 5 at once: the tool's bucket lets
	// 3 through; then B, with 3 of its own left, is refused the tool too.
	toolCalls := func(key string, n int) []agentCall {
		return testkit.Burst(n, func(i int) agentCall {
			return callVia(gws[i%len(gws)].URL, key, "shared", "slow_tool", map[string]any{"ms": 0})
		})
	}
	byTool := func(calls []agentCall) (n int) {
		for _, c := range calls {
			if c.Status == http.StatusTooManyRequests && strings.Contains(c.Fault.Message, `tool "slow_tool"`) {
				n++
			}
		}
		return n
	}
	c := toolCalls(keyC, 5)
	if ok, limited, _ := tally(t, c); ok != 3 || limited != 2 || byTool(c) != 2 {
		t.Errorf("key C: %d of 5 calls of slow_tool admitted, %d refused by the tool's bucket; want 3 and 2", ok, byTool(c))
	}
	b := toolCalls(keyB, 1)
	if ok, _, _ := tally(t, b); ok != 0 || byTool(b) != 1 {
		t.Errorf("key B: %d of 1 call of slow_tool admitted, %d refused by the tool's bucket; want 0 and 1", ok, byTool(b))
	}
	if got := r.Demo.Stats().Calls; got != 3 {
		t.Errorf("the upstream received %d calls of slow_tool; want the 3 admitted", got)
	}
}

// TestKeyRateLimitAcrossServers: a key's rpm_limit counts its calls to
// every server together.
func TestKeyRateLimitAcrossServers(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv, Demo: true})
	gws := r.Start(2)
	key := r.PutKey("*")
	testkit.UpdateKey(t, r.Env, key, "rpm_limit", 6)
	r.PutServer(map[string]any{"server_id": "one", "url": r.Demo.URL})
	r.PutServer(map[string]any{"server_id": "two", "url": r.Demo.URL})
	okOne, _, _ := tally(t, burstVia(gws, key, "one", 4))
	okTwo, limited, _ := tally(t, burstVia(gws, key, "two", 4))
	if okOne+okTwo != 6 || limited != 2 {
		t.Errorf("%d + %d admitted over two servers, %d limited; want 6 in all", okOne, okTwo, limited)
	}
	if got := r.Demo.Stats().Calls; got != okOne+okTwo {
		t.Errorf("the upstream received %d calls; %d were admitted", got, okOne+okTwo)
	}
}

// TestRateLimitOverMCP: on the MCP routes a rate-limited call is a tool
// result with isError, whose structuredContent is the error object.
func TestRateLimitOverMCP(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv, Demo: true, Key: true})
	gw := r.StartGateway()
	r.PutServer(map[string]any{"server_id": "paid", "url": r.Demo.URL, "rpm_limit": 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := agentSession(ctx, t, gw.URL+"/mcp/paid", r.Key)
	args := map[string]any{"ms": 0}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow_tool", Arguments: args}); err != nil || res.IsError {
		t.Fatalf("first call: %+v, %v", res, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow_tool", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := res.StructuredContent.(map[string]any)
	sc, _ := body["error"].(map[string]any)
	if !res.IsError || sc["code"] != string(fault.RateLimited) || sc["retryable"] != true || sc["retry_after_ms"] == nil {
		t.Errorf("second call: isError %v, structuredContent %v; want RATE_LIMITED, retryable, with retry_after_ms", res.IsError, sc)
	}
	if got := r.Demo.Stats().Calls; got != 1 {
		t.Errorf("the upstream received %d calls; want 1", got)
	}
}

// TestUpstreamRateLimitError: an upstream's own JSON-RPC rate-limit error
// (-32023) reaches a REST caller as 429 RATE_LIMITED with a fixed wait of
// 1 s (Retry-After: 1, retry_after_ms 1000), and an MCP caller as the
// upstream's error itself; on both routes the call counts in the EMF
// metric RateLimited, as the gateway's own refusals do.
func TestUpstreamRateLimitError(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{Key: true})
	var calls atomic.Int64
	s := mcp.NewServer(&mcp.Implementation{Name: "quota", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "search", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			calls.Add(1)
			return nil, &jsonrpc.Error{Code: upstream.CodeRateLimited, Message: "quota exhausted"}
		})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(up.Close)
	gw := r.StartGateway("EMF_METRICS=on")
	r.PutServer(map[string]any{"server_id": "quota", "url": up.URL})

	c := callVia(gw.URL, r.Key, "quota", "search", map[string]any{})
	if c.Status != http.StatusTooManyRequests || c.Fault.Code != fault.RateLimited || !c.Fault.Retryable ||
		c.Header.Get("Retry-After") != "1" || c.Fault.RetryAfterMS != 1000 || !strings.Contains(c.Fault.Message, "quota exhausted") {
		t.Errorf("REST: %d, Retry-After %q, %+v; want 429 RATE_LIMITED, retryable, a wait of 1 s, the upstream's message",
			c.Status, c.Header.Get("Retry-After"), c.Fault)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := agentSession(ctx, t, gw.URL+"/mcp/quota", r.Key)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search", Arguments: map[string]any{}})
	var re *jsonrpc.Error
	if !errors.As(err, &re) || re.Code != upstream.CodeRateLimited || re.Message != "quota exhausted" {
		t.Errorf("MCP: result %+v, error %v; want the upstream's JSON-RPC error %d as it was", res, err, upstream.CodeRateLimited)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the upstream received %d calls; want 2", n)
	}

	// Each call's record is written as it ends, and read from the
	// process's stdout as it comes.
	counted := func() (n int) {
		for line := range strings.Lines(gw.Stdout()) {
			var rec struct {
				ServerID    string
				RateLimited int
				Outcome     string
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.ServerID == "quota" && rec.RateLimited == 1 && rec.Outcome == string(fault.RateLimited) {
				n++
			}
		}
		return n
	}
	for counted() < 2 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if n := counted(); n != 2 {
		t.Errorf("%d EMF records count RateLimited for server quota; want 2 (REST and MCP):\n%s", n, gw.Stdout())
	}
}
