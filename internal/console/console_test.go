package console_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/chromedp/chromedp"

	"github.com/mcpgate/mcpgate/internal/console"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// The secret values the tests plant where a careless console would show
// them: in a server's URL and behind its credential reference.
const (
	urlSecret    = "url-secret-5f1e2d"
	secretEnv    = "MCPGATE_CONSOLE_TEST_SECRET"
	secretValue  = "credential-secret-9a8b7c"
	screenshotsV = "CONSOLE_SCREENSHOTS"
)

// TestConsole runs one stack — two gateway processes, the demo upstream,
// dynalite — and the console of it in Chromium, and checks each screen
// and action through the page.
func TestConsole(t *testing.T) {
	tab := newTab(t)
	t.Setenv(secretEnv, secretValue)
	rig := testkit.NewRig(t, testkit.RigOptions{Demo: true, Key: true})
	keyB := rig.PutKey("*")
	rig.PutServer(map[string]any{"server_id": "demo", "url": rig.Demo.URL, "max_concurrent_requests": 2, "on_limit": "queue", "queue_timeout": 30,
		"description": "the demo upstream"})
	rig.PutServer(map[string]any{"server_id": "other", "url": rig.Demo.URL, "max_concurrent_requests": 5})
	rig.PutServer(map[string]any{"server_id": "flaky", "url": rig.Demo.URL, "max_concurrent_requests": 4, "timeout": 0.5, "on_limit": "shed",
		"breaker": map[string]any{"failure_threshold": 1, "recovery_timeout": 120}})
	rig.PutServer(map[string]any{"server_id": "secretive", "url": rig.Demo.URL + "?api_key=" + urlSecret, "max_concurrent_requests": 1,
		"auth": map[string]any{"type": "bearer", "secret": "env:" + secretEnv}})
	rig.PutServer(map[string]any{"server_id": "dead", "url": "http://127.0.0.1:1/mcp", "max_concurrent_requests": 1})
	gws := rig.Start(2)
	logPath := filepath.Join(t.TempDir(), "gateway.log")
	pumpLogs(t, logPath, gws)
	con := startConsole(t, rig.Env, rig.Env.Endpoint, logPath, nil)
	navigate(t, tab, con.tokenURL)
	if u, err := chromedp.Run(tab, chromedp.Location()); err != nil || strings.Contains(u, "token") {
		t.Fatalf("after opening the console's URL the address is %q (%v); want the token gone from it", u, err)
	}
	var created string // the key the Keys screen created
	shots := os.Getenv(screenshotsV)

	t.Run("fleet is live", func(t *testing.T) {
		for id, cap := range map[string]string{"demo": "2", "other": "5", "flaky": "4"} {
			waitFor(t, tab, `tr[data-server="`+id+`"] .limit`, id+"'s cap", equals(cap))
		}
		// Calls in flight across both processes.
		var calls []<-chan testkit.Response
		for i := range 2 {
			calls = append(calls, call(gws[i], rig.Key, "demo", "slow_tool", map[string]any{"ms": 3500}))
		}
		_, took := waitFor(t, tab, `tr[data-server="demo"] .inflight`, "demo's calls in flight", equals("2"))
		t.Logf("calls in flight shown %v after they were sent", took.Round(time.Millisecond))
		// Callers queued behind them.
		for i := range 2 {
			calls = append(calls, call(gws[i], keyB, "demo", "slow_tool", map[string]any{"ms": 100}))
		}
		_, took = waitFor(t, tab, `tr[data-server="demo"] .waiting`, "demo's waiting callers", equals("2"))
		t.Logf("waiting callers shown %v after they queued", took.Round(time.Millisecond))
		if shots != "" {
			screenshot(t, tab, filepath.Join(shots, "fleet.png"))
		}
		// Another process changes the cap.
		testkit.UpdateServer(t, rig.Env, "demo", "max_concurrent_requests", &types.AttributeValueMemberN{Value: "3"})
		_, took = waitFor(t, tab, `tr[data-server="demo"] .limit`, "demo's new cap", equals("3"))
		t.Logf("a cap changed by another process shown %v later", took.Round(time.Millisecond))
		// Two principals' calls time out (threshold 1): each closes the
		// breaker for its own principal, the second for everyone.
		a := call(gws[0], rig.Key, "flaky", "slow_tool", map[string]any{"ms": 1500})
		b := call(gws[1], keyB, "flaky", "slow_tool", map[string]any{"ms": 1500})
		for _, ch := range []<-chan testkit.Response{a, b} {
			if r := <-ch; r.Status != http.StatusGatewayTimeout {
				t.Fatalf("flaky call: %d %s; want 504", r.Status, r.Body)
			}
		}
		_, took = waitFor(t, tab, `tr[data-server="flaky"] .breaker`, "flaky's breaker", contains("open"))
		t.Logf("a breaker opened by the gateways shown %v after the calls were answered", took.Round(time.Millisecond))
		for _, ch := range calls {
			if r := <-ch; r.Status != http.StatusOK {
				t.Errorf("demo call: %d %s", r.Status, r.Body)
			}
		}
		waitFor(t, tab, `tr[data-server="demo"] .inflight`, "demo's calls done", equals("0"))
		waitFor(t, tab, `tr[data-server="demo"] .refusals`, "demo's refusals", equals("–"))
		waitFor(t, tab, `tr[data-server="flaky"] .refusals`, "flaky's refusals by code", contains("UPSTREAM_TIMEOUT 2"))
	})

	t.Run("server actions", func(t *testing.T) {
		navigate(t, tab, con.base+"/servers/demo")
		waitFor(t, tab, ".summary .limit", "demo's limit", equals("3"))

		// Pause: a caller that does not wait is refused, then resume.
		if s := act(t, tab, "#pause"); !strings.Contains(s, "paused until") {
			t.Fatalf("pause answered %q", s)
		}
		waitFor(t, tab, ".summary .paused", "the pause", contains("paused until"))
		it, err := (&fleet.Store{DB: rig.Env.Client, Tables: rig.Env.Tables}).Lease(context.Background(), "demo")
		if err != nil || lease.Describe(it, time.Now(), 3, 0, nil).HeldUntil == nil {
			t.Fatalf("the store shows no pause: %v", err)
		}
		if s := act(t, tab, "#resume"); !strings.Contains(s, "admits calls again") {
			t.Fatalf("resume answered %q", s)
		}
		waitFor(t, tab, ".summary .paused", "the resume", contains("admitting"))

		// Release a lease held by a running call, after the warning.
		running := call(gws[0], rig.Key, "demo", "slow_tool", map[string]any{"ms": 4000})
		waitFor(t, tab, ".summary .inflight", "the call's lease", equals("1"))
		if s := text(t, tab, ".leases + .note"); !strings.Contains(s, console.ReleaseWarning) {
			t.Errorf("no plain warning beside the leases: %q", s)
		}
		if s := act(t, tab, "table.leases button"); !strings.Contains(s, "released") || !strings.Contains(s, console.ReleaseWarning) {
			t.Fatalf("release answered %q", s)
		}
		waitFor(t, tab, ".summary .inflight", "the released lease", equals("0"))
		<-running

		// Change the cap: conditioned on the item as the page showed it.
		setInput(t, tab, `input[name="cap"]`, "4")
		if s := act(t, tab, "#set-cap"); !strings.Contains(s, "The cap of demo is 4") {
			t.Fatalf("cap answered %q", s)
		}
		waitFor(t, tab, ".summary .limit", "the new cap", equals("4"))
		// A cap the gateway would refuse is refused, nothing written.
		setInput(t, tab, `input[name="cap"]`, "5000")
		if s := act(t, tab, "#set-cap"); !strings.Contains(s, "not changed") {
			t.Fatalf("a cap of 5000 answered %q", s)
		}
		// An edit judged from a version another writer has changed since
		// is refused: no lost update.
		testkit.UpdateServer(t, rig.Env, "demo", "timeout", &types.AttributeValueMemberN{Value: "25"})
		setInput(t, tab, `input[name="attr.description"]`, "edited in the console")
		if s := act(t, tab, "#preview"); !strings.Contains(s, "changed meanwhile") {
			t.Fatalf("an edit of a changed item answered %q", s)
		}
		navigate(t, tab, con.base+"/servers/demo")
		setInput(t, tab, `input[name="attr.description"]`, "edited in the console")
		setInput(t, tab, `input[name="attr.timeout"]`, "12")
		s := act(t, tab, "#preview")
		for _, want := range []string{"description", "edited in the console", "timeout", "25", "12",
			"mcpgate servers set demo timeout=12 'description=edited in the console'"} {
			if !strings.Contains(s, want) {
				t.Errorf("preview lacks %q:\n%s", want, s)
			}
		}
		if s := act(t, tab, "#save"); !strings.Contains(s, "demo changed") {
			t.Fatalf("save answered %q", s)
		}
		item, _ := (&fleet.Store{DB: rig.Env.Client, Tables: rig.Env.Tables}).Server(context.Background(), "demo")
		if fleet.RawAttr(item, "timeout") != "12" || fleet.RawAttr(item, "description") != "edited in the console" {
			t.Errorf("the store after the edit: timeout %s, description %s", fleet.RawAttr(item, "timeout"), fleet.RawAttr(item, "description"))
		}

		// Test connection, through the gateway's upstream client.
		if s := act(t, tab, "#test-connection"); !strings.Contains(s, "slow_tool") || !strings.Contains(s, "echo") {
			t.Errorf("test connection answered %q", s)
		}
		navigate(t, tab, con.base+"/servers/dead")
		if s := act(t, tab, "#test-connection"); !strings.Contains(s, "did not list its tools") || !strings.Contains(s, "connect") {
			t.Errorf("test connection of a dead upstream answered %q", s)
		}

		// Reset the breaker the gateways opened.
		navigate(t, tab, con.base+"/servers/flaky")
		waitFor(t, tab, `tr[data-breaker="slow_tool"] .state`, "flaky's open breaker", contains("open"))
		if shots != "" {
			screenshot(t, tab, filepath.Join(shots, "server.png"))
		}
		if s := act(t, tab, `tr[data-breaker="slow_tool"] button`); !strings.Contains(s, "closed for everyone") {
			t.Fatalf("reset answered %q", s)
		}
		waitFor(t, tab, ".summary .breaker", "the reset breaker", equals("breakers: closed"))
		if r := <-call(gws[1], rig.Key, "flaky", "echo", map[string]any{"text": "hi"}); r.Status != http.StatusOK {
			t.Errorf("a call after the reset: %d %s", r.Status, r.Body)
		}

		// Every action is in the audit log, naming the operator.
		got := map[string]string{}
		for _, rec := range auditRecords(t, con.audit) {
			if rec.Operator != "local:tester" {
				t.Errorf("audit record %+v does not name the operator", rec)
			}
			if _, seen := got[rec.Action]; !seen {
				got[rec.Action] = rec.Result
			}
		}
		for _, a := range []string{"pause", "resume", "release_lease", "set_cap", "edit_server", "test_connection", "reset_breaker"} {
			if _, ok := got[a]; !ok {
				t.Errorf("no audit record of %s (have %v)", a, got)
			}
		}
	})

	t.Run("keys", func(t *testing.T) {
		navigate(t, tab, con.base+"/keys")
		setInput(t, tab, `input[name="servers"]`, "demo,other")
		setInput(t, tab, `input[name="name"]`, "console-made")
		setInput(t, tab, `input[name="rpm_limit"]`, "30")
		act(t, tab, "#create-key")
		created = strings.TrimSpace(text(t, tab, "#new-key"))
		if !strings.HasPrefix(created, "mcpg_") {
			t.Fatalf("no key shown after create: %q", created)
		}
		if r := <-call(gws[0], created, "demo", "echo", map[string]any{"text": "hi"}); r.Status != http.StatusOK {
			t.Fatalf("the created key's call: %d %s", r.Status, r.Body)
		}
		waitFor(t, tab, "table.keys", "the new key's row and its bucket", func(s string) bool {
			for line := range strings.SplitSeq(s, "\n") {
				if strings.Contains(line, "console-made") && strings.Contains(line, "29 of 30") {
					return true
				}
			}
			return false
		})
		if shots != "" {
			screenshot(t, tab, filepath.Join(shots, "keys.png"))
		}
		navigate(t, tab, con.base+"/keys") // the key is not on the page any more
		if strings.Contains(pageHTML(t, tab), created) {
			t.Fatal("the keys page still shows the created key")
		}
		run(t, tab, `const b = [...document.querySelectorAll('table.keys tr')].find(r => r.innerText.includes('console-made')).querySelector('button'); htmx.process(b.closest('form') || b); b.click()`)
		waitFor(t, tab, "#flash .flash:last-child", "revoke's answer", contains("is revoked"))
		waitFor(t, tab, "#live", "the revoked key gone", func(s string) bool { return !strings.Contains(s, "console-made") })
	})

	t.Run("calls", func(t *testing.T) {
		navigate(t, tab, con.base+"/calls?server=flaky")
		waitFor(t, tab, "table.calls", "flaky's calls", contains("UPSTREAM_TIMEOUT"))
		waitFor(t, tab, `tr[data-tool="flaky/slow_tool"] .calls`, "flaky's per-tool calls", func(s string) bool { n, _ := strconv.Atoi(s); return n >= 2 })
		if s := text(t, tab, "table.calls"); strings.Contains(s, "demo") {
			t.Errorf("filtered by server flaky, the calls list shows demo's:\n%s", s)
		}
		navigate(t, tab, con.base+"/calls")
		waitFor(t, tab, `tr[data-tool="demo/slow_tool"] .calls`, "demo's per-tool calls", func(s string) bool { n, _ := strconv.Atoi(s); return n >= 4 })
		waitFor(t, tab, "table.audit", "the audit records", contains("set_cap"))
		if shots != "" {
			screenshot(t, tab, filepath.Join(shots, "calls.png"))
		}
	})

	t.Run("no page or answer carries a secret", func(t *testing.T) {
		c := httpClient(t, con)
		secrets := []string{rig.Key, keyB, created, urlSecret, secretValue}
		navigate(t, tab, con.base+"/servers/secretive")
		act(t, tab, "#test-connection") // resolves the credential and calls the upstream
		if html := pageHTML(t, tab); !strings.Contains(html, "env:"+secretEnv) {
			t.Error("the server page does not show the credential's reference")
		}
		for _, path := range []string{"/", "/live/fleet", "/servers/secretive", "/live/servers/secretive", "/servers/demo", "/keys", "/live/keys",
			"/calls", "/live/calls", "/api/fleet"} {
			status, body := get(t, c, con.base+path)
			if status != http.StatusOK {
				t.Errorf("GET %s: %d", path, status)
			}
			for _, s := range secrets {
				if s != "" && strings.Contains(body, s) {
					t.Errorf("GET %s carries a secret (%.8s…)", path, s)
				}
			}
			if tok := strings.TrimPrefix(con.tokenURL[strings.Index(con.tokenURL, "token="):], "token="); strings.Contains(body, tok) {
				t.Errorf("GET %s carries the console's token", path)
			}
		}
		html := pageHTML(t, tab)
		for _, s := range secrets {
			if s != "" && strings.Contains(html, s) {
				t.Errorf("the server page carries a secret (%.8s…)", s)
			}
		}
	})

	t.Run("changes only from the console's own page", func(t *testing.T) {
		before := auditRecords(t, con.audit)
		c := httpClient(t, con)
		post := func(c *http.Client, origin string) int {
			req, _ := http.NewRequest(http.MethodPost, con.base+"/servers/demo/pause", strings.NewReader("seconds=60"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if origin != "" {
				req.Header.Set("Origin", origin)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if got := post(http.DefaultClient, con.base); got != http.StatusUnauthorized {
			t.Errorf("a change without the token: %d; want 401", got)
		}
		if got := post(c, "http://evil.example"); got != http.StatusForbidden {
			t.Errorf("a change from another origin: %d; want 403", got)
		}
		if got := post(c, ""); got != http.StatusForbidden {
			t.Errorf("a change without an Origin: %d; want 403", got)
		}
		if got := post(c, con.base); got != http.StatusOK {
			t.Errorf("the same change from the console's origin: %d; want 200", got)
		}
		after := auditRecords(t, con.audit)
		if len(after) != len(before)+1 {
			t.Errorf("audit records %d → %d; want one more, of the one change let through", len(before), len(after))
		}
		if st, _ := get(t, http.DefaultClient, con.base+"/api/fleet"); st != http.StatusUnauthorized {
			t.Errorf("a read without the token: %d; want 401", st)
		}
		req, _ := http.NewRequest(http.MethodGet, con.base+"/api/fleet", nil)
		req.Host = "rebound.example:80"
		if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("a request for another host name (DNS rebinding): %v %v; want 421", resp.StatusCode, err)
		}
		_ = act(t, tab, "#resume")
	})
	if shots != "" {
		t.Logf("screenshots in %s", shots)
	}
}

// screenshot writes a PNG of the whole page.
func screenshot(t *testing.T, tab context.Context, path string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // let the last swap settle
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleSaysWhenTheStoreIsDown: with the store refusing connections,
// or taking connections and never answering, the pages go on, showing
// the last reading and saying the store is not answering; they recover
// when it is back.
func TestConsoleSaysWhenTheStoreIsDown(t *testing.T) {
	tab := newTab(t)
	env := storetest.NewEnv(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "demo", "url": "http://127.0.0.1:1/mcp", "max_concurrent_requests": 2})
	proxy := testkit.NewProxy(t, strings.TrimPrefix(env.Endpoint, "http://"))
	con := startConsole(t, env, "http://"+proxy.Addr, "", func(o *console.Options) { o.ReadTimeout = time.Second })
	navigate(t, tab, con.tokenURL)
	waitFor(t, tab, `tr[data-server="demo"] .limit`, "demo's cap", equals("2"))

	proxy.Stop()
	waitFor(t, tab, "#store-banner", "the outage", contains("The store is not answering"))
	if s := text(t, tab, `tr[data-server="demo"] .limit`); s != "2" {
		t.Errorf("during the outage demo's cap shows %q; want the last reading's 2", s)
	}
	navigate(t, tab, con.base+"/servers/demo")
	waitFor(t, tab, "#store-banner", "the outage on the server page", contains("Showing what it last said"))
	if s := act(t, tab, "#pause"); !strings.Contains(s, "failed") {
		t.Errorf("a pause with the store down answered %q; want it said to have failed", s)
	}
	if shots := os.Getenv(screenshotsV); shots != "" {
		screenshot(t, tab, filepath.Join(shots, "store-down.png"))
	}
	proxy.Start(t)
	waitFor(t, tab, "#live", "the recovery", func(s string) bool { return !strings.Contains(s, "not answering") })

	// A store that takes connections and never answers.
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		hole.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	slow := startConsole(t, env, "http://"+hole.Addr().String(), "", func(o *console.Options) { o.ReadTimeout = 500 * time.Millisecond })
	navigate(t, tab, slow.tokenURL)
	waitFor(t, tab, "#store-banner", "a store that never answers", contains("no answer in time"))
	if s := text(t, tab, "#store-banner"); !strings.Contains(s, "Nothing has been read yet") {
		t.Errorf("banner %q; want it to say nothing was read", s)
	}
}

// TestConsoleReadCost measures what the console costs the store: every
// request it sends, counted at its HTTP client, per reading, for N
// servers, with three pages polling at once. It writes nothing.
func TestConsoleReadCost(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping under -short: needs dynalite")
	}
	for _, n := range []int{1, 20, 150} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			env := storetest.NewEnv(t)
			l := lease.New(env.Client, env.Tables.Leases, lease.Options{})
			for i := range n {
				id := "s" + strconv.Itoa(i)
				testkit.PutServer(t, env, map[string]any{"server_id": id, "url": "http://127.0.0.1:1/mcp", "max_concurrent_requests": 3})
				if i < 10 { // lease items for some
					ls, err := l.Acquire(context.Background(), lease.Request{Key: id, Cap: 3, Hold: time.Minute, Holder: "k:test"})
					if err != nil {
						t.Fatal(err)
					}
					defer ls.Finish(context.Background(), lease.Success)
				}
			}
			con := startConsole(t, env, env.Endpoint, "", func(o *console.Options) { o.Interval = 200 * time.Millisecond })
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 3 { // three open pages, each polling its fragment
				c := httpClient(t, con)
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(100 * time.Millisecond):
						}
						if resp, err := c.Get(con.base + "/live/fleet"); err == nil {
							resp.Body.Close()
						}
					}
				})
			}
			time.Sleep(2 * time.Second)
			close(stop)
			wg.Wait()
			ops := con.count.snapshot()
			readings := ops["Scan"] // one Scan of the servers table per reading
			total := 0
			for _, v := range ops {
				total += v
			}
			if readings == 0 {
				t.Fatalf("no reading in 2 s: %v", ops)
			}
			perReading := float64(total) / float64(readings)
			t.Logf("%d servers: %d readings, %v requests: %.2f requests per reading", n, readings, ops, perReading)
			if w := writes(ops); w != 0 {
				t.Errorf("the console wrote %d times without an action", w)
			}
			if limit := 2 + float64((n+99)/100) - 1; perReading > limit+0.01 {
				t.Errorf("%.2f requests per reading of %d servers; want at most %.0f (one Scan, one BatchGetItem per 100)", perReading, n, limit)
			}
		})
	}
}

// TestConsoleFitsANarrowWindow: in a window 400 px wide the pages do not
// scroll sideways (a wide table scrolls inside itself), and from the
// keyboard alone Tab reaches the server page's Pause button, which shows
// where the focus is.
func TestConsoleFitsANarrowWindow(t *testing.T) {
	tab := newTab(t)
	env := storetest.NewEnv(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "demo", "url": "http://127.0.0.1:1/mcp", "max_concurrent_requests": 2})
	con := startConsole(t, env, env.Endpoint, "", nil)
	if err := chromedp.Do(tab, chromedp.EmulateViewport(400, 800)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = chromedp.Do(tab, chromedp.EmulateViewport(1400, 1000)) })
	navigate(t, tab, con.tokenURL)
	waitFor(t, tab, `tr[data-server="demo"] .limit`, "demo's cap", equals("2"))
	for _, page := range []string{"/", "/servers/demo", "/keys", "/calls"} {
		navigate(t, tab, con.base+page)
		waitFor(t, tab, "main", page, func(s string) bool { return s != "" })
		wide, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
		if err != nil {
			t.Fatal(err)
		}
		if wide {
			t.Errorf("%s scrolls sideways in a window 400 px wide", page)
		}
	}
	navigate(t, tab, con.base+"/servers/demo")
	waitFor(t, tab, "#pause", "the Pause button", func(s string) bool { return true })
	reached := false
	for range 40 {
		if err := chromedp.Do(tab, chromedp.KeyEvent("\t")); err != nil {
			t.Fatal(err)
		}
		var err error
		if reached, err = chromedp.Run(tab, chromedp.Evaluate[bool](`!!document.activeElement && document.activeElement.matches('#pause')`)); err != nil {
			t.Fatal(err)
		}
		if reached {
			break
		}
	}
	if !reached {
		t.Fatal("Tab never reached the Pause button")
	}
	outline, err := chromedp.Run(tab, chromedp.Evaluate[string](`getComputedStyle(document.activeElement).outlineStyle`))
	if err != nil {
		t.Fatal(err)
	}
	if outline == "none" {
		t.Error("the focused Pause button shows no outline")
	}
}
