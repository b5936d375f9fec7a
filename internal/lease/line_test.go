package lease

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestLinesAreFirstComeFirstServed(t *testing.T) {
	var q lines
	a, b, c := q.join("k", "s", Request{}), q.join("k", "s", Request{}), q.join("k", "s", Request{})
	other := q.join("k", "t", Request{})
	if !a.head() || b.head() || c.head() || !other.head() {
		t.Fatal("the first of each line must head it, and only it")
	}
	q.kick("k")
	select {
	case <-a.kick:
	default:
		t.Error("kick did not reach the head")
	}
	select {
	case <-b.kick:
		t.Error("kick reached a waiter behind the head")
	default:
	}
	q.leave(c) // leaving from behind changes no turn
	if b.head() {
		t.Fatal("b heads the line while a is still in it")
	}
	q.leave(a)
	if !b.head() {
		t.Fatal("b is next once a leaves")
	}
	q.leave(b)
	q.leave(other)
	if q.busy("k", "s") || len(q.m) != 0 {
		t.Errorf("lines left behind: %v", q.m)
	}
}

// lineLen is how many waiters stand in the line of req.
func lineLen(l *Limiter, req Request) int {
	l.lines.mu.Lock()
	defer l.lines.mu.Unlock()
	return len(l.lines.m[req.Key][slotSet(req.Slots)])
}

func TestWaitersInOneProcessAreServedInOrder(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	first := acquire(t, l, req)
	const n = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ls, err := l.Acquire(context.Background(), req)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := ls.Release(context.Background()); err != nil {
				t.Error(err)
			}
		})
		for lineLen(l, req) < i+1 { // let waiter i stand in line before i+1 comes
			runtime.Gosched()
		}
	}
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("served in order %v, want 0..%d", order, n-1)
		}
	}
	if len(order) != n {
		t.Fatalf("%d of %d waiters served", len(order), n)
	}
}

func TestLocalReleaseWakesTheHead(t *testing.T) {
	env := storetest.NewEnv(t)
	// A backoff of an hour: only the release's signal can get the waiter
	// its place before ctx ends.
	l := New(env.Client, env.Tables.Leases, Options{MinBackoff: time.Hour, MaxBackoff: time.Hour})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Hour}
	held := acquire(t, l, req)
	got := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		ls, err := l.Acquire(ctx, req)
		if err == nil {
			err = ls.Release(context.Background())
		}
		got <- err
	}()
	for lineLen(l, req) < 1 {
		runtime.Gosched()
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter was not woken by the release: %v", err)
	}
}

func TestLineDoesNotHoldUpOtherTools(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	toolA := Request{Key: "srv", Slots: []Slot{{Attr: ServerAttr, Cap: 10}, {Attr: ToolAttr("a"), Cap: 1}}, Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, l, toolA)
	waited := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), toolA)
		if err == nil {
			err = ls.Release(context.Background())
		}
		waited <- err
	}()
	for lineLen(l, toolA) < 1 {
		runtime.Gosched()
	}
	toolB := Request{Key: "srv", Slots: []Slot{{Attr: ServerAttr, Cap: 10}}, Hold: 10 * time.Second, Wait: time.Minute}
	ls := acquire(t, l, toolB)
	select {
	case err := <-waited:
		t.Fatalf("tool a's waiter finished while its slot was held: %v", err)
	default:
	}
	if err := ls.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

func TestReleasePassesThePlaceToTheHeadInOneWrite(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, l, req)
	got := acquireAsync(t, l, req)
	for lineLen(l, req) < 1 {
		runtime.Gosched()
	}
	before := l.Stats()
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := l.Stats()
	if after.Handoffs-before.Handoffs != 1 {
		t.Fatalf("release made %d hand-offs, want 1", after.Handoffs-before.Handoffs)
	}
	ls := <-got
	if ls == nil {
		t.FailNow()
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 || !ids[ls.ID()] || ls.ID() == held.ID() {
		t.Fatalf("item holds %v; want only the waiter's new lease %s", ids, ls.ID())
	}
	if ls.InFlight != 1 {
		t.Errorf("handed-over lease reports %d in flight, want 1", ls.InFlight)
	}
	if err := held.Release(context.Background()); err != ErrNotHeld {
		t.Errorf("second release of the handed-over lease: %v, want ErrNotHeld", err)
	}
	if err := ls.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 0 {
		t.Errorf("leases left: %v", ids)
	}
}

func TestPlacePassedToAWaiterThatLeftIsGivenBack(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, l, req)
	// A waiter that never takes what it is offered, then leaves.
	w := l.lines.join(req.Key, slotSet(req.Slots), req)
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(leaseIDs(t, env, "srv", ServerAttr)); n != 1 {
		t.Fatalf("%d leases after the hand-off, want the waiter's 1", n)
	}
	l.lines.leave(w)
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 0 {
		t.Errorf("the untaken lease was not given back: %v", ids)
	}
}

func TestNoHandOffWhileTheBreakerIsOpen(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	br := &Breaker{Name: "srv", Threshold: 1, Recovery: time.Minute}
	req := Request{Key: "srv", Slots: serverSlot(2), Hold: 10 * time.Second, Wait: time.Minute, Breaker: br}
	held, failing := acquire(t, l, req), acquire(t, l, req)
	if tr, err := failing.Finish(context.Background(), Failure); err != nil || tr != Opened {
		t.Fatalf("failure with threshold 1: %v %v, want the breaker opened", tr, err)
	}
	w := l.lines.join(req.Key, slotSet(req.Slots), req)
	defer l.lines.leave(w)
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-w.offer; got != nil {
		t.Fatalf("a place was passed on while the breaker was open: %s", got.ID())
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 0 {
		t.Errorf("leases left: %v", ids)
	}
}

func TestOneProcessManyWaitersLosesNothing(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	const capacity, workers, rounds = 2, 16, 8
	req := Request{Key: "srv", Slots: serverSlot(capacity), Hold: 10 * time.Second, Wait: time.Minute}
	var mu sync.Mutex
	inFlight, peak, done := 0, 0, 0
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				ls, err := l.Acquire(context.Background(), req)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inFlight++
				peak = max(peak, inFlight)
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				inFlight--
				done++
				mu.Unlock()
				if err := ls.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if peak > capacity {
		t.Errorf("%d holders at once, cap %d", peak, capacity)
	}
	if done != workers*rounds {
		t.Errorf("%d rounds done, want %d", done, workers*rounds)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 0 {
		t.Errorf("leases left: %v", ids)
	}
	if s := l.Stats(); s.Handoffs == 0 {
		t.Logf("no hand-offs happened (%+v)", s)
	}
}
