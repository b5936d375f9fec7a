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
)

// failingRenewals answers every renewal (a write that sets a lease's
// expiry without taking it) with a store error, and records when each was
// tried.
type failingRenewals struct {
	API
	mu    sync.Mutex
	tries []time.Time
}

func (f *failingRenewals) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if cond := aws.ToString(in.ConditionExpression); writes("SET", LeasesAttr)(in) && cond != "" && !strings.Contains(cond, "attribute_not_exists") {
		f.mu.Lock()
		f.tries = append(f.tries, time.Now())
		f.mu.Unlock()
		return nil, errInjected
	}
	return f.API.UpdateItem(ctx, in, opts...)
}

// KeepAlive renews a long exchange's lease halfway through each term, and
// extends it for as long as the exchange runs.
func TestKeepAliveRenewsALongExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(newMemStore(), "leases", Options{Margin: time.Second, InstanceID: "i"})
		ls, err := l.Acquire(context.Background(), Request{Key: "srv", Cap: 1, Hold: 2 * time.Second, Holder: "p"})
		if err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(7 * time.Second)
		ctx, stop := ls.KeepAlive(context.Background(), end, func() time.Duration { return 2 * time.Second }, nil)
		time.Sleep(time.Until(end))
		if ctx.Err() != nil {
			t.Fatalf("the exchange was stopped: %v", context.Cause(ctx))
		}
		stop()
		if ls.CallDeadline.Before(end) {
			t.Errorf("the lease's call deadline %v is before the exchange's end %v", ls.CallDeadline, end)
		}
		if _, err := ls.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	})
}

// When renewals keep failing, KeepAlive tries again every renewRetry
// (jittered), never faster as the lease's end nears, and stops the
// exchange before the lease lapses.
func TestKeepAliveRetriesAtAFixedPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &failingRenewals{API: newMemStore()}
		l := New(f, "leases", Options{Margin: time.Second, InstanceID: "i"})
		ls, err := l.Acquire(context.Background(), Request{Key: "srv", Cap: 1, Hold: 4 * time.Second, Holder: "p"})
		if err != nil {
			t.Fatal(err)
		}
		deadline := ls.CallDeadline
		var lostErr error
		ctx, stop := ls.KeepAlive(context.Background(), time.Now().Add(time.Minute), func() time.Duration { return 4 * time.Second },
			func(err error) { lostErr = err })
		<-ctx.Done()
		stop()
		if !errors.Is(context.Cause(ctx), ErrLeaseLost) || lostErr == nil {
			t.Fatalf("the exchange ended with %v (lost: %v); want the lease lost", context.Cause(ctx), lostErr)
		}
		if time.Now().After(deadline) {
			t.Errorf("the exchange was stopped %v after its lease's call deadline", time.Since(deadline))
		}
		// Each renewal is writeAttempts attempts (every one fails; the last
		// renewal may be cut short by the lease's end); between one
		// renewal's last and the next one's first, at least half of
		// renewRetry.
		if len(f.tries) < 2*writeAttempts {
			t.Fatalf("%d renewal attempts; want several renewals", len(f.tries))
		}
		for i := writeAttempts; i < len(f.tries); i += writeAttempts {
			if d := f.tries[i].Sub(f.tries[i-1]); d < renewRetry/2 {
				t.Errorf("renewal %d came %v after the one before; want at least %v", i/writeAttempts, d, renewRetry/2)
			}
		}
	})
}
