package lease

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Whose turn (doc.go): a take of a place while another principal's callers
// wait ADDs 1 to freed, with no condition on which of its own principal's
// callers still wait: a take holding nothing may have served one of those
// its view showed, moving neither the principal's set nor freed, and the
// place ranks the others anew all the same. A condition naming one would
// refuse the take for nothing the take was judged on.
//
// Server bucket 600 a minute. H (D) holds heavy (cap 1). W1 (P, light:
// no cap, holding nothing), W2 (P, heavy) and X (Q, heavy) wait, in that
// order. N (P, a newcomer of tool other, cap 1) reads: W2 and X cannot
// use a place, W1's turn comes first (a token), then N's. W1 takes in
// its turn (holding nothing: it removes its ticket, moves neither P's set
// nor freed). N's take, judged before, still ranks W2 after X: it must
// land.
func TestATakeIsNotRefusedWhileAnotherWaiterOfItsPrincipalWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := []Rate{{Name: "server", PerMinute: 600}}
		r := func(holder, tool string, toolCap int) Request {
			return Request{Key: "srv", Tool: tool, ToolCap: toolCap, MaxQueued: 8, Wait: time.Minute, Hold: 10 * time.Minute, Holder: holder, Rates: rate}
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), r("D", "heavy", 1))
		read := func(l *Limiter) *view {
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		attempts := map[string]*attempt{}
		for _, w := range []struct {
			inst, holder, tool string
			toolCap            int
		}{{"w1", "P", "light", 0}, {"w2", "P", "heavy", 1}, {"x", "Q", "heavy", 1}} {
			l := New(db, rgTable, Options{InstanceID: w.inst})
			a := l.newAttempt(r(w.holder, w.tool, w.toolCap), l.newLeaseID(), false)
			if _, err := a.join(ctx, read(l)); err != nil {
				t.Fatal(err)
			}
			attempts[w.inst] = a
		}
		if q := itemView(t, db, "srv").queue; len(q) != 3 || q[0].id != attempts["w1"].me.id {
			t.Fatalf("W1, W2 and X are not waiting, W1 first: %v", ids(q))
		}
		nl := New(db, rgTable, Options{InstanceID: "n"})
		n := nl.newAttempt(r("P", "other", 1), nl.newLeaseID(), false)
		nv := read(nl)
		nNow := n.now()
		served, ahead, bypass := n.decide3(nv, nNow)
		if !served || len(ahead) != 1 || ahead[0].id != attempts["w1"].me.id {
			t.Fatalf("N's view: served %v, ahead %v; want served behind W1", served, ids(ahead))
		}
		// W1 takes in its turn, holding nothing.
		w1 := attempts["w1"]
		w1v := read(w1.l)
		w1.n, w1.joined = w1v.ticketFor(w1.me.id).n, true
		w1Now := w1.now()
		if ok, w1Ahead, w1Bypass := w1.decide3(w1v, w1Now); !ok {
			t.Fatalf("W1's view: not its turn (ahead %v)", ids(w1Ahead))
		} else if ls, _, err := w1.take3(ctx, w1v, w1Ahead, w1Bypass, w1Now); err != nil || ls == nil {
			t.Fatalf("W1's take: lease %v, error %v", ls, err)
		} else if ls.TakesPlace() {
			t.Fatalf("W1's take holds a place; the schedule does not test anything")
		}
		after := itemView(t, db, "srv")
		if len(after.queue) != 2 || after.freed != nv.freed || len(after.sets[PrincipalAttr("P")]) != len(nv.sets[PrincipalAttr("P")]) {
			t.Fatalf("W1's take moved what N's take is conditioned on: queue %v, freed %d (was %d)", ids(after.queue), after.freed, nv.freed)
		}
		if ok, _ := after.turn3(n.now(), &n.me, n.req.rules(after), nil); !ok {
			t.Fatal("with W1 served it is no longer N's turn; the schedule does not test anything")
		}
		ls, _, err := n.take3(ctx, nv, ahead, bypass, nNow)
		if err != nil {
			t.Fatal(err)
		}
		if ls == nil {
			t.Errorf("N's take, its turn as judged and W2 (P) still waiting beside X (Q), was refused because W1, the first of P's waiters its view showed, was served since")
		} else {
			if v := itemView(t, db, "srv"); v.freed != nv.freed+1 {
				t.Errorf("N's take landed and moved freed by %d; want 1: W2 is ranked anew", v.freed-nv.freed)
			}
			release(t, ls)
		}
		release(t, h)
	})
}

// Whose turn and Buckets (doc.go): a call with no cap that waits its turn
// holds nothing, "so its calls move nothing another's take is conditioned
// on" (TestCallsWithNoCapDoNotRefuseAWaitersTake: else steady traffic with
// no cap keeps a capped tool's waiters out). A reranking take conditioned
// on one of its principal's waiters still waiting would be refused by that
// waiter's call holding nothing, served in its turn between the take's
// look and its write: over and over, while such calls come steadily.
//
// H (D) holds heavy (cap 1); X (Q) waits for it. O (E) holds other (cap
// 1); T (P) waits for it. Tool light has a bucket of 600 a minute, empty:
// P's calls of light W1, W2, W3 (no cap, holding nothing) join and wait
// for its tokens. O finishes: T's turn. Each of T's writes takes 100 ms
// to land, in which a token comes and P's calls of light, whose turns
// come after T's, take the tokens come since T's look, in their turns;
// others of P's calls of light join, finding none: P always has calls of
// light waiting beside X, which T's place ranks anew. T must get other
// within its Wait (10 s).
func TestCallsWithNoCapServedInTheirTurnDoNotRefuseARerankingTake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		lightRate := []Rate{{Name: "tool:light", PerMinute: 600}}
		capped := func(holder, tool string) Request {
			return Request{Key: "srv", Tool: tool, ToolCap: 1, MaxQueued: 16, Wait: time.Hour, Hold: time.Hour, Holder: holder}
		}
		light := func(holder string) Request {
			return Request{Key: "srv", Tool: "light", MaxQueued: 16, Wait: time.Hour, Hold: time.Minute, Holder: holder, Rates: lightRate}
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), capped("D", "heavy"))
		o := acquire(t, New(db, rgTable, Options{InstanceID: "o"}), capped("E", "other"))
		xDone := make(chan struct{})
		go func() {
			defer close(xDone)
			if ls, err := New(db, rgTable, Options{InstanceID: "x"}).Acquire(ctx, capped("Q", "heavy")); err == nil {
				_, _ = ls.Finish(ctx, Success)
			}
		}()
		synctest.Wait()
		var armed atomic.Bool
		var tWrites atomic.Int64
		lights := New(db, rgTable, Options{InstanceID: "w"})
		var waiting []*attempt
		join := func() {
			a := lights.newAttempt(light("P"), lights.newLeaseID(), false)
			v, err := lights.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			if ok, _, _ := a.decide3(v, a.now()); ok {
				t.Fatalf("a call of light finds its turn come: the bucket is not empty")
			}
			if _, err := a.join(ctx, v); err != nil {
				t.Fatal(err)
			}
			waiting = append(waiting, a)
		}
		served := 0
		serveFirst := func() {
			a := waiting[0]
			waiting = waiting[1:]
			v, err := lights.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			a.n, a.joined = v.ticketFor(a.me.id).n, true
			now := a.now()
			ok, ahead, bypass := a.decide3(v, now)
			if !ok {
				t.Fatalf("the first of P's calls of light: not its turn with a token come (ahead %v)", ids(ahead))
			}
			ls, _, err := a.take3(ctx, v, ahead, bypass, now)
			if err != nil || ls == nil || ls.TakesPlace() {
				t.Fatalf("the first of P's calls of light, in its turn: lease %v, error %v", ls, err)
			}
			served++
		}
		type result struct {
			ls  *Lease
			err error
		}
		gotT := make(chan result, 1)
		go func() {
			ls, err := New(hookedAPI{db, &armed, func() {
				tWrites.Add(1)
				time.Sleep(time.Duration(lightRate[0].interval()) * time.Millisecond)
				// Every token come since goes to P's calls of light, in
				// their turns: P's newest finds none, and joins.
				for len(waiting) > 0 {
					serveFirst()
					v := itemView(t, db, "srv")
					if lightRate[0].Tokens(v.rates[RateAttr("tool:light")], time.Now().UnixMilli()) == 0 {
						break
					}
				}
				for len(waiting) < 3 {
					join()
				}
			}}, rgTable, Options{InstanceID: "t"}).Acquire(ctx, Request{Key: "srv", Tool: "other", ToolCap: 1, MaxQueued: 16, Wait: 10 * time.Second, Hold: time.Hour, Holder: "P"})
			gotT <- result{ls, err}
		}()
		synctest.Wait()
		// Empty, its next token an interval away.
		handSet(t, db, RateAttr("tool:light"), num(time.Now().UnixMilli()+lightRate[0].tolerance()+lightRate[0].interval()))
		for range 3 {
			join()
		}
		if q := itemView(t, db, "srv").queue; len(q) != 5 {
			t.Fatalf("X, T and P's three calls of light are not waiting: %v", ids(q))
		}
		armed.Store(true)
		release(t, o) // T's turn
		r := <-gotT
		armed.Store(false)
		t.Logf("T: %v after %d writes; P's calls of light served meanwhile: %d", r.err, tWrites.Load(), served)
		if r.err != nil {
			t.Errorf("T, whose turn came at once, got no place in its 10 s: each of its %d takes was refused by a call of light of its principal (holding nothing) served in its turn since T's look, while another waited", tWrites.Load())
		} else {
			release(t, r.ls)
		}
		release(t, h)
		<-xDone
	})
}

// Whose turn (doc.go): a take of a place while another principal's callers
// wait ADDs 1 to freed: its place ranks its principal's other callers
// after the others', which a take judged before may depend on
// (TestTakeThatReranksWaitersFailsATakeJudgedBefore). Its view may not
// show them: a waiter's take is not conditioned on seq, and a caller of
// its principal that joined after its look is ranked anew by its place
// all the same. So freed moves whether or not the view shows one.
//
// Cap 8, PrincipalCap 2. p0 holds a place (tool c). Z (p0, #1, tool a:
// cap 1) and C (p1, #2, tool b, whose bucket holds 1 a minute) wait. The
// bucket's token comes 250 ms from now; C's clock is 500 ms ahead: C
// looks, and its turn has come (p1 has no other caller waiting). Q (p1,
// #3, tool a) joins. A newcomer N (p0, tool d) looks, on a clock not
// ahead: C's bucket is empty, so C is passed over; p1 holds no place, so Q
// comes before Z and takes tool a, Z is passed over, and N may take p0's
// second and last place. C's take lands: p1 now holds as many places as
// p0, Z's lower number ranks it before Q, and tool a's place is Z's, with
// p0's last. N's take, judged before C's, must fail, as it does when C's
// view showed Q.
func TestATakeReranksAWaiterOfItsPrincipalThatJoinedAfterItsLook(t *testing.T) {
	rerankJoinedAfter(t, true)
}

// rerankJoinedAfter runs the scenario above, with Z joining before C's
// look (zFirst) or after it, beside Q.
func rerankJoinedAfter(t *testing.T, zFirst bool) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		r := func(holder, tool string, toolCap int) Request {
			req := Request{Key: "srv", Cap: 8, PrincipalCap: 2, Hold: 30 * time.Second, Holder: holder,
				MaxQueued: 8, Wait: 20 * time.Second, Tool: tool, ToolCap: toolCap}
			if tool == "b" {
				req.Rates = []Rate{{Name: "tool:b", PerMinute: 1}}
			}
			return req
		}
		if _, err := New(db, rgTable, Options{InstanceID: "h"}).Acquire(ctx, r("p0", "c", 0)); err != nil {
			t.Fatal(err)
		}
		read := func(l *Limiter) *view {
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		caller := func(inst, holder, tool string, toolCap int, ahead time.Duration) *attempt {
			l := New(db, rgTable, Options{InstanceID: inst, Clock: func() time.Time { return time.Now().Add(ahead) }})
			return l.newAttempt(r(holder, tool, toolCap), l.newLeaseID(), false)
		}
		joined := func(a *attempt) {
			if _, err := a.join(ctx, read(a.l)); err != nil {
				t.Fatal(err)
			}
		}
		z := caller("z", "p0", "a", 1, 0)
		if zFirst {
			joined(z)
		}
		c := caller("c", "p1", "b", 0, 500*time.Millisecond)
		joined(c)
		handSet(t, db, RateAttr("tool:b"), num(time.Now().UnixMilli()+250))
		cv := read(c.l)
		c.n, c.joined = cv.ticketFor(c.me.id).n, true
		cNow := c.now()
		cServed, cAhead, cBypass := c.decide3(cv, cNow)
		if !cServed {
			t.Fatalf("C's view: not its turn (ahead %v)", ids(cAhead))
		}
		if !zFirst {
			joined(z)
		}
		q := caller("q", "p1", "a", 1, 0)
		joined(q)
		n := caller("n", "p0", "d", 0, 0)
		n.req.Wait = 0
		nv := read(n.l)
		nNow := n.now()
		served, ahead, bypass := n.decide3(nv, nNow)
		if !served || !slices.ContainsFunc(ahead, func(t *ticket) bool { return t.id == q.me.id }) {
			t.Fatalf("N's view: served %v, ahead %v; want served behind Q", served, ids(ahead))
		}
		// C's take; refused, C judges the item it returns and takes again,
		// as its loop does.
		ls, rv, err := c.take3(ctx, cv, cAhead, cBypass, cNow)
		if err == nil && ls == nil && rv != nil {
			cNow = c.now()
			if cServed, cAhead, cBypass = c.decide3(rv, cNow); cServed {
				ls, _, err = c.take3(ctx, rv, cAhead, cBypass, cNow)
			}
		}
		if err != nil || ls == nil {
			t.Fatalf("C's take: lease %v, error %v", ls, err)
		}
		before := itemView(t, db, "srv")
		t.Logf("freed: %d at N's look, %d after C's take", nv.freed, before.freed)
		if ok, _ := before.turn3(n.now(), &n.me, n.req.rules(before), nil); ok {
			t.Fatal("with C's place taken it is still N's turn; the schedule does not test anything")
		}
		if ls, _, err = n.take3(ctx, nv, ahead, bypass, nNow); err != nil {
			t.Fatal(err)
		}
		if ls != nil {
			t.Errorf("N took p0's last place while Z, of p0 and ranked first for tool a once C's take ranked Q after it (Q joined after C's look; Z before it: %v), waits for it", zFirst)
		}
	})
}
