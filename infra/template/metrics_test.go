package template

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/metrics/metricstest"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	storetest.StopShared()
	testkit.CleanupBinaries()
	os.Exit(code)
}

// metricRef is a metric as CloudWatch names it: namespace, name and the
// dimension names of one of its sets ("ServerID" or "ServerID,Tool").
type metricRef struct{ ns, name, dims string }

// templateMetrics lists every metric the template's alarms and dashboard
// name, with where.
func templateMetrics(t *testing.T) map[metricRef][]string {
	t.Helper()
	tpl := loadTemplate(t)
	out := map[metricRef][]string{}
	query := regexp.MustCompile(`^SELECT \w+\((\w+)\) FROM SCHEMA\("([^"]+)"((?:, \w+)*)\)$`)
	for name, res := range tpl.Resources {
		if res.AWSCloudFormationType() != "AWS::CloudWatch::Alarm" {
			continue
		}
		a, err := tpl.GetCloudWatchAlarmWithName(name)
		if err != nil {
			t.Fatal(err)
		}
		if a.MetricName != nil {
			t.Errorf("%s: alarm on a bare metric name; use a Metrics Insights query of the gateway's namespace", name)
		}
		for _, m := range a.Metrics {
			if m.Expression == nil {
				t.Errorf("%s: a metric without an expression", name)
				continue
			}
			got := query.FindStringSubmatch(*m.Expression)
			if got == nil {
				t.Errorf("%s: expression %q is not a query of one metric", name, *m.Expression)
				continue
			}
			dims := strings.ReplaceAll(strings.TrimPrefix(got[3], ", "), ", ", ",")
			ref := metricRef{got[2], got[1], dims}
			out[ref] = append(out[ref], name)
		}
	}
	dash, err := tpl.GetCloudWatchDashboardWithName("Dashboard")
	if err != nil {
		t.Fatal(err)
	}
	search := regexp.MustCompile(`SEARCH\('\{([^}]+)\} MetricName=\\"(\w+)\\"'`)
	found := search.FindAllStringSubmatch(dash.DashboardBody, -1)
	if len(found) == 0 {
		t.Error("the dashboard graphs no metric")
	}
	for _, m := range found {
		ns, dims, _ := strings.Cut(m[1], ",")
		ref := metricRef{ns, m[2], dims}
		out[ref] = append(out[ref], "Dashboard")
	}
	if strings.Count(dash.DashboardBody, "MetricName=") != len(found) {
		t.Error("the dashboard graphs a metric in a form this test does not read")
	}
	return out
}

var (
	emittedOnce sync.Once
	emitted     map[metricRef]bool
)

// emittedMetrics runs real gateway processes with EMF_METRICS=on through
// the outcomes their records distinguish — answered, shed, queue timeout,
// upstream timeout and error, a breaker opened and refusing, a rate limit,
// an adaptive limit, the store unreachable, a cut-off call whose grace
// ran out — and returns every metric of the EMF records they wrote, until
// want are all there (or a deadline).
func emittedMetrics(t *testing.T, want map[metricRef][]string) map[metricRef]bool {
	t.Helper()
	emittedOnce.Do(func() { emitted = runEmitters(t, want) })
	return emitted
}

func runEmitters(t *testing.T, want map[metricRef][]string) map[metricRef]bool {
	rig := testkit.NewRig(t, testkit.RigOptions{Demo: true, Hostile: true, Key: true})
	url := rig.Demo.URL
	rig.PutServer(map[string]any{"server_id": "capped", "url": url, "max_concurrent_requests": 1, "on_limit": "shed"})
	rig.PutServer(map[string]any{"server_id": "queued", "url": url, "max_concurrent_requests": 1, "queue_timeout": 0.3})
	// A stateless upstream that ignores cancellation: a cut-off call's
	// grace runs out.
	stateless := testkit.StartDemoWith(t, demoupstream.HandlerOptions{Stateless: true})
	rig.PutServer(map[string]any{"server_id": "flaky", "url": stateless.URL, "max_concurrent_requests": 2, "timeout": 0.3, "cancel_grace": 0.5,
		"breaker": map[string]any{"failure_threshold": 1, "recovery_timeout": 60}})
	// An upstream whose connection breaks mid-call.
	rig.PutServer(map[string]any{"server_id": "broken", "url": rig.Hostile.URL, "max_concurrent_requests": 1, "cancel_grace": 0.5})
	rig.PutServer(map[string]any{"server_id": "limited", "url": url, "rpm_limit": 1})
	rig.PutServer(map[string]any{"server_id": "adaptive", "url": url, "max_concurrent_requests": 4, "adaptive": true})
	// MCP tasks: one whose result is larger than the gateway keeps fails.
	rig.PutServer(map[string]any{"server_id": "tasks", "url": url, "tools": map[string]any{"echo": map[string]any{"task_support": "optional"}}})
	gw := rig.StartGateway("EMF_METRICS=on", "MAX_TASK_RESULT_BYTES=1024")
	proxy := testkit.NewProxy(t, strings.TrimPrefix(rig.Env.Endpoint, "http://"))
	cut := rig.StartGateway("EMF_METRICS=on", "AWS_ENDPOINT_URL_DYNAMODB=http://"+proxy.Addr)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	call := func(g *testkit.Gateway, server, tool string, args map[string]any) string {
		r, err := g.CallTool(ctx, rig.Key, server, tool, args)
		if err != nil {
			t.Errorf("call %s/%s: %v", server, tool, err)
		}
		t.Logf("%s/%s: %d %s", server, tool, r.Status, r.Fault.Code)
		return string(r.Fault.Code)
	}
	slow := map[string]any{"ms": 1500}
	echo := map[string]any{"text": "hi"}
	var wg sync.WaitGroup
	for _, s := range []string{"capped", "queued"} {
		wg.Go(func() { call(gw, s, "slow_tool", slow) })
	}
	time.Sleep(300 * time.Millisecond) // the slow calls hold the places
	call(gw, "capped", "echo", echo)   // shed
	call(gw, "queued", "echo", echo)   // waits, and times out
	call(gw, "flaky", "slow_tool", map[string]any{"ms": 2000})
	// Its breaker opens for this caller once the cut-off call's slot is
	// given back, at the end of its grace.
	for range 50 {
		if call(gw, "flaky", "slow_tool", slow) == "CIRCUIT_OPEN" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	call(gw, "broken", "broken_stream", nil)
	call(gw, "limited", "echo", echo)
	call(gw, "limited", "echo", echo)
	call(gw, "adaptive", "echo", echo)
	if status := runTask(t, gw.URL, rig.Key, "tasks", "echo", map[string]any{"text": strings.Repeat("x", 2048)}); status != "failed" {
		t.Errorf("a task whose result is larger than MAX_TASK_RESULT_BYTES ended %q; want failed", status)
	}
	call(cut, "capped", "echo", echo) // reads the server and key while the store answers
	wg.Wait()
	proxy.Stop()
	call(cut, "capped", "echo", echo) // the lease store is gone

	got := map[metricRef]bool{}
	for {
		for _, g := range []*testkit.Gateway{gw, cut} {
			for line := range strings.Lines(g.Stdout()) {
				if !strings.HasPrefix(line, `{"_aws"`) {
					continue
				}
				rec, err := metricstest.Parse([]byte(line))
				if err != nil {
					t.Errorf("an EMF record the gateway wrote does not parse: %v\n%s", err, line)
					continue
				}
				for _, d := range rec.Directives {
					for _, set := range d.Dimensions {
						for _, m := range d.Metrics {
							got[metricRef{d.Namespace, m.Name, strings.Join(set, ",")}] = true
						}
					}
				}
			}
		}
		missing := false
		for ref := range want {
			missing = missing || !got[ref]
		}
		if !missing || ctx.Err() != nil {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestTemplateNamesOnlyEmittedMetrics: every metric and dimension set the
// alarms and the dashboard name is one the gateway's EMF records carry.
func TestTemplateNamesOnlyEmittedMetrics(t *testing.T) {
	named := templateMetrics(t)
	got := emittedMetrics(t, named)
	for ref, where := range named {
		if !got[ref] {
			t.Errorf("%s name %s in namespace %s with dimensions [%s], which the gateway's records do not carry",
				strings.Join(slices.Compact(slices.Sorted(slices.Values(where))), ", "), ref.name, ref.ns, ref.dims)
		}
	}
	if len(named) == 0 {
		t.Error("the template names no metric")
	}
	for ref := range named {
		if ref.ns != metrics.DefaultNamespace {
			t.Errorf("%s is in namespace %s, not the gateway's %s", ref.name, ref.ns, metrics.DefaultNamespace)
		}
	}
}

// runTask makes an MCP task of tool on server (protocol 2026-07-28, the
// tasks extension declared) through the gateway at base, and polls it to
// its end: its status ("" when it was not made).
func runTask(t *testing.T, base, key, server, tool string, args map[string]any) string {
	t.Helper()
	rpc := func(method, name string, params map[string]any) map[string]json.RawMessage {
		params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp/"+server, bytes.NewReader(body))
		for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
			"MCP-Protocol-Version": "2026-07-28", "Authorization": "Bearer " + key, "Mcp-Method": method, "Mcp-Name": name} {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		for line := range bytes.Lines(raw) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				raw = bytes.TrimSpace(d)
			}
		}
		var msg struct {
			Result map[string]json.RawMessage `json:"result"`
		}
		_ = json.Unmarshal(raw, &msg)
		return msg.Result
	}
	res := rpc("tools/call", tool, map[string]any{"name": tool, "arguments": args})
	var id, status string
	if json.Unmarshal(res["taskId"], &id) != nil || id == "" {
		return ""
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_ = json.Unmarshal(rpc("tasks/get", id, map[string]any{"taskId": id})["status"], &status)
		if status != "working" {
			break
		}
	}
	return status
}
