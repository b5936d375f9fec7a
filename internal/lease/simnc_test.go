package lease

import (
	"testing"
	"time"
)

// Defects the crowded charge runs of the fault simulation found (see
// crowdBesideWaiters in sim_test.go), each pinned by hand.

// TestSimNCARefundBesideItsOwnLateJoinIsJudgedARefund: a call holding
// nothing whose join's first attempt was held in the network joined again,
// took its turn (its take holding nothing: no lease to refuse a join), and
// the held attempt then landed, its ticket back in the queue (doc.go: a
// join landing late leaves a ticket passed over like a dead waiter's). Its
// call never made, its refund — which touches no ticket — was judged as a
// release, the ticket being its own, and failed as one ("bucket server
// gave back 15000 ms in a write that is not an unused call's release";
// fault simulation seed 658). A refund beside its writer's ticket,
// unchanged by it, is a refund.
func TestSimNCARefundBesideItsOwnLateJoinIsJudgedARefund(t *testing.T) {
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

// TestSimNCANewcomerCountsADeadWaiterItDoesNotRemove: a call holding
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
func TestSimNCANewcomerCountsADeadWaiterItDoesNotRemove(t *testing.T) {
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
