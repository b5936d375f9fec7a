package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 and Tasks (doc.go): a task's start mark written by hand as
// something other than a whole number reads as none, so its start is
// due when its turn comes; the mark must not be conditioned on it
// comparing with now (a string never does), nor a caller's pass of the
// task on it being 0. Else the task is never started and the caller
// behind it never gets the free place.
func TestAMalformedStartMarkDoesNotWedgeATaskOrTheCallersBehind(t *testing.T) {
	for name, v := range map[string]types.AttributeValue{
		"S":     &types.AttributeValueMemberS{Value: "x"},
		"N 1.5": &types.AttributeValueMemberN{Value: "1.5"},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				db := newMemStore()
				var st starts
				const maxLook = time.Second
				l := New(db, rgTable, Options{InstanceID: "a", MaxLook: maxLook, OnTaskStart: st.hook})
				h := acquire(t, l, Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "p", MaxQueued: 4})
				id := enqueue(t, l, Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "q", MaxQueued: 4}, "task-1")
				handEdit(t, db, v, TicketsAttr, id, ticketStarted)
				got := make(chan *Lease, 1)
				go func() {
					ls, err := New(db, rgTable, Options{InstanceID: "w", MaxLook: maxLook}).Acquire(ctx,
						Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "r", MaxQueued: 4, Wait: time.Minute})
					if err != nil {
						t.Errorf("the caller behind the task: %v", err)
					}
					got <- ls
				}()
				synctest.Wait()
				time.Sleep(200 * time.Millisecond)
				release(t, h)
				synctest.Wait()
				if n := len(st.list()); n != 1 {
					t.Errorf("starts of the task: %d; want 1 (its turn came)", n)
				}
				if ls := <-got; ls != nil {
					release(t, ls)
				}
			})
		})
	}
}
