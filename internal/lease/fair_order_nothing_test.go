package lease

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// slowTake is a store at which the first write naming the leases map (a
// take) reaches the item only once until reports true, time passing
// meanwhile: the take lands late, as any write may.
type slowTake struct {
	*memStore
	until  func() bool
	held   bool
	landed error
}

func (s *slowTake) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if s.held || !slices.Contains(slices.Collect(maps.Values(in.ExpressionAttributeNames)), LeasesAttr) {
		return s.memStore.UpdateItem(ctx, in, opts...)
	}
	s.held = true
	for range 10_000 {
		if s.until() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	out, err := s.memStore.UpdateItem(ctx, in, opts...)
	s.landed = err
	return out, err
}

// Take and Whose turn (doc.go): a take is conditioned on "nothing that
// could change whose turn it is changed since the view it was judged
// from", and leaves "in every cap, room left for each caller whose turn
// comes before it"; invariant 6: "a take lands only for a caller whose
// turn it is in the item as the write finds it, at the moment the take
// was made". A take holding nothing takes a token, and a token taken
// from one principal's bucket can pass over a caller ranked before a
// take judged earlier, handing its place to another whose token that
// take was not keeping. A take holding nothing moves no freed (see
// Buckets): so every take is conditioned on the buckets of the callers
// it hands a place before itself holding their tokens still.
//
// Each principal's bucket holds 2 tokens, refilled at 2 a minute. B's
// call of tool Z (no cap: it holds nothing) is paused for 2.5 s
// (Retry-After), leaving B one token; C's call of tool V leaves C one.
// N (B) calls tool Z and waits, beside B's other caller for tool X (cap
// 1, free), which then leaves. P (B, a caller gone, its claim window
// still running) waits for tool X, and Q (C) behind it. At 2.4 s W (C)
// comes for tool Y (cap 1): N is held back by its pause, so X's place
// goes to P with B's token, Q finds X taken, and it is W's turn with C's
// token, keeping none (no caller handed a place before it needs C's).
// W's take reaches the store late, past 2.5 s: meanwhile the pause ended,
// N's turn came (it is numbered before P) and its take took B's token.
// Now P cannot use X's place: it is Q's turn, before W's (same
// principal, lower number), and Q needs C's one token. W's take, judged
// before N's, must not land, taking the token of Q, whose turn
// comes first, for half a minute.
func TestATakeHoldingNothingDoesNotPassOverACallerAheadOfATakeJudgedBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		db := newMemStore()
		const key = "srv"
		principal := func(who string) Rate { return Rate{Name: "principal:" + who, PerMinute: 2} }
		start := time.Now()
		uncapped := func(tool, who string) Request {
			return Request{Key: key, Tool: tool, MaxQueued: 64, Wait: time.Minute, Hold: time.Second, Holder: who, Rates: []Rate{principal(who)}, PauseTool: true, MaxPause: time.Minute}
		}
		capped := func(tool, who string) Request {
			return Request{Key: key, Tool: tool, ToolCap: 1, MaxQueued: 64, Wait: time.Minute, Hold: time.Minute, Holder: who, Rates: []Rate{principal(who)}}
		}
		// The item as a first call holding a place leaves it.
		release(t, acquire(t, New(db, rgTable, Options{InstanceID: "a"}), capped("Y", "A")))
		cz := acquire(t, New(db, rgTable, Options{InstanceID: "z"}), uncapped("Z", "B"))
		cz.PauseFor(2500 * time.Millisecond)
		if _, err := cz.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		if _, err := acquire(t, New(db, rgTable, Options{InstanceID: "v"}), uncapped("V", "C")).Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		joinOnly := func(name string, req Request) *attempt {
			l := New(db, rgTable, Options{InstanceID: name})
			a := l.newAttempt(req, l.newLeaseID(), false)
			v, err := l.read(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.join(ctx, v); err != nil || !a.joined {
				t.Fatalf("%s's join: %v", name, err)
			}
			return a
		}
		var waiting []chan error
		live := func(name string, req Request) {
			got := make(chan error, 1)
			waiting = append(waiting, got)
			go func() {
				ls, err := New(db, rgTable, Options{InstanceID: name}).Acquire(ctx, req)
				if err == nil {
					_, err = ls.Finish(context.Background(), Success)
				}
				got <- err
			}()
			synctest.Wait()
		}

		// B's caller for tool X waits; N, for tool Z, joins behind it, then
		// that caller leaves.
		b0 := joinOnly("b0", capped("X", "B"))
		live("n", uncapped("Z", "B"))
		b0.leave(ctx)
		p := joinOnly("p", capped("X", "B")) // its caller gone
		live("q", capped("X", "C"))
		v := itemView(t, db, key)
		if len(v.queue) != 3 {
			for _, tk := range v.queue {
				t.Logf("%+v", *tk)
			}
			for _, got := range waiting {
				select {
				case err := <-got:
					t.Log(err)
				default:
				}
			}
			t.Fatalf("%d waiting, want N, P and Q", len(v.queue))
		}

		time.Sleep(time.Until(start.Add(2400 * time.Millisecond)))
		nGone := func() bool { return itemView(t, db, key).ticketFor("n.1") == nil }
		st := &slowTake{memStore: db, until: nGone}
		lw := New(st, rgTable, Options{InstanceID: "w"})
		if _, err := lw.read(ctx, key); err != nil { // W's view: N held back, X's place P's
			t.Fatal(err)
		}
		lsW, err := lw.Acquire(ctx, capped("Y", "C"))
		if err != nil {
			t.Fatal(err)
		}
		if !st.held || !nGone() {
			t.Fatalf("W's take was not held until N's take landed (held %v, N's ticket gone %v)", st.held, nGone())
		}
		after := itemView(t, db, key)
		now := time.Now().UnixMilli()
		q := after.ticketFor("q.1")
		tokens := func(who string) int { return principal(who).Tokens(after.rates[RateAttr("principal:"+who)], now) }
		t.Logf("W's take judged at 2.4 s, sent on after N's take: %v; W got its place at %v; P waiting: %v, Q: %v; tokens B %d, C %d; tool X held by %d",
			st.landed, time.Since(start), after.ticketFor(p.me.id) != nil, q != nil, tokens("B"), tokens("C"), after.liveIn(now, after.sets[ToolAttr("X")]))
		if st.landed == nil && q != nil && after.liveIn(now, after.sets[ToolAttr("X")]) == 0 && tokens("B") == 0 && tokens("C") == 0 {
			t.Errorf("W's take, judged before N's take holding nothing, landed after it: it took C's one token, which Q (numbered before W, C's too) needs for tool X's free place now that P's bucket is empty")
		}
		release(t, lsW)
		cancel()
		for _, got := range waiting {
			if err := <-got; err != nil && !errors.Is(err, context.Canceled) {
				t.Log(err)
			}
		}
	})
}
