package main

// The cap judged at the upstream, for every kind of upstream: each test
// upstream is its own OS process (infra/demo-upstream) counting its own
// calls in flight, behind several gateway processes sharing one store. A
// call cut off before its upstream answered (its timeout, or its client
// gone) must keep its slot until the upstream is known to have stopped
// working on it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// upstreamKind is one way to serve and reach an upstream.
type upstreamKind struct {
	name  string
	flags []string // demo-upstream's
	// transport is the server item's; "" means http.
	transport    string
	stopsOnClose bool
}

var upstreamKinds = []upstreamKind{
	{name: "stateful_sse"},
	{name: "stateful_json", flags: []string{"-json"}},
	{name: "stateless_sse", flags: []string{"-stateless"}},
	{name: "stateless_json", flags: []string{"-stateless", "-json"}},
	{name: "legacy_sse", transport: "sse"},
	{name: "openapi", transport: "openapi"},
	{name: "stateless_propagating", flags: []string{"-stateless", "-propagate-cancel"}, stopsOnClose: true},
	{name: "openapi_stops_on_close", transport: "openapi", stopsOnClose: true},
}

// item is the server item for an upstream of kind k at u.
func (k upstreamKind) item(id string, u *testkit.Upstream, attrs map[string]any) map[string]any {
	doc := map[string]any{"server_id": id}
	switch k.transport {
	case "sse":
		doc["transport"], doc["url"] = "sse", u.URL+"/sse"
	case "openapi":
		doc["transport"], doc["spec_url"] = "openapi", u.URL+"/openapi.json"
	default:
		doc["url"] = u.URL + "/mcp"
	}
	if k.stopsOnClose {
		doc["stops_on_close"] = true
	}
	for a, v := range attrs {
		doc[a] = v
	}
	return doc
}

// tool is the name of the demo's slow instrument for kind k.
func (k upstreamKind) tool() string {
	if k.transport == "openapi" {
		return "slow_api"
	}
	return "slow_tool"
}

// documented are the codes a cut-off or queued call may end with, and a
// call answered in time ("ok").
var documented = map[fault.Code]bool{fault.UpstreamTimeout: true, fault.QueueTimeout: true, fault.AtCapacity: true, "ok": true}

// matrixCall is one call of the matrix: sent at, through gateway gw, its
// client leaving after leave (0: it waits for the answer).
type matrixCall struct {
	at, leave time.Duration
	gw        int
}

// TestUpstreamCapMatrix: cap 1, timeout 1 s, a 4 s tool that returns early
// when cancelled, three calls spread over three gateway processes, for
// every kind of upstream; the calls are cut off by their timeout, or by
// their clients going away. The upstream's own peak never exceeds the cap,
// every call ends with a documented code, the slot is passed on once the
// upstream stopped (a second call reaches it), and no lease is left.
func TestUpstreamCapMatrix(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Env: fleetEnv, Key: true})
	gws := rig.Start(3)
	var wg sync.WaitGroup
	cuts := []struct {
		name  string
		attrs map[string]any
		calls []matrixCall
	}{{
		// All at once: the first is cut off at 1 s; one of the others
		// gets the slot once the upstream stopped the first (at 4 s for
		// an upstream that cannot be stopped), the last waits its 6 s.
		name:  "timeout",
		attrs: map[string]any{"timeout": 1, "queue_timeout": 6},
		calls: []matrixCall{{gw: 0}, {at: 300 * time.Millisecond, gw: 1}, {at: 300 * time.Millisecond, gw: 2}},
	}, {
		// The first client leaves at 1.5 s, the third while queued; the
		// second gets the slot once the upstream stopped the first (at 4 s
		// at the latest) and leaves at 7 s, unless its call was answered
		// by then.
		name:  "disconnect",
		attrs: map[string]any{"timeout": 30, "queue_timeout": 30},
		calls: []matrixCall{{leave: 1500 * time.Millisecond, gw: 0}, {at: 300 * time.Millisecond, leave: 7 * time.Second, gw: 1}, {at: 600 * time.Millisecond, leave: 2 * time.Second, gw: 2}},
	}}
	for _, k := range upstreamKinds {
		wg.Go(func() {
			for _, cut := range cuts {
				t.Run(k.name+"/"+cut.name, func(t *testing.T) {
					id := k.name + "_" + cut.name
					u := testkit.StartUpstream(t, k.flags...)
					testkit.PutServer(t, rig.Env, k.item(id, u, map[string]any{"max_concurrent_requests": 1, "timeout": cut.attrs["timeout"], "queue_timeout": cut.attrs["queue_timeout"]}))
					runMatrix(t, rig.Env, gws, rig.Key, id, k, u, cut.calls)
				})
			}
		})
	}
	wg.Wait()
}

func runMatrix(t *testing.T, env *storetest.Env, gws []*testkit.Gateway, key, id string, k upstreamKind, u *testkit.Upstream, calls []matrixCall) {
	answers := make([]testkit.Response, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range calls {
		wg.Go(func() {
			time.Sleep(c.at - time.Since(start))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if c.leave > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), c.leave)
			}
			defer cancel()
			answers[i], errs[i] = gws[c.gw].CallTool(ctx, key, id, k.tool(), map[string]any{"ms": 4000})
		})
	}
	wg.Wait()
	for i, c := range calls {
		switch {
		case errs[i] != nil && c.leave == 0:
			t.Errorf("call %d: %v", i, errs[i])
		case errs[i] != nil:
			// Its client left: the gateway's log says how it ended.
		case answers[i].Status == http.StatusOK:
		default:
			var b fault.Body
			_ = json.Unmarshal(answers[i].Body, &b)
			if !documented[b.Error.Code] || b.Error.Code.Status() != answers[i].Status {
				t.Errorf("call %d: %d %s, want a documented code", i, answers[i].Status, answers[i].Body)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stats, err := u.WaitIdle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitNoLease(t, env, id)
	// Every call, answered or not, is logged with a documented code.
	codes := requestCodes(gws, id)
	if len(codes) != len(calls) {
		t.Errorf("%d request records for %d calls: %v", len(codes), len(calls), codes)
	}
	for _, c := range codes {
		if !documented[c] {
			t.Errorf("a call ended with %q, not ok or a documented code for a cut-off or queued call", c)
		}
	}
	t.Logf("upstream peak %d, %d calls reached it (%d cancelled, %d completed); codes %v",
		stats.Peak, stats.Calls, stats.Cancelled, stats.Completed, codes)
	if stats.Peak > 1 {
		t.Errorf("the upstream saw %d calls at once, cap 1", stats.Peak)
	}
	if stats.Calls < 2 {
		t.Errorf("%d calls reached the upstream, want at least 2: the slot was not passed on once the upstream stopped", stats.Calls)
	}
}

// requestCodes returns the code (or "ok") of every request record about
// server id in the gateways' logs.
func requestCodes(gws []*testkit.Gateway, id string) []fault.Code {
	var out []fault.Code
	for _, g := range gws {
		for _, rec := range g.Records(requestRecords, testkit.Match{"server_id": id}) {
			code, outcome := testkit.Str(rec, "code"), testkit.Str(rec, "outcome")
			switch {
			case code != "":
				out = append(out, fault.Code(code))
			case outcome == "ok":
				out = append(out, "ok")
			default:
				out = append(out, fault.Code(fmt.Sprintf("(outcome %s)", outcome)))
			}
		}
	}
	return out
}

const (
	msgStopped  = "upstream stopped a cut-off call; its slot is freed"
	msgExceeded = "upstream not known to have stopped a cut-off call; its slot is freed and the cap may be exceeded"
)

// closeRecord waits for the record of how request reqID's exchange closed
// (msgStopped or msgExceeded) in g's logs, and returns it. The exchange
// writes it once its slot is given back, so it may come after the lease is
// seen gone.
func closeRecord(ctx context.Context, t *testing.T, g *testkit.Gateway, reqID string) map[string]any {
	t.Helper()
	var rec map[string]any
	err := g.WaitLogs(ctx, func(logs string) bool {
		for _, msg := range []string{msgStopped, msgExceeded} {
			if r, ok := testkit.Record(logs, testkit.Match{"msg": msg, "request_id": reqID}); ok {
				rec = r
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("no record of how request %s's exchange closed: %v", reqID, err)
	}
	return rec
}

// TestUpstreamStopOrder: an upstream that honours cancellation gets its
// slot back as soon as it stops, not after its late answer or the grace;
// one that ignores every cancellation keeps its slot until it answers, or
// until the grace ends, when the slot is freed while the upstream still
// runs the call, and that is logged.
func TestUpstreamStopOrder(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Env: fleetEnv, Key: true})
	g := rig.StartGateway()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// call makes one call that holds until gate "g" opens (or 60 s), cut
	// off by its 1 s timeout, and returns its request id.
	call := func(t *testing.T, id string, k upstreamKind) string {
		t.Helper()
		r, err := g.CallTool(ctx, rig.Key, id, k.tool(), map[string]any{"ms": 60000, "gate": "g"})
		if err != nil {
			t.Fatal(err)
		}
		o := parseOutcome(t, r)
		if r.Status != http.StatusGatewayTimeout || o.Fault.Code != fault.UpstreamTimeout {
			t.Fatalf("call: %d %s, want 504 UPSTREAM_TIMEOUT", r.Status, r.Body)
		}
		return r.Header.Get("X-Request-Id")
	}
	server := func(t *testing.T, k upstreamKind, grace float64) (string, *testkit.Upstream) {
		id := strings.ReplaceAll(t.Name()[len("TestUpstreamStopOrder/"):], "/", "_")
		u := testkit.StartUpstream(t, k.flags...)
		testkit.PutServer(t, rig.Env, k.item(id, u, map[string]any{"max_concurrent_requests": 1, "timeout": 1, "cancel_grace": grace}))
		return id, u
	}

	for _, k := range []upstreamKind{upstreamKinds[0], upstreamKinds[4], upstreamKinds[6]} {
		t.Run("honours/"+k.name, func(t *testing.T) {
			id, u := server(t, k, 120)
			reqID := call(t, id, k)
			waitNoLease(t, rig.Env, id)
			// The slot came back while the call could still have run
			// for a minute: because the upstream stopped it.
			s, err := u.WaitIdle(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s.Cancelled != 1 || s.Completed != 0 {
				t.Errorf("upstream stats %+v, want the call cancelled", s)
			}
			rec := closeRecord(ctx, t, g, reqID)
			if rec["msg"] != msgStopped {
				t.Fatalf("close record %v, want %q", rec, msgStopped)
			}
			t.Logf("slot freed %vms after the answer, stopped by %v", rec["held_ms"], rec["stopped_by"])
		})
	}

	ignoring := upstreamKinds[3] // stateless, JSON answers, no cancellation
	t.Run("ignores/answers", func(t *testing.T) {
		id, u := server(t, ignoring, 120)
		reqID := call(t, id, ignoring)
		// The agent has its answer; the upstream still runs the call, and
		// the slot is still taken.
		s, err := u.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.InFlight != 1 {
			t.Fatalf("upstream stats %+v, want the call still running", s)
		}
		if n := testkit.LeaseCount(t, rig.Env, id, lease.LeasesAttr); n != 1 {
			t.Fatalf("%d leases while the upstream runs the cut-off call, want 1", n)
		}
		// The upstream answers: only now is the slot given back.
		if err := u.OpenGate(ctx, "g"); err != nil {
			t.Fatal(err)
		}
		waitNoLease(t, rig.Env, id)
		if s, _ := u.Stats(ctx); s.Completed != 1 || s.InFlight != 0 {
			t.Errorf("upstream stats %+v, want the call completed", s)
		}
		if rec := closeRecord(ctx, t, g, reqID); rec["msg"] != msgStopped || rec["stopped_by"] != "answered" {
			t.Errorf("close record %v, want stopped by answered", rec)
		}
	})

	t.Run("ignores/grace_ends", func(t *testing.T) {
		id, u := server(t, ignoring, 2)
		reqID := call(t, id, ignoring)
		if n := testkit.LeaseCount(t, rig.Env, id, lease.LeasesAttr); n != 1 {
			t.Fatalf("%d leases right after the answer, want 1", n)
		}
		// The grace ends: the slot is freed with the call still running,
		// and that is logged as possibly exceeding the cap.
		waitNoLease(t, rig.Env, id)
		s, err := u.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.InFlight != 1 {
			t.Errorf("upstream stats %+v, want the call still running when its slot was freed", s)
		}
		rec := closeRecord(ctx, t, g, reqID)
		if rec["msg"] != msgExceeded {
			t.Fatalf("close record %v, want %q", rec, msgExceeded)
		}
		if rec["cause"] != "cancel grace over" {
			t.Errorf("cause %v, want the grace over", rec["cause"])
		}
		_ = u.OpenGate(ctx, "g")
	})
}
