package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestConsoleCommand: mcpgate console refuses an address off loopback,
// prints the URL it serves on with its token, acts as the OS user against
// a local store, writes its audit records beside the gateway's log, and
// stops on Ctrl-C with status 0.
func TestConsoleCommand(t *testing.T) {
	env := storetest.NewEnv(t)
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:8080", "example.com:80"} {
		mcpgate(t, env, "console", "--addr", addr).fails(t, 2, "not a loopback address")
	}
	testkit.PutServer(t, env, map[string]any{"server_id": "demo", "url": "https://example.com/mcp", "max_concurrent_requests": 2})
	dir := t.TempDir()
	v := vars(env)
	v[envLog] = filepath.Join(dir, "gateway.log")
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console"}, strings.NewReader(""), pw, io.Discard, func(k string) string { return v[k] })
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var url string
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "http://127.0.0.1:") {
			url = line
			break
		} else if !strings.Contains(line, "acting as local:") {
			t.Errorf("console printed %q; want who it acts as", line)
		}
	}
	go io.Copy(io.Discard, pr)
	if !strings.Contains(url, "/?token=") {
		cancel()
		t.Fatalf("console printed no URL with a token: %q", url)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	base := strings.Split(url, "/?")[0]
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(url) // sets the cookie, then the Fleet page
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(b), `data-server="demo"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console's page never showed demo: %d\n%s", resp.StatusCode, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/servers/demo/pause", strings.NewReader("seconds=30"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("pause: %v %v", resp, err)
	}
	resp.Body.Close()
	audit, err := os.ReadFile(filepath.Join(dir, "console-audit.log"))
	if err != nil || !strings.Contains(string(audit), `"action":"pause"`) || !strings.Contains(string(audit), `"operator":"local:`) {
		t.Errorf("audit log beside the gateway's log: %v\n%s", err, audit)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("console exited %d on Ctrl-C; want 0", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("console did not stop on Ctrl-C")
	}
}
