package testkit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// Upstream is the demo upstream (infra/demo-upstream) running as its own OS
// process on loopback: it counts its own calls in flight, whatever the
// gateways in front of it believe.
type Upstream struct {
	// URL is the base URL: MCP streamable HTTP at URL+"/mcp", the SSE
	// transport at URL+"/sse", the OpenAPI document at
	// URL+"/openapi.json".
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartUpstream starts the demo upstream with flags (-stateless, -json,
// -propagate-cancel) and waits until it listens. It is stopped when the
// test ends.
func StartUpstream(t testing.TB, flags ...string) *Upstream {
	t.Helper()
	cmd := exec.Command(Binary(t, "./infra/demo-upstream"), append([]string{"-addr", "127.0.0.1:0"}, flags...)...)
	storetest.SetParentDeathSignal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	u := &Upstream{cmd: cmd, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			// "demo upstream listening http://127.0.0.1:port (...)"
			if rest, ok := strings.CutPrefix(sc.Text(), "demo upstream listening "); ok {
				url, _, _ := strings.Cut(rest, " ")
				select {
				case ready <- url:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(u.done)
	}()
	t.Cleanup(u.stop)
	select {
	case u.URL = <-ready:
		return u
	case <-u.done:
		t.Fatal("demo upstream exited before listening")
	case <-time.After(60 * time.Second):
		t.Fatal("demo upstream did not listen within 60s")
	}
	return nil
}

// stop kills the process: it keeps no state worth a graceful shutdown,
// which would wait for its open SSE streams.
func (u *Upstream) stop() {
	_ = u.cmd.Process.Kill()
	<-u.done
}

var upstreamClient = &http.Client{Timeout: 2 * time.Minute}

func (u *Upstream) stats(ctx context.Context, path string) (demoupstream.Stats, error) {
	var s demoupstream.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.URL+path, nil)
	if err != nil {
		return s, err
	}
	resp, err := upstreamClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return s, fmt.Errorf("GET %s: %s %s", path, resp.Status, b)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// Stats reads the upstream's counters.
func (u *Upstream) Stats(ctx context.Context) (demoupstream.Stats, error) {
	return u.stats(ctx, "/stats")
}

// WaitIdle waits until no call is in flight at the upstream, and returns
// its counters then.
func (u *Upstream) WaitIdle(ctx context.Context) (demoupstream.Stats, error) {
	return u.stats(ctx, "/stats/idle")
}

// OpenGate releases every call held on the named gate, now and later.
func (u *Upstream) OpenGate(ctx context.Context, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.URL+"/gates/"+name, nil)
	if err != nil {
		return err
	}
	resp, err := upstreamClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("open gate %s: %s", name, resp.Status)
	}
	return nil
}
