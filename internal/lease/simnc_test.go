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
