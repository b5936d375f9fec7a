package main

// TestFleetCatalog: a burst of cold gateway processes lists an upstream's
// tools once between them, through the catalog in the leases table; the
// same burst with TOOL_CATALOG=off lists once per process.
// TestToolListsStayWithTheirPrincipal: no principal's session state reaches
// another through a tool list.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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

// burst launches procs cold gateway processes of r for t, with extra, then
// makes calls tool calls spread over them, the first on each process at
// once.
func burst(t testing.TB, r *testkit.Rig, key, server string, procs, calls int, extra ...string) {
	t.Helper()
	gws := r.Launch(t, procs, extra...)
	var wg sync.WaitGroup
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
				resp, err := g.CallTool(t.Context(), key, server, "echo", map[string]any{"text": fmt.Sprint(j)})
				if err == nil && resp.Status != http.StatusOK {
					err = fmt.Errorf("status %d: %s", resp.Status, resp.Body)
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
	r := testkit.NewRig(t, testkit.RigOptions{Demo: true})
	up := newMethodCounter(t, r.Demo.URL)
	r.PutServer(map[string]any{"server_id": "demo", "url": up.URL, "max_concurrent_requests": 2})
	key := r.PutKey("demo")
	const procs = 6

	t.Run("without the catalog", func(t *testing.T) {
		up.reset()
		burst(t, r, key, "demo", procs, procs, "TOOL_CATALOG=off")
		got := up.reset()
		if got["tools/call"] != procs || got["tools/list"] != procs {
			t.Errorf("upstream saw %v; want %d tools/call and, without the catalog, %d tools/list", got, procs, procs)
		}
	})
	t.Run("with the catalog", func(t *testing.T) {
		burst(t, r, key, "demo", procs, 2*procs)
		got := up.reset()
		if got["tools/call"] != 2*procs || got["tools/list"] != 1 {
			t.Errorf("upstream saw %v from %d cold processes; want %d tools/call and 1 tools/list", got, procs, 2*procs)
		}
		// Warm: the list is fresh; another burst lists nothing.
		burst(t, r, key, "demo", procs, procs)
		if got := up.reset(); got["tools/list"] != 0 {
			t.Errorf("second burst within the TTL: upstream saw %v; want no tools/list", got)
		}
	})
	t.Run("servers set invalidates", func(t *testing.T) {
		cli := exec.Command(testkit.Binary(t, "./cmd/mcpgate"), "servers", "set", "demo", "description=changed")
		cli.Env = append(cli.Environ(), r.Env.Vars()...)
		if out, err := cli.CombinedOutput(); err != nil {
			t.Fatalf("servers set: %v\n%s", err, out)
		}
		burst(t, r, key, "demo", procs, procs)
		if got := up.reset(); got["tools/list"] != 1 {
			t.Errorf("after servers set: upstream saw %v; want 1 tools/list", got)
		}
	})
}

// listing is one gateway's view of a server's tool descriptions for a key,
// over REST or over MCP on /mcp/{server_id}.
func listing(t *testing.T, g *testkit.Gateway, key, server string, overMCP bool) string {
	t.Helper()
	if !overMCP {
		r, err := testkit.Do(t.Context(), http.MethodGet, g.URL+"/mcp-rest/tools/list?server_id="+server, http.Header{"Authorization": {"Bearer " + key}}, nil)
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("REST list of %s: %v %d %s", server, err, r.Status, r.Body)
		}
		return string(r.Body)
	}
	cs := agentSession(t.Context(), t, g.URL+"/mcp/"+server, key)
	defer cs.Close()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatalf("MCP list of %s: %v", server, err)
	}
	b, _ := json.Marshal(res)
	return string(b)
}

// TestToolListsStayWithTheirPrincipal: a stateful upstream's tool list
// shows what a session remembered (the description of its notes tool). A
// list it marks private is kept per principal and never enters the fleet's
// catalog; a list it shares is fetched on a session of the gateway's own,
// on which no agent calls tools. Either way, what key A's session holds
// never reaches key B, on any of two gateway processes, over REST or MCP,
// for a capped server (whose list goes through the catalog) and an uncapped
// one (kept per instance).
func TestToolListsStayWithTheirPrincipal(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{})
	private := testkit.StartStatefulWith(t, testkit.StatefulOptions{Private: true, TTL: time.Second})
	public := testkit.StartStatefulWith(t, testkit.StatefulOptions{})
	r.PutServer(map[string]any{"server_id": "capped", "url": private.URL, "max_concurrent_requests": 2})
	r.PutServer(map[string]any{"server_id": "uncapped", "url": private.URL})
	r.PutServer(map[string]any{"server_id": "shared", "url": public.URL, "max_concurrent_requests": 2})
	alice, bob := r.PutKey("*"), r.PutKey("*")
	gws := []*testkit.Gateway{r.StartGateway("CATALOG_TTL=1s"), r.StartGateway("CATALOG_TTL=1s")}
	// Bob lists first everywhere, so that each gateway holds a list.
	for _, id := range []string{"capped", "uncapped", "shared"} {
		for _, g := range gws {
			if got := listing(t, g, bob, id, false); !strings.Contains(got, "Notes of this session") {
				t.Fatalf("bob's list of %s lacks the notes tool: %s", id, got)
			}
		}
	}
	remember := func(id, secret string) {
		r, err := gws[0].CallTool(t.Context(), alice, id, "remember", map[string]any{"v": secret})
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("remember on %s: %v %d %s", id, err, r.Status, r.Body)
		}
	}
	wait, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	bobSees := func(id, secret string) {
		t.Helper()
		for i, g := range gws {
			for _, overMCP := range []bool{false, true} {
				if got := listing(t, g, bob, id, overMCP); strings.Contains(got, secret) {
					t.Errorf("server %s: bob's list on gateway %d (MCP %v) shows alice's %s", id, i, overMCP, secret)
				}
			}
		}
	}

	for _, id := range []string{"capped", "uncapped"} {
		secret := "A-PRIVATE-" + id
		remember(id, secret)
		// Alice's own list shows her note once it is listed again (its
		// ttlMs is 1 s): it is hers.
		for !strings.Contains(listing(t, gws[0], alice, id, false), secret) {
			select {
			case <-wait.Done():
				t.Fatalf("server %s: alice's own list never showed her note", id)
			case <-time.After(50 * time.Millisecond):
			}
		}
		bobSees(id, secret)
	}
	if n := catalogChunks(t, r.Env, "capped"); n != 0 {
		t.Errorf("the catalog holds %d chunks of a private list; want none", n)
	}

	// A shared list: once listed again after alice remembered, by her own
	// requests alone, it still shows nobody's note.
	const secret = "A-PRIVATE-shared"
	remember("shared", secret)
	before := public.Lists()
	for public.Lists() == before {
		if got := listing(t, gws[0], alice, "shared", false); strings.Contains(got, secret) {
			t.Fatalf("the shared list shows alice's note: %s", got)
		}
		select {
		case <-wait.Done():
			t.Fatal("the shared list was never listed again")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if got := listing(t, gws[0], alice, "shared", false); strings.Contains(got, secret) {
		t.Errorf("the shared list, listed again, shows alice's note: %s", got)
	}
	bobSees("shared", secret)
}

// catalogChunks reads how many chunks the catalog head of id points at.
func catalogChunks(t *testing.T, env *storetest.Env, id string) int {
	t.Helper()
	head := testkit.CatalogHead(t, env, id)
	if len(head) == 0 {
		t.Fatalf("no catalog head for %s", id)
	}
	n, _ := head["list_chunks"].(*types.AttributeValueMemberN)
	if n == nil {
		return 0
	}
	v, _ := strconv.Atoi(n.Value)
	return v
}
