package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/testkit/missing"
)

// exportedSpan is a span as infra/otelcol writes it.
type exportedSpan struct {
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id"`
	Name         string         `json:"name"`
	Kind         string         `json:"kind"`
	Status       string         `json:"status"`
	Service      string         `json:"service"`
	Attributes   map[string]any `json:"attributes"`
	Links        []struct {
		TraceID string `json:"trace_id"`
		SpanID  string `json:"span_id"`
	} `json:"links"`
}

var (
	otelcolOnce sync.Once
	otelcolDir  string
	otelcolErr  error
)

// removeOtelcol removes what otelcolBinary built.
func removeOtelcol() {
	if otelcolDir != "" {
		os.RemoveAll(otelcolDir)
	}
}

// otelcolBinary builds infra/otelcol (the Collector's OTLP receiver, a
// module of its own) once per test binary, as every test that starts a
// receiver runs the same one, and returns the executable's path.
func otelcolBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		missing.Skip(t, "go is not on PATH, to build the OTLP receiver (infra/otelcol)")
	}
	otelcolOnce.Do(func() {
		// Removed by TestMain: every test of the binary uses the build.
		if otelcolDir, otelcolErr = os.MkdirTemp("", "mcpgate-otelcol-"); otelcolErr != nil {
			return
		}
		start := time.Now()
		build := exec.Command("go", "build", "-o", filepath.Join(otelcolDir, "otelcol"), ".")
		build.Dir = filepath.Join("..", "..", "infra", "otelcol")
		if b, err := build.CombinedOutput(); err != nil {
			otelcolErr = fmt.Errorf("build the OTLP receiver: %v\n%s", err, b)
			return
		}
		t.Logf("OTLP receiver built in %v", time.Since(start).Round(time.Millisecond))
	})
	if otelcolErr != nil {
		t.Fatal(otelcolErr)
	}
	return filepath.Join(otelcolDir, "otelcol")
}

// startCollector runs infra/otelcol on loopback; it returns its endpoint
// and the file it writes the spans to.
func startCollector(t *testing.T) (endpoint, out string) {
	t.Helper()
	bin := otelcolBinary(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out = filepath.Join(dir, "spans.jsonl")
	cmd := exec.Command(bin, "-addr", addr, "-out", out)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	storetest.SetParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("OTLP receiver not listening: %s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr, out
}

func readSpans(t *testing.T, path string) []exportedSpan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []exportedSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s exportedSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("span %s: %v", sc.Bytes(), err)
		}
		out = append(out, s)
	}
	return out
}

// seen is what the traced upstream received with one call.
type seen struct {
	header, meta string
}

// tracedUpstream is a Go SDK server on loopback whose tool "work" sleeps
// sleep_ms, whatever its context says (a late answer), and records the
// traceparent it got in its HTTP headers and in params._meta: a call's
// under its id argument, any other request's (tools/list, prompts/get of
// its prompt "brief") under its method.
func tracedUpstream(t *testing.T) (string, func(id string) []seen) {
	var mu sync.Mutex
	got := map[string][]seen{}
	s := mcp.NewServer(&mcp.Implementation{Name: "traced", Version: "1"}, nil)
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/call" && method != "initialize" && !strings.HasPrefix(method, "notifications/") {
				v := seen{}
				if ex := req.GetExtra(); ex != nil && ex.Header != nil {
					v.header = ex.Header.Get("Traceparent")
				}
				if p := req.GetParams(); p != nil {
					v.meta, _ = p.GetMeta()["traceparent"].(string)
				}
				mu.Lock()
				got[method] = append(got[method], v)
				mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	s.AddPrompt(&mcp.Prompt{Name: "brief"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "be brief"}}}}, nil
	})
	type args struct {
		ID      string `json:"id"`
		SleepMs int    `json:"sleep_ms"`
		Note    string `json:"note,omitempty"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "work"}, func(ctx context.Context, req *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		v := seen{}
		if req.Extra != nil && req.Extra.Header != nil {
			v.header = req.Extra.Header.Get("Traceparent")
		}
		if tp, ok := req.Params.Meta["traceparent"].(string); ok {
			v.meta = tp
		}
		mu.Lock()
		got[a.ID] = append(got[a.ID], v)
		mu.Unlock()
		time.Sleep(time.Duration(a.SleepMs) * time.Millisecond)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done " + a.ID}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(srv.Close)
	return srv.URL, func(id string) []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got[id]...)
	}
}

// agentTrace is a W3C traceparent of a trace the agent started.
func agentTrace(n int) (traceID, traceparent string) {
	traceID = fmt.Sprintf("%032x", 0xa9e0000+n)
	return traceID, fmt.Sprintf("00-%s-%016x-01", traceID, 0xb0b0+n)
}

// TestTracesToCollector: several gateway processes export to a real OTLP
// receiver (the Collector's), and the spans of queued calls (with their
// queue positions), a timed-out call with a late answer, a refused call
// and a /mcp tools/list have the names, kinds, attributes and structure of
// the MCP conventions, in the agent's trace; the upstream got the CLIENT
// span's traceparent as a header and in params._meta; nothing secret is in
// any span.
func TestTracesToCollector(t *testing.T) {
	endpoint, spansFile := startCollector(t)
	upURL, upSeen := tracedUpstream(t)
	rig := testkit.NewRig(t, testkit.RigOptions{Key: true})
	const token = "upstream-token-SECRET-7f3a"
	const argMarker = "argument-value-PRIVATE-91c2"
	key := rig.Key
	rig.PutServer(map[string]any{"server_id": "tq", "url": upURL, "max_concurrent_requests": 1, "max_queued": 2, "timeout": 10,
		"auth":            map[string]any{"type": "bearer", "secret": "env:TRACE_TEST_TOKEN"},
		"forward_headers": []any{"traceparent", "tracestate", "X-Agent-Note"}})
	rig.PutServer(map[string]any{"server_id": "tl", "url": upURL, "max_concurrent_requests": 5, "timeout": 1, "cancel_grace": 10})
	gws := rig.Start(3, "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint,
		"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=mcpgate-test", "TRACE_TEST_TOKEN="+token, "REGISTRY_CACHE_TTL=200ms")
	var wg sync.WaitGroup

	rest := func(gw *testkit.Gateway, tp, server string, a map[string]any) (int, string) {
		body, _ := json.Marshal(map[string]any{"server_id": server, "name": "work", "arguments": a})
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/mcp-rest/tools/call", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Traceparent", tp)
		req.Header.Set("Tracestate", "agent=1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("call: %v", err)
			return 0, ""
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	tHold, pHold := agentTrace(1)
	tQueued, pQueued := agentTrace(2)
	tQueued2, pQueued2 := agentTrace(7)
	tRefused, pRefused := agentTrace(3)
	tLate, pLate := agentTrace(4)
	tList, pList := agentTrace(5)
	status := map[string]int{}
	var smu sync.Mutex
	do := func(name string, delay time.Duration, gw *testkit.Gateway, tp, server string, a map[string]any) {
		wg.Go(func() {
			time.Sleep(delay)
			code, body := rest(gw, tp, server, a)
			smu.Lock()
			status[name] = code
			smu.Unlock()
			t.Logf("%s: %d %s", name, code, body)
		})
	}
	// /mcp tools/list first (its upstream listed, not cached), its trace
	// context in params._meta only.
	listBody := fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"traceparent":%q}}}`, pList)
	req, _ := http.NewRequest(http.MethodPost, gws[1].URL+"/mcp", strings.NewReader(listBody))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("tools/list: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}

	// A relayed prompts/get on /mcp/tq, its trace context in headers only.
	tPrompt, pPrompt := agentTrace(6)
	promptBody := `{"jsonrpc":"2.0","id":8,"method":"prompts/get","params":{"name":"brief"}}`
	req, _ = http.NewRequest(http.MethodPost, gws[2].URL+"/mcp/tq", strings.NewReader(promptBody))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	req.Header.Set("Traceparent", pPrompt)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("prompts/get: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}

	// Two callers queue behind the held call (from two processes), and a
	// third finds the queue full.
	do("hold", 0, gws[0], pHold, "tq", map[string]any{"id": "hold", "sleep_ms": 3000, "note": argMarker})
	do("queued", 500*time.Millisecond, gws[1], pQueued, "tq", map[string]any{"id": "queued", "sleep_ms": 10})
	do("queued2", 1000*time.Millisecond, gws[0], pQueued2, "tq", map[string]any{"id": "queued2", "sleep_ms": 10})
	do("refused", 1500*time.Millisecond, gws[2], pRefused, "tq", map[string]any{"id": "refused", "sleep_ms": 10})
	do("late", 0, gws[2], pLate, "tl", map[string]any{"id": "late", "sleep_ms": 2500})
	wg.Wait()
	for name, want := range map[string]int{"hold": 200, "queued": 200, "queued2": 200, "refused": 429, "late": 504} {
		if status[name] != want {
			t.Errorf("%s: status %d, want %d", name, status[name], want)
		}
	}
	// Wait for the late call's background wait to be exported.
	var spans []exportedSpan
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		spans = readSpans(t, spansFile)
		found := 0
		for _, s := range spans {
			if strings.HasPrefix(s.Name, "background wait") || (s.TraceID == tList && s.Kind == "Server") {
				found++
			}
		}
		if found >= 2 {
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	spans = readSpans(t, spansFile)
	if len(spans) == 0 {
		t.Fatal("no span exported")
	}
	byID := map[string]exportedSpan{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	find := func(trace, kind, name string) exportedSpan {
		t.Helper()
		for _, s := range spans {
			if s.TraceID == trace && s.Kind == kind && s.Name == name {
				return s
			}
		}
		t.Errorf("no %s span %q in trace %s", kind, name, trace)
		return exportedSpan{}
	}
	attr := func(s exportedSpan, k string) string {
		if v, ok := s.Attributes[k]; ok {
			return fmt.Sprint(v)
		}
		return ""
	}
	wantAttrs := func(s exportedSpan, kv ...string) {
		t.Helper()
		for i := 0; i < len(kv); i += 2 {
			if got := attr(s, kv[i]); got != kv[i+1] {
				t.Errorf("span %q (%s): %s = %q, want %q", s.Name, s.Kind, kv[i], got, kv[i+1])
			}
		}
	}
	parentOf := func(s exportedSpan) string { return s.ParentSpanID }
	agentParent := func(tp string) string { return strings.Split(tp, "-")[2] }

	// Every call: SERVER span, child of the agent's span; admission and
	// CLIENT spans its children.
	for _, c := range []struct{ name, trace, tp string }{{"hold", tHold, pHold}, {"queued", tQueued, pQueued}, {"queued2", tQueued2, pQueued2}, {"late", tLate, pLate}} {
		// A REST call's SERVER span is named and attributed after its
		// tool, as an MCP tools/call's.
		srv := find(c.trace, "Server", "tools/call work")
		if srv.SpanID == "" {
			continue
		}
		if srv.Service != "mcpgate-test" {
			t.Errorf("%s: service %q", c.name, srv.Service)
		}
		if parentOf(srv) != agentParent(c.tp) {
			t.Errorf("%s: SERVER span's parent %s, want the agent's %s", c.name, srv.ParentSpanID, agentParent(c.tp))
		}
		wantAttrs(srv, "mcp.method.name", "tools/call", "gen_ai.tool.name", "work", "gen_ai.operation.name", "execute_tool", "http.route", "/mcp-rest/tools/call")
		adm := find(c.trace, "Internal", "admission "+map[bool]string{true: "tl", false: "tq"}[c.name == "late"])
		cl := find(c.trace, "Client", "tools/call work")
		if adm.ParentSpanID != srv.SpanID || cl.ParentSpanID != srv.SpanID {
			t.Errorf("%s: admission's parent %s, CLIENT's %s, want the SERVER span %s", c.name, adm.ParentSpanID, cl.ParentSpanID, srv.SpanID)
		}
		wantAttrs(adm, "mcpgate.admission", "granted")
		wantAttrs(cl, "mcp.method.name", "tools/call", "gen_ai.tool.name", "work", "gen_ai.operation.name", "execute_tool", "server.address", "127.0.0.1")
		// The upstream got the CLIENT span's traceparent both ways.
		want := "00-" + c.trace + "-" + cl.SpanID + "-01"
		got := upSeen(c.name)
		if len(got) != 1 || got[0].header != want || got[0].meta != want {
			t.Errorf("%s: upstream received %+v, want header and _meta %s", c.name, got, want)
		}
	}
	// The queued call waited for the held one's place.
	if adm := find(tQueued, "Internal", "admission tq"); adm.SpanID != "" {
		var ms float64
		fmt.Sscan(attr(adm, "mcpgate.queue.wait_ms"), &ms)
		if ms < 300 {
			t.Errorf("queued call's admission: wait %v ms, want it queued behind the held call", ms)
		}
	}
	// Queue positions: the held call never queued; of the two queued
	// behind it, one joined with nobody ahead, the other with one caller
	// ahead (whichever joined second).
	wantAttrs(find(tHold, "Internal", "admission tq"), "mcpgate.queue.position", "0")
	positions := map[string]bool{}
	for _, tr := range []string{tQueued, tQueued2} {
		positions[attr(find(tr, "Internal", "admission tq"), "mcpgate.queue.position")] = true
	}
	if !positions["0"] || !positions["1"] {
		t.Errorf("queued calls' positions %v, want 0 and 1", positions)
	}
	// The refused call: its SERVER span and admission carry the code; no
	// CLIENT span, and the upstream never saw it.
	ref := find(tRefused, "Server", "tools/call work")
	if adm := find(tRefused, "Internal", "admission tq"); adm.SpanID != "" {
		wantAttrs(adm, "mcpgate.admission", "refused")
		if attr(adm, "error.type") == "" || adm.ParentSpanID != ref.SpanID || adm.Status != "Error" {
			t.Errorf("refused admission: %+v", adm)
		}
	}
	if attr(ref, "error.type") == "" || ref.Status != "Error" {
		t.Errorf("refused call's SERVER span: %+v", ref)
	}
	for _, s := range spans {
		// Its tool was looked up (listing CLIENT spans); never sent.
		if s.TraceID == tRefused && s.Kind == "Client" && attr(s, "mcp.method.name") == "tools/call" {
			t.Errorf("refused call has a tools/call CLIENT span: %+v", s)
		}
	}
	if got := upSeen("refused"); len(got) != 0 {
		t.Errorf("the refused call reached the upstream: %+v", got)
	}
	// The late call: timed out, its background wait linked to its CLIENT
	// span, ended by the late answer.
	lateSrv := find(tLate, "Server", "tools/call work")
	wantAttrs(lateSrv, "error.type", "UPSTREAM_TIMEOUT")
	lateCl := find(tLate, "Client", "tools/call work")
	wantAttrs(lateCl, "error.type", "UPSTREAM_TIMEOUT", "mcpgate.background", "true")
	var bg exportedSpan
	for _, s := range spans {
		if s.Name == "background wait tools/call work" {
			bg = s
		}
	}
	if bg.SpanID == "" {
		t.Error("no background wait span")
	} else {
		if len(bg.Links) != 1 || bg.Links[0].TraceID != tLate || bg.Links[0].SpanID != lateCl.SpanID {
			t.Errorf("background wait's links %+v, want the late call's CLIENT span %s", bg.Links, lateCl.SpanID)
		}
		if bg.ParentSpanID != "" || bg.TraceID == tLate {
			t.Errorf("background wait: parent %q in trace %s, want a root of its own trace", bg.ParentSpanID, bg.TraceID)
		}
		wantAttrs(bg, "mcpgate.stopped_by", "answered", "mcpgate.server_id", "tl")
	}
	// /mcp tools/list: SERVER span from params._meta, upstream listings its
	// CLIENT children.
	list := find(tList, "Server", "tools/list")
	if list.ParentSpanID != agentParent(pList) {
		t.Errorf("tools/list SERVER span's parent %s, want %s", list.ParentSpanID, agentParent(pList))
	}
	wantAttrs(list, "mcp.method.name", "tools/list", "jsonrpc.request.id", "7", "mcp.protocol.version", "2025-11-25", "http.route", "/mcp")
	clients := 0
	for _, s := range spans {
		if s.TraceID == tList && s.Kind == "Client" {
			clients++
			if byID[s.ParentSpanID].Kind == "" {
				t.Errorf("list's CLIENT span %q has no parent among the spans", s.Name)
			}
		}
	}
	if clients == 0 {
		t.Error("tools/list made no CLIENT span (its upstream listings)")
	}
	// Every other MCP request (the listings, the relayed prompts/get)
	// carried its own CLIENT span's traceparent in both places too.
	clientOf := func(tp string) exportedSpan {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 {
			return exportedSpan{}
		}
		return byID[parts[2]]
	}
	for _, method := range []string{"tools/list", "prompts/get"} {
		got := upSeen(method)
		if len(got) == 0 {
			t.Errorf("the upstream received no %s", method)
		}
		for _, v := range got {
			if cl := clientOf(v.meta); v.meta == "" || v.header != v.meta || cl.Kind != "Client" || cl.Name != method {
				t.Errorf("%s: upstream received header %q, _meta %q (span %q %s), want both naming its CLIENT span", method, v.header, v.meta, cl.Name, cl.Kind)
			}
		}
	}
	listed := false
	for _, v := range upSeen("tools/list") {
		listed = listed || clientOf(v.meta).TraceID == tList
	}
	if !listed {
		t.Error("no tools/list upstream in the /mcp tools/list's trace")
	}
	if got := upSeen("prompts/get"); len(got) == 1 {
		cl := clientOf(got[0].meta)
		srv := find(tPrompt, "Server", "prompts/get brief")
		if cl.TraceID != tPrompt || cl.ParentSpanID != srv.SpanID || srv.ParentSpanID != agentParent(pPrompt) {
			t.Errorf("prompts/get: CLIENT span %+v, SERVER span %+v, want the CLIENT span the SERVER's child in the agent's trace", cl, srv)
		}
		// http.route is the route's pattern, not the path naming tq.
		wantAttrs(srv, "http.route", "/mcp/{server_id}")
		wantAttrs(cl, "mcp.method.name", "prompts/get", "mcpgate.server_id", "tq", "server.address", "127.0.0.1")
	} else {
		t.Errorf("upstream received prompts/get %d times, want once", len(got))
	}
	// Nothing secret: the key, the upstream's credential, the arguments.
	raw, _ := os.ReadFile(spansFile)
	for _, secret := range []string{key, token, argMarker, "sleep_ms", "requestState", "request_state", "Bearer"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("an exported span carries %q", secret)
		}
	}
	if t.Failed() {
		t.Logf("spans:\n%s", raw)
	}
}

// TestTracesOpenAPIHeaders: a call to an OpenAPI-backed server carries the
// gateway's trace context as HTTP headers — traceparent naming the call's
// CLIENT span, tracestate the agent's trace's — whether the agent sent its
// own in headers (REST) or in params._meta (MCP), and although
// forward_headers names both, the agent's own values are not sent beside
// them.
func TestTracesOpenAPIHeaders(t *testing.T) {
	endpoint, spansFile := startCollector(t)
	demo, guard := testkit.StartGuardedDemo(t, func(*http.Request, []byte) bool { return true })
	rig := testkit.NewRig(t, testkit.RigOptions{Key: true})
	key := rig.Key
	rig.PutServer(map[string]any{"server_id": "api", "transport": "openapi", "spec_url": demo.SpecURL,
		"forward_headers": []any{"traceparent", "tracestate"}})
	gw := rig.StartGateway("OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_BSP_SCHEDULE_DELAY=100")

	post := func(path, body string, hdr map[string]string) {
		t.Helper()
		h := http.Header{"Authorization": {"Bearer " + key}, "Accept": {"application/json, text/event-stream"}}
		for k, v := range hdr {
			h.Set(k, v)
		}
		resp, err := testkit.Do(context.Background(), http.MethodPost, gw.URL+path, h, json.RawMessage(body))
		if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), "via ") {
			t.Fatalf("%s: %v %d %s", path, err, resp.Status, resp.Body)
		}
	}
	tREST, pREST := agentTrace(21)
	post("/mcp-rest/tools/call", `{"server_id":"api","name":"echo_api","arguments":{"body":{"text":"via rest"}}}`,
		map[string]string{"Traceparent": pREST, "Tracestate": "agent=rest"})
	tMCP, pMCP := agentTrace(22)
	post("/mcp/api", fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo_api","arguments":{"body":{"text":"via mcp"}},"_meta":{"traceparent":%q,"tracestate":"agent=mcp"}}}`, pMCP),
		map[string]string{"MCP-Protocol-Version": "2025-11-25"})

	// The CLIENT span of each call, once exported.
	client := func(spans []exportedSpan, trace string) exportedSpan {
		for _, s := range spans {
			if s.TraceID == trace && s.Kind == "Client" && s.Name == "tools/call echo_api" {
				return s
			}
		}
		return exportedSpan{}
	}
	var spans []exportedSpan
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if spans = readSpans(t, spansFile); client(spans, tREST).SpanID != "" && client(spans, tMCP).SpanID != "" {
			break
		}
	}
	var calls []testkit.Seen
	for _, s := range guard.Seen() {
		if s.Method == http.MethodPost && s.Path == "/api/echo" {
			calls = append(calls, s)
		}
	}
	if len(calls) != 2 {
		t.Fatalf("the upstream got %d calls, want 2: %+v", len(calls), calls)
	}
	for i, c := range []struct {
		name, trace, state string
	}{{"REST", tREST, "agent=rest"}, {"MCP", tMCP, "agent=mcp"}} {
		cl := client(spans, c.trace)
		if cl.SpanID == "" {
			t.Errorf("%s: no CLIENT span tools/call echo_api in the agent's trace %s", c.name, c.trace)
			continue
		}
		want := "00-" + c.trace + "-" + cl.SpanID + "-01"
		if got := calls[i].Header.Values("Traceparent"); len(got) != 1 || got[0] != want {
			t.Errorf("%s: the upstream got traceparent %q, want only %q (the CLIENT span)", c.name, got, want)
		}
		if got := calls[i].Header.Values("Tracestate"); len(got) != 1 || got[0] != c.state {
			t.Errorf("%s: the upstream got tracestate %q, want only %q (the trace's)", c.name, got, c.state)
		}
	}
	if t.Failed() {
		raw, _ := os.ReadFile(spansFile)
		t.Logf("spans:\n%s", raw)
	}
}

// TestTaskWorkerSpanLinksToItsCreator: a gateway task made by a request
// carrying the agent's trace context runs, in its worker, under a span
// exported to a real OTLP receiver as the root of a trace of its own,
// linked to the SERVER span of the request that made the task (its trace
// and span ids); the run's CLIENT span is the worker span's child, and the
// upstream got that CLIENT span's traceparent.
func TestTaskWorkerSpanLinksToItsCreator(t *testing.T) {
	endpoint, spansFile := startCollector(t)
	upURL, upSeen := tracedUpstream(t)
	rig := testkit.NewRig(t, testkit.RigOptions{Key: true})
	rig.PutServer(map[string]any{"server_id": "tk", "url": upURL, "max_concurrent_requests": 1, "timeout": 10,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	gw := rig.StartGateway("OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_BSP_SCHEDULE_DELAY=100")
	tAgent, pAgent := agentTrace(31)
	tasksMeta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}},
		"traceparent": pAgent, "tracestate": "agent=task",
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": "work", "arguments": map[string]any{"id": "task", "sleep_ms": 10}, "_meta": tasksMeta}})
	h := http.Header{"Authorization": {"Bearer " + rig.Key}, "Accept": {"application/json, text/event-stream"},
		"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"work"}}
	resp, err := testkit.Do(context.Background(), http.MethodPost, gw.URL+"/mcp/tk", h, json.RawMessage(body))
	if err != nil || resp.Status != 200 {
		t.Fatalf("tools/call: %v %+v", err, resp)
	}
	var created struct {
		Result struct {
			TaskID string `json:"taskId"`
		} `json:"result"`
	}
	raw := resp.Body
	for line := range bytes.Lines(raw) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			raw = bytes.TrimSpace(d)
		}
	}
	if err := json.Unmarshal(raw, &created); err != nil || created.Result.TaskID == "" {
		t.Fatalf("tools/call answered %s, want a task", resp.Body)
	}
	id := created.Result.TaskID
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, res, raw := taskRPC(gw.URL, "/mcp/tk", rig.Key, "tasks/get", id, map[string]any{"taskId": id})
		if res != nil && string(res["status"]) == `"completed"` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task not completed: %s", raw)
		}
	}
	var creator, worker, client exportedSpan
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, s := range readSpans(t, spansFile) {
			switch {
			case s.TraceID == tAgent && s.Kind == "Server" && s.Name == "tools/call work":
				creator = s
			case s.Name == "task tools/call work":
				worker = s
			}
		}
		if creator.SpanID != "" && worker.SpanID != "" {
			break
		}
	}
	if creator.SpanID == "" || worker.SpanID == "" {
		t.Fatalf("creating SERVER span %q, worker span %q: want both exported", creator.SpanID, worker.SpanID)
	}
	if creator.ParentSpanID != strings.Split(pAgent, "-")[2] {
		t.Errorf("creating SERVER span's parent %s, want the agent's", creator.ParentSpanID)
	}
	if worker.TraceID == tAgent || worker.ParentSpanID != "" {
		t.Errorf("worker span in trace %s with parent %q, want the root of a trace of its own", worker.TraceID, worker.ParentSpanID)
	}
	if len(worker.Links) != 1 || worker.Links[0].TraceID != creator.TraceID || worker.Links[0].SpanID != creator.SpanID {
		t.Errorf("worker span's links %+v, want one to the creating span %s/%s", worker.Links, creator.TraceID, creator.SpanID)
	}
	for _, s := range readSpans(t, spansFile) {
		if s.TraceID == worker.TraceID && s.Kind == "Client" && s.Name == "tools/call work" {
			client = s
		}
	}
	if client.ParentSpanID != worker.SpanID {
		t.Errorf("the run's CLIENT span %+v, want the worker span's child", client)
	}
	if got := upSeen("task"); len(got) != 1 || got[0].meta != "00-"+worker.TraceID+"-"+client.SpanID+"-01" {
		t.Errorf("upstream received %+v, want the run's CLIENT span's traceparent", got)
	}
}
