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

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// writeCounter passes requests to the store and records when each write
// was sent; from the 500th on it refuses them, so a caller that writes
// again and again at one instant still ends.
type writeCounter struct {
	API
	mu   sync.Mutex
	sent []time.Time
}

func (w *writeCounter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	w.mu.Lock()
	w.sent = append(w.sent, time.Now())
	n := len(w.sent)
	w.mu.Unlock()
	if n > 500 {
		return nil, errors.New("writeCounter: 500 writes")
	}
	return w.API.UpdateItem(ctx, in, opts...)
}

// burst is the most writes sent at one instant, and all of them.
func (w *writeCounter) burst() (most, total int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	run := 0
	for i, at := range w.sent {
		if i > 0 && at.Equal(w.sent[i-1]) {
			run++
		} else {
			run = 1
		}
		most = max(most, run)
	}
	return most, len(w.sent)
}

// handEdit sets the attribute at the path of names to v on key srv, as an
// operator's edit may.
func handEdit(t *testing.T, db API, v types.AttributeValue, names ...string) {
	t.Helper()
	handEditIn(t, db, rgTable, v, names...)
}

func handEditIn(t *testing.T, db API, table string, v types.AttributeValue, names ...string) {
	t.Helper()
	ph := map[string]string{}
	path := ""
	for i, n := range names {
		p := "#n" + string(rune('0'+i))
		ph[p] = n
		if i > 0 {
			path += "."
		}
		path += p
	}
	if _, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       rgItemKey("srv"),
		UpdateExpression:          aws.String("SET " + path + " = :v"),
		ExpressionAttributeNames:  ph,
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": v},
	}); err != nil {
		t.Fatal(err)
	}
}

// malformed are values of a time, a count or a number field that are not
// a whole number, as a hand edit may write them.
func malformed() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"N 1.5": &types.AttributeValueMemberN{Value: "1.5"},
		"S":     &types.AttributeValueMemberS{Value: "soon"},
		"M":     &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": &types.AttributeValueMemberN{Value: "1"}}},
		"L":     &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}}},
	}
}

// Invariant 4 (doc.go): malformed entries never wedge a key, and no retry
// runs without a pause. A bucket or a gate entry field whose value is not
// a whole number reads as 0; every write that purges it or relies on it
// being so conditions it on its value as stored, so a caller on a free key
// gets its place in a few writes, and the entry is gone or rewritten
// whole after.
func TestMalformedBucketsAndGateEntriesDoNotWedgeAKey(t *testing.T) {
	type edit struct {
		names []string
		// gone: purged after the call; else rewritten whole.
		gone bool
	}
	field := func(f string, v types.AttributeValue) types.AttributeValue {
		return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{f: v}}
	}
	edits := map[string]edit{
		"another principal's bucket": {names: []string{RateAttr("principal:q")}, gone: true},
		"the caller's own bucket":    {names: []string{RateAttr("server")}},
		"everyone's breaker until":   {names: []string{BreakerAttr("t"), gateAll, gateUntil}, gone: true},
		"another's breaker fails":    {names: []string{BreakerAttr("t"), "q", gateFails}, gone: true},
		"the caller's breaker last":  {names: []string{BreakerAttr("t"), "p", gateLast}, gone: true},
		"everyone's pause until":     {names: []string{PauseAttr, gateAll, gateUntil}, gone: true},
	}
	for name, e := range edits {
		for vname, bad := range malformed() {
			t.Run(name+"/"+vname, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					db := newMemStore()
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p",
						Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second},
						Rates: []Rate{{Name: "server", PerMinute: 600}}}
					// A holder dies holding the place: the caller purges its
					// lapsed lease, and what else is stale, before it takes.
					if _, err := New(db, rgTable, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r); err != nil {
						t.Fatal(err)
					}
					v := bad
					if len(e.names) == 3 {
						// The entry whole, its one field malformed.
						handEdit(t, db, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, e.names[0])
						v = field(e.names[2], bad)
					}
					handEdit(t, db, v, e.names[:min(len(e.names), 2)]...)
					time.Sleep(2 * IdleGate)
					wc := &writeCounter{API: db}
					ls, err := New(wc, rgTable, Options{InstanceID: "b", MaxLook: time.Second}).Acquire(ctx, r)
					most, total := wc.burst()
					t.Logf("acquire: %v; %d writes, at most %d at one instant", err, total, most)
					// First take (no view, refused), purge, take.
					if err != nil {
						t.Fatalf("a caller on a free key: %v", err)
					}
					if _, err := ls.Finish(ctx, Success); err != nil {
						t.Fatal(err)
					}
					if most > 3 || total > 4 {
						t.Errorf("%d writes, %d at one instant, to take a free place", total, most)
					}
					item := rgItem(t, db, rgTable, "srv")
					got := lookup(item, e.names[:min(len(e.names), 2)])
					switch {
					case e.gone && got != nil:
						t.Errorf("%v is still %v after a caller took and released a place", e.names, got)
					case !e.gone && numberOr(got, -1) <= 0:
						t.Errorf("%v is %v after a caller took a token from it; want a time", e.names, got)
					}
				})
			})
		}
	}
}

// A hand-written seq that is not a whole number at least 0 reads as none:
// a waiter's join writes a whole one, past every ticket it sees, on the
// value seen, so the waiter joins once, not again and again at one
// instant (each join of 1.5 + 1 would give it a ticket that is not whole,
// purged by its next write), and gets the place when it frees.
func TestAMalformedSeqIsJoinedOnceAndMadeWhole(t *testing.T) {
	bad := map[string]types.AttributeValue{
		"N 1.5": &types.AttributeValueMemberN{Value: "1.5"},
		"N -3":  &types.AttributeValueMemberN{Value: "-3"},
		"S":     &types.AttributeValueMemberS{Value: "7"},
		"M":     &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
	}
	for name, seq := range bad {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 10 * time.Second, Wait: 10 * time.Second, Holder: "a"}
				held, err := New(db, rgTable, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				handEdit(t, db, seq, SeqAttr)
				var wg sync.WaitGroup
				defer wg.Wait()
				wg.Go(func() {
					time.Sleep(3 * time.Second)
					_, _ = held.Finish(ctx, Success)
				})
				wc := &writeCounter{API: db}
				r.Holder = "b"
				ls, err := New(wc, rgTable, Options{InstanceID: "b", MaxLook: time.Second}).Acquire(ctx, r)
				most, total := wc.burst()
				t.Logf("acquire: %v; %d writes, at most %d at one instant", err, total, most)
				if err != nil {
					t.Fatalf("a waiter: %v", err)
				}
				if _, err := ls.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				// Take (refused), join; a few looks and takes until the
				// holder gives its place back.
				if most > 3 || total > 12 {
					t.Errorf("%d writes, %d at one instant, to wait for a place", total, most)
				}
				if got := rgItem(t, db, rgTable, "srv")[SeqAttr]; numberOr(got, 0) <= 0 {
					t.Errorf("seq is %v after a waiter joined; want a whole number", got)
				}
			})
		})
	}
}

// The real store compares maps and lists by reference in an "="
// condition: no value written equals the one stored. A half ticket, a
// bucket, a gate entry field or seq written by hand as a map or a list is
// conditioned on its type instead, so a caller on a free key gets its
// place on dynalite as on the simulation's store, and what is stale goes.
func TestMapsAndListsWrittenByHandDoNotWedgeAKey(t *testing.T) {
	env := storetest.NewEnv(t)
	stores := map[string]struct {
		db    API
		table string
	}{"dynalite": {env.Client, env.Tables.Leases}, "memStore": {newMemStore(), rgTable}}
	m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": &types.AttributeValueMemberN{Value: "1"}}}
	l := &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}}}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 5 * time.Second, Wait: 5 * time.Second, Holder: "p",
				Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second},
				Rates: []Rate{{Name: "server", PerMinute: 600}}}
			ls, err := New(s.db, s.table, Options{InstanceID: "a"}).Acquire(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
			handEditIn(t, s.db, s.table, m, rgQueue, "x")
			handEditIn(t, s.db, s.table, l, "tasks", "y")
			handEditIn(t, s.db, s.table, m, RateAttr("principal:q"))
			handEditIn(t, s.db, s.table, l, RateAttr("server"))
			handEditIn(t, s.db, s.table, m, SeqAttr)
			handEditIn(t, s.db, s.table, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateAll: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{gateUntil: l}},
				"q":     &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{gateLast: m}},
			}}, BreakerAttr("t"))
			ls, err = New(s.db, s.table, Options{InstanceID: "b"}).Acquire(ctx, r)
			if err != nil {
				t.Fatalf("a caller on a free key: %v", err)
			}
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
			item := rgItem(t, s.db, s.table, "srv")
			for _, p := range [][]string{{rgQueue, "x"}, {"tasks", "y"}, {RateAttr("principal:q")}, {BreakerAttr("t"), "q"}} {
				if got := lookup(item, p); got != nil {
					t.Errorf("%v is still %v after a caller took and released a place", p, got)
				}
			}
			if got := item[RateAttr("server")]; numberOr(got, 0) <= 0 {
				t.Errorf("the caller's bucket is %v after it took a token; want a time", got)
			}
		})
	}
}

// Everyone's breaker entry written by hand as something other than a map
// reads as no entry; a second principal's entry closing closes everyone's
// as ever, writing the entry whole (a field cannot be set inside a
// string), conditioned on it as seen.
func TestABreakerOpensOverEveryonesEntryWrittenByHand(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	br := &Breaker{Name: "t", Threshold: 2, Recovery: time.Minute}
	var trs []Transition
	for i, who := range []string{"A", "A", "B", "B"} {
		if i == 2 {
			handEditIn(t, env.Client, env.Tables.Leases, &types.AttributeValueMemberS{Value: "open"}, BreakerAttr("t"), gateAll)
		}
		tr, err := call(t, l, br, 2, who, Failure)
		if err != nil {
			t.Fatalf("%s's call %d: %v", who, i, err)
		}
		trs = append(trs, tr)
	}
	if trs[1] != OpenedForPrincipal || trs[3] != Opened {
		t.Errorf("transitions %q; want A's second to open it for A, B's second for everyone", trs)
	}
	_, err := call(t, l, br, 2, "C", Success)
	var open *CircuitOpenError
	if !errors.As(err, &open) || open.Principal {
		t.Errorf("C's call: %v; want refused, open for everyone", err)
	}
}
