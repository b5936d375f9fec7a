package main

// TestFleetCatalog: a burst of cold gateway processes lists an upstream's
// tools once between them, through the catalog in the leases table; the
// same burst with TOOL_CATALOG=off lists once per process.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"sync"
	"testing"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// methodCounter is a loopback proxy in front of an MCP upstream that counts
// the JSON-RPC methods it forwards ("GET"/"DELETE" for other requests).
type methodCounter struct {
	URL string
	mu  sync.Mutex
	n   map[string]int
}

func newMethodCounter(t testing.TB, target string) *methodCounter {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	m := &methodCounter{n: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	proxy.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Method
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct{ Method string }
			if json.Unmarshal(body, &msg) == nil && msg.Method != "" {
				name = msg.Method
			}
		}
		m.mu.Lock()
		m.n[name]++
		m.mu.Unlock()
		r.URL.Path = u.Path
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

// reset returns the counts so far and starts again.
func (m *methodCounter) reset() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.n
	m.n = map[string]int{}
	return n
}

// burst starts procs cold gateway processes with env, then makes calls
// tool calls spread over them, the first on each process at once.
func burst(t testing.TB, env *storetest.Env, key, server string, procs, calls int, extra ...string) {
	t.Helper()
	gws := make([]*testkit.Gateway, procs)
	var wg sync.WaitGroup
	for i := range gws {
		wg.Go(func() { gws[i] = testkit.StartGateway(t, env, extra...) })
	}
	wg.Wait()
	defer func() {
		for _, g := range gws {
			g.Stop()
		}
	}()
	per := (calls + procs - 1) / procs
	errs := make(chan error, calls)
	for i, g := range gws {
		n := min(per, calls-i*per)
		wg.Go(func() {
			for j := range n {
				r, err := g.CallTool(t.Context(), key, server, "echo", map[string]any{"text": fmt.Sprint(j)})
				if err == nil && r.Status != http.StatusOK {
					err = fmt.Errorf("status %d: %s", r.Status, r.Body)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestFleetCatalog(t *testing.T) {
	env := storetest.NewEnv(t)
	demo := testkit.StartDemo(t)
	up := newMethodCounter(t, demo.URL)
	testkit.PutServer(t, env, map[string]any{"server_id": "demo", "url": up.URL, "max_concurrent_requests": 2})
	key := testkit.PutKey(t, env, "demo")
	const procs = 6

	t.Run("without the catalog", func(t *testing.T) {
		up.reset()
		burst(t, env, key, "demo", procs, procs, "TOOL_CATALOG=off")
		got := up.reset()
		if got["tools/call"] != procs || got["tools/list"] != procs {
			t.Errorf("upstream saw %v; want %d tools/call and, without the catalog, %d tools/list", got, procs, procs)
		}
	})
	t.Run("with the catalog", func(t *testing.T) {
		burst(t, env, key, "demo", procs, 2*procs)
		got := up.reset()
		if got["tools/call"] != 2*procs || got["tools/list"] != 1 {
			t.Errorf("upstream saw %v from %d cold processes; want %d tools/call and 1 tools/list", got, procs, 2*procs)
		}
		// Warm: the list is fresh; another burst lists nothing.
		burst(t, env, key, "demo", procs, procs)
		if got := up.reset(); got["tools/list"] != 0 {
			t.Errorf("second burst within the TTL: upstream saw %v; want no tools/list", got)
		}
	})
	t.Run("servers set invalidates", func(t *testing.T) {
		cli := exec.Command(testkit.Binary(t, "./cmd/mcpgate"), "servers", "set", "demo", "description=changed")
		cli.Env = append(cli.Environ(), env.Vars()...)
		if out, err := cli.CombinedOutput(); err != nil {
			t.Fatalf("servers set: %v\n%s", err, out)
		}
		burst(t, env, key, "demo", procs, procs)
		if got := up.reset(); got["tools/list"] != 1 {
			t.Errorf("after servers set: upstream saw %v; want 1 tools/list", got)
		}
	})
}
