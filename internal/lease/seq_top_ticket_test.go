package lease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go, Repair): a ticket written by hand numbered
// maxNumber − 1 or maxNumber − 2 is whole, and one past it, as the repair
// sets seq, is maxNumber or maxNumber − 1, from which a join would number
// a half: it reads as malformed again after each repair, and every
// caller after it fails over repairs that never end. The callers after
// it must wait and take the place as after any ticket whose caller never
// comes (passed over after its claim window), the item left with seq
// whole. A seq written by hand maxNumber − 2 is whole: the join from it
// numbers maxNumber − 1, and its caller must wait and be served.
func TestATicketNumberedAtTheTopByHandDoesNotWedgeTheCallersAfterIt(t *testing.T) {
	ticketAt := func(n int64) func(now time.Time) []edit {
		return func(now time.Time) []edit {
			return []edit{
				at(number(n), QueueAttr, "x"),
				at(mv(map[string]types.AttributeValue{ticketLabel: sv("q"), ticketDeadline: number(now.Add(time.Hour).UnixMilli())}), TicketsAttr, "x"),
				at(&types.AttributeValueMemberSS{Value: []string{"x"}}, WaitingAttr("q")),
				at(number(5), SeqAttr),
			}
		}
	}
	seqBelowTheTop := func(t *testing.T, item map[string]types.AttributeValue) {
		t.Helper()
		if seq := numberOr(item[SeqAttr], -1); seq < 0 || seq >= maxNumber-1 {
			t.Errorf("seq is %v after the callers; want it whole", item[SeqAttr])
		}
	}
	for _, n := range []int64{maxNumber - 1, maxNumber - 2} {
		for _, release := range []time.Duration{0, 3 * time.Second} {
			t.Run(fmt.Sprint(n, "/holder gives back after ", release), func(t *testing.T) {
				c := takeCase{r: capOne(2*time.Second, 10*time.Second), edits: ticketAt(n),
					release: release, most: 4, total: 12, noHalf: true, after: seqBelowTheTop}
				if release == 0 {
					onBothStores(t, c.run) // the renumbering, as the store judges it
					return
				}
				synctest.Test(t, func(t *testing.T) { c.run(t, newMemStore(), rgTable) })
			})
		}
	}
	t.Run("a waiter joining from seq maxNumber − 2", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			db := newMemStore()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := capOne(time.Hour, 10*time.Second)
			held, err := New(db, rgTable, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			handEdit(t, db, number(maxNumber-2), SeqAttr)
			var wg sync.WaitGroup
			defer wg.Wait()
			wg.Go(func() {
				time.Sleep(3 * time.Second)
				_, _ = held.Finish(ctx, Success)
			})
			ls, err := New(db, rgTable, Options{InstanceID: "b", MaxLook: time.Second}).Acquire(ctx, r)
			if err != nil {
				t.Fatalf("a waiter joining from seq %d: %v", maxNumber-2, err)
			}
			_, _ = ls.Finish(ctx, Success)
		})
	})
}
