package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	return burstOf(w.sent)
}

// burstOf is the most times in sent (in order) at one instant, and all
// of them.
func burstOf(sent []time.Time) (most, total int) {
	run := 0
	for i, at := range sent {
		if i > 0 && at.Equal(sent[i-1]) {
			run++
		} else {
			run = 1
		}
		most = max(most, run)
	}
	return most, len(sent)
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

// malformedCase is a key srv whose item is written by hand while a first
// holder (instance a) has taken r's place, and a caller (instance b) that
// comes after.
type malformedCase struct {
	r Request
	// caller is the caller's Holder; r.Holder when empty.
	caller string
	// edit writes the item by hand once the holder has taken its place.
	edit func(t *testing.T, db API)
	// dies: the holder dies holding its place and the caller comes this
	// long after the edit. Else release: the holder gives its place back
	// this long after the caller comes. Else the holder gave it back
	// before the edit.
	dies, release time.Duration
	// most and total bound the caller's writes at one instant and in all.
	most, total int
	// after, when set, checks the item once the caller has finished.
	after func(t *testing.T, db API)
}

// checkCallerGetsItsPlace: the caller of c gets its place within c.total
// writes, at most c.most of them at one instant, and finishes.
func checkCallerGetsItsPlace(t *testing.T, c malformedCase) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := c.r
		held, err := New(db, rgTable, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if c.dies == 0 && c.release == 0 {
			if _, err := held.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
		}
		c.edit(t, db)
		time.Sleep(c.dies)
		var wg sync.WaitGroup
		defer wg.Wait()
		who, to := "a caller on a free key", "to take a free place"
		if c.release > 0 {
			who, to = "a waiter", "to wait for a place"
			wg.Go(func() {
				time.Sleep(c.release)
				_, _ = held.Finish(ctx, Success)
			})
		}
		if c.caller != "" {
			r.Holder = c.caller
		}
		wc := &writeCounter{API: db}
		ls, err := New(wc, rgTable, Options{InstanceID: "b", MaxLook: time.Second}).Acquire(ctx, r)
		most, total := wc.burst()
		t.Logf("acquire: %v; %d writes, at most %d at one instant", err, total, most)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		if most > c.most || total > c.total {
			t.Errorf("%d writes, %d at one instant, %s", total, most, to)
		}
		if c.after != nil {
			c.after(t, db)
		}
	})
}

// onBothStores runs f on dynalite and on the simulation's store.
func onBothStores(t *testing.T, f func(t *testing.T, db API, table string)) {
	t.Helper()
	env := storetest.NewEnv(t)
	stores := map[string]struct {
		db    API
		table string
	}{"dynalite": {env.Client, env.Tables.Leases}, "memStore": {newMemStore(), rgTable}}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) { f(t, s.db, s.table) })
	}
}

// Invariant 4 (doc.go): malformed entries never wedge a key, and no retry
// runs without a pause. A bucket or a gate entry field whose value is not
// a whole number reads as none, and the first caller to see it repairs it
// (removes it, conditioned on its value as stored) with the purges it
// sees, in one write, so a caller on a free key gets its place in a few
// writes, and the entry is gone or rewritten whole after.
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
				checkCallerGetsItsPlace(t, malformedCase{
					r: Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p",
						Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second},
						Rates: []Rate{{Name: "server", PerMinute: 600}}},
					// A holder dies holding the place: the caller purges its
					// lapsed lease, and what else is stale, before it takes.
					edit: func(t *testing.T, db API) {
						v := bad
						if len(e.names) == 3 {
							// The entry whole, its one field malformed.
							handEdit(t, db, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}, e.names[0])
							v = field(e.names[2], bad)
						}
						handEdit(t, db, v, e.names[:min(len(e.names), 2)]...)
					},
					dies: 2 * IdleGate,
					// First take (no view, refused), purge, take.
					most: 3, total: 4,
					after: func(t *testing.T, db API) {
						item := rgItem(t, db, rgTable, "srv")
						got := lookup(item, e.names[:min(len(e.names), 2)])
						switch {
						case e.gone && got != nil:
							t.Errorf("%v is still %v after a caller took and released a place", e.names, got)
						case !e.gone && numberOr(got, -1) <= 0:
							t.Errorf("%v is %v after a caller took a token from it; want a time", e.names, got)
						}
					},
				})
			})
		}
	}
}

// A hand-written seq that is not a whole number at least 0 reads as none:
// the repair writes a whole one, past every ticket it sees, on the value
// seen, before the waiter joins, so the waiter joins once, not again and again at one
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
			checkCallerGetsItsPlace(t, malformedCase{
				r:      Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 10 * time.Second, Wait: 10 * time.Second, Holder: "a"},
				caller: "b",
				edit:   func(t *testing.T, db API) { handEdit(t, db, seq, SeqAttr) },
				// Take (refused), join; a few looks and takes until the
				// holder gives its place back.
				release: 3 * time.Second,
				most:    3, total: 12,
				after: func(t *testing.T, db API) {
					if got := rgItem(t, db, rgTable, "srv")[SeqAttr]; numberOr(got, 0) <= 0 {
						t.Errorf("seq is %v after a waiter joined; want a whole number", got)
					}
				},
			})
		})
	}
}

// The real store compares maps and lists by reference in an "="
// condition: no value written equals the one stored. A half ticket, a
// bucket, a gate entry field or seq written by hand as a map or a list is
// repaired on its type instead, so a caller on a free key gets its
// place on dynalite as on the simulation's store, and what is stale goes.
func TestMapsAndListsWrittenByHandDoNotWedgeAKey(t *testing.T) {
	m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": &types.AttributeValueMemberN{Value: "1"}}}
	l := &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}}}
	onBothStores(t, func(t *testing.T, db API, table string) {
		ctx := context.Background()
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 5 * time.Second, Wait: 5 * time.Second, Holder: "p",
			Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second},
			Rates: []Rate{{Name: "server", PerMinute: 600}}}
		ls, err := New(db, table, Options{InstanceID: "a"}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		handEditIn(t, db, table, m, rgQueue, "x")
		handEditIn(t, db, table, l, "tasks", "y")
		handEditIn(t, db, table, m, RateAttr("principal:q"))
		handEditIn(t, db, table, l, RateAttr("server"))
		handEditIn(t, db, table, m, SeqAttr)
		handEditIn(t, db, table, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			gateAll: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{gateUntil: l}},
			"q":     &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{gateLast: m}},
		}}, BreakerAttr("t"))
		ls, err = New(db, table, Options{InstanceID: "b"}).Acquire(ctx, r)
		if err != nil {
			t.Fatalf("a caller on a free key: %v", err)
		}
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		item := rgItem(t, db, table, "srv")
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

// Everyone's breaker entry written by hand as something other than a map
// reads as no entry, and is removed by a repair (conditioned on it as
// seen) before a write is judged over it; a second principal's entry
// closing closes everyone's as ever.
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

// Invariant 4 (doc.go): a principal's, a tool's or a waiting set written
// by hand as something other than a string set does not wedge the key. A
// take ADDs its lease id to its principal's set (and its capped tool's),
// a join to its principal's waiting set: ADD fails on a string, a number
// set or a list, so every take or join of that principal would fail.
func TestSetsWrittenByHandAsOtherTypesDoNotWedgeAKey(t *testing.T) {
	bad := map[string]types.AttributeValue{
		"S":  &types.AttributeValueMemberS{Value: "x"},
		"NS": &types.AttributeValueMemberNS{Value: []string{"1"}},
		"L":  &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}}},
	}
	sets := map[string]string{"principal": PrincipalAttr("p"), "tool": ToolAttr("t"), "waiting": WaitingAttr("p")}
	for sname, attr := range sets {
		for vname, v := range bad {
			t.Run(sname+"/"+vname, func(t *testing.T) {
				checkCallerGetsItsPlace(t, malformedCase{
					r: Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 10 * time.Second, Wait: 10 * time.Second, Holder: "q",
						Tool: "t", ToolCap: 1},
					// Another principal holds the place for 3 s: p waits, and
					// takes it when it frees.
					caller:  "p",
					edit:    func(t *testing.T, db API) { handEdit(t, db, v, attr) },
					release: 3 * time.Second,
					// One write more than on a sound item: the repair.
					most: 4, total: 13,
				})
			})
		}
	}
}

// Invariant 4 (doc.go): leases, queue, tasks or tickets replaced whole by
// hand with something other than a map (an operator clearing the queue
// with an empty string, a list or NULL) does not spin a caller. The maps
// are made with if_not_exists, which keeps what is there, so a caller
// that reads the item without its maps makes them again and again at
// one instant, or its write fails on a path into what is not a map.
func TestMapsReplacedByHandDoNotSpinACaller(t *testing.T) {
	bad := map[string]types.AttributeValue{
		"S":    &types.AttributeValueMemberS{Value: ""},
		"L":    &types.AttributeValueMemberL{},
		"NULL": &types.AttributeValueMemberNULL{Value: true},
	}
	for _, attr := range []string{LeasesAttr, QueueAttr, TasksAttr, TicketsAttr} {
		for vname, v := range bad {
			t.Run(attr+"/"+vname, func(t *testing.T) {
				checkCallerGetsItsPlace(t, malformedCase{
					r: Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p"},
					// The place is held for a second: the caller's blind take
					// is refused, and it judges from the item it reads.
					edit:    func(t *testing.T, db API) { handEdit(t, db, v, attr) },
					release: time.Second,
					// One write more than on a sound item: the repair.
					most: 4, total: 13,
				})
			})
		}
	}
}

// Invariant 4 (doc.go): freed written by hand as something other than a
// whole number does not wedge the key. Writes condition freed on the
// number seen and ADD 1 to it when they purge: a fraction stays one, and
// ADD fails on a string or a map, so each such write would be refused
// for ever.
func TestAMalformedFreedDoesNotWedgeAKey(t *testing.T) {
	bad := map[string]types.AttributeValue{
		"N 1.5": &types.AttributeValueMemberN{Value: "1.5"},
		"S":     &types.AttributeValueMemberS{Value: "3"},
		"M":     &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
	}
	for name, freed := range bad {
		t.Run(name, func(t *testing.T) {
			checkCallerGetsItsPlace(t, malformedCase{
				// A principal cap conditions every take on freed as seen.
				r: Request{Key: "srv", Cap: 1, PrincipalCap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p"},
				// A holder dies holding the place: the caller purges its
				// lapsed lease, which ADDs 1 to freed.
				edit: func(t *testing.T, db API) { handEdit(t, db, freed, FreedAttr) },
				dies: 3 * time.Second,
				// One write more than on a sound item: the repair.
				most: 4, total: 5,
			})
		})
	}
}

// Invariant 4 (doc.go): the operator's hold and the adaptive limit's
// attributes written by hand as something other than a whole number do
// not wedge the key. Each reads as none, yet a take is conditioned on
// the hold comparing at most now and on the limit being the number seen
// (or absent), which neither a string nor a fraction read as 0 ever is.
func TestAMalformedHoldOrLimitDoesNotWedgeAKey(t *testing.T) {
	s := &types.AttributeValueMemberS{Value: "soon"}
	frac := &types.AttributeValueMemberN{Value: "2.5"}
	m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
	cases := map[string]struct {
		attr     string
		v        types.AttributeValue
		adaptive bool
	}{
		"hold S":   {attr: HoldAttr, v: s},
		"hold M":   {attr: HoldAttr, v: m},
		"limit S":  {attr: LimitAttr, v: s, adaptive: true},
		"limit N":  {attr: LimitAttr, v: frac, adaptive: true},
		"limit M":  {attr: LimitAttr, v: m, adaptive: true},
		"hold N":   {attr: HoldAttr, v: frac},
		"limit N0": {attr: LimitAttr, v: &types.AttributeValueMemberN{Value: "0"}, adaptive: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p"}
			if c.adaptive {
				r.Adaptive = &Adaptive{Min: 1}
			}
			checkCallerGetsItsPlace(t, malformedCase{
				r: r,
				// A holder dies holding the place: the caller's first take,
				// blind, is refused, and it judges the next from what it saw.
				edit: func(t *testing.T, db API) { handEdit(t, db, c.v, c.attr) },
				dies: 3 * time.Second,
				// One write more than on a sound item: the repair.
				most: 4, total: 5,
			})
		})
	}
}

// An operator's Pause over a hold written by hand as something other than
// a whole number (which reads as none) sets the hold, rather than failing
// its condition that no longer hold stands.
func TestAPauseOverAMalformedHoldSetsIt(t *testing.T) {
	for name, v := range map[string]types.AttributeValue{
		"S": &types.AttributeValueMemberS{Value: "soon"},
		"M": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
	} {
		t.Run(name, func(t *testing.T) {
			db := newMemStore()
			ctx := context.Background()
			handEdit(t, db, v, HoldAttr)
			until := time.Now().Add(time.Minute)
			if err := NewAdmin(db, rgTable).Pause(ctx, "srv", until); err != nil {
				t.Fatalf("pause: %v", err)
			}
			if got := numberOr(rgItem(t, db, rgTable, "srv")[HoldAttr], 0); got != until.UnixMilli() {
				t.Errorf("hold %d after the pause; want %d", got, until.UnixMilli())
			}
		})
	}
}

// Invariant 4 (doc.go): a half-open breaker entry whose probe fields were
// written by hand as something other than a whole number does not wedge
// the key. An entry with a probe or a bar whose time is not a whole number
// (or none) is malformed, and a repair removes it whole before the caller
// takes: a take conditioned on that expiry comparing below now (a string
// never does), or on such a bar's time comparing at most now, would
// never land.
func TestMalformedProbeFieldsDoNotWedgeAHalfOpenBreaker(t *testing.T) {
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	entries := map[string]func(now int64) map[string]types.AttributeValue{
		"everyone's probe expiry a string": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{gateAll: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateProbe: s("gone"), gateProbeExp: s("soon")}}}
		},
		"everyone's probe expiry a fraction": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{gateAll: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateProbe: s("gone"), gateProbeExp: n("1.5")}}}
		},
		"everyone's probe a number, with no expiry": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{gateAll: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateProbe: n("7")}}}
		},
		"the caller's bar with no time": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"p": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateBarred: s("p")}}}
		},
		"the caller's bar a string": func(now int64) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"p": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				gateUntil: number(now - 1000), gateBarred: s("p"), gateBarUntil: s("later")}}}
		},
	}
	for name, entry := range entries {
		t.Run(name, func(t *testing.T) {
			checkCallerGetsItsPlace(t, malformedCase{
				r: Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Wait: 10 * time.Second, Holder: "p",
					Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second}},
				// The one caller of a half-open breaker, made its probe.
				edit: func(t *testing.T, db API) {
					handEdit(t, db, &types.AttributeValueMemberM{Value: entry(time.Now().UnixMilli())}, BreakerAttr("t"))
				},
				most: 4, total: 4,
			})
		})
	}
}

// The repair on the real store's rules (dynalite) as on the simulation's:
// a map, sets, a gate and counts written by hand as other types at once
// are put right by the first caller's one write, conditioned on each as
// stored (a list, a number set, NULL and BOOL on their types, an empty
// string on its value), and the
// caller then takes the place that a dead holder left.
func TestAnItemWrittenByHandIsRepairedOnDynalite(t *testing.T) {
	onBothStores(t, func(t *testing.T, db API, table string) {
		ctx := context.Background()
		r := Request{Key: "srv", Cap: 1, Hold: time.Second, Wait: 10 * time.Second, MaxQueued: 8, Holder: "p",
			Tool: "t", ToolCap: 1, Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second}}
		if _, err := New(db, table, Options{InstanceID: "a"}).Acquire(ctx, r); err != nil {
			t.Fatal(err) // its holder dies: the lease lapses in a second
		}
		edits := map[string]types.AttributeValue{
			QueueAttr:          &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}}},
			TasksAttr:          &types.AttributeValueMemberS{Value: ""},
			TicketsAttr:        &types.AttributeValueMemberNULL{Value: true},
			FreedAttr:          &types.AttributeValueMemberS{Value: "3"},
			HoldAttr:           &types.AttributeValueMemberBOOL{Value: true},
			WaitingAttr("p"):   &types.AttributeValueMemberNS{Value: []string{"1"}},
			PrincipalAttr("q"): &types.AttributeValueMemberS{Value: "x"},
			PauseAttr:          &types.AttributeValueMemberN{Value: "5"},
		}
		for attr, v := range edits {
			handEditIn(t, db, table, v, attr)
		}
		time.Sleep(1500 * time.Millisecond)
		ls, err := New(db, table, Options{InstanceID: "b"}).Acquire(ctx, r)
		if err != nil {
			t.Fatalf("a caller after the holder died: %v", err)
		}
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		item := rgItem(t, db, table, "srv")
		for attr := range edits {
			if got := item[attr]; got != nil && isMalformed(attr, got) {
				t.Errorf("%s is still %#v", attr, got)
			}
		}
	})
}

// Invariant 4 and first come, first served (doc.go): a seq written by
// hand below the tickets waiting (an operator resetting it to 0) is as
// malformed as one not whole. A join that adds 1 to it numbers a
// newcomer before the callers waiting longest, and the joins after it
// give numbers the queue holds already, so two waiters share a rank.
// The next join numbers its ticket past every ticket it sees.
func TestASeqLoweredByHandNumbersNoTicketBeforeOthers(t *testing.T) {
	for _, seq := range []int64{0, 1} {
		t.Run(fmt.Sprint(seq), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 10 * time.Second, Wait: 20 * time.Second, Holder: "p"}
				held, err := New(db, rgTable, Options{InstanceID: "h", MaxLook: time.Second}).Acquire(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				defer wg.Wait()
				var mu sync.Mutex
				var order []string
				wait := func(name string) {
					l := New(db, rgTable, Options{InstanceID: name, MaxLook: time.Second})
					wg.Go(func() {
						ls, err := l.Acquire(ctx, r)
						if err != nil {
							t.Errorf("%s: %v", name, err)
							return
						}
						mu.Lock()
						order = append(order, name)
						mu.Unlock()
						_, _ = ls.Finish(context.Background(), Success)
					})
					synctest.Wait()
				}
				wait("a")
				wait("b")
				numbers := func() map[string]int64 {
					q, _ := rgItem(t, db, rgTable, "srv")[rgQueue].(*types.AttributeValueMemberM)
					out := map[string]int64{}
					if q != nil {
						for id, n := range q.Value {
							out[id] = numberOr(n, -1)
						}
					}
					return out
				}
				before := numbers()
				if len(before) != 2 {
					t.Fatalf("queue %v; want a's and b's tickets", before)
				}
				handEdit(t, db, number(seq), SeqAttr)
				wait("c")
				after := numbers()
				for id, n := range after {
					if _, old := before[id]; old {
						continue
					}
					for oid, on := range before {
						if n <= on {
							t.Errorf("the newcomer's ticket is numbered %d, ticket %s of a caller waiting before it %d", n, oid, on)
						}
					}
				}
				time.Sleep(time.Second)
				if _, err := held.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				if fmt.Sprint(order) != "[a b c]" {
					t.Errorf("served %v; want first come, first served: [a b c]", order)
				}
			})
		})
	}
}

// Invariant 4 and Tasks (doc.go): a task's start mark written by hand as
// something other than a whole number reads as none, and a repair
// removes it, so its start is due when its turn comes: a mark conditioned
// on it comparing with now (a string never does) would never land, the
// task would never be started and the caller behind it never get the
// free place.
func TestAMalformedStartMarkDoesNotWedgeATaskOrTheCallersBehind(t *testing.T) {
	for name, v := range map[string]types.AttributeValue{
		"S":     &types.AttributeValueMemberS{Value: "x"},
		"N 1.5": &types.AttributeValueMemberN{Value: "1.5"},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				db := newMemStore()
				var st starts
				const maxLook = time.Second
				l := New(db, rgTable, Options{InstanceID: "a", MaxLook: maxLook, OnTaskStart: st.hook})
				h := acquire(t, l, Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "p", MaxQueued: 4})
				id := enqueue(t, l, Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "q", MaxQueued: 4}, "task-1")
				handEdit(t, db, v, TicketsAttr, id, ticketStarted)
				got := make(chan *Lease, 1)
				go func() {
					ls, err := New(db, rgTable, Options{InstanceID: "w", MaxLook: maxLook}).Acquire(ctx,
						Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "r", MaxQueued: 4, Wait: time.Minute})
					if err != nil {
						t.Errorf("the caller behind the task: %v", err)
					}
					got <- ls
				}()
				synctest.Wait()
				time.Sleep(200 * time.Millisecond)
				release(t, h)
				synctest.Wait()
				if n := len(st.list()); n != 1 {
					t.Errorf("starts of the task: %d; want 1 (its turn came)", n)
				}
				if ls := <-got; ls != nil {
					release(t, ls)
				}
			})
		})
	}
}

// A ticket id written by hand into two principals' waiting sets reads the
// same at every read: a half, each membership put right. Read by whichever
// set a map's order gave first, it was a whole ticket at one read and a
// half at the next.
func TestATicketInTwoWaitingSetsReadsAlikeEveryTime(t *testing.T) {
	item := map[string]types.AttributeValue{
		LeasesAttr: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
		QueueAttr:  &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x.1": number(1)}},
		TasksAttr:  &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
		TicketsAttr: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x.1": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			ticketLabel: &types.AttributeValueMemberS{Value: "q"}, ticketDeadline: number(math.MaxInt32)}}}},
		SeqAttr:          number(1),
		WaitingAttr("p"): &types.AttributeValueMemberSS{Value: []string{"x.1"}},
		WaitingAttr("q"): &types.AttributeValueMemberSS{Value: []string{"x.1"}},
	}
	for range 64 {
		v := parseItem(item)
		var members []string
		for _, f := range v.fixes {
			if f.member != "" {
				members = append(members, f.path[0])
			}
		}
		if len(v.queue) != 0 || len(v.halves) != 1 || len(members) != 2 {
			t.Fatalf("read as %d tickets, %d halves, memberships put right %v; want a half, both memberships", len(v.queue), len(v.halves), members)
		}
	}
}
