package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/store"
)

// TestCallMustFitTheRequestTimeout: with a 10 s request timeout (the
// function's), a call whose timeout, plus the time it may wait for a
// slot, plus the 0.5 s answer reserve, is longer is refused before it
// takes a slot; one that fits runs.
func TestCallMustFitTheRequestTimeout(t *testing.T) {
	h := newHarnessWith(t, Options{RequestTimeout: 10 * time.Second})
	url := h.demo.URL
	for _, doc := range []map[string]any{
		// 5 + 4 + 0.5 fits.
		{"server_id": "fits", "url": url, "max_concurrent_requests": 1, "timeout": 5, "queue_timeout": 4},
		// 9.5 + 0.5 fits exactly.
		{"server_id": "exact", "url": url, "max_concurrent_requests": 1, "timeout": 9.5, "on_limit": "shed"},
		// 9 + the default queue_timeout (10) + 0.5 does not.
		{"server_id": "queued", "url": url, "max_concurrent_requests": 1, "timeout": 9},
		// Shedding servers and uncapped ones never wait for a slot.
		{"server_id": "shed", "url": url, "max_concurrent_requests": 1, "timeout": 9, "queue_timeout": 60, "on_limit": "shed"},
		{"server_id": "uncapped", "url": url, "timeout": 9, "queue_timeout": 60},
		// One with a rate limit waits its turn for a token beside waiters.
		{"server_id": "rated", "url": url, "timeout": 9, "queue_timeout": 60, "rpm_limit": 100},
		// 10 + 0.5 does not, even without a cap.
		{"server_id": "long", "url": url, "timeout": 10},
		// A tool's own timeout is what its calls take.
		{"server_id": "tools", "url": url, "timeout": 30, "tools": map[string]any{"echo": map[string]any{"timeout": 2}}},
	} {
		h.server(doc)
	}
	tests := []struct {
		server, tool string
		fits         bool
	}{
		{"fits", "echo", true},
		{"exact", "echo", true},
		{"queued", "echo", false},
		{"shed", "echo", true},
		{"uncapped", "echo", true},
		{"rated", "echo", false},
		{"long", "echo", false},
		{"tools", "echo", true},
		{"tools", "slow_tool", false},
	}
	for _, tt := range tests {
		t.Run(tt.server+"/"+tt.tool, func(t *testing.T) {
			h := &harness{t: t, env: h.env, demo: h.demo, url: h.url, key: h.key, logs: h.logs}
			args := `{"text":"x"}`
			if tt.tool == "slow_tool" {
				args = `{"ms":0}`
			}
			r := h.call(h.key, `{"server_id":"`+tt.server+`","name":"`+tt.tool+`","arguments":`+args+`}`)
			if tt.fits {
				if r.status != 200 || strings.Contains(string(r.body), `"isError":true`) {
					t.Fatalf("status %d: %s, want a result", r.status, r.body)
				}
				return
			}
			d := h.expectFault(r, 502, fault.Misconfigured)
			if !strings.Contains(d.Message, "10s request time") {
				t.Errorf("message %q does not say what the call must fit", d.Message)
			}
			// Refused before it took a slot: no lease item was written.
			out, err := h.env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
				TableName:      aws.String(h.env.Tables.Leases),
				Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: tt.server}},
				ConsistentRead: aws.Bool(true),
			})
			if err != nil {
				t.Fatal(err)
			}
			if out.Item != nil {
				t.Errorf("the refused call wrote the lease item %v", out.Item)
			}
		})
	}
	if !strings.Contains(h.logs.String(), `exceeds the request timeout 10s`) {
		t.Error("the log does not explain a refused call")
	}

	// Over MCP the refusal is a tool error carrying the same code.
	cs := h.connect("/mcp", h.key, "", nil)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "long-echo", Arguments: map[string]any{"text": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if !res.IsError || !strings.Contains(string(b), string(fault.Misconfigured)) {
		t.Errorf("MCP call of a server that cannot fit: %s, want an isError result with %s", b, fault.Misconfigured)
	}
}
