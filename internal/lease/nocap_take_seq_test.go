package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Buckets (doc.go): a charge is "conditioned on seq as seen, so nobody
// joined since"; Whose turn: "A newcomer, having no ticket, is the newest
// caller: its take is also conditioned on seq as seen"; invariant 11: a
// call with no cap "is charged only while no ticket waiting needs a token
// of its buckets". The model's judgeCharge (which judges both a charge
// and a newcomer's take holding nothing) counts the tickets numbered past
// the seq the write was judged from: such a write that took the token of
// a caller that joined after its view and ranks first is a violation,
// which the code's seq condition never lands.
//
// Server bucket 2 a minute, one token left. J (pb), a caller of light (no
// cap), joined (number 2) after the view the charge of N (pa) was judged
// from (seq 1). J and N hold no places: J, of the lower number, is first,
// and needs the token. N's charge takes it.
func TestTheModelRefusesAChargeTakingTheTokenOfACallerThatJoinedAfterItsView(t *testing.T) {
	far := mNow + 60000
	k := mKey{MaxQueued: 8, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second, MaxPause: 5 * time.Second}
	withJ := func(f *mFix) *mFix {
		return f.ticket("j", 2, "pb", "light", far, 0, 0).num("seq", 2)
	}
	for _, tc := range []judgeCase{
		{name: "J seen by the charge's view", k: k, me: mCaller{p: "pa"}, holdsNothing: true, outcome: mNoOutcome, judged: 2,
			before: withJ(mItemOf().num("rate:server", mNow+30000)), after: withJ(mItemOf().num("rate:server", mNow+60000)),
			want: []string{"rate"}},
		{name: "J joined after the charge's view", k: k, me: mCaller{p: "pa"}, holdsNothing: true, outcome: mNoOutcome, judged: 1,
			before: withJ(mItemOf().num("rate:server", mNow+30000)), after: withJ(mItemOf().num("rate:server", mNow+60000)),
			want: []string{"rate"}},
	} {
		tc.run(t)
	}
}

// Whose turn (doc.go): "A newcomer, having no ticket, is the newest
// caller: its take is also conditioned on seq as seen (nobody joined
// since it looked)"; Buckets: a call with no cap beside a ticket that
// needs its token "waits its turn as any caller does", its take holding
// nothing. Nothing else pins that condition on such a take: with it
// dropped, every other test of the package and 2000 seeds of the fault
// simulation (12,800,000–12,801,999) pass.
//
// Server bucket 2 a minute. H (A) holds heavy (cap 1), its token taken:
// one left. X (B) waits for heavy (tool full): its ticket shares the
// server bucket, so N (C), a call of light (no cap), is no charge; X
// cannot use a place, so N's turn comes in its view, and N takes. Just
// before N's take is sent, task T (D) joins: it ranks before N, the
// newest, and needs the last token. N's take must not land past it.
func TestANewcomersTakeHoldingNothingDoesNotPassATicketThatJoinedAfterItsLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := []Rate{{Name: "server", PerMinute: 2}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("A"))
		xDone := make(chan struct{})
		go func() {
			defer close(xDone)
			if ls, err := New(db, rgTable, Options{InstanceID: "x"}).Acquire(ctx, heavy("B")); err == nil {
				_, _ = ls.Finish(ctx, Success)
			}
		}()
		synctest.Wait()
		if q := itemView(t, db, "srv").queue; len(q) != 1 {
			t.Fatalf("X is not waiting: %v", ids(q))
		}
		var st starts
		tl := New(db, rgTable, Options{InstanceID: "t", OnTaskStart: st.hook})
		taskR := Request{Key: "srv", Cap: 1 << 20, Tool: "slow", Hold: time.Minute, Holder: "D", MaxQueued: 8, Rates: rate}
		var armed atomic.Bool
		var nWrites atomic.Int64
		var charges atomic.Int64
		// N's first write is its charge (no view: an empty queue), refused
		// on X; its second, its take from that answer.
		hook := hookedAPI{API: db, armed: &armed, before: func() {
			if nWrites.Add(1) == 2 {
				enqueue(t, tl, taskR, "task-1")
			}
		}}
		armed.Store(true)
		n := New(chargeCountAPI{hook, "server", &charges}, rgTable, Options{InstanceID: "n"})
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ls, err := n.Acquire(nctx, Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "C", MaxQueued: 8, Wait: 5 * time.Second, Rates: rate})
		cancel()
		t.Logf("N: err %v; N's writes that charged the server bucket: %d", err, charges.Load())
		if err == nil {
			_, _ = ls.Finish(ctx, Success)
		}
		if c := charges.Load(); c > 0 {
			t.Errorf("N's take landed past task T, which joined after N's look and ranks before N (a newcomer, the newest), taking the last token T needed (%d charges of N's)", c)
		}
		release(t, h)
		<-xDone
	})
}
