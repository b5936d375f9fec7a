package lease

// Regression tests of the limiter's cost and rates: what waiting costs
// the store, what a refusal writes, how the item grows, and when a bucket
// charges. See regress_test.go for the helpers they share.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
)

// rgItemSize is an item's size as DynamoDB counts it.
func rgItemSize(item map[string]types.AttributeValue) int { return store.ItemSize(item) }

// rgFlaky answers every other write with a server error, unapplied: the
// writer cannot tell whether it landed.
type rgFlaky struct {
	API
	on atomic.Bool
	n  atomic.Int64
}

func (f *rgFlaky) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.on.Load() && f.n.Add(1)%2 == 1 {
		return nil, &types.InternalServerError{Message: aws.String("injected: outcome unknown")}
	}
	return f.API.UpdateItem(ctx, in, opts...)
}

// Invariant 14 (doc.go, "Whose turn"): a waiter looks at least every
// MaxLook while fewer than Places callers come before it, every
// rank/Places × MaxLook (at most MaxLookFar) behind more, and a look that
// finds its place late waits half as long again as the last, up to
// MaxLook. So once its back-off has grown (10 s here: from even 1 ms, ×1.5
// a look reaches 1 s within 18 looks and 3 s), a waiter whose place is
// late reads at most once per MaxLook: ten waiters behind a stuck call
// (cap 1; calls on the key last 100 ms, this one never ends), in 30 s,
// send at most 10 × (30 s / MaxLook + 1) requests, and no write.
func TestLateWaitersBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 16, Hold: 10 * time.Minute, Wait: 5 * time.Minute, Holder: "p"}
		h := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook})
		stuck := holdAfterShortCalls(t, ctx, h, r)
		c := &rgCounter{API: db}
		const waiters = 10
		var wg sync.WaitGroup
		for i := range waiters {
			l := New(c, rgTable, Options{InstanceID: fmt.Sprintf("w%d", i), MaxLook: maxLook})
			wg.Go(func() {
				if ls, err := l.Acquire(ctx, r); err == nil {
					_, _ = ls.Finish(context.Background(), Success)
				}
			})
			synctest.Wait()
		}
		if n := rgMapLen(rgItem(t, db, rgTable, "srv"), rgQueue); n != waiters {
			t.Fatalf("%d tickets; want the %d waiters'", n, waiters)
		}
		time.Sleep(10 * time.Second) // the back-off grows to MaxLook
		before := c.now()
		const window = 30 * time.Second
		time.Sleep(window)
		spent := c.now().minus(before)
		if bound := int64(waiters) * int64(window/maxLook+1); spent.reads+spent.writes > bound || spent.writes > 0 {
			t.Errorf("%d waiters behind a stuck call sent %d reads and %d writes in %v; want at most %d requests (one look per MaxLook %v each) and no write",
				waiters, spent.reads, spent.writes, window, bound, maxLook)
		}
		cancel()
		wg.Wait()
		if _, err := stuck.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	})
}

// Invariant 14 (doc.go, "Whose turn"), with a holder that renews: a
// holder whose call goes on past its expected end (a cut-off call whose
// upstream has not stopped, a slow one) renews its lease every second or
// so, and each renewal moves its lease's expiry, and with it when its
// waiters expect the place. Found late, a waiter backs off: a renewal
// does not start its back-off again from 5 ms. Ten waiters
// behind such a call (cap 1; calls on the key last 100 ms; the holder
// renews every second) send, once their back-off has grown, at most one
// look per MaxLook each, and no write.
func TestLateWaitersBackOffBehindARenewingHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 16, Hold: 2 * time.Second, Wait: 5 * time.Minute, Holder: "p"}
		h := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook})
		stuck := holdAfterShortCalls(t, ctx, h, r)
		renewing := make(chan struct{})
		go func() {
			defer close(renewing)
			for ctx.Err() == nil {
				time.Sleep(time.Second)
				if err := stuck.Renew(ctx, r.Hold); err != nil && ctx.Err() == nil {
					t.Errorf("renewing the holder's lease: %v", err)
					return
				}
			}
		}()
		lateWaitersLook(t, ctx, cancel, db, r, maxLook, "behind a call whose holder renews every second")
		<-renewing
		if _, err := stuck.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	})
}

// Invariant 14 (doc.go, "Whose turn"), with calls of another tool beside
// a stuck one: a waiter whose tool is full expects its place from that
// tool's leases alone, and once found late backs off. Calls of another
// tool end beside the stuck one and move
// call_ms; neither their ends nor a new estimate of the same place start
// the waiter's back-off again from 5 ms. Ten waiters for tool
// a (its cap 1, held by a stuck call) while calls of tool b, 100 ms and
// 1.5 s in turn, go on beside it, send once their back-off has grown at
// most one look per MaxLook each, and no write.
func TestLateWaitersBackOffWhileOtherCallsMoveCallMS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		const maxLook = time.Second
		ra := Request{Key: "srv", Cap: 3, Tool: "a", ToolCap: 1, MaxQueued: 16, Hold: 10 * time.Minute, Wait: 5 * time.Minute, Holder: "p"}
		rb := ra
		rb.Tool, rb.ToolCap, rb.Holder = "b", 0, "q"
		h := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook})
		stuck, err := h.Acquire(ctx, ra)
		if err != nil {
			t.Fatal(err)
		}
		others := make(chan struct{})
		go func() {
			defer close(others)
			for i := 0; ctx.Err() == nil; i++ {
				ls, err := h.Acquire(ctx, rb)
				if err != nil {
					return
				}
				time.Sleep([]time.Duration{100 * time.Millisecond, 1500 * time.Millisecond}[i%2])
				_, _ = ls.Finish(context.Background(), Success)
			}
		}()
		lateWaitersLook(t, ctx, cancel, db, ra, maxLook, "behind a stuck call, calls of another tool ending beside it")
		<-others
		if _, err := stuck.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	})
}

// Invariant 14 (doc.go, "Whose turn"): a waiter's reads fall with its
// rank. A waiter far back looks every rank/Places × MaxLook, up to
// MaxLookFar (not every MaxLook, nor every 2 s: N waiters then read N/2
// times a second, each read of an item that grows with N), and its ticket
// announces that period, so that nobody presumes it gone while it sleeps.
// Forty waiters behind a stuck call (cap 1), once their back-off has grown
// (100 s), send in 60 s at most what that schedule allows — 60 s over the
// period of each one's rank, plus one — and no write.
func TestFarWaitersReadByTheirRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 64, Hold: 10 * time.Minute, Wait: 5 * time.Minute, Holder: "p"}
		h := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook})
		stuck, err := h.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		c := &rgCounter{API: db}
		const waiters = 40
		var wg sync.WaitGroup
		for i := range waiters {
			l := New(c, rgTable, Options{InstanceID: fmt.Sprintf("w%d", i), MaxLook: maxLook})
			wg.Go(func() {
				if ls, err := l.Acquire(ctx, r); err == nil {
					_, _ = ls.Finish(context.Background(), Success)
				}
			})
			synctest.Wait()
		}
		if n := rgMapLen(rgItem(t, db, rgTable, "srv"), rgQueue); n != waiters {
			t.Fatalf("%d tickets; want the %d waiters'", n, waiters)
		}
		time.Sleep(100 * time.Second) // the back-off grows to each one's period
		before := c.now()
		const window = time.Minute
		time.Sleep(window)
		spent := c.now().minus(before)
		bound := int64(0)
		for rank := range waiters {
			period := min(time.Duration(max(rank, 1))*maxLook, MaxLookFar)
			bound += int64(window/period) + 1
		}
		if spent.reads+spent.writes > bound || spent.writes > 0 {
			t.Errorf("%d waiters behind a stuck call sent %d reads and %d writes in %v; want at most %d requests "+
				"(a look per rank × MaxLook, up to MaxLookFar %v, each) and no write", waiters, spent.reads, spent.writes, window, bound, MaxLookFar)
		}
		t.Logf("%d waiters sent %d reads in %v (bound %d)", waiters, spent.reads, window, bound)
		cancel()
		wg.Wait()
		if _, err := stuck.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	})
}

// Invariant 7 and "Join" (doc.go): a join refused for room is one failed
// write that changes nothing. A caller refused queue_full leaves the item
// exactly as it was (freed, seq, queue and all) and costs at most its take
// and its join when its process has no view of the item, and its join
// alone when its process has just seen the item (here, the process of the
// caller that fills the queue).
func TestQueueFullIsOneWriteThatMovesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		r := Request{Key: "srv", Cap: 1, MaxQueued: 1, Hold: time.Minute, Wait: time.Minute, Holder: "w"}
		holder, err := New(db, rgTable, Options{InstanceID: "h"}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		cw := &rgCounter{API: db}
		lw := New(cw, rgTable, Options{InstanceID: "w"})
		done := make(chan struct{})
		go func() {
			defer close(done)
			if ls, err := lw.Acquire(ctx, r); err == nil {
				_, _ = ls.Finish(context.Background(), Success)
			}
		}()
		synctest.Wait()
		before := rgItem(t, db, rgTable, "srv")
		if n := rgMapLen(before, rgQueue); n != 1 {
			t.Fatalf("%d tickets; want the queue full with 1", n)
		}
		refused := r
		refused.Holder = "r"
		check := func(what string, c *rgCounter, l *Limiter, most int64) {
			t.Helper()
			start := c.now()
			_, err := l.Acquire(ctx, refused)
			spent := c.now().minus(start)
			var full *FullError
			if !errors.As(err, &full) || full.Reason != QueueFull {
				t.Errorf("%s: %v; want refused, queue full", what, err)
			}
			if spent.writes > most {
				t.Errorf("%s: refused queue_full after %d writes (%d failed); want at most %d", what, spent.writes, spent.failed, most)
			}
			if after := rgItem(t, db, rgTable, "srv"); !reflect.DeepEqual(before, after) {
				f0, _ := rgNumber(before, rgFreed)
				f1, _ := rgNumber(after, rgFreed)
				s0, _ := rgNumber(before, rgSeq)
				s1, _ := rgNumber(after, rgSeq)
				t.Errorf("%s: the refusal changed the item (freed %d → %d, seq %d → %d, queue %d → %d); want it as it was",
					what, f0, f1, s0, s1, rgMapLen(before, rgQueue), rgMapLen(after, rgQueue))
			}
		}
		cr := &rgCounter{API: db}
		check("a caller in a new process", cr, New(cr, rgTable, Options{InstanceID: "r"}), 2)
		check("a caller in a process that has just seen the item", cw, lw, 1)
		cancel()
		<-done
		if _, err := holder.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	})
}

// Invariant 14 (doc.go): the item's size grows with the callers holding
// and waiting only. With n holders and n waiters it stays within n times
// the size one holder and one waiter add; and after 200 calls whose writes'
// outcomes were unknown (every other write answered with a server error),
// nothing live, it is the size of an item that saw one call: nothing is
// left behind per past caller.
func TestItemSizeStaysLinear(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// size is the item's size with n holders and n waiters on a key of
		// cap n; each ends when the test does.
		var wg sync.WaitGroup
		var holders []*Lease
		size := func(n int) int {
			key := fmt.Sprintf("size%d", n)
			r := Request{Key: key, Cap: max(n, 1), MaxQueued: 64, Hold: 10 * time.Minute, Wait: 5 * time.Minute, Holder: "p"}
			l := New(db, rgTable, Options{InstanceID: "h" + strconv.Itoa(n)})
			ls, err := l.Acquire(ctx, r) // a call ended: the item exists
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
			for range n {
				ls, err := l.Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				holders = append(holders, ls)
			}
			for i := range n {
				w := New(db, rgTable, Options{InstanceID: fmt.Sprintf("w%d.%d", n, i)})
				wg.Go(func() {
					if ls, err := w.Acquire(ctx, r); err == nil {
						_, _ = ls.Finish(context.Background(), Success)
					}
				})
				synctest.Wait()
			}
			return rgItemSize(rgItem(t, db, rgTable, key))
		}
		base, one, many := size(0), size(1), size(16)
		if bound := base + 16*(one-base)*5/4; many > bound {
			t.Errorf("item size with 16 holders and 16 waiters: %d bytes; want at most %d (empty %d, one of each %d)", many, bound, base, one)
		}

		f := &rgFlaky{API: db}
		l := New(f, rgTable, Options{InstanceID: "c"})
		r := Request{Key: "churn", Cap: 4, Hold: time.Minute, Holder: "p"}
		call := func() error {
			ls, err := l.Acquire(ctx, r)
			if err != nil {
				return err
			}
			_, err = ls.Finish(ctx, Success)
			return err
		}
		if err := call(); err != nil {
			t.Fatal(err)
		}
		clean := rgItemSize(rgItem(t, db, rgTable, "churn"))
		f.on.Store(true)
		const calls = 200
		failed := 0
		for range calls {
			if call() != nil {
				failed++
			}
		}
		f.on.Store(false)
		// The counters (freed, seq) may have grown by a few digits.
		if after := rgItemSize(rgItem(t, db, rgTable, "churn")); after > clean+16 {
			t.Errorf("item size after %d calls with unknown outcomes (%d failed), none live: %d bytes; want about %d, the size after one call: it grows with past callers",
				calls, failed, after, clean)
		}
		cancel()
		wg.Wait()
		for _, ls := range holders {
			_, _ = ls.Finish(context.Background(), Success)
		}
	})
}

// Invariant 11 (doc.go, "Buckets"): a call takes its tokens in the write
// that admits it to the upstream — its take — so the upstream sees at most
// a bucket's burst at once and its rate after, however long callers
// waited. A's upstream asked for a 3-minute pause; meanwhile ten of A's
// calls arrive, one every 15 s (the rate of the server's 4/min bucket) and
// wait. When the pause ends they are admitted at most PerMinute plus one
// per interval in any stretch: at most 5 in any second, not all ten.
func TestWaitersPayWhenAdmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := Rate{Name: "server", PerMinute: 4}
		interval := time.Minute / time.Duration(rate.PerMinute)
		r := Request{Key: "srv", Cap: 20, MaxQueued: 20, Hold: 10 * time.Second, Wait: 10 * time.Minute, Holder: "A", Rates: []Rate{rate}}
		l := New(db, rgTable, Options{InstanceID: "i"})
		ls, err := l.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		const pause = 3 * time.Minute
		ls.PauseFor(pause)
		if _, err := ls.Finish(ctx, Overloaded); err != nil {
			t.Fatal(err)
		}
		resumes := time.Now().Add(pause)
		const waiters = 10
		var mu sync.Mutex
		var admitted []time.Time
		var refused []error
		var wg sync.WaitGroup
		for i := range waiters {
			time.Sleep(interval)
			li := New(db, rgTable, Options{InstanceID: fmt.Sprintf("w%d", i)})
			wg.Go(func() {
				ls, err := li.Acquire(ctx, r)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refused = append(refused, err)
					return
				}
				admitted = append(admitted, time.Now())
				_, _ = ls.Finish(ctx, Success)
			})
		}
		wg.Wait()
		for _, err := range refused {
			t.Errorf("a waiting call refused: %v", err)
		}
		const stretch = time.Second
		most := rate.PerMinute + int((stretch+interval-1)/interval)
		for i, at := range admitted {
			if at.Before(resumes) {
				t.Errorf("a call admitted %v before the pause ended", resumes.Sub(at))
			}
			in := 0
			for _, b := range admitted {
				if !b.Before(at) && b.Sub(at) < stretch {
					in++
				}
			}
			if in > most {
				t.Errorf("%d calls admitted within %v of call %d (%v after the pause ended) under a bucket of %d a minute; want at most %d",
					in, stretch, i, at.Sub(resumes), rate.PerMinute, most)
				break
			}
		}
	})
}

// Invariant 14 (doc.go, "Whose turn") behind a dead waiter: a caller whose
// turn came is expected to take its place at its next look and to hold it
// a call's length from then; once that has passed and it has not taken
// it, its place is late, and the waiter behind it backs off as behind a
// late lease (half as long again each look, from 5 ms up to MaxLook)
// until the dead one's claim window passes. Calls here last 10 ms: a
// waiter that took "a call's length from now" at every look read every
// few ms for the whole claim window (hundreds of reads; the simulation's
// seed 5025479). Within the window, W = ClaimWindow + the dead ticket's
// announced period (≤ MaxLook), the back-off allows at most
// log1.5(MaxLook / 5 ms) + 2 ≈ 15 looks to reach MaxLook and W / MaxLook + 1
// after: fewer than 25.
func TestWaitersBehindADeadOneBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 30 * time.Second, Wait: time.Minute, Holder: "p"}
		h := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook})
		for range 4 { // calls on the key last 10 ms (call_ms)
			ls, err := h.Acquire(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
		}
		holder, err := h.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		buried := []*rgFreezer{rgDeadWaiter(t, ctx, db, "d", r)}
		defer func() { rgBury(cancel, buried) }()
		c := &rgCounter{API: db}
		live := New(c, rgTable, Options{InstanceID: "live", MaxLook: maxLook})
		got := make(chan error, 1)
		go func() {
			ls, err := live.Acquire(ctx, r)
			if err == nil {
				_, err = ls.Finish(ctx, Success)
			}
			got <- err
		}()
		synctest.Wait()
		if _, err := holder.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		before := c.now()
		if err := <-got; err != nil {
			t.Fatalf("the live waiter behind a dead one: %v; want the place once the dead one's claim window passed", err)
		}
		if n := c.now().minus(before); n.reads >= 25 {
			t.Errorf("the live waiter read the item %d times while the dead waiter before it held its turn (calls last 10 ms; claim window ≤ %v); want fewer than 25: a late place backs off", n.reads, ClaimWindow+maxLook)
		}
	})
}

// Invariant 14 (doc.go, "Whose turn"), with a holder that renews more
// often than a waiter's look period: a waiter expects a lease's end from
// when it first saw it, so each renewal (every 250 ms here, a 1 s hold)
// leaves its place late rather than about to free again, and its look
// follows its back-off, not every renewal. Ten waiters behind such a call
// send, once their back-off has grown, at most one look per MaxLook each.
func TestLateWaitersBackOffBehindAFastRenewingHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 16, Hold: time.Second, Wait: 5 * time.Minute, Holder: "p"}
		h := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook})
		stuck := holdAfterShortCalls(t, ctx, h, r)
		renewing := make(chan struct{})
		go func() {
			defer close(renewing)
			for ctx.Err() == nil {
				time.Sleep(250 * time.Millisecond)
				if err := stuck.Renew(ctx, r.Hold); err != nil && ctx.Err() == nil {
					t.Errorf("renewing the holder's lease: %v", err)
					return
				}
			}
		}()
		lateWaitersLook(t, ctx, cancel, db, r, maxLook, "behind a call whose holder renews every 250 ms")
		<-renewing
		if _, err := stuck.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	})
}

// lateWaitersLook has ten callers of r wait, each on an instance of its
// own reading db through a counter, lets their back-off grow (10 s), and
// fails t if in the next 30 s they send a write or more than one look per
// maxLook each; then it cancels ctx and waits for them. behind says what
// they wait behind.
func lateWaitersLook(t *testing.T, ctx context.Context, cancel context.CancelFunc, db API, r Request, maxLook time.Duration, behind string) {
	t.Helper()
	c := &rgCounter{API: db}
	const waiters = 10
	var wg sync.WaitGroup
	for i := range waiters {
		l := New(c, rgTable, Options{InstanceID: fmt.Sprintf("w%d", i), MaxLook: maxLook})
		wg.Go(func() {
			if ls, err := l.Acquire(ctx, r); err == nil {
				_, _ = ls.Finish(context.Background(), Success)
			}
		})
	}
	time.Sleep(10 * time.Second) // the back-off grows to MaxLook
	if n := rgMapLen(rgItem(t, db, rgTable, "srv"), rgQueue); n != waiters {
		t.Fatalf("%d tickets; want the %d waiters'", n, waiters)
	}
	before := c.now()
	const window = 30 * time.Second
	time.Sleep(window)
	spent := c.now().minus(before)
	if bound := int64(waiters) * int64(window/maxLook+1); spent.reads+spent.writes > bound || spent.writes > 0 {
		t.Errorf("%d waiters %s sent %d reads and %d writes in %v; want at most %d requests (one look per MaxLook %v each) and no write",
			waiters, behind, spent.reads, spent.writes, window, bound, maxLook)
	}
	cancel()
	wg.Wait()
}

// holdAfterShortCalls has h make four calls of r lasting 100 ms each (the
// key's call_ms), then take a place and keep it: the lease it returns.
func holdAfterShortCalls(t *testing.T, ctx context.Context, h *Limiter, r Request) *Lease {
	t.Helper()
	for range 4 {
		ls, err := h.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := h.Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}
