package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 6 (seed 5008403 of the fault simulation): a take raises its
// principal's count of places, which ranks that principal's callers
// waiting after another's that held as many. Here Z (p0, #1) and Q (p1,
// #2) wait for tool a's one place; p0 holds a place, p1 none, so Q comes
// first and Z is passed over, and a newcomer N of p0 may take p0's second
// and last place. A newcomer C of p1 takes a place: now p1 holds as many
// as p0, Z's lower number ranks it first, tool a's place is Z's, and with
// it p0's last. N's take, judged before C's, must fail though its own
// principal's set, seq and the places left are as it saw them.
func TestTakeThatReranksWaitersFailsATakeJudgedBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		r := func(holder, tool string, toolCap int) Request {
			return Request{Key: "srv", Cap: 4, PrincipalCap: 2, Hold: 30 * time.Second, Holder: holder,
				MaxQueued: 8, Wait: 20 * time.Second, Tool: tool, ToolCap: toolCap}
		}
		if _, err := New(db, "leases", Options{InstanceID: "h"}).Acquire(ctx, r("p0", "c", 0)); err != nil {
			t.Fatal(err)
		}
		caller := func(inst, holder, tool string, toolCap int) (*attempt, *view) {
			l := New(db, "leases", Options{InstanceID: inst})
			a := &attempt{l: l, req: r(holder, tool, toolCap), b: l.board("srv"), start: time.Now()}
			a.me = asker{id: l.newLeaseID(), label: holder, tool: tool, toolCap: toolCap}
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			return a, v
		}
		for _, w := range []struct{ inst, holder string }{{"z", "p0"}, {"q", "p1"}} {
			a, v := caller(w.inst, w.holder, "a", 1)
			if _, err := a.join(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
		n, nv := caller("n", "p0", "b", 0)
		n.req.Wait = 0
		nNow := n.now()
		served, ahead, bypass := n.decide3(nv, nNow)
		if !served || len(ahead) != 1 || ahead[0].label != "p1" {
			t.Fatalf("N's view: served %v, ahead %v; want served behind Q", served, ahead)
		}
		c, cv := caller("c", "p1", "b", 0)
		c.req.Wait = 0
		cNow := c.now()
		if ok, cAhead, cBypass := c.decide3(cv, cNow); !ok {
			t.Fatalf("C's view: not served (ahead %v)", cAhead)
		} else if ls, _, err := c.take3(ctx, cv, cAhead, cBypass, cNow); err != nil || ls == nil {
			t.Fatalf("C's take: lease %v, error %v", ls, err)
		}
		before := itemView(t, db, "srv")
		if ok, _ := before.turn3(n.now(), &n.me, n.req.rules(before), nil); ok {
			t.Fatal("with C's place taken it is still N's turn; the schedule does not test anything")
		}
		ls, _, err := n.take3(ctx, nv, ahead, bypass, nNow)
		if err != nil {
			t.Fatal(err)
		}
		if ls != nil {
			t.Errorf("N took p0's last place while Z, of p0 and ranked first for tool a once C's take ranked Q after it, waits for it")
		}
	})
}
