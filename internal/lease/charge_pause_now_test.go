package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// slowAnswer answers the first write sent through it once armed late: the
// store applies it (here, refuses its condition) at once, and its answer
// comes after delay.
type slowAnswer struct {
	API
	delay       time.Duration
	armed, done bool
}

func (s *slowAnswer) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := s.API.UpdateItem(ctx, in, opts...)
	if s.armed && !s.done {
		s.done = true
		time.Sleep(s.delay)
	}
	return out, err
}

// A call holding nothing writes the pause its upstream asked for in up to
// maxEager tries, each made again from the last one's answer. "*" closes
// for everyone only while another principal's entry is closed (doc.go,
// Gates; invariant 10), judged at the write's moment: B's 2 s pause has
// passed when A's second try is sent, 3 s after its first (whose refusal
// was answered late), so A's pause closes A's entry alone and C, a third
// principal, passes at 4 s.
//
// Found by the fault simulation (seed 11901464, where the entries A's
// late try wrote had passed too), when each try was judged at the first
// try's moment.
func TestALateTryOfAPauseOfACallHoldingNothingJudgesEveryoneAtItsOwnNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		req := func(holder string) Request {
			return Request{Key: "srv", Hold: 10 * time.Second, Holder: holder, MaxPause: time.Minute, Rates: []Rate{{Name: "server", PerMinute: 100}}}
		}
		slow := &slowAnswer{API: db, delay: 3 * time.Second}
		la := New(slow, "leases", Options{InstanceID: "a"})
		lb := New(db, "leases", Options{InstanceID: "b"})
		lc := New(db, "leases", Options{InstanceID: "c"})
		a := pausedBeside(t, la, lb, req, 2*time.Second, false) // A's view: no pause
		a.PauseFor(10 * time.Second)
		slow.armed = true
		if _, err := a.Finish(ctx, Overloaded); err != nil { // its first try refused, answered at 3 s
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
