package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// headerUpstream is a stateless 2026-07-28 server whose tool region takes
// its argument also as the Mcp-Param-Region header (SEP-2243); the SDK
// refuses a call without it. lists counts tools/list.
func headerUpstream(t *testing.T) (*registry.Server, *atomic.Int64) {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "headers", Version: "1"}, nil)
	lists := countLists(s)
	schema := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{
		"region": {Type: "string", Extra: map[string]any{"x-mcp-header": "Region"}},
	}}
	s.AddTool(&mcp.Tool{Name: "region", InputSchema: schema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: req.Extra.Header.Get("Mcp-Param-Region")}}}, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	t.Cleanup(hs.Close)
	return &registry.Server{ID: "headers", URL: hs.URL, Timeout: 10 * time.Second, MaxConcurrent: 4}, lists
}

// countLists counts the tools/list requests s answers.
func countLists(s *mcp.Server) *atomic.Int64 {
	var lists atomic.Int64
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				lists.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	return &lists
}

// A pool that takes the tool list from the catalog has never listed the
// tool on its own sessions; it still sends the tool's parameter headers.
func TestParamHeadersFromTheCatalog(t *testing.T) {
	env := storetest.NewEnv(t)
	srv, lists := headerUpstream(t)
	first := New(Options{AllowLocal: true, Catalog: catalog.New(env.Client, env.Tables.Leases, catalog.Options{})})
	defer first.Close()
	if _, err := first.Tool(t.Context(), srv, Caller{}, "region"); err != nil {
		t.Fatal(err)
	}
	p := New(Options{AllowLocal: true, Catalog: catalog.New(env.Client, env.Tables.Leases, catalog.Options{})})
	defer p.Close()
	if _, err := p.Tool(t.Context(), srv, Caller{}, "region"); err != nil {
		t.Fatal(err)
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("upstream listed %d times, want 1 (the second pool reads the catalog)", n)
	}
	for _, region := range []string{"eu-west-1", "Zürich "} {
		res, err := p.CallTool(t.Context(), srv, Caller{}, &mcp.CallToolParams{Name: "region", Arguments: map[string]any{"region": region}}, nil)
		if err != nil {
			t.Fatalf("%q: %v", region, err)
		}
		want := region
		if region == "Zürich " {
			want = "=?base64?WsO8cmljaCA=?="
		}
		if got := text(t, res); got != want {
			t.Errorf("upstream got Mcp-Param-Region %q, want %q", got, want)
		}
	}
}

// When the store is unreachable, tool lists come from the upstream as if
// there were no catalog: a store outage does not stop tool calls.
func TestToolsWhenTheCatalogIsDown(t *testing.T) {
	srv, lists := headerUpstream(t)
	down := storetest.Client(t, "http://127.0.0.1:1")
	p := New(Options{AllowLocal: true, Catalog: catalog.New(down, "leases", catalog.Options{})})
	defer p.Close()
	tool, err := p.Tool(t.Context(), srv, Caller{}, "region")
	if err != nil || tool.Name != "region" || lists.Load() != 1 {
		t.Fatalf("Tool = %v, %v after %d lists; want the tool, listed directly", tool, err, lists.Load())
	}
}

// A store that does not answer within the call's time makes the call
// time out, as an upstream that does not answer would: the call's
// timeout, never the upstream's failure.
func TestAStalledCatalogIsTheCallsTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	srv, lists := headerUpstream(t)
	stalled := storetest.Client(t, "http://"+ln.Addr().String())
	p := New(Options{AllowLocal: true, Catalog: catalog.New(stalled, "leases", catalog.Options{})})
	defer p.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = p.Tool(ctx, srv, Caller{}, "region")
	var ue *Error
	if !errors.As(err, &ue) || ue.Kind != KindTimeout {
		t.Fatalf("Tool = %v (%T); want an upstream error of kind timeout", err, err)
	}
	if n := lists.Load(); n != 0 {
		t.Errorf("the upstream was listed %d times; want none (the call's time ran out on the store)", n)
	}
}

// An upstream's notifications/tools/list_changed makes the fleet's copy
// stale: the next instance lists again. (A Go SDK upstream sends it on a
// stream the session keeps open, as the SSE transport's; the gateway holds
// no such stream open on streamable HTTP.)
func TestListChangedInvalidates(t *testing.T) {
	env := storetest.NewEnv(t)
	s := mcp.NewServer(&mcp.Implementation{Name: "grows", Version: "1"}, nil)
	lists := countLists(s)
	noop := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}
	obj := &jsonschema.Schema{Type: "object"}
	s.AddTool(&mcp.Tool{Name: "grow", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.AddTool(&mcp.Tool{Name: "added", InputSchema: obj}, noop)
		return &mcp.CallToolResult{}, nil
	})
	hs := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)
	srv := &registry.Server{ID: "grows", URL: hs.URL, Transport: registry.TransportSSE, Timeout: 10 * time.Second, MaxConcurrent: 4}

	a := New(Options{AllowLocal: true, Catalog: catalog.New(env.Client, env.Tables.Leases, catalog.Options{})})
	defer a.Close()
	if tools, err := a.Tools(t.Context(), srv, Caller{}); err != nil || len(tools) != 1 {
		t.Fatalf("tools %v, %v; want grow", tools, err)
	}
	if _, err := a.CallTool(t.Context(), srv, Caller{}, &mcp.CallToolParams{Name: "grow"}, nil); err != nil {
		t.Fatal(err)
	}
	// The invalidation is written in the background: wait for the head.
	wait, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for gen(t, env, "grows") == 0 {
		select {
		case <-wait.Done():
			t.Fatal("the catalog was not invalidated within 10s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	b := New(Options{AllowLocal: true, Catalog: catalog.New(env.Client, env.Tables.Leases, catalog.Options{})})
	defer b.Close()
	tools, err := b.Tools(t.Context(), srv, Caller{})
	if err != nil || len(tools) != 2 || lists.Load() != 2 {
		t.Fatalf("tools %v, %v after %d lists; want grow and added, listed again", tools, err, lists.Load())
	}
}

// gen reads the invalidation count of a catalog head.
func gen(t *testing.T, env *storetest.Env, id string) int {
	n, _ := testkit.CatalogHead(t, env, id)["gen"].(*types.AttributeValueMemberN)
	if n == nil {
		return 0
	}
	v, _ := strconv.Atoi(n.Value)
	return v
}

// The upstream's own ttlMs (below ToolsTTL) and cacheScope drive how long
// the list is reused, and are what the gateway reports. A private list is
// listed twice the first time: on the gateway's own session, which learns
// that it is private, then on the caller's.
func TestUpstreamCachingHints(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "hints", Version: "1"}, &mcp.ServerOptions{
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = 2000, "private" },
	})
	lists := countLists(s)
	s.AddTool(&mcp.Tool{Name: "t", InputSchema: &jsonschema.Schema{Type: "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hs.Close)
	srv := &registry.Server{ID: "hints", URL: hs.URL, Timeout: 10 * time.Second}
	p := New(Options{AllowLocal: true, ToolsTTL: time.Minute})
	defer p.Close()
	before := time.Now()
	ls, err := p.ToolListing(t.Context(), srv, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if ls.Scope != "private" || ls.Expires.Before(before.Add(2*time.Second)) || ls.Expires.After(time.Now().Add(2*time.Second)) {
		t.Errorf("scope %q, expires in %v; want private, in 2s (the upstream's ttlMs)", ls.Scope, ls.Expires.Sub(before))
	}
	if _, err := p.ToolListing(t.Context(), srv, Caller{}); err != nil || lists.Load() != 2 {
		t.Errorf("second listing: %v after %d lists; want 2 (the first listing's) and this one reused", err, lists.Load())
	}
}

// countingCatalog is the real catalog, counting its invalidations.
type countingCatalog struct {
	*catalog.Catalog
	invalidations atomic.Int64
}

func (c *countingCatalog) Invalidate(ctx context.Context, id string) error {
	c.invalidations.Add(1)
	return c.Catalog.Invalidate(ctx, id)
}

// TestListChangedFloodIsCoalesced: one answer carrying 20,000
// notifications/tools/list_changed costs one invalidation of the catalog,
// not one each, and no goroutine each; more notifications within the
// coalescing window (listChangedEvery) cause one more invalidation at its
// end.
func TestListChangedFloodIsCoalesced(t *testing.T) {
	env := storetest.NewEnv(t)
	h := testkit.StartHostile(t)
	cat := &countingCatalog{Catalog: catalog.New(env.Client, env.Tables.Leases, catalog.Options{})}
	p := New(Options{AllowLocal: true, Catalog: cat})
	defer p.Close()
	p.coalesce = time.Hour // the floods below come within it, however slow the machine
	srv := &registry.Server{ID: "flood", URL: h.URL, Timeout: time.Minute, MaxConcurrent: 4}
	if _, err := p.Tools(t.Context(), srv, Caller{}); err != nil { // the catalog holds a list
		t.Fatal(err)
	}
	flood := func() {
		t.Helper()
		before := runtime.NumGoroutine()
		res, err := p.CallTool(t.Context(), srv, Caller{}, &mcp.CallToolParams{Name: "list_changed_flood", Arguments: map[string]any{"count": 20000}}, nil)
		if err != nil || text(t, res) != "flooded" {
			t.Fatalf("flood: %v %v", res, err)
		}
		if n := runtime.NumGoroutine() - before; n > 100 {
			t.Errorf("%d more goroutines after one answer's notifications", n)
		}
	}
	waitGen := func(want int) {
		t.Helper()
		wait, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		for gen(t, env, "flood") < want {
			select {
			case <-wait.Done():
				t.Fatalf("the catalog's generation did not reach %d", want)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	flood()
	waitGen(1)
	if n := cat.invalidations.Load(); n != 1 {
		t.Errorf("%d catalog invalidations for one flooded answer, want 1", n)
	}
	// Two more floods within the window: one more invalidation, at its
	// end (brought forward here).
	flood()
	flood()
	if n := cat.invalidations.Load(); n != 1 {
		t.Errorf("%d catalog invalidations right after more floods, want still 1", n)
	}
	l := p.listsOf(srv)
	l.mu.Lock()
	if l.timer == nil || !l.pending {
		t.Fatal("no invalidation is due at the end of the window")
	}
	l.timer.Reset(0)
	l.mu.Unlock()
	waitGen(2)
	if n, g := cat.invalidations.Load(), gen(t, env, "flood"); n != 2 || g != 2 {
		t.Errorf("%d invalidations, generation %d after the coalescing window; want 2 and 2", n, g)
	}
}

// The parameter headers of a tool are worked out once per definition: a
// call finds those of the definition the list holds now, after the list
// was renewed with a new one too.
func TestParamHeadersFollowTheToolsDefinition(t *testing.T) {
	p := New(Options{AllowLocal: true})
	defer p.Close()
	srv := &registry.Server{ID: "headers", URL: "http://127.0.0.1:1/mcp"}
	tool := func(header string) *mcp.Tool {
		prop := &jsonschema.Schema{Type: "string"}
		if header != "" {
			prop.Extra = map[string]any{"x-mcp-header": header}
		}
		return &mcp.Tool{Name: "region", InputSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"region": prop}}}
	}
	tl := p.toolList(identityKey(srv))
	headers := func() map[string]string {
		schema := p.cachedHeaders(srv, Caller{}, "region")
		if schema == nil {
			return nil
		}
		return paramHeaders(schema, map[string]any{"region": "eu-west-1"})
	}
	if h := headers(); h != nil {
		t.Errorf("no list held: headers %v", h)
	}
	for _, header := range []string{"Region", "Zone", "", "Region"} {
		tl.mu.Lock()
		tl.tools = map[string]*mcp.Tool{"region": tool(header)}
		tl.mu.Unlock()
		for range 2 {
			h := headers()
			if header == "" {
				if h != nil {
					t.Errorf("a schema without x-mcp-header: headers %v", h)
				}
				continue
			}
			if len(h) != 1 || h["Mcp-Param-"+header] != "eu-west-1" {
				t.Errorf("definition with header %s: headers %v", header, h)
			}
		}
	}
	// An upstream renaming its tools at every listing: what is kept of
	// their headers stays within the list's size.
	for i := range 100 {
		name := "tool" + strconv.Itoa(i)
		tl.mu.Lock()
		tl.tools = map[string]*mcp.Tool{name: tool("Region"), "other": tool("")}
		tl.mu.Unlock()
		if p.cachedHeaders(srv, Caller{}, name) == nil {
			t.Fatalf("%s: no headers", name)
		}
		p.cachedHeaders(srv, Caller{}, "other")
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.headers) > len(tl.tools) {
		t.Errorf("headers of %d tools kept for a list of %d", len(tl.headers), len(tl.tools))
	}
}
