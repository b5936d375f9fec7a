package demoupstream

import (
	"context"
	"encoding/json"
	"net/http/httptest"
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
