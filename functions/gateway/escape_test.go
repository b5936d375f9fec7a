package main

// What agents write, and what server items and upstreams hold, against the
// gateway binary and the mcpgate CLI: control characters and bidirectional
// controls reach no log line, span or CLI output unescaped; a URL's token
// reaches no log line, answer, span or CLI output; a message or _meta that
// names a member twice (in any case) is refused, and no spelling of the
// agent's trace context reaches an upstream.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// hostileText is what an agent writes to drive an operator's terminal: set
// its title (OSC … BEL), clear the screen and move up (CSI), paint a fake
// green line, then DEL, a C1 CSI, a right-to-left override, an isolate, a
// right-to-left mark and a line break.
const hostileText = "\x1b]0;owned\x07\x1b[2J\x1b[1A\x1b[32mOK\x1b[0m\x7f" + hostileHeader + "\r\n"

// hostileHeader is the part of hostileText an HTTP header value can carry
// (no C0, no DEL): a C1 CSI and bidirectional controls.
const hostileHeader = "\u009b2J\u202eKO\u2066\u200f"

// unescaped returns the first rune of s that clip.Escape would replace,
// other than the line feeds that end lines, and whether there is one.
func unescaped(s string) (rune, bool) {
	for _, r := range s {
		if r != '\n' && clip.IsEscaped(r) {
			return r, true
		}
	}
	return 0, false
}

// checkStrings fails t for every string in v (a decoded JSON value) that
// holds a rune clip.Escape replaces.
func checkStrings(t *testing.T, where string, v any) {
	t.Helper()
	switch v := v.(type) {
	case string:
		if strings.ContainsFunc(v, clip.IsEscaped) {
			t.Errorf("%q holds %q", where, v)
		}
	case map[string]any:
		for k, x := range v {
			checkStrings(t, where+"."+k, x)
		}
	case []any:
		for i, x := range v {
			checkStrings(t, fmt.Sprintf("%s[%d]", where, i), x)
		}
	}
}

// cli runs the mcpgate binary with env (besides the parent's) and returns
// what it printed on stdout and on stderr, whatever its exit status.
func cli(t *testing.T, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t, "./cmd/mcpgate"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if _, exited := err.(*exec.ExitError); !exited {
			t.Fatalf("mcpgate %s: %v", strings.Join(args, " "), err)
		}
	}
	return out.String(), errb.String()
}

// cliOut is what cli printed, stdout then stderr.
func cliOut(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, errs := cli(t, env, args...)
	return out + errs
}

// rawPost sends body as it is to path of gw, with key and headers h, and
// returns the answer's status and body.
func rawPost(t *testing.T, gw *testkit.Gateway, path, key, body string, h map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, gw.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAgentTextReachesOperatorsEscaped: control characters and
// bidirectional controls in every field an agent controls (server id, tool
// name, method, JSON-RPC id, arguments' keys, headers), on the REST route
// and both MCP routes, and in server and key items, reach neither the
// gateway's log (its raw bytes, nor its decoded values), nor its spans,
// nor what mcpgate refusals, status, servers and keys print.
func TestAgentTextReachesOperatorsEscaped(t *testing.T) {
	endpoint, spansFile := startCollector(t)
	r := testkit.NewRig(t, testkit.RigOptions{Demo: true, Key: true})
	r.PutServer(map[string]any{"server_id": "demo", "url": r.Demo.URL, "max_concurrent_requests": 2})
	// Items an admin (or anyone who can write the tables) got wrong.
	r.PutServer(map[string]any{"server_id": "bad" + hostileText, "url": r.Demo.URL + "/" + hostileText, "max_concurrent_requests": 1,
		"description": hostileText, "tools": map[string]any{"t" + hostileText: map[string]any{"max_concurrent_requests": 1}}})
	// A tool name with bidirectional controls, which the registry refuses.
	r.PutServer(map[string]any{"server_id": "capped", "url": r.Demo.URL, "max_concurrent_requests": 1,
		"tools": map[string]any{"tool\u202e\u0085": map[string]any{"max_concurrent_requests": 1}}})
	item := auth.KeyItem(&auth.Key{Hash: auth.HashKey(auth.NewKey()), Name: "name" + hostileText, Servers: []string{"demo", "s" + hostileText},
		Tools: []string{"demo/" + hostileText}}, time.Now())
	if _, err := r.Env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(r.Env.Tables.Keys), Item: item}); err != nil {
		t.Fatal(err)
	}
	narrow := r.PutKey("demo")
	gw := r.StartGateway("OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_BSP_SCHEDULE_DELAY=100")

	// Headers no agent's request needs, all hostile.
	headers := map[string]string{"User-Agent": hostileHeader, "X-Request-Id": hostileHeader, "Traceparent": hostileHeader,
		"Mcp-Name": hostileHeader, "Mcp-Method": hostileHeader}
	requests := 0
	post := func(path, key, body string, h map[string]string) {
		t.Helper()
		all := map[string]string{}
		for k, v := range headers {
			all[k] = v
		}
		for k, v := range h {
			all[k] = v
		}
		rawPost(t, gw, path, key, body, all)
		requests++
	}
	js := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// An Origin refused as cross-origin.
	post("/mcp", r.Key, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Origin": "http://x.test/" + hostileHeader})
	// REST: a server id the narrow key may not call (recorded before
	// the access check), one nobody has, tool names, and arguments.
	post("/mcp-rest/tools/call", narrow, js(map[string]any{"server_id": "demo" + hostileText, "name": "echo"}), nil)
	post("/mcp-rest/tools/call", r.Key, js(map[string]any{"server_id": "demo" + hostileText, "name": "echo"}), nil)
	post("/mcp-rest/tools/call", r.Key, js(map[string]any{"server_id": "demo", "name": "echo" + hostileText}), nil)
	post("/mcp-rest/tools/call", r.Key, js(map[string]any{"server_id": "demo", "name": "echo\u202e"}), nil)
	post("/mcp-rest/tools/call", r.Key, js(map[string]any{"name": "demo" + hostileText + "-echo"}), nil)
	post("/mcp-rest/tools/call", r.Key, `{"server_id":"demo","name":"echo","arguments":{`+js("k"+hostileText)+`:1,`+js("K"+hostileText)+`:2}}`, nil)
	post("/mcp-rest/tools/call", r.Key, js(map[string]any{"server_id": "demo", "name": "echo", "arguments": map[string]any{"text": 1, hostileText: 2}}), nil)
	// Both MCP routes, both protocol versions.
	for _, version := range []string{"2025-11-25", "2026-07-28", hostileHeader} {
		h := map[string]string{"MCP-Protocol-Version": version}
		meta := map[string]any{}
		if version == "2026-07-28" {
			meta = map[string]any{"io.modelcontextprotocol/protocolVersion": version,
				"io.modelcontextprotocol/clientInfo": map[string]any{"name": "x", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": map[string]any{}}
		}
		msg := func(id any, method string, params map[string]any) string {
			if params == nil {
				params = map[string]any{}
			}
			params["_meta"] = meta
			return js(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		}
		for _, path := range []string{"/mcp", "/mcp/demo", "/mcp/" + url.PathEscape("demo"+hostileText)} {
			echo := "echo"
			if path == "/mcp" {
				echo = "demo-echo"
			}
			post(path, r.Key, msg(hostileText, hostileText, nil), h)
			post(path, r.Key, msg(1, "tools/call", map[string]any{"name": echo + hostileText, "arguments": map[string]any{}}), h)
			post(path, narrow, msg(2, "tools/call", map[string]any{"name": echo + hostileText}), h)
			post(path, r.Key, msg(3, "tools/call", map[string]any{"name": echo, "arguments": map[string]any{"text": 1, hostileText: 2}}), h)
		}
		post("/mcp", r.Key, msg(4, "tools/call", map[string]any{"name": "bad" + hostileText + "-echo"}), h)
	}

	// Every request is logged, then exported.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := gw.WaitLogs(ctx, func(logs string) bool { return len(testkit.Records(logs, requestRecords)) >= requests }); err != nil {
		t.Fatalf("waiting for %d request records: %v", requests, err)
	}
	logs := gw.Logs()
	if r, ok := unescaped(logs); ok {
		i := strings.IndexRune(logs, r)
		t.Errorf("the log holds %U unescaped: …%q…", r, logs[max(0, i-80):min(len(logs), i+40)])
	}
	for i, rec := range testkit.Records(logs) {
		checkStrings(t, fmt.Sprintf("log record %d", i), map[string]any(rec))
	}
	// Not vacuous: the hostile values are recorded, escaped.
	for _, field := range []string{"server_id", "tool", "mcp_method"} {
		found := false
		for _, rec := range testkit.Records(logs, requestRecords) {
			if strings.Contains(testkit.Str(rec, field), clip.Escape(hostileText[:10])) {
				found = true
			}
		}
		if !found {
			t.Errorf("no request record has the hostile %s, escaped", field)
		}
	}
	// The 6 requests whose method is hostile on /mcp and /mcp/demo (a
	// path naming a hostile server is refused before its span starts)
	// each have a SERVER span.
	var spans []exportedSpan
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		spans = readSpans(t, spansFile)
		n := 0
		for _, s := range spans {
			if strings.HasPrefix(s.Name, clip.Escape(hostileText)) {
				n++
			}
		}
		if n >= 6 {
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	spans = readSpans(t, spansFile)
	named := 0
	for _, s := range spans {
		checkStrings(t, fmt.Sprintf("span %q", s.Name), map[string]any{"name": s.Name, "status": s.Status, "attributes": s.Attributes})
		if strings.HasPrefix(s.Name, clip.Escape(hostileText)) {
			named++
		}
	}
	if named < 6 {
		t.Errorf("%d of %d spans are named after the hostile method, want 6", named, len(spans))
	}

	// What the operator runs next.
	logFile := filepath.Join(t.TempDir(), "gateway.log")
	if err := os.WriteFile(logFile, []byte(logs), 0o600); err != nil {
		t.Fatal(err)
	}
	env := r.Env.Vars()
	get, _ := cli(t, env, "servers", "get", "bad"+hostileText)
	outputs := map[string]string{
		"refusals":        cliOut(t, env, "refusals", "--log", logFile, "--since", "0", "--limit", "1000"),
		"refusals --json": cliOut(t, env, "refusals", "--log", logFile, "--since", "0", "--json"),
		"status":          cliOut(t, env, "status"),
		"status --json":   cliOut(t, env, "status", "--json"),
		"status bad…":     cliOut(t, env, "status", "bad"+hostileText),
		"status capped":   cliOut(t, env, "status", "capped"),
		"servers list":    cliOut(t, env, "servers", "list"),
		"servers get":     cliOut(t, env, "servers", "get", "bad"+hostileText),
		"keys list":       cliOut(t, env, "keys", "list"),
	}
	for name, out := range outputs {
		if r, ok := unescaped(out); ok {
			t.Errorf("mcpgate %s prints %U unescaped: %q", name, r, out)
		}
		if !utf8.ValidString(out) {
			t.Errorf("mcpgate %s prints invalid UTF-8", name)
		}
	}
	// Not vacuous: these show the hostile text, escaped.
	for _, name := range []string{"refusals", "refusals --json", "status bad…", "servers list", "servers get", "keys list"} {
		if !strings.Contains(outputs[name], `\u001b]0;owned`) {
			t.Errorf("mcpgate %s does not show the hostile text escaped: %q", name, outputs[name])
		}
	}
	// JSON views keep the values exact: read back, they are what was sent.
	var rep struct {
		Records []struct {
			ServerID string `json:"server_id"`
		}
	}
	if err := json.Unmarshal([]byte(outputs["refusals --json"]), &rep); err != nil || len(rep.Records) == 0 {
		t.Fatalf("refusals --json: %v, %d records", err, len(rep.Records))
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(get), &doc); err != nil || doc["description"] != hostileText {
		t.Errorf("servers get: description %q (%v), want the item's own", doc["description"], err)
	}
}

// TestFetchFailuresNeverShowTheirToken: every path by which the gateway
// fetches from an upstream's side (the MCP url over HTTP and SSE, an
// OpenAPI spec_url, an OAuth token_url, Secrets Manager) fails with a
// token in the URL's query, and the token reaches no log line, no answer,
// no span, and nothing mcpgate servers check or refusals prints.
func TestFetchFailuresNeverShowTheirToken(t *testing.T) {
	const token = "qtoken-S3CR3T-5e1f"
	endpoint, spansFile := startCollector(t)
	ln := httptest.NewServer(http.NotFoundHandler())
	gone := ln.URL
	ln.Close() // nothing listens there now
	r := testkit.NewRig(t, testkit.RigOptions{Demo: true, Key: true})
	// A quote, an apostrophe and < in the query: a URL in a text does not
	// end there. (A raw space would make the items invalid before any
	// fetch: the registry refuses whitespace in a URL.)
	q := `?team=blue&token=a"` + token + `'b'c<d`
	r.PutServer(map[string]any{"server_id": "mcpurl", "url": gone + "/mcp" + q})
	r.PutServer(map[string]any{"server_id": "sseurl", "url": gone + "/sse" + q, "transport": "sse"})
	r.PutServer(map[string]any{"server_id": "spec", "transport": "openapi", "spec_url": gone + "/openapi.json" + q})
	r.PutServer(map[string]any{"server_id": "oauth", "url": r.Demo.URL,
		"auth": map[string]any{"type": "oauth2_client_credentials", "token_url": gone + "/token" + q, "client_id": "gw", "secret": "env:ESCAPE_TEST_CLIENT_SECRET"}})
	r.PutServer(map[string]any{"server_id": "secret", "url": r.Demo.URL, "auth": map[string]any{"type": "bearer", "secret": "secretsmanager:upstream-token"}})
	env := []string{"ESCAPE_TEST_CLIENT_SECRET=client-secret", "AWS_ENDPOINT_URL_SECRETS_MANAGER=" + gone + "/" + q}
	gw := r.StartGateway(append([]string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=100"}, env...)...)

	var answers []string
	for _, id := range []string{"mcpurl", "sseurl", "spec", "oauth", "secret"} {
		_, a := rawPost(t, gw, "/mcp-rest/tools/call", r.Key, fmt.Sprintf(`{"server_id":%q,"name":"echo","arguments":{"text":"x"}}`, id), nil)
		answers = append(answers, a)
		resp, err := testkit.Do(context.Background(), http.MethodGet, gw.URL+"/mcp-rest/tools/list?server_id="+id, http.Header{"Authorization": {"Bearer " + r.Key}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, string(resp.Body))
		h := map[string]string{"MCP-Protocol-Version": "2025-11-25"}
		_, a = rawPost(t, gw, "/mcp", r.Key, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"%s-echo","arguments":{"text":"x"}}}`, id), h)
		answers = append(answers, a)
		_, a = rawPost(t, gw, "/mcp/"+id, r.Key, `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, h)
		answers = append(answers, a)
		_, a = rawPost(t, gw, "/mcp/"+id, r.Key, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, h)
		answers = append(answers, a)
	}
	for i, a := range answers {
		if strings.Contains(a, token) {
			t.Errorf("answer %d carries the token: %s", i, a)
		}
	}
	// Not vacuous: each failure was logged, with its URL redacted.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := gw.WaitLogs(ctx, func(logs string) bool { return len(testkit.Records(logs, requestRecords)) >= len(answers) }); err != nil {
		t.Fatalf("waiting for %d request records: %v", len(answers), err)
	}
	logs := gw.Logs()
	if strings.Contains(logs, token) {
		t.Errorf("the log carries the token:\n%s", logs)
	}
	for _, what := range []string{"/mcp?team=REDACTED&token=REDACTED", "/sse?team=REDACTED&token=REDACTED", "/openapi.json?team=REDACTED&token=REDACTED"} {
		if !strings.Contains(logs, what) {
			t.Errorf("the log does not show %q:\n%s", what, logs)
		}
	}
	var spans []exportedSpan
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if spans = readSpans(t, spansFile); len(spans) >= len(answers) {
			break
		}
	}
	if len(spans) == 0 {
		t.Fatal("no span exported")
	}
	for _, s := range spans {
		b, _ := json.Marshal(s)
		if strings.Contains(string(b), token) {
			t.Errorf("a span carries the token: %s", b)
		}
	}

	// The operator's own check of each server fetches the same URLs.
	logFile := filepath.Join(t.TempDir(), "gateway.log")
	if err := os.WriteFile(logFile, []byte(logs), 0o600); err != nil {
		t.Fatal(err)
	}
	cliEnv := append(append(r.Env.Vars(), env...), "ALLOW_LOCAL_UPSTREAMS=on")
	outputs := map[string]string{"refusals": cliOut(t, cliEnv, "refusals", "--log", logFile, "--since", "0", "--limit", "1000")}
	for _, id := range []string{"mcpurl", "sseurl", "spec", "oauth", "secret"} {
		outputs["servers check "+id] = cliOut(t, cliEnv, "servers", "check", id, "--timeout", "10")
	}
	for name, out := range outputs {
		if strings.Contains(out, token) {
			t.Errorf("mcpgate %s prints the token:\n%s", name, out)
		}
		if !strings.Contains(out, "FAILED") && name != "refusals" {
			t.Errorf("mcpgate %s does not report the failure:\n%s", name, out)
		}
	}
}

// metaUpstream is a stateless MCP server on loopback whose tool "work"
// and prompt "brief" record the params._meta each request brought.
func metaUpstream(t *testing.T) (string, func() []mcp.Meta) {
	var mu sync.Mutex
	var got []mcp.Meta
	s := mcp.NewServer(&mcp.Implementation{Name: "meta", Version: "1"}, nil)
	note := func(m mcp.Meta) {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}
	s.AddPrompt(&mcp.Prompt{Name: "brief"}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		note(req.Params.Meta)
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "be brief"}}}}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "work"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		note(req.Params.Meta)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []mcp.Meta {
		mu.Lock()
		defer mu.Unlock()
		return append([]mcp.Meta(nil), got...)
	}
}

// TestCaseVariantMessagesAndMeta: on both MCP routes and both protocol
// versions, a message naming a member twice in any case (at its top level,
// in params, in params._meta) is refused with 400 and JSON-RPC invalid
// request before anything runs; and no spelling of the agent's trace
// context (traceparent, tracestate, baggage) or of the protocol's reserved
// _meta prefix reaches the upstream, on a tool call or a relayed request.
func TestCaseVariantMessagesAndMeta(t *testing.T) {
	const secret = "baggage-S3CR3T-0b1e"
	upURL, seen := metaUpstream(t)
	r := testkit.NewRig(t, testkit.RigOptions{Key: true})
	r.PutServer(map[string]any{"server_id": "meta", "url": upURL})
	gw := r.StartGateway()
	agentMeta := map[string]any{"TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "Tracestate": "agent=" + secret,
		"Baggage": "session=" + secret, "IO.ModelContextProtocol/note": secret, "example.com/kept": "yes"}
	refused := 0
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		for _, path := range []string{"/mcp", "/mcp/meta"} {
			name := "work"
			if path == "/mcp" {
				name = "meta-work"
			}
			// rawMeta is params._meta as this version's client sends it,
			// with extra's members.
			rawMeta := func(extra map[string]any) string {
				m := map[string]any{}
				if version >= "2026-07-28" {
					m = map[string]any{"io.modelcontextprotocol/protocolVersion": version,
						"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
						"io.modelcontextprotocol/clientCapabilities": map[string]any{}}
				}
				for k, v := range extra {
					m[k] = v
				}
				b, _ := json.Marshal(m)
				return string(b)
			}
			headers := func(method, n string) map[string]string {
				out := map[string]string{"MCP-Protocol-Version": version}
				if version >= "2026-07-28" {
					out["Mcp-Method"], out["Mcp-Name"] = method, n
				}
				return out
			}
			before := len(seen())
			for label, body := range map[string]string{
				"case-variant method": fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"ping","params":{"name":%q,"_meta":%s}}`, name, rawMeta(nil)),
				"repeated method":     fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call","params":{"name":%q,"_meta":%s}}`, name, rawMeta(nil)),
				"case-variant id":     fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"Id":2,"method":"tools/call","params":{"name":%q,"_meta":%s}}`, name, rawMeta(nil)),
				"case-variant params": fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"_meta":%s},"PARAMS":{"name":"x"}}`, name, rawMeta(nil)),
				"in params":           fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"Name":"other","_meta":%s}}`, name, rawMeta(nil)),
				"in _meta":            fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"_meta":%s}}`, name, strings.TrimSuffix(rawMeta(map[string]any{"baggage": "a=1"}), "}")+`,"BAGGAGE":"b=2"}`),
			} {
				status, answer := rawPost(t, gw, path, r.Key, body, headers("tools/call", name))
				var a struct {
					Error *struct {
						Code int `json:"code"`
						Data struct {
							Code string `json:"code"`
						} `json:"data"`
					} `json:"error"`
				}
				_ = json.Unmarshal([]byte(answer), &a)
				if status != http.StatusBadRequest || a.Error == nil || a.Error.Code != -32600 || a.Error.Data.Code != "BAD_REQUEST" {
					t.Errorf("%s %s, %s: %d %s, want 400 with JSON-RPC -32600 and BAD_REQUEST", version, path, label, status, answer)
				}
				refused++
			}
			if n := len(seen()) - before; n != 0 {
				t.Errorf("%s %s: the upstream ran %d requests of refused messages", version, path, n)
			}

			// Every spelling of the agent's own keys stays here.
			calls := []struct{ method, name, params string }{
				{"tools/call", name, fmt.Sprintf(`{"name":%q,"arguments":{},"_meta":%s}`, name, rawMeta(agentMeta))},
			}
			if path != "/mcp" {
				calls = append(calls, struct{ method, name, params string }{"prompts/get", "brief", fmt.Sprintf(`{"name":"brief","_meta":%s}`, rawMeta(agentMeta))})
			}
			for _, c := range calls {
				before := len(seen())
				status, answer := rawPost(t, gw, path, r.Key, fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":%q,"params":%s}`, c.method, c.params), headers(c.method, c.name))
				if status != http.StatusOK || strings.Contains(answer, `"error"`) {
					t.Errorf("%s %s %s: %d %s, want it answered", version, path, c.method, status, answer)
					continue
				}
				got := seen()
				if len(got) != before+1 {
					t.Errorf("%s %s %s: the upstream saw %d requests, want 1", version, path, c.method, len(got)-before)
					continue
				}
				m := got[len(got)-1]
				for k := range m {
					if _, sent := agentMeta[k]; sent && k != "example.com/kept" {
						t.Errorf("%s %s %s: the upstream got the agent's _meta key %q", version, path, c.method, k)
					}
				}
				if b, _ := json.Marshal(m); strings.Contains(string(b), secret) {
					t.Errorf("%s %s %s: the upstream got the agent's secret in _meta: %s", version, path, c.method, b)
				}
				if m["example.com/kept"] != "yes" {
					t.Errorf("%s %s %s: the agent's own key was not forwarded: %v", version, path, c.method, m)
				}
			}
		}
	}
	recs := gw.Records(requestRecords, testkit.Match{"code": "BAD_REQUEST", "status": "400"})
	if len(recs) != refused {
		t.Errorf("%d BAD_REQUEST records for %d refused messages", len(recs), refused)
	}
	for _, rec := range recs {
		if m := testkit.Str(rec, "mcp_method"); m != "" {
			t.Errorf("a refused message is logged as method %q", m)
		}
	}
}
