package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

func statusJSON(t *testing.T, env *storetest.Env, args ...string) *statusReport {
	t.Helper()
	r := mcpgate(t, env, append([]string{"status", "--json"}, args...)...).ok(t)
	var rep statusReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("status --json printed invalid JSON: %v\n%s", err, r.stdout)
	}
	return &rep
}

func TestStatus(t *testing.T) {
	env := storetest.NewEnv(t)
	ctx := context.Background()
	if r := mcpgate(t, env, "status").ok(t); !strings.Contains(r.stdout, "no capped servers and no limiter items") {
		t.Errorf("status of an empty table:\n%s", r.stdout)
	}
	testkit.PutServer(t, env, map[string]any{"server_id": "github", "url": "https://example.com/mcp", "max_concurrent_requests": 3,
		"tools": map[string]any{"search": map[string]any{"max_concurrent": 2}, "fetch": map[string]any{"max_concurrent": 1}, "free": map[string]any{"timeout": 5}}})
	testkit.PutServer(t, env, map[string]any{"server_id": "unused", "url": "https://example.com/mcp", "max_concurrent_requests": 7})
	testkit.PutServer(t, env, map[string]any{"server_id": "open", "url": "https://example.com/mcp"})

	search := lease.Request{Key: "github", Cap: 3, Tool: "search", ToolCap: 2, Hold: time.Hour, Holder: "k:1a2b3c4d"}
	plain := lease.Request{Key: "github", Cap: 3, Hold: time.Minute, Holder: "k:5e6f7a8b"}
	live, err := lease.New(env.Client, env.Tables.Leases, lease.Options{InstanceID: "inst1"}).
		Acquire(ctx, search)
	if err != nil {
		t.Fatal(err)
	}
	// A holder whose clock is two hours behind writes a lease that has
	// already expired: what a crashed instance leaves behind.
	stale, err := lease.New(env.Client, env.Tables.Leases, lease.Options{InstanceID: "inst2", Clock: func() time.Time { return time.Now().Add(-2 * time.Hour) }}).
		Acquire(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	// Another limiter key, with no server item, and state status does not
	// know (as a circuit breaker will add).
	other, err := lease.New(env.Client, env.Tables.Leases, lease.Options{InstanceID: "inst1"}).
		Acquire(ctx, lease.Request{Key: "gone", Cap: 3, Hold: time.Hour, Holder: "k:1a2b3c4d"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(env.Tables.Leases),
		Key:                       map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "gone"}},
		UpdateExpression:          aws.String("SET breaker_state = :s, breaker_until = :u"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: "open"}, ":u": &types.AttributeValueMemberN{Value: "1700000000000"}},
	})
	if err != nil {
		t.Fatal(err)
	}

	r := mcpgate(t, env, "status").ok(t)
	for _, want := range []string{
		"github: cap 3\n",
		"  leases: 1 live of 3, 1 expired (waiting to be purged)\n",
		"  tool:search: 1 live of 2\n",
		// Every cap with its limit, taken or not; a capped server never
		// called; no uncapped server.
		"  tool:fetch: 0 live of 1\n",
		"unused: cap 7\n  leases: 0 live of 7\n",
		"gone: not in the servers table\n",
		"  other state:\n",
		"    breaker_state = \"open\"\n",
		"    breaker_until = 1700000000000\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not say %q:\n%s", want, r.stdout)
		}
	}
	for _, ls := range []*lease.Lease{live, stale} {
		if !strings.Contains(r.stdout, ls.ID()) {
			t.Errorf("status does not list lease %s:\n%s", ls.ID(), r.stdout)
		}
	}
	if strings.Contains(r.stdout, store.TTLAttr+" =") {
		t.Errorf("status shows ttl as other state:\n%s", r.stdout)
	}

	if strings.Contains(r.stdout, "open:") || strings.Contains(r.stdout, "tool:free") {
		t.Errorf("status shows an uncapped server or tool:\n%s", r.stdout)
	}

	rep := statusJSON(t, env)
	if len(rep.Limiters) != 3 || rep.Limiters[0].Key != "github" || rep.Limiters[1].Key != "gone" || rep.Limiters[2].Key != "unused" {
		t.Fatalf("status --json limiters: %+v", rep.Limiters)
	}
	gh := rep.Limiters[0]
	if !gh.Server.Found || gh.Server.Cap != 3 || gh.Other != nil {
		t.Errorf("github: server %+v, other %v", gh.Server, gh.Other)
	}
	if len(gh.Slots) != 3 || gh.Slots[0].Attr != lease.LeasesAttr || gh.Slots[0].Cap != 3 || gh.Slots[1].Attr != "tool:fetch" || gh.Slots[1].Cap != 1 ||
		gh.Slots[2].Attr != "tool:search" || gh.Slots[2].Cap != 2 {
		t.Fatalf("github slots: %+v", gh.Slots)
	}
	byID := map[string]leaseState{}
	for _, ls := range gh.Slots[0].Leases {
		byID[ls.ID] = ls
	}
	if got := byID[live.ID()]; got.Holder != "inst1" || got.Caller != "k:1a2b3c4d" || got.Expired || got.TimeLeftMS == nil || *got.TimeLeftMS <= 0 || !got.ExpiresAt.Equal(live.Expiry) {
		t.Errorf("live lease shown as %+v, want holder inst1, caller k:1a2b3c4d, not expired, expiring at %v", got, live.Expiry)
	}
	if ps := gh.Principals; len(ps) != 1 || ps[0].Principal != "k:1a2b3c4d" || ps[0].Holding != 1 {
		t.Errorf("github principals %+v, want k:1a2b3c4d holding 1 (the expired lease holds nothing)", ps)
	}
	if got := byID[stale.ID()]; got.Holder != "inst2" || !got.Expired || got.TimeLeftMS == nil || *got.TimeLeftMS >= 0 {
		t.Errorf("stale lease shown as %+v, want holder inst2, expired, negative time left", got)
	}
	if tl := gh.Slots[2].Leases; len(tl) != 1 || tl[0].ID != live.ID() {
		t.Errorf("tool:search leases %+v, want only %s", tl, live.ID())
	}
	gone := rep.Limiters[1]
	if gone.Server.Found || gone.Other["breaker_state"] != "open" {
		t.Errorf("gone: server %+v, other %v", gone.Server, gone.Other)
	}

	// One server only.
	if rep := statusJSON(t, env, "github"); len(rep.Limiters) != 1 || rep.Limiters[0].Key != "github" || len(rep.Limiters[0].Slots[0].Leases) != 2 {
		t.Errorf("status --json github: %+v", rep.Limiters)
	}

	for _, ls := range []*lease.Lease{live, stale, other} {
		// The expired one is gone already: live's release purged it.
		if _, err := ls.Finish(ctx, lease.Success); err != nil && (ls != stale || !errors.Is(err, lease.ErrNotHeld)) {
			t.Fatal(err)
		}
	}
	r = mcpgate(t, env, "status", "github").ok(t)
	if want := "github: cap 3\n  leases: 0 live of 3\n  tool:fetch: 0 live of 1\n  tool:search: 0 live of 2\n  calls last about "; !strings.HasPrefix(r.stdout, want) {
		t.Errorf("status github after release:\n%s\nwant:\n%s", r.stdout, want)
	}
	if rep := statusJSON(t, env, "github"); len(rep.Limiters[0].Slots[0].Leases) != 0 || len(rep.Limiters[0].Slots[2].Leases) != 0 {
		t.Errorf("status --json github after release: %+v", rep.Limiters[0].Slots)
	}
}

func TestStatusOneServer(t *testing.T) {
	env := storetest.NewEnv(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "idle", "url": "https://example.com/mcp"})
	testkit.PutServer(t, env, map[string]any{"server_id": "broken", "url": "https://example.com/mcp", "timeout": "soon"})

	if r := mcpgate(t, env, "status", "idle").ok(t); r.stdout != "idle: cap unlimited (calls take no lease)\n  leases: 0 live (no cap)\n" {
		t.Errorf("status of a server never called:\n%s", r.stdout)
	}
	if r := mcpgate(t, env, "status", "broken").ok(t); !strings.Contains(r.stdout, "broken: server item invalid: timeout: must be of type N") {
		t.Errorf("status of an invalid server:\n%s", r.stdout)
	}
	mcpgate(t, env, "status", "nope").fails(t, 1, `no server "nope" and no leases for it`)
}

func TestStatusShowsBreakers(t *testing.T) {
	env := storetest.NewEnv(t)
	l := lease.New(env.Client, env.Tables.Leases, lease.Options{})
	req := lease.Request{Key: "demo", Cap: 5, Tool: "slow_tool", Hold: time.Second, Holder: "k:1a2b3c4d",
		Breaker: &lease.Breaker{Name: "slow_tool", Threshold: 2, Recovery: time.Minute}}
	fail := func(want lease.Transition) {
		t.Helper()
		ls, err := l.Acquire(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if tr, err := ls.Finish(context.Background(), lease.Failure); err != nil || tr != want {
			t.Fatalf("finish: %q %v; want %q", tr, err, want)
		}
	}
	// One failure of two: counted, the breaker still closed.
	fail(lease.NoTransition)
	r := mcpgate(t, env, "status", "demo")
	if !strings.Contains(r.stdout, "breaker slow_tool: closed; k:1a2b3c4d: 1 consecutive failures") {
		t.Errorf("status does not show the failure counted:\n%s", r.stdout)
	}
	// The second opens it for that principal alone.
	fail(lease.OpenedForPrincipal)
	r = mcpgate(t, env, "status", "demo")
	if !strings.Contains(r.stdout, "breaker slow_tool: closed, open for k:1a2b3c4d alone for") || strings.Contains(r.stdout, "consecutive failures") {
		t.Errorf("status does not show the open breaker:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "other state") {
		t.Errorf("breaker attributes shown as other state:\n%s", r.stdout)
	}
	// An open breaker refuses calls: status points to where they are.
	if !strings.Contains(r.stdout, "calls refused lately, and why: mcpgate refusals --server demo") {
		t.Errorf("status with an open breaker does not point to refusals:\n%s", r.stdout)
	}
}

func TestStatusShowsWaitingCallers(t *testing.T) {
	env := storetest.NewEnv(t)
	ctx := context.Background()
	testkit.PutServer(t, env, map[string]any{"server_id": "batch", "url": "https://example.com/mcp", "max_concurrent_requests": 1})
	l := lease.New(env.Client, env.Tables.Leases, lease.Options{InstanceID: "inst1"})
	req := lease.Request{Key: "batch", Cap: 1, Hold: time.Hour, Holder: "k1", MaxQueued: 4}
	held, err := l.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// A caller on another instance waits for the place.
	waiter := lease.New(env.Client, env.Tables.Leases, lease.Options{InstanceID: "inst2"})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		r := req
		r.Holder, r.Wait = "k2", time.Hour
		_, err := waiter.Acquire(wctx, r)
		got <- err
	}()
	for {
		if rep := statusJSON(t, env, "batch"); len(rep.Limiters[0].Waiting) == 1 {
			w := rep.Limiters[0].Waiting[0]
			if w.Principal != "k2" || w.Instance != "inst2" || w.Lapsed || w.Turn || w.Number != 1 {
				t.Fatalf("waiting caller shown as %+v", w)
			}
			if ps := rep.Limiters[0].Principals; len(ps) != 2 || ps[0] != (lease.PrincipalStatus{Principal: "k1", Holding: 1}) ||
				ps[1] != (lease.PrincipalStatus{Principal: "k2", Waiting: 1}) {
				t.Fatalf("principals shown as %+v", ps)
			}
			if ls := rep.Limiters[0].Slots[0].Leases; len(ls) != 1 || ls[0].Caller != "k1" || ls[0].Holder != "inst1" {
				t.Fatalf("lease shown as %+v, want caller k1 on inst1", ls)
			}
			break
		}
	}
	r := mcpgate(t, env, "status", "batch").ok(t)
	for _, want := range []string{"waiting: 1 caller(s) and 0 task(s), in the order they will be served", "principals: k1 holds 1; k2 holds 0, 1 waiting", "k2", "inst2", "k1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not say %q:\n%s", want, r.stdout)
		}
	}
	cancel()
	if err := <-got; err == nil {
		t.Fatal("the cancelled waiter got a place")
	}
	if rep := statusJSON(t, env, "batch"); len(rep.Limiters[0].Waiting) != 0 {
		t.Errorf("a waiter that gave up is still listed: %+v", rep.Limiters[0].Waiting)
	}
	if _, err := held.Finish(ctx, lease.Success); err != nil {
		t.Fatal(err)
	}
}

// terminal is standard output that says it is a terminal.
type terminal struct{ io.Writer }

func (terminal) IsTerminal() bool { return true }

// TestStatusWatch: --watch reads the store again at each refresh, prints
// reports one after another when the output is not a terminal, redraws in
// place on a terminal, and ends quietly (exit 0) on Ctrl-C or after
// --count refreshes.
func TestStatusWatch(t *testing.T) {
	env := storetest.NewEnv(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "demo", "url": "https://example.com/mcp", "max_concurrent_requests": 2})
	watch := func(ctx context.Context, out io.Writer, args ...string) int {
		return run(ctx, append([]string{"status", "--watch", "--interval", "100ms"}, args...), strings.NewReader(""), out, io.Discard, func(k string) string { return vars(env)[k] })
	}

	// Each report is written whole before the next read: a lease taken
	// while the first one is being written shows in the second.
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() { done <- watch(context.Background(), pw, "--count", "2"); pw.Close() }()
	first := make([]byte, 1)
	if _, err := io.ReadFull(pr, first); err != nil {
		t.Fatal(err)
	}
	ls, err := lease.New(env.Client, env.Tables.Leases, lease.Options{InstanceID: "inst1"}).
		Acquire(context.Background(), lease.Request{Key: "demo", Cap: 2, Hold: time.Hour, Holder: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Finish(context.Background(), lease.Success)
	rest, _ := io.ReadAll(pr)
	out := string(first) + string(rest)
	if code := <-done; code != 0 {
		t.Fatalf("--watch --count 2 exited %d:\n%s", code, out)
	}
	frames := strings.Split(out, "mcpgate status at ")
	if len(frames) != 3 || frames[0] != "" {
		t.Fatalf("want 2 reports, got:\n%s", out)
	}
	if !strings.Contains(frames[1], "leases: 0 live of 2") || !strings.Contains(frames[2], "leases: 1 live of 2") || !strings.Contains(frames[2], ls.ID()) {
		t.Errorf("the second report does not show the lease taken meanwhile:\n%s", out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("terminal escapes in output that is not a terminal:\n%q", out)
	}

	// On a terminal: each report redraws the screen from its top.
	var screen bytes.Buffer
	if code := watch(context.Background(), terminal{&screen}, "--count", "2"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	s := screen.String()
	if strings.Count(s, "\x1b[H") != 2 || strings.Count(s, "\x1b[J") != 2 || !strings.Contains(s, "leases: 1 live of 2\x1b[K\n") {
		t.Errorf("terminal output does not redraw in place:\n%q", s)
	}

	// Ctrl-C ends the watch with status 0; --json prints a line per report.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw = io.Pipe()
	go func() { done <- watch(ctx, pw, "--json"); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(line), &rep); err != nil || len(rep.Limiters) != 1 || rep.Limiters[0].Slots[0].Cap != 2 {
		t.Errorf("--watch --json line %q: %v", line, err)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if code := <-done; code != 0 {
		t.Errorf("--watch after Ctrl-C exited %d, want 0", code)
	}

	mcpgate(t, env, "status", "--watch", "--interval", "1ms").fails(t, 2, "too short")
}

// Each request-rate bucket is shown with the tokens it holds of its limit:
// the server's, a principal's and a tool's from the server item's limits,
// a key's own from the keys table; an adaptive limit with its bounds.
func TestStatusShowsBucketsAndTheAdaptiveLimit(t *testing.T) {
	env := storetest.NewEnv(t)
	ctx := context.Background()
	// Limits of at most 3 a minute: no token comes back within 20 s.
	testkit.PutServer(t, env, map[string]any{"server_id": "paid", "url": "https://example.com/mcp", "max_concurrent_requests": 4,
		"rpm_limit": 3, "rpm_limit_per_principal": 2, "tools": map[string]any{"search": map[string]any{"rpm_limit": 2}}})
	testkit.PutServer(t, env, map[string]any{"server_id": "batch", "url": "https://example.com/mcp", "max_concurrent_requests": 12,
		"adaptive": true, "adaptive_min": 2})
	key := testkit.PutKey(t, env, "*")
	testkit.UpdateKey(t, env, key, "rpm_limit", 3)
	owner := (&auth.Key{Hash: auth.HashKey(key)}).Principal().ID
	l := lease.New(env.Client, env.Tables.Leases, lease.Options{InstanceID: "inst1"})
	var held []*lease.Lease
	for _, r := range []lease.Request{
		{Key: "paid", Cap: 4, Tool: "search", Hold: time.Hour, Holder: "k:1a2b3c4d", Rates: []lease.Rate{
			{Name: "server", PerMinute: 3}, {Name: "principal:k:1a2b3c4d", PerMinute: 2}, {Name: "tool:search", PerMinute: 2}}},
		{Key: owner, Hold: time.Hour, Holder: "k:1a2b3c4d", Rates: []lease.Rate{{Name: "key", PerMinute: 3}}},
		{Key: owner, Hold: time.Hour, Holder: "k:1a2b3c4d", Rates: []lease.Rate{{Name: "key", PerMinute: 3}}},
		{Key: "batch", Cap: 12, Adaptive: &lease.Adaptive{Min: 2}, Hold: time.Hour, Holder: "k:1a2b3c4d"},
	} {
		ls, err := l.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	r := mcpgate(t, env, "status").ok(t)
	for _, want := range []string{
		"  rate server: 2 of 3 tokens (full in ",
		"  rate principal:k:1a2b3c4d: 1 of 2 tokens (full in ",
		"  rate tool:search: 1 of 2 tokens (full in ",
		owner + ": a key's own limits (max_parallel_requests, rpm_limit)\n",
		"  rate key: 1 of 3 tokens (full in ",
		"  adaptive limit: 2 (between 2 and 12, or its bulkhead if lower)\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not say %q:\n%s", want, r.stdout)
		}
	}
	rep := statusJSON(t, env, owner)
	if len(rep.Limiters) != 1 || len(rep.Limiters[0].Buckets) != 1 {
		t.Fatalf("status --json %s: %+v", owner, rep.Limiters)
	}
	if b := rep.Limiters[0].Buckets[0]; b.Name != "key" || b.Limit != 3 || b.Tokens != 1 || !b.FullAt.After(rep.Now) {
		t.Errorf("the key's bucket shown as %+v; want key, 1 of 3 tokens, full later", b)
	}
	for _, ls := range held {
		if _, err := ls.Finish(ctx, lease.Success); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusShowsTasks: a task waiting in a server's queue is counted
// apart from the callers and marked, and one running is marked among the
// leases.
func TestStatusShowsTasks(t *testing.T) {
	env := storetest.NewEnv(t)
	ctx := context.Background()
	testkit.PutServer(t, env, map[string]any{"server_id": "batch", "url": "https://example.com/mcp", "max_concurrent_requests": 1})
	var started []lease.TaskStart
	l := lease.New(env.Client, env.Tables.Leases, lease.Options{InstanceID: "inst1", OnTaskStart: func(_ context.Context, ts lease.TaskStart) { started = append(started, ts) }})
	req := lease.Request{Key: "batch", Cap: 1, Hold: time.Hour, Holder: "k1", MaxQueued: 4}
	if _, err := l.Enqueue(ctx, req, "", "tsk_running", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if len(started) != 1 {
		t.Fatalf("%d starts of the task whose turn came; want 1", len(started))
	}
	if _, err := l.Claim(ctx, req, started[0].Ticket, started[0].Mark); err != nil {
		t.Fatal(err)
	}
	r2 := req
	r2.Holder = "k2"
	if _, err := l.Enqueue(ctx, r2, "", "tsk_waiting", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	r := mcpgate(t, env, "status", "batch").ok(t)
	for _, want := range []string{"(1 of them tasks running)", "k1 (task)", "waiting: 0 caller(s) and 1 task(s)", "k2 (task)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not say %q:\n%s", want, r.stdout)
		}
	}
}

// A task passed (its starts unclaimed StartTimeout since the first) says
// so, and why, beside one whose turn it is.
func TestStatusSaysATaskIsPassed(t *testing.T) {
	now := time.Now()
	var b bytes.Buffer
	err := printWaiting(&b, []lease.TicketStatus{
		{ID: "a.T1", Instance: "a", Principal: "k:1", Number: 1, Deadline: now.Add(time.Hour), Task: true, Passed: true},
		{ID: "a.T2", Instance: "a", Principal: "k:2", Number: 2, Deadline: now.Add(time.Hour), Task: true, Turn: true},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"k:1 (task)  a         -     #1      in 1h0m0s, passed: no worker has claimed it in 10s since its first start",
		"k:2 (task)  a         -     #2      in 1h0m0s, its turn"} {
		if !strings.Contains(out, want) {
			t.Errorf("status without %q:\n%s", want, out)
		}
	}
}
