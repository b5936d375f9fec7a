package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// purgeCounter passes a waiter's requests to the store and records when
// each purge the store refused was sent; once ctx ends (or at the 200th
// refused purge, when it ends it) it refuses every request, so a waiter
// that never blocks still ends. Before each of the waiter's writes, other
// (when set) writes the item as another writer does.
type purgeCounter struct {
	API
	ctx     context.Context
	stop    context.CancelFunc
	other   func()
	mu      sync.Mutex
	refused []time.Time
}

func (p *purgeCounter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := p.ctx.Err(); err != nil {
		return nil, err
	}
	purge := writes("REMOVE", LeasesAttr)(in) && !writes("SET", LeasesAttr)(in)
	if p.other != nil {
		p.other()
	}
	out, err := p.API.UpdateItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	if purge && errors.As(err, &ccf) {
		p.mu.Lock()
		p.refused = append(p.refused, time.Now())
		if len(p.refused) >= 200 {
			p.stop()
		}
		p.mu.Unlock()
	}
	return out, err
}

func (p *purgeCounter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := p.ctx.Err(); err != nil {
		return nil, err
	}
	return p.API.GetItem(ctx, in, opts...)
}

// burst is the most refused purges sent at one instant, and all of them.
func (p *purgeCounter) burst() (most, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return burstOf(p.refused)
}

// A refused write's retry waits a back-off (doc.go, Whose turn: "a refused
// write ... waits"): a waiter whose purge the store refuses, and whose
// item shows the same stale entries again, must not send the same purge
// at once, again and again, each costing a write unit. The item is
// anyone's to write: another principal's bucket is full, and another
// writer sets it to a new full time before each of the waiter's writes, so
// its purge, conditioned on the time seen, is refused every time, the item
// it returns showing it full again. The waiter's own principal has a
// lapsed lease, so it must purge before it takes.
func TestARefusedPurgeIsNotResentAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: time.Minute, Holder: "p"}
		// The principal's holder dies holding the place: its lease lapses.
		if _, err := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook}).Acquire(ctx, r); err != nil {
			t.Fatal(err)
		}
		other := rewriteBucket(t, db, "q")
		other()
		time.Sleep(time.Minute)
		// Two seconds of the waiter's time, or 200 refused purges.
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		pc := &purgeCounter{API: db, ctx: wctx, stop: wcancel, other: other}
		ls, _ := New(pc, rgTable, Options{InstanceID: "w", MaxLook: maxLook}).Acquire(wctx, r)
		if ls != nil {
			t.Fatal("the waiter took a place, its purges refused")
		}
		most, total := pc.burst()
		t.Logf("refused purges: %d, at most %d at one instant", total, most)
		if total == 0 {
			t.Fatal("the waiter sent no purge the store refused; want some (the bucket)")
		}
		if most > 2 {
			t.Errorf("the waiter sent %d refused purges at one instant (%d in all): a purge refused is resent at once, each a write unit", most, total)
		}
	})
}

// rewriteBucket is another writer of principal label's rate bucket on key
// srv: each call sets it, through the store, to a new time a minute or
// more past (each before the last), full, so a purge judged from the time
// before is refused and the item it returns shows the bucket full again.
func rewriteBucket(t *testing.T, db API, label string) func() {
	t.Helper()
	// Each a millisecond before the last, however little time passed.
	n, base := int64(0), time.Now().Add(-time.Minute).UnixMilli()
	return func() {
		n++
		if _, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
			TableName:                 aws.String(rgTable),
			Key:                       rgItemKey("srv"),
			UpdateExpression:          aws.String("SET #b = :n"),
			ExpressionAttributeNames:  map[string]string{"#b": RateAttr("principal:" + label)},
			ExpressionAttributeValues: map[string]types.AttributeValue{":n": number(base - n)},
		}); err != nil {
			t.Error(err)
		}
	}
}
