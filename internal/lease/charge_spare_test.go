package lease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Buckets (doc.go): beside waiters needing its bucket, a charge lands
// while the bucket holds a token for every ticket the item may hold when
// it lands, and one more, conditioned on size(queue) and size(tasks) —
// together at most as seen plus half the tokens to spare. A join within
// that room does not refuse it; joins beyond it do, and it then waits its
// turn: it takes a token only leaving one to each caller whose turn comes
// before it (invariant 11).
//
// The server's bucket holds 8 tokens. H1–H4 hold tool heavy (cap 4),
// leaving 4; W waits for heavy. B calls light (no cap, may not wait): its
// view (W waiting, 4 tokens) leaves 2 to spare, so the queue may hold 2
// and tasks none when its charge lands, and it leaves them 2 tokens.
// Before its first write, `joins` callers join for heavy; with 3, H1–H4
// then finish, so W's and the joiners' turns have come when the write
// lands, needing all 4 tokens.
func TestAChargeWithTokensToSpareIsRefusedByJoinsBeyondItsRoom(t *testing.T) {
	for _, joins := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d joins", joins), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				db := newMemStore()
				rate := []Rate{{Name: "server", PerMinute: 8}}
				heavy := func(who string) Request {
					return Request{Key: "srv", Tool: "heavy", ToolCap: 4, MaxQueued: 64, Wait: time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
				}
				var hs []*Lease
				for i := range 4 {
					hs = append(hs, acquire(t, New(db, rgTable, Options{InstanceID: fmt.Sprintf("h%d", i)}), heavy("A")))
				}
				var waiting sync.WaitGroup
				join := func(who string) {
					waiting.Go(func() {
						if ls, err := New(db, rgTable, Options{InstanceID: who}).Acquire(ctx, heavy(who)); err == nil {
							_, _ = ls.Finish(context.Background(), Unused)
						}
					})
					synctest.Wait()
				}
				join("W")
				lb := New(db, rgTable, Options{InstanceID: "b"})
				if _, err := lb.read(ctx, "srv"); err != nil { // B's view: W waiting, 4 tokens
					t.Fatal(err)
				}
				j := &chargeBefore{memStore: db}
				j.other = func(i int) {
					if i > 1 {
						return
					}
					for k := range joins {
						join(fmt.Sprintf("J%d", k))
					}
					if joins > 1 {
						for _, h := range hs {
							release(t, h)
						}
						hs = nil
					}
				}
				lb.db = j
				ls, err := lb.Acquire(ctx, Request{Key: "srv", Tool: "light", Hold: time.Second, Holder: "B", Rates: rate})
				v := itemView(t, db, "srv")
				now := time.Now().UnixMilli()
				tokens := rate[0].Tokens(v.rates[RateAttr("server")], now)
				due := v.walk(now, nil, rules{}, nil).ahead // places free to callers waiting, tokens aside
				t.Logf("B: %v after %d charge writes; %d waiting, %d of them whose turn came; %d tokens left", err, j.charges, len(v.queue), len(due), tokens)
				if tokens < len(due) {
					t.Errorf("B's call left %d tokens to the %d callers whose turn came, waiting for the bucket (B: %v)", tokens, len(due), err)
				}
				if joins == 1 && (err != nil || j.charges != 1) {
					t.Errorf("B's charge, a join within its room before it, got %v after %d writes; want one write that lands", err, j.charges)
				}
				if joins == 3 && len(due) != 4 {
					t.Errorf("places are free to %d callers waiting, want W and both joiners", len(due))
				}
				if ls != nil {
					_, _ = ls.Finish(ctx, Success)
				}
				cancel()
				waiting.Wait()
				for _, h := range hs {
					release(t, h)
				}
			})
		})
	}
}
