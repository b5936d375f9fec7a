package testkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{} // package → executable
)

// GatewayBinary builds functions/gateway once per test binary and returns
// the executable's path.
func GatewayBinary(t testing.TB) string { return Binary(t, "./functions/gateway") }

// Binary builds a main package of this module (e.g. "./cmd/mcpgate") once
// per test binary and returns the executable's path.
// Under -short (make check) it skips the test instead: the tests that run
// processes are the slow ones.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping under -short: runs " + pkg + " as a process")
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if path, ok := built[pkg]; ok {
		return path
	}
	root, err := storetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if buildDir == "" {
		if buildDir, err = os.MkdirTemp("", "mcpgate-bin-"); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(buildDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", path, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	built[pkg] = path
	return path
}

// CleanupBinaries removes what GatewayBinary built; call it from TestMain.
func CleanupBinaries() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Gateway is a gateway OS process serving on loopback.
type Gateway struct {
	// URL is the base URL, e.g. http://127.0.0.1:41234.
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	logs bytes.Buffer
	// grew is closed and replaced whenever a log line arrives.
	grew chan struct{}
	out  lockedBuffer // stdout: the EMF metric records, when on
}

// lockedBuffer is a bytes.Buffer safe for a writer and readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServing runs the executable at path as a gateway process for t:
// with the store's environment, ALLOW_LOCAL_UPSTREAMS=on, and extra, until
// it logs that it is listening. It is stopped when t ends. It may be
// called from any goroutine: it reports a failure to start as an error.
func startServing(t testing.TB, env *storetest.Env, path string, extra []string) (*Gateway, error) {
	cmd := exec.Command(path)
	// Test upstreams run on loopback; extra may turn that off again (the
	// last of two values wins).
	cmd.Env = append(append(baseEnv(), env.Vars()...), "GATEWAY_ADDR=127.0.0.1:0", "ALLOW_LOCAL_UPSTREAMS=on")
	cmd.Env = append(cmd.Env, extra...)
	storetest.SetParentDeathSignal(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	g := &Gateway{cmd: cmd, done: make(chan struct{}), grew: make(chan struct{})}
	cmd.Stdout = &g.out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			g.mu.Lock()
			g.logs.Write(line)
			g.logs.WriteByte('\n')
			close(g.grew)
			g.grew = make(chan struct{})
			g.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "listening" {
				select {
				case ready <- rec.Addr:
				default:
				}
			}
		}
	}()
	go func() {
		<-scanned
		_ = cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("gateway pid %d logs:\n%s", cmd.Process.Pid, g.Logs())
		}
	})
	select {
	case addr := <-ready:
		g.URL = "http://" + addr
		return g, nil
	case <-g.done:
		return nil, fmt.Errorf("gateway exited before listening:\n%s", g.Logs())
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("gateway did not listen within 60s:\n%s", g.Logs())
	}
}

// baseEnv is the parent's environment without anything that would point
// the gateway elsewhere.
func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "AWS_") || name == "GATEWAY_ADDR" ||
			name == "SERVERS_TABLE" || name == "LEASES_TABLE" || name == "KEYS_TABLE" || name == "TASKS_TABLE" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Logs returns what the process has written to stderr.
func (g *Gateway) Logs() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logs.String()
}

// WaitLogs blocks until done(logs) holds for what the process has logged,
// ctx ends, or the process exits.
func (g *Gateway) WaitLogs(ctx context.Context, done func(logs string) bool) error {
	for {
		g.mu.Lock()
		logs, grew := g.logs.String(), g.grew
		g.mu.Unlock()
		if done(logs) {
			return nil
		}
		select {
		case <-grew:
		case <-ctx.Done():
			return ctx.Err()
		case <-g.done:
			return errors.New("the gateway exited")
		}
	}
}

// Stdout returns what the process has written to stdout (the EMF metric
// records, when EMF_METRICS is on).
func (g *Gateway) Stdout() string { return g.out.String() }

// PeakRSS is the process's peak resident set size so far, in bytes (from
// /proc, so Linux only).
func (g *Gateway) PeakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (g *Gateway) Kill() {
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.done
}

// Stop asks the process to shut down (SIGTERM), kills it if it has not
// exited within 10 s, and waits for it.
func (g *Gateway) Stop() {
	select {
	case <-g.done:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		g.Kill()
	}
}

// Response is an HTTP answer read whole: the one shape the gateway tests
// read answers in.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// Fault is the gateway's error object (fault.Body) of an answer other
	// than 200; zero for a 200 or a body that is not one.
	Fault fault.Detail
}

// RetryAfter is the wait an answer other than 200 advises: its error's
// retry_after_ms, else its Retry-After header (whole seconds), else 0.
func (r Response) RetryAfter() time.Duration {
	if r.Status == http.StatusOK {
		return 0
	}
	if r.Fault.RetryAfterMS > 0 {
		return time.Duration(r.Fault.RetryAfterMS) * time.Millisecond
	}
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err == nil {
		return time.Duration(s) * time.Second
	}
	return 0
}

var client = &http.Client{Timeout: 2 * time.Minute}

// Post sends a JSON body with the bearer key.
func Post(ctx context.Context, url, key string, body any) (Response, error) {
	hdr := http.Header{}
	if key != "" {
		hdr.Set("Authorization", "Bearer "+key)
	}
	return Do(ctx, http.MethodPost, url, hdr, body)
}

// Do sends a request with the given headers and, unless body is nil, a
// JSON body.
func Do(ctx context.Context, method, url string, hdr http.Header, body any) (Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Response{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return Response{}, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	r := Response{Status: resp.StatusCode, Header: resp.Header, Body: rb}
	if r.Status != http.StatusOK {
		var b fault.Body
		_ = json.Unmarshal(rb, &b)
		r.Fault = b.Error
	}
	return r, err
}

// CallTool calls a tool through the gateway's REST route.
func (g *Gateway) CallTool(ctx context.Context, key, serverID, tool string, args map[string]any) (Response, error) {
	return Post(ctx, g.URL+"/mcp-rest/tools/call", key, map[string]any{"server_id": serverID, "name": tool, "arguments": args})
}
