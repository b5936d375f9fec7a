package lease

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// halfWatch records every half ticket an item written shows.
type halfWatch struct {
	API
	mu     sync.Mutex
	halves []string
}

func (w *halfWatch) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := w.API.UpdateItem(ctx, in, opts...)
	if err == nil {
		w.mu.Lock()
		for _, h := range parseItem(out.Attributes).halves {
			w.halves = append(w.halves, fmt.Sprintf("%s numbered %d", h.id, h.n))
		}
		w.mu.Unlock()
	}
	return out, err
}

// Invariant 4 (doc.go): a seq the repair leaves numbers the next join a
// whole ticket. A ticket numbered maxNumber (2^62) or more is a half; a
// seq is repaired when past maxNumber, so a hand edit setting it to
// maxNumber, or one less, is left, and the next caller to join writes a
// ticket numbered maxNumber or more: its own half, which the repair that
// its join's answer calls for takes apart, and it joins again.
func TestASeqAtMaxNumberNumbersNoHalf(t *testing.T) {
	for _, seq := range []int64{maxNumber - 1, maxNumber} {
		t.Run(strconv.FormatInt(seq, 10), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx := context.Background()
				r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: time.Minute, Wait: time.Minute, Holder: "p"}
				held := acquire(t, New(db, rgTable, Options{InstanceID: "h", MaxLook: time.Second}), r)
				handEdit(t, db, number(seq), SeqAttr)
				hw := &halfWatch{API: db}
				wc := &writeCounter{API: hw}
				done := make(chan error, 1)
				go func() {
					ls, err := New(wc, rgTable, Options{InstanceID: "w", MaxLook: time.Second}).Acquire(ctx, r)
					if err == nil {
						_, err = ls.Finish(ctx, Success)
					}
					done <- err
				}()
				time.Sleep(3 * time.Second)
				synctest.Wait()
				_, waiting := wc.burst()
				release(t, held)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if len(hw.halves) > 0 {
					t.Errorf("seq %d: the waiter's join wrote a half ticket (%v), taken apart again; %d writes while it waited",
						seq, hw.halves, waiting)
				}
			})
		})
	}
}
