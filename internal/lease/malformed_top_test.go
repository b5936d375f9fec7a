package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): the operator's hold and the adaptive limit's
// attributes written by hand as something other than a whole number do
// not wedge the key. Each reads as none, yet a take is conditioned on
// the hold comparing at most now and on the limit being the number seen
// (or absent), which neither a string nor a fraction read as 0 ever is.
func TestAMalformedHoldOrLimitDoesNotWedgeAKey(t *testing.T) {
	s := &types.AttributeValueMemberS{Value: "soon"}
	frac := &types.AttributeValueMemberN{Value: "2.5"}
	m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
	cases := map[string]struct {
		attr     string
		v        types.AttributeValue
		adaptive bool
	}{
		"hold S":   {attr: HoldAttr, v: s},
		"hold M":   {attr: HoldAttr, v: m},
		"limit S":  {attr: LimitAttr, v: s, adaptive: true},
		"limit N":  {attr: LimitAttr, v: frac, adaptive: true},
		"limit M":  {attr: LimitAttr, v: m, adaptive: true},
		"hold N":   {attr: HoldAttr, v: frac},
		"limit N0": {attr: LimitAttr, v: &types.AttributeValueMemberN{Value: "0"}, adaptive: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p"}
				if c.adaptive {
					r.Adaptive = &Adaptive{Min: 1}
				}
				// A holder dies holding the place: the caller's first take,
				// blind, is refused, and it judges the next from what it saw.
				if _, err := New(db, rgTable, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r); err != nil {
					t.Fatal(err)
				}
				handEdit(t, db, c.v, c.attr)
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

// An operator's Pause over a hold written by hand as something other than
// a whole number (which reads as none) sets the hold, rather than failing
// its condition that no longer hold stands.
func TestAPauseOverAMalformedHoldSetsIt(t *testing.T) {
	for name, v := range map[string]types.AttributeValue{
		"S": &types.AttributeValueMemberS{Value: "soon"},
		"M": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
	} {
		t.Run(name, func(t *testing.T) {
			db := newMemStore()
			ctx := context.Background()
			handEdit(t, db, v, HoldAttr)
			until := time.Now().Add(time.Minute)
			if err := NewAdmin(db, rgTable).Pause(ctx, "srv", until); err != nil {
				t.Fatalf("pause: %v", err)
			}
			if got := numberOr(rgItem(t, db, rgTable, "srv")[HoldAttr], 0); got != until.UnixMilli() {
				t.Errorf("hold %d after the pause; want %d", got, until.UnixMilli())
			}
		})
	}
}
