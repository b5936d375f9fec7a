package lease

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): a call never made gives its tokens back over an
// item written by hand. The give-back ADDs to the bucket and to freed; a
// bucket or freed written as a string makes the store refuse it as
// invalid, and the token was lost: a key allowed one call a minute
// refused the next caller for the rest of the minute.
func TestAnUnusedCallGivesItsTokenBackOverAnItemWrittenByHand(t *testing.T) {
	edits := map[string][]string{
		"its bucket a string": {RateAttr("server")},
		"freed a string":      {FreedAttr},
	}
	for name, path := range edits {
		t.Run(name, func(t *testing.T) {
			onBothStores(t, func(t *testing.T, db API, table string) {
				ctx := context.Background()
				r := Request{Key: "srv", Holder: "p", Hold: time.Second, Rates: []Rate{{Name: "server", PerMinute: 1}}}
				ls, err := New(db, table, Options{InstanceID: "a"}).Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				handEditIn(t, db, table, &types.AttributeValueMemberS{Value: "soon"}, path...)
				if _, err := ls.Finish(ctx, Unused); err != nil {
					t.Errorf("a call never made over %s: %v", name, err)
				}
				next, err := New(db, table, Options{InstanceID: "b"}).Acquire(ctx, r)
				if err != nil {
					t.Fatalf("the next call, its token given back: %v", err)
				}
				if _, err := next.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
