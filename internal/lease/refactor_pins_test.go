package lease

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// trValue renders an attribute value with no pointer in it (map keys
// sorted), so that two builds' writes compare as text.
func trValue(v types.AttributeValue) string {
	switch x := v.(type) {
	case nil:
		return "<nil>"
	case *types.AttributeValueMemberN:
		return "N:" + x.Value
	case *types.AttributeValueMemberS:
		return "S:" + strconv.Quote(x.Value)
	case *types.AttributeValueMemberSS:
		return "SS:" + strconv.Quote(strings.Join(slices.Sorted(slices.Values(x.Value)), "\x00"))
	case *types.AttributeValueMemberNS:
		return "NS:" + strings.Join(slices.Sorted(slices.Values(x.Value)), ",")
	case *types.AttributeValueMemberBOOL:
		return "BOOL:" + strconv.FormatBool(x.Value)
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberB:
		return "B:" + strconv.Quote(string(x.Value))
	case *types.AttributeValueMemberL:
		parts := make([]string, len(x.Value))
		for i, e := range x.Value {
			parts[i] = trValue(e)
		}
		return "L[" + strings.Join(parts, ",") + "]"
	case *types.AttributeValueMemberM:
		return "M{" + trItem(x.Value) + "}"
	}
	return fmt.Sprintf("?%T", v)
}

func trItem(m map[string]types.AttributeValue) string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, strconv.Quote(k)+"="+trValue(m[k]))
	}
	return strings.Join(parts, ",")
}

// TestSimTranscript writes, for each simulation seed, a digest of
// every write the limiter sent (update and condition expressions, names,
// values), the store's answer and the item after it, and the run's log
// (which names the errors its callers got), to the file named by
// LEASE_SIM_TRANSCRIPT: the same seeds run on two builds of the package
// give the same digests when the two send the same writes and return the
// same errors in the same schedules (the simulation replays nearly every
// seed exactly: run each build more than once before reading a lone
// difference). It is how a change meant to keep every write is checked
// write for write. Skipped without the variable. Seeds: LEASE_SIM_FROM /
// LEASE_SIM_SEEDS as the simulation (default 11,880,000 and 2,000).
func TestSimTranscript(t *testing.T) {
	out := os.Getenv("LEASE_SIM_TRANSCRIPT")
	if out == "" {
		t.Skip("LEASE_SIM_TRANSCRIPT names the file to write")
	}
	from, count := 11880000, 2000
	if v := os.Getenv("LEASE_SIM_FROM"); v != "" {
		from, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("LEASE_SIM_SEEDS"); v != "" {
		count, _ = strconv.Atoi(v)
	}
	full := os.Getenv("LEASE_SIM_TRANSCRIPT_FULL") != ""
	var b strings.Builder
	for i := range count {
		seed := uint64(from + i)
		failures, log, trace := runSim(t, seed, map[string]int{})
		var s strings.Builder
		for _, w := range trace {
			fmt.Fprintf(&s, "U %s\nC %s\nN %s\n", aws.ToString(w.in.UpdateExpression), aws.ToString(w.in.ConditionExpression),
				func() string {
					var p []string
					for _, k := range slices.Sorted(func(yield func(string) bool) {
						for k := range w.in.ExpressionAttributeNames {
							if !yield(k) {
								return
							}
						}
					}) {
						p = append(p, k+"="+w.in.ExpressionAttributeNames[k])
					}
					return strings.Join(p, ",")
				}())
			fmt.Fprintf(&s, "V %s\nE %v\nI %s\n", trItem(w.in.ExpressionAttributeValues), w.err, trItem(w.item))
		}
		for _, l := range log {
			s.WriteString("L " + l + "\n")
		}
		for _, f := range failures {
			s.WriteString("F " + f + "\n")
		}
		// Claims are drawn at random (crypto/rand): named by first sight.
		text := trClaims(s.String())
		if full {
			fmt.Fprintf(&b, "=== seed %d\n%s", seed, text)
		} else {
			fmt.Fprintf(&b, "%d %x %d writes %d failures\n", seed, sha256.Sum256([]byte(text)), len(trace), len(failures))
		}
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

var trClaim = regexp.MustCompile(`\b[A-Z2-7]{12}\b`)

// trClaims names each claim token in s by its first sight.
func trClaims(s string) string {
	seen := map[string]string{}
	return trClaim.ReplaceAllStringFunc(s, func(c string) string {
		if seen[c] == "" {
			seen[c] = "CLAIM" + strconv.Itoa(len(seen))
		}
		return seen[c]
	})
}

func pinM(kv ...any) *types.AttributeValueMemberM {
	m := map[string]types.AttributeValue{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1].(types.AttributeValue)
	}
	return &types.AttributeValueMemberM{Value: m}
}

func pinS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// A lease of a task whose ticket is a
// half (no waiting set names it) is held only when the half's entry is a
// map whose w is an S equal to the lease's claim.
func TestATaskLeaseOfAHalfTicketIsHeldOnlyUnderItsClaim(t *testing.T) {
	const id, exp = "L1", int64(5000)
	for _, c := range []struct {
		name    string
		details types.AttributeValue
		claim   string
		want    bool
	}{
		{"claim matches", pinM(ticketClaim, pinS("CLAIMX"), ticketTaskID, pinS("t")), "CLAIMX", true},
		{"another claim", pinM(ticketClaim, pinS("OTHER"), ticketTaskID, pinS("t")), "CLAIMX", false},
		{"no claim", pinM(ticketTaskID, pinS("t")), "CLAIMX", false},
		{"claim of another type", pinM(ticketClaim, number(7), ticketTaskID, pinS("t")), "CLAIMX", false},
		{"claim empty S against a claim", pinM(ticketClaim, pinS("")), "CLAIMX", false},
		{"entry no map", pinS("CLAIMX"), "CLAIMX", false},
		{"lease names no claim", pinS("junk"), "", true},
	} {
		v := parseItem(map[string]types.AttributeValue{
			LeasesAttr:  pinM(id, number(exp)),
			QueueAttr:   pinM(),
			TasksAttr:   pinM(id, number(3)),
			TicketsAttr: pinM(id, c.details),
		})
		if len(v.halves) != 1 || v.ticketFor(id) != nil {
			t.Fatalf("%s: want the ticket a half, got halves %v", c.name, v.halves)
		}
		ls := &Lease{id: id, task: true, claim: c.claim, exps: []int64{exp}}
		if got := ls.heldIn(v); got != c.want {
			t.Errorf("%s: heldIn = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestParseItemReadsFieldsOfAnotherTypeAsNone pins what parseItem reads of fields of another
// type than the protocol writes (strOr, whole, the itemMaps hasMaps test),
// and liveLeases/liveIn/ticketFor on the result.
func TestParseItemReadsFieldsOfAnotherTypeAsNone(t *testing.T) {
	for _, c := range []struct {
		v    types.AttributeValue
		want bool
	}{{number(12), true}, {number(-3), true}, {&types.AttributeValueMemberN{Value: "1.5"}, false},
		{&types.AttributeValueMemberN{Value: "99999999999999999999"}, false}, {pinS("12"), false}, {nil, false}} {
		if got := whole(c.v); got != c.want {
			t.Errorf("whole(%s) = %v, want %v", trValue(c.v), got, c.want)
		}
	}
	maps4 := func() map[string]types.AttributeValue {
		return map[string]types.AttributeValue{LeasesAttr: pinM(), QueueAttr: pinM(), TasksAttr: pinM(), TicketsAttr: pinM()}
	}
	if !parseItem(maps4()).hasMaps {
		t.Error("all four maps: hasMaps false")
	}
	for _, attr := range []string{LeasesAttr, QueueAttr, TasksAttr, TicketsAttr} {
		it := maps4()
		delete(it, attr)
		if parseItem(it).hasMaps {
			t.Errorf("%s absent: hasMaps true", attr)
		}
		it[attr] = pinS("x")
		if parseItem(it).hasMaps {
			t.Errorf("%s an S: hasMaps true", attr)
		}
	}
	if parseItem(nil).hasMaps {
		t.Error("no item: hasMaps true")
	}
	it := maps4()
	it[WaitingAttr("p1")] = &types.AttributeValueMemberSS{Value: []string{"A", "B"}}
	it[QueueAttr] = pinM("A", number(1), "B", number(2))
	it[TicketsAttr] = pinM(
		"A", pinM(ticketTool, number(4), ticketTaskID, pinS("task"), ticketClaim, &types.AttributeValueMemberSS{Value: []string{"c"}}, ticketStarted, pinS("9")),
		"B", pinM(ticketTool, pinS("tool"), ticketStarted, number(77)))
	it[LeasesAttr] = pinM("A", number(100), "B", number(99), "C", number(101))
	it[BreakerAttr("b")] = pinM("p1", pinM(gateProbe, pinS("A"), gateProbeExp, number(5)), "p2",
		pinM(gateBarred, pinS("p1"), gateBarUntil, number(6)))
	v := parseItem(it)
	a, b := v.ticketFor("A"), v.ticketFor("B")
	if a == nil || b == nil || v.ticketFor("C") != nil {
		t.Fatalf("tickets: %v %v", a, b)
	}
	if a.tool != "" || a.taskID != "task" || a.claim != "" || a.started != 0 || b.tool != "tool" || b.started != 77 {
		t.Errorf("ticket fields: A %+v B %+v", *a, *b)
	}
	if !slices.ContainsFunc(v.fixes, func(f fix) bool { return slices.Equal(f.path, []string{TicketsAttr, "A", ticketStarted}) }) {
		t.Errorf("a start mark of type S is no fix: %v", v.fixes)
	}
	g := v.gates[BreakerAttr("b")]
	if e := g.entry("p1"); e.probe != "A" || e.probeExp != 5 || e.seen == nil {
		t.Errorf("gate entry p1: %+v", e)
	}
	if e := g.entry("p2"); e.barred != "p1" || e.barUntil != 6 || e.probe != "" {
		t.Errorf("gate entry p2: %+v", e)
	}
	if n := v.liveLeases(100); n != 2 {
		t.Errorf("liveLeases(100) = %d, want 2", n)
	}
	if n := v.liveIn(100, []string{"A", "B", "X", "A"}); n != 2 {
		t.Errorf("liveIn = %d, want 2 (A twice)", n)
	}
}

// TestReleaseTellsABreakerOnlyFailuresAndSuccesses pins what release tells a breaker with
// no probe of its own: a failure or a success is told (an entry written
// or conditioned on), overloaded and unused are told as abandoned (no
// breaker in the write), and without extras nothing; a nil and an empty
// probes build the same write.
func TestReleaseTellsABreakerOnlyFailuresAndSuccesses(t *testing.T) {
	at := time.Now() // one moment for every write compared
	l := New(newMemStore(), "t", Options{Clock: func() time.Time { return at }})
	br := &Breaker{Name: "b", Threshold: 3, Recovery: time.Minute}
	render := func(u *update) string {
		return u.expression() + " IF " + strings.Join(u.conds, " AND ") + " N " + trItem(func() map[string]types.AttributeValue {
			m := map[string]types.AttributeValue{}
			for k, v := range u.names {
				m[k] = pinS(v)
			}
			return m
		}()) + " V " + trItem(u.values)
	}
	for _, c := range []struct {
		o      Outcome
		extras bool
		told   bool
	}{{Failure, true, true}, {Success, true, true}, {Abandoned, true, false}, {Overloaded, true, false}, {Unused, true, false},
		{Failure, false, false}} {
		var got []string
		for _, probes := range [][]gateRef{nil, {}} {
			ls := &Lease{l: l, id: "L1", req: Request{Key: "k", Holder: "p1", Breaker: br}, exps: []int64{1}}
			u, tr := ls.release(c.o, probes, false, c.extras, false, l.board("k"), 0)
			if tr != NoTransition && c.o != Failure {
				t.Errorf("outcome %v: transition %v", c.o, tr)
			}
			got = append(got, render(u))
		}
		if got[0] != got[1] {
			t.Errorf("outcome %v extras %v: nil and empty probes differ:\n%s\n%s", c.o, c.extras, got[0], got[1])
		}
		if told := strings.Contains(got[0], strconv.Quote(BreakerAttr("b"))); told != c.told {
			t.Errorf("outcome %v extras %v: breaker in the write %v, want %v: %s", c.o, c.extras, told, c.told, got[0])
		}
	}
}

// refuseEveryWrite refuses every write as invalid (a client error: no retry).
type refuseEveryWrite struct{ *memStore }

func (refuseEveryWrite) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, &errValidation{"refused"}
}

// Admin's errors for a write the store refuses name the operation and the
// key, and the store's error is still found by errors.As.
func TestAdminErrorsNameTheOperationAndWrapTheStoresError(t *testing.T) {
	ctx := context.Background()
	ms := newMemStore()
	until := time.Now().Add(time.Hour).UnixMilli()
	ms.items["k"] = map[string]types.AttributeValue{"limiter_key": pinS("k"), HoldAttr: number(until),
		BreakerAttr("b"): pinM(gateAll, pinM(gateUntil, number(until)))}
	a := NewAdmin(refuseEveryWrite{ms}, "t")
	for name, c := range map[string]struct {
		err    error
		prefix string
	}{
		"pause":  {a.Pause(ctx, "k", time.Now().Add(2*time.Hour)), "lease: pause k: "},
		"resume": {a.Resume(ctx, "k"), "lease: resume k: "},
		"reset":  {a.ResetBreaker(ctx, "k", "b"), "lease: reset breaker b of k: "},
	} {
		var ve *errValidation
		if c.err == nil || !strings.HasPrefix(c.err.Error(), c.prefix) || !errors.As(c.err, &ve) {
			t.Errorf("%s: %v, want %q… wrapping the store's error", name, c.err, c.prefix)
		}
	}
}
