package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Buckets (doc.go): beside a waiter needing its bucket, a charge with
// tokens to spare leaves half of them to others' tokens taken between its
// view and its write — of a bucket seen below full. One seen full is
// charged, as by any charge, on condition that it is full still (a single
// write cannot both take a full bucket's token and tolerate another's), so
// a charge landing meanwhile refuses it; it then waits its turn, and with
// nobody's turn before its own takes its token at once: one refused write,
// as a newcomer's take judged from that view paid.
//
// The server's bucket holds 600 tokens. W of A waits for heavy (cap 1,
// held by H). B calls light (no cap, may wait a minute) from a view that
// shows the bucket full; before its first charge write, D's call of light
// lands its charge, leaving 598 tokens.
func TestAChargeBesideAWaiterRefusedOnAFullBucketPaysOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		db := newMemStore()
		rate, light, h, gotW := besideAWaiter(t, ctx, db, 600)
		synctest.Wait()             // W waits for heavy
		time.Sleep(2 * time.Second) // the bucket is full again
		c := &chargeBefore{memStore: db}
		others := 0
		c.other = func(i int) {
			if i > 1 {
				return
			}
			ls, err := New(db, rgTable, Options{InstanceID: "d"}).Acquire(ctx, light("D"))
			if err != nil {
				t.Logf("D's call: %v", err)
				return
			}
			others++
			_, _ = ls.Finish(ctx, Success)
		}
		lb := New(c, rgTable, Options{InstanceID: "b"})
		seen, err := lb.read(ctx, "srv") // B's view: W waiting, the bucket full
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UnixMilli()
		if got := rate[0].Tokens(seen.rates[RateAttr("server")], now); got != rate[0].PerMinute {
			t.Fatalf("B's view shows %d tokens, want the bucket full (%d)", got, rate[0].PerMinute)
		}
		before := lb.Stats()
		ls, err := lb.Acquire(ctx, light("B"))
		s := lb.Stats()
		v := itemView(t, db, "srv")
		tokens := rate[0].Tokens(v.rates[RateAttr("server")], time.Now().UnixMilli())
		writes, failed := s.Writes-before.Writes, s.FailedWrites-before.FailedWrites
		t.Logf("B: %v; %d writes (%d failed), %d charge writes; D's calls landed: %d; %d waiting; %d tokens left", err, writes, failed, c.charges, others, len(v.queue), tokens)
		if err != nil {
			t.Errorf("B's call failed: %v", err)
		} else {
			_, _ = ls.Finish(ctx, Success)
		}
		if others != 1 {
			t.Fatalf("D's call landed %d times before B's write, want once", others)
		}
		if failed > 1 || writes > 2 {
			t.Errorf("B's call, its charge judged from a view showing the bucket full (%d tokens, one ticket waiting) and refused by one other charge landing before it, took %d writes, %d of them failed; want one refused write at most, and one that lands",
				rate[0].PerMinute, writes, failed)
		}
		_, _ = h.Finish(ctx, Success)
		if err := <-gotW; err != nil {
			t.Logf("W: %v", err)
		}
	})
}

// A charge judged from its process's view (the board's, not an answer to
// it) is judged again on the item when that view refuses it (errStale),
// never refused on it; beside a waiter in such a view likewise. Sent from
// the old view and refused by the store, it would wait its turn without
// being judged again: a failed write where a read did, and a take where
// nobody waits. B's view shows W waiting; W then leaves, and D's calls of
// light land their charges: one, the bucket seen full, or six, the bucket
// holding 9 of 10 tokens as seen and 3 when B's charge lands, fewer than
// the 5 it would leave beside W. Judged again on the item, nobody waits
// and the charge lands in one write.
func TestAChargeBesideAWaiterInAnOldViewIsJudgedAgainOnTheItem(t *testing.T) {
	for _, c := range []struct {
		name      string
		perMinute int
		rest      time.Duration
		charges   int
	}{{"bucket seen full", 600, 2 * time.Second, 1}, {"bucket drained since", 10, 0, 6}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				db := newMemStore()
				wctx, wcancel := context.WithCancel(ctx)
				rate, light, h, gotW := besideAWaiter(t, wctx, db, c.perMinute)
				synctest.Wait()
				time.Sleep(c.rest)
				lb := New(db, rgTable, Options{InstanceID: "b"})
				seen, err := lb.read(ctx, "srv") // B's view: W waiting
				if err != nil {
					t.Fatal(err)
				}
				wcancel()
				t.Logf("W: %v", <-gotW)
				synctest.Wait()
				if n := len(itemView(t, db, "srv").queue); n != 0 {
					t.Fatalf("%d tickets left after W gave up", n)
				}
				for range c.charges {
					ld, err := New(db, rgTable, Options{InstanceID: "d"}).Acquire(ctx, light("D"))
					if err != nil {
						t.Fatal(err)
					}
					_, _ = ld.Finish(ctx, Success)
				}
				now := time.Now().UnixMilli()
				before := lb.Stats()
				ls, err := lb.Acquire(ctx, light("B"))
				s := lb.Stats()
				writes, failed, reads := s.Writes-before.Writes, s.FailedWrites-before.FailedWrites, s.Reads-before.Reads
				t.Logf("B: %v; %d writes (%d failed), %d reads; %d tokens as seen, %d on the item after it", err, writes, failed, reads,
					rate[0].Tokens(seen.rates[RateAttr("server")], now), rate[0].Tokens(itemView(t, db, "srv").rates[RateAttr("server")], now))
				if err != nil {
					t.Fatalf("B's call failed: %v", err)
				}
				_, _ = ls.Finish(ctx, Success)
				if failed != 0 {
					t.Errorf("B's charge, judged from an old view showing a waiter since gone, was sent and refused (%d writes, %d failed, %d reads); judged again on the item it lands in one write", writes, failed, reads)
				}
				_, _ = h.Finish(ctx, Success)
			})
		})
	}
}
