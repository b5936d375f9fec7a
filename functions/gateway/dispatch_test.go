package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestDispatchTellsEventsApart: the function's handler gives a Function
// URL event to the URL's handler whatever its body says, and refuses an
// mcpgate event of a kind it does not know (no worker runs for it).
func TestDispatchTellsEventsApart(t *testing.T) {
	var got []string
	url := func(_ context.Context, r *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
		got = append(got, r.RawPath)
		return &events.LambdaFunctionURLStreamingResponse{StatusCode: 200}, nil
	}
	h := dispatch(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), url, nil)
	req, _ := json.Marshal(events.LambdaFunctionURLRequest{RawPath: "/mcp", Body: `{"mcpgate":"sweep"}`,
		Headers: map[string]string{"mcpgate": "task"}})
	if _, err := h(context.Background(), req); err != nil || len(got) != 1 || got[0] != "/mcp" {
		t.Fatalf("a Function URL event whose body and headers name mcpgate events: %v, served %v; want it served as a request", err, got)
	}
	if _, err := h(context.Background(), json.RawMessage(`{"mcpgate":"shutdown"}`)); err == nil || len(got) != 1 {
		t.Errorf("an unknown mcpgate event: %v (URL handler called %d times); want refused", err, len(got))
	}
	if _, err := h(context.Background(), json.RawMessage(`{"mcpgate":"task","task":"tsk_x"}`)); err == nil {
		t.Error("a task event without its server: accepted; want refused")
	}
}
