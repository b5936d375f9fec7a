package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// call acquires for principal label through breaker br (a capped call, or
// with cap 0 one that takes no place) and finishes with outcome.
func call(t *testing.T, l *Limiter, br *Breaker, cap int, label string, o Outcome) (Transition, error) {
	t.Helper()
	r := Request{Key: "srv", Cap: cap, Tool: br.Name, Breaker: br, Hold: 30 * time.Second, Holder: label, MaxQueued: 4}
	ls, err := l.Acquire(context.Background(), r)
	if err != nil {
		return NoTransition, err
	}
	return ls.Finish(context.Background(), o)
}

func breakerOf(t *testing.T, env *storetest.Env, name string) BreakerStatus {
	t.Helper()
	for _, b := range Describe(item(t, env, "srv"), time.Now(), 0, 0, nil).Breakers {
		if b.Name == name {
			return b
		}
	}
	return BreakerStatus{State: "closed"}
}

// Invariant 10: one principal whose own calls fail opens the breaker for
// itself alone; the others' calls pass — for capped calls and for calls
// that take no place alike.
func TestOnePrincipalCannotOpenTheBreakerForOthers(t *testing.T) {
	for _, cap := range []int{2, 0} {
		t.Run(map[int]string{2: "capped", 0: "no place"}[cap], func(t *testing.T) {
			env := storetest.NewEnv(t)
			l := New(env.Client, env.Tables.Leases, Options{})
			br := &Breaker{Name: "t", Threshold: 3, Recovery: time.Minute}
			var tr Transition
			for range 3 {
				var err error
				if tr, err = call(t, l, br, cap, "A", Failure); err != nil {
					t.Fatal(err)
				}
			}
			if tr != OpenedForPrincipal {
				t.Errorf("A's third failure: transition %q; want %q", tr, OpenedForPrincipal)
			}
			_, err := call(t, l, br, cap, "A", Success)
			var open *CircuitOpenError
			if !errors.As(err, &open) || !open.Principal {
				t.Errorf("A's next call: %v; want refused, open for A", err)
			}
			for range 3 {
				if _, err := call(t, l, br, cap, "B", Success); err != nil {
					t.Fatalf("B's call: %v; want it through", err)
				}
			}
			if b := breakerOf(t, env, "t"); b.State != "closed" || b.OpenFor["A"].IsZero() {
				t.Errorf("breaker: %+v; want closed for all, open for A", b)
			}
		})
	}
}

// Invariant 10: two principals' entries shut at once shut it for
// everyone.
func TestBreakerOpensWhenTwoPrincipalsFail(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	br := &Breaker{Name: "t", Threshold: 2, Recovery: time.Minute}
	var trs []Transition
	for _, who := range []string{"A", "A", "B", "B"} {
		tr, err := call(t, l, br, 2, who, Failure)
		if err != nil {
			t.Fatal(err)
		}
		trs = append(trs, tr)
	}
	if trs[1] != OpenedForPrincipal || trs[3] != Opened {
		t.Errorf("transitions %q; want A's second to open it for A, B's second for everyone", trs)
	}
	_, err := call(t, l, br, 2, "C", Success)
	var open *CircuitOpenError
	if !errors.As(err, &open) || open.Principal {
		t.Errorf("C's call: %v; want refused, open for everyone", err)
	}
}

// Invariant 10: a principal's success between its failures resets its
// count, another principal's does not, and an abandoned call leaves it as
// it was.
func TestBreakerCountsConsecutiveFailures(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	br := &Breaker{Name: "t", Threshold: 3, Recovery: time.Minute}
	for _, step := range []struct {
		who string
		o   Outcome
	}{{"A", Failure}, {"A", Success}, {"A", Failure}, {"B", Success}, {"A", Abandoned}, {"A", Failure}} {
		if tr, err := call(t, l, br, 2, step.who, step.o); err != nil || tr != NoTransition {
			t.Fatalf("%s %v: %q, %v", step.who, step.o, tr, err)
		}
	}
	if b := breakerOf(t, env, "t"); b.Failures["A"] != 2 || len(b.Failures) != 1 || b.State != "closed" {
		t.Errorf("breaker: %+v; want A's 2 failures counted, closed", b)
	}
}

// Invariant 10: exactly one probe in the fleet when the breaker is
// half-open for everyone; its success closes it.
func TestBreakerElectsExactlyOneProbe(t *testing.T) {
	env := storetest.NewEnv(t)
	br := &Breaker{Name: "t", Threshold: 2, Recovery: 300 * time.Millisecond}
	// The limiters' clock stands still while the four calls fail, so B's
	// entry closes while A's is closed, however slow the store is (in real
	// time A's could reopen first, and each principal's entry would then
	// have a probe of its own, as it should); then it moves past Recovery.
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	l := New(env.Client, env.Tables.Leases, Options{Clock: clock})
	for _, who := range []string{"A", "A", "B", "B"} {
		if _, err := call(t, l, br, 8, who, Failure); err != nil {
			t.Fatal(err)
		}
	}
	now.Add(400)
	var probes atomic.Int32
	var wg sync.WaitGroup
	var probe *Lease
	var mu sync.Mutex
	for i := range 12 {
		li := New(env.Client, env.Tables.Leases, Options{Clock: clock})
		wg.Go(func() {
			ls, err := li.Acquire(context.Background(), Request{Key: "srv", Cap: 8, Tool: "t", Breaker: br, Hold: 30 * time.Second,
				Holder: []string{"A", "B", "C"}[i%3], MaxQueued: 16})
			if err != nil {
				return
			}
			if ls.Probe() {
				probes.Add(1)
				mu.Lock()
				probe = ls
				mu.Unlock()
				return
			}
			t.Errorf("a call other than the probe passed a half-open breaker")
		})
	}
	wg.Wait()
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d probes; want exactly one", n)
	}
	if tr, err := probe.Finish(context.Background(), Success); err != nil || tr != Closed {
		t.Fatalf("the probe's success: %q, %v; want closed", tr, err)
	}
	if _, err := call(t, l, br, 8, "C", Success); err != nil {
		t.Errorf("a call after the breaker closed: %v", err)
	}
}

// Invariant 9: a second release of a lease, or one after another took the
// place, frees nothing.
func TestDoubleReleaseIsHarmless(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	ls := acquire(t, l, req("srv", 1, "a"))
	release(t, ls)
	other := acquire(t, l, req("srv", 1, "b"))
	if _, err := ls.Finish(context.Background(), Success); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second release: %v; want ErrNotHeld", err)
	}
	copied := &Lease{l: ls.l, req: ls.req, id: ls.id, exps: ls.exps}
	if _, err := copied.Finish(context.Background(), Success); !errors.Is(err, ErrNotHeld) {
		t.Errorf("a copy's release: %v; want ErrNotHeld", err)
	}
	if !leaseIDs(t, env, "srv")[other.ID()] {
		t.Error("another holder's place was freed")
	}
	release(t, other)
}

// Invariant 9 (the sixth defect of the earlier design): a failing release
// whose first attempt landed unseen, another release landing before its
// retry, counts its failure once and reports success.
func TestRetriedReleaseCountsOnce(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &faultAPI{API: env.Client}
	l := New(f, env.Tables.Leases, Options{})
	br := &Breaker{Name: "t", Threshold: 2, Recovery: time.Minute}
	r := Request{Key: "srv", Cap: 2, Tool: "t", Breaker: br, Hold: 30 * time.Second, Holder: "A", MaxQueued: 4}
	first, other := acquire(t, l, r), acquire(t, l, r)
	// The first release lands, its answer is lost; before its retry, the
	// other release lands.
	f.arm(rule{match: writes("REMOVE", LeasesAttr), fate: lose, after: func() {
		if _, err := other.Finish(context.Background(), Success); err != nil {
			t.Error(err)
		}
	}})
	tr, err := first.Finish(context.Background(), Failure)
	if err != nil || tr != NoTransition {
		t.Fatalf("a release whose first attempt landed: %q, %v; want done", tr, err)
	}
	if b := breakerOf(t, env, "t"); b.Failures["A"] > 1 || b.State != "closed" {
		t.Errorf("breaker after one failure and a success: %+v; want at most the one failure", b)
	}
	// Counted once: one more failure of another principal does not reach
	// the threshold of 2 twice over.
	if tr, err := call(t, New(env.Client, env.Tables.Leases, Options{}), br, 2, "B", Failure); err != nil || tr != NoTransition {
		t.Errorf("B's failure after a success: %q, %v; want nothing opened", tr, err)
	}
}
