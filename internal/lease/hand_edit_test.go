package lease

// Invariant 4 (doc.go): the item is anyone's to write, and values an
// operator writes by hand never wedge a key. A value not of the
// protocol's shapes reads as none (or as a half ticket), the first caller
// whose view shows it puts it right in one write conditioned on it as
// stored, and no retry runs without a pause.
//
// Each case below is one row: what is written by hand, over what the key
// held, and what the callers after it must get, within how many writes.
// The operations other than a take (a release, a give-back, a pause, an
// operator's write, a withdrawal) have their table in
// hand_edit_op_test.go.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
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

// halfWatch records every half ticket an item written shows.
type halfWatch struct {
	API
	mu     sync.Mutex
	halves []string
}

func (w *halfWatch) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := w.API.UpdateItem(ctx, in, opts...)
	if err == nil {
		w.mu.Lock()
		for _, h := range parseItem(out.Attributes).halves {
			w.halves = append(w.halves, fmt.Sprintf("%s numbered %d", h.id, h.n))
		}
		w.mu.Unlock()
	}
	return out, err
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

// edit is one value written by hand at a path of names on key srv.
type edit struct {
	path []string
	v    types.AttributeValue
}

func at(v types.AttributeValue, path ...string) edit { return edit{path: path, v: v} }

func applyEdits(t *testing.T, db API, table string, edits []edit) {
	t.Helper()
	for _, e := range edits {
		handEditIn(t, db, table, e.v, e.path...)
	}
}

// Values a hand edit writes.
func sv(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func nv(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }
func mv(m map[string]types.AttributeValue) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: m}
}
func lv(vs ...types.AttributeValue) types.AttributeValue {
	return &types.AttributeValueMemberL{Value: vs}
}

var (
	anEmptyMap = func() types.AttributeValue { return mv(map[string]types.AttributeValue{}) }
	aMap       = func() types.AttributeValue { return mv(map[string]types.AttributeValue{"a": number(1)}) }
	aList      = func() types.AttributeValue { return lv(sv("x")) }
	aNumberSet = func() types.AttributeValue { return &types.AttributeValueMemberNS{Value: []string{"1"}} }
)

// malformed are values of a time, a count or a number field that are not
// a whole number, as a hand edit may write them.
func malformed() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"N 1.5": nv("1.5"),
		"S":     sv("soon"),
		"M":     aMap(),
		"L":     aList(),
	}
}

// gatesNotMaps are n gates written by hand as numbers, named prefix and
// an index, so they sort before the protocol's own attributes.
func gatesNotMaps(prefix string, n int) []edit {
	var out []edit
	for i := range n {
		out = append(out, at(number(1), BreakerAttr(fmt.Sprintf("%s%03d", prefix, i))))
	}
	return out
}

// takeCase is key srv written by hand while a first holder (instance a)
// has taken r's place, and callers (instances b, c, ...) that come after.
type takeCase struct {
	name string
	// both: on dynalite and on the simulation's store, on the wall clock;
	// else on the simulation's store in a synctest bubble.
	both bool
	r    Request
	// caller is the callers' Holder; r.Holder when empty.
	caller string
	// edits are written by hand once the holder has taken its place; now
	// is the time then.
	edits func(now time.Time) []edit
	// dies: the holder dies holding its place and the callers come this
	// long after the edit. Else release: the holder gives its place back
	// this long after the first caller comes. Else the holder gave it
	// back before the edit.
	dies, release time.Duration
	// callers is how many callers come, one after another (1 when 0).
	callers int
	// most and total bound each caller's writes at one instant and in
	// all; 0 bounds nothing.
	most, total int
	// noHalf: no write of a caller leaves a half ticket in the item.
	noHalf bool
	// after, when set, checks the item once the callers have finished.
	after func(t *testing.T, item map[string]types.AttributeValue)
}

func (c takeCase) run(t *testing.T, db API, table string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := c.r
	held, err := New(db, table, Options{InstanceID: "a", MaxLook: time.Second}).Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if c.dies == 0 && c.release == 0 {
		if _, err := held.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
	}
	applyEdits(t, db, table, c.edits(time.Now()))
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
	hw := &halfWatch{API: db}
	for i := range max(c.callers, 1) {
		id := string(rune('b' + i))
		wc := &writeCounter{API: hw}
		ls, err := New(wc, table, Options{InstanceID: id, MaxLook: time.Second}).Acquire(ctx, r)
		most, total := wc.burst()
		t.Logf("caller %s: acquire: %v; %d writes, at most %d at one instant", id, err, total, most)
		if err != nil {
			t.Errorf("%s (%s): %v", who, id, err)
			continue
		}
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Errorf("caller %s gives its place back: %v", id, err)
		}
		if c.most > 0 && most > c.most || c.total > 0 && total > c.total {
			t.Errorf("caller %s: %d writes, %d at one instant, %s; want at most %d, %d", id, total, most, to, c.total, c.most)
		}
	}
	if c.noHalf && len(hw.halves) > 0 {
		t.Errorf("a caller's write left a half ticket (%v), taken apart again", hw.halves)
	}
	if c.after != nil {
		c.after(t, rgItem(t, db, table, "srv"))
	}
}

// Requests the rows share: a place of cap 1 on key srv for principal p.
func capOne(hold, wait time.Duration) Request {
	return Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: hold, Wait: wait, Holder: "p"}
}

// guarded is capOne through tool t's breaker, paying the server's bucket.
func guarded(hold, wait time.Duration) Request {
	r := capOne(hold, wait)
	r.Tool, r.Breaker = "t", &Breaker{Name: "t", Threshold: 3, Recovery: time.Second}
	r.Rates = []Rate{{Name: "server", PerMinute: 600}}
	return r
}

// gone checks that each path is absent from the item.
func gone(paths ...[]string) func(t *testing.T, item map[string]types.AttributeValue) {
	return func(t *testing.T, item map[string]types.AttributeValue) {
		t.Helper()
		for _, p := range paths {
			if got := lookup(item, p); got != nil {
				t.Errorf("%v is still %v after a caller took and released a place", p, got)
			}
		}
	}
}

// aTime checks that the attribute is a whole number past 0.
func aTime(attr, what string) func(t *testing.T, item map[string]types.AttributeValue) {
	return func(t *testing.T, item map[string]types.AttributeValue) {
		t.Helper()
		if got := item[attr]; numberOr(got, 0) <= 0 {
			t.Errorf("%s is %v after %s; want a whole number", attr, got, what)
		}
	}
}

// putRight checks that no attribute named is malformed.
func putRight(attrs ...string) func(t *testing.T, item map[string]types.AttributeValue) {
	return func(t *testing.T, item map[string]types.AttributeValue) {
		t.Helper()
		for _, attr := range attrs {
			if got := item[attr]; got != nil && isMalformed(attr, got) {
				t.Errorf("%s is still %#v", attr, got)
			}
		}
	}
}

func takeCases() []takeCase {
	var cases []takeCase
	add := func(c ...takeCase) { cases = append(cases, c...) }
	fixed := func(es ...edit) func(time.Time) []edit { return func(time.Time) []edit { return es } }

	// A bucket or a gate entry field not a whole number reads as none; the
	// first caller repairs it with the purges it sees, in one write: a
	// caller after a holder died takes (no view, refused), purges and
	// takes, and the entry is gone, or rewritten whole when it took a
	// token from it.
	for _, e := range []struct {
		what  string
		path  []string // attr, or gate attr, entry, field
		after func(path []string) func(*testing.T, map[string]types.AttributeValue)
	}{
		{"another principal's bucket is purged", []string{RateAttr("principal:q")}, nil},
		{"the caller's own bucket is rewritten", []string{RateAttr("server")},
			func(p []string) func(*testing.T, map[string]types.AttributeValue) {
				return aTime(p[0], "a caller took a token")
			}},
		{"everyone's breaker until is purged", []string{BreakerAttr("t"), gateAll, gateUntil}, nil},
		{"another's breaker fails is purged", []string{BreakerAttr("t"), "q", gateFails}, nil},
		{"the caller's breaker last is purged", []string{BreakerAttr("t"), "p", gateLast}, nil},
		{"everyone's pause until is purged", []string{PauseAttr, gateAll, gateUntil}, nil},
	} {
		for vname, bad := range malformed() {
			edits := []edit{at(bad, e.path...)}
			if len(e.path) == 3 {
				// The entry whole, its one field malformed.
				edits = []edit{at(anEmptyMap(), e.path[0]), at(mv(map[string]types.AttributeValue{e.path[2]: bad}), e.path[:2]...)}
			}
			check := gone(e.path[:min(len(e.path), 2)])
			if e.after != nil {
				check = e.after(e.path)
			}
			add(takeCase{name: "malformed field/" + e.what + "/" + vname,
				r: guarded(2*time.Second, 10*time.Second), edits: fixed(edits...),
				dies: 2 * IdleGate, most: 3, total: 4, after: check})
		}
	}

	// A seq not a whole number at least 0 reads as none: the repair writes
	// a whole one before the waiter joins, so it joins once (a join of 1.5
	// + 1 would be a ticket not whole, purged by its next write), and
	// takes the place when it frees.
	for vname, seq := range map[string]types.AttributeValue{
		"N 1.5": nv("1.5"), "N -3": nv("-3"), "S": sv("7"), "M": anEmptyMap(),
	} {
		add(takeCase{name: "seq is joined once and made whole/" + vname,
			r: func() Request { r := capOne(10*time.Second, 10*time.Second); r.Holder = "a"; return r }(), caller: "b",
			edits: fixed(at(seq, SeqAttr)), release: 3 * time.Second, most: 3, total: 12,
			after: aTime(SeqAttr, "a waiter joined")})
	}
	// A seq at maxNumber (2^62), or one less, is left by the repair: the
	// next join must still number a whole ticket, not a half its own
	// answer's repair takes apart.
	for _, seq := range []int64{maxNumber - 1, maxNumber} {
		add(takeCase{name: fmt.Sprintf("seq at maxNumber numbers no half/%d", seq),
			r: capOne(time.Minute, time.Minute), edits: fixed(at(number(seq), SeqAttr)),
			release: 3 * time.Second, noHalf: true})
	}
	// A seq below a ticket numbered by hand MaxInt64: one past it would
	// wrap, and the repair land again and again; the ticket's caller never
	// comes and is passed over after its claim window.
	add(takeCase{name: "seq below a ticket numbered MaxInt64 is repaired once",
		r: capOne(2*time.Second, 10*time.Second),
		edits: func(now time.Time) []edit {
			return []edit{
				at(number(math.MaxInt64), QueueAttr, "x"),
				at(mv(map[string]types.AttributeValue{ticketLabel: sv("q"), ticketDeadline: number(now.Add(time.Hour).UnixMilli())}), TicketsAttr, "x"),
				at(&types.AttributeValueMemberSS{Value: []string{"x"}}, WaitingAttr("q")),
				at(number(5), SeqAttr),
			}
		},
		most: 4, total: 12})

	// A principal's, a tool's or a waiting set not a string set: a take ADDs
	// its lease id to its sets, a join to its waiting set, and ADD fails on
	// a string, a number set or a list. Another principal holds the place
	// for 3 s; p waits and takes it, with one write more than on a sound
	// item: the repair.
	for sname, attr := range map[string]string{"principal": PrincipalAttr("p"), "tool": ToolAttr("t"), "waiting": WaitingAttr("p")} {
		for vname, v := range map[string]types.AttributeValue{"S": sv("x"), "NS": aNumberSet(), "L": aList()} {
			add(takeCase{name: "set of another type/" + sname + "/" + vname,
				r:      Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 10 * time.Second, Wait: 10 * time.Second, Holder: "q", Tool: "t", ToolCap: 1},
				caller: "p", edits: fixed(at(v, attr)), release: 3 * time.Second, most: 4, total: 13})
		}
	}

	// Leases, queue, tasks or tickets replaced whole by something other than
	// a map (an operator clearing the queue): the maps are made with
	// if_not_exists, which keeps what is there, so a caller would make them
	// again and again, or fail on a path into what is no map. The place is
	// held a second: the blind take is refused, and the caller judges from
	// the item it reads.
	for _, attr := range []string{LeasesAttr, QueueAttr, TasksAttr, TicketsAttr} {
		for vname, v := range map[string]types.AttributeValue{"S": sv(""), "L": lv(), "NULL": &types.AttributeValueMemberNULL{Value: true}} {
			add(takeCase{name: "map replaced whole/" + attr + "/" + vname,
				r: capOne(2*time.Second, 10*time.Second), edits: fixed(at(v, attr)),
				release: time.Second, most: 4, total: 13})
		}
	}

	// freed not a whole number: writes condition freed on the number seen
	// and ADD 1 to it when they purge, which fails on a string or a map. A
	// principal cap conditions every take on freed; a dead holder's lease
	// is purged, which ADDs to freed.
	for vname, v := range map[string]types.AttributeValue{"N 1.5": nv("1.5"), "S": sv("3"), "M": anEmptyMap()} {
		r := capOne(2*time.Second, 10*time.Second)
		r.PrincipalCap = 1
		add(takeCase{name: "freed not whole/" + vname, r: r, edits: fixed(at(v, FreedAttr)),
			dies: 3 * time.Second, most: 4, total: 5})
	}

	// The operator's hold and the adaptive limit not a whole number read as
	// none, yet a take is conditioned on the hold at most now and on the
	// limit as seen, which neither a string nor a fraction read as 0 is.
	for vname, c := range map[string]struct {
		attr     string
		v        types.AttributeValue
		adaptive bool
	}{
		"hold S": {HoldAttr, sv("soon"), false}, "hold M": {HoldAttr, anEmptyMap(), false}, "hold N": {HoldAttr, nv("2.5"), false},
		"limit S": {LimitAttr, sv("soon"), true}, "limit N": {LimitAttr, nv("2.5"), true},
		"limit M": {LimitAttr, anEmptyMap(), true}, "limit N0": {LimitAttr, nv("0"), true},
	} {
		r := capOne(2*time.Second, 10*time.Second)
		if c.adaptive {
			r.Adaptive = &Adaptive{Min: 1}
		}
		add(takeCase{name: "hold or limit not whole/" + vname, r: r, edits: fixed(at(c.v, c.attr)),
			dies: 3 * time.Second, most: 4, total: 5})
	}

	// A half-open breaker entry with a probe or a bar whose time is not a
	// whole number (or none) is removed whole before the one caller takes
	// as its probe: a take conditioned on that time comparing with now
	// would never land.
	probeEntry := func(who string, fields map[string]types.AttributeValue) func(time.Time) []edit {
		return func(now time.Time) []edit {
			fields[gateUntil] = number(now.UnixMilli() - 1000)
			return []edit{at(mv(map[string]types.AttributeValue{who: mv(fields)}), BreakerAttr("t"))}
		}
	}
	for name, e := range map[string]func(time.Time) []edit{
		"everyone's probe expiry a string":          probeEntry(gateAll, map[string]types.AttributeValue{gateProbe: sv("gone"), gateProbeExp: sv("soon")}),
		"everyone's probe expiry a fraction":        probeEntry(gateAll, map[string]types.AttributeValue{gateProbe: sv("gone"), gateProbeExp: nv("1.5")}),
		"everyone's probe a number, with no expiry": probeEntry(gateAll, map[string]types.AttributeValue{gateProbe: nv("7")}),
		"the caller's bar with no time":             probeEntry("p", map[string]types.AttributeValue{gateBarred: sv("p")}),
		"the caller's bar a string":                 probeEntry("p", map[string]types.AttributeValue{gateBarred: sv("p"), gateBarUntil: sv("later")}),
	} {
		r := guarded(2*time.Second, 10*time.Second)
		r.Rates = nil
		add(takeCase{name: "half-open breaker probe field/" + name, r: r, edits: e, most: 4, total: 4})
	}

	// A queue, tasks or tickets entry numbered 0, not whole or not a map is
	// half a ticket, repaired away on the value seen (not on its absence,
	// refused while it stands).
	for name, es := range map[string][]edit{
		"0":            {at(nv("0"), QueueAttr, "x")},
		"1.5":          {at(nv("1.5"), QueueAttr, "x")},
		"S 7":          {at(sv("7"), QueueAttr, "x")},
		"task 0":       {at(nv("0"), TasksAttr, "x")},
		"task S 7":     {at(sv("7"), TasksAttr, "x")},
		"both, 0":      {at(nv("0"), QueueAttr, "x"), at(nv("3"), TasksAttr, "x")},
		"both, task 0": {at(nv("3"), QueueAttr, "x"), at(nv("0"), TasksAttr, "x")},
		"ticket S":     {at(nv("-2"), QueueAttr, "x"), at(sv("p"), TicketsAttr, "x")},
	} {
		add(takeCase{name: "half ticket entry/" + name, r: capOne(2*time.Second, 10*time.Second), edits: fixed(es...),
			after: gone([]string{QueueAttr, "x"}, []string{TasksAttr, "x"}, []string{TicketsAttr, "x"})})
	}

	// On the real store's rules as on the simulation's. dynalite compares
	// maps and lists by reference in an "=" condition, so a value written
	// as a map or a list is repaired on its type.
	add(takeCase{name: "maps and lists in many places", both: true,
		r: guarded(5*time.Second, 5*time.Second),
		edits: fixed(
			at(aMap(), QueueAttr, "x"), at(aList(), TasksAttr, "y"),
			at(aMap(), RateAttr("principal:q")), at(aList(), RateAttr("server")), at(aMap(), SeqAttr),
			at(mv(map[string]types.AttributeValue{
				gateAll: mv(map[string]types.AttributeValue{gateUntil: aList()}),
				"q":     mv(map[string]types.AttributeValue{gateLast: aMap()}),
			}), BreakerAttr("t"))),
		after: func(t *testing.T, item map[string]types.AttributeValue) {
			gone([]string{QueueAttr, "x"}, []string{TasksAttr, "y"}, []string{RateAttr("principal:q")}, []string{BreakerAttr("t"), "q"})(t, item)
			aTime(RateAttr("server"), "the caller took a token")(t, item)
		}})
	// A map, sets, a gate and counts written as other types at once (a
	// list, a number set, NULL and BOOL on their types, an empty string on
	// its value) are put right by the first caller's one write; it then
	// takes the place a dead holder left.
	many := map[string]types.AttributeValue{
		QueueAttr: aList(), TasksAttr: sv(""), TicketsAttr: &types.AttributeValueMemberNULL{Value: true},
		FreedAttr: sv("3"), HoldAttr: &types.AttributeValueMemberBOOL{Value: true}, WaitingAttr("p"): aNumberSet(),
		PrincipalAttr("q"): sv("x"), PauseAttr: nv("5"),
	}
	var manyEdits []edit
	var manyAttrs []string
	for attr, v := range many {
		manyEdits, manyAttrs = append(manyEdits, at(v, attr)), append(manyAttrs, attr)
	}
	add(takeCase{name: "many types at once, after a holder died", both: true,
		r: Request{Key: "srv", Cap: 1, Hold: time.Second, Wait: 10 * time.Second, MaxQueued: 8, Holder: "p",
			Tool: "t", ToolCap: 1, Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second}},
		edits: fixed(manyEdits...), dies: 1500 * time.Millisecond, after: putRight(manyAttrs...)})
	// More than maxRepair malformed values, freed among those a first
	// repair leaves: that repair must not ADD to freed as it stands, or the
	// store refuses every repair alike. The first caller takes blind, its
	// release ADDs to freed, and the next reads the item and repairs.
	add(takeCase{name: "more than maxRepair values, freed among the rest", both: true,
		r:       capOne(time.Second, 5*time.Second),
		edits:   fixed(append(gatesNotMaps("b", maxRepair), at(sv("x"), FreedAttr))...),
		callers: 2, after: putRight(FreedAttr)})
	// A call that only pays its buckets (no cap, no breaker) repairs too:
	// its charge of a bucket written as a string is conditioned on the
	// bucket absent or before now, and a queue entry numbered 0 fails its
	// condition that the queue holds no ticket more than it sees.
	charge := Request{Key: "srv", Holder: "p", Hold: time.Second, Rates: []Rate{{Name: "server", PerMinute: 600}}}
	add(takeCase{name: "a charge alone/its bucket a string", both: true, r: charge,
		edits: fixed(at(sv("soon"), RateAttr("server"))), callers: 2})
	add(takeCase{name: "a charge alone/a queue entry numbered 0", both: true, r: charge,
		edits: fixed(at(mv(map[string]types.AttributeValue{"x": number(0)}), QueueAttr)), callers: 2})
	return cases
}

// A caller after a hand edit gets its place, within its bounds, and the
// item after is as each row says.
func TestAHandEditDoesNotWedgeTheCallersAfterIt(t *testing.T) {
	for _, c := range takeCases() {
		runRow(t, c.name, c.both, c.run)
	}
}

// runRow runs a hand-edit table's row: on dynalite and the in-memory
// store when both, else on the in-memory store in fake time.
func runRow(t *testing.T, name string, both bool, run func(t *testing.T, db API, table string)) {
	t.Run(name, func(t *testing.T) {
		if both {
			onBothStores(t, run)
			return
		}
		synctest.Test(t, func(t *testing.T) { run(t, newMemStore(), rgTable) })
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
				r := capOne(10*time.Second, 20*time.Second)
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
					q, _ := rgItem(t, db, rgTable, "srv")[QueueAttr].(*types.AttributeValueMemberM)
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
				for id, n := range numbers() {
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
				if strings.Join(order, " ") != "a b c" {
					t.Errorf("served %v; want first come, first served: [a b c]", order)
				}
			})
		})
	}
}

// A ticket id written by hand into two principals' waiting sets reads the
// same at every read: a half, each membership put right, whichever set a
// map's order gives first.
func TestATicketInTwoWaitingSetsReadsAlikeEveryTime(t *testing.T) {
	item := map[string]types.AttributeValue{
		LeasesAttr: anEmptyMap(),
		QueueAttr:  mv(map[string]types.AttributeValue{"x.1": number(1)}),
		TasksAttr:  anEmptyMap(),
		TicketsAttr: mv(map[string]types.AttributeValue{"x.1": mv(map[string]types.AttributeValue{
			ticketLabel: sv("q"), ticketDeadline: number(math.MaxInt32)})}),
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
