package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 8 (doc.go): "a live waiter is never presumed gone, however
// far back it joined"; Tasks: a caller not served passes callers presumed
// gone for the tasks whose turn they hold back "only after a claim window
// more of steady looks", none more than steadyGap after the one before,
// so a turn that goes and comes back between a far-back caller's looks
// does not read as one that stood (as in
// TestACallerNotServedPassesNoLiveWaiterWhoseTurnWentBetweenItsLooks,
// with no task).
//
// Cap 4: Hx, Hq, Hc hold for principals x, q, c (so the queue below is in
// number order), H holds for h. Waiting, in number order: X (principal
// x, live, look period 1 s), task T (principal q), F1..F16 and C
// (principal c; C's look period 4 s: 18 before it, 4 places). At 0 s H
// releases: X's turn comes, not T's. C looks at 0.05 s. At 0.1 s Z, a
// newcomer of principal z (holding nothing, so ranked before X) takes the
// place: X's turn goes. X looks at 0.5, 1.5, 2.5, 3.5 s: not its turn.
// Z releases at 3.9 s: X's turn is back. C looks at 4.05 s, 4 s after its
// last: X ahead, first seen 4 s ago, its claim window (3 s + 1 s) past,
// presumed gone, and a walk past X hands T the place; but C's looks were
// 4 s apart, so it passes nobody yet. X's look at 4.5 s finds its turn.
func TestACallerActingForATaskPassesNoLiveWaiterWhoseTurnWentBetweenItsLooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		const places = 4
		req := func(who string) Request {
			return Request{Key: "srv", Cap: places, MaxQueued: 1000, Wait: time.Hour, Hold: time.Minute, Holder: who}
		}
		for _, p := range []string{"x", "q", "c"} {
			acquire(t, New(db, rgTable, Options{InstanceID: "h" + p}), req(p))
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), req("h"))
		join := func(inst string, r Request) *attempt {
			t.Helper()
			l := New(db, rgTable, Options{InstanceID: inst})
			a := l.newAttempt(r, l.newLeaseID(), false)
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.join(ctx, v); err != nil || !a.joined {
				t.Fatalf("%s's join: %v", inst, err)
			}
			return a
		}
		x := join("x", req("x"))
		task := enqueue(t, New(db, rgTable, Options{InstanceID: "q"}), req("q"), "task-1")
		for i := range 16 {
			join(fmt.Sprintf("f%d", i), req("c"))
		}
		c := join("c", req("c"))
		look := func(a *attempt) (*view, bool, handout, []*ticket) {
			t.Helper()
			v, err := a.l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			served, h, bypass := a.decide(v, a.now())
			return v, served, h, bypass
		}
		ahead := func(h handout, id string) bool {
			for _, t := range h.ahead {
				if t.id == id {
					return true
				}
			}
			return false
		}
		v, _, _, _ := look(c)
		if xt, ct := v.ticketFor(x.me.id), v.ticketFor(c.me.id); time.Duration(ct.look) < 4*time.Second || claimWindow(xt) != 4*time.Second {
			t.Fatalf("C's announced look period %v, X's claim window %v; want 4 s and 4 s", time.Duration(ct.look), claimWindow(xt))
		}
		start := time.Now()
		release(t, h)
		time.Sleep(50 * time.Millisecond)
		if _, served, h, _ := look(c); served || !ahead(h, x.me.id) || ahead(h, task) {
			t.Fatalf("C's look at 0.05 s: served %v, X ahead %v, task ahead %v; want X's turn only", served, ahead(h, x.me.id), ahead(h, task))
		}
		time.Sleep(50 * time.Millisecond)
		z, err := New(db, rgTable, Options{InstanceID: "z"}).Acquire(ctx, req("z"))
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range []time.Duration{500, 1500, 2500, 3500} {
			time.Sleep(time.Until(start.Add(at * time.Millisecond)))
			if _, served, _, _ := look(x); served {
				t.Fatalf("X's look at %v: its turn; want Z's place to hold it back", time.Since(start))
			}
		}
		time.Sleep(time.Until(start.Add(3900 * time.Millisecond)))
		release(t, z)
		time.Sleep(time.Until(start.Add(4050 * time.Millisecond)))
		v, served, _, bypass := look(c)
		var passed []string
		for _, b := range bypass {
			passed = append(passed, b.id)
		}
		t.Logf("C's look at %v: served %v, passing %d: %v", time.Since(start), served, len(bypass), passed)
		if !served && len(bypass) > 0 {
			if _, err := c.pass(ctx, v, bypass); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Until(start.Add(4500 * time.Millisecond)))
		v, served, _, _ = look(x)
		if v.ticketFor(x.me.id) == nil {
			t.Errorf("X, live (it looked every second, its turn back 0.6 s ago at 3.9 s), found its ticket gone at %v: passed by C (not served, acting for task-1), which saw X's turn at 0.05 s and 4.05 s only, 4 s apart", time.Since(start))
		} else if !served {
			t.Errorf("X's look at %v: not served; want its turn", time.Since(start))
		}
	})
}
