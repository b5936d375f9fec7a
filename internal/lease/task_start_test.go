package lease

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 16: "callers passing one only once its start has gone
// unclaimed StartTimeout". Two tasks whose starts are lost (their workers
// never claim), started 5 s apart, with two places free: a caller behind
// them is served, each time StartTimeout of one's start has passed, by
// passing that one while the other takes the other place. A served waiter
// that started the tasks ahead of it before its take (a change tried and
// undone) made the passed task's start again, failed its take on that
// mark, and was never served.
func TestAWaiterPassingALostStartIsServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		r := func(holder string, wait time.Duration) Request {
			return Request{Key: "srv", Cap: 2, Hold: time.Minute, Wait: wait, Holder: holder, MaxQueued: 8}
		}
		enqueue(t, l, r("q1", 0), "task-1")
		time.Sleep(5 * time.Second)
		enqueue(t, l, r("q2", 0), "task-2")
		if got := st.list(); len(got) != 2 {
			t.Fatalf("starts: %+v; want one for each task", got)
		}
		// Neither worker ever claims (both starts lost). The caller waits up
		// to a minute: each task's start goes unclaimed StartTimeout many
		// times over.
		ls, err := l.Acquire(context.Background(), r("p", time.Minute))
		if err != nil {
			t.Fatalf("a caller behind two tasks whose starts go unclaimed: %v (starts made: %d)", err, len(st.list()))
		}
		release(t, ls)
	})
}

// freedMover is another principal's traffic on the key: before each join
// of a task's ticket (while on), a release elsewhere moves freed.
type freedMover struct {
	API
	mu    sync.Mutex
	on    bool
	joins int
}

func (f *freedMover) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	on := f.on
	if writes("SET", TasksAttr)(in) {
		f.joins++
	}
	f.mu.Unlock()
	if on && writes("SET", TasksAttr)(in) {
		if _, err := f.API.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 in.TableName,
			Key:                       in.Key,
			UpdateExpression:          aws.String("ADD #f :one"),
			ExpressionAttributeNames:  map[string]string{"#f": FreedAttr},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}); err != nil {
			return nil, err
		}
	}
	return f.API.UpdateItem(ctx, in, opts...)
}

func (f *freedMover) set(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = on
}

// Enqueue tries again, paced, while its joins are refused on others'
// writes, until its context ends or its task's deadline passes. The
// gateway gives it contexts that never end (taskEngine.requeue:
// context.WithoutCancel): under traffic that keeps moving freed, it must
// stop at the task's deadline rather than write on (~4 a second) and
// land, once the traffic stops, a ticket already past its deadline.
func TestAnEnqueueStopsAtItsTasksDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &freedMover{API: newMemStore()}
		l := New(db, "leases", Options{InstanceID: "a"})
		x := acquire(t, l, Request{Key: "srv", Cap: 1, Hold: time.Hour, Holder: "p", MaxQueued: 4}) // its turn does not come: no start
		defer release(t, x)
		db.set(true)
		go func() {
			time.Sleep(3 * time.Minute)
			db.set(false) // the other traffic stops
		}()
		start := time.Now()
		deadline := start.Add(time.Minute)
		id, err := l.Enqueue(context.Background(), taskReq("q"), "", "task-1", deadline)
		took := time.Since(start)
		db.mu.Lock()
		joins := db.joins
		db.mu.Unlock()
		if took > time.Minute+l.Margin() {
			t.Errorf("Enqueue returned %v after it began (its task's deadline: 1m0s), after %d joins: %q, %v", took, joins, id, err)
		}
		if err == nil && time.Now().After(deadline) {
			t.Errorf("Enqueue reports task queued (ticket %s) %v past its deadline", id, time.Since(deadline))
		}
		time.Sleep(3 * time.Minute) // the mover's goroutine ends
	})
}

// Take in doc.go: a take is made for the instant its turn was judged at,
// and sent at once. A served waiter that started the tasks ahead of it
// between its judgement and its take (a change tried and undone) charged
// its bucket as of the judgement, a retried mark's back-off earlier than
// its take landed (the fault simulation's rate violation at
// LEASE_SIM_SEED=10954327).
func TestAServedWaitersTakeChargesItsBucketAsOfItsLanding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := newMemStore()
		rate := Rate{Name: "principal:w", PerMinute: 3}
		rec := &landings{API: mem, match: writes("SET", RateAttr(rate.Name))}
		db := &faultAPI{API: rec}
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		r := func(holder string, hold time.Duration) Request {
			return Request{Key: "srv", Cap: 2, Hold: hold, Holder: holder, MaxQueued: 4}
		}
		acquire(t, l, r("p1", time.Second))
		acquire(t, l, r("p2", time.Second))
		enqueue(t, l, r("q", time.Hour), "task-1")
		if n := len(st.list()); n != 0 {
			t.Fatalf("%d starts while both places are held", n)
		}
		time.Sleep(5 * time.Second) // both leases lapse unreleased: the task's turn, unstarted
		db.arm(rule{match: writes("SET", TicketsAttr), fate: hold})
		w := r("w", time.Hour)
		w.Rates = []Rate{rate}
		ls, err := l.Acquire(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		landed := rec.at
		rec.mu.Unlock()
		tat := itemLimit(t, mem, "srv").rates[RateAttr(rate.Name)]
		if want := landed + rate.interval(); tat < want {
			t.Errorf("the take landing at %d left its bucket at %d; one token taken then makes it %d (%d ms early)", landed, tat, want, want-tat)
		}
		release(t, ls)
		db.release()
	})
}

// landings notes when the last write match matches landed.
type landings struct {
	API
	match func(*dynamodb.UpdateItemInput) bool
	mu    sync.Mutex
	at    int64
}

func (r *landings) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := r.API.UpdateItem(ctx, in, opts...)
	if err == nil && r.match(in) {
		r.mu.Lock()
		r.at = time.Now().UnixMilli()
		r.mu.Unlock()
	}
	return out, err
}
