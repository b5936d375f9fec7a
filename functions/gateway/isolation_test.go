package main

// Isolation across the fleet, with several gateway OS processes sharing one
// store: a slow server flooded cannot take the function's concurrency from
// a fast one (bulkheads, behind a front that throttles as Lambda does), one
// tenant's flood does not make another wait behind it (fair shares), and
// one tenant's failing calls do not open a tool's breaker for another.

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// isolationEnv is the environment of the gateway processes of the
// isolation, back-pressure and rate-limit tests: a server item is read
// again after 200 ms.
var isolationEnv = []string{"REGISTRY_CACHE_TTL=200ms"}

// agentCall is one call as an agent sees it: the answer (Status -1 if
// none came), when it was sent and answered, and when the upstream
// started it (200 only).
type agentCall struct {
	testkit.Response
	sent, done time.Time
	entered    time.Time
}

// callVia makes one REST tool call at base (a gateway or a front).
func callVia(base, key, server, tool string, args map[string]any) agentCall {
	c := agentCall{sent: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := testkit.Post(ctx, base+"/mcp-rest/tools/call", key, map[string]any{"server_id": server, "name": tool, "arguments": args})
	c.done = time.Now()
	if err != nil {
		c.Status = -1
		return c
	}
	c.Response = r
	if r.Status == http.StatusOK {
		var res struct {
			StructuredContent demoupstream.SlowResult `json:"structuredContent"`
		}
		if json.Unmarshal(r.Body, &res) == nil && res.StructuredContent.EnteredAtMS > 0 {
			c.entered = time.UnixMilli(res.StructuredContent.EnteredAtMS)
		}
	}
	return c
}

// utilisation is the share of [from, to] during which the upstream had cap
// calls in flight, from its own entry and exit events.
func utilisation(events []demoupstream.Event, cap int, from, to time.Time) float64 {
	in, busy, last := 0, time.Duration(0), from
	for _, e := range events {
		at := e.At
		if at.Before(from) {
			at = from
		}
		if at.After(to) {
			at = to
		}
		if in >= cap {
			busy += at.Sub(last)
		}
		last = at
		if e.Enter {
			in++
		} else {
			in--
		}
	}
	if in >= cap {
		busy += to.Sub(last)
	}
	return busy.Seconds() / to.Sub(from).Seconds()
}

// TestBulkheadKeepsTheFunctionForOthers: 4 gateway processes behind a front
// admitting 12 requests at once (FUNCTION_CONCURRENCY 12, so each server may
// take 6: calls in flight and callers waiting). A slow server (cap 2, calls
// of 2 s) is flooded by 16 agents that retry when refused, after the delay
// the refusal advises; 3 agents call a fast, uncapped server through the
// same front. The slow server's waiters cannot fill the function: its lease
// item, read throughout the run, never holds more than 6 live leases and
// waiting callers together, fleet-wide; the slow callers past that are
// refused for a full queue; the gateways answer every fast call they get
// with success, and fast calls succeed while the slow server's callers
// wait. (Without the bulkhead, make bench measures, the slow server's
// waiters hold the front and the fast server's calls are throttled.)
//
// The front may still throttle a fast call now and then: a slow caller
// being refused holds a place at the front until its refusal comes back,
// as it holds an invocation under Lambda, and on a loaded machine a
// refusal (one conditional write) takes hundreds of milliseconds while the
// other refused callers come back. How many are throttled so follows from
// the machine's speed, not from the bulkhead, so it is reported with the
// share of the run the slow server's cap was busy, not judged.
func TestBulkheadKeepsTheFunctionForOthers(t *testing.T) {
	const share = floodFront / 2 // SERVER_CONCURRENCY_SHARE 0.5
	rig := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv})
	gws := rig.Start(4, "FUNCTION_CONCURRENCY="+strconv.Itoa(floodFront))
	stop := watchItem(t, rig.Env, "slow")
	r := floodBehindFront(t, rig.Env, gws, "", 8*time.Second, 2*time.Second)
	items := stop()
	frontThrottled := 0
	for _, c := range r.fast {
		if c.Status == http.StatusTooManyRequests && c.Fault.Code == "" {
			frontThrottled++
		}
	}
	t.Logf("fast server: %d of %d calls succeeded %v (%d throttled by the front); slow server: %v; front throttled %d; slow cap busy %.0f%% of the run; %d reads of the slow server's item",
		r.fastOK, r.fastAll, r.fastCodes, frontThrottled, r.slowCodes, r.throttled, 100*r.util, len(items))
	if r.peak > 2 {
		t.Errorf("the slow server saw %d calls at once; cap 2", r.peak)
	}
	if r.slowCodes["429 AT_CAPACITY queue_full"] == 0 {
		t.Errorf("no slow caller was refused for a full queue: %v", r.slowCodes)
	}
	// The bulkhead: the slow server's calls in flight and callers waiting
	// never take more than its share of the function, fleet-wide.
	waited := []itemRead{} // reads showing slow callers waiting
	over := 0
	for _, rd := range items {
		held, waiting := liveLeases(rd), queued(rd)
		if held+waiting > share {
			if over == 0 {
				t.Errorf("at %s the slow server's item held %d live leases and %d waiting callers; its share of the function is %d",
					rd.at.Format("15:04:05.000"), held, waiting, share)
			}
			over++
		}
		if waiting > 0 {
			waited = append(waited, rd)
		}
	}
	if over > 1 {
		t.Errorf("%d of %d reads of the slow server's item held more than its share", over, len(items))
	}
	if len(waited) == 0 {
		t.Fatalf("none of %d reads of the slow server's item showed a caller waiting: the run did not fill its share", len(items))
	}
	// Every fast call the front passed on succeeded, and some did while
	// the slow server's callers waited.
	okWhileWaiting := 0
	for _, c := range r.fast {
		if c.Status != http.StatusOK {
			if c.Status != http.StatusTooManyRequests || c.Fault.Code != "" {
				t.Errorf("a fast call the front passed on failed: %d %s %s", c.Status, c.Fault.Code, c.Body)
			}
			continue
		}
		for _, rd := range waited {
			if !rd.at.Before(c.sent) && !rd.at.After(c.done) {
				okWhileWaiting++
				break
			}
		}
	}
	if okWhileWaiting == 0 {
		t.Errorf("no fast call succeeded while the slow server's callers waited (%d of %d succeeded)", r.fastOK, r.fastAll)
	}
}

// liveLeases is how many leases a read of a lease item shows live: in its
// leases map and not past their expiry at the read.
func liveLeases(rd itemRead) int {
	m, _ := rd.item[lease.LeasesAttr].(*types.AttributeValueMemberM)
	if m == nil {
		return 0
	}
	n := 0
	for _, v := range m.Value {
		if exp, ok := v.(*types.AttributeValueMemberN); ok {
			if ms, err := strconv.ParseInt(exp.Value, 10, 64); err == nil && ms >= rd.at.UnixMilli() {
				n++
			}
		}
	}
	return n
}

// queued is how many callers a read of a lease item shows waiting: the
// size of its queue.
func queued(rd itemRead) int {
	if m, ok := rd.item[lease.QueueAttr].(*types.AttributeValueMemberM); ok {
		return len(m.Value)
	}
	return 0
}

// TestFairSharesBetweenTenants: cap 2, calls of 500 ms; key A runs 8
// callers in a loop, key B one, over 4 gateway processes. Each of B's calls
// gets the next place that frees: once B's caller waits in the queue, a
// place goes to A only while another is left for B, so A never fills both
// places with a take made while B waits. Served in arrival order, A's
// callers queued before B's would fill both places again and again while
// B waits. This is judged from the lease item, read throughout the run,
// not from when calls started: how soon B takes the place kept for it
// depends on its looks and on the store's latency (docs/admission.md,
// "Looks"), which a loaded machine stretches past a call's length, so the
// A calls that start meanwhile (the place beside B's turning over) are
// reported, not judged.
func TestFairSharesBetweenTenants(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv})
	gws := rig.Start(4)
	stop := watchItem(t, rig.Env, "shared")
	r := twoTenants(t, rig.Env, gws, "shared", 8*time.Second, 500*time.Millisecond)
	items := stop()
	if len(r.b) < 3 {
		t.Fatalf("B made %d calls", len(r.b))
	}
	waits, passes := passedWhileWaiting(items, keyLabel(r.keyA), keyLabel(r.keyB), 2)
	if waits == 0 {
		t.Fatalf("none of %d reads of the item showed B's caller waiting: the run did not test whose turn it is", len(items))
	}
	for _, p := range passes {
		t.Errorf("A filled both places while B's caller waited (ticket %s, waiting since the read at %s): at %s A held %v, %s taken since",
			p.ticket, p.since.Format("15:04:05.000"), p.at.Format("15:04:05.000"), p.held, p.taken)
	}
	most := 0
	for _, c := range r.b {
		ahead := 0
		for _, e := range r.events {
			// Entries strictly between B's call being sent and its own
			// entry (which is reported to the millisecond).
			if e.Enter && e.At.After(c.sent) && e.At.Before(c.entered.Add(-time.Millisecond)) {
				ahead++
			}
		}
		most = max(most, ahead)
	}
	q := func(d []time.Duration, p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	t.Logf("B: %d calls, latency p50 %v p99 %v, at most %d of A's calls started while one waited; A: %d calls, p50 %v p99 %v; cap busy %.0f%%; %d of %d reads of the item showed B waiting",
		len(r.b), q(r.bLat, 0.5), q(r.bLat, 0.99), most, len(r.a), q(r.aLat, 0.5), q(r.aLat, 0.99), 100*utilisation(r.events, 2, r.start, r.end), waits, len(items))
	if r.peak > 2 {
		t.Errorf("the upstream saw %d calls at once; cap 2", r.peak)
	}
}

// itemRead is the lease item of a server as one consistent read returned
// it.
type itemRead struct {
	at   time.Time
	item map[string]types.AttributeValue
}

// watchItem reads server id's lease item, one consistent read after
// another, until the returned stop is called; stop returns the reads in
// the order they were made.
func watchItem(t *testing.T, env *storetest.Env, id string) (stop func() []itemRead) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // a run that stops the test early stops the reads too
	done := make(chan []itemRead, 1)
	go func() {
		var out []itemRead
		for ctx.Err() == nil {
			res, err := env.Client.GetItem(ctx, &dynamodb.GetItemInput{
				TableName:      aws.String(env.Tables.Leases),
				Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: id}},
				ConsistentRead: aws.Bool(true),
			})
			if err == nil && res.Item != nil {
				out = append(out, itemRead{at: time.Now(), item: res.Item})
			}
			time.Sleep(10 * time.Millisecond)
		}
		done <- out
	}()
	return func() []itemRead {
		cancel()
		return <-done
	}
}

// keyLabel is the label the lease item files an API key's leases and
// tickets under: "k:" and the first 16 hex characters of its hash.
func keyLabel(key string) string { return "k:" + auth.HashKey(key)[:16] }

// pass is a read of the lease item that shows principal a holding every
// place while b's ticket waits, with a lease taken after a read that
// already showed that ticket waiting.
type pass struct {
	ticket    string
	since, at time.Time
	held      []string
	taken     string
}

// passedWhileWaiting judges reads of a lease item in order: it returns how
// many showed b waiting, and, for each ticket of b, the first read in which
// a's live leases fill all cap places while that ticket waits, one of them
// taken after a read that already showed the same ticket waiting. Such a
// take was made while b waited and left no place for it: a took b's turn.
func passedWhileWaiting(reads []itemRead, a, b string, cap int) (int, []pass) {
	strs := func(av types.AttributeValue) []string {
		if ss, ok := av.(*types.AttributeValueMemberSS); ok {
			return ss.Value
		}
		return nil
	}
	leases := func(rd itemRead) map[string]types.AttributeValue {
		if m, ok := rd.item[lease.LeasesAttr].(*types.AttributeValueMemberM); ok {
			return m.Value
		}
		return nil
	}
	waits := 0
	first := map[string]int{} // b's ticket (id and number) → the first read showing it
	passed := map[string]bool{}
	var out []pass
	for j, rd := range reads {
		var held []string
		for _, id := range strs(rd.item[lease.PrincipalAttr(a)]) {
			// A live lease: in the map, not past its expiry.
			if n, ok := leases(rd)[id].(*types.AttributeValueMemberN); ok {
				if exp, err := strconv.ParseInt(n.Value, 10, 64); err == nil && exp >= rd.at.UnixMilli() {
					held = append(held, id)
				}
			}
		}
		tickets := strs(rd.item[lease.WaitingAttr(b)])
		if len(tickets) > 0 {
			waits++
		}
		for _, id := range tickets {
			// A ticket by its id and number: a caller presumed gone that
			// joins again has a new number, and may be passed then.
			var x string
			if q, ok := rd.item[lease.QueueAttr].(*types.AttributeValueMemberM); ok {
				if n, ok := q.Value[id].(*types.AttributeValueMemberN); ok {
					x = id + " #" + n.Value
				}
			}
			if x == "" {
				continue
			}
			i, ok := first[x]
			if !ok {
				first[x] = j
				continue
			}
			if len(held) < cap || passed[x] {
				continue
			}
			before := leases(reads[i])
			for _, l := range held {
				if _, ok := before[l]; !ok {
					out = append(out, pass{ticket: x, since: reads[i].at, at: rd.at, held: held, taken: l})
					passed[x] = true
					break
				}
			}
		}
	}
	return waits, out
}

// TestOneTenantCannotOpenTheBreakerForOthers: key A's own calls make a tool
// slow (its arguments), and time out; the breaker opens for A alone, on
// every process, and key B's calls of the same tool go through. On another
// server B's and C's calls fail until each tenant's own breaker opens: two
// tenants' open breakers open it for everyone, A included.
func TestOneTenantCannotOpenTheBreakerForOthers(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv, Demo: true})
	keyA, keyB, keyC := r.PutKey("*"), r.PutKey("*"), r.PutKey("*")
	gws := r.Start(3)
	r.PutServer(map[string]any{"server_id": "demo", "url": r.Demo.URL, "max_concurrent_requests": 8, "timeout": 1,
		"breaker": map[string]any{"failure_threshold": 3, "recovery_timeout": 60}})
	for i := range 4 {
		if c := callVia(gws[i%3].URL, keyA, "demo", "slow_tool", map[string]any{"ms": 5000}); c.Fault.Code != fault.UpstreamTimeout && c.Fault.Code != fault.CircuitOpen {
			t.Fatalf("A's slow call %d: %+v", i, c)
		}
	}
	// The cut-off calls tell the breaker when their slots come back.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Demo.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	for testkit.LeaseCount(t, r.Env, "demo", "leases") != 0 {
		time.Sleep(20 * time.Millisecond)
	}
	for i, g := range gws {
		if c := callVia(g.URL, keyA, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusServiceUnavailable || c.Fault.Code != fault.CircuitOpen {
			t.Errorf("A's call via process %d: %+v; want 503 CIRCUIT_OPEN", i, c)
		}
		if c := callVia(g.URL, keyB, "demo", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusOK {
			t.Errorf("B's call via process %d: %+v; want it through", i, c)
		}
	}
	// On another server, B's calls and C's fail: once both tenants'
	// own breakers are open, it opens for everyone, A included.
	r.PutServer(map[string]any{"server_id": "other", "url": r.Demo.URL, "max_concurrent_requests": 8, "timeout": 1,
		"breaker": map[string]any{"failure_threshold": 2, "recovery_timeout": 60}})
	for i, key := range []string{keyB, keyC, keyB, keyC} {
		if c := callVia(gws[i%3].URL, key, "other", "slow_tool", map[string]any{"ms": 5000}); c.Fault.Code != fault.UpstreamTimeout {
			t.Fatalf("slow call %d on the other server: %+v", i, c)
		}
	}
	if err := r.Demo.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	for testkit.LeaseCount(t, r.Env, "other", "leases") != 0 {
		time.Sleep(20 * time.Millisecond)
	}
	for i, g := range gws {
		if c := callVia(g.URL, keyA, "other", "slow_tool", map[string]any{"ms": 0}); c.Status != http.StatusServiceUnavailable || c.Fault.Code != fault.CircuitOpen {
			t.Errorf("A's call on the other server via process %d: %+v; want 503 CIRCUIT_OPEN", i, c)
		}
	}
}
