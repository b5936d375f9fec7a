package lease

// Calls with no cap that wait: held back by the tokens of callers before
// them, they join the queue (within MaxQueued) and wait their turn as any
// caller does, passing those presumed gone and starting the task whose
// turn that makes come; turns are kept by ticket, in the code and in the
// model. Open, each test skipped unless LEASE_OPEN_DEFECTS is set
// (docs/admission.md, Rate limits): a turn that goes and comes back
// between two looks reads as one; and a caller that may not wait passes
// no dead waiter, which holds it off until its ticket lapses.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Invariant 8 (doc.go): "a live waiter is never presumed gone"; Whose
// turn: a waiter presumed gone "finds its ticket gone and joins again, at
// the back" — under the same id. A waiter keeps the turns it saw by
// ticket, not by id: the turn of the new ticket is not the old one's.
//
// H (D) holds heavy (cap 1); T (A) and then U (C) wait for it; W (B),
// whose principal holds a place of tool other, waits for heavy behind
// them. H finishes at 2 s: T's turn, T's process slow. U presumes T gone
// first (it saw T's turn first), takes heavy and removes T's ticket; T is
// heard from again at once and joins again under its id, before W (A
// holds no place, B one); U finishes at once: T's new ticket's turn. W
// saw T's first turn at 2 s: it must not presume T gone before T's new
// turn has stood its claim window.
func TestAWaiterDoesNotPresumeGoneOnItsOldTurnACallerThatJoinedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: who}
		}
		start := time.Now()
		l := New(db, rgTable, Options{InstanceID: "h"})
		h := acquire(t, l, heavy("D"))
		other := acquire(t, l, Request{Key: "srv", Tool: "other", ToolCap: 1, Hold: 10 * time.Minute, Holder: "B"})
		slow := &slowProcessAPI{API: db}
		type result struct {
			ls  *Lease
			err error
			at  time.Duration
		}
		waiter := func(api API, id string, req Request) chan result {
			got := make(chan result, 1)
			go func() {
				ls, err := New(api, rgTable, Options{InstanceID: id}).Acquire(ctx, req)
				got <- result{ls, err, time.Since(start)}
			}()
			synctest.Wait()
			return got
		}
		gotT := waiter(slow, "t", heavy("A"))
		gotU := waiter(db, "u", heavy("C"))
		gotW := waiter(db, "w", heavy("B"))
		q := parseItem(rgItem(t, db, rgTable, "srv")).queue
		if len(q) != 3 || q[0].label != "A" {
			t.Fatalf("T, U and W are not waiting, T first: %v", q)
		}
		tid, tn := q[0].id, q[0].n
		time.Sleep(2 * time.Second)
		slow.stop()
		if _, err := h.Finish(ctx, Success); err != nil { // T's turn
			t.Fatal(err)
		}
		var u result
		select {
		case u = <-gotU: // U presumes T gone past its claim window
		case r := <-gotW:
			t.Fatalf("W ended before U took T's place, at %v: %v", r.at, r.err)
		case <-time.After(time.Minute):
			t.Fatal("U got no place")
		}
		if u.err != nil {
			t.Fatalf("U: %v", u.err)
		}
		slow.resume() // T finds its ticket gone and joins again
		synctest.Wait()
		if nt := parseItem(rgItem(t, db, rgTable, "srv")).ticketFor(tid); nt == nil || nt.n == tn {
			t.Fatalf("T has not joined again under its id: %v", nt)
		}
		slow.stop()                                          // slow to look for a moment
		if _, err := u.ls.Finish(ctx, Success); err != nil { // T's new ticket's turn
			t.Fatal(err)
		}
		turn := time.Since(start)
		var w result
		select {
		case w = <-gotW:
		case <-time.After(time.Minute):
			t.Fatal("W did not end")
		}
		slow.resume()
		t.Logf("U took T's place at %v; T's new turn at %v; W ended at %v: %v", u.at, turn, w.at, w.err)
		if w.err == nil && w.at < turn+ClaimWindow {
			t.Errorf("T joined again under its id after U passed it; its new ticket's turn came at %v, and W, which saw T's first turn at 2 s, "+
				"presumed T gone at %v (%v into its new turn, less than ClaimWindow %v) and took its place: turns are kept by id, not by ticket",
				turn, w.at, w.at-turn, ClaimWindow)
		}
		if r := <-gotT; r.err == nil {
			_, _ = r.ls.Finish(ctx, Unused)
		} else {
			t.Logf("T: %v", r.err)
		}
		for _, ls := range []*Lease{w.ls, other} {
			if ls != nil {
				_, _ = ls.Finish(ctx, Unused)
			}
		}
	})
}

// readCountAPI counts the item reads made through it.
type readCountAPI struct {
	API
	n *atomic.Int64
}

func (r readCountAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.n.Add(1)
	return r.API.GetItem(ctx, in, opts...)
}

// Invariant 7 (doc.go): "At most MaxQueued callers wait"; 14: "a waiter's
// reads per second fall with its rank ..., so the queue's grow with the
// logarithm of its length". A charge held back by a waiter's token now
// waits (Wait), reading every MaxLook, but holds no ticket: MaxQueued does
// not bound how many wait, and each reads every MaxLook whatever the
// number waiting, so the reads grow with the charges waiting.
//
// The server's bucket holds 1 token a minute. H (A) holds heavy (cap 1)
// from 0 s, taking the token; W (A) joins for heavy at 61 s and its
// process dies; H finishes at 62 s: W's turn, and the token is W's. At
// 62.5 s, eight calls of light (no cap; MaxQueued 2, Wait 5 min) arrive,
// on eight instances. A second later, at most 2 may wait; the rest must
// have been refused.
func TestChargesThatWaitAreBoundedByMaxQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 1}}
		heavy := Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 2, Wait: 10 * time.Minute, Hold: 10 * time.Minute, Holder: "A", Rates: rate}
		light := Request{Key: "srv", Tool: "light", MaxQueued: 2, Hold: 30 * time.Second, Wait: 5 * time.Minute, Holder: "B", Rates: rate}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy)
		time.Sleep(61 * time.Second)
		dead := &slowProcessAPI{API: db}
		wctx, wcancel := context.WithCancel(ctx)
		gotW := make(chan struct{})
		go func() {
			defer close(gotW)
			_, _ = New(dead, rgTable, Options{InstanceID: "w"}).Acquire(wctx, heavy)
		}()
		synctest.Wait()
		dead.stop()
		time.Sleep(time.Second)
		if _, err := h.Finish(ctx, Success); err != nil { // W's turn
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		const calls = 8
		var reads atomic.Int64
		var pending atomic.Int64
		done := make(chan *Lease, calls)
		for i := range calls {
			pending.Add(1)
			go func() {
				defer pending.Add(-1)
				ls, _ := New(readCountAPI{db, &reads}, rgTable, Options{InstanceID: fmt.Sprint("b", i)}).Acquire(ctx, light)
				done <- ls
			}()
		}
		time.Sleep(time.Second)
		synctest.Wait()
		r0 := reads.Load()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		waiting, perSecond := pending.Load(), float64(reads.Load()-r0)/2
		t.Logf("%d of %d charges waiting 1 s after they came; %.1f reads a second among them 1-3 s after", waiting, calls, perSecond)
		if waiting > int64(light.MaxQueued) {
			t.Errorf("%d charges wait for W's token (MaxQueued %d), none of them in the queue, reading %.1f times a second between them: "+
				"charges that wait are bounded by nothing, their reads growing with their number", waiting, light.MaxQueued, perSecond)
		}
		wcancel()
		dead.resume()
		<-gotW
		cancel()
		for range calls {
			if ls := <-done; ls != nil {
				_, _ = ls.Finish(context.Background(), Unused)
			}
		}
	})
}

// The model (sim_model_test.go) kept turnCame by id and only ever lowered
// it (noteTurns), so a waiter presumed gone that joins again under its id
// (a new number) inherited its old ticket's turn, and judgeTake's bypass
// check let a take remove its new ticket at once: the finding of
// TestAWaiterDoesNotPresumeGoneOnItsOldTurnACallerThatJoinedAgain would
// pass the simulation unflagged.
//
// x (number 1) waits, its turn come at t0; at t0+5 s its ticket is gone
// (passed); at t0+6 s x joins again, number 3, its turn come at once. A
// take of c2's (pb, waiting at number 2 behind x) sent at t0+6.5 s that
// removes x's new ticket presumed a live waiter gone half a second into
// its turn.
func TestTheModelFlagsATakePassingAWaiterOnItsOldTicketsTurn(t *testing.T) {
	far := mNow + 60000
	exp := mNow + 3000
	k := mKey{Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Margin: time.Second, MaxPause: 5 * time.Second}
	t0 := time.UnixMilli(mNow).Add(-6500 * time.Millisecond)
	came := map[string]time.Time{}
	mItemOf().ticket("x", 1, "pa", "", far, 0, 0).ticket("c2", 2, "pb", "", far, 0, 0).num("seq", 2).item().noteTurns(k, t0, simSkew, came)
	mItemOf().ticket("c2", 2, "pb", "", far, 0, 0).lease("l", "pd", "", far).num("seq", 2).item().noteTurns(k, t0.Add(5*time.Second), simSkew, came)
	rejoined := mItemOf().ticket("c2", 2, "pb", "", far, 0, 0).ticket("x", 3, "pa", "", far, 0, 0).num("seq", 3)
	rejoined.item().noteTurns(k, t0.Add(6*time.Second), simSkew, came)
	t.Logf("x's new turn came, as the model keeps it: %v before the take", time.UnixMilli(mNow).Sub(came["x#3"]))
	judgeCase{name: "a take passing a waiter on the turn of its old ticket", k: k, me: mCaller{p: "pb"}, mine: []string{"c2"}, judged: 3,
		before: rejoined, after: rejoined.clone().unticket("x").unticket("c2").lease("c2", "pb", "", exp).num("freed", 1),
		came: map[string]time.Duration{"x": time.UnixMilli(mNow).Sub(came["x#3"])}, want: []string{"bypass"}}.run(t)
}

// Tasks (doc.go): "Whoever sees a task's turn come — a release, a waiter
// behind it, a take (... its answer shows the tasks served in the same
// look ...) — marks its ticket and starts a worker". A take that passes a
// dead waiter starts the task whose turn that makes come; a charge that
// passes one (removing its ticket, ADDing 1 to freed) now does the same to
// the queue but starts nobody, nor does it on its looks: the task's turn
// goes unseen until a StartDue or another caller's look.
//
// Each principal's bucket holds 1 token a minute. H (D) holds heavy (cap
// 1); X (C) waits for heavy, its process dead, and task K of A behind it.
// H finishes at 2 s: X's turn (K's comes after it, heavy's one place
// X's). P's call of light (no cap) for C (Wait 5 min), held back by X's
// token, passes X past its claim window: K's turn comes (heavy free, A's
// token there). Every live limiter starts tasks (OnTaskStart): K must be
// started once P's take lands.
func TestAChargeThatPassesADeadWaiterStartsTheTaskWhoseTurnItMakesCome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := func(who string) []Rate { return []Rate{{Name: "principal:" + who, PerMinute: 1}} }
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate(who)}
		}
		light := Request{Key: "srv", Tool: "light", MaxQueued: 4, Hold: 30 * time.Second, Wait: 5 * time.Minute, Holder: "C", Rates: rate("C")}
		var st starts
		l := New(db, rgTable, Options{InstanceID: "h", OnTaskStart: st.hook})
		h := acquire(t, l, heavy("D"))
		dead := &slowProcessAPI{API: db}
		xctx, xcancel := context.WithCancel(ctx)
		gotX := make(chan struct{})
		go func() {
			defer close(gotX)
			_, _ = New(dead, rgTable, Options{InstanceID: "x", OnTaskStart: st.hook}).Acquire(xctx, heavy("C"))
		}()
		synctest.Wait()
		dead.stop()
		if _, err := l.Enqueue(ctx, heavy("A"), "", "task-k", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if _, err := h.Finish(ctx, Success); err != nil { // X's turn
			t.Fatal(err)
		}
		synctest.Wait()
		if s := st.list(); len(s) != 0 {
			t.Fatalf("K started on X's turn: %+v", s)
		}
		time.Sleep(500 * time.Millisecond)
		p, err := New(db, rgTable, Options{InstanceID: "p", OnTaskStart: st.hook}).Acquire(ctx, light)
		if err != nil {
			t.Fatalf("P's charge: %v", err)
		}
		defer p.Finish(context.Background(), Success)
		q := parseItem(rgItem(t, db, rgTable, "srv")).queue
		if len(q) != 1 || !q[0].task {
			t.Fatalf("P's charge did not pass X, leaving K: %v", q)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if s := st.list(); len(s) == 0 {
			t.Errorf("P's charge passed dead X, removing its ticket: task K's turn came (heavy free, A's token there), and a second later nobody has started it")
		}
		xcancel()
		dead.resume()
		<-gotX
	})
}

// Stats (stats.go): "RateLimited [counts] those a bucket refused". A call
// with no cap that waits out a dead waiter's claim window and is admitted
// in the end counts one grant and no refusal.
func TestAChargeThatWaitsAndIsAdmittedCountsNoRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 1}}
		heavy := Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 10 * time.Minute, Hold: 10 * time.Minute, Holder: "A", Rates: rate}
		light := Request{Key: "srv", Tool: "light", MaxQueued: 4, Hold: 30 * time.Second, Wait: 5 * time.Minute, Holder: "B", Rates: rate}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy)
		time.Sleep(61 * time.Second)
		dead := &slowProcessAPI{API: db}
		wctx, wcancel := context.WithCancel(ctx)
		gotW := make(chan struct{})
		go func() {
			defer close(gotW)
			_, _ = New(dead, rgTable, Options{InstanceID: "w"}).Acquire(wctx, heavy)
		}()
		synctest.Wait()
		dead.stop()
		time.Sleep(time.Second)
		if _, err := h.Finish(ctx, Success); err != nil { // W's turn
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		lb := New(db, rgTable, Options{InstanceID: "b"})
		ls, err := lb.Acquire(ctx, light)
		if err != nil {
			t.Fatalf("B's charge: %v", err)
		}
		_, _ = ls.Finish(ctx, Success)
		s := lb.Stats()
		t.Logf("B's limiter: %+v", s)
		if s.RateLimited != 0 {
			t.Errorf("B's one call waited out W's claim window and was admitted; its limiter counts %d calls a bucket refused, %d granted", s.RateLimited, s.Acquired)
		}
		wcancel()
		dead.resume()
		<-gotW
	})
}

// lookHookAPI runs before, once, ahead of the first item read made at or
// after from, and records every read's time.
type lookHookAPI struct {
	API
	mu     sync.Mutex
	from   time.Time
	before func()
	reads  []time.Time
}

func (h *lookHookAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	h.mu.Lock()
	h.reads = append(h.reads, time.Now())
	var f func()
	if h.before != nil && !time.Now().Before(h.from) {
		f, h.before = h.before, nil
	}
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return h.API.GetItem(ctx, in, opts...)
}

// Invariant 8 (doc.go): "A live waiter looks within its period of its turn
// coming ... and has ClaimWindow more to take its place: it is never
// presumed gone." A charge samples a turn once a look (MaxLook) and counts
// its claim window from the first sighting: a turn that went and came back
// between two of its looks reads as one. A waiter whose period is longer
// than its instance's MaxLook (10 s here; claim window 13 s) may look just
// as its turn went, and next a period later; the charge presumes it gone
// before.
//
// Each principal's bucket holds 1 token a minute. O (A) holds tool other
// from 0 s (A holds a place: its waiters rank after C's, which holds
// none), taking A's token; H (D) holds heavy (cap 1). A's token is back
// at 60 s: T (A, instance MaxLook 10 s) joins for heavy. At 100 s, its
// looks a period apart, just after T's next look (r0), H finishes: T's
// turn. P's call of light (no cap) for A (Wait 5 min) from r0+0.5 s is
// held back by T's token.
// look (r0+10 s), U (C) takes heavy as a newcomer (it ranks first); T's
// look finds heavy full; U finishes 200 ms later, T's turn again, between
// two looks of P. T looks next within its period of that; P must not pass
// T within T's claim window of its turn coming again.
func TestAChargeDoesNotPresumeGoneAWaiterWhoseTurnWentBetweenItsLooks(t *testing.T) {
	openDefect(t)
	turnBetweenLooks(t, false)
}

// The same with P a waiter of heavy (A) behind T in place of the call of light
// (U's hold 20 ms: P's looks are jittered): a take's looks sample a turn
// alike, so invariant 8 fails for takes wherever a ticket's period exceeds
// the presumer's look and a turn can go and come back between its looks.
func TestATakeDoesNotPresumeGoneAWaiterWhoseTurnWentBetweenItsLooks(t *testing.T) {
	openDefect(t)
	turnBetweenLooks(t, true)
}

// turnBetweenLooks runs the scenario above with P a charge, or with take
// a waiter.
func turnBetweenLooks(t *testing.T, take bool) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := func(who string) []Rate { return []Rate{{Name: "principal:" + who, PerMinute: 1}} }
		req := func(tool, who string, hold time.Duration) Request {
			return Request{Key: "srv", Tool: tool, ToolCap: 1, MaxQueued: 8, Wait: 5 * time.Minute, Hold: hold, Holder: who, Rates: rate(who)}
		}
		light := Request{Key: "srv", Tool: "light", MaxQueued: 4, Hold: 30 * time.Second, Wait: 5 * time.Minute, Holder: "A", Rates: rate("A")}
		// P: a charge, or a waiter of heavy behind T, whose looks are
		// jittered (so U's hold is shorter than one of them is likely to
		// hit).
		pReq, uHold, what := light, 200*time.Millisecond, "P's charge"
		if take {
			pReq, uHold, what = req("heavy", "A", time.Minute), 20*time.Millisecond, "waiter P"
		}
		start := time.Now()
		o := acquire(t, New(db, rgTable, Options{InstanceID: "o"}), req("other", "A", 10*time.Minute))
		defer o.Finish(context.Background(), Success)
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), req("heavy", "D", 10*time.Minute))
		lu := New(db, rgTable, Options{InstanceID: "u"})
		var uAt, backAt time.Duration
		hook := &lookHookAPI{API: db, from: start.Add(time.Hour)}
		hook.before = func() {
			u, err := lu.Acquire(ctx, req("heavy", "C", time.Minute))
			if err != nil {
				t.Errorf("U: %v", err)
				return
			}
			uAt = time.Since(start)
			go func() {
				time.Sleep(uHold)
				if _, err := u.Finish(ctx, Success); err != nil {
					t.Errorf("U's finish: %v", err)
				}
				backAt = time.Since(start)
			}()
		}
		nreads := func() int {
			hook.mu.Lock()
			defer hook.mu.Unlock()
			return len(hook.reads)
		}
		type result struct {
			ls  *Lease
			err error
			at  time.Duration
		}
		time.Sleep(60 * time.Second) // A's token back
		gotT := make(chan result, 1)
		go func() {
			ls, err := New(hook, rgTable, Options{InstanceID: "t", MaxLook: 10 * time.Second}).Acquire(ctx, req("heavy", "A", 10*time.Minute))
			gotT <- result{ls, err, time.Since(start)}
		}()
		synctest.Wait()
		q := parseItem(rgItem(t, db, rgTable, "srv")).queue
		if len(q) != 1 || q[0].label != "A" {
			t.Fatalf("T is not waiting: %v", q)
		}
		look := q[0].look
		time.Sleep(40 * time.Second) // T's looks a period apart
		gotP := make(chan result, 1)
		startP := func() {
			go func() {
				ls, err := New(db, rgTable, Options{InstanceID: "p"}).Acquire(ctx, pReq)
				gotP <- result{ls, err, time.Since(start)}
			}()
		}
		if take {
			startP()
		}
		for n := nreads(); nreads() == n; {
			time.Sleep(10 * time.Millisecond)
		}
		r0 := time.Since(start)
		hook.mu.Lock()
		hook.from = start.Add(r0 + 9*time.Second)
		hook.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		if _, err := h.Finish(ctx, Success); err != nil { // T's turn
			t.Fatal(err)
		}
		time.Sleep(450 * time.Millisecond)
		if !take {
			startP()
		}
		var p, tr result
		select {
		case p = <-gotP:
			tr = <-gotT
		case tr = <-gotT:
			p = <-gotP
		}
		hook.mu.Lock()
		var reads []time.Duration
		for _, r := range hook.reads {
			if r.Sub(start) > 90*time.Second {
				reads = append(reads, r.Sub(start))
			}
		}
		hook.mu.Unlock()
		t.Logf("T's look period %v; its reads past 90 s at %v; U took heavy at %v, T's turn again at %v; P: %v at %v; T: %v at %v", look, reads, uAt, backAt, p.err, p.at, tr.err, tr.at)
		if backAt == 0 {
			t.Fatal("T's turn did not go and come again")
		}
		if p.err == nil && p.at < backAt+ClaimWindow+look {
			t.Errorf("T's turn went at %v and came again at %v, between two looks of %s; P presumed T gone at %v, %v into its turn (its claim window %v), counting from its first sighting at %v", uAt, backAt, what, p.at, p.at-backAt, ClaimWindow+look, r0+500*time.Millisecond)
		}
		for _, r := range []result{p, tr} {
			if r.ls != nil {
				_, _ = r.ls.Finish(context.Background(), Unused)
			}
		}
	})
}

// A call that may not wait (light, no Wait) beside a dead waiter that
// needs its token: each call is a newcomer whose looks start the waiter's
// turn afresh, so it is refused for as long as the dead waiter's ticket
// lives. (TestADeadWaitersTicketDoesNotHoldItsTokenFromChargesPastItsClaimWindow
// and three others give their calls Wait; this is the first with none.)
func TestAChargeThatMayNotWaitIsAdmittedWhenItsRefusalSaid(t *testing.T) {
	openDefect(t)
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 1}}
		heavy := Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 10 * time.Minute, Hold: 10 * time.Minute, Holder: "A", Rates: rate}
		light := Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "B", Rates: rate}
		start := time.Now()
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy)
		time.Sleep(61 * time.Second)
		dead := &slowProcessAPI{API: db}
		wctx, wcancel := context.WithCancel(ctx)
		gotW := make(chan struct{})
		go func() {
			defer close(gotW)
			_, _ = New(dead, rgTable, Options{InstanceID: "w"}).Acquire(wctx, heavy)
		}()
		synctest.Wait()
		dead.stop()
		time.Sleep(time.Second)
		if _, err := h.Finish(ctx, Success); err != nil { // W's turn
			t.Fatal(err)
		}
		turn := time.Since(start)
		lb := New(db, rgTable, Options{InstanceID: "b"})
		due := turn + ClaimWindow + MaxLookFar + time.Minute
		var admitted time.Duration
		var told []time.Duration
		for admitted == 0 && time.Since(start) < 15*time.Minute {
			ls, err := lb.Acquire(ctx, light)
			var rl *RateLimitedError
			switch {
			case err == nil:
				admitted = time.Since(start)
				_, _ = ls.Finish(ctx, Success)
			case errors.As(err, &rl):
				if len(told) < 4 {
					told = append(told, rl.RetryAfter)
				}
				time.Sleep(rl.RetryAfter)
			default:
				t.Fatalf("B's call: %v", err)
			}
		}
		t.Logf("W's turn at %v; B told to come back after %v ...; B's first token at %v", turn, told, admitted)
		if admitted == 0 || admitted > due {
			t.Errorf("W died waiting; its turn came at %v; B's calls of light (no Wait), each when its refusal said (%v ...), got their first token at %v (0: none in 15 minutes), past %v",
				turn, told, admitted, due)
		}
		wcancel()
		dead.resume()
		<-gotW
	})
}
