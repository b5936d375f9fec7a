package lease

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): leases, queue, tasks or tickets replaced whole by
// hand with something other than a map (an operator clearing the queue
// with an empty string, a list or NULL) does not spin a caller. The maps
// are made with if_not_exists, which keeps what is there, so a caller
// that reads the item without its maps makes them again and again at
// one instant, or its write fails on a path into what is not a map.
func TestMapsReplacedByHandDoNotSpinACaller(t *testing.T) {
	bad := map[string]types.AttributeValue{
		"S":    &types.AttributeValueMemberS{Value: ""},
		"L":    &types.AttributeValueMemberL{},
		"NULL": &types.AttributeValueMemberNULL{Value: true},
	}
	for _, attr := range []string{LeasesAttr, QueueAttr, TasksAttr, TicketsAttr} {
		for vname, v := range bad {
			t.Run(attr+"/"+vname, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					db := newMemStore()
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p"}
					// The place is held for a second: the caller's blind take
					// is refused, and it judges from the item it reads.
					held, err := New(db, rgTable, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					handEdit(t, db, v, attr)
					var wg sync.WaitGroup
					defer wg.Wait()
					wg.Go(func() {
						time.Sleep(time.Second)
						_, _ = held.Finish(ctx, Success)
					})
					wc := &writeCounter{API: db}
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
