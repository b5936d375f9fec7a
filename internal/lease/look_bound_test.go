package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 8 (doc.go, "Whose turn"): a dead waiter before a live one
// delays it by its claim window, ClaimWindow + MaxLookFar at most,
// whatever its ticket says. The item is anyone's to write (an operator's
// edit, a buggy or older writer): a ticket announcing a look period of a
// day would otherwise hold a free place from the live waiter behind it
// until the dead one's deadline, an hour here.
func TestAnAbsurdLookPeriodDoesNotHoldAFreePlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 30 * time.Second, Wait: time.Hour, Holder: "p"}
		holder, err := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		dead := rgDeadWaiter(t, ctx, db, "d", r)
		defer rgBury(cancel, []*rgFreezer{dead})
		var id string
		for tid := range rgItem(t, db, rgTable, "srv")[rgTickets].(*types.AttributeValueMemberM).Value {
			if strings.HasPrefix(tid, "d.") {
				id = tid
			}
		}
		if id == "" {
			t.Fatal("the dead waiter left no ticket")
		}
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(rgTable),
			Key:                       rgItemKey("srv"),
			UpdateExpression:          aws.String("SET #t.#id.#l = :v"),
			ExpressionAttributeNames:  map[string]string{"#t": rgTickets, "#id": id, "#l": "l"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "86400000"}},
		}); err != nil {
			t.Fatal(err)
		}
		type result struct {
			ls  *Lease
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		go func() {
			ls, err := New(db, rgTable, Options{InstanceID: "live", MaxLook: maxLook}).Acquire(ctx, r)
			got <- result{ls, err, time.Now()}
		}()
		synctest.Wait()
		freed := time.Now()
		if _, err := holder.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		res := <-got
		bound := ClaimWindow + MaxLookFar + maxLook
		if res.err != nil {
			t.Fatalf("the live waiter behind a dead one announcing a day's look period: %v after %v; want the place within %v",
				res.err, res.at.Sub(freed), bound)
		}
		defer func() { _, _ = res.ls.Finish(ctx, Success) }()
		if waited := res.at.Sub(freed); waited > bound {
			t.Errorf("the live waiter got the free place %v after it freed, behind a dead waiter whose ticket announces a day's look period; want within %v (ClaimWindow + MaxLookFar + a look)",
				waited, bound)
		}
	})
}

// Invariant 14: a waiter's reads per second are bounded by its rank. Its
// ticket announces a look period no shorter than its process's MaxLook;
// edited down to nothing (the item is anyone's to write), it must not
// have the waiter read the item every 5 ms while it waits.
func TestAZeroLookPeriodDoesNotMakeAWaiterPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 10 * time.Minute, Wait: 5 * time.Minute, Holder: "p"}
		holder, err := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		c := &rgCounter{API: db}
		w := New(c, rgTable, Options{InstanceID: "w", MaxLook: maxLook})
		done := make(chan struct{})
		go func() {
			defer close(done)
			if ls, err := w.Acquire(ctx, r); err == nil {
				_, _ = ls.Finish(context.Background(), Success)
			}
		}()
		synctest.Wait()
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(rgTable),
			Key:                       rgItemKey("srv"),
			UpdateExpression:          aws.String("SET #t.#id.#l = :v"),
			ExpressionAttributeNames:  map[string]string{"#t": rgTickets, "#id": "w.1", "#l": "l"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "0"}},
			ConditionExpression:       aws.String("attribute_exists(#t.#id)"),
		}); err != nil {
			t.Fatalf("the waiter's ticket w.1: %v", err)
		}
		time.Sleep(5 * time.Second) // a look or two reads the edit
		before := c.now()
		const window = 30 * time.Second
		time.Sleep(window)
		if reads := c.now().minus(before).reads; reads > int64(window/maxLook)+1 {
			t.Errorf("a waiter whose ticket announces a 0 ms look period read the item %d times in %v; want at most one a MaxLook (%v)", reads, window, maxLook)
		}
		if _, err := holder.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		<-done
	})
}

// lookRecorder passes a waiter's requests to the store and records when
// each was sent and whether it was a purge the store refused; before the
// waiter's first purge, it has a rival's purge of the same entries land.
type lookRecorder struct {
	API
	rival func()
	mu    sync.Mutex
	sent  []time.Time
	lost  int // the index in sent of the refused purge (-1: none yet)
}

func (r *lookRecorder) note(refused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if refused && r.lost < 0 {
		r.lost = len(r.sent)
	}
	r.sent = append(r.sent, time.Now())
}

func (r *lookRecorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	purge := writes("REMOVE", LeasesAttr)(in) && !writes("SET", LeasesAttr)(in)
	if rival := r.rival; purge && rival != nil {
		r.rival = nil
		rival()
	}
	out, err := r.API.UpdateItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	r.note(purge && errors.As(err, &ccf))
	return out, err
}

func (r *lookRecorder) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.note(false)
	return r.API.GetItem(ctx, in, opts...)
}

// Whose turn (doc.go): a waiter never waits longer than its look period
// between looks. The item a refused write returns is a look: a waiter
// whose purge of a lapsed lease lost to another's, and whose turn that
// item shows has not come, looks again within its period of that answer,
// not a back-off later. (A place freeing for it in between would
// otherwise stay free longer than a look.)
func TestAWaiterWhosePurgeLostLooksWithinItsPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 30 * time.Second, Wait: 2 * time.Minute, Holder: "p"}
		// The holder's process dies holding the place: its lease lapses.
		if _, err := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook}).Acquire(ctx, r); err != nil {
			t.Fatal(err)
		}
		// A dead waiter before the live one: its turn comes when the
		// lease is purged, so the live one's does not.
		dead := rgDeadWaiter(t, ctx, db, "d", r)
		defer rgBury(cancel, []*rgFreezer{dead})
		rival := New(db, rgTable, Options{InstanceID: "r", MaxLook: maxLook})
		rec := &lookRecorder{API: db, lost: -1}
		rec.rival = func() {
			v, err := rival.read(ctx, "srv")
			if err != nil {
				t.Error(err)
				return
			}
			if _, purged, err := rival.purgeAll(ctx, "srv", v); err != nil || !purged {
				t.Errorf("the rival's purge of the lapsed lease: %v, %v", purged, err)
			}
		}
		got := make(chan *Lease, 1)
		go func() {
			ls, err := New(rec, rgTable, Options{InstanceID: "w", MaxLook: maxLook}).Acquire(ctx, r)
			if err != nil {
				t.Errorf("the live waiter: %v", err)
			}
			got <- ls
		}()
		if ls := <-got; ls != nil {
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Error(err)
			}
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.lost < 0 || rec.lost+1 >= len(rec.sent) {
			t.Fatalf("the live waiter's requests: %d, its refused purge at %d; want a purge refused, then a look", len(rec.sent), rec.lost)
		}
		if gap := rec.sent[rec.lost+1].Sub(rec.sent[rec.lost]); gap > maxLook {
			t.Errorf("the live waiter looked again %v after its purge was refused, the item it returned showing the dead waiter's turn; want within its look period, %v", gap, maxLook)
		}
	})
}
