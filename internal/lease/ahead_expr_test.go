package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// DynamoDB's limits: an expression string is at most 4 KB. A take is
// conditioned on the buckets of the callers handed a place before it
// holding their tokens (see Buckets in the package doc): with a place
// free for each of 200 callers of 200 principals waiting, each with its
// own bucket, the newcomer's take behind them must still be a valid
// write.
func TestATakeBehindManyPrincipalsStaysWithinDynamoDBsExpressionLimits(t *testing.T) {
	db := &exprMeter{API: newMemStore()}
	ctx := context.Background()
	req := func(who string, c int) Request {
		return Request{Key: "srv", Cap: c, MaxQueued: 1000, Wait: time.Hour, Hold: time.Minute, Holder: who,
			Rates: []Rate{{Name: "server", PerMinute: 1000}, {Name: "principal:" + who, PerMinute: 10}}}
	}
	holder := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), req("h", 1))
	defer release(t, holder)
	for i := range 200 {
		who := fmt.Sprintf("p%03d", i)
		l := New(db, rgTable, Options{InstanceID: who})
		a := l.newAttempt(req(who, 1), l.newLeaseID(), false)
		v, err := l.read(ctx, "srv")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.join(ctx, v); err != nil || !a.joined {
			t.Fatalf("%s's join: %v", who, err)
		}
	}
	db.update.Store(0)
	db.cond.Store(0)
	l := New(db, rgTable, Options{InstanceID: "n"})
	v, err := l.read(ctx, "srv")
	if err != nil {
		t.Fatal(err)
	}
	a := l.newAttempt(req("n", 1000), l.newLeaseID(), false)
	served, h, bypass := a.decide(v, a.now())
	if !served || len(h.ahead) != 200 {
		t.Fatalf("served %v with %d ahead; want served behind all 200", served, len(h.ahead))
	}
	_, _, err = a.take(ctx, v, h, bypass, a.now())
	const limit = 4096
	t.Logf("take behind 200 callers: %v (%d ahead); longest update expression %d bytes, condition %d", err, len(h.ahead), db.update.Load(), db.cond.Load())
	if u, c := db.update.Load(), db.cond.Load(); u > limit || c > limit {
		t.Errorf("longest update expression %d bytes, condition expression %d bytes, behind %d callers of as many principals; DynamoDB allows %d", u, c, len(h.ahead), limit)
	}
}

// Whose turn (doc.go): a caller presumes gone the callers whose turn came
// their claim window ago, and its take removes their tickets; DynamoDB
// allows expressions of 4 KB. 300 callers of a key capped at 150 wait,
// all gone, when the 150 places free at once: the caller behind them
// presumes the first 150 gone a claim window later, the next 150 a claim
// window after that, and its take removed all 300 tickets: an update
// expression of about 10 KB, refused by DynamoDB every time, so every
// caller behind them failed until their tickets lapsed. One write passes
// over at most maxPurge of them; a caller whose turn more still hold back
// removes them in writes of their own.
func TestACallerBehindManyGoneStaysWithinDynamoDBsExpressionLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &exprMeter{API: newMemStore()}
		ctx := context.Background()
		const places, gone = 150, 300
		req := joinGone(t, db, places, gone)
		db.update.Store(0)
		db.cond.Store(0)
		l := New(db, rgTable, Options{InstanceID: "n"})
		start := time.Now()
		ls, err := l.Acquire(ctx, req("n"))
		t.Logf("the caller behind %d gone, %d places: %v after %v; %d writes; longest update expression %d bytes, condition %d", gone, places, err, time.Since(start), l.Stats().Writes, db.update.Load(), db.cond.Load())
		if err != nil {
			t.Fatal(err)
		}
		const limit = 4096
		if u, c := db.update.Load(), db.cond.Load(); u > limit || c > limit {
			t.Errorf("longest update expression %d bytes, condition expression %d bytes, behind %d callers gone; DynamoDB allows %d", u, c, gone, limit)
		}
		release(t, ls)
	})
}
