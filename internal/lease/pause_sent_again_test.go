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

// arm makes the next write sent through s its first, lost after delay.
func (s *lostFirstWrite) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

// arm makes the next write sent through s land late, its answer lost.
func (s *landThenLose) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

// Invariant 10 and Gates (doc.go): "*" closes for everyone while another
// principal's entry is closed, and no longer. A's pause is built while B's
// 2 s pause stands, and its first request hangs 3 s: either it breaks
// unseen by the store and is sent again as built, or the store applies it
// as the connection breaks. Either way it lands at 3 s, B's entry passed
// but unpurged as seen, and closes "*" until B's end, passed, not until
// A's own at 10 s: C, a third principal, passes at 4 s. For a call
// holding nothing and for a holder's release alike.
func TestAPauseJudgedBeforeItLandsLateDoesNotCloseEveryonesEntry(t *testing.T) {
	for _, late := range []string{"sent again", "applied late"} {
		for _, capped := range []bool{false, true} {
			name := late + ", holding nothing"
			if capped {
				name = late + ", holding a place"
			}
			t.Run(name, func(t *testing.T) { pauseLandingLate(t, capped, late == "applied late") })
		}
	}
}

func pauseLandingLate(t *testing.T, capped, applied bool) {
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
		var slow interface {
			API
			arm()
		} = &lostFirstWrite{API: db, delay: 3 * time.Second}
		if applied {
			slow = &landThenLose{API: db, delay: 3 * time.Second}
		}
		la := New(slow, "leases", Options{InstanceID: "a"})
		lb := New(db, "leases", Options{InstanceID: "b"})
		lc := New(db, "leases", Options{InstanceID: "c"})
		a := pausedBeside(t, la, lb, req, 2*time.Second, true)
		a.PauseFor(10 * time.Second)
		slow.arm()
		if _, err := a.Finish(ctx, Overloaded); err != nil {
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

// pausedBeside has A (on la) take a place and B (on lb) take one and end
// it Overloaded, its upstream asking for a pause of d; with seen, another
// call of A's (which B's pause does not close) then leaves A's process a
// view of B's pause standing. It returns A's lease.
func pausedBeside(t *testing.T, la, lb *Limiter, req func(holder string) Request, d time.Duration, seen bool) *Lease {
	t.Helper()
	ctx := context.Background()
	a, err := la.Acquire(ctx, req("A"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := lb.Acquire(ctx, req("B"))
	if err != nil {
		t.Fatal(err)
	}
	b.PauseFor(d)
	if _, err := b.Finish(ctx, Overloaded); err != nil {
		t.Fatal(err)
	}
	if seen {
		a2, err := la.Acquire(ctx, req("A"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a2.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
	}
	return a
}
