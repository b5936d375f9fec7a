package lease

// Calls that hold nothing (Limiter.charge, Lease.finishTokens): a charge
// only while no live ticket needs a token of its buckets, judged on the
// item, not merely on its process's view; beside such a ticket the call
// waits its turn and passes a dead waiter as any caller does; a refund
// gives back only what of its token is still to come.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// slowProcessAPI stands for a process that is slow to be heard from (a long
// pause of its runtime, a slow network): while stopped, its requests wait
// until it is let go.
type slowProcessAPI struct {
	API
	mu      sync.Mutex
	stopped chan struct{} // nil: running
}

func (s *slowProcessAPI) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		s.stopped = make(chan struct{})
	}
}

func (s *slowProcessAPI) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped != nil {
		close(s.stopped)
		s.stopped = nil
	}
}

func (s *slowProcessAPI) wait(ctx context.Context) error {
	s.mu.Lock()
	ch := s.stopped
	s.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slowProcessAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.API.GetItem(ctx, in, opts...)
}

func (s *slowProcessAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.API.UpdateItem(ctx, in, opts...)
}

// Invariant 11 ("a call that only charges leaves a waiter's token to it")
// and Buckets (doc.go): a charge leaves the tokens of the callers whose
// turn comes before a newcomer's. The server's bucket holds 1 token a
// minute. H holds tool heavy (cap 1); W joins for heavy while the bucket
// holds its token, and B's call of tool light (no cap: it only charges)
// then takes that token, rightly (W could not use a place), its answer
// showing W waiting. H finishes: only the empty bucket holds W back, and
// the bucket's next token, at 122 s, is W's. W's process is slow to look
// then (a live waiter is never passed for being slow; any charge in the
// moment between the token's coming and W's take does as well). B's next
// charge, judged from the view its last answer left, counts W before it
// (keep 1; B's refusal a second after H finished left it that view): the
// bucket, full as seen, holds no token beyond W's. Were the charge sent
// in its "full" form, conditioned on the time alone, or sent without
// being judged because its view is not an answer to it, B would take W's
// token and W wait a minute more.
func TestAChargeFromAViewOfAFullBucketLeavesTheWaitersToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 1}}
		heavy := Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: "A", Rates: rate}
		light := Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "B", Rates: rate}
		start := time.Now()
		h, err := New(db, rgTable, Options{InstanceID: "h"}).Acquire(ctx, heavy) // the bucket's token; the next at 60 s
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(61 * time.Second)
		slow := &slowProcessAPI{API: db}
		type result struct {
			ls  *Lease
			err error
			at  time.Duration
		}
		gotW := make(chan result, 1)
		go func() {
			ls, err := New(slow, rgTable, Options{InstanceID: "w"}).Acquire(ctx, heavy)
			gotW <- result{ls, err, time.Since(start)}
		}()
		synctest.Wait() // W waits for heavy
		if n := len(parseItem(rgItem(t, db, rgTable, "srv")).queue); n != 1 {
			t.Fatalf("W is not waiting (%d tickets)", n)
		}
		lb := New(db, rgTable, Options{InstanceID: "b"})
		if _, err := lb.Acquire(ctx, light); err != nil { // W cannot use a place: the token is B's; the next at 122 s
			t.Fatalf("B's first call: %v", err)
		}
		if _, err := h.Finish(ctx, Success); err != nil { // heavy frees: only the bucket holds W back
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(time.Second)
		var rl *RateLimitedError
		if _, err := lb.Acquire(ctx, light); !errors.As(err, &rl) { // its answer shows W waiting, heavy free
			t.Fatalf("B's call with the bucket empty: %v; want *RateLimitedError", err)
		}
		slow.stop() // W's process is slow to look when its token comes
		time.Sleep(time.Until(start.Add(123 * time.Second)))
		_, err = lb.Acquire(ctx, light)
		slow.resume()
		if err == nil {
			t.Errorf("the bucket's token came at 122 s; W, waiting since 61 s and held back by nothing else since 62 s, had its turn; B's charge at 123 s, judged from a view showing W waiting, took it")
		}
		w := <-gotW
		switch {
		case w.err != nil:
			t.Errorf("W: %v", w.err)
		default:
			t.Logf("W got its place at %v", w.at)
			_, _ = w.ls.Finish(ctx, Unused)
		}
	})
}

// The same with a task, and nothing slow but a worker's start: Buckets
// (doc.go) and invariant 11, "tasks' tickets too". The server's bucket
// holds 1 token a minute. A task of tool heavy (cap 1, held by H) is
// enqueued through process P while the bucket holds its token; when H's
// call ends (P's too), its release starts the task's worker, whose turn
// it is (heavy free, the bucket's token there). A worker takes a moment to
// start (an invocation's cold start). Meanwhile P serves a call of tool
// light (no cap: it only charges) from the view its own last answer left,
// which shows the task's turn come: the charge counts it before itself
// (keep 1), and the bucket, full as seen, holds no token beyond it. Sent
// in the full form, which leaves keep out, it would land, the worker's
// claim find the bucket empty, and the task wait a minute more (fault
// simulation seed 11967001 found it so: three tasks of tool b waiting, a
// bucket of 3 full, a charge taking one).
func TestAChargeBesideATasksStartLeavesItsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 1}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		var st starts
		p := New(db, rgTable, Options{InstanceID: "p", OnTaskStart: st.hook})
		h := acquire(t, p, heavy("A")) // the bucket's token; the next at 60 s
		time.Sleep(61 * time.Second)
		id, err := p.Enqueue(ctx, heavy("Q"), "", "task-1", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Finish(ctx, Success); err != nil { // heavy frees: the task's turn
			t.Fatal(err)
		}
		got := st.list()
		if len(got) != 1 || got[0].Ticket != id {
			t.Fatalf("starts %+v; want one of %s", got, id)
		}
		time.Sleep(100 * time.Millisecond) // the worker starting
		_, cerr := p.Acquire(ctx, Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "B", Rates: rate})
		time.Sleep(time.Second)
		w := New(db, rgTable, Options{InstanceID: "w"})
		ls, werr := w.Claim(ctx, heavy("Q"), id, got[0].Mark)
		if werr == nil {
			_, _ = ls.Finish(ctx, Success)
		}
		if cerr == nil {
			t.Errorf("the task's turn came at 61 s, the bucket holding its one token; a charge of another tool 100 ms later, judged from a view showing that turn, took it; the worker's claim: %v", werr)
		}
	})
}

// Liveness (the brief: "a charge refused forever while tokens are
// there") beside "Whose turn" (doc.go) and invariant 8: a waiter whose
// turn came and that does not take its place within its claim window is
// presumed gone by the next caller that looks, which takes the place
// (removing the ticket): a dead waiter delays a live caller by one claim
// window. A charge never presumes a waiter gone: it keeps the dead
// waiter's token for as long as its ticket lives (its caller's Wait,
// queue_timeout up to 15 minutes, plus Margin). That costs a charge
// nothing while the bucket's burst holds more tokens than the dead waiters
// (they keep a standing token each, not a share of the rate), and
// everything once they hold as many: here the server's bucket holds 1
// token a minute. W joins for heavy (cap 1, held by H) at 61 s, the bucket
// holding its token, and its process dies there. H finishes at 62 s: W's
// turn, which W never takes. B calls tool light (no cap: it only charges)
// whenever its refusal's Retry-After says; past W's claim window and the
// bucket's next minute, B must have had a token, as a capped caller of
// heavy would have (it takes W's place past its claim window, removing
// its ticket).
//
// B's call of light (no cap, Wait) waits behind W, dead, as any caller
// does, and passes W once W's turn has stood its claim window in its
// looks: W's ticket holds the token no longer than that.
func TestADeadWaitersTicketDoesNotHoldItsTokenFromChargesPastItsClaimWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 1}}
		heavy := Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 10 * time.Minute, Hold: 10 * time.Minute, Holder: "A", Rates: rate}
		light := Request{Key: "srv", Tool: "light", MaxQueued: 4, Hold: 30 * time.Second, Wait: 5 * time.Minute, Holder: "B", Rates: rate}
		start := time.Now()
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy) // the bucket's token; the next at 60 s
		time.Sleep(61 * time.Second)
		dead := &slowProcessAPI{API: db}
		wctx, wcancel := context.WithCancel(ctx)
		gotW := make(chan struct{})
		go func() {
			defer close(gotW)
			_, _ = New(dead, rgTable, Options{InstanceID: "w"}).Acquire(wctx, heavy)
		}()
		synctest.Wait() // W waits for heavy
		dead.stop()     // and its process dies
		if n := len(parseItem(rgItem(t, db, rgTable, "srv")).queue); n != 1 {
			t.Fatalf("W is not waiting (%d tickets)", n)
		}
		time.Sleep(time.Second)
		if _, err := h.Finish(ctx, Success); err != nil { // W's turn: heavy free, the bucket's token there
			t.Fatal(err)
		}
		turn := time.Since(start)
		lb := New(db, rgTable, Options{InstanceID: "b"})
		due := turn + ClaimWindow + MaxLookFar + time.Minute
		var admitted time.Duration
		for admitted == 0 && time.Since(start) < 15*time.Minute {
			ls, err := lb.Acquire(ctx, light)
			var rl *RateLimitedError
			switch {
			case err == nil:
				admitted = time.Since(start)
				if ls.Waited < ClaimWindow {
					// Its first call waited W's claim window out, looking.
					t.Errorf("B's call admitted at %v reports waiting %v", admitted, ls.Waited)
				}
				_, _ = ls.Finish(ctx, Success)
			case errors.As(err, &rl):
				time.Sleep(rl.RetryAfter)
			default:
				t.Fatalf("B's call: %v", err)
			}
		}
		t.Logf("W's turn at %v; B's first token at %v", turn, admitted)
		if admitted == 0 || admitted > due {
			t.Errorf("W died waiting at 61 s, its turn came at %v; B's calls of light, each when its refusal said, got their first token at %v (0: none in 15 minutes), "+
				"past W's claim window and the bucket's next minute (%v): charges keep a dead waiter's token for as long as its ticket lives", turn, admitted, due)
		}
		wcancel()
		dead.resume()
		<-gotW
	})
}

// Buckets and "Whose turn" (doc.go): a newcomer is the newest caller, its
// take conditioned on seq as seen (nobody joined since it looked), and a
// charge likewise. Else a waiter leaving and another joining since
// leave the queue's size as it was: the charge, judged from its process's
// view of a minute before (board.recent allows an hour), would land ahead
// of a waiter that had joined since and whose only want was that token.
// Principal B's bucket holds 1 token a minute. H (B) holds tool heavy
// (cap 1) from 0 s; Y waits for heavy from 0 s. Process P, refused a call
// of tool light for B at 1 s (the bucket empty), keeps a view showing Y
// waiting. Y gives up at 2 s. At 61 s (the token back) W of B joins for
// heavy; H finishes at 62 s: only B's bucket could hold W back, and its
// token is there; W's process is slow to look. P's call of light for B at
// 63 s must leave W the token.
func TestAChargeFromAnOldViewDoesNotPassAWaiterThatJoinedAsAnotherLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := func(who string) []Rate { return []Rate{{Name: "principal:" + who, PerMinute: 1}} }
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate(who)}
		}
		light := Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "B", Rates: rate("B")}
		start := time.Now()
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("B")) // B's token; the next at 60 s
		yctx, ycancel := context.WithCancel(ctx)
		gotY := make(chan struct{})
		go func() {
			defer close(gotY)
			_, _ = New(db, rgTable, Options{InstanceID: "y"}).Acquire(yctx, heavy("Y"))
		}()
		synctest.Wait() // Y waits for heavy
		time.Sleep(time.Second)
		p := New(db, rgTable, Options{InstanceID: "p"})
		var rl *RateLimitedError
		if _, err := p.Acquire(ctx, light); !errors.As(err, &rl) {
			t.Fatalf("P's call at 1 s: %v; want *RateLimitedError", err)
		}
		time.Sleep(time.Second)
		ycancel() // Y gives up
		<-gotY
		time.Sleep(time.Until(start.Add(61 * time.Second)))
		slow := &slowProcessAPI{API: db}
		gotW := make(chan error, 1)
		go func() {
			ls, err := New(slow, rgTable, Options{InstanceID: "w"}).Acquire(ctx, heavy("B"))
			if err == nil {
				_, _ = ls.Finish(context.Background(), Unused)
			}
			gotW <- err
		}()
		synctest.Wait() // W waits for heavy
		if q := parseItem(rgItem(t, db, rgTable, "srv")).queue; len(q) != 1 || q[0].label != "B" {
			t.Fatalf("W is not alone waiting: %v", q)
		}
		time.Sleep(time.Second)
		if _, err := h.Finish(ctx, Success); err != nil { // heavy frees: W's turn, its token there
			t.Fatal(err)
		}
		synctest.Wait()
		slow.stop() // W's process is slow to look
		time.Sleep(time.Second)
		_, err := p.Acquire(ctx, light)
		slow.resume()
		if err == nil {
			t.Errorf("W joined at 61 s and its turn came at 62 s, B's token there; P's charge at 63 s, judged from its view of 1 s (Y waiting, gone since), took the token")
		}
		if err := <-gotW; err != nil {
			t.Logf("W: %v", err)
		}
	})
}

// Invariant 11 (doc.go): "a bucket admits no more than it gives, at the
// moment of admission to the upstream" — the upstream sees at most a
// bucket's burst at once and its rate after. A call never made gives its
// token back (Unused): what of it is still to come, no more. The gateway
// gives a key's charge back when the server then refuses the call
// (Gateway.admit's giveBack), which may be after the server's
// queue_timeout (10 s to 15 minutes). By then the token that charge took
// has come back with time: a refund of a whole interval would give one
// more. A key's bucket of 1 a minute: A is charged at 0 s and waits for
// the server; C is charged at 61 s (the bucket full again: its token); A's
// call is refused at 62 s and gives its token back; D is charged at 62 s.
// C and D reach the upstream a second apart on a bucket of 1 a minute.
func TestARefundAfterItsTokenCameBackGivesNoExtraToken(t *testing.T) {
	for _, capped := range []bool{false, true} {
		name := "holding nothing"
		if capped {
			name = "holding a place" // a key's max_parallel_requests: the release's refund
		}
		t.Run(name, func(t *testing.T) { lateRefund(t, capped) })
	}
}

func lateRefund(t *testing.T, capped bool) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		l := New(db, rgTable, Options{InstanceID: "g"})
		key := Request{Key: "key#k", Hold: 2 * time.Minute, Holder: "K", Rates: []Rate{{Name: "key", PerMinute: 1}}}
		if capped {
			key.Cap = 5
		}
		a, err := l.Acquire(ctx, key) // A's call, waiting for its server
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(61 * time.Second)
		c, err := l.Acquire(ctx, key) // C: the bucket's token of 60 s
		if err != nil {
			t.Fatalf("C at 61 s: %v", err)
		}
		time.Sleep(time.Second)
		if _, err := a.Finish(ctx, Unused); err != nil { // A's call refused by its server: never made
			t.Fatal(err)
		}
		d, err := l.Acquire(ctx, key)
		if err == nil {
			t.Errorf("C was admitted at 61 s and D at 62 s on a bucket of 1 a minute: A's refund at 62 s gave back a token that had come back at 60 s")
			_, _ = d.Finish(ctx, Success)
		}
		_, _ = c.Finish(ctx, Success)
	})
}

// Invariant 11 (doc.go): "a token given back is never one the bucket has
// regained with time", and the upstream sees at most a bucket's burst at
// once. A refund landing before another's, of a charge made before it,
// moves the bucket's arrival time back by an interval: the other's token
// then comes back an interval sooner than its own charge's answer said,
// and once that moment is past, a refund judged from that answer alone
// would give back (part of) a token the bucket has regained.
//
// A key's bucket of 2 a minute (an interval of 30 s, a burst of 2). A and B
// are charged at 0 s (arrival times 30 s and 60 s); A's call is refused at
// once and gives its token back (the bucket at 30 s: B's token comes back
// at 30 s). At 31 s the bucket is full again; C and D take its burst. B's
// call is refused then and gives back min(30 s, 60 s − 31 s) = 29 s of a
// token the bucket regained at 30 s; E is admitted at 32 s: three calls
// reach the upstream within a second on a burst of 2.
func TestARefundAfterAnEarlierRefundGivesNoRegainedToken(t *testing.T) {
	for _, capped := range []bool{false, true} {
		name := "holding nothing"
		if capped {
			name = "holding a place"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx := context.Background()
				l := New(db, rgTable, Options{InstanceID: "g"})
				key := Request{Key: "key#k", Hold: 2 * time.Minute, Holder: "K", Rates: []Rate{{Name: "key", PerMinute: 2}}}
				if capped {
					key.Cap = 10
				}
				get := func(who string) *Lease {
					t.Helper()
					ls, err := l.Acquire(ctx, key)
					if err != nil {
						t.Fatalf("%s at %v: %v", who, time.Now().Unix(), err)
					}
					return ls
				}
				start := time.Now()
				a, b := get("A"), get("B")
				if _, err := a.Finish(ctx, Unused); err != nil {
					t.Fatal(err)
				}
				time.Sleep(31 * time.Second)
				c, d := get("C"), get("D")
				if _, err := b.Finish(ctx, Unused); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				e, err := l.Acquire(ctx, key)
				if err == nil {
					t.Errorf("C and D at 31 s, E at %v on a bucket of 2 a minute: B's refund at 31 s gave back a token the bucket had regained at 30 s", time.Since(start))
					_, _ = e.Finish(ctx, Success)
				} else if rl := (*RateLimitedError)(nil); !errors.As(err, &rl) {
					t.Fatalf("E: %v", err)
				}
				_, _ = c.Finish(ctx, Success)
				_, _ = d.Finish(ctx, Success)
			})
		})
	}
}
