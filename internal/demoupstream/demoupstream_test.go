package demoupstream

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func connect(t *testing.T, d *Demo) *mcp.ClientSession {
	t.Helper()
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestSlowToolCountsInFlight(t *testing.T) {
	d := New()
	cs := connect(t, d)
	var wg sync.WaitGroup
	results := make([]*mcp.CallToolResult, 3)
	for i := range results {
		wg.Go(func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
				Name: "slow_tool", Arguments: map[string]any{"ms": 60000, "until_in_flight": 3},
			})
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = res
		})
	}
	wg.Wait()
	if s := d.Stats(); s.Peak != 3 || s.Calls != 3 || s.InFlight != 0 {
		t.Errorf("stats = %+v, want peak 3, 3 calls, none in flight", s)
	}
	for _, res := range results {
		if res == nil || res.IsError {
			t.Fatalf("result = %+v", res)
		}
		m := res.StructuredContent.(map[string]any)
		if m["peak"].(float64) < 1 {
			t.Errorf("structured content = %v", m)
		}
	}
}

func TestGateHoldsUntilOpened(t *testing.T) {
	d := New()
	cs := connect(t, d)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_tool", Arguments: map[string]any{"ms": 60000, "gate": "g"}})
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("call returned before the gate opened: %v", err)
	default:
	}
	d.OpenGate("g")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestFailToolIsAToolError(t *testing.T) {
	cs := connect(t, New())
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fail_tool"})
	if err != nil {
		t.Fatalf("protocol error %v, want a tool error result", err)
	}
	if !res.IsError {
		t.Error("IsError not set")
	}
}

func TestRecordEvents(t *testing.T) {
	d := New()
	cs := connect(t, d)
	call := func() {
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_tool", Arguments: map[string]any{"ms": 0}}); err != nil {
			t.Fatal(err)
		}
	}
	call()
	if n := len(d.Events()); n != 0 {
		t.Fatalf("%d events logged before recording", n)
	}
	d.RecordEvents(true)
	call()
	call()
	ev := d.Events()
	if len(ev) != 4 || !ev[0].Enter || ev[1].Enter || !ev[2].Enter || ev[3].Enter {
		t.Fatalf("events %+v, want enter, exit, enter, exit", ev)
	}
	for i := 1; i < len(ev); i++ {
		if ev[i].At.Before(ev[i-1].At) {
			t.Fatalf("event %d is earlier than event %d", i, i-1)
		}
	}
	d.RecordEvents(false)
	call()
	if n := len(d.Events()); n != 4 {
		t.Fatalf("%d events after recording stopped, want 4", n)
	}
}

// TestSlowToolSchema: every property of slow_tool's input schema has one
// type (ms an integer, not ["null","integer"]), and a call without ms is
// still accepted.
func TestSlowToolSchema(t *testing.T) {
	cs := connect(t, New())
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatal(err)
		}
		for name, p := range schema.Properties {
			if _, one := p.Type.(string); !one {
				t.Errorf("%s.%s has type %v, want one type", tool.Name, name, p.Type)
			}
		}
		if tool.Name == "slow_tool" && schema.Properties["ms"].Type != "integer" {
			t.Errorf("slow_tool ms has type %v, want integer", schema.Properties["ms"].Type)
		}
	}
	call, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_tool", Arguments: map[string]any{"until_in_flight": 1}})
	if err != nil || call.IsError {
		t.Fatalf("slow_tool without ms: %v %+v", err, call)
	}
}

// TestRelayedRequestsCount: a read of demo://slow/{ms}, a get of
// slow_prompt and a completion of its ms hold and count as slow_tool's
// calls do.
func TestRelayedRequestsCount(t *testing.T) {
	d := New()
	cs := connect(t, d)
	ctx := context.Background()
	d.SetHang(true)
	errs := make(chan error, 3)
	go func() {
		_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://slow/60000"})
		errs <- err
	}()
	go func() {
		_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "slow_prompt", Arguments: map[string]string{"ms": "60000"}})
		errs <- err
	}()
	go func() {
		_, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "slow_prompt"},
			Argument: mcp.CompleteParamsArgument{Name: "ms", Value: "60000"}})
		errs <- err
	}()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.WaitInFlight(wctx, 3); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s.Peak != 3 || s.Calls != 3 {
		t.Errorf("stats %+v, want 3 calls, peak 3", s)
	}
	d.SetHang(false)
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://slow/0"})
	if err != nil {
		t.Fatal(err)
	}
	var got SlowResult
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &got); err != nil || got.InFlightAtEntry != 1 || got.Peak != 3 {
		t.Errorf("read demo://slow/0: %+v, %v; want 1 in flight at entry, peak 3", got, err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://slow/x"}); err == nil {
		t.Error("demo://slow/x was read")
	}
}

// TestRetryAfterArgument: over HTTP, a slow_tool call or slow_api request
// with retry_after is answered 429 with that Retry-After, and a slow_tool
// call with fail_status that status, without running.
func TestRetryAfterArgument(t *testing.T) {
	d := New()
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow_tool","arguments":{"ms":0,"retry_after":7}}}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for _, r := range []*http.Request{req, httptest.NewRequest(http.MethodGet, srv.URL+"/api/slow?ms=0&retry_after=7", nil)} {
		r.RequestURI = ""
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "7" {
			t.Errorf("%s %s: %d, Retry-After %q; want 429 with 7", r.Method, r.URL.Path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	failing := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_tool","arguments":{"fail_status":502}}}`
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(failing))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Errorf("fail_status 502: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if n := d.Stats().Calls; n != 0 {
		t.Errorf("%d calls ran", n)
	}
	// In memory there is no HTTP answer to give: a tool error.
	ct, st := mcp.NewInMemoryTransports()
	ss, err := d.Server().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_tool", Arguments: map[string]any{"retry_after": 7}})
	if err != nil || !res.IsError {
		t.Errorf("retry_after over the SDK's own transport: %+v, %v", res, err)
	}
}
