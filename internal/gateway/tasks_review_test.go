package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// reviewStarts is a task starter whose behaviour a test steers: it records
// every start, and either runs it (RunTask in a goroutine, as the
// process's starter does), drops it (a start lost with its instance, an
// invocation never delivered) or holds it until the test runs it.
type reviewStarts struct {
	t  *testing.T
	mu sync.Mutex
	g  *Gateway
	wg sync.WaitGroup
	// all are every start asked for; held those kept back.
	all, held []lease.TaskStart
	// drop is how many of the next starts are lost; hold keeps the
	// starts back.
	drop int
	hold bool
	// quiet leaves a worker's error unreported: the test's subject.
	quiet bool
}

func (s *reviewStarts) start(_ context.Context, ts lease.TaskStart) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, ts)
	switch {
	case s.drop > 0:
		s.drop--
		return
	case s.hold:
		s.held = append(s.held, ts)
		return
	}
	g, quiet := s.g, s.quiet
	s.wg.Go(func() {
		if err := g.RunTask(context.Background(), ts); err != nil && !quiet {
			s.t.Errorf("worker of %s: %v", ts.Task, err)
		}
	})
}

func (s *reviewStarts) starts() []lease.TaskStart {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]lease.TaskStart(nil), s.all...)
}

func (s *reviewStarts) takeHeld() []lease.TaskStart {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held
	s.held, s.hold = nil, false
	return h
}

// reviewHarness is engineHarness with a steerable starter and key lookups
// never cached (a revoked key is gone at once).
func reviewHarness(t *testing.T) (*harness, *tasks.Store, *reviewStarts) {
	t.Helper()
	return reviewHarnessOver(t, nil, nil)
}

// reviewHarnessOver is reviewHarness whose task store calls the store
// through overTasks and whose limiter through overLease, where set: each
// is given the store's client and returns what to call instead.
func reviewHarnessOver(t *testing.T, overTasks func(tasks.API) tasks.API, overLease func(lease.API) lease.API) (*harness, *tasks.Store, *reviewStarts) {
	t.Helper()
	st := &reviewStarts{t: t}
	var (
		store   *tasks.Store
		limiter *lease.Limiter
	)
	h := newHarnessDeps(t, Options{}, func(d *Deps, env *storetest.Env) {
		var tapi tasks.API = env.Client
		if overTasks != nil {
			tapi = overTasks(env.Client)
		}
		var lapi lease.API = env.Client
		if overLease != nil {
			lapi = overLease(env.Client)
		}
		store = &tasks.Store{DB: tapi, Table: env.Tables.Tasks}
		limiter = lease.New(lapi, env.Tables.Leases, lease.Options{Margin: 500 * time.Millisecond, OnTaskStart: st.start})
		d.Limiter = limiter
		d.Auth = auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1})
	})
	st.mu.Lock()
	st.g = h.gw
	st.mu.Unlock()
	h.gw.EnableTasks(store, limiter, st.start)
	t.Cleanup(st.wg.Wait)
	return h, store, st
}

// batchTasks starts a batch upstream (10 places, 100 ms calls) and
// registers it as server "batch" (cap 1, task_ttl 120 s) whose tool "work"
// runs as a task, with attrs added to its item.
func (h *harness) batchTasks(attrs map[string]any) *testkit.Batch {
	h.t.Helper()
	up := testkit.StartBatch(h.t, 10, 100*time.Millisecond)
	item := map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}}
	maps.Copy(item, attrs)
	h.server(item)
	return up
}

// sweep sweeps the tasks n times, each once the workers started before it
// have ended, and waits for the workers of the last.
func (h *harness) sweep(st *reviewStarts, n int) {
	h.t.Helper()
	for range n {
		st.wg.Wait()
		if err := h.gw.SweepTasks(context.Background()); err != nil {
			h.t.Fatal(err)
		}
	}
	st.wg.Wait()
}

// markAPI passes a task store's calls through, but hands the first write
// of a record marked running to first, with put, which sends it.
type markAPI struct {
	tasks.API
	first func(put func() (*dynamodb.PutItemOutput, error)) (*dynamodb.PutItemOutput, error)
	mu    sync.Mutex
	seen  bool
}

func (a *markAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	put := func() (*dynamodb.PutItemOutput, error) { return a.API.PutItem(ctx, in, opts...) }
	if m, ok := in.Item["status_message"].(*types.AttributeValueMemberS); !ok || m.Value != "running" {
		return put()
	}
	a.mu.Lock()
	first := !a.seen
	a.seen = true
	a.mu.Unlock()
	if !first {
		return put()
	}
	return a.first(put)
}

// marked tells whether a worker has reached its mark.
func (a *markAPI) marked() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen
}

// createTask makes a gateway task of tool on server with key, and returns
// its handle.
func (h *harness) createTask(server, key, tool string) string {
	h.t.Helper()
	a := h.rpc("/mcp/"+server, key, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.err != nil || a.result["resultType"] == nil || a.str(h.t, "resultType") != "task" {
		h.t.Fatalf("a declared call of %s on %s: %s, want a CreateTaskResult", tool, server, a.raw)
	}
	return a.str(h.t, "taskId")
}

// waitArrivals waits until the batch upstream has seen n calls (or 30 s).
func waitArrivals(up *testkit.Batch, n int) {
	for deadline := time.Now().Add(30 * time.Second); len(up.Stats().Arrivals) < n && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// A task's call is stored as JSON (Params) and read back by its worker
// into an mcp.CallToolParams, whose Arguments is then a map. The worker's
// policy checks the arguments against the tool's input schema again, and
// checkArguments reads only a json.RawMessage (what the SDK hands a
// synchronous call): anything else is validated as an empty object. So
// every gateway task of a tool with a required argument fails with "missing
// properties", although the front checked the same arguments and made the
// task. (Every engine test calls "work", which takes no argument.)
func TestReviewTaskArgumentsAreLostByTheWorker(t *testing.T) {
	h, _, _ := reviewHarness(t)
	h.server(map[string]any{"server_id": "args", "url": h.demo.URL, "task_ttl": 120, "max_concurrent_requests": 2,
		"tools": map[string]any{"echo": map[string]any{"task_support": "optional"}}})
	a := h.rpc("/mcp/args", h.key, "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "hello from a task"}}, rpcOpts{declare: true})
	if a.err != nil || a.result["taskId"] == nil {
		t.Fatalf("a declared call of echo: %s, want a task", a.raw)
	}
	p := h.pollTask("/mcp/args", h.key, a.str(t, "taskId"))
	if p.err != nil || p.str(t, "status") != "completed" || !strings.Contains(string(p.result["result"]), "hello from a task") || strings.Contains(string(p.result["result"]), `"isError":true`) {
		t.Errorf("a task of echo {text}: %s; want completed with the echoed text", p.raw)
	}
}

// A task's worker runs the call as the principal the record stored when
// the task was made (the key's servers, tools and limits as they were
// then), without asking the key store again. A key revoked while its task
// waits for its place (up to task_ttl, a day at most) still has its call
// made afterwards, although docs/configuration.md says a revoked key
// stops working within KEYS_CACHE_TTL (here: at once, no cache).
func TestReviewRevokedKeysWaitingTaskStillRuns(t *testing.T) {
	h, records, st := reviewHarness(t)
	up := testkit.StartBatch(t, 10, 50*time.Millisecond)
	h.server(map[string]any{"server_id": "capped", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	key := testkit.PutKey(t, h.env, "capped")
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	id := h.createTask("capped", key, "work")

	// The key is revoked (mcpgate keys revoke deletes its item) before the
	// task's worker runs.
	if _, err := h.env.Client.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(h.env.Tables.Keys),
		Key:       map[string]types.AttributeValue{store.KeyHashAttr: &types.AttributeValueMemberS{Value: auth.HashKey(key)}},
	}); err != nil {
		t.Fatal(err)
	}
	if r := h.do(http.MethodPost, "/mcp-rest/tools/list", key, "application/json", strings.NewReader(`{}`)); r.status != http.StatusUnauthorized {
		t.Fatalf("the revoked key still authenticates: HTTP %d %s", r.status, r.body)
	}
	held := st.takeHeld()
	if len(held) != 1 {
		t.Fatalf("held starts: %+v; want one", held)
	}
	if err := h.gw.RunTask(context.Background(), held[0]); err != nil {
		t.Fatalf("worker: %v", err)
	}
	if n := len(up.Stats().Arrivals); n != 0 {
		r, _ := storeGet(records, id)
		t.Errorf("a revoked key's task reached the upstream %d times after the revocation (record %s); want none", n, r)
	}
}

// storeGet reads a task's status for a message.
func storeGet(s *tasks.Store, id string) (string, error) {
	r, err := s.Get(context.Background(), id)
	if err != nil {
		return "", err
	}
	return string(r.Status) + " " + r.StatusMessage, nil
}

// A task of a server with no cap (no max_concurrent_requests, no
// FUNCTION_CONCURRENCY) takes no ticket: Create starts its worker at once
// with an empty ticket, and RunTask runs any such start whose record is
// still working. Lambda delivers an asynchronous invocation at least once
// (a duplicate delivery, or its own retry of an invocation whose instance
// died), so the same start can come twice while the first worker's call is
// still in flight: docs/tasks.md promises "A worker started twice claims
// once; the other leaves", but here both call the upstream.
func TestReviewTaskWithoutQueueRunsTwiceOnARedeliveredStart(t *testing.T) {
	h, _, st := reviewHarness(t)
	up := testkit.StartBatch(t, 10, 2*time.Second)
	h.server(map[string]any{"server_id": "free", "url": up.URL, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	id := h.createTask("free", h.key, "work")
	waitArrivals(up, 1)
	starts := st.starts()
	if len(starts) != 1 || starts[0].Task != id {
		t.Fatalf("starts: %+v; want one for %s", starts, id)
	}
	// The same start delivered again while the first worker runs.
	if err := h.gw.RunTask(context.Background(), starts[0]); err != nil {
		t.Fatalf("the start delivered again: %v", err)
	}
	if a := h.pollTask("/mcp/free", h.key, id); a.err != nil || a.str(t, "status") != "completed" {
		t.Fatalf("the task: %s, want completed", a.raw)
	}
	st.wg.Wait()
	if n := len(up.Stats().Arrivals); n != 1 {
		t.Errorf("the upstream got the task's call %d times; want once (a start delivered twice runs once)", n)
	}
}

// A task of a server with no cap has no ticket in a lease item, so nothing
// remembers that its worker must run: when its one start is lost (the
// instance that made it died, the invocation was never delivered), the
// sweep, which only reads lease items, never starts it again, and the task
// reads "working" ("queued") until its TTL ends, up to a day. docs/tasks.md
// says a lost start is made again by the next request or by the sweep.
func TestReviewLostStartOfATaskWithoutQueueIsNeverMadeAgain(t *testing.T) {
	h, _, st := reviewHarness(t)
	up := testkit.StartBatch(t, 10, 50*time.Millisecond)
	h.server(map[string]any{"server_id": "free", "url": up.URL, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	st.mu.Lock()
	st.drop = 1
	st.mu.Unlock()
	id := h.createTask("free", h.key, "work")
	// Past the time after which a lost start is made again, the sweep
	// runs (as the schedule does every minute).
	time.Sleep(lease.StartTimeout + time.Second)
	if err := h.gw.SweepTasks(context.Background()); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	st.wg.Wait()
	a := h.pollTask("/mcp/free", h.key, id)
	if a.err != nil || a.str(t, "status") != "completed" {
		t.Errorf("a task whose start was lost, after the sweep: %s (%d starts made); want it run and completed", a.raw, len(st.starts()))
	}
}

// A server's forward_headers (say X-Request-Tenant: which tenant the
// upstream acts for) are copied from the agent's request to the upstream
// on a synchronous call. A gateway task's worker runs the call with a
// caller that has no request headers (RunTask builds it from the stored
// principal alone), so the same call made as a task reaches the upstream
// without them: the upstream acts for no tenant, or its default one,
// although docs/tasks.md says the worker runs the call "exactly as a
// synchronous one".
func TestReviewTaskDropsForwardedHeaders(t *testing.T) {
	h, _, _ := reviewHarness(t)
	var (
		mu      sync.Mutex
		tenants []string
	)
	demo, _ := testkit.StartGuardedDemo(t, func(r *http.Request, body []byte) bool {
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			mu.Lock()
			tenants = append(tenants, r.Header.Get("X-Request-Tenant"))
			mu.Unlock()
		}
		return true
	})
	h.server(map[string]any{"server_id": "fwd", "url": demo.URL, "task_ttl": 120, "max_concurrent_requests": 2,
		"forward_headers": []string{"X-Request-Tenant"},
		"tools":           map[string]any{"fail_tool": map[string]any{"task_support": "optional"}}})
	hdr := http.Header{"X-Request-Tenant": {"acme"}}
	args := map[string]any{"name": "fail_tool", "arguments": map[string]any{}}

	// Synchronous: the header reaches the upstream.
	if a := h.rpc("/mcp/fwd", h.key, "tools/call", args, rpcOpts{header: hdr}); a.err != nil {
		t.Fatalf("a synchronous call: %s", a.raw)
	}
	// As a task.
	a := h.rpc("/mcp/fwd", h.key, "tools/call", args, rpcOpts{declare: true, header: hdr})
	var id string
	if err := json.Unmarshal(a.result["taskId"], &id); err != nil || id == "" {
		t.Fatalf("a declared call: %s, want a task", a.raw)
	}
	if a = h.pollTask("/mcp/fwd", h.key, id); a.err != nil || a.str(t, "status") != "completed" || !strings.Contains(string(a.result["result"]), "on purpose") {
		t.Fatalf("the task: %s, want completed with the tool's answer", a.raw)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tenants) != 2 || tenants[0] != "acme" {
		t.Fatalf("the upstream's calls carried tenants %q; want 2 calls, the synchronous one with acme", tenants)
	}
	if tenants[1] != "acme" {
		t.Errorf("the task's call reached the upstream with X-Request-Tenant %q; want %q, as the synchronous call's", tenants[1], "acme")
	}
}

// A server with an rpm_limit and no cap takes no place, so a task of it is
// not queued: Create asks nothing of the server's bucket, and the worker's
// admission finds it empty later. docs/tasks.md (step 1) says a call a
// synchronous call would refuse at once (rate limited) is answered the
// same way and no task is made; here the agent gets a task, which then
// "completes" with the RATE_LIMITED tool error.
func TestReviewServerRateLimitDoesNotRefuseATask(t *testing.T) {
	h, _, st := reviewHarness(t)
	up := testkit.StartBatch(t, 10, 10*time.Millisecond)
	h.server(map[string]any{"server_id": "rl", "url": up.URL, "task_ttl": 120, "rpm_limit": 1,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	first := h.createTask("rl", h.key, "work")
	if a := h.pollTask("/mcp/rl", h.key, first); a.err != nil || a.str(t, "status") != "completed" {
		t.Fatalf("the first task: %s", a.raw)
	}
	st.wg.Wait()
	// The bucket is empty: a synchronous call is refused at once.
	sync := h.rpc("/mcp/rl", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{})
	if !strings.Contains(string(sync.raw), "RATE_LIMITED") {
		t.Fatalf("a synchronous call with the bucket empty: %s; want RATE_LIMITED", sync.raw)
	}
	a := h.rpc("/mcp/rl", h.key, "tools/call", map[string]any{"name": "work", "arguments": map[string]any{}}, rpcOpts{declare: true})
	if a.result["taskId"] != nil {
		p := h.pollTask("/mcp/rl", h.key, a.str(t, "taskId"))
		t.Errorf("a declared call with the server's bucket empty got a task, which ended %s; want the RATE_LIMITED tool error and no task", p.raw)
	}
}

// A start delivered twice (Lambda delivers an asynchronous invocation at
// least once) comes while its first delivery's worker runs the call. The
// key was revoked meanwhile: the second start's worker cannot run the task
// and, before it claims anything, takes its ticket out and fails the task.
// But the ticket was claimed by the first: that worker's call runs, and
// the agent must not be told the task failed while it does.
func TestATasksSecondStartDoesNotFailItWhileTheFirstRunsIt(t *testing.T) {
	h, records, st := reviewHarness(t)
	up := testkit.StartBatch(t, 10, 2*time.Second)
	h.server(map[string]any{"server_id": "capped", "url": up.URL, "max_concurrent_requests": 1, "task_ttl": 120,
		"tools": map[string]any{"work": map[string]any{"task_support": "optional"}}})
	key := testkit.PutKey(t, h.env, "capped")
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	id := h.createTask("capped", key, "work")
	held := st.takeHeld()
	if len(held) != 1 {
		t.Fatalf("held starts: %+v; want one", held)
	}
	var first sync.WaitGroup
	first.Go(func() {
		if err := h.gw.RunTask(context.Background(), held[0]); err != nil {
			t.Errorf("first worker: %v", err)
		}
	})
	waitArrivals(up, 1)
	if _, err := h.env.Client.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(h.env.Tables.Keys),
		Key:       map[string]types.AttributeValue{store.KeyHashAttr: &types.AttributeValueMemberS{Value: auth.HashKey(key)}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.RunTask(context.Background(), held[0]); err != nil {
		t.Errorf("second worker: %v", err)
	}
	during, _ := storeGet(records, id)
	first.Wait()
	after, _ := storeGet(records, id)
	t.Logf("while the first ran: %s; after: %s; upstream calls %d", during, after, len(up.Stats().Arrivals))
	if !strings.HasPrefix(during, "working") || !strings.HasPrefix(after, "completed") {
		t.Errorf("the task while its call ran: %q, after: %q; want working, then completed", during, after)
	}
}
