package lease

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Join (doc.go): a join is conditioned on seq as it judged it, so one
// that lands after a hand edit lowered seq (here to 0, below a waiter's
// number) does not number its caller before the callers already waiting:
// it fails, the repair puts seq past every ticket, and it joins again.
func TestAJoinAfterSeqLoweredByHandIsNumberedLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		ctx := context.Background()
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: time.Minute, Wait: time.Minute, Holder: "p"}
		held := acquire(t, New(mem, rgTable, Options{InstanceID: "h", MaxLook: time.Second}), r)
		done := make(chan error, 2)
		wait := func(l *Limiter, holder string) {
			r := r
			r.Holder = holder
			ls, err := l.Acquire(ctx, r)
			if err == nil {
				_, err = ls.Finish(ctx, Success)
			}
			done <- err
		}
		go wait(New(mem, rgTable, Options{InstanceID: "b", MaxLook: time.Second}), "first")
		time.Sleep(time.Second)
		synctest.Wait()

		db := &beforeWrites{API: mem}
		join := func(in *dynamodb.UpdateItemInput) bool {
			return strings.Contains(aws.ToString(in.UpdateExpression), "if_not_exists(") &&
				slices.Contains(slices.Collect(maps.Values(in.ExpressionAttributeNames)), SeqAttr)
		}
		db.match.Store(&join)
		db.before = func() {
			if db.n.Load() == 1 {
				handEdit(t, mem, number(0), SeqAttr)
			}
		}
		go wait(New(db, rgTable, Options{InstanceID: "c", MaxLook: time.Second}), "second")
		time.Sleep(time.Second)
		synctest.Wait()

		out, err := mem.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(rgTable), Key: itemKey("srv")})
		if err != nil {
			t.Fatal(err)
		}
		v := parseItem(out.Item)
		var first, second int64
		for _, tk := range v.queue {
			switch tk.label {
			case "first":
				first = tk.n
			case "second":
				second = tk.n
			}
		}
		if db.n.Load() == 0 || first == 0 || second == 0 {
			t.Fatalf("not both waiting after the edit (joins seen %d): first %d, second %d", db.n.Load(), first, second)
		}
		if second <= first {
			t.Errorf("the later caller was numbered %d, not after the waiter already numbered %d", second, first)
		}
		release(t, held)
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}
