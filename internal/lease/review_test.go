package lease

// Scenes from an adversarial reading of the protocol, each of which broke a
// promise of doc.go, kept as regression tests: built by hand against the
// in-memory store in fake time. Each comment tells how the promise was
// broken; the protocol's answer is in doc.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Invariant 6 and "Whose turn" (doc.go): places go in turn, and a waiter
// that is live is presumed gone only when it leaves its turn untaken for
// ClaimWindow — which its look schedule is meant to rule out ("so that,
// its turn come, it takes its place well within ClaimWindow", nextLook).
// A waiter far back looked only every rank/Places × MaxLook (up to 8 s):
// when the callers before it left at once (they gave up, or one tenant
// queued callers and cancelled them), its turn came just after a look and
// it did not look again for up to 8 s. A caller that
// arrived later — here of the tenant whose callers left — saw the turn
// come, presumed the live waiter gone after ClaimWindow (3 s), took the
// place and removed its ticket; the live waiter found its ticket gone and
// joined again at the back. A ticket now announces its look period, and
// is presumed gone only ClaimWindow past it.
//
// Calls on the key last 2 s (call_ms), cap 1. H holds the place; eight
// callers of A queue, then W of B (rank 8). At 8.5 s A's callers give up
// and H's call ends: W is
// first for the free place. X of A arrives at 9 s. W must get the place
// before X.
func TestFarWaiterIsNotPresumedGoneByALaterCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		r := func(who string) Request {
			return Request{Key: "srv", Cap: 1, MaxQueued: 16, Hold: 30 * time.Second, Wait: time.Minute, Holder: who}
		}
		h, err := New(db, rgTable, Options{InstanceID: "h"}).Acquire(ctx, r("H"))
		if err != nil {
			t.Fatal(err)
		}
		rgSetNumber(t, db, rgTable, "srv", CallAttr, 2000) // calls here last 2 s
		var cancels []context.CancelFunc
		var wg sync.WaitGroup
		for i := range 8 {
			actx, cancel := context.WithCancel(ctx)
			cancels = append(cancels, cancel)
			l := New(db, rgTable, Options{InstanceID: fmt.Sprintf("a%d", i)})
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ls, err := l.Acquire(actx, r("A")); err == nil {
					_, _ = ls.Finish(ctx, Success)
				}
			}()
			synctest.Wait()
		}
		type result struct {
			ls *Lease
			at time.Time
		}
		start := time.Now()
		gotW := make(chan result, 1)
		go func() {
			ls, err := New(db, rgTable, Options{InstanceID: "w"}).Acquire(ctx, r("B"))
			if err != nil {
				t.Errorf("W: %v", err)
			}
			gotW <- result{ls, time.Now()}
		}()
		synctest.Wait()
		time.Sleep(8500 * time.Millisecond)
		for _, cancel := range cancels {
			cancel()
		}
		wg.Wait()
		if _, err := h.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		freed := time.Now()
		time.Sleep(500 * time.Millisecond)
		gotX := make(chan result, 1)
		go func() {
			ls, err := New(db, rgTable, Options{InstanceID: "x"}).Acquire(ctx, r("A"))
			if err != nil {
				t.Errorf("X: %v", err)
			}
			gotX <- result{ls, time.Now()}
		}()
		var w, x result
		select {
		case w = <-gotW:
			if w.ls != nil {
				_, _ = w.ls.Finish(ctx, Success)
			}
			x = <-gotX
		case x = <-gotX:
			t.Errorf("X (of A, arrived %v after W joined) took the place that freed at %v, %v after it freed, while W (of B, live, "+
				"first in the queue) waited: W was presumed gone after ClaimWindow, its next look up to %v away at its rank",
				freed.Add(500*time.Millisecond).Sub(start), freed.Sub(start), x.at.Sub(freed), MaxLookFar)
			if x.ls != nil {
				_, _ = x.ls.Finish(ctx, Success)
			}
			w = <-gotW
			t.Logf("W got its place %v after it freed, after X's call", w.at.Sub(freed))
		}
		if w.ls != nil {
			_, _ = w.ls.Finish(ctx, Success)
		}
		if x.ls != nil {
			_, _ = x.ls.Finish(ctx, Success)
		}
	})
}

// Isolation (issue 30: "no principal's own calls change what another
// principal gets, unless two or more principals show the same signal") and
// invariant 12. A tool's latency baseline was one number for every
// principal, moved by any quiet success: one tenant's quick calls (a
// tool's error answered at once is a success) dragged it down to their
// own latency, and then every other principal's calls, as fast as they
// ever were, were "slower than Tolerance × the baseline" while the
// running mean was too: down evidence of two principals, and the limit
// halved for everyone, round after round. Baselines are now each
// principal's. Here B's calls of tool t take 500 ms and
// set its baseline; A then makes 40 calls of 5 ms, one at a time; B and C
// each make one call of 500 ms, as before. The limit must stay at 8: no
// call was slower than the calls of the tool had been.
func TestOneTenantsQuickCallsDoNotMakeOthersSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		ad := &Adaptive{Min: 1}
		const limit = 8
		rgSetNumber(t, db, rgTable, "srv", rgLimit, limit)
		l := New(db, rgTable, Options{InstanceID: "g"})
		call := func(who string, took time.Duration) {
			t.Helper()
			ls, err := l.Acquire(ctx, Request{Key: "srv", Cap: limit, Adaptive: ad, Tool: "t", Hold: 30 * time.Second, Holder: who})
			if err != nil {
				t.Fatalf("%s's call: %v", who, err)
			}
			time.Sleep(took)
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			call("B", 500*time.Millisecond)
		}
		base, _ := rgNumber(rgItem(t, db, rgTable, "srv"), BaseAttrPrefix+"B/t")
		for range 40 {
			call("A", 5*time.Millisecond)
		}
		poisoned, _ := rgNumber(rgItem(t, db, rgTable, "srv"), BaseAttrPrefix+"B/t")
		call("B", 500*time.Millisecond)
		call("C", 500*time.Millisecond)
		if got, _ := rgNumber(rgItem(t, db, rgTable, "srv"), rgLimit); got != limit {
			t.Errorf("B's and C's calls of 500 ms, as the tool's calls always took (B's baseline %d ms), after A's 40 quick calls (B's baseline then %d ms): limit %d → %d; want it left at %d",
				base, poisoned, limit, got, limit)
		}
	})
}

// Invariant 14 (doc.go): the item's size grows with the callers holding
// and waiting only; a gate entry that is open again and saw no failure
// for IdleGate is stale. A principal's breaker entry that closed
// (Threshold failures) and was never probed again — its principal simply
// stopped calling — stayed half-open (u in the past, no probe) forever,
// and purges skipped the entries of a gate the write itself touched. Every
// principal that ever tripped its own breaker on a key left an entry
// behind, and the item of a key with many principals over its lifetime
// grew towards DynamoDB's 400 KB, where every write of the key fails. Here 40 principals each
// fail one call (threshold 1; one at a time, a recovery apart, so the
// breaker never closes for everyone) and go away; another principal calls
// on for twice IdleGate. The item must shrink back to about the size it
// had after one principal's failure.
func TestBreakerEntriesOfPrincipalsGoneDoNotPileUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		br := &Breaker{Name: "t", Threshold: 1, Recovery: time.Second}
		l := New(db, rgTable, Options{InstanceID: "g"})
		call := func(who string, o Outcome) {
			t.Helper()
			ls, err := l.Acquire(ctx, rgBreakerCall(br, who))
			if err != nil {
				t.Fatalf("%s's call: %v", who, err)
			}
			if _, err := ls.Finish(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		const gone = 40
		size := 0
		for i := range gone {
			call(fmt.Sprintf("P%02d", i), Failure)
			time.Sleep(br.Recovery + 100*time.Millisecond)
			if i == 0 {
				size = rgItemSize(rgItem(t, db, rgTable, "srv"))
			}
		}
		for range 2 * int(IdleGate/time.Second) {
			call("Z", Success)
			time.Sleep(time.Second)
		}
		item := rgItem(t, db, rgTable, "srv")
		g := parseItem(item).gates[BreakerAttr("t")]
		n := 0
		if g != nil {
			n = len(g.entries)
		}
		if after := rgItemSize(item); after > size+64 {
			t.Errorf("after %d principals each tripped the breaker once and went away, %v of another's calls later the item is %d bytes (%d entries in breaker:t); "+
				"after the first it was %d: it grows with every principal that ever failed", gone, 2*IdleGate, after, n, size)
		}
	})
}

// "Whose turn" and "Buckets" (doc.go): a ticket carries its tool's rate so
// that any caller can tell which buckets a waiter needs a token from, and
// a newcomer counts as the newest ticket: a waiter held back only by an
// empty bucket gets the bucket's next token before callers that came
// after it. A call that takes no place (a bucket is all it asks for: an
// uncapped tool, or a request relayed to the server, on a server whose
// caps are a tool's) only charged, in a write conditioned on the bucket
// alone: it took the token a waiter needed, whoever waited. Here tool heavy
// has a cap of 1 and the server a bucket of 2 a minute. W (of A) waits for
// heavy, then B takes the bucket's last token; when heavy's place frees the bucket is empty. B calls tool light
// (no cap: charge only) whenever its refusal's Retry-After says a token
// has come. W, which was waiting before each of B's calls, must get a
// token before B does; B took every one, and W timed out.
func TestChargeOnlyCallsDoNotStarveAWaiterOfTheirBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 2}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 2 * time.Minute, Hold: 30 * time.Second, Holder: who, Rates: rate}
		}
		light := Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "B", Rates: rate}
		h, err := New(db, rgTable, Options{InstanceID: "h"}).Acquire(ctx, heavy("A"))
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			ls  *Lease
			err error
			at  time.Time
		}
		gotW := make(chan result, 1)
		go func() {
			ls, err := New(db, rgTable, Options{InstanceID: "w"}).Acquire(ctx, heavy("A"))
			gotW <- result{ls, err, time.Now()}
		}()
		synctest.Wait()
		lb := New(db, rgTable, Options{InstanceID: "b"})
		if _, err := lb.Acquire(ctx, light); err != nil { // the bucket's last token
			t.Fatal(err)
		}
		start := time.Now()
		time.Sleep(time.Second)
		if _, err := h.Finish(ctx, Success); err != nil { // heavy's place frees; the bucket is empty
			t.Fatal(err)
		}
		var bAdmitted []time.Duration
		for {
			select {
			case w := <-gotW:
				if w.err != nil {
					t.Errorf("W, waiting for heavy since before B's calls, got no place: %v; meanwhile B's calls of light took every token, at %v",
						w.err, bAdmitted)
				} else {
					if len(bAdmitted) > 0 {
						t.Errorf("W, waiting since before, got its token at %v; B's later calls took the tokens at %v first", w.at.Sub(start), bAdmitted)
					}
					_, _ = w.ls.Finish(ctx, Success)
				}
				return
			default:
			}
			_, err := lb.Acquire(ctx, light)
			var rl *RateLimitedError
			switch {
			case err == nil:
				bAdmitted = append(bAdmitted, time.Since(start))
			case errors.As(err, &rl):
				time.Sleep(rl.RetryAfter)
				continue
			default:
				t.Fatalf("B's call: %v", err)
			}
			synctest.Wait()
		}
	})
}

// Isolation (issue 30: no principal's probes change what another gets)
// and invariant 10 ("one probe at a time per entry; an abandoned call
// leaves a gate as it was"). An abandoned probe only gave up being the
// probe, at no cost to its principal: the breaker, open for everyone
// after A's and B's failures, is half-open after Recovery, and A takes
// its probe, has the call end without a verdict (the upstream refused its
// arguments, or its caller went away: Abandoned), and takes the probe
// again at once — while everyone else's calls were refused outright, told
// to come back when A's probe lease would end. Its principal now may not
// probe the entry again for Recovery. The upstream is well
// again: C's call would succeed and close the breaker. C, trying whenever
// its refusal says, must get through within one probe lease and a
// Recovery; A's abandoned probes must not keep it out for as long as A
// goes on.
func TestAbandonedProbesDoNotHoldTheBreakerForOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		br := &Breaker{Name: "t", Threshold: 1, Recovery: 10 * time.Second}
		la := New(db, rgTable, Options{InstanceID: "a"})
		lb := New(db, rgTable, Options{InstanceID: "b"})
		lc := New(db, rgTable, Options{InstanceID: "c"})
		for _, p := range []struct {
			l   *Limiter
			who string
		}{{la, "A"}, {lb, "B"}} {
			ls, err := p.l.Acquire(ctx, rgBreakerCall(br, p.who))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ls.Finish(ctx, Failure); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(br.Recovery + 10*time.Millisecond) // half-open for everyone
		// A: a call every 100 ms, each abandoned; its next call as soon as
		// the last ended.
		var wg sync.WaitGroup
		probes := 0
		wg.Go(func() {
			for ctx.Err() == nil {
				ls, err := la.Acquire(ctx, rgBreakerCall(br, "A"))
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if ls.Probe() {
					probes++
				}
				time.Sleep(100 * time.Millisecond)
				_, _ = ls.Finish(context.Background(), Abandoned)
			}
		})
		synctest.Wait() // A holds the probe
		start := time.Now()
		// C is told to come back when A's probe lease would end; by then A
		// may not be the probe again for a Recovery.
		within := rgBreakerCall(br, "C").Hold + DefaultMargin + br.Recovery
		for time.Since(start) < 5*time.Minute {
			ls, err := lc.Acquire(ctx, rgBreakerCall(br, "C"))
			var open *CircuitOpenError
			if errors.As(err, &open) {
				time.Sleep(max(open.RetryAfter, 10*time.Millisecond))
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
			if waited := time.Since(start); waited > within {
				t.Errorf("C got through %v after the breaker went half-open; want within %v", waited, within)
			}
			cancel()
			wg.Wait()
			return
		}
		cancel()
		wg.Wait()
		t.Errorf("C refused for %v after the breaker went half-open, the upstream well: A took the probe %d times, abandoning each, and held it for everyone",
			5*time.Minute, probes)
	})
}
