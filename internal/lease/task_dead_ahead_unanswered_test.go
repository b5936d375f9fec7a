package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// faultyReads is a caller's store whose reads sent in [from, to) fail
// (fail) or are answered only at to (late): a partition of its process,
// throttled reads the SDK retries.
type faultyReads struct {
	API
	mu       sync.Mutex
	from, to time.Time
	fail     bool
}

func (s *faultyReads) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	s.mu.Lock()
	from, to, fail := s.from, s.to, s.fail
	s.mu.Unlock()
	if now := time.Now(); !now.Before(from) && now.Before(to) {
		if fail {
			return nil, errors.New("RequestTimeout: partitioned")
		}
		time.Sleep(time.Until(to))
	}
	return s.API.GetItem(ctx, in, opts...)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// turnWentAndCameBack is the scenario of
// TestACallerActingForATaskPassesNoLiveWaiterWhoseTurnWentBetweenItsLooks
// (cap 4; X, live, look period 1 s, claim window 4 s; task T behind X;
// F1..F16 and C behind T; without the task, C alone, right behind X),
// with C's reads sent through s and its looks
// made as its run loop makes them: gap(c, v) is C's next view after the
// one at 0.05 s, which it must return at 4.1 s (Z takes X's place at
// 0.1 s and leaves it at 3.9 s; X looks every second). It reports
// whether X, live, found its ticket gone at 4.5 s.
func turnWentAndCameBack(t *testing.T, withTask bool, s *faultyReads, gap func(start time.Time, c *attempt, v *view) *view) (xGone bool) {
	t.Helper()
	db := newMemStore()
	ctx := context.Background()
	const places = 4
	req := func(who string) Request {
		return Request{Key: "srv", Cap: places, MaxQueued: 1000, Wait: time.Hour, Hold: time.Minute, Holder: who}
	}
	for _, p := range []string{"x", "q", "c"} {
		acquire(t, New(db, rgTable, Options{InstanceID: "h" + p}), req(p))
	}
	h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), req("h"))
	join := func(l *Limiter, r Request) *attempt {
		t.Helper()
		a := l.newAttempt(r, l.newLeaseID(), false)
		v, err := l.read(ctx, "srv")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.join(ctx, v); err != nil || !a.joined {
			t.Fatalf("join: %v", err)
		}
		return a
	}
	x := join(New(db, rgTable, Options{InstanceID: "x"}), req("x"))
	task := "none"
	if withTask {
		task = enqueue(t, New(db, rgTable, Options{InstanceID: "q"}), req("q"), "task-1")
	}
	for i := range 16 * btoi(withTask) {
		join(New(db, rgTable, Options{InstanceID: fmt.Sprintf("f%d", i)}), req("c"))
	}
	s.API = db
	c := join(New(s, rgTable, Options{InstanceID: "c"}), req("c"))
	ahead := func(h handout, id string) bool {
		for _, t := range h.ahead {
			if t.id == id {
				return true
			}
		}
		return false
	}
	start := time.Now()
	release(t, h)
	time.Sleep(50 * time.Millisecond)
	// C's look at 0.05 s, through wait as its run loop looks.
	v0, err := c.wait(ctx, nil, time.Millisecond, start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if served, h, _ := c.decide(v0, c.now()); served || !ahead(h, x.me.id) || ahead(h, task) {
		t.Fatalf("C's look at 0.05 s: served %v, X ahead %v, task ahead %v; want X's turn only", served, ahead(h, x.me.id), ahead(h, task))
	}
	passed := make(chan []string, 1)
	go func() {
		v := gap(start, c, v0)
		if t := v.ticketFor(c.me.id); t != nil {
			c.n = t.n // as its run loop reads it
		}
		served, h, bypass := c.decide(v, c.now())
		var ids []string
		for _, b := range bypass {
			ids = append(ids, b.id)
		}
		t.Logf("C's judgement at %v: served %v, X ahead %v, steady for %v, passing %v", time.Since(start), served, ahead(h, x.me.id), time.Since(c.steadyFrom), ids)
		switch {
		case served:
			// Its run loop's take, passing over bypass.
			if ls, _, err := c.take(ctx, v, h, bypass, c.now()); err != nil || ls == nil {
				t.Errorf("C's take: %v", err)
			}
		case len(bypass) > 0:
			// Its run loop's pass (case len(bypass) > 0).
			if _, err := c.pass(ctx, v, bypass); err != nil {
				t.Error(err)
			}
		}
		passed <- ids
	}()
	time.Sleep(50 * time.Millisecond)
	z, err := New(db, rgTable, Options{InstanceID: "z"}).Acquire(ctx, req("z"))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{500, 1500, 2500, 3500} {
		time.Sleep(time.Until(start.Add(at * time.Millisecond)))
		v, err := x.l.read(ctx, "srv")
		if err != nil {
			t.Fatal(err)
		}
		if served, _, _ := x.decide(v, x.now()); served {
			t.Fatalf("X's look at %v: its turn; want Z's place to hold it back", time.Since(start))
		}
	}
	time.Sleep(time.Until(start.Add(3900 * time.Millisecond)))
	release(t, z)
	<-passed
	time.Sleep(time.Until(start.Add(4500 * time.Millisecond)))
	v, err := x.l.read(ctx, "srv")
	if err != nil {
		t.Fatal(err)
	}
	served, _, _ := x.decide(v, x.now())
	if v.ticketFor(x.me.id) != nil && !served {
		t.Errorf("X's look at %v: not served; want its turn", time.Since(start))
	}
	return v.ticketFor(x.me.id) == nil
}

// Invariant 8 (doc.go): "a live waiter is never presumed gone, however
// far back it joined"; Tasks: a caller behind a task passes callers
// presumed gone for it "only after a claim window more of steady looks,
// each judged within steadyGap (3 × MaxLook) of the one before ... a turn
// that went and came back between its looks then reads as one that went".
//
// A slow answer is a view of the item as it stands when answered, not
// when sent: C (far back behind task T) judges X's turn at 0.05 s, and
// sends its next look at 1.05 s, but the read is answered at 4.1 s
// (throttled, retried by the SDK). Meanwhile Z took X's place at 0.1 s
// and left it at 3.9 s; X looked every second. C sees X's turn, first
// seen 4 s ago (its claim window), but its judgements were 4 s apart: it
// passes nobody, and X takes its place at 4.5 s. (Counted by when its
// looks were sent, they read as steady, and C passed X.)
func TestACallerActingForATaskPassesNoLiveWaiterWhoseTurnWentDuringASlowAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &faultyReads{}
		gone := turnWentAndCameBack(t, true, s, func(start time.Time, c *attempt, v *view) *view {
			s.mu.Lock()
			s.from, s.to = start.Add(time.Second), start.Add(4100*time.Millisecond)
			s.mu.Unlock()
			time.Sleep(time.Until(start.Add(1050 * time.Millisecond)))
			nv, err := c.wait(context.Background(), v, time.Millisecond, start.Add(time.Hour))
			if err != nil {
				t.Error(err)
			}
			return nv
		})
		if gone {
			t.Errorf("X, live (it looked every second, its turn back at 3.9 s), found its ticket gone at 4.5 s: passed by C, acting for task-1, whose look sent at 1.05 s was answered at 4.1 s and counted as steady")
		}
	})
}

// As above (invariant 8; Tasks: "each judged within steadyGap ... of the
// one before"), with reads that fail rather than answer late.
//
// C judges X's turn at 0.05 s; its look sent at 1.05 s fails (its
// process partitioned from the store until 4 s), and it reads again as
// its run loop's store-error loop does (a pause of up to MaxLook, then
// l.read, not wait; here at 2.05, 3.05 and 4.1 s) until a read
// succeeds at 4.1 s, 4 s after its last judgement: its looks are not
// steady, and it passes nobody, while X's turn went (0.1 s) and came back
// (3.9 s); X takes its place at 4.5 s. (Counted by the send of the look
// that failed, its looks read as steady across 3 s in which it saw
// nothing, and C passed X.)
func TestACallerActingForATaskPassesNoLiveWaiterWhoseTurnWentWhileItsReadsFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &faultyReads{fail: true}
		gone := turnWentAndCameBack(t, true, s, func(start time.Time, c *attempt, v *view) *view {
			s.mu.Lock()
			s.from, s.to = start.Add(time.Second), start.Add(4*time.Second)
			s.mu.Unlock()
			time.Sleep(time.Until(start.Add(1050 * time.Millisecond)))
			_, err := c.wait(context.Background(), v, time.Millisecond, start.Add(time.Hour))
			if err == nil || !storeError(err) {
				t.Fatalf("C's look at 1.05 s: %v; want a store error", err)
			}
			// The run loop: pause, read again, until a read succeeds.
			for _, at := range []time.Duration{2050, 3050, 4100} {
				time.Sleep(time.Until(start.Add(at * time.Millisecond)))
				if nv, err := c.l.read(context.Background(), "srv"); err == nil {
					c.own = nv
					return nv
				}
			}
			t.Fatal("C's reads still failing at 4.1 s")
			return nil
		})
		if gone {
			t.Errorf("X, live (it looked every second, its turn back at 3.9 s), found its ticket gone at 4.5 s: passed by C, acting for task-1, whose reads failed from 1.05 s to 4 s yet whose looks counted as steady (readSent 1.05 s)")
		}
	})
}

// Not of this change (invariant 8 for any caller, as it stood before):
// "a live waiter is never presumed gone". Without the task, C right
// behind X, served once X is passed over, its look sent at 1.05 s
// answered at 4.1 s (as in
// TestACallerActingForATaskPassesNoLiveWaiterWhoseTurnWentDuringASlowAnswer):
// C presumes X gone and takes the place passing X over; X, live, finds
// its ticket gone at 4.5 s. The served caller's rule has no steadiness
// at all, so the hole above is as old as presumption itself. Open,
// skipped unless LEASE_OPEN_DEFECTS is set (docs/admission.md, known
// limits: a turn that goes and comes back between two looks of a
// waiter's reads as one that stood).
func TestACallerServedPastALiveWaiterWhoseTurnWentDuringASlowAnswer(t *testing.T) {
	openDefect(t)
	synctest.Test(t, func(t *testing.T) {
		s := &faultyReads{}
		gone := turnWentAndCameBack(t, false, s, func(start time.Time, c *attempt, v *view) *view {
			s.mu.Lock()
			s.from, s.to = start.Add(time.Second), start.Add(4100*time.Millisecond)
			s.mu.Unlock()
			time.Sleep(time.Until(start.Add(1050 * time.Millisecond)))
			nv, err := c.wait(context.Background(), v, time.Millisecond, start.Add(time.Hour))
			if err != nil {
				t.Error(err)
			}
			return nv
		})
		if gone {
			t.Errorf("X, live (it looked every second, its turn back at 3.9 s), found its ticket gone at 4.5 s: passed over by C's take, whose look sent at 1.05 s was answered at 4.1 s")
		}
	})
}
