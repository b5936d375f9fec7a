package lease

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): a principal's, a tool's or a waiting set written
// by hand as something other than a string set does not wedge the key. A
// take ADDs its lease id to its principal's set (and its capped tool's),
// a join to its principal's waiting set: ADD fails on a string, a number
// set or a list, so every take or join of that principal would fail.
func TestSetsWrittenByHandAsOtherTypesDoNotWedgeAKey(t *testing.T) {
	bad := map[string]types.AttributeValue{
		"S":  &types.AttributeValueMemberS{Value: "x"},
		"NS": &types.AttributeValueMemberNS{Value: []string{"1"}},
		"L":  &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}}},
	}
	sets := map[string]string{"principal": PrincipalAttr("p"), "tool": ToolAttr("t"), "waiting": WaitingAttr("p")}
	for sname, attr := range sets {
		for vname, v := range bad {
			t.Run(sname+"/"+vname, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					db := newMemStore()
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 10 * time.Second, Wait: 10 * time.Second, Holder: "q",
						Tool: "t", ToolCap: 1}
					// Another principal holds the place for 3 s: p waits, and
					// takes it when it frees.
					held, err := New(db, rgTable, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					handEdit(t, db, v, attr)
					var wg sync.WaitGroup
					defer wg.Wait()
					wg.Go(func() {
						time.Sleep(3 * time.Second)
						_, _ = held.Finish(ctx, Success)
					})
					wc := &writeCounter{API: db}
					r.Holder = "p"
					ls, err := New(wc, rgTable, Options{InstanceID: "b", MaxLook: time.Second}).Acquire(ctx, r)
					most, total := wc.burst()
					t.Logf("acquire: %v; %d writes, at most %d at one instant", err, total, most)
					if err != nil {
						t.Fatalf("a waiter: %v", err)
					}
					if _, err := ls.Finish(ctx, Success); err != nil {
						t.Fatal(err)
					}
					// One write more than on a sound item: the repair.
					if most > 4 || total > 13 {
						t.Errorf("%d writes, %d at one instant, to wait for a place", total, most)
					}
				})
			})
		}
	}
}
