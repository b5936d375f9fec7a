package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Tasks (doc.go): a claim makes its take again only while the ticket
// carries its start's mark, so that no two workers of live starts claim
// at once. The mark is the starter's clock; the claim judges its age on
// its own. A worker whose clock is behind by less than the margin (the
// skew every guarantee allows) would go on claiming after the sweep, on a
// clock on time, made the next start from the mark, for as long as the
// skew; the ticket shows the next start's mark in the claim's next read,
// and the claim stops there.
func TestAClaimStopsOnceItsStartIsNoLongerTheTicketsMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, l, st, id, start := churnedTask(t, -1, time.Now().Add(time.Hour))
		const behind = time.Second // less than DefaultMargin
		w := New(db, "leases", Options{InstanceID: "w", Clock: func() time.Time { return time.Now().Add(-behind) }})
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		var cerr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, cerr = w.Claim(ctx, taskReq("q"), id, start.Mark)
		}()
		// The sweep on a clock on time, from the moment the mark is
		// StartTimeout old.
		time.Sleep(time.Until(time.UnixMilli(start.Mark).Add(StartTimeout)))
		// Its start unclaimed since StartTimeout for all the sweep can
		// tell, the task is passed: the task behind it is started too.
		for i := 0; len(st.marksOf(id)) < 2 && i < 30; i++ {
			if err := l.StartDue(context.Background(), taskReq("q")); err != nil {
				t.Fatal(err)
			}
			if len(st.marksOf(id)) < 2 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		got := st.marksOf(id)
		if len(got) != 2 {
			t.Fatalf("starts %+v; want a second of %s once its first is StartTimeout old", st.list(), id)
		}
		at, before := time.Now(), db.takes.Load()
		<-done
		after := db.takes.Load() - before
		t.Logf("second start %d ms after the first; the first worker's claim: %v %v after it, %d takes after it", got[1]-start.Mark, cerr, time.Since(at), after)
		if after > 1 { // one judged before it may land after
			t.Errorf("the first start's worker made %d takes (for %v) after the second start was made: two workers of live starts claimed at once", after, time.Since(at))
		}
	})
}

// handHold writes the operator's hold until, by hand.
func handHold(t *testing.T, db API, until int64) {
	t.Helper()
	handSet(t, db, HoldAttr, number(until))
}

// Tasks (doc.go): two workers of one start (an invocation delivered twice)
// share its mark. One of them, looking while the turn is not its task's
// (an operator's hold, lifted at once), gives the mark back, so that the
// next to see the turn starts a worker at once. The other, still making
// its takes again from its own reads, sees its start's mark gone and
// leaves the turn too, rather than go on claiming beside the new start's
// worker until StartTimeout after a mark no longer there.
func TestAClaimWhoseMarkWasGivenBackStopsBesideTheNextStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db, l, st, id, start := churnedTask(t, -1, time.Now().Add(time.Hour))
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		w1 := New(db, "leases", Options{InstanceID: "w1"})
		var cerr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, cerr = w1.Claim(ctx, taskReq("q"), id, start.Mark)
		}()
		time.Sleep(2*time.Second + 3*time.Millisecond)
		// The duplicate worker looks while a hold stands: not the task's
		// turn, its start given back. The hold is lifted in the same instant.
		handHold(t, db, time.Now().Add(time.Hour).UnixMilli())
		w2 := New(db, "leases", Options{InstanceID: "w2"})
		if _, err := w2.Claim(ctx, taskReq("q"), id, start.Mark); !errors.Is(err, ErrNotYourTurn) {
			t.Fatalf("the duplicate's claim under the hold: %v; want ErrNotYourTurn", err)
		}
		handHold(t, db, 0)
		if tk := mRead(rawItem(t, db, "srv")).tickets[id]; tk == nil || tk.s != 0 {
			t.Fatalf("ticket after the duplicate gave its start back: %+v; want no mark", tk)
		}
		if err := l.StartDue(context.Background(), taskReq("q")); err != nil {
			t.Fatal(err)
		}
		got := st.list()
		if len(got) != 2 {
			t.Fatalf("starts %+v; want the next made at once", got)
		}
		at, before := time.Now(), db.takes.Load()
		select {
		case <-done:
			t.Fatalf("the first worker stopped before the next start: %v", cerr)
		default:
		}
		<-done
		after := db.takes.Load() - before
		t.Logf("first worker's claim: %v, %v after the next start, %d takes after it", cerr, time.Since(at), after)
		if after > 1 { // one judged before it may land after
			t.Errorf("the first worker made %d takes for %v beside the next start's worker, its mark gone", after, time.Since(at))
		}
	})
}

// Gates (doc.go): a take judged from a view showing a breaker entry that
// passes (none, or a time of 0 or less written by hand) is refused when
// the entry, before the take lands, is closed (u ahead), half-open with a
// live probe (u passed, p and e), or half-open with the caller's
// principal barred from probing it (a, w): for everyone's entry and the
// principal's. Every form the protocol writes has u > 0.
func TestATakeJudgedBeforeABreakerClosedIsRefused(t *testing.T) {
	req := Request{Key: "srv", Cap: 2, Hold: 10 * time.Second, Holder: "q", Tool: "t",
		Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second}}
	for _, seen := range []string{"no entry", "u 0 by hand"} {
		for _, key := range []string{gateAll, "q"} {
			for _, form := range []string{"closed", "probing", "barred"} {
				t.Run(seen+"/"+key+"/"+form, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						db := newMemStore()
						l := New(db, "leases", Options{InstanceID: "a"})
						release(t, acquire(t, New(db, "leases", Options{InstanceID: "b"}), Request{Key: "srv", Cap: 2, Hold: time.Second, Holder: "o"}))
						if seen != "no entry" {
							handSet(t, db, BreakerAttr("t"), mv(map[string]types.AttributeValue{key: mv(map[string]types.AttributeValue{gateUntil: number(0)})}))
						}
						ctx := context.Background()
						v, err := l.read(ctx, "srv")
						if err != nil {
							t.Fatal(err)
						}
						a := l.newAttempt(req, l.newLeaseID(), false)
						now := a.now()
						served, h, bypass := a.decide(v, now)
						if !served {
							t.Fatalf("not served from the view (%s)", seen)
						}
						e := map[string]types.AttributeValue{}
						switch form {
						case "closed":
							e[gateUntil] = number(now + time.Minute.Milliseconds())
						case "probing":
							e[gateUntil], e[gateProbe], e[gateProbeExp] = number(now-1000), sv("x.1"), number(now+time.Minute.Milliseconds())
						case "barred":
							e[gateUntil], e[gateBarred], e[gateBarUntil] = number(now-1000), sv("q"), number(now+time.Minute.Milliseconds())
						}
						handSet(t, db, BreakerAttr("t"), mv(map[string]types.AttributeValue{key: mv(e)}))
						if _, err := New(db, "leases", Options{InstanceID: "c"}).read(ctx, "srv"); err != nil {
							t.Fatal(err)
						}
						ls, _, err := a.take(ctx, v, h, bypass, now)
						if ls != nil || err != nil {
							t.Errorf("a take judged before %s's entry was %s: %v, %v; want refused", key, form, ls, err)
						}
					})
				})
			}
		}
	}
}
