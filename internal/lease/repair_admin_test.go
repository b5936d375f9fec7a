package lease

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Admin's Release removes a lease whole, conditioned on its expiry as
// read. A lease written by hand with an expiry that is not a whole number
// reads as never expiring (it holds its place for ever, and is no value
// the repair puts right), yet Release conditions its removal on the
// largest number (what it read it as), which no stored value equals: the
// operator cannot free the place, and a key of cap 1 stays wedged.
func TestAdminReleasesALeaseWrittenByHandWithAnExpiryNotWhole(t *testing.T) {
	for name, exp := range map[string]types.AttributeValue{
		"S":     &types.AttributeValueMemberS{Value: "soon"},
		"N 1.5": &types.AttributeValueMemberN{Value: "1.5"},
	} {
		t.Run(name, func(t *testing.T) {
			onBothStores(t, func(t *testing.T, db API, table string) {
				ctx := context.Background()
				r := Request{Key: "srv", Cap: 1, Hold: time.Second, MaxQueued: 8, Holder: "p"}
				ls, err := New(db, table, Options{InstanceID: "a"}).Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ls.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				handEditIn(t, db, table, exp, LeasesAttr, "x")
				if err := NewAdmin(db, table).Release(ctx, "srv", "x"); err != nil {
					t.Errorf("release of the lease written by hand: %v", err)
				}
				if _, err := New(db, table, Options{InstanceID: "b"}).Acquire(ctx, r); err != nil {
					t.Errorf("a caller of cap 1 after the release: %v", err)
				}
			})
		})
	}
}

// Admin's Release and ResetBreaker ADD 1 to freed: over a freed written
// by hand as another type, the store refuses them as invalid, and,
// unlike a lease's own release, they neither repair nor try again.
func TestAdminWritesOverAMalformedFreedAreMade(t *testing.T) {
	onBothStores(t, func(t *testing.T, db API, table string) {
		ctx := context.Background()
		r := Request{Key: "srv", Cap: 2, Hold: 30 * time.Second, MaxQueued: 8, Holder: "p",
			Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}}
		l := New(db, table, Options{InstanceID: "a"})
		ls, err := l.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Finish(ctx, Failure); err != nil { // opens the principal's entry
			t.Fatal(err)
		}
		held, err := l.Acquire(ctx, Request{Key: "srv", Cap: 2, Hold: 30 * time.Second, MaxQueued: 8, Holder: "q"})
		if err != nil {
			t.Fatal(err)
		}
		handEditIn(t, db, table, &types.AttributeValueMemberS{Value: "x"}, FreedAttr)
		a := NewAdmin(db, table)
		if err := a.Release(ctx, "srv", held.ID()); err != nil {
			t.Errorf("admin release: %v", err)
		}
		if err := a.ResetBreaker(ctx, "srv", "t"); err != nil {
			t.Errorf("admin reset breaker: %v", err)
		}
	})
}
