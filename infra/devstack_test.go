package infra

// TestDevScript runs infra/dev.sh (what `make dev` runs) as a person would
// on a machine where another stack already holds the default ports: it must
// pick free ports and say so, write an env file a shell can source, serve
// the demo through the gateway (the README's MCP Inspector snippet lists
// and calls its tools), and stop quietly on Ctrl-C: exit 0 with every
// process it started gone.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// defaultPorts are dev.sh's defaults: store, gateway, demo upstream.
var defaultPorts = []int{8000, 8080, 9100}

func TestDevScript(t *testing.T) {
	root := repoRoot(t)
	need(t, filepath.Join(root, "infra", "node_modules", "dynalite"), "dynalite (run `make deps`)")
	if _, err := exec.LookPath("node"); err != nil {
		need(t, "", "node")
	}

	// Hold the default ports, as another stack would. One that is taken
	// already (by a stack this test did not start) is just as good.
	for _, p := range defaultPorts {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			c, derr := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if derr != nil {
				t.Fatalf("port %d: cannot listen (%v) and nothing accepts there (%v)", p, err, derr)
			}
			c.Close()
			continue
		}
		t.Cleanup(func() { l.Close() })
	}

	state := t.TempDir()
	d := startDev(t, root, state)
	ready := d.waitFor(t, "Gateway ready at ")

	// The ports it chose are printed, none of them a default one.
	for _, name := range []string{"store", "gateway", "demo"} {
		if !regexp.MustCompile(`port \d+ \(` + name + `\) is taken; using a free one`).MatchString(d.output()) {
			t.Errorf("dev.sh did not say it replaced the %s port:\n%s", name, d.output())
		}
	}
	url := strings.Fields(strings.TrimPrefix(ready, "Gateway ready at "))[0]

	env := sourceEnv(t, filepath.Join(state, "env"))
	for _, k := range []string{"MCPGATE_URL", "MCPGATE_KEY", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_DYNAMODB",
		"SERVERS_TABLE", "LEASES_TABLE", "KEYS_TABLE"} {
		if env[k] == "" {
			t.Errorf("%s/env does not export %s", state, k)
		}
	}
	if env["MCPGATE_URL"] != url {
		t.Errorf("MCPGATE_URL=%q, but dev.sh printed %q", env["MCPGATE_URL"], url)
	}
	if !strings.HasPrefix(env["MCPGATE_KEY"], "mcpg_") {
		t.Errorf("MCPGATE_KEY=%q is not a gateway key", env["MCPGATE_KEY"])
	}
	for _, u := range []string{url, env["AWS_ENDPOINT_URL_DYNAMODB"]} {
		for _, p := range defaultPorts {
			if strings.HasSuffix(u, fmt.Sprintf(":%d", p)) {
				t.Errorf("%s uses the taken default port %d", u, p)
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(state, "env")); err == nil && fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("the env file holds the dev key but is readable by others (%v)", fi.Mode().Perm())
	}

	// The stack works: the demo's tools are listed with the dev key.
	req, _ := http.NewRequest(http.MethodGet, url+"/mcp-rest/tools/list?server_id=demo", nil)
	req.Header.Set("Authorization", "Bearer "+env["MCPGATE_KEY"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("slow_tool")) {
		t.Errorf("tools/list through the dev gateway: %d %s", resp.StatusCode, body)
	}

	t.Run("inspector", func(t *testing.T) { inspectorSnippet(t, root, env) })

	// Ctrl-C: the terminal signals the whole foreground process group.
	if err := syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = d.wait(t)
	if err != nil {
		t.Errorf("dev.sh after Ctrl-C: %v, want exit status 0\n%s", err, d.output())
	}
	if out := d.output(); !strings.Contains(out, "dev: stopped") || strings.Contains(out, "unexpectedly") {
		t.Errorf("dev.sh did not stop quietly:\n%s", out)
	}
	// Every process it started is gone: its process group is empty.
	if err := syscall.Kill(-d.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		out, _ := exec.Command("ps", "-o", "pid,pgid,stat,args", "-g", fmt.Sprint(d.cmd.Process.Pid)).CombinedOutput()
		t.Errorf("processes of dev.sh left after it exited (kill -0: %v):\n%s", err, out)
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// inspectorSnippet runs the README's MCP Inspector CLI snippet against the
// dev gateway: list the tools, then call one.
func inspectorSnippet(t *testing.T, root string, env map[string]string) {
	inspector := filepath.Join(root, "infra", "node_modules", "@modelcontextprotocol", "inspector", "package.json")
	need(t, inspector, "the MCP Inspector (run `make deps`)")
	bin := filepath.Join(root, "infra", "node_modules", ".bin", "mcp-inspector")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// The snippet as the README gives it, with npx resolved to the
		// installed copy (tests reach no registry).
		args = append([]string{bin, "--cli", env["MCPGATE_URL"] + "/mcp", "--header", "Authorization: Bearer " + env["MCPGATE_KEY"]}, args...)
		cmd := exec.CommandContext(ctx, "node", args...)
		cmd.WaitDelay = 5 * time.Second
		storetest.SetParentDeathSignal(cmd)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("inspector %s: %v\n%s", strings.Join(args[2:], " "), err, out)
		}
		return string(out)
	}
	if out := run("--method", "tools/list"); !strings.Contains(out, `"demo-slow_tool"`) {
		t.Errorf("the Inspector's tools/list does not show demo-slow_tool:\n%s", out)
	}
	if out := run("--method", "tools/call", "--tool-name", "demo-echo", "--tool-arg", "text=hello from the inspector"); !strings.Contains(out, "hello from the inspector") {
		t.Errorf("the Inspector's tools/call did not echo:\n%s", out)
	}
}

// dev is a running infra/dev.sh.
type dev struct {
	cmd  *exec.Cmd
	done chan error
	mu   sync.Mutex
	out  bytes.Buffer
	line chan string
}

func startDev(t *testing.T, root, state string) *dev {
	t.Helper()
	// A shell started with SIGINT ignored (as background jobs of
	// non-interactive shells are) cannot trap it, and passes that on:
	// handling SIGINT here gives dev.sh the default disposition, as a
	// terminal's foreground job has.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT)
	t.Cleanup(func() { signal.Stop(sigs) })

	cmd := exec.Command("bash", filepath.Join(root, "infra", "dev.sh"))
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DEV_") && !strings.HasPrefix(kv, "GATEWAY_ADDR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "DEV_STATE_DIR="+state)
	// Its own process group, like a terminal's foreground job, so that
	// the test can signal it as Ctrl-C does and see what is left.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	d := &dev{cmd: cmd, done: make(chan error, 1), line: make(chan string, 64)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		pw.Close()
		d.done <- err
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			select {
			case d.line <- sc.Text():
			default:
			}
		}
		close(d.line)
	}()
	t.Cleanup(func() {
		// Whatever happened, leave nothing running.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	return d
}

func (d *dev) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// waitFor returns the first line starting with prefix; it fails if dev.sh
// exits first or takes more than 5 minutes (it builds three binaries).
func (d *dev) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(5 * time.Minute)
	for {
		select {
		case l, ok := <-d.line:
			if !ok {
				t.Fatalf("dev.sh ended before printing %q:\n%s", prefix, d.output())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("dev.sh did not print %q within 5 minutes:\n%s", prefix, d.output())
		}
	}
}

// wait returns dev.sh's exit error once it has exited (it drains the rest
// of its output first).
func (d *dev) wait(t *testing.T) error {
	t.Helper()
	go func() {
		for range d.line {
		}
	}()
	select {
	case err := <-d.done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("dev.sh did not exit within a minute of SIGINT:\n%s", d.output())
		return nil
	}
}

// sourceEnv sources file in bash and returns the environment it leaves.
func sourceEnv(t *testing.T, file string) map[string]string {
	t.Helper()
	cmd := exec.Command("bash", "-c", `. "$1" && env -0`, "bash", file)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("source %s: %v", file, err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(out), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := storetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// need skips the test locally, and fails it under CI, when path (or, for
// "", the program named by what) is missing.
func need(t *testing.T, path, what string) {
	t.Helper()
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	if os.Getenv("CI") == "" {
		t.Skipf("skipping: %s is not installed", what)
	}
	t.Fatalf("%s is not installed", what)
}
