package lease

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): a caller whose view shows a malformed value puts
// it right first. A call that only pays its buckets (no cap, no breaker:
// charge) never repairs: its charge of a bucket whose time was written by
// hand as a string is conditioned on the bucket being absent or before now,
// which a string never is, so every such call of the key fails; and a
// queue entry written by hand (numbered 0: no ticket) fails its condition
// that the queue holds no ticket more than it sees.
func TestACallThatOnlyPaysItsBucketsRepairsTheItem(t *testing.T) {
	edits := map[string]func(t *testing.T, db API, table string){
		"its bucket a string": func(t *testing.T, db API, table string) {
			handEditIn(t, db, table, &types.AttributeValueMemberS{Value: "soon"}, RateAttr("server"))
		},
		"a queue entry numbered 0": func(t *testing.T, db API, table string) {
			handEditIn(t, db, table, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": number(0)}}, QueueAttr)
		},
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			onBothStores(t, func(t *testing.T, db API, table string) {
				ctx := context.Background()
				r := Request{Key: "srv", Holder: "p", Hold: time.Second, Rates: []Rate{{Name: "server", PerMinute: 600}}}
				ls, err := New(db, table, Options{InstanceID: "a"}).Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ls.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				edit(t, db, table)
				for _, who := range []string{"b", "c"} {
					wc := &writeCounter{API: db}
					ls, err := New(wc, table, Options{InstanceID: who}).Acquire(ctx, r)
					_, total := wc.burst()
					t.Logf("%s: %v; %d writes", who, err, total)
					if err != nil {
						t.Errorf("caller %s of a key with a bucket alone: %v", who, err)
						continue
					}
					if _, err := ls.Finish(ctx, Success); err != nil {
						t.Fatal(err)
					}
				}
			})
		})
	}
}
