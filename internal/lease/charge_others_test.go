package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// chargeBefore is a store at which, ahead of each write that takes a
// token of the server's bucket (isChargeOf), other runs first: another
// caller joins, or charges.
type chargeBefore struct {
	*memStore
	other   func(i int)
	charges int
}

func (c *chargeBefore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if isChargeOf(in, "") {
		c.charges++
		c.other(c.charges)
	}
	return c.memStore.UpdateItem(ctx, in, opts...)
}

// besideAWaiter sets the scene of the tests of charges beside a waiter:
// the server's bucket of perMinute tokens, H (A) holding tool heavy (cap
// 1), and W (A) waiting for it, with ctx (its outcome on gotW; the caller
// waits with synctest.Wait for W to wait). light is a call of a tool with
// no cap, which may wait a minute, for principal who.
func besideAWaiter(t *testing.T, ctx context.Context, db *memStore, perMinute int) (rate []Rate, light func(who string) Request, h *Lease, gotW chan error) {
	rate = []Rate{{Name: "server", PerMinute: perMinute}}
	heavy := Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 64, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: "A", Rates: rate}
	light = func(who string) Request {
		return Request{Key: "srv", Tool: "light", MaxQueued: 64, Wait: time.Minute, Hold: time.Second, Holder: who, Rates: rate}
	}
	h = acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy)
	gotW = make(chan error, 1)
	go func() {
		ls, err := New(db, rgTable, Options{InstanceID: "w"}).Acquire(ctx, heavy)
		if err == nil {
			_, _ = ls.Finish(context.Background(), Unused)
		}
		gotW <- err
	}()
	for len(itemView(t, db, "srv").queue) == 0 {
		time.Sleep(time.Millisecond)
	}
	return rate, light, h, gotW
}

// Buckets (doc.go): "The charge's condition compares the bucket with now,
// never with what another write just changed, so callers of a partly
// drained bucket do not fail each other." Beside a waiter needing its
// bucket, a charge with tokens to spare gives half of them to joins and
// leaves the other half to others' tokens taken between its view and its
// write, so another call's charge meanwhile — on a busy key the commonest
// write — does not refuse it; one refused all the same waits its turn
// instead. Leaving every token it saw to the tickets and joins, each of
// its tries was refused by the charge landed before it, and after
// maxEager tries the call failed ("kept changing": the gateway's
// STORE_UNAVAILABLE) with its bucket all but full.
//
// The server's bucket holds 600 tokens. W of A waits for heavy (cap 1,
// held by H). B calls light (no cap, may wait a minute); before each of
// its writes that takes a token, D's call of light lands its charge.
func TestAChargeBesideAWaiterIsNotFailedByOthersCharges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		db := newMemStore()
		rate, light, h, gotW := besideAWaiter(t, ctx, db, 600)
		synctest.Wait() // W waits for heavy
		others := 0
		c := &chargeBefore{memStore: db}
		c.other = func(i int) {
			ls, err := New(db, rgTable, Options{InstanceID: fmt.Sprintf("d%d", i)}).Acquire(ctx, light("D"))
			if err != nil {
				t.Logf("D's call %d: %v", i, err)
				return
			}
			others++
			_, _ = ls.Finish(ctx, Success)
		}
		lb := New(c, rgTable, Options{InstanceID: "b"})
		ls, err := lb.Acquire(ctx, light("B"))
		v := itemView(t, db, "srv")
		tokens := rate[0].Tokens(v.rates[RateAttr("server")], time.Now().UnixMilli())
		s := lb.Stats()
		t.Logf("B: %v; %d writes (%d failed), %d reads; D's calls landed: %d; %d waiting; %d tokens left", err, s.Writes, s.FailedWrites, s.Reads, others, len(v.queue), tokens)
		if err != nil {
			t.Errorf("B's call, which may wait, with the bucket holding %d of %d tokens and %d ticket waiting, failed after %d writes, another call's charge landing before each: %v",
				tokens, rate[0].PerMinute, len(v.queue), s.Writes, err)
		} else {
			_, _ = ls.Finish(ctx, Success)
		}
		_, _ = h.Finish(ctx, Success)
		if err := <-gotW; err != nil {
			t.Logf("W: %v", err)
		}
	})
}

// The same on a busy key at a steady pace, no write timed against B's:
// another principal's calls with no cap land a charge every 7 ms (about
// 140 a second, the bucket refilling 100: it drains slowly from its 6,000
// tokens, never seen full), while B's process is 5 ms from the store each
// way. Each of B's tries lands at least 10 ms after the answer it was
// judged from, so a charge of D's lands in between; B's call, which may
// wait a minute, must land.
func TestAChargeBesideAWaiterLandsOnABusyKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		db := newMemStore()
		rate, light, h, gotW := besideAWaiter(t, ctx, db, 6000)
		synctest.Wait() // W waits for heavy
		stop := make(chan struct{})
		var landed, failed int
		done := make(chan struct{})
		go func() { // D's calls, from a process next to the store
			defer close(done)
			ld := New(db, rgTable, Options{InstanceID: "d"})
			tick := time.NewTicker(7 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				ls, err := ld.Acquire(ctx, light("D"))
				if err != nil {
					failed++
					continue
				}
				landed++
				_, _ = ls.Finish(ctx, Success)
			}
		}()
		time.Sleep(100 * time.Millisecond)
		far := &steadyChurn{memStore: db, match: isChargeOf} // 5 ms each way
		lb := New(far, rgTable, Options{InstanceID: "b"})
		begin := time.Now()
		ls, err := lb.Acquire(ctx, light("B"))
		took := time.Since(begin)
		close(stop)
		<-done
		v := itemView(t, db, "srv")
		tokens := rate[0].Tokens(v.rates[RateAttr("server")], time.Now().UnixMilli())
		s := lb.Stats()
		t.Logf("B: %v after %v; %d writes (%d failed), %d reads; D's calls: %d landed, %d failed; %d tokens left", err, took, s.Writes, s.FailedWrites, s.Reads, landed, failed, tokens)
		if err != nil {
			t.Errorf("B's call, which may wait, with the bucket holding %d of %d tokens and one ticket waiting, failed after %d writes in %v: %v",
				tokens, rate[0].PerMinute, s.Writes, took, err)
		} else {
			_, _ = ls.Finish(ctx, Success)
		}
		_, _ = h.Finish(ctx, Success)
		if err := <-gotW; err != nil {
			t.Logf("W: %v", err)
		}
	})
}
