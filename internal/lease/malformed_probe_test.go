package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): a half-open breaker entry whose probe fields were
// written by hand as something other than a whole number does not wedge
// the key. A probe's expiry that is not a whole number reads as 0 (no
// probe running), so the caller is made the probe; its take must not be
// conditioned on that expiry comparing below now (a string never does),
// nor a bar's time that reads as 0 on comparing at most now.
func TestMalformedProbeFieldsDoNotWedgeAHalfOpenBreaker(t *testing.T) {
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	entries := map[string]func(now int64) map[string]types.AttributeValue{
		"everyone's probe expiry a string": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{gateAll: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateProbe: s("gone"), gateProbeExp: s("soon")}}}
		},
		"everyone's probe expiry a fraction": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{gateAll: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateProbe: s("gone"), gateProbeExp: n("1.5")}}}
		},
		"everyone's probe a number, with no expiry": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{gateAll: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateProbe: n("7")}}}
		},
		"the caller's bar with no time": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"p": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateBarred: s("p")}}}
		},
		"the caller's bar a string": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"p": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateBarred: s("p"), gateBarUntil: s("later")}}}
		},
	}
	for name, entry := range entries {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p",
					Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second}}
				ls, err := New(db, rgTable, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ls.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				handEdit(t, db, &types.AttributeValueMemberM{Value: entry(time.Now().UnixMilli())}, BreakerAttr("t"))
				wc := &writeCounter{API: db}
				ls, err = New(wc, rgTable, Options{InstanceID: "b", MaxLook: time.Second}).Acquire(ctx, r)
				most, total := wc.burst()
				t.Logf("acquire: %v; %d writes, at most %d at one instant", err, total, most)
				if err != nil {
					t.Fatalf("the one caller of a half-open breaker, as its probe: %v", err)
				}
				if _, err := ls.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				if total > 4 {
					t.Errorf("%d writes to take a free place", total)
				}
			})
		})
	}
}
