package lease

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// readTimes passes a waiter's requests to the store and records when it
// read the item.
type readTimes struct {
	API
	mu sync.Mutex
	at []time.Time
}

func (r *readTimes) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.mu.Lock()
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	return r.API.GetItem(ctx, in, opts...)
}

func (r *readTimes) since(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, at := range r.at {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// Whose turn (doc.go): a caller before a waiter whose turn came is
// expected to hold a place a call's length from when its turn came, so
// one that never takes it makes the place late, and the waiter's looks
// back off (half as long again each, up to its period). A task is such a
// caller: its turn came, its start was marked, and no worker claims it
// (the worker died). The waiter behind it waits StartTimeout before it
// passes it over; it must not look every half call's length meanwhile,
// expecting the task's call to end a call's length from each look.
func TestAWaiterBehindAnUnclaimedTaskBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		db := newMemStore()
		var st starts
		const maxLook = time.Second
		l := New(db, rgTable, Options{InstanceID: "a", MaxLook: maxLook, OnTaskStart: st.hook})
		h := acquire(t, l, Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "p", MaxQueued: 4})
		enqueue(t, l, Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "q", MaxQueued: 4}, "task-1")
		rec := &readTimes{API: db}
		got := make(chan *Lease, 1)
		go func() {
			ls, err := New(rec, rgTable, Options{InstanceID: "w", MaxLook: maxLook}).Acquire(ctx,
				Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "r", MaxQueued: 4, Wait: time.Minute})
			if err != nil {
				t.Errorf("the waiter: %v", err)
			}
			got <- ls
		}()
		synctest.Wait()
		// A call of 200 ms: call_ms, the waiter's expected call length.
		time.Sleep(200 * time.Millisecond)
		release(t, h)
		freed := time.Now()
		synctest.Wait()
		if n := len(st.list()); n != 1 {
			t.Fatalf("starts of the task: %d; want 1 (its turn came)", n)
		}
		ls := <-got
		took := time.Now()
		if ls != nil {
			release(t, ls)
		}
		// Its looks from the place freeing to its take: back-off from
		// overdueLook, half as long again each, capped at its period.
		want, sum := 0, time.Duration(0)
		for d := overdueLook; sum < took.Sub(freed); d = min(d*3/2, maxLook) {
			sum += d
			want++
		}
		if n := rec.since(freed, took); n > want+3 {
			t.Errorf("the waiter read the item %d times in the %v the unclaimed task held its turn; want at most %d (a late place backs off)", n, took.Sub(freed), want+3)
		}
	})
}
