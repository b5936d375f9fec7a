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

// throttleArmed refuses every write, unapplied, as a throttled store, once
// armed, and counts the writes it refused and when.
type throttleArmed struct {
	API
	mu    sync.Mutex
	armed bool
	at    []time.Time
}

func (s *throttleArmed) arm() {
	s.mu.Lock()
	s.armed = true
	s.mu.Unlock()
}

func (s *throttleArmed) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	s.mu.Lock()
	armed := s.armed
	if armed {
		s.at = append(s.at, time.Now())
	}
	s.mu.Unlock()
	if armed {
		return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("throttled")}
	}
	return s.API.UpdateItem(ctx, in, opts...)
}

// expr.go's write: a write the store refuses as throttled is made at most
// writeAttempts times, each after backoff(attempt); f0404ef's commit: a
// pause closing everyone's entry (judged) is made again by send "for the
// same attempts write would have made". But send's count (again) covers
// only the tries that were judged: once another principal's pause has
// passed between tries, the write built anew is no longer judged, and
// write makes it writeAttempts times more, its back-off starting again at
// backoff(1). Under a store refusing every write as throttled, A's pause
// (B's 1 ms pause standing at its first try) is sent 5 times, not 4: for a
// call holding nothing and for a holder's release alike.
func TestRevDAThrottledPauseIsSentNoMoreThanWriteAttempts(t *testing.T) {
	for _, capped := range []bool{false, true} {
		name := "holding nothing"
		if capped {
			name = "holding a place"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx := context.Background()
				req := func(holder string) Request {
					r := Request{Key: "srv", Hold: 10 * time.Second, Holder: holder, MaxPause: time.Minute, Rates: []Rate{{Name: "server", PerMinute: 100}}}
					if capped {
						r.Cap = 10
					}
					return r
				}
				th := &throttleArmed{API: db}
				la := New(th, "leases", Options{InstanceID: "a"})
				lb := New(db, "leases", Options{InstanceID: "b"})
				a, err := la.Acquire(ctx, req("A"))
				if err != nil {
					t.Fatal(err)
				}
				b, err := lb.Acquire(ctx, req("B"))
				if err != nil {
					t.Fatal(err)
				}
				b.PauseFor(time.Millisecond)
				if _, err := b.Finish(ctx, Overloaded); err != nil {
					t.Fatal(err)
				}
				// A's view: B's pause standing.
				a2, err := la.Acquire(ctx, req("A"))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := a2.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				if v, _, _ := la.board("srv").latest(); v == nil || !v.gates[PauseAttr].shutByAnother("A", time.Now().UnixMilli()) {
					t.Fatalf("A's view does not show B's pause standing")
				}
				a.PauseFor(10 * time.Second)
				th.arm()
				start := time.Now()
				if _, err := a.Finish(ctx, Overloaded); err == nil {
					t.Fatal("a release refused throttled at every write returned no error")
				}
				th.mu.Lock()
				defer th.mu.Unlock()
				if len(th.at) > writeAttempts {
					var offs []time.Duration
					for _, at := range th.at {
						offs = append(offs, at.Sub(start))
					}
					t.Errorf("a pause refused as throttled was sent %d times (at %v), more than writeAttempts (%d)", len(th.at), offs, writeAttempts)
				}
			})
		})
	}
}
