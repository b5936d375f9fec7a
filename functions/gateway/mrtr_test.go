package main

// TestInputRequired: multi-round-trip tool calls (MCP 2026-07-28,
// SEP-2322) through gateway processes, with the Go SDK as the client
// answering an elicitation, over raw HTTP across two instances, and over
// the REST route; the slot is free while the client answers, and every
// replayed or altered state, and one whose server now points at another
// upstream, is refused before the upstream sees it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/testkit"
)

// confirmUpstream is a stateless 2026-07-28 MCP server whose tool confirm
// asks the client to confirm the item before it completes.
type confirmUpstream struct {
	URL      string
	calls    atomic.Int64 // every tools/call of confirm
	inFlight atomic.Int64
}

func startConfirmUpstream(t *testing.T) *confirmUpstream {
	t.Helper()
	u := &confirmUpstream{}
	s := mcp.NewServer(&mcp.Implementation{Name: "confirm-upstream", Version: "1"}, nil)
	type args struct {
		Item string `json:"item"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "confirm", Description: "Asks the client to confirm, then confirms."},
		func(ctx context.Context, req *mcp.CallToolRequest, in args) (*mcp.CallToolResult, any, error) {
			u.calls.Add(1)
			u.inFlight.Add(1)
			defer u.inFlight.Add(-1)
			want := "state:" + in.Item
			if r, ok := req.Params.InputResponses["ok"].(*mcp.ElicitResult); ok && r.Action == "accept" && req.Params.RequestState == want {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "confirmed " + in.Item}}}, nil, nil
			}
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{
					Message:         "Confirm " + in.Item + "?",
					RequestedSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ok": {Type: "boolean"}}},
				}},
				RequestState: want,
			}, nil, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(srv.Close)
	u.URL = srv.URL
	return u
}

// rpcReply is a JSON-RPC answer as the wire carries it.
type rpcReply struct {
	status int
	Result struct {
		ResultType    string                     `json:"resultType"`
		RequestState  string                     `json:"requestState"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		Content       []struct{ Text string }    `json:"content"`
		IsError       bool                       `json:"isError"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// callRaw sends one tools/call as a 2026-07-28 client does (or, with
// version 2025-11-25, as an older one does) and decodes the answer.
func callRaw(t *testing.T, url, key, version, name string, args, caps map[string]any, responses map[string]any, state string) rpcReply {
	t.Helper()
	params := map[string]any{"name": name, "arguments": args}
	if version >= "2026-07-28" {
		params["_meta"] = map[string]any{
			"io.modelcontextprotocol/protocolVersion":    version,
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": caps,
		}
	}
	if responses != nil {
		params["inputResponses"] = responses
	}
	if state != "" {
		params["requestState"] = state
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", version)
	if version >= "2026-07-28" {
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The answer is the stream's last message.
		for line := range strings.Lines(string(raw)) {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				raw = []byte(data)
			}
		}
	}
	var r rpcReply
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s: status %d, undecodable answer %q: %v", name, resp.StatusCode, raw, err)
	}
	r.status = resp.StatusCode
	return r
}

var accept = map[string]any{"ok": map[string]any{"action": "accept", "content": map[string]any{"ok": true}}}

func TestInputRequired(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{})
	up := startConfirmUpstream(t)
	rig.PutServer(map[string]any{"server_id": "mrtr", "url": up.URL, "max_concurrent_requests": 1})
	rig.PutServer(map[string]any{"server_id": "other", "url": up.URL, "max_concurrent_requests": 1})
	key := rig.PutKey("mrtr", "other")
	key2 := rig.PutKey("mrtr")
	shared := []string{"REQUEST_STATE_KEY=env:MCPGATE_TEST_STATE_SECRET", "MCPGATE_TEST_STATE_SECRET=" + strings.Repeat("k", 40)}
	a := rig.StartGateway(shared...)
	b := rig.StartGateway(shared...)
	elicit := map[string]any{"elicitation": map[string]any{}}

	for _, tc := range []struct{ name, path, tool string }{
		{"passthrough", "/mcp/mrtr", "confirm"},
		{"aggregated", "/mcp", "mrtr-confirm"},
	} {
		t.Run("Go SDK client "+tc.name, func(t *testing.T) {
			var asked atomic.Int64
			c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked.Add(1)
					// While the person answers, nothing runs upstream and
					// no slot is held.
					if n := up.inFlight.Load(); n != 0 {
						t.Errorf("upstream has %d calls in flight while the client answers, want 0", n)
					}
					if n := testkit.LeaseCount(t, rig.Env, "mrtr", "leases"); n != 0 {
						t.Errorf("%d slot(s) of mrtr held while the client answers, want 0", n)
					}
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
				},
			})
			cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{
				Endpoint: a.URL + tc.path, HTTPClient: &http.Client{Transport: bearer{key}}, DisableStandaloneSSE: true,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			before := up.calls.Load()
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{"item": "invoice-7"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "confirmed invoice-7" || asked.Load() != 1 {
				t.Errorf("result %+v after %d elicitation(s); want confirmed invoice-7 after 1", res.Content, asked.Load())
			}
			if n := up.calls.Load() - before; n != 2 {
				t.Errorf("upstream saw %d calls, want 2 (the first and the retry)", n)
			}
		})
	}

	// The first call on one instance, the retry on another.
	first := callRaw(t, a.URL+"/mcp/mrtr", key, "2026-07-28", "confirm", map[string]any{"item": "x"}, elicit, nil, "")
	if first.Error != nil || first.Result.ResultType != "input_required" || first.Result.RequestState == "" || first.Result.InputRequests["ok"] == nil {
		t.Fatalf("first call: %+v; want input_required with a requestState", first)
	}
	if strings.Contains(first.Result.RequestState, "state:x") {
		t.Errorf("requestState %q shows the upstream's state", first.Result.RequestState)
	}
	if n := testkit.LeaseCount(t, rig.Env, "mrtr", "leases"); n != 0 {
		t.Errorf("%d slot(s) held after input_required, want 0", n)
	}
	state := first.Result.RequestState
	t.Run("retry on another instance", func(t *testing.T) {
		r := callRaw(t, b.URL+"/mcp/mrtr", key, "2026-07-28", "confirm", map[string]any{"item": "x"}, elicit, accept, state)
		if r.Error != nil || r.Result.ResultType != "complete" || len(r.Result.Content) != 1 || r.Result.Content[0].Text != "confirmed x" {
			t.Fatalf("retry: %+v; want confirmed x", r)
		}
	})

	t.Run("refused: replayed on the same instance", func(t *testing.T) {
		before := up.calls.Load()
		r := callRaw(t, b.URL+"/mcp/mrtr", key, "2026-07-28", "confirm", map[string]any{"item": "x"}, elicit, accept, state)
		if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "used already") {
			t.Errorf("got HTTP %d %+v; want -32602: used already", r.status, r.Error)
		}
		if n := up.calls.Load() - before; n != 0 {
			t.Errorf("the upstream was called %d time(s), want none", n)
		}
	})
	t.Run("refused: the server now points at another upstream", func(t *testing.T) {
		moved := startConfirmUpstream(t)
		testkit.PutServer(t, rig.Env, map[string]any{"server_id": "moving", "url": up.URL})
		mover := testkit.PutKey(t, rig.Env, "moving")
		first := callRaw(t, a.URL+"/mcp/moving", mover, "2026-07-28", "confirm", map[string]any{"item": "m"}, elicit, nil, "")
		if first.Result.RequestState == "" {
			t.Fatalf("first call: %+v; want input_required", first)
		}
		testkit.PutServer(t, rig.Env, map[string]any{"server_id": "moving", "url": moved.URL})
		fresh := rig.Launch(t, 1, shared...)[0] // reads the item anew
		r := callRaw(t, fresh.URL+"/mcp/moving", mover, "2026-07-28", "confirm", map[string]any{"item": "m"}, elicit, accept, first.Result.RequestState)
		if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "requestState") {
			t.Errorf("got HTTP %d %+v; want -32602 naming requestState", r.status, r.Error)
		}
		if n := moved.calls.Load(); n != 0 {
			t.Errorf("the new upstream was called %d time(s) with the old one's state, want none", n)
		}
	})

	c := rig.StartGateway() // a key of its own
	// The same key, with a clock past the state's 10-minute expiry.
	late := rig.StartGateway(append(shared, "GATEWAY_TEST_CLOCK_OFFSET=10m1s")...)
	tampered := []byte(state)
	tampered[len(tampered)/2] ^= 'A' ^ 'B'
	for _, tc := range []struct {
		name, url, key, state string
		args                  map[string]any
	}{
		{"tampered", b.URL + "/mcp/mrtr", key, string(tampered), map[string]any{"item": "x"}},
		{"appended", b.URL + "/mcp/mrtr", key, state + "-TAMPERED", map[string]any{"item": "x"}},
		{"the upstream's own state", b.URL + "/mcp/mrtr", key, "state:x", map[string]any{"item": "x"}},
		{"other server", b.URL + "/mcp/other", key, state, map[string]any{"item": "x"}},
		{"other principal", b.URL + "/mcp/mrtr", key2, state, map[string]any{"item": "x"}},
		{"other arguments", b.URL + "/mcp/mrtr", key, state, map[string]any{"item": "y"}},
		{"another fleet's key", c.URL + "/mcp/mrtr", key, state, map[string]any{"item": "x"}},
		{"expired", late.URL + "/mcp/mrtr", key, state, map[string]any{"item": "x"}},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			before := up.calls.Load()
			r := callRaw(t, tc.url, tc.key, "2026-07-28", "confirm", tc.args, elicit, accept, tc.state)
			if r.Error == nil || r.Error.Code != -32602 || r.status != http.StatusBadRequest || !strings.Contains(r.Error.Message, "requestState") {
				t.Errorf("got HTTP %d %+v; want HTTP 400 with -32602 naming requestState", r.status, r.Error)
			}
			if n := up.calls.Load() - before; n != 0 {
				t.Errorf("the upstream was called %d time(s), want none", n)
			}
		})
	}

	t.Run("undeclared input kind", func(t *testing.T) {
		r := callRaw(t, a.URL+"/mcp/mrtr", key, "2026-07-28", "confirm", map[string]any{"item": "x"}, map[string]any{"sampling": map[string]any{}}, nil, "")
		if r.Error == nil || r.Error.Code != -32021 || r.status != http.StatusBadRequest || !strings.Contains(r.Error.Message, "elicitation") {
			t.Errorf("got HTTP %d %+v; want HTTP 400 with -32021 naming elicitation", r.status, r.Error)
		}
	})
	t.Run("older protocol", func(t *testing.T) {
		r := callRaw(t, a.URL+"/mcp/mrtr", key, "2025-11-25", "confirm", map[string]any{"item": "x"}, nil, nil, "")
		if r.Error == nil || !strings.Contains(r.Error.Message, "2026-07-28") || !strings.Contains(r.Error.Message, "2025-11-25") {
			t.Errorf("got %+v; want an error naming the protocol needed and the one used", r.Error)
		}
	})
	t.Run("REST", func(t *testing.T) {
		rest := func(body map[string]any) map[string]any {
			r, err := testkit.Post(t.Context(), b.URL+"/mcp-rest/tools/call", key, body)
			if err != nil {
				t.Fatal(err)
			}
			var out map[string]any
			if err := json.Unmarshal(r.Body, &out); err != nil || r.Status != http.StatusOK {
				t.Fatalf("HTTP %d %s", r.Status, r.Body)
			}
			return out
		}
		call := map[string]any{"server_id": "mrtr", "name": "confirm", "arguments": map[string]any{"item": "z"}, "client_capabilities": elicit}
		out := rest(call)
		st, _ := out["requestState"].(string)
		if out["resultType"] != "input_required" || st == "" {
			t.Fatalf("first call: %v; want input_required", out)
		}
		call["input_responses"], call["request_state"] = accept, st
		out = rest(call)
		if fmt.Sprint(out["content"]) != "[map[text:confirmed z type:text]]" {
			t.Errorf("retry: %v; want confirmed z", out)
		}
	})
}
