package lease

import (
	"context"
	"errors"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func breakerReq(cap int) Request {
	return Request{
		Key:     "srv",
		Slots:   []Slot{{Attr: ServerAttr, Cap: cap}, {Attr: ToolAttr("slow"), Cap: cap}},
		Hold:    time.Second,
		Breaker: &Breaker{Name: "slow", Threshold: 2, Recovery: 10 * time.Second},
	}
}

// call acquires and finishes one lease with the given outcome.
func call(t *testing.T, l *Limiter, req Request, failed bool) Transition {
	outcome := Success
	if failed {
		outcome = Failure
	}
	t.Helper()
	ls := acquire(t, l, req)
	tr, err := ls.Finish(context.Background(), outcome)
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	return tr
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := breakerReq(5)
	if tr := call(t, l, req, true); tr != NoTransition {
		t.Fatalf("first failure: %q", tr)
	}
	// A success in between resets the count.
	call(t, l, req, false)
	if tr := call(t, l, req, true); tr != NoTransition {
		t.Fatalf("failure after a success: %q, want none (count reset)", tr)
	}
	before := l.Stats().Writes
	if tr := call(t, l, req, true); tr != Opened {
		t.Fatalf("second consecutive failure: %q, want opened", tr)
	}
	if w := l.Stats().Writes - before; w != 3 {
		t.Errorf("acquire + release + open = %d writes, want 3", w)
	}
	_, err := l.Acquire(context.Background(), req)
	var open *CircuitOpenError
	if !errors.As(err, &open) || open.HalfOpen {
		t.Fatalf("acquire on an open breaker: %v", err)
	}
	if open.RetryAfter <= 9*time.Second || open.RetryAfter > 10*time.Second {
		t.Errorf("RetryAfter = %v, want the recovery time left (~10s)", open.RetryAfter)
	}
	// Another tool of the same server is not affected.
	other := Request{Key: "srv", Slots: []Slot{{Attr: ServerAttr, Cap: 5}}, Hold: time.Second,
		Breaker: &Breaker{Name: "fast", Threshold: 2, Recovery: time.Second}}
	call(t, l, other, false)
	// Nor is a call without breaker.
	call(t, l, Request{Key: "srv", Slots: serverSlot(5), Hold: time.Second}, false)
}

func openBreaker(t *testing.T, l *Limiter, req Request) {
	t.Helper()
	call(t, l, req, true)
	if tr := call(t, l, req, true); tr != Opened {
		t.Fatalf("breaker did not open: %q", tr)
	}
}

func TestBreakerHalfOpenProbe(t *testing.T) {
	env := storetest.NewEnv(t)
	now := New(env.Client, env.Tables.Leases, Options{InstanceID: "now"})
	// later sees the world after the recovery time.
	later := New(env.Client, env.Tables.Leases, Options{InstanceID: "later", Clock: offsetClock(11 * time.Second)})
	req := breakerReq(5)
	openBreaker(t, now, req)

	probe := acquire(t, later, req)
	if !probe.Probe() {
		t.Fatal("first acquire after recovery is not the probe")
	}
	_, err := later.Acquire(context.Background(), req)
	var open *CircuitOpenError
	if !errors.As(err, &open) || !open.HalfOpen {
		t.Fatalf("second acquire while the probe runs: %v, want half-open refusal", err)
	}
	tr, err := probe.Finish(context.Background(), Success)
	if err != nil || tr != Closed {
		t.Fatalf("probe success: %q %v, want closed", tr, err)
	}
	if ls := acquire(t, now, req); ls.Probe() {
		t.Error("a lease after the breaker closed is a probe")
	}
}

// halfOpenProbe opens a breaker and returns the probe a limiter past its
// recovery time was elected, with that limiter and the request.
func halfOpenProbe(t *testing.T) (*Limiter, Request, *Lease) {
	t.Helper()
	env := storetest.NewEnv(t)
	now := New(env.Client, env.Tables.Leases, Options{})
	later := New(env.Client, env.Tables.Leases, Options{Clock: offsetClock(11 * time.Second)})
	req := breakerReq(5)
	openBreaker(t, now, req)
	probe := acquire(t, later, req)
	if !probe.Probe() {
		t.Fatal("first acquire after recovery is not the probe")
	}
	return later, req, probe
}

func TestBreakerProbeFailureReopens(t *testing.T) {
	later, req, probe := halfOpenProbe(t)
	if tr, err := probe.Finish(context.Background(), Failure); err != nil || tr != Reopened {
		t.Fatalf("probe failure: %q %v, want reopened", tr, err)
	}
	_, err := later.Acquire(context.Background(), req)
	var open *CircuitOpenError
	if !errors.As(err, &open) || open.HalfOpen || open.RetryAfter <= 9*time.Second {
		t.Fatalf("after the probe failed: %v, want open again for the recovery time", err)
	}
}

func TestBreakerDeadProbeDoesNotWedge(t *testing.T) {
	env := storetest.NewEnv(t)
	now := New(env.Client, env.Tables.Leases, Options{Margin: time.Second})
	later := New(env.Client, env.Tables.Leases, Options{Margin: time.Second, Clock: offsetClock(11 * time.Second)})
	// much later: the first probe's lease (hold 1 s + margin 1 s) has ended.
	muchLater := New(env.Client, env.Tables.Leases, Options{Clock: offsetClock(20 * time.Second)})
	req := breakerReq(5)
	openBreaker(t, now, req)
	dead := acquire(t, later, req) // its holder dies: never finished
	second := acquire(t, muchLater, req)
	if !second.Probe() {
		t.Fatal("no new probe after the first one's lease ended")
	}
	// The dead probe's late finish must not close the breaker for the
	// live one.
	if tr, err := dead.Finish(context.Background(), Success); tr != NoTransition || !errors.Is(err, ErrNotHeld) {
		t.Errorf("late finish of the dead probe: %q %v, want no transition, not held", tr, err)
	}
	if tr, err := second.Finish(context.Background(), Success); err != nil || tr != Closed {
		t.Errorf("live probe: %q %v, want closed", tr, err)
	}
}

func TestBreakerElectsExactlyOneProbe(t *testing.T) {
	env := storetest.NewEnv(t)
	now := New(env.Client, env.Tables.Leases, Options{})
	req := breakerReq(50)
	openBreaker(t, now, req)
	var probes, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		// Twenty instances, all past the recovery time.
		l := New(env.Client, env.Tables.Leases, Options{InstanceID: "i" + string(rune('a'+i)), Clock: offsetClock(11 * time.Second)})
		wg.Go(func() {
			ls, err := l.Acquire(context.Background(), req)
			var open *CircuitOpenError
			switch {
			case err == nil && ls.Probe():
				probes.Add(1)
			case errors.As(err, &open) && open.HalfOpen:
				refused.Add(1)
			default:
				t.Errorf("acquire: lease %v, err %v", ls, err)
			}
		})
	}
	wg.Wait()
	if probes.Load() != 1 || refused.Load() != 19 {
		t.Errorf("%d probes and %d refused, want 1 and 19", probes.Load(), refused.Load())
	}
}

func TestBreakerOnUncappedSlot(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Hold: time.Second, Breaker: &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}}
	var held []*Lease
	for range 5 { // no cap: all five at once
		held = append(held, acquire(t, l, req))
	}
	if tr, _ := held[0].Finish(context.Background(), Failure); tr != Opened {
		t.Fatalf("threshold 1: %q, want opened", tr)
	}
	var open *CircuitOpenError
	if _, err := l.Acquire(context.Background(), req); !errors.As(err, &open) {
		t.Fatalf("acquire: %v, want circuit open", err)
	}
}

func TestReleasePurgesDeadLeases(t *testing.T) {
	env := storetest.NewEnv(t)
	dead := New(env.Client, env.Tables.Leases, Options{InstanceID: "dead", Margin: time.Second})
	live := New(env.Client, env.Tables.Leases, Options{InstanceID: "live", Clock: offsetClock(5 * time.Second)})
	req := Request{Key: "srv", Slots: serverSlot(5), Hold: time.Second}
	for range 3 {
		acquire(t, dead, req) // never released: their holder crashed
	}
	if err := acquire(t, live, req).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 0 {
		t.Errorf("leases left after a release saw the dead ones: %v", ids)
	}
	if p := live.Stats().Purged; p != 3 {
		t.Errorf("purged %d, want 3", p)
	}
}

func TestBreakerIgnoresAbandonedCalls(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := breakerReq(5)
	finish := func(o Outcome) Transition {
		t.Helper()
		tr, err := acquire(t, l, req).Finish(context.Background(), o)
		if err != nil {
			t.Fatalf("finish %v: %v", o, err)
		}
		return tr
	}
	finish(Failure)
	// A caller that went away says nothing of the upstream: the failure
	// count stays, so the next failure opens the breaker.
	if tr := finish(Abandoned); tr != NoTransition {
		t.Fatalf("abandoned call: %q, want no transition", tr)
	}
	if tr := finish(Failure); tr != Opened {
		t.Fatalf("failure after an abandoned call: %q, want opened (count kept)", tr)
	}
}

func TestBreakerAbandonedProbeStaysHalfOpen(t *testing.T) {
	later, req, probe := halfOpenProbe(t)
	if tr, err := probe.Finish(context.Background(), Abandoned); err != nil || tr != NoTransition {
		t.Fatalf("abandoned probe: %q %v, want no transition", tr, err)
	}
	// Still half-open: the next caller is the probe, and only it.
	next := acquire(t, later, req)
	if !next.Probe() {
		t.Fatal("after an abandoned probe, the next acquire is not the probe (breaker closed?)")
	}
	_, err := later.Acquire(context.Background(), req)
	var open *CircuitOpenError
	if !errors.As(err, &open) || !open.HalfOpen {
		t.Fatalf("second caller while the new probe runs: %v, want half-open refusal", err)
	}
}
