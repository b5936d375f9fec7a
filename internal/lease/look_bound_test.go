package lease

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 8 (doc.go, "Whose turn"): a dead waiter before a live one
// delays it by its claim window, ClaimWindow + MaxLookFar at most,
// whatever its ticket says. The item is anyone's to write (an operator's
// edit, a buggy or older writer): a ticket announcing a look period of a
// day would otherwise hold a free place from the live waiter behind it
// until the dead one's deadline, an hour here.
func TestAnAbsurdLookPeriodDoesNotHoldAFreePlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 30 * time.Second, Wait: time.Hour, Holder: "p"}
		holder, err := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		dead := rgDeadWaiter(t, ctx, db, "d", r)
		defer rgBury(cancel, []*rgFreezer{dead})
		var id string
		for tid := range rgItem(t, db, rgTable, "srv")[rgTickets].(*types.AttributeValueMemberM).Value {
			if strings.HasPrefix(tid, "d.") {
				id = tid
			}
		}
		if id == "" {
			t.Fatal("the dead waiter left no ticket")
		}
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(rgTable),
			Key:                       rgItemKey("srv"),
			UpdateExpression:          aws.String("SET #t.#id.#l = :v"),
			ExpressionAttributeNames:  map[string]string{"#t": rgTickets, "#id": id, "#l": "l"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "86400000"}},
		}); err != nil {
			t.Fatal(err)
		}
		type result struct {
			ls  *Lease
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		go func() {
			ls, err := New(db, rgTable, Options{InstanceID: "live", MaxLook: maxLook}).Acquire(ctx, r)
			got <- result{ls, err, time.Now()}
		}()
		synctest.Wait()
		freed := time.Now()
		if _, err := holder.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		res := <-got
		bound := ClaimWindow + MaxLookFar + maxLook
		if res.err != nil {
			t.Fatalf("the live waiter behind a dead one announcing a day's look period: %v after %v; want the place within %v",
				res.err, res.at.Sub(freed), bound)
		}
		defer func() { _, _ = res.ls.Finish(ctx, Success) }()
		if waited := res.at.Sub(freed); waited > bound {
			t.Errorf("the live waiter got the free place %v after it freed, behind a dead waiter whose ticket announces a day's look period; want within %v (ClaimWindow + MaxLookFar + a look)",
				waited, bound)
		}
	})
}
