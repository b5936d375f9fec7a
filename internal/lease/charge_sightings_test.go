package lease

// Calls with no cap and others' turns: beside a waiter that needs its
// token, such a call is refused (no Wait) or waits its turn, presuming a
// waiter gone only when its own looks saw its turn stand for its claim
// window; a charge is conditioned on seq (doc.go, Buckets).

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Invariant 8 (doc.go): "a live waiter is never presumed gone", and 11: "a
// call that only charges leaves a waiter's token to it". A charge presumes
// a waiter gone once its turn, first seen at the time the key's board
// keeps (turns), came its claim window ago. The board keeps that time
// from the last charge that saw the turn to the next, whatever came
// between: a turn that came, went (the operator's hold, a pause) and came
// again reads as having stood all along, and the first charge after it
// comes again presumes the waiter gone at once.
//
// The server's bucket holds 1 token a minute. H holds tool heavy (cap 1)
// from 0 s, its token; W joins for heavy at 61 s (the token back at 60 s).
// H finishes at 62 s: W's turn; W's process is slow to look, and B's
// charge of tool light (no cap) at 63 s is rightly refused, leaving W the
// token. The operator holds the key from 64 s to 184 s (W, live, waits it
// out: no place is free). The hold ends: W's turn again, from 184 s. W's
// process is slow to look for a moment; B's call at 185 s, a second into
// W's turn, must not presume W gone on the turn it saw at 63 s and take
// its token, leaving W to wait a minute more.
func TestATurnThatCameAgainAfterAHoldIsNotPresumedGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 1}}
		heavy := Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 10 * time.Minute, Hold: 10 * time.Minute, Holder: "A", Rates: rate}
		light := Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "B", Rates: rate}
		start := time.Now()
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy)
		time.Sleep(61 * time.Second) // the bucket's token back: W waits for heavy alone
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
		synctest.Wait()
		if n := len(parseItem(rgItem(t, db, rgTable, "srv")).queue); n != 1 {
			t.Fatalf("W is not waiting (%d tickets)", n)
		}
		time.Sleep(time.Second)
		slow.stop()
		if _, err := h.Finish(ctx, Success); err != nil { // W's turn
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		lb := New(db, rgTable, Options{InstanceID: "b"})
		var rl *RateLimitedError
		if _, err := lb.Acquire(ctx, light); !errors.As(err, &rl) { // W's token
			t.Fatalf("B's call at 63 s: %v; want *RateLimitedError", err)
		}
		time.Sleep(time.Second)
		if err := NewAdmin(db, rgTable).Pause(ctx, "srv", start.Add(184*time.Second)); err != nil {
			t.Fatal(err)
		}
		slow.resume() // W, live, looks and waits the hold out
		time.Sleep(time.Until(start.Add(183 * time.Second)))
		synctest.Wait()
		select {
		case w := <-gotW:
			t.Fatalf("W ended during the hold: %v", w.err)
		default:
		}
		slow.stop() // slow to look when the hold ends
		time.Sleep(time.Until(start.Add(185 * time.Second)))
		_, err := lb.Acquire(ctx, light)
		slow.resume()
		if err == nil {
			t.Errorf("the hold ended at 184 s: W's turn again, W live and waiting since 61 s; B's charge at 185 s presumed W gone (its turn first seen at 63 s, before the hold) and took its token")
		}
		w := <-gotW
		if w.err != nil {
			t.Errorf("W: %v", w.err)
		} else {
			t.Logf("W got its place at %v", w.at)
			_, _ = w.ls.Finish(ctx, Unused)
		}
	})
}

// hookAPI runs before, once, ahead of the n-th UpdateItem sent through it.
type hookAPI struct {
	API
	n      int
	at     int
	before func()
}

func (h *hookAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if h.n++; h.n == h.at && h.before != nil {
		h.before()
	}
	return h.API.UpdateItem(ctx, in, opts...)
}

// Buckets (doc.go): a charge is conditioned on seq as seen, as a
// newcomer's take is, whatever view it was built from. An answer is as
// old as the charge's round trip: a waiter leaving and another joining in
// it leave the queue's size as it was, and the newcomer, needing the
// charge's bucket, would be neither counted nor guarded by freed (no
// waiter seen needed one).
//
// Each principal's bucket holds 1 token a minute. H (C) holds tool heavy
// (cap 1); X (A) waits for it. P's charge of tool light for B, with no
// view, is refused (the queue not empty); its answer shows X alone, who
// needs no token of B's. Before P's charge from that answer lands: X gives
// up, W (B) joins for heavy, H finishes: W's turn, B's token there (W's
// process a moment slow to look). P's charge lands and takes W's token.
func TestAChargeFromAnAnswerDoesNotPassAWaiterThatJoinedAsAnotherLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := func(who string) []Rate { return []Rate{{Name: "principal:" + who, PerMinute: 1}} }
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate(who)}
		}
		light := Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "B", Rates: rate("B")}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("C"))
		xctx, xcancel := context.WithCancel(ctx)
		gotX := make(chan struct{})
		go func() {
			defer close(gotX)
			_, _ = New(db, rgTable, Options{InstanceID: "x"}).Acquire(xctx, heavy("A"))
		}()
		synctest.Wait()
		if q := parseItem(rgItem(t, db, rgTable, "srv")).queue; len(q) != 1 || q[0].label != "A" {
			t.Fatalf("X is not alone waiting: %v", q)
		}
		time.Sleep(time.Second)
		slow := &slowProcessAPI{API: db}
		gotW := make(chan error, 1)
		hook := &hookAPI{API: db, at: 2, before: func() {
			xcancel() // X gives up
			<-gotX
			go func() {
				ls, err := New(slow, rgTable, Options{InstanceID: "w"}).Acquire(ctx, heavy("B"))
				if err == nil {
					_, _ = ls.Finish(context.Background(), Unused)
				}
				gotW <- err
			}()
			synctest.Wait() // W waits for heavy
			if q := parseItem(rgItem(t, db, rgTable, "srv")).queue; len(q) != 1 || q[0].label != "B" {
				t.Errorf("W is not alone waiting: %v", q)
			}
			slow.stop()
			if _, err := h.Finish(ctx, Success); err != nil { // W's turn, B's token there
				t.Error(err)
			}
		}}
		_, err := New(hook, rgTable, Options{InstanceID: "p"}).Acquire(ctx, light)
		slow.resume()
		if hook.n < 2 {
			t.Fatalf("P's charge made %d writes; the test wants its second", hook.n)
		}
		if err == nil {
			t.Errorf("W joined as X left, and its turn came (B's token there), before P's charge built from the answer showing X alone landed: it took W's token")
		}
		if err := <-gotW; err != nil {
			t.Logf("W: %v", err)
		}
	})
}

// Whose turn and invariant 8 (doc.go): D dead waiters before a live caller
// delay it by at most the sum of their claim windows, D × (ClaimWindow +
// MaxLookFar), and a charge "passes over the waiters it presumes gone as a
// take does". A charge refused for a waiter's token says, in its
// RetryAfter, when the bucket will hold a token more than the waiters
// kept for: for a dead waiter, a whole interval of the bucket, not when
// its claim window ends. A caller retrying when told so meets each dead
// waiter in turn, an interval apart (a minute here), where a take meets
// them a claim window apart.
//
// As TestADeadWaitersTicketDoesNotHoldItsTokenFromChargesPastItsClaimWindow,
// with three dead waiters of heavy instead of one: the bounds that test
// allows (their claim windows, and the bucket's next minute) are passed.
func TestDeadWaitersHoldAChargeOffAClaimWindowEachNotAnInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const dead = 3
		rate := []Rate{{Name: "server", PerMinute: 1}}
		heavy := Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: 14 * time.Minute, Hold: 10 * time.Minute, Holder: "A", Rates: rate}
		light := Request{Key: "srv", Tool: "light", MaxQueued: 4, Hold: 30 * time.Second, Wait: 5 * time.Minute, Holder: "B", Rates: rate}
		start := time.Now()
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy)
		time.Sleep(61 * time.Second)
		wctx, wcancel := context.WithCancel(ctx)
		var apis []*slowProcessAPI
		done := make(chan struct{}, dead)
		for i := range dead {
			api := &slowProcessAPI{API: db}
			apis = append(apis, api)
			go func() {
				defer func() { done <- struct{}{} }()
				_, _ = New(api, rgTable, Options{InstanceID: "w" + string(rune('0'+i))}).Acquire(wctx, heavy)
			}()
			synctest.Wait()
			api.stop() // its process dies waiting
		}
		if n := len(parseItem(rgItem(t, db, rgTable, "srv")).queue); n != dead {
			t.Fatalf("%d waiting; want %d", n, dead)
		}
		time.Sleep(time.Second)
		if _, err := h.Finish(ctx, Success); err != nil { // the first dead waiter's turn
			t.Fatal(err)
		}
		turn := time.Since(start)
		lb := New(db, rgTable, Options{InstanceID: "b"})
		due := turn + dead*(ClaimWindow+MaxLookFar) + time.Minute
		var admitted time.Duration
		for admitted == 0 && time.Since(start) < 14*time.Minute {
			ls, err := lb.Acquire(ctx, light)
			var rl *RateLimitedError
			switch {
			case err == nil:
				admitted = time.Since(start)
				_, _ = ls.Finish(ctx, Success)
			case errors.As(err, &rl):
				t.Logf("%v: refused, a token in %v", time.Since(start), rl.RetryAfter)
				time.Sleep(rl.RetryAfter)
			default:
				t.Fatalf("B's call: %v", err)
			}
		}
		t.Logf("the first dead waiter's turn at %v; B's first token at %v", turn, admitted)
		if admitted == 0 || admitted > due {
			t.Errorf("%d dead waiters, the first one's turn at %v: B's calls, each when its refusal said, got their first token at %v (0: none), past their claim windows and the bucket's next minute (%v)", dead, turn, admitted, due)
		}
		wcancel()
		for _, api := range apis {
			api.resume()
		}
		for range dead {
			<-done
		}
	})
}

// The same as TestATurnThatCameAgainAfterAHoldIsNotPresumedGone with
// no operator: the turn goes because another principal, ranking first
// (holding fewer places), rightly takes the token, and comes again with
// the bucket's next token. The server's bucket holds 1 token a minute.
// H (C) holds heavy (cap 1) from 0 s; O (A) holds tool other (cap 5) from
// 60 s; W (A) joins for heavy at 121 s. H finishes at 122 s: W's turn; W's
// process is slow to look, and P's charge of tool light for A at 123 s is
// rightly refused. At 124 s Z (Z, no place held) takes tool mid and the
// token: W's turn goes (W, live, waits for the bucket). The next token
// comes at 184 s: W's turn again, W slow to look for a moment; P's charge
// at 185 s presumes W gone (its turn "first seen" at 123 s) and takes it.
// Were P to call each time a token comes, W would never have one.
func TestATurnThatCameAgainAfterAnotherTookTheTokenIsNotPresumedGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 1}}
		req := func(tool string, cap int, who string) Request {
			return Request{Key: "srv", Tool: tool, ToolCap: cap, MaxQueued: 4, Wait: 10 * time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		start := time.Now()
		at := func(s int) { time.Sleep(time.Until(start.Add(time.Duration(s) * time.Second))) }
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), req("heavy", 1, "C"))
		at(60)
		o := acquire(t, New(db, rgTable, Options{InstanceID: "o"}), req("other", 5, "A"))
		at(121)
		slow := &slowProcessAPI{API: db}
		type result struct {
			ls  *Lease
			err error
			at  time.Duration
		}
		gotW := make(chan result, 1)
		go func() {
			ls, err := New(slow, rgTable, Options{InstanceID: "w"}).Acquire(ctx, req("heavy", 1, "A"))
			gotW <- result{ls, err, time.Since(start)}
		}()
		synctest.Wait()
		if n := len(parseItem(rgItem(t, db, rgTable, "srv")).queue); n != 1 {
			t.Fatalf("W is not waiting (%d tickets)", n)
		}
		at(122)
		slow.stop()
		if _, err := h.Finish(ctx, Success); err != nil { // W's turn
			t.Fatal(err)
		}
		at(123)
		p := New(db, rgTable, Options{InstanceID: "p"})
		light := Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "A", Rates: rate}
		var rl *RateLimitedError
		if _, err := p.Acquire(ctx, light); !errors.As(err, &rl) {
			t.Fatalf("P's call at 123 s: %v; want *RateLimitedError", err)
		}
		at(124)
		z, err := New(db, rgTable, Options{InstanceID: "z"}).Acquire(ctx, req("mid", 5, "Z"))
		if err != nil {
			t.Fatalf("Z at 124 s (its principal holding no place ranks first): %v", err)
		}
		slow.resume() // W, live, looks and waits for the bucket
		at(183)
		synctest.Wait()
		select {
		case w := <-gotW:
			t.Fatalf("W ended at %v: %v", w.at, w.err)
		default:
		}
		slow.stop() // slow to look, a moment, when the token comes
		at(185)
		_, err = p.Acquire(ctx, light)
		slow.resume()
		if err == nil {
			t.Errorf("the bucket's token came at 184 s: W's turn again, W live and waiting since 121 s; P's charge at 185 s presumed W gone (its turn first seen at 123 s, before Z took that token) and took it")
		}
		w := <-gotW
		if w.err != nil {
			t.Errorf("W: %v", w.err)
		} else {
			t.Logf("W got its place at %v", w.at)
			_, _ = w.ls.Finish(ctx, Unused)
		}
		_, _ = z.Finish(ctx, Success)
		_, _ = o.Finish(ctx, Success)
	})
}

// The same from another side: the turns a charge keeps on the board are
// also recorded from its process's view, which may be an hour old and is
// walked at the charge's now: a lease in it whose expiry has passed reads
// as lapsed, though its holder renewed it since, and the turn behind it as
// come. Such a charge lands (the bucket holding a token beyond the
// waiter's) with the turn "first seen" then; when the turn really comes,
// more than a claim window on, the first charge presumes the waiter gone.
//
// The server's bucket holds 2 tokens a minute. H (C) holds heavy (cap 1)
// from 0 s, renewing its lease every 15 s for 20 s (its expiry 22 s on);
// W (A) waits for heavy from 0 s. P's charges of tool light for A land at
// 31 s (W's turn not come: H holds heavy; a token left beyond W's) and at
// 62 s, built from the answer of 31 s, which shows H's lease expiring at
// 52 s: W's turn, in that view, come (its token left too). H finishes at
// 84 s: W's turn, W slow to look for a moment. P's charge at 85 s, built
// from the answer of 62 s, presumes W gone (its turn "first seen" at
// 62 s) and takes the one token, W's.
func TestATurnSeenInAnOldViewIsNotFirstSeenThen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rate := []Rate{{Name: "server", PerMinute: 2}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 10 * time.Minute, Hold: 20 * time.Second, Holder: who, Rates: rate}
		}
		light := Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "A", Rates: rate}
		start := time.Now()
		at := func(s int) { time.Sleep(time.Until(start.Add(time.Duration(s) * time.Second))) }
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("C"))
		slow := &slowProcessAPI{API: db}
		type result struct {
			ls  *Lease
			err error
			at  time.Duration
		}
		gotW := make(chan result, 1)
		go func() {
			ls, err := New(slow, rgTable, Options{InstanceID: "w"}).Acquire(ctx, heavy("A"))
			gotW <- result{ls, err, time.Since(start)}
		}()
		synctest.Wait()
		if n := len(parseItem(rgItem(t, db, rgTable, "srv")).queue); n != 1 {
			t.Fatalf("W is not waiting (%d tickets)", n)
		}
		p := New(db, rgTable, Options{InstanceID: "p"})
		charge := func(s int) error {
			at(s)
			ls, err := p.Acquire(ctx, light)
			if err == nil {
				_, _ = ls.Finish(ctx, Success)
			}
			return err
		}
		renew := func(s int) {
			at(s)
			if err := h.Renew(ctx, 20*time.Second); err != nil {
				t.Fatalf("H's renewal at %d s: %v", s, err)
			}
		}
		renew(15)
		renew(30)
		if err := charge(31); err != nil {
			t.Fatalf("P's charge at 31 s: %v", err)
		}
		renew(45)
		renew(60)
		if err := charge(62); err != nil {
			t.Fatalf("P's charge at 62 s: %v", err)
		}
		renew(75)
		at(84)
		slow.stop()
		if _, err := h.Finish(ctx, Success); err != nil { // W's turn
			t.Fatal(err)
		}
		err := charge(85)
		slow.resume()
		if err == nil {
			t.Errorf("H finished at 84 s: W's turn, W live and waiting since 0 s; P's charge at 85 s presumed W gone (its turn \"first seen\" at 62 s, in a view of 31 s where H's renewed lease read as lapsed) and took its token")
		}
		w := <-gotW
		if w.err != nil {
			t.Errorf("W: %v", w.err)
		} else {
			t.Logf("W got its place at %v", w.at)
			_, _ = w.ls.Finish(ctx, Unused)
		}
	})
}
