package lease

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): a repair puts right up to maxRepair values and
// the next the rest. With more than maxRepair malformed values, freed
// among those left for the next, the first repair still ADDs 1 to freed:
// on a freed of another type the store refuses the whole write as invalid,
// every repair alike, and no caller of the key gets a place again.
func TestMoreThanMaxRepairMalformedValuesWithFreedAmongTheRestAreRepaired(t *testing.T) {
	onBothStores(t, func(t *testing.T, db API, table string) {
		ctx := context.Background()
		r := Request{Key: "srv", Cap: 1, Hold: time.Second, Wait: 5 * time.Second, MaxQueued: 8, Holder: "p"}
		ls, err := New(db, table, Options{InstanceID: "a"}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		// maxRepair gates written by hand as numbers, each sorting before
		// freed, and freed written as a string.
		for i := range maxRepair {
			handEditIn(t, db, table, number(1), BreakerAttr(fmt.Sprintf("b%02d", i)))
		}
		handEditIn(t, db, table, &types.AttributeValueMemberS{Value: "x"}, FreedAttr)
		// The first caller takes the place blind (no view); its release
		// ADDs to freed, and the next caller reads the item and repairs.
		for _, who := range []string{"b", "c"} {
			wc := &writeCounter{API: db}
			ls, err := New(wc, table, Options{InstanceID: who}).Acquire(ctx, r)
			_, total := wc.burst()
			t.Logf("%s: acquire: %v; %d writes", who, err, total)
			if err != nil {
				t.Errorf("caller %s on a free key with %d malformed values: %v", who, maxRepair+1, err)
				continue
			}
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Errorf("caller %s gives its place back: %v", who, err)
			}
		}
		if f := rgItem(t, db, table, "srv")[FreedAttr]; isMalformed(FreedAttr, f) {
			t.Errorf("freed is still %#v", f)
		}
	})
}

// Invariant 4 (doc.go): a repair sets a seq below a ticket's number to
// one past every ticket. A ticket numbered by hand the largest whole
// number a view reads makes that one past it wrap to the smallest: the
// repair lands, the seq it wrote is below the ticket again, and the
// caller repairs again and again, each write landing, with no pause.
func TestASeqBelowATicketNumberedMaxInt64IsRepairedOnce(t *testing.T) {
	checkCallerGetsItsPlace(t, malformedCase{
		r: Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p"},
		edit: func(t *testing.T, db API) {
			// A whole ticket of principal q, live for an hour, numbered by hand.
			handEdit(t, db, number(math.MaxInt64), QueueAttr, "x")
			handEdit(t, db, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				ticketLabel: &types.AttributeValueMemberS{Value: "q"}, ticketDeadline: number(time.Now().Add(time.Hour).UnixMilli())}},
				TicketsAttr, "x")
			handEdit(t, db, &types.AttributeValueMemberSS{Value: []string{"x"}}, WaitingAttr("q"))
			handEdit(t, db, number(5), SeqAttr)
		},
		// The ticket's caller never comes for its turn: after its claim
		// window the caller passes it over. A repair, joins, looks, a take.
		most: 4, total: 12,
	})
}
