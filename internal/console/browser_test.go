package console_test

// These tests run the console in this process against a stack of real
// gateway processes over a real dynalite (testkit.Rig), and drive it in a
// real headless Chromium (Debian's chromium) through chromedp: one browser
// for the package, a tab per test.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/mcpgate/mcpgate/internal/console"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

func TestMain(m *testing.M) {
	code := m.Run()
	browser.stop()
	storetest.StopShared()
	testkit.CleanupBinaries()
	os.Exit(code)
}

// shared is the package's one Chromium.
type shared struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	dir    string
	err    error
}

var browser shared

func (b *shared) stop() {
	if b.cancel != nil {
		b.cancel()
		os.RemoveAll(b.dir)
	}
}

// chromium finds Debian's chromium (or CHROMIUM), skipping loudly when it
// is absent locally and failing under CI.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping under -short: runs Chromium and gateway processes")
	}
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "chromium is not installed (make deps installs Debian's chromium: apt-get install -y chromium)"
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip("!!! SKIPPING THE CONSOLE'S BROWSER TESTS: " + why + " !!!")
	return ""
}

// newTab opens a tab of the package's browser for t, accepting every
// confirm dialog and failing t on any JavaScript exception.
func newTab(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	browser.once.Do(func() {
		browser.dir, browser.err = os.MkdirTemp("", "mcpgate-chromium-")
		if browser.err != nil {
			return
		}
		actx, acancel := chromedp.NewExecAllocator(context.Background(),
			chromedp.ExecPath(path),
			chromedp.Headless,
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.UserDataDir(browser.dir),
			chromedp.WindowSize(1400, 1000),
		)
		bctx, bcancel := chromedp.NewContext(actx)
		if err := chromedp.Do(bctx); err != nil {
			browser.err = err
		}
		browser.ctx, browser.cancel = bctx, func() { bcancel(); acancel() }
	})
	if browser.err != nil {
		t.Fatalf("start chromium: %v", browser.err)
	}
	tab, cancel := chromedp.NewContext(browser.ctx)
	if err := chromedp.Do(tab); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var exceptions []string
	go func() {
		for ev, err := range chromedp.Events(tab, runtime.ExceptionThrown) {
			if err != nil {
				return
			}
			mu.Lock()
			exceptions = append(exceptions, (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
			mu.Unlock()
		}
	}()
	go func() {
		for _, err := range chromedp.Events(tab, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(tab, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	t.Cleanup(func() {
		cancel()
		mu.Lock()
		defer mu.Unlock()
		for _, e := range exceptions {
			t.Errorf("JavaScript exception in the console's page: %s", e)
		}
	})
	return tab
}

// counter counts the DynamoDB requests the console sends, by operation.
type counter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	op := r.Header.Get("X-Amz-Target") // DynamoDB_20120810.Scan
	_, op, _ = strings.Cut(op, ".")
	c.mu.Lock()
	c.ops[op]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *counter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.ops {
		out[k] = v
	}
	return out
}

// writes counts the writing operations in ops.
func writes(ops map[string]int) int {
	n := 0
	for op, v := range ops {
		switch op {
		case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems":
			n += v
		}
	}
	return n
}

// consoleClient is a DynamoDB client for endpoint whose requests c counts.
func consoleClient(t *testing.T, endpoint string, c *counter) *dynamodb.Client {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")),
	)
	if err != nil {
		t.Fatal(err)
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.HTTPClient = &http.Client{Transport: c}
	})
}

// running is a console served on loopback for a test.
type running struct {
	con      *console.Console
	base     string // http://127.0.0.1:port
	tokenURL string
	audit    string
	count    *counter
}

// startConsole serves a console of env's tables, its store reached at
// endpoint, following logPath.
func startConsole(t *testing.T, env *storetest.Env, endpoint, logPath string, extra func(*console.Options)) *running {
	t.Helper()
	c := &counter{ops: map[string]int{}}
	audit := filepath.Join(t.TempDir(), "audit.log")
	fa := &console.FileAudit{Path: audit}
	o := console.Options{
		Store:    &fleet.Store{DB: consoleClient(t, endpoint, c), Tables: env.Tables},
		Where:    "test stack",
		Operator: "local:tester",
		Audit:    fa, AuditLog: fa,
		LogFile:  logPath,
		Upstream: upstream.Options{AllowLocal: true, Secrets: secret.New(secret.Options{Getenv: os.Getenv})},
	}
	if extra != nil {
		extra(&o)
	}
	con, err := console.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := console.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = con.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return &running{con: con, base: "http://" + ln.Addr().String(), tokenURL: con.URL(ln), audit: audit, count: c}
}

// pumpLogs appends what the gateways log to path, as a log file grows.
func pumpLogs(t *testing.T, path string, gws []*testkit.Gateway) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sent := make([]int, len(gws))
		for {
			for i, g := range gws {
				logs := g.Logs()
				if len(logs) > sent[i] {
					_, _ = f.WriteString(logs[sent[i]:])
					sent[i] = len(logs)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done; f.Close() })
}

// text is the innerText of the first element sel matches, "" if none.
func text(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	q, _ := json.Marshal(sel)
	s, err := chromedp.Run(tab, chromedp.Evaluate[string](`(document.querySelector(`+string(q)+`)||{innerText:""}).innerText`))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// pageHTML is the page's whole HTML as it stands.
func pageHTML(t *testing.T, tab context.Context) string {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitFor polls the page until sel's text satisfies ok, with a generous
// deadline (the machine is shared: no timing is asserted), and returns it
// and how long it took.
func waitFor(t *testing.T, tab context.Context, sel, what string, ok func(string) bool) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for {
		s := text(t, tab, sel)
		if ok(s) {
			return s, time.Since(start)
		}
		if time.Now().After(deadline) {
			loc, _ := chromedp.Run(tab, chromedp.Location())
			t.Logf("the page at %s:\n%.3000s", loc, pageHTML(t, tab))
			t.Fatalf("%s: %s shows %q after %v", what, sel, s, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func contains(sub string) func(string) bool {
	return func(s string) bool { return strings.Contains(s, sub) }
}
func equals(want string) func(string) bool {
	return func(s string) bool { return strings.TrimSpace(s) == want }
}

// run runs JavaScript in the page (without waiting on a dialog it opens).
func run(t *testing.T, tab context.Context, js string) {
	t.Helper()
	if _, err := chromedp.Run(tab, chromedp.Evaluate[any]("setTimeout(() => {"+js+"}, 0); null")); err != nil {
		t.Fatalf("run %s: %v", js, err)
	}
}

// act clicks the button sel and waits for the action's answer, returning
// its text.
func act(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	q, _ := json.Marshal(sel)
	// The live region is swapped every second; a button swapped in a
	// moment ago may not be wired by htmx yet (it wires new content as it
	// settles): wire it first, so the click is htmx's request.
	run(t, tab, `document.querySelectorAll('#flash .flash').forEach(e => e.dataset.old = 1); const el = document.querySelector(`+string(q)+`); htmx.process(el.closest('form') || el); el.click()`)
	s, _ := waitFor(t, tab, "#flash .flash:not([data-old])", "answer to "+sel, func(s string) bool { return s != "" })
	return s
}

// setInput sets the value of the input sel.
func setInput(t *testing.T, tab context.Context, sel, v string) {
	t.Helper()
	q, _ := json.Marshal(sel)
	val, _ := json.Marshal(v)
	if _, err := chromedp.Run(tab, chromedp.Evaluate[any](`document.querySelector(`+string(q)+`).value = `+string(val)+`; null`)); err != nil {
		t.Fatalf("set %s: %v", sel, err)
	}
}

func navigate(t *testing.T, tab context.Context, u string) {
	t.Helper()
	if err := chromedp.Do(tab, chromedp.Navigate(u)); err != nil {
		t.Fatalf("navigate %s: %v", u, err)
	}
}

// call starts a tool call through gateway g in the background.
func call(g *testkit.Gateway, key, server, tool string, args map[string]any) <-chan testkit.Response {
	ch := make(chan testkit.Response, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := g.CallTool(ctx, key, server, tool, args)
		if err != nil {
			r.Status = -1
			r.Body = []byte(err.Error())
		}
		ch <- r
	}()
	return ch
}

// auditRecords reads the audit log.
func auditRecords(t *testing.T, path string) []console.AuditRecord {
	t.Helper()
	recs, err := (&console.FileAudit{Path: path}).Recent(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// httpClient is a client holding the console's cookie, as a browser that
// opened the console's URL does.
func httpClient(t *testing.T, r *running) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := c.Get(r.tokenURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if u, _ := url.Parse(r.base); len(jar.Cookies(u)) == 0 {
		t.Fatal("the console's URL set no cookie")
	}
	return c
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, readAll(resp))
	return resp.StatusCode, b.String()
}

func readAll(resp *http.Response) string {
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}
