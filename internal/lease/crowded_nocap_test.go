package lease

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// Defects the crowded charge runs of the fault simulation found (see
// crowdBesideWaiters in sim_test.go), each pinned by hand.

// TestARefundBesideItsOwnLateJoinIsJudgedARefund: a call holding
// nothing whose join's first attempt was held in the network joined again,
// took its turn (its take holding nothing: no lease to refuse a join), and
// the held attempt then landed, its ticket back in the queue (doc.go: a
// join landing late leaves a ticket passed over like a dead waiter's). Its
// call never made, its refund — which touches no ticket — was judged as a
// release, the ticket being its own, and failed as one ("bucket server
// gave back 15000 ms in a write that is not an unused call's release";
// fault simulation seed 658). A refund beside its writer's ticket,
// unchanged by it, is a refund.
func TestARefundBesideItsOwnLateJoinIsJudgedARefund(t *testing.T) {
	far := mNow + 60000
	k := mKey{MaxQueued: 8, ServerRPM: 4, Hold: 2 * time.Second, Margin: time.Second, MaxPause: 5 * time.Second}
	me := mCaller{p: "pa"}
	late := func(f *mFix) *mFix { return f.ticket("me", 2, "pa", "b", far, 0, 0).num("seq", 2) } // its join, landed after its take
	drained := func() *mFix { return mItemOf().num("rate:server", mNow+60000) }
	oneLeft := func() *mFix { return mItemOf().num("rate:server", mNow+45000) }
	for _, tc := range []judgeCase{
		{name: "a refund beside its writer's ticket, which a late join brought back", k: k, me: me, mine: []string{"me"}, holdsNothing: true, judged: -1,
			before: late(drained()), after: late(oneLeft()).num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1},
		{name: "a refund of more than its token beside its writer's ticket", k: k, me: me, mine: []string{"me"}, holdsNothing: true, judged: -1,
			before: late(drained()), after: late(mItemOf().num("rate:server", mNow+29999)).num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1, want: []string{"rate"}},
		{name: "a refund that removes its writer's ticket", k: k, me: me, mine: []string{"me"}, holdsNothing: true, judged: -1,
			before: late(drained()), after: oneLeft().num("seq", 2).num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1, want: []string{"rate"}},
	} {
		tc.run(t)
	}
}

// TestANewcomerCountsADeadWaiterItDoesNotRemove: a call holding
// nothing found waiters needing its buckets and took its turn as a
// newcomer. Before it, x, dead, waits for tool a (capped at 1, free), its
// turn come a claim window ago on the fastest clock; behind x, y of the
// newcomer's own principal waits for tool a too. A newcomer has no looks
// of its own to presume x gone by (doc.go, Whose turn): x takes tool a's
// place in its walk and one server token, y cannot use a place (its tool
// full), and the newcomer takes its principal's last token, leaving x the
// server's other one. The model judged the charge with x passed over: y
// then took tool a's place and that principal's last token, and the charge
// was held to have taken y's ("a charge of p0 took a token its buckets did
// not hold beyond what the callers whose turn comes first need"; fault
// simulation seed 3642). Passing over a caller presumed gone can hand its
// place to one needing more of the charge's tokens: a charge that leaves
// every caller it did not remove its turn takes no token of theirs.
func TestANewcomerCountsADeadWaiterItDoesNotRemove(t *testing.T) {
	far := mNow + 60000
	// Buckets of 2 a minute (a token every 30 s): the server's full (2
	// tokens), p0's with one left.
	k := mKey{MaxQueued: 8, ServerRPM: 2, PrincipalRPM: 2, Hold: 2 * time.Second, Margin: time.Second, MaxPause: 5 * time.Second}
	me := mCaller{p: "p0"}
	queue := func(f *mFix) *mFix {
		return f.ticket("x", 1, "p2", "a", far, 1, 0).ticket("y", 2, "p0", "a", far, 1, 0).num("seq", 2)
	}
	before := queue(mItemOf().num("rate:principal:p0", mNow+30000))
	after := queue(mItemOf().num("rate:server", mNow+30000).num("rate:principal:p0", mNow+60000))
	for _, tc := range []judgeCase{
		{name: "a newcomer's take holding nothing, leaving the dead waiter before it its token", k: k, me: me, holdsNothing: true, outcome: mNoOutcome, judged: 2,
			before: before, after: after, came: map[string]time.Duration{"x": ClaimWindow}},
		{name: "the same before x's turn came", k: k, me: me, holdsNothing: true, outcome: mNoOutcome, judged: 2,
			before: before, after: after},
		{name: "a newcomer's take holding nothing that takes x's server token too", k: k, me: me, holdsNothing: true, outcome: mNoOutcome, judged: 2,
			before: queue(mItemOf().num("rate:server", mNow+30000).num("rate:principal:p0", mNow+30000)), after: queue(mItemOf().num("rate:server", mNow+60000).num("rate:principal:p0", mNow+60000)),
			want: []string{"rate"}},
	} {
		tc.run(t)
	}
}

// TestAWaitersTakeHoldingNothingLeavesAnotherPrincipalsTakeInTurn:
// invariant 6 (fault simulation seeds 15018671 and 15042315). The key is
// uncapped; p0 holds a place (tool x, capped at 5), p1 none. W (p1, no
// tool: it holds nothing), A0 (p0) and A1 (p1) wait, A0 and A1 for tool
// a's one place, held by p2. When that place frees, W's turn comes first
// (p1 holds fewer places). Counting W's turn as a place of p1's, p0 and p1
// would then hold as many and A0's lower number would rank it before A1;
// but W takes its turn holding nothing, p1 holds no place more, and A1
// ranks before A0 (p0 holds more): tool a's place is A1's. A0, judging
// from the item before W's take, must not take it: its view ranks A1
// first, as the item after W's take does (W's ticket says it holds
// nothing), or, were it served, its take would fail.
func TestAWaitersTakeHoldingNothingLeavesAnotherPrincipalsTakeInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		r := func(holder, tool string, toolCap int) Request {
			return Request{Key: "srv", Hold: 30 * time.Second, Holder: holder, MaxQueued: 8, Wait: 20 * time.Second,
				Tool: tool, ToolCap: toolCap, Rates: []Rate{{Name: "server", PerMinute: 10}}}
		}
		if _, err := New(db, "leases", Options{InstanceID: "h"}).Acquire(ctx, r("p0", "x", 5)); err != nil {
			t.Fatal(err)
		}
		la, err := New(db, "leases", Options{InstanceID: "l"}).Acquire(ctx, r("p2", "a", 1))
		if err != nil {
			t.Fatal(err)
		}
		caller := func(inst, holder, tool string, toolCap int) (*attempt, *view) {
			l := New(db, "leases", Options{InstanceID: inst})
			a := l.newAttempt(r(holder, tool, toolCap), l.newLeaseID(), false)
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			return a, v
		}
		w, wv := caller("w", "p1", "", 0)
		if w.req.holds() {
			t.Fatal("W's request holds a place; the schedule does not test anything")
		}
		// W waits: joined while it was not its turn (its ticket numbered
		// first); A0 and A1 join for tool a, full.
		if _, err := w.join(ctx, wv); err != nil {
			t.Fatal(err)
		}
		a0, a0v := caller("a0", "p0", "a", 1)
		if _, err := a0.join(ctx, a0v); err != nil {
			t.Fatal(err)
		}
		a1, a1v := caller("a1", "p1", "a", 1)
		if _, err := a1.join(ctx, a1v); err != nil {
			t.Fatal(err)
		}
		if _, err := la.Finish(ctx, Success); err != nil { // tool a's place frees
			t.Fatal(err)
		}
		a0v = itemView(t, db, "srv")
		a0.n = a0v.ticketFor(a0.me.id).n
		a0Now := a0.now()
		served, ahead, bypass := a0.decide3(a0v, a0Now)
		if !served {
			// Whose turn counts W's place as none of p1's, as its take
			// will: A1 ranks first for tool a from A0's view already.
			if !slices.ContainsFunc(ahead, func(t *ticket) bool { return t.id == a1.me.id }) {
				t.Errorf("A0's view: not served, with %d ahead, A1 not among them", len(ahead))
			}
			return
		}
		if len(ahead) != 1 || ahead[0].id != w.me.id {
			t.Fatalf("A0's view: served, ahead %v; want W alone", ahead)
		}
		wv = itemView(t, db, "srv")
		w.n = wv.ticketFor(w.me.id).n
		wNow := w.now()
		if ok, wAhead, wBypass := w.decide3(wv, wNow); !ok {
			t.Fatalf("W's view: not served (ahead %v)", wAhead)
		} else if ls, _, err := w.take3(ctx, wv, wAhead, wBypass, wNow); err != nil || ls == nil {
			t.Fatalf("W's take: lease %v, error %v", ls, err)
		}
		after := itemView(t, db, "srv")
		if after.ticketFor(w.me.id) != nil || len(after.leases) != 1 {
			t.Fatalf("W's take left its ticket or set a lease: %+v", after)
		}
		if ok, _ := after.turn3(a0.now(), &a0.me, a0.req.rules(after), nil); ok {
			t.Fatal("with W's turn taken it is still A0's turn; the schedule does not test anything")
		}
		ls, _, err := a0.take3(ctx, a0v, ahead, bypass, a0Now)
		if err != nil {
			t.Fatal(err)
		}
		if ls != nil {
			t.Errorf("A0 (p0, holding a place) took tool a's place while A1 (p1, holding none), ranked first for it once W's take holding nothing left p1 with no place, waits for it")
		}
	})
}

// TestATurnComesForACallerThatPassesNobodyOver: the model notes when
// each ticket's turn first came, for the claim windows of callers that
// may presume it gone. It walked the item with the tickets whose turn came
// a claim window ago passed over; a caller that has not looked for that
// long (a newcomer among them) passes nobody over, and passing one over
// can hand its place to another that takes the token a third needs. Here
// x (p2), presumed gone, waits for tool a (capped at 1, free), y (p0) for
// tool a too, z (p0) for no tool, p0's bucket holding one token. Passing
// x over, y takes tool a's place and p0's token: z's turn has not come.
// Counting x, x takes tool a's place, y cannot use one, and p0's token is
// z's: z's turn came now for a newcomer's look, which then presumed z gone
// a claim window after it (fault simulation seed 15008730: "presumed i1.4
// gone 2.98s after its turn first came").
func TestATurnComesForACallerThatPassesNobodyOver(t *testing.T) {
	far := mNow + 60000
	now := time.UnixMilli(mNow)
	k := mKey{MaxQueued: 8, PrincipalRPM: 2, Hold: 2 * time.Second, Margin: time.Second}
	it := mItemOf().num("rate:principal:p0", mNow+30000).
		ticket("x", 1, "p2", "a", far, 1, 0).ticket("y", 2, "p0", "a", far, 1, 0).ticket("z", 3, "p0", "", far, 0, 0).num("seq", 3).item()
	came := map[string]time.Time{"x#1": now.Add(-ClaimWindow - time.Second)}
	it.noteTurns(k, now, 400*time.Millisecond, came)
	if got, ok := came["z#3"]; !ok || got.After(now) {
		t.Errorf("z's turn noted at %v (noted: %v); it came now for a caller counting x", got.Sub(now), ok)
	}
}

// Whose turn (doc.go): a caller presumes gone only tickets whose turn came
// before its own in its looks, a claim window after it first saw that
// turn, and removes their tickets in the write that passes them; Buckets:
// a call holding nothing takes its tokens in its turn, a charge's judged
// so too (sim_model_test.go, judgeCharge). The model takes every ticket
// whose turn came a claim window before the write as passed over, removed
// or not: when such a ticket holds a place another waiter needs, passing
// it over promotes that waiter, whose token the model then holds against
// the charge, though the writer, not presuming the ticket gone (it would
// have removed it), judged the waiter held back (fault simulation seeds
// 14012444 and 14012763, of the code as it stands and before).
//
// Each principal's bucket holds 3 a minute; p1's has one token. Z (p0,
// #1) waits for tool a (cap 1), its turn come 5 s ago, its caller dead;
// W (p1, #2) waits for tool a too. A newcomer of p1 (tool b, no cap,
// holding nothing) judged from seq 2: Z takes tool a in its turn, W cannot
// use a place, and the token is the newcomer's. Its write takes it,
// removing no ticket.
func TestTheModelAcceptsAChargeBesideATicketItDidNotPresumeGone(t *testing.T) {
	far := mNow + 60000
	k := mKey{MaxQueued: 8, PrincipalRPM: 3, Hold: 2 * time.Second, Margin: time.Second, MaxPause: 5 * time.Second}
	queue := func(f *mFix) *mFix {
		return f.ticket("z", 1, "p0", "a", far, 1, 0).ticket("w", 2, "p1", "a", far, 1, 0).num("seq", 2)
	}
	judgeCase{name: "a charge past W, held back by Z's turn", k: k, me: mCaller{p: "p1", tool: "b"}, holdsNothing: true, outcome: mNoOutcome, judged: 2,
		came:   map[string]time.Duration{"z": 5 * time.Second},
		before: queue(mItemOf().num("rate:principal:p1", mNow+40000)), after: queue(mItemOf().num("rate:principal:p1", mNow+60000))}.run(t)
}
