package lease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 and first come, first served (doc.go): a seq written by
// hand below the tickets waiting (an operator resetting it to 0) is as
// malformed as one not whole. A join that adds 1 to it numbers a
// newcomer before the callers waiting longest, and the joins after it
// give numbers the queue holds already, so two waiters share a rank.
// The next join numbers its ticket past every ticket it sees.
func TestASeqLoweredByHandNumbersNoTicketBeforeOthers(t *testing.T) {
	for _, seq := range []int64{0, 1} {
		t.Run(fmt.Sprint(seq), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 10 * time.Second, Wait: 20 * time.Second, Holder: "p"}
				held, err := New(db, rgTable, Options{InstanceID: "h", MaxLook: time.Second}).Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				defer wg.Wait()
				var mu sync.Mutex
				var order []string
				wait := func(name string) {
					l := New(db, rgTable, Options{InstanceID: name, MaxLook: time.Second})
					wg.Go(func() {
						ls, err := l.Acquire(ctx, r)
						if err != nil {
							t.Errorf("%s: %v", name, err)
							return
						}
						mu.Lock()
						order = append(order, name)
						mu.Unlock()
						_, _ = ls.Finish(context.Background(), Success)
					})
					synctest.Wait()
				}
				wait("a")
				wait("b")
				numbers := func() map[string]int64 {
					q, _ := rgItem(t, db, rgTable, "srv")[rgQueue].(*types.AttributeValueMemberM)
					out := map[string]int64{}
					if q != nil {
						for id, n := range q.Value {
							out[id] = numberOr(n, -1)
						}
					}
					return out
				}
				before := numbers()
				if len(before) != 2 {
					t.Fatalf("queue %v; want a's and b's tickets", before)
				}
				handEdit(t, db, number(seq), SeqAttr)
				wait("c")
				after := numbers()
				for id, n := range after {
					if _, old := before[id]; old {
						continue
					}
					for oid, on := range before {
						if n <= on {
							t.Errorf("the newcomer's ticket is numbered %d, ticket %s of a caller waiting before it %d", n, oid, on)
						}
					}
				}
				time.Sleep(time.Second)
				if _, err := held.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				if fmt.Sprint(order) != "[a b c]" {
					t.Errorf("served %v; want first come, first served: [a b c]", order)
				}
			})
		})
	}
}
