package lease

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): a holder that gives its place back over an item
// written by hand (freed, or its tool's or principal's set, as another
// type) gives it back. Its release ADDs 1 to freed and DELETEs its id from
// the sets; over a value of another type the store refuses the write (no
// condition failure: a validation error), and with no caller reading the
// item before, no repair runs: the place stays taken until the lease
// lapses, and the caller after waits the holder's whole term.
func TestAReleaseOverAnItemWrittenByHandGivesThePlaceBack(t *testing.T) {
	edits := map[string]func(r Request) (string, types.AttributeValue){
		"freed S": func(Request) (string, types.AttributeValue) {
			return FreedAttr, &types.AttributeValueMemberS{Value: "3"}
		},
		"freed M": func(Request) (string, types.AttributeValue) {
			return FreedAttr, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
		},
		"principal set S": func(r Request) (string, types.AttributeValue) {
			return PrincipalAttr(r.Holder), &types.AttributeValueMemberS{Value: "x"}
		},
		"tool set L": func(r Request) (string, types.AttributeValue) {
			return ToolAttr(r.Tool), &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}}}
		},
		"waiting set NS": func(r Request) (string, types.AttributeValue) {
			return WaitingAttr(r.Holder), &types.AttributeValueMemberNS{Value: []string{"1"}}
		},
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			onBothStores(t, func(t *testing.T, db API, table string) {
				ctx := context.Background()
				r := Request{Key: "srv", Cap: 1, Hold: time.Minute, Wait: 0, MaxQueued: 8, Holder: "p", Tool: "t", ToolCap: 1}
				held, err := New(db, table, Options{InstanceID: "a"}).Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				attr, v := edit(r)
				handEditIn(t, db, table, v, attr)
				if _, err := held.Finish(ctx, Success); err != nil {
					t.Errorf("release over %s written as %T: %v", attr, v, err)
				}
				if leases, _ := rgItem(t, db, table, "srv")[LeasesAttr].(*types.AttributeValueMemberM); leases != nil && len(leases.Value) > 0 {
					t.Errorf("after the release the item still holds %d leases (the holder's term: %v)", len(leases.Value), r.Hold)
				}
				// A caller that comes after, not waiting, is refused for the
				// rest of the term.
				ls, err := New(db, table, Options{InstanceID: "b"}).Acquire(ctx, r)
				if err != nil {
					t.Errorf("a caller after the release: %v", err)
					return
				}
				_, _ = ls.Finish(ctx, Success)
			})
		})
	}
}
