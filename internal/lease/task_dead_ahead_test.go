package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// deadAhead is cap 1, H holding the place, and a queue built in order:
// each name joins as a caller that then dies (never looks again), except
// "task", which is enqueued as a task (its ticket id returned), and
// "live", which is a live caller whose Acquire runs until ctx ends (its
// error sent on the channel returned). Starts are recorded in st.
func deadAhead(t *testing.T, db *memStore, st *starts, ctx context.Context, names ...string) (h *Lease, task string, live <-chan error) {
	t.Helper()
	return deadAheadVia(t, db, st, ctx, func(a API) API { return a }, func(*Request) {}, names...)
}

// deadAheadVia is deadAhead with the live caller's requests sent through
// api(db), its request adjusted by adjust.
func deadAheadVia(t *testing.T, db *memStore, st *starts, ctx context.Context, api func(API) API, adjust func(*Request), names ...string) (h *Lease, task string, live <-chan error) {
	t.Helper()
	req := func(who string) Request {
		return Request{Key: "srv", Cap: 1, MaxQueued: 32, Wait: time.Hour, Hold: time.Minute, Holder: who}
	}
	h = acquire(t, New(db, rgTable, Options{InstanceID: "h", OnTaskStart: st.hook}), req("h"))
	for _, n := range names {
		switch n {
		case "task":
			task = enqueue(t, New(db, rgTable, Options{InstanceID: "q", OnTaskStart: st.hook}), req("q"), "task-1")
		case "live":
			got := make(chan error, 1)
			r := req("c")
			adjust(&r)
			go func() {
				ls, err := New(api(db), rgTable, Options{InstanceID: "c", OnTaskStart: st.hook}).Acquire(ctx, r)
				if err == nil {
					release(t, ls)
				}
				got <- err
			}()
			synctest.Wait()
			live = got
		default:
			l := New(db, rgTable, Options{InstanceID: n})
			a := l.newAttempt(req(n), l.newLeaseID(), false)
			v, err := l.read(context.Background(), "srv")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.join(context.Background(), v); err != nil || !a.joined {
				t.Fatalf("%s's join: %v", n, err)
			}
		}
	}
	return h, task, live
}

// Tasks (doc.go): a caller not served passes callers presumed gone
// "when they hold back the turn of tasks ahead of it", which have nobody
// to pass them, and starts those tasks on its answer.
//
// Cap 1; H holds the place; D joins and dies; task T joins behind D;
// caller C joins behind T (an hour's Wait); H releases: D's turn. The
// start of due tasks walks with D holding the place. C presumes D gone a
// claim window on (ClaimWindow past D's look period), sees T's turn
// come only because D is passed, removes D and starts T. Once T's worker
// has claimed and released, C is served. Before, T was started only when
// D's ticket lapsed at its deadline (here an hour), and C waited as long.
func TestATaskBehindADeadWaiterIsStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h, id, c := deadAhead(t, db, &st, ctx, "d", "task", "live")
		release(t, h) // D's turn; D is dead
		time.Sleep(10 * time.Second)
		marks := st.marksOf(id)
		t.Logf("10 s after D's turn came: task-1's starts %v; D's claim window %v", marks, ClaimWindow+DefaultMaxLook)
		if len(marks) == 0 {
			t.Fatalf("task-1, behind a waiter dead since before its turn came, not started in 10 s (a claim window is %v)", ClaimWindow+DefaultMaxLook)
		}
		if n := len(mRead(rawItem(t, db, "srv")).tickets); n != 2 {
			t.Errorf("%d tickets left; want task-1's and C's (D's passed)", n)
		}
		w := New(db, rgTable, Options{InstanceID: "w"})
		ls, err := w.Claim(context.Background(), Request{Key: "srv", Cap: 1, MaxQueued: 32, Wait: time.Hour, Hold: time.Minute, Holder: "q"}, id, marks[len(marks)-1])
		if err != nil {
			t.Fatalf("task-1's worker: %v", err)
		}
		release(t, ls)
		select {
		case err := <-c:
			if err != nil {
				t.Errorf("C: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("C not served 10 s after task-1's call ended")
		}
	})
}

// As above with a second dead caller between the task and the live one
// (D, T, C dead, E live): E never saw C's turn come (T holds it), so only
// D is passed, for T; once T's call ends, C's turn comes and E passes C
// in its take.
func TestATaskBehindADeadWaiterIsStartedThoughTheCallerBehindItDiedToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h, id, e := deadAhead(t, db, &st, ctx, "d", "task", "c", "live")
		release(t, h)
		time.Sleep(10 * time.Second)
		marks := st.marksOf(id)
		if len(marks) == 0 {
			t.Fatalf("task-1, behind dead D, C dead behind it and E live: not started in 10 s")
		}
		ls, err := New(db, rgTable, Options{InstanceID: "w"}).Claim(context.Background(), Request{Key: "srv", Cap: 1, MaxQueued: 32, Wait: time.Hour, Hold: time.Minute, Holder: "q"}, id, marks[len(marks)-1])
		if err != nil {
			t.Fatalf("task-1's worker: %v", err)
		}
		release(t, ls)
		select {
		case err := <-e:
			if err != nil {
				t.Errorf("E: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("E not served 20 s after task-1's call ended (C dead ahead of it)")
		}
	})
}

// Whose turn (doc.go): only a caller whose turn they hold back passes
// callers presumed gone, or one acting for the tasks whose turn they hold
// back. Here the task has a place whether D is passed or not, so E, not
// served (its tool is full), passes nobody.
//
// Cap 3: H1 and H2 hold, Hs holds tool slow (tool cap 1). D joins and
// dies, task T joins, E (tool slow) waits. H1 and H2 release: D's and T's
// turns come; T is started. Ten seconds on, D's ticket is still there.
func TestACallerNotServedPassesNoDeadWaiterForATaskThatHasItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req := func(who string) Request {
			return Request{Key: "srv", Cap: 3, MaxQueued: 8, Wait: time.Hour, Hold: time.Minute, Holder: who}
		}
		slow := func(who string) Request {
			r := req(who)
			r.Tool, r.ToolCap = "slow", 1
			return r
		}
		l := New(db, rgTable, Options{InstanceID: "h", OnTaskStart: st.hook})
		h1, h2 := acquire(t, l, req("h1")), acquire(t, l, req("h2"))
		acquire(t, l, slow("s"))
		dl := New(db, rgTable, Options{InstanceID: "d"})
		a := dl.newAttempt(req("d"), dl.newLeaseID(), false)
		v, err := dl.read(ctx, "srv")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.join(ctx, v); err != nil || !a.joined {
			t.Fatalf("D's join: %v", err)
		}
		id := enqueue(t, l, req("q"), "task-1")
		go func() {
			_, _ = New(db, rgTable, Options{InstanceID: "e", OnTaskStart: st.hook}).Acquire(ctx, slow("e"))
		}()
		synctest.Wait()
		release(t, h1)
		release(t, h2)
		time.Sleep(10 * time.Second)
		if len(st.marksOf(id)) == 0 {
			t.Errorf("task-1, its turn come with D's, not started")
		}
		if v := mRead(rawItem(t, db, "srv")); v.tickets[a.me.id] == nil {
			t.Errorf("D's ticket passed by E, which is not served and acts for no task (task-1 has its place with D's)")
		}
		cancel()
	})
}

// Tasks (doc.go): a caller acting for tasks, having presumed the callers
// ahead of them gone, "looks every MaxLook however far back it waits", so
// that its looks are steady over the claim window more it passes them
// after.
//
// Cap 1; H holds; D joins and dies; task T joins; sixteen callers join
// behind T and die; C, live, waits behind them, 50 s (its looks
// as far apart as its rank allows, 18 s). H releases: D's turn. C sees it
// at a look of its own, presumes D gone a claim window on, looks every
// MaxLook from then, and a claim window more on passes D and starts T.
// Without steady looks it would never pass D, and T would wait for D's
// ticket to lapse (an hour).
func TestACallerFarBehindATaskLooksSteadilyToPassADeadWaiterForIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		names := []string{"d", "task"}
		for i := range 16 {
			names = append(names, fmt.Sprintf("f%d", i))
		}
		h, id, _ := deadAhead(t, db, &st, ctx, append(names, "live")...)
		time.Sleep(50 * time.Second) // C's looks far apart (H holds a minute)
		release(t, h)
		start := time.Now()
		for len(st.marksOf(id)) == 0 && time.Since(start) < 2*MaxLookFar {
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("task-1 started %v after D's turn came (D's claim window %v, MaxLookFar %v)", time.Since(start), ClaimWindow+DefaultMaxLook, MaxLookFar)
		if len(st.marksOf(id)) == 0 {
			t.Errorf("task-1, behind dead D, not started in %v by C, live far behind it", 2*MaxLookFar)
		}
	})
}
