package lease

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): every write judges only values of the protocol's
// shapes. The adaptive limit's limit_sig is a principal's label; written by
// hand as another type it reads as none, and a release with down evidence
// records its own on condition that there is none, which fails at every
// try. Nothing repairs it: after maxEager tries the release gives up its
// extras, so every failing call on the key sends eight writes and its
// breaker's failure and its upstream's pause are lost.
func TestALimitSigWrittenByHandLosesNoFailureNorPause(t *testing.T) {
	onBothStores(t, func(t *testing.T, db API, table string) {
		for name, bad := range map[string]types.AttributeValue{
			"N": number(7),
			"M": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": number(1)}},
			"L": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}}},
		} {
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				holder := "p" + name
				// No pause of an earlier case's stands (two principals'
				// would hold everyone).
				handEditIn(t, db, table, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, PauseAttr)
				handEditIn(t, db, table, number(4), LimitAttr)
				handEditIn(t, db, table, bad, LimitSigAttr)
				wc := &writeCounter{API: db}
				l := New(wc, table, Options{InstanceID: "a" + name})
				br := &Breaker{Name: "t" + name, Threshold: 1, Recovery: time.Minute}
				r := Request{Key: "srv", Cap: 4, Adaptive: &Adaptive{Min: 1}, Hold: time.Second, Holder: holder, Tool: "t" + name, Breaker: br}
				ls, err := l.Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				ls.PauseFor(time.Minute)
				asked := ls.pauseUntil
				_, before := wc.burst()
				tr, err := ls.Finish(ctx, Failure)
				if err != nil {
					t.Fatal(err)
				}
				_, after := wc.burst()
				v := parseItem(rgItem(t, db, table, "srv"))
				if tr != OpenedForPrincipal || v.gates[PauseAttr].entry(holder).until < asked {
					t.Errorf("limit_sig %s by hand: the release's failure made %v (want %v) and its pause is until %d (asked %d), in %d writes",
						name, tr, OpenedForPrincipal, v.gates[PauseAttr].entry(holder).until, asked, after-before)
				}
			})
		}
	})
}
