package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4: malformed values never cost a call never made its give-back.
// Its give-back refused as invalid over a bucket written by hand, it
// repairs once and gives back once more; with more malformed values than
// one repair puts right (maxRepair), sorting before its bucket, the second
// give-back is refused as the first was and Finish fails.
func TestAnUnusedCallGivesItsTokenBackOverManyHandEdits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		wc := &writeCounter{API: db}
		l := New(wc, rgTable, Options{InstanceID: "a"})
		r := Request{Key: "srv", Hold: time.Second, Holder: "p", Rates: []Rate{{Name: "server", PerMinute: 1}}}
		ls, err := l.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		for i := range maxRepair {
			handEdit(t, db, number(1), BreakerAttr(fmt.Sprintf("a%03d", i)))
		}
		handEdit(t, db, &types.AttributeValueMemberS{Value: "soon"}, RateAttr("server"))
		_, before := wc.burst()
		_, err = ls.Finish(ctx, Unused)
		_, total := wc.burst()
		if err != nil {
			v := parseItem(rgItem(t, db, rgTable, "srv"))
			t.Errorf("a call never made over %d malformed values, its bucket among them: %v after %d writes (%d fixes left)",
				maxRepair+1, err, total-before, len(v.fixes))
		}
	})
}
