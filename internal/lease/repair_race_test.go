package lease

import (
	"context"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 and first come, first served (doc.go): a repair is
// conditioned on each value it fixes as stored, so it never removes what
// a write made since its view. An operator takes a waiter's queue entry
// out by hand, leaving the rest of its ticket (a half). The waiter reads
// it, repairs, and joins again under its id, a whole ticket; a repair
// judged by another caller from the view with the half then lands. It is
// conditioned on the half's tickets entry being a map and its waiting set
// a set, which the new ticket's are: it takes them away, and the live
// waiter's ticket is a half again, removed by the next repair.
func TestARepairJudgedBeforeAWaitersJoinLeavesItsTicket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: time.Minute, Wait: time.Minute, Holder: "p"}
		held := acquire(t, New(db, rgTable, Options{InstanceID: "h", MaxLook: time.Second}), r)
		done := make(chan error, 1)
		go func() {
			ls, err := New(db, rgTable, Options{InstanceID: "x", MaxLook: time.Second}).Acquire(ctx, r)
			if err == nil {
				_, _ = ls.Finish(context.Background(), Success)
			}
			done <- err
		}()
		synctest.Wait()
		queue := func() map[string]types.AttributeValue {
			q, _ := rgItem(t, db, rgTable, "srv")[QueueAttr].(*types.AttributeValueMemberM)
			if q == nil {
				return nil
			}
			return q.Value
		}
		ids := slices.Collect(maps.Keys(queue()))
		if len(ids) != 1 {
			t.Fatalf("queue %v; want the waiter's ticket", ids)
		}
		x := ids[0]
		// The operator takes its queue entry out by hand.
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(rgTable), Key: rgItemKey("srv"),
			UpdateExpression:         aws.String("REMOVE #q.#x"),
			ExpressionAttributeNames: map[string]string{"#q": QueueAttr, "#x": x},
		}); err != nil {
			t.Fatal(err)
		}
		y := New(db, rgTable, Options{InstanceID: "y"})
		stale, err := y.read(ctx, "srv")
		if err != nil {
			t.Fatal(err)
		}
		if !stale.needsRepair() {
			t.Fatal("the half ticket is no fix")
		}
		// The waiter looks again: it repairs and joins again.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if now := parseItem(rgItem(t, db, rgTable, "srv")); now.ticketFor(x) == nil {
			t.Fatalf("the waiter did not join again: queue %v", slices.Collect(maps.Keys(queue())))
		}
		// The repair judged from the view with the half lands now.
		if _, err := y.repair(ctx, "srv", stale); err != nil {
			t.Fatal(err)
		}
		if now := parseItem(rgItem(t, db, rgTable, "srv")); now.ticketFor(x) == nil {
			t.Errorf("a repair judged before the waiter joined again took its ticket apart: halves %v", now.halves)
		}
		release(t, held)
		if err := <-done; err != nil {
			t.Errorf("the waiter: %v", err)
		}
	})
}
