package main

// Hostile agents and hostile upstreams against the gateway binary: each
// test runs the real gateway process in front of testkit.Hostile (an MCP
// server and plain HTTP API that misbehave on purpose) and the demo
// upstream, on loopback.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// newHostile is the hostile tests' rig: one gateway process, with extra
// in its environment, in front of the hostile upstream and the demo
// upstream (server "demo"), and a key for every server.
func newHostile(t *testing.T, extra ...string) *testkit.Rig {
	t.Helper()
	r := testkit.NewRig(t, testkit.RigOptions{Env: []string{"REGISTRY_CACHE_TTL=100ms"}, Hostile: true, Demo: true, Key: true})
	r.PutServer(map[string]any{"server_id": "demo", "url": r.Demo.URL})
	r.StartGateway(extra...)
	return r
}

// restCall calls a tool through r's gateway over the REST route, within
// the client deadline d.
func restCall(r *testkit.Rig, d time.Duration, serverID, tool string, args any) (testkit.Response, fault.Detail) {
	r.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := testkit.Post(ctx, r.Gateway(0).URL+"/mcp-rest/tools/call", r.Key, map[string]any{"server_id": serverID, "name": tool, "arguments": args})
	if err != nil {
		r.T.Errorf("%s/%s: %v (the gateway did not answer within %v)", serverID, tool, err, d)
		return resp, fault.Detail{}
	}
	return resp, resp.Fault
}

// rpcAnswer is a JSON-RPC answer from the MCP route.
type rpcAnswer struct {
	status int
	header http.Header
	body   []byte
	Result struct {
		IsError           bool            `json:"isError"`
		Content           []mcpText       `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		Tools             []struct {
			Name string `json:"name"`
		} `json:"tools"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type mcpText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// mcpPost posts one JSON-RPC body to path of r's gateway (with the key),
// as a stateless client of protocol version (none if "").
func mcpPost(r *testkit.Rig, d time.Duration, path, version, body string) rpcAnswer {
	r.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.Gateway(0).URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+r.Key)
	if version != "" {
		req.Header.Set("MCP-Protocol-Version", version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.T.Errorf("POST %s: %v", path, err)
		return rpcAnswer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := rpcAnswer{status: resp.StatusCode, header: resp.Header, body: b}
	msg := b
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The answer is the stream's last message.
		for line := range bytes.SplitSeq(b, []byte("\n")) {
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				msg = data
			}
		}
	}
	_ = json.Unmarshal(msg, &a)
	return a
}

func toolCall(id int, name string, args any) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": name, "arguments": args}})
	return string(b)
}

// requestRecords selects the gateway's request records.
var requestRecords = testkit.Match{"msg": "request"}

// waitRecords waits until r's gateway has logged n request records (the
// log line may follow the answer), and returns those whose fields include
// every key=value of match.
func waitRecords(r *testkit.Rig, n int, match testkit.Match) []map[string]any {
	r.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw := r.Gateway(0)
	if err := gw.WaitLogs(ctx, func(logs string) bool { return len(testkit.Records(logs, requestRecords)) >= n }); err != nil {
		r.T.Errorf("waiting for %d request records: %v", n, err)
	}
	return gw.Records(requestRecords, match)
}

// TestHostileBatchesAreRefused: a JSON-RPC batch is refused whatever the
// protocol version (or none, which means 2025-03-26, where batches
// existed), before any of its calls runs.
func TestHostileBatchesAreRefused(t *testing.T) {
	r := newHostile(t)
	items := make([]string, 200)
	for i := range items {
		items[i] = toolCall(i, "demo-echo", map[string]any{"text": "x"})
	}
	batch := "[" + strings.Join(items, ",") + "]"
	for _, version := range []string{"", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"} {
		for _, path := range []string{"/mcp", "/mcp/demo"} {
			a := mcpPost(r, time.Minute, path, version, "  \n"+batch)
			if a.status != http.StatusBadRequest || a.Error == nil || a.Error.Code != -32600 || !strings.Contains(a.Error.Message, "batch") {
				t.Errorf("batch on %s, version %q: %d %.200s, want 400 with JSON-RPC -32600 naming batches", path, version, a.status, a.body)
			}
		}
	}
	if n := r.Demo.Stats().Calls; n != 0 {
		t.Errorf("the upstream received %d calls from batches", n)
	}
	if recs := waitRecords(r, 10, map[string]string{"code": "BAD_REQUEST", "status": "400"}); len(recs) != 10 {
		t.Errorf("%d BAD_REQUEST records for 10 refused batches", len(recs))
	}
}

// TestHostileArgumentsAreCheckedBeforeTheSlot: nesting and the tool's own
// input schema are checked before a call takes a slot, and answers the
// caller's arguments caused never count against the upstream's breaker.
func TestHostileArgumentsAreCheckedBeforeTheSlot(t *testing.T) {
	r := newHostile(t)
	// The demo's only slot is held: a call that reached the semaphore
	// would be shed with AT_CAPACITY.
	r.PutServer(map[string]any{"server_id": "demo", "url": r.Demo.URL, "max_concurrent_requests": 1, "on_limit": "shed"})
	held := make(chan struct{})
	go func() {
		defer close(held)
		restCall(r, time.Minute, "demo", "slow_tool", map[string]any{"ms": 60000, "gate": "hold"})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Demo.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	deep := any("x")
	for range 2000 {
		deep = map[string]any{"a": deep}
	}
	for _, tc := range []struct {
		name string
		args any
		// schema: refused by the tool's input schema, which MCP reports
		// as a tool execution error (isError, BAD_REQUEST in its
		// structured content), as the upstream's SDK does; a message
		// nested too deep is refused as malformed, JSON-RPC -32602.
		schema bool
	}{
		{"nested 2000 deep", map[string]any{"text": deep}, false},
		{"wrong type", map[string]any{"text": 5}, true},
		{"missing required", map[string]any{}, true},
	} {
		_, f := restCall(r, time.Minute, "demo", "echo", tc.args)
		if f.Code != fault.BadRequest {
			t.Errorf("REST %s: %s %q, want BAD_REQUEST before any slot", tc.name, f.Code, f.Message)
		}
		a := mcpPost(r, time.Minute, "/mcp", "2025-11-25", toolCall(1, "demo-echo", tc.args))
		switch {
		case tc.schema && (a.Error != nil || !a.Result.IsError || !bytes.Contains(a.Result.StructuredContent, []byte(`"BAD_REQUEST"`))):
			t.Errorf("MCP %s: %.300s, want a result with isError and BAD_REQUEST", tc.name, a.body)
		case !tc.schema && (a.Error == nil || a.Error.Code != -32602):
			t.Errorf("MCP %s: %.300s, want JSON-RPC -32602", tc.name, a.body)
		}
	}
	if n := r.Demo.Stats().Calls; n != 1 {
		t.Errorf("the upstream received %d calls, want only the held one", n)
	}
	r.Demo.OpenGate("hold")
	<-held

	// Three refused calls in a row, with a breaker at three failures: the
	// upstream refused them (HTTP 400, JSON-RPC -32602), so they say
	// nothing of its health, and the next good call goes through.
	for i, tool := range []string{"reject", "invalid_params"} {
		id := fmt.Sprintf("refuses%d", i)
		r.PutServer(map[string]any{"server_id": id, "url": r.Hostile.URL + "?s=" + id,
			"breaker": map[string]any{"failure_threshold": 3, "recovery_timeout": 60}})
		for range 4 {
			if _, f := restCall(r, time.Minute, id, tool, map[string]any{"bad": true}); f.Code != fault.BadRequest {
				t.Errorf("%s with bad arguments: %s %q, want BAD_REQUEST", tool, f.Code, f.Message)
			}
		}
		if a := mcpPost(r, time.Minute, "/mcp", "2025-11-25", toolCall(2, id+"-"+tool, map[string]any{"bad": true})); a.Error == nil || a.Error.Code != -32602 {
			t.Errorf("MCP %s with bad arguments: %.300s, want JSON-RPC -32602", tool, a.body)
		}
		if resp, f := restCall(r, time.Minute, id, tool, map[string]any{}); resp.Status != http.StatusOK {
			t.Errorf("%s with good arguments after 5 refused calls: %d %s %q, want 200 (the breaker must stay closed)", tool, resp.Status, f.Code, f.Message)
		}
	}
}

// TestHostileOpenAPIArguments: an OpenAPI-backed tool sends only what its
// operation declares, to the path it declares.
func TestHostileOpenAPIArguments(t *testing.T) {
	r := newHostile(t)
	r.PutServer(map[string]any{"server_id": "users", "transport": "openapi", "spec_url": r.Hostile.Base + "/openapi.json"})
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"dot-dot path", map[string]any{"id": ".."}},
		{"dot path", map[string]any{"id": "."}},
		{"undeclared argument", map[string]any{"id": "7", "admin": "true"}},
		{"undeclared query key", map[string]any{"id": "7", "page": map[string]any{"size": 1, "api_key": "x"}}},
		{"CR LF in a header", map[string]any{"id": "7", "X-Trace": "a\r\nX-Admin: 1"}},
	} {
		if _, f := restCall(r, time.Minute, "users", "getProfile", tc.args); f.Code != fault.BadRequest {
			t.Errorf("%s: %s %q, want BAD_REQUEST", tc.name, f.Code, f.Message)
		}
	}
	if hits := r.Hostile.APIHits(); len(hits) != 0 {
		t.Errorf("the API received %q, want nothing", hits)
	}
	resp, _ := restCall(r, time.Minute, "users", "getProfile", map[string]any{"id": "a/..", "page": map[string]any{"size": 2}, "X-Trace": "t1"})
	if want := "GET /api/v1/users/a%2F../profile?size=2 X-Trace: t1"; resp.Status != http.StatusOK || !slicesEqual(r.Hostile.APIHits(), []string{want}) {
		t.Errorf("declared call: %d, API received %q, want %q", resp.Status, r.Hostile.APIHits(), want)
	}
}

func slicesEqual(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

// TestHostileRedirectsStayOnTheOrigin: an upstream cannot send the
// gateway to another origin, by a redirect or by the HTTP+SSE endpoint
// event; its URL's token never reaches the other host.
func TestHostileRedirectsStayOnTheOrigin(t *testing.T) {
	r := newHostile(t)
	var sinkHits atomic.Int32
	var referers sync.Map
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sinkHits.Add(1)
		referers.Store(req.Header.Get("Referer"), true)
		http.Error(w, "not here", http.StatusNotFound)
	}))
	defer sink.Close()
	r.PutServer(map[string]any{"server_id": "elsewhere", "url": r.Hostile.Base + "/redirect?token=s3cr3t&to=" + url.QueryEscape(sink.URL+"/mcp")})
	r.PutServer(map[string]any{"server_id": "ssefar", "transport": "sse", "url": r.Hostile.Base + "/sse?token=s3cr3t&endpoint=" + url.QueryEscape(sink.URL+"/messages")})
	// A redirect within the origin is followed.
	r.PutServer(map[string]any{"server_id": "samehost", "url": r.Hostile.Base + "/redirect?to=" + url.QueryEscape(r.Hostile.URL)})

	for _, id := range []string{"elsewhere", "ssefar"} {
		if _, f := restCall(r, time.Minute, id, "echo", map[string]any{}); f.Code != fault.UpstreamError {
			t.Errorf("%s: %s %q, want UPSTREAM_ERROR", id, f.Code, f.Message)
		}
	}
	if n := sinkHits.Load(); n != 0 {
		referers.Range(func(k, _ any) bool { t.Logf("Referer at the other origin: %q", k); return true })
		t.Errorf("the other origin received %d requests", n)
	}
	if resp, f := restCall(r, time.Minute, "samehost", "echo", map[string]any{"x": 1}); resp.Status != http.StatusOK {
		t.Errorf("same-origin redirect: %d %s %q, want 200", resp.Status, f.Code, f.Message)
	}
	if strings.Contains(r.Gateway(0).Logs(), "s3cr3t") {
		t.Errorf("the gateway logged the upstream URL's token:\n%s", r.Gateway(0).Logs())
	}
}

// TestHostileSecretsStayOutOfLogs: a failing upstream's URL is logged with
// its query values redacted.
func TestHostileSecretsStayOutOfLogs(t *testing.T) {
	r := newHostile(t)
	ln := httptest.NewServer(http.NotFoundHandler())
	gone := ln.URL
	ln.Close() // nothing listens there now
	r.PutServer(map[string]any{"server_id": "gone", "url": gone + "/mcp?api_key=s3cr3t&team=blue", "transport": "sse"})
	r.PutServer(map[string]any{"server_id": "gone2", "url": gone + "/mcp?api_key=s3cr3t"})
	for _, id := range []string{"gone", "gone2"} {
		if _, f := restCall(r, time.Minute, id, "echo", map[string]any{}); f.Code != fault.UpstreamError {
			t.Errorf("%s: %s, want UPSTREAM_ERROR", id, f.Code)
		}
	}
	logs := r.Gateway(0).Logs()
	if strings.Contains(logs, "s3cr3t") {
		t.Errorf("the gateway logged a secret:\n%s", logs)
	}
	if !strings.Contains(logs, "api_key=REDACTED") {
		t.Errorf("the log does not show the redacted URL:\n%s", logs)
	}
}

// TestHostileAuditRecords: every tool call is one record naming the real
// server and tool, its outcome and code, the caller's principal and the
// client's address,
// refused ones included.
func TestHostileAuditRecords(t *testing.T) {
	r := newHostile(t)
	r.PutServer(map[string]any{"server_id": "secret", "url": r.Demo.URL})
	limited := r.PutKey("demo")
	restCall(r, time.Minute, "demo", "echo", map[string]any{"text": "hi"})
	recs := waitRecords(r, 1, map[string]string{"tool": "echo", "outcome": "ok"})
	if len(recs) != 1 {
		t.Fatalf("%d records of one successful call:\n%s", len(recs), r.Gateway(0).Logs())
	}
	prefix, _ := recs[0]["principal"].(string)
	if !strings.HasPrefix(prefix, "key:") {
		t.Fatalf("the record's principal is %q, want the key's", prefix)
	}
	mcpPost(r, time.Minute, "/mcp", "2025-11-25", toolCall(1, "demo-no_such_tool", map[string]any{}))
	mcpPost(r, time.Minute, "/mcp", "2025-11-25", toolCall(2, "demo-echo", map[string]any{"text": 5}))
	mcpPost(r, time.Minute, "/mcp/demo", "2025-11-25", toolCall(3, "echo", map[string]any{"text": "ok"}))
	mcpPost(r, time.Minute, "/mcp", "2025-11-25", toolCall(4, "nosuchserver-echo", map[string]any{}))
	// A key that may not call "secret": the agent sees an unknown tool,
	// the record says FORBIDDEN.
	saved := r.Key
	r.Key = limited
	mcpPost(r, time.Minute, "/mcp", "2025-11-25", toolCall(5, "secret-echo", map[string]any{"text": "x"}))
	r.Key = saved
	waitRecords(r, 6, nil)

	for _, want := range []map[string]string{
		{"path": "/mcp-rest/tools/call", "server_id": "demo", "tool": "echo", "outcome": "ok", "principal": prefix},
		{"path": "/mcp", "mcp_method": "tools/call", "server_id": "demo", "tool": "no_such_tool", "outcome": "error", "code": "NOT_FOUND", "principal": prefix},
		{"path": "/mcp", "mcp_method": "tools/call", "server_id": "demo", "tool": "echo", "outcome": "error", "code": "BAD_REQUEST", "principal": prefix},
		{"path": "/mcp/demo", "mcp_method": "tools/call", "server_id": "demo", "tool": "echo", "outcome": "ok", "principal": prefix},
		{"path": "/mcp", "mcp_method": "tools/call", "server_id": "nosuchserver", "tool": "echo", "outcome": "error", "code": "NOT_FOUND", "principal": prefix},
		{"path": "/mcp", "mcp_method": "tools/call", "server_id": "secret", "tool": "echo", "outcome": "error", "code": "FORBIDDEN"},
	} {
		want["client_ip"] = "127.0.0.1"
		if recs := r.Gateway(0).Records(requestRecords, want); len(recs) != 1 {
			t.Errorf("%d records with %v, want 1", len(recs), want)
		}
	}
	if t.Failed() {
		t.Logf("logs:\n%s", r.Gateway(0).Logs())
	}
}

// TestHostileUpstreams runs the hostile upstream suite at once (huge list
// pages, a huge result, an endless event stream, endless progress, a slow
// drip) while a healthy server is called: each hostile call ends in a
// documented error within its deadline, the healthy server keeps
// answering, and the gateway's memory stays bounded.
func TestHostileUpstreams(t *testing.T) {
	// With a soft memory limit, as under Lambda (90% of the function's
	// memory): the bound below is on what the gateway keeps, not on when
	// its collector last ran.
	r := newHostile(t, "GOMEMLIMIT=160MiB")
	// The servers that never finish (an endless stream, endless progress,
	// a slow drip) are cut off by their timeout: 3 s, and 10 s for the
	// endless progress, whose first events must reach the client before
	// it. Those the gateway must stop, or answer, by size (huge pages, a
	// result over the limit, a huge result) keep the default of 30 s: the
	// outcome judged is not a timeout, and on a loaded machine reading
	// 7 MiB or more has taken 11 s.
	const timeout = 3 // seconds
	hostile := func(id, query string, timeout int) {
		r.PutServer(map[string]any{"server_id": id, "url": r.Hostile.URL + "?" + query, "timeout": timeout})
	}
	// Each behaviour on a server of its own, as distinct upstreams.
	hostile("pages", "pages=0&page_bytes=8000000", 30)
	hostile("bigresult", "s=1", 30)
	hostile("toobig", "s=2", 30)
	hostile("endless", "s=3", timeout)
	hostile("progress", "s=4", 10)
	hostile("drip", "s=5", timeout)
	deadline := (30 + 60) * time.Second // the client's: the gateway must answer long before

	var wg sync.WaitGroup
	check := func(what string, ok bool, format string, args ...any) {
		if !ok {
			t.Errorf(what+": "+format, args...)
		}
	}
	documented := func(c fault.Code) bool { return c == fault.UpstreamError || c == fault.UpstreamTimeout }
	wg.Go(func() {
		resp, f := restCall(r, deadline, "pages", "padded_0", map[string]any{})
		check("call on a server with endless huge pages", resp.Status == http.StatusBadGateway && f.Code == fault.UpstreamError, "%d %s %q", resp.Status, f.Code, f.Message)
	})
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.Gateway(0).URL+"/mcp-rest/tools/list?server_id=pages", nil)
		req.Header.Set("Authorization", "Bearer "+r.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("REST list of endless huge pages: %v", err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		check("REST list of endless huge pages", resp.StatusCode == http.StatusBadGateway && bytes.Contains(b, []byte("tool list")), "%d %.300s", resp.StatusCode, b)
	})
	wg.Go(func() {
		// The aggregated list leaves the hostile server out and keeps the
		// others.
		a := mcpPost(r, deadline, "/mcp", "2025-11-25", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		names := map[string]bool{}
		for _, tl := range a.Result.Tools {
			names[tl.Name] = true
		}
		check("aggregated tools/list", a.status == http.StatusOK && names["demo-echo"] && names["drip-slow_drip"] && !names["pages-padded_0"],
			"%d, %d tools (demo-echo %v, pages-padded_0 %v)", a.status, len(names), names["demo-echo"], names["pages-padded_0"])
	})
	big := 7 << 20 // under the 8 MiB answer limit, all of it '<'
	wg.Go(func() {
		resp, f := restCall(r, deadline, "bigresult", "huge_result", map[string]any{"bytes": big, "char": "<"})
		check("REST huge result", resp.Status == http.StatusOK && len(resp.Body) < big+1024 && bytes.Contains(resp.Body, []byte("<<<<")),
			"%d, %d bytes for a %d-byte text (%s %q)", resp.Status, len(resp.Body), big, f.Code, f.Message)
	})
	wg.Go(func() {
		a := mcpPost(r, deadline, "/mcp", "2025-11-25", toolCall(1, "bigresult-huge_result", map[string]any{"bytes": big, "char": "&"}))
		check("MCP huge result", a.status == http.StatusOK && !a.Result.IsError && len(a.body) < big+1024 && len(a.Result.Content) == 1 && len(a.Result.Content[0].Text) == big,
			"%d, %d bytes for a %d-byte text: %.200s", a.status, len(a.body), big, a.body)
	})
	wg.Go(func() {
		resp, f := restCall(r, deadline, "toobig", "huge_result", map[string]any{"bytes": 20 << 20})
		check("REST result over the limit", resp.Status == http.StatusBadGateway && f.Code == fault.UpstreamError && strings.Contains(f.Message, "larger than"), "%d %s %q", resp.Status, f.Code, f.Message)
	})
	wg.Go(func() {
		resp, f := restCall(r, deadline, "endless", "endless_sse", map[string]any{})
		check("REST endless event stream", documented(f.Code), "%d %s %q", resp.Status, f.Code, f.Message)
	})
	wg.Go(func() {
		resp, f := restCall(r, deadline, "drip", "slow_drip", map[string]any{})
		check("REST slow drip", resp.Status == http.StatusGatewayTimeout && f.Code == fault.UpstreamTimeout, "%d %s %q", resp.Status, f.Code, f.Message)
	})
	wg.Go(func() {
		events, final := streamCall(r, deadline, "progress-endless_progress")
		check("MCP endless progress", events > 0 && strings.Contains(final, "UPSTREAM_TIMEOUT"),
			"%d progress events relayed, final message %.300s", events, final)
	})

	// Meanwhile the healthy server answers every call.
	stop := make(chan struct{})
	healthy := make(chan int)
	go func() {
		n := 0
		defer func() { healthy <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, f := restCall(r, time.Minute, "demo", "echo", map[string]any{"text": "alive"})
			if resp.Status != http.StatusOK {
				t.Errorf("healthy server during the hostile suite: %d %s %q", resp.Status, f.Code, f.Message)
			}
			n++
			select {
			case <-stop:
			case <-time.After(50 * time.Millisecond): // a steady trickle, not a flood
			}
		}
	}()
	wg.Wait()
	close(stop)
	n := <-healthy
	if n == 0 {
		t.Error("no healthy call completed during the hostile suite")
	}
	if !strings.Contains(r.Gateway(0).Logs(), `"msg":"listing tools failed; its tools are left out","request_id"`) {
		t.Error("the aggregated list left the hostile server out without a log line")
	}
	rss, err := r.Gateway(0).PeakRSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway peak RSS %.1f MiB; %d healthy calls answered meanwhile", float64(rss)/(1<<20), n)
	if rss >= 200<<20 {
		t.Errorf("gateway peak RSS %d MiB, want under 200 MiB", rss>>20)
	}
}

// streamCall calls tool over /mcp asking for progress, reading the event
// stream: it returns how many progress notifications arrived and the
// final answer's text.
func streamCall(r *testkit.Rig, d time.Duration, tool string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": map[string]any{}, "_meta": map[string]any{"progressToken": "p"}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.Gateway(0).URL+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+r.Key)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	events := 0
	final := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if strings.Contains(data, `"notifications/progress"`) {
			events++
		} else if strings.Contains(data, `"result"`) || strings.Contains(data, `"error"`) {
			final = data
		}
	}
	if err := sc.Err(); err != nil {
		final += " (read: " + err.Error() + ")"
	}
	return events, final
}

// TestHostileLocalDestinations: with ALLOW_LOCAL_UPSTREAMS off, as in
// production, a server item cannot send the gateway to its own host or
// link (the Lambda runtime API on 127.0.0.1, instance metadata on
// 169.254.169.254), by its url, spec_url or token_url, nor by a name that
// resolves there; an item that sets allow_local may.
func TestHostileLocalDestinations(t *testing.T) {
	var hits atomic.Int32
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		hits.Add(1)
		http.Error(w, "not here", http.StatusNotFound)
	}))
	defer local.Close()
	_, port, _ := strings.Cut(strings.TrimPrefix(local.URL, "http://"), ":")
	r := newHostile(t, "ALLOW_LOCAL_UPSTREAMS=off", "MCPGATE_TEST_LOCAL_SECRET=client-secret")
	r.PutServer(map[string]any{"server_id": "demo", "url": r.Demo.URL, "allow_local": true})
	r.PutServer(map[string]any{"server_id": "loopback", "url": local.URL + "/mcp"})
	r.PutServer(map[string]any{"server_id": "byname", "url": "http://localhost:" + port + "/mcp"})
	r.PutServer(map[string]any{"server_id": "metadata", "url": "http://169.254.169.254/latest/meta-data/"})
	r.PutServer(map[string]any{"server_id": "spec", "transport": "openapi", "spec_url": local.URL + "/openapi.json"})
	// The token is asked for before the upstream (TEST-NET-1) is dialed.
	r.PutServer(map[string]any{"server_id": "token", "url": "http://192.0.2.1:9/mcp",
		"auth": map[string]any{"type": "oauth2_client_credentials", "token_url": local.URL + "/token", "client_id": "c", "secret": "env:MCPGATE_TEST_LOCAL_SECRET"}})
	for _, id := range []string{"loopback", "byname", "metadata", "spec", "token"} {
		resp, f := restCall(r, time.Minute, id, "echo", map[string]any{})
		if resp.Status == http.StatusOK || (f.Code != fault.UpstreamError && f.Code != fault.Misconfigured) {
			t.Errorf("%s: %d %s %q; want it refused", id, resp.Status, f.Code, f.Message)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the local address received %d requests", n)
	}
	if resp, f := restCall(r, time.Minute, "demo", "echo", map[string]any{"text": "x"}); resp.Status != http.StatusOK {
		t.Errorf("a local upstream with allow_local: %d %s %q", resp.Status, f.Code, f.Message)
	}
}
