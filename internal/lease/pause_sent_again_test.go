package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// lostFirstWrite fails the first write sent through it once armed after
// delay, as a connection that hangs and then breaks does: the store never
// saw it, and the caller cannot tell (an unknown outcome): the write is
// made again.
type lostFirstWrite struct {
	API
	mu          sync.Mutex
	delay       time.Duration
	armed, done bool
}

func (s *lostFirstWrite) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	s.mu.Lock()
	lose := s.armed && !s.done
	s.done = s.done || lose
	s.mu.Unlock()
	if lose {
		time.Sleep(s.delay)
		return nil, errors.New("read tcp: connection reset by peer")
	}
	return s.API.UpdateItem(ctx, in, opts...)
}

// Invariant 10 and Gates (doc.go): "*" closes for everyone while another
// principal's entry is closed, and no longer. A's pause is built while B's
// 2 s pause stands; its first request hangs 3 s and breaks unseen by the
// store, and it is sent again as built, landing at 3 s (B's entry, passed
// but unpurged, as seen): it closes "*" until B's end, passed, not until
// A's own at 10 s, so C, a third principal, passes at 4 s; for a call
// holding nothing and for a holder's release alike.
func TestAPauseSentAgainAfterAnUnknownOutcomeIsJudgedAtItsOwnMoment(t *testing.T) {
	for _, capped := range []bool{false, true} {
		name := "holding nothing"
		if capped {
			name = "holding a place"
		}
		t.Run(name, func(t *testing.T) { pauseSentAgain(t, capped) })
	}
}

func pauseSentAgain(t *testing.T, capped bool) {
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
		lost := &lostFirstWrite{API: db, delay: 3 * time.Second}
		la := New(lost, "leases", Options{InstanceID: "a"})
		lb := New(db, "leases", Options{InstanceID: "b"})
		lc := New(db, "leases", Options{InstanceID: "c"})
		a, err := la.Acquire(ctx, req("A"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := lb.Acquire(ctx, req("B"))
		if err != nil {
			t.Fatal(err)
		}
		b.PauseFor(2 * time.Second)
		if _, err := b.Finish(ctx, Overloaded); err != nil {
			t.Fatal(err)
		}
		// A's view: B's pause standing (another call of A's, which B's
		// pause does not close).
		a2, err := la.Acquire(ctx, req("A"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a2.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		a.PauseFor(10 * time.Second)
		lost.mu.Lock()
		lost.armed = true
		lost.mu.Unlock()
		if _, err := a.Finish(ctx, Overloaded); err != nil { // its first request lost after 3 s, sent again as built
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		raw, _ := db.GetItem(ctx, &dynamodb.GetItemInput{Key: itemKey("srv")})
		it := mRead(raw.Item)
		if g := it.gates[PauseAttr]; g == nil || !g.entries["A"].closed(time.Now().UnixMilli()) {
			t.Fatalf("A's pause was not written: %+v", it.gates)
		}
		if _, err := lc.Acquire(ctx, req("C")); err != nil {
			t.Errorf("C, at 4 s, with only A's pause standing since 2 s: %v (pause: %+v)", err, it.gates[PauseAttr].entries)
		}
	})
}
