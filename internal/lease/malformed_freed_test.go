package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): freed written by hand as something other than a
// whole number does not wedge the key. Writes condition freed on the
// number seen and ADD 1 to it when they purge: a fraction stays one, and
// ADD fails on a string or a map, so each such write would be refused
// for ever.
func TestAMalformedFreedDoesNotWedgeAKey(t *testing.T) {
	bad := map[string]types.AttributeValue{
		"N 1.5": &types.AttributeValueMemberN{Value: "1.5"},
		"S":     &types.AttributeValueMemberS{Value: "3"},
		"M":     &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
	}
	for name, freed := range bad {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				// A principal cap conditions every take on freed as seen.
				r := Request{Key: "srv", Cap: 1, PrincipalCap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p"}
				// A holder dies holding the place: the caller purges its
				// lapsed lease, which ADDs 1 to freed.
				if _, err := New(db, rgTable, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r); err != nil {
					t.Fatal(err)
				}
				handEdit(t, db, freed, FreedAttr)
				time.Sleep(3 * time.Second)
				wc := &writeCounter{API: db}
				ls, err := New(wc, rgTable, Options{InstanceID: "b", MaxLook: time.Second}).Acquire(ctx, r)
				most, total := wc.burst()
				t.Logf("acquire: %v; %d writes, at most %d at one instant", err, total, most)
				if err != nil {
					t.Fatalf("a caller on a free key: %v", err)
				}
				if _, err := ls.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				// One write more than on a sound item: the repair.
				if most > 4 || total > 5 {
					t.Errorf("%d writes, %d at one instant, to take a free place", total, most)
				}
			})
		})
	}
}
