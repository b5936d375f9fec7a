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

// A write the store refuses as throttled is made at most writeAttempts
// times, each after backoff(attempt), and so is a pause that closes
// everyone's entry: under a store refusing every write as throttled, A's
// pause (B's 1 ms pause standing at its first try, passed by its next) is
// sent writeAttempts times, not more, for a call holding nothing and for
// a holder's release alike.
func TestAThrottledPauseIsSentNoMoreThanWriteAttempts(t *testing.T) {
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
				a := pausedBeside(t, la, lb, req, time.Millisecond, true)
				if v, _, _ := la.board("srv").latest(); v == nil || v.gates[PauseAttr].othersUntil("A") <= time.Now().UnixMilli() {
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

// landThenLose applies the first write sent through it once armed, after
// delay (a request that hangs, then lands), then
// runs seen (another call of the same process reading the item meanwhile)
// and answers with a broken connection: the write landed, and its sender
// cannot tell (an unknown outcome).
type landThenLose struct {
	API
	mu          sync.Mutex
	armed, done bool
	delay       time.Duration
	seen        func()
}

func (s *landThenLose) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	s.mu.Lock()
	lose := s.armed && !s.done
	s.done = s.done || lose
	s.mu.Unlock()
	if lose {
		time.Sleep(s.delay)
	}
	out, err := s.API.UpdateItem(ctx, in, opts...)
	if !lose || err != nil {
		return out, err
	}
	if s.seen != nil {
		s.seen()
	}
	return nil, errors.New("read tcp: connection reset by peer")
}

// Finish returns the breaker change its release made. A holder's release
// whose pause closes everyone's entry, sent again after an unknown outcome,
// is sent as built: A's release (Failure) lands, its answer lost, while
// another call of A's process reads the item; the write sent again is
// refused (the lease gone), and Finish reports the transition of the write
// that landed, not of one built from a view that already holds it. Threshold 1: the landed write opened A's entry (reported
// OpenedForPrincipal, counted once). Threshold 2: it counted A's first
// failure (no change reported, none counted).
func TestAReleaseLandedUnseenReportsTheTransitionItMade(t *testing.T) {
	t.Run("opened, reported none", func(t *testing.T) { releaseLandedUnseen(t, 1, OpenedForPrincipal) })
	t.Run("none, reported opened", func(t *testing.T) { releaseLandedUnseen(t, 2, NoTransition) })
}

func releaseLandedUnseen(t *testing.T, threshold int, want Transition) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		br := &Breaker{Name: "tool", Threshold: threshold, Recovery: time.Minute}
		req := func(holder string) Request {
			return Request{Key: "srv", Tool: "tool", Cap: 10, Hold: 10 * time.Second, Holder: holder, MaxPause: time.Minute, Breaker: br}
		}
		lost := &landThenLose{API: db}
		la := New(lost, "leases", Options{InstanceID: "a"})
		lb := New(db, "leases", Options{InstanceID: "b"})
		lost.seen = func() { _, _ = la.read(ctx, "srv") }
		a := pausedBeside(t, la, lb, req, 2*time.Second, true)
		a.PauseFor(10 * time.Second)
		lost.mu.Lock()
		lost.armed = true
		lost.mu.Unlock()
		before := la.stats.transitions.Load()
		tr, err := a.Finish(ctx, Failure)
		if err != nil {
			t.Fatal(err)
		}
		it := itemView(t, db, "srv")
		g := it.gates[BreakerAttr("tool")]
		if g == nil {
			t.Fatalf("A's failure was not written: %+v", it.gates)
		}
		if shut := g.entries["A"].shut(time.Now().UnixMilli()); shut != (want == OpenedForPrincipal) {
			t.Fatalf("A's breaker entry shut %v after one failure at threshold %d", shut, threshold)
		}
		if tr != want {
			t.Errorf("Finish reported %q; the write that landed made %q", tr, want)
		}
		wantCount := int64(0)
		if want != NoTransition {
			wantCount = 1
		}
		if got := la.stats.transitions.Load() - before; got != wantCount {
			t.Errorf("transitions counted %d, want %d", got, wantCount)
		}
	})
}
