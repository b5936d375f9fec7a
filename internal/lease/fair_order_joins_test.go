package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Whose turn (doc.go): a take of a place ranks its principal's callers
// waiting anew, those its view shows and any that joined since. A
// waiter's take is not conditioned on seq: callers of another principal
// may have joined since its look as well, and be ranked before one of the
// take's principal's that joined since. So a waiter's take of a place
// ADDs 1 to freed whatever its view shows; were it to only while its view
// shows another principal's caller waiting, a take judged before, on an
// item showing both, would land out of turn.
//
// Cap 8, PrincipalCap 2. p0 holds a place (tool c). C (p1, #1, tool b,
// whose bucket holds 1 a minute) waits alone. The bucket's token comes
// 250 ms from now; C's clock is 500 ms ahead: C looks, and its turn has
// come (nobody else waits). Z (p0, #2, tool a: cap 1) and Q (p1, #3, tool
// a) join. A newcomer N (p0, tool d) looks, on a clock not ahead: C's
// bucket is empty, so C is passed over; p1 holds no place, so Q comes
// before Z and takes tool a, Z is passed over, and N may take p0's second
// and last place. C's take lands: p1 now holds as many places as p0, Z's
// lower number ranks it before Q, and tool a's place is Z's, with p0's
// last. N's take, judged before C's, must fail, as it does when C's view
// showed Z (TestATakeReranksAWaiterOfItsPrincipalThatJoinedAfterItsLook).
func TestATakeReranksWaitersOfTwoPrincipalsThatJoinedAfterItsLook(t *testing.T) {
	rerankJoinedAfter(t, false)
}

// Buckets (doc.go): only a call holding nothing, with no cap and no
// breaker, says so in its ticket (h: 0). A call of a tool with a breaker
// and no cap holds a lease in its principal's set, and a task always
// holds a place: whose turn counts each, handed its turn, as a place of
// its principal's, so their tickets carry no mark.
func TestOnlyACallHoldingNothingIsMarkedInItsTicket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := []Rate{{Name: "server", PerMinute: 10}}
		base := func(holder, tool string) Request {
			return Request{Key: "srv", Hold: 30 * time.Second, Holder: holder, MaxQueued: 8, Wait: 20 * time.Second, Tool: tool, Rates: rate}
		}
		nothing := base("p0", "n")
		breaker := base("p1", "b")
		breaker.Breaker = &Breaker{Name: "b", Threshold: 2, Recovery: time.Minute}
		task := base("p2", "t")
		task.Cap = 1 << 20
		held := base("p9", "x")
		held.ToolCap = 1
		acquire(t, New(db, rgTable, Options{InstanceID: "h"}), held)
		want := map[string]bool{}
		for _, c := range []struct {
			name string
			req  Request
			mark bool
		}{{"nothing", nothing, true}, {"breaker", breaker, false}} {
			l := New(db, rgTable, Options{InstanceID: c.name})
			a := l.newAttempt(c.req, l.newLeaseID(), false)
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.join(ctx, v); err != nil {
				t.Fatal(err)
			}
			want[a.me.id] = c.mark
		}
		tl := New(db, rgTable, Options{InstanceID: "task"})
		id, err := tl.Enqueue(ctx, task, tl.NewTaskID(), "t1", time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		want[id] = false
		v := itemView(t, db, "srv")
		for id, mark := range want {
			tk := v.ticketFor(id)
			if tk == nil {
				t.Fatalf("ticket %s is not in the item: %v", id, ids(v.queue))
			}
			if tk.nothing != mark {
				t.Errorf("ticket %s (of %s) marked as holding nothing: %v, want %v", id, tk.label, tk.nothing, mark)
			}
		}
	})
}
