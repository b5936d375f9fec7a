package lease

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 and 13 (doc.go): a value written by hand never loses a
// pause the upstream asked for. A call that holds nothing in the item (a
// bucket alone) writes its pause on its own at its finish, conditioned on
// the principal's entry as seen; with that entry written by hand (not a
// whole pause) the condition fails at every try, and the pause must still
// land once the entry is put right, as a release's does.
func TestAPauseOverAHandEditedEntryIsWrittenByACallHoldingNothing(t *testing.T) {
	onBothStores(t, func(t *testing.T, db API, table string) {
		for name, bad := range malformed() {
			t.Run(name, func(t *testing.T) {
				// Each its own principal: one's pause holds no other's call.
				holder := "p" + strings.ReplaceAll(name, " ", "")
				ctx := context.Background()
				key := "srv"
				l := New(db, table, Options{InstanceID: "a"})
				r := Request{Key: key, Hold: time.Second, Holder: holder, Rates: []Rate{{Name: "server", PerMinute: 600}}}
				ls, err := l.Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				// An operator writes the principal's pause entry by hand.
				handEditIn(t, db, table, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
					holder: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{gateUntil: bad}},
				}}, PauseAttr)
				if _, err := l.read(ctx, key); err != nil {
					t.Fatal(err)
				}
				ls.PauseFor(time.Minute)
				asked := ls.pauseUntil
				before := l.stats.writes.Load()
				if _, err := ls.Finish(ctx, Overloaded); err != nil {
					t.Fatal(err)
				}
				writes := l.stats.writes.Load() - before
				v := parseItem(rgItem(t, db, table, key))
				if got := v.gates[PauseAttr].entry(holder).until; got < asked {
					t.Errorf("the pause asked (until %d) was lost over a hand-edited entry %s: the item's is %d, after %d writes",
						asked, name, got, writes)
				}
			})
		}
	})
}
