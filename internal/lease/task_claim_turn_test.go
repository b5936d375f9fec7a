package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Tasks (doc.go): a claim that leaves the turn (ErrStartLapsed) makes the
// next start when nobody has. Refused by a burst of others' releases that
// ends just as its start's StartTimeout passes, it sees from its next read
// the turn its task's and nothing in the way; or its mark was given back
// by a duplicate worker that looked while a hold stood (ErrNotYourTurn),
// and once the hold is lifted and the burst ends it sees a ticket with no
// start, its turn come. Either way nobody else writes: left so, the task
// would wait until some other request or the sweep (a minute, in the
// gateway) happened to look.
func TestAClaimThatLeavesItsTurnStartsTheNextWorker(t *testing.T) {
	for _, c := range []string{"timeout", "mark given back"} {
		t.Run(c, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newTakeStore(newMemStore(), 0)
				var st starts
				l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
				held := acquire(t, l, taskReq("h"))
				id := enqueue(t, l, taskReq("q"), "task-1")
				enqueue(t, l, taskReq("r"), "task-2")
				db.id.Store(id)
				db.refuse.Store(-1)
				release(t, held)
				got := st.list()
				if len(got) != 1 || got[0].Ticket != id {
					t.Fatalf("starts: %+v; want one of %s", got, id)
				}
				mark := got[0].Mark
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
				defer cancel()
				w1 := New(db, "leases", Options{InstanceID: "w1", OnTaskStart: st.hook}) // as the gateway's limiter, which starts workers
				var cerr error
				var cls *Lease
				done := make(chan struct{})
				go func() {
					defer close(done)
					cls, cerr = w1.Claim(ctx, taskReq("q"), id, mark)
				}()
				switch c {
				case "timeout":
					// The burst lasts until the start's StartTimeout.
					time.Sleep(time.Until(time.UnixMilli(mark + StartTimeout.Milliseconds())))
					db.refuse.Store(0)
				case "mark given back":
					time.Sleep(2*time.Second + 3*time.Millisecond)
					handHold(t, db, time.Now().Add(time.Hour).UnixMilli())
					w2 := New(db, "leases", Options{InstanceID: "w2"})
					if _, err := w2.Claim(ctx, taskReq("q"), id, mark); !errors.Is(err, ErrNotYourTurn) {
						t.Fatalf("the duplicate's claim under the hold: %v; want ErrNotYourTurn", err)
					}
					handHold(t, db, 0)
					db.refuse.Store(0) // the burst ends with the hold
				}
				<-done
				took := time.Now().UnixMilli() - mark
				if cls != nil {
					t.Logf("claim landed after %d ms (held)", took)
					release(t, cls)
					return
				}
				// Nobody else writes for a minute (StartDue's sweep's period).
				time.Sleep(time.Minute)
				tk := mRead(rawItem(t, db, "srv")).tickets[id]
				t.Logf("claim: %v after %d ms, %d takes; a minute later: starts %d, ticket %+v", cerr, took, db.takes.Load(), len(st.list()), tk)
				if n := len(st.list()); n < 2 {
					t.Errorf("the claim stopped (%v) seeing its task's turn come with no worker claiming, made no take and no start; a minute later still no start (%d)", cerr, n)
				}
				// What it left: a take from the same view lands at once.
				if ls, err := New(db, "leases", Options{InstanceID: "w3"}).Claim(ctx, taskReq("q"), id, tk.s); err == nil {
					t.Logf("a claim made then lands at once")
					release(t, ls)
				}
			})
		})
	}
}

// Tasks (doc.go): no two workers of live starts claim at once but within
// one back-off. The claim judges StartTimeout on its own clock against a
// mark written on the starter's: with clocks apart by less than the
// Margin (here the starter's 1 s ahead, the worker's 1 s behind), the next
// start is made before the first worker's clock says StartTimeout; the
// ticket's mark, no longer its own, stops it.
func TestAClaimOnASlowClockStopsAtTheNextStartsMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const skew = time.Second // < DefaultMargin (2 s)
		db := newTakeStore(newMemStore(), 0)
		var st starts
		ahead := func() time.Time { return time.Now().Add(skew) }
		behind := func() time.Time { return time.Now().Add(-skew) }
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook, Clock: ahead})
		held := acquire(t, l, taskReq("h"))
		id := enqueue(t, l, taskReq("q"), "task-1")
		enqueue(t, l, taskReq("r"), "task-2")
		db.id.Store(id)
		db.refuse.Store(-1) // others' releases refuse every take
		release(t, held)
		got := st.list()
		if len(got) != 1 || got[0].Ticket != id {
			t.Fatalf("starts: %+v; want one of %s", got, id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		w1 := New(db, "leases", Options{InstanceID: "w1", Clock: behind})
		var cerr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, cerr = w1.Claim(ctx, taskReq("q"), id, got[0].Mark)
		}()
		// StartTimeout after the mark on the starter's clock, the next
		// start is made (here by StartDue; a release seeing the turn alike).
		time.Sleep(ahead().Sub(time.UnixMilli(got[0].Mark+StartTimeout.Milliseconds())) * -1)
		if err := l.StartDue(context.Background(), taskReq("q")); err != nil {
			t.Fatal(err)
		}
		if n := len(st.marksOf(id)); n != 2 {
			t.Fatalf("starts of %s %d; want the next made StartTimeout after the first on its starter's clock", id, n)
		}
		at, before := time.Now(), db.takes.Load()
		<-done
		beside, after := time.Since(at), db.takes.Load()-before
		t.Logf("first worker: %v, %v after the next start, %d takes beside it", cerr, beside, after)
		if beside > writeMaxBackoff {
			t.Errorf("the first worker kept claiming %v (%d takes) after the next start was made; want within one back-off (%v)", beside, after, writeMaxBackoff)
		}
	})
}
