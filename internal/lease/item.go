package lease

import (
	"cmp"
	"iter"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// view is a lease item as one answer of the store showed it.
type view struct {
	// leases maps each lease id to its expiry; oddLeases holds, as
	// stored, those whose expiry is not a whole number (never expiring).
	leases    map[string]int64
	oddLeases map[string]types.AttributeValue
	// sets maps each tool, principal or waiting set attribute to its
	// members.
	sets map[string][]string
	// queue holds the tickets, by number; halves the parts of tickets
	// that are not whole.
	queue   []*ticket
	halves  []half
	hasMaps bool // leases, queue and tickets exist
	// fixes lists, as stored, the values of a type or shape the protocol
	// never writes, which read as none (see repair); empty when the item
	// holds none.
	fixes      []fix
	seq, freed int64
	refunds    int64 // refunds landed
	callMS     int64
	hold       int64
	gates      map[string]*gate
	// rates maps each bucket attribute to its arrival time.
	rates map[string]int64
	// limitState is the adaptive limit.
	limitState
}

// ticket is one waiting caller.
type ticket struct {
	id, label string
	// n is its number, from seq; deadline is when its caller gives up
	// (Unix ms).
	n, deadline int64
	tool        string
	toolCap     int
	// toolRPM is its tool's rate limit, a minute (0: none).
	toolRPM int
	// task: a task's ticket (in tasks), of task taskID, a worker last
	// started for it at started (Unix ms; 0: never), the first of the
	// starts since its turn came at first (0: as started, a mark made by
	// an older instance).
	task           bool
	taskID         string
	started, first int64
	// claim names the worker's claim that last took its place (see
	// Tasks in the package doc).
	claim string
	// look is its announced look period (legacyLook if none), read as
	// MaxLookFar at most.
	look time.Duration
	// nothing: its call holds nothing, so its take gives its principal
	// no place more.
	nothing bool
}

// Ticket fields, inside each value of the tickets map.
const (
	ticketLabel    = "p" // read from its waiting set; written for older instances
	ticketDeadline = "d"
	ticketTool     = "t"
	ticketToolCap  = "c"
	ticketToolRPM  = "r"
	ticketTaskID   = "x"
	ticketStarted  = "s"
	ticketFirst    = "f"
	ticketClaim    = "w"
	ticketLook     = "l"
	// ticketNothing is 0 in the ticket of a call that holds nothing (see
	// Buckets in the package doc); absent, the call holds a place.
	ticketNothing = "h"
)

// isSetAttr reports whether attr is a tool, principal or waiting set.
func isSetAttr(attr string) bool {
	return strings.HasPrefix(attr, ToolAttrPrefix) || strings.HasPrefix(attr, PrincipalAttrPrefix) || strings.HasPrefix(attr, WaitingAttrPrefix)
}

// fix is one malformed value of an item, as stored, at path; member,
// when set, names the member of the set at path that goes.
type fix struct {
	path   []string
	seen   types.AttributeValue
	member string
}

// parseItem reads a lease item: a lease whose expiry is not a number
// never expires; a ticket not whole is a half. A malformed value (see
// repair) reads as none and is listed in fixes.
func parseItem(item map[string]types.AttributeValue) *view {
	v := &view{leases: map[string]int64{}, sets: map[string][]string{}, gates: map[string]*gate{},
		rates: map[string]int64{}, limitState: limitState{bases: map[string]int64{}}}
	raw := map[string]map[string]types.AttributeValue{} // each map's entries as stored
	v.hasMaps = !slices.ContainsFunc(itemMaps, func(attr string) bool { return isMalformed(attr, item[attr]) })
	bad := func(seen types.AttributeValue, path ...string) {
		v.fixes = append(v.fixes, fix{path: path, seen: seen})
	}
	nums := map[string]*int64{SeqAttr: &v.seq, FreedAttr: &v.freed, RefundsAttr: &v.refunds, CallAttr: &v.callMS, HoldAttr: &v.hold}
	for attr, a := range item {
		if isMalformed(attr, a) {
			bad(a, attr)
			continue
		}
		switch x := a.(type) {
		case *types.AttributeValueMemberM:
			raw[attr] = x.Value
			if isGateAttr(attr) {
				v.gates[attr] = parseGate(attr, x, bad)
			}
		case *types.AttributeValueMemberSS:
			if isSetAttr(attr) {
				v.sets[attr] = x.Value
			}
		case *types.AttributeValueMemberN:
			switch n := numberOr(x, 0); {
			case nums[attr] != nil:
				*nums[attr] = n
			case strings.HasPrefix(attr, RateAttrPrefix):
				v.rates[attr] = n
			default:
				v.limitState.read(attr, n, "")
			}
		case *types.AttributeValueMemberS:
			v.limitState.read(attr, 0, x.Value)
		}
	}
	waitingOf := map[string][]string{} // a ticket's in more than one is a half
	for _, attr := range slices.Sorted(maps.Keys(v.sets)) {
		if label, ok := strings.CutPrefix(attr, WaitingAttrPrefix); ok {
			for _, id := range v.sets[attr] {
				waitingOf[id] = append(waitingOf[id], label)
			}
		}
	}
	for id, e := range raw[LeasesAttr] {
		v.leases[id] = numberOr(e, math.MaxInt64)
		if !whole(e) {
			put(&v.oddLeases, id, e)
		}
	}
	queue, tasks, details := raw[QueueAttr], raw[TasksAttr], raw[TicketsAttr]
	ids := map[string]bool{}
	for _, keys := range []iter.Seq[string]{maps.Keys(queue), maps.Keys(tasks), maps.Keys(details), maps.Keys(waitingOf)} {
		for id := range keys {
			ids[id] = true
		}
	}
	for id := range ids {
		var w string
		if ws := waitingOf[id]; len(ws) == 1 {
			w = ws[0]
		}
		qn, inQueue := queue[id]
		tn, isTask := tasks[id]
		n := numberOr(qn, 0)
		if isTask && !inQueue {
			n = numberOr(tn, 0)
		}
		d, _ := details[id].(*types.AttributeValueMemberM)
		// Its principal is its waiting set's; a body that names it too
		// (p, which joins still write for older instances) must name the
		// same.
		label := w
		if d != nil {
			switch p := d.Value[ticketLabel].(type) {
			case nil:
			case *types.AttributeValueMemberS:
				if p.Value != w {
					label = ""
				}
			default:
				// Of another type: it names no principal, and reads as
				// none (put right alone).
				bad(p, TicketsAttr, id, ticketLabel)
			}
		}
		if n <= 0 || n >= maxNumber || d == nil || w == "" || label != w || isTask && inQueue {
			// A half: each part of it is malformed.
			v.halves = append(v.halves, half{id: id, n: n, details: details[id]})
			for _, attr := range []string{QueueAttr, TasksAttr, TicketsAttr} {
				if e := raw[attr][id]; e != nil {
					bad(e, attr, id)
				}
			}
			for _, w := range waitingOf[id] {
				v.fixes = append(v.fixes, fix{path: []string{WaitingAttr(w)}, seen: item[WaitingAttr(w)], member: id})
			}
			continue
		}
		t := &ticket{id: id, label: label, n: n, deadline: numberOr(d.Value[ticketDeadline], 0),
			toolCap: int(numberOr(d.Value[ticketToolCap], 0)), toolRPM: int(numberOr(d.Value[ticketToolRPM], 0)),
			task: isTask, started: numberOr(d.Value[ticketStarted], 0), first: numberOr(d.Value[ticketFirst], 0), tool: strOr(d.Value[ticketTool]),
			taskID: strOr(d.Value[ticketTaskID]), claim: strOr(d.Value[ticketClaim]),
			look:    time.Duration(min(max(numberOr(d.Value[ticketLook], legacyLook.Milliseconds()), 0), MaxLookFar.Milliseconds())) * time.Millisecond,
			nothing: d.Value[ticketNothing] != nil && numberOr(d.Value[ticketNothing], 1) == 0}
		for _, f := range []string{ticketStarted, ticketFirst} {
			if s := d.Value[f]; s != nil && !whole(s) {
				bad(s, TicketsAttr, id, f) // reads as never started
			}
		}
		v.queue = append(v.queue, t)
	}
	slices.SortFunc(v.queue, func(a, b *ticket) int { return cmp.Or(cmp.Compare(a.n, b.n), strings.Compare(a.id, b.id)) })
	slices.SortFunc(v.halves, func(a, b half) int { return strings.Compare(a.id, b.id) })
	if s := item[SeqAttr]; (s == nil || whole(s)) && (v.seq < v.lastNumber() || v.seq >= maxNumber-1) {
		// Below 0 or a ticket's number (absent, or lowered by hand): a
		// join adding 1 would number a newcomer before callers waiting;
		// from maxNumber − 1, it would number it maxNumber or more, a
		// half.
		bad(s, SeqAttr)
	}
	slices.SortFunc(v.fixes, func(a, b fix) int { return slices.Compare(a.path, b.path) })
	return v
}

// itemMaps are the maps of every item (hasMaps): absent, or of another
// type (malformed, reading as none), one is made by a repair.
var itemMaps = []string{LeasesAttr, QueueAttr, TasksAttr, TicketsAttr}

// maxNumber bounds seq, and a ticket's number is below it: one past
// every ticket, as the repair sets seq (renumbering them when that is
// maxNumber − 1 or more), is a whole number however far a hand edit
// numbered one, and no count of joins reaches it.
const maxNumber = 1 << 62

// isMalformed: attribute attr holds a of a type the protocol never
// writes there, which reads as none (see repair).
func isMalformed(attr string, a types.AttributeValue) bool {
	switch {
	case slices.Contains(itemMaps, attr) || isGateAttr(attr):
		_, ok := a.(*types.AttributeValueMemberM)
		return !ok
	case isSetAttr(attr):
		_, ok := a.(*types.AttributeValueMemberSS)
		return !ok
	case attr == LimitSigAttr:
		// A label, which a release's down evidence is conditioned on.
		_, ok := a.(*types.AttributeValueMemberS)
		return !ok
	case attr == FreedAttr || attr == RefundsAttr || attr == HoldAttr || attr == LimitAttr || attr == LimitRoundAttr || attr == LimitOKAttr ||
		attr == SeqAttr || strings.HasPrefix(attr, RateAttrPrefix):
		return !whole(a)
	}
	return false
}

// needsRepair: v lacks its maps or shows values malformed.
func (v *view) needsRepair() bool { return !v.hasMaps || len(v.fixes) > 0 }

// numberOr reads an N attribute, or returns def.
func numberOr(v types.AttributeValue, def int64) int64 {
	if n, ok := v.(*types.AttributeValueMemberN); ok {
		if i, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
			return i
		}
	}
	return def
}

// strOr reads an S attribute, or returns "".
func strOr(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// whole reports whether v is an N attribute holding a whole number: one
// numberOr reads whatever its default.
func whole(v types.AttributeValue) bool { return numberOr(v, 0) == numberOr(v, 1) }

func number(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// lastNumber is the highest ticket number v shows (0: none).
func (v *view) lastNumber() int64 {
	n := int64(0)
	for _, t := range v.queue {
		n = max(n, t.n)
	}
	for _, h := range v.halves {
		if h.n < maxNumber {
			n = max(n, h.n)
		}
	}
	return n
}

// ticketFor returns the ticket of id, if it waits.
func (v *view) ticketFor(id string) *ticket {
	if i := slices.IndexFunc(v.queue, func(t *ticket) bool { return t.id == id }); i >= 0 {
		return v.queue[i]
	}
	return nil
}

// live reports whether t's deadline has not passed at now.
func (t *ticket) live(now int64) bool { return t.deadline >= now }

// unclaimedSince is when task ticket t's starts first went out unclaimed:
// first, or started for a mark of an older instance (or a first no start
// could have: none before its last); 0 with no start out, or one no start
// could have made (not after 1970, written by hand).
func (t *ticket) unclaimedSince() int64 {
	switch {
	case t.started <= 0:
		return 0
	case t.first > 0 && t.first <= t.started:
		return t.first
	}
	return t.started
}

// passed reports whether the callers behind task ticket t pass it at now:
// its starts have gone unclaimed StartTimeout since the first (see Tasks
// in the package doc), however often it was started again since.
func (t *ticket) passed(now int64) bool {
	s := t.unclaimedSince()
	return t.task && s > 0 && now-s >= StartTimeout.Milliseconds()
}

// claimed reports whether task ticket t is claimed at now: a live lease of
// its id holds its place (see Tasks in the package doc).
func (v *view) claimed(t *ticket, now int64) bool {
	exp, ok := v.leases[t.id]
	return t.task && ok && exp >= now && t.live(now)
}

// waits reports whether t waits at now: live, and not claimed.
func (v *view) waits(t *ticket, now int64) bool { return t.live(now) && !v.claimed(t, now) }

// countIf counts the elements of s that f holds of.
func countIf[T any](s []T, f func(T) bool) int {
	n := 0
	for _, x := range s {
		if f(x) {
			n++
		}
	}
	return n
}

// waiting counts the tickets of callers (task false) or of tasks waiting
// at now (live and not claimed).
func (v *view) waiting(now int64, task bool) int {
	return countIf(v.queue, func(t *ticket) bool { return v.waits(t, now) && t.task == task })
}

// tickets counts the tickets, live, claimed or not, of callers (task
// false) or of tasks: the size of their map.
func (v *view) tickets(task bool) int {
	return countIf(v.queue, func(t *ticket) bool { return t.task == task })
}

// kindAttr is the map holding the numbers of tickets of callers (task
// false) or of tasks.
func kindAttr(task bool) string {
	if task {
		return TasksAttr
	}
	return QueueAttr
}

// liveIn counts the leases of ids that have not expired at now.
func (v *view) liveIn(now int64, ids []string) int {
	return countIf(ids, func(id string) bool { exp, ok := v.leases[id]; return ok && exp >= now })
}

// liveLeases counts the leases that have not expired at now.
func (v *view) liveLeases(now int64) int {
	return countIf(slices.Collect(maps.Values(v.leases)), func(exp int64) bool { return exp >= now })
}

// held counts the live leases of each principal label.
func (v *view) held(now int64) map[string]int {
	h := map[string]int{}
	for attr, members := range v.sets {
		if label, ok := strings.CutPrefix(attr, PrincipalAttrPrefix); ok {
			h[label] = v.liveIn(now, members)
		}
	}
	return h
}

// setsOf lists the sets lease id is a member of, but waiting sets.
func (v *view) setsOf(id string) []string {
	return slices.DeleteFunc(slices.Sorted(maps.Keys(v.sets)), func(attr string) bool {
		return strings.HasPrefix(attr, WaitingAttrPrefix) || !slices.Contains(v.sets[attr], id)
	})
}

// half is a ticket that is not whole (see repair): its id, its number
// (0: none, or not a whole number) and its tickets entry.
type half struct {
	id      string
	n       int64
	details types.AttributeValue
}

// staleLeases lists the leases expired at now, oldest first.
func (v *view) staleLeases(now int64) []string {
	ids := slices.DeleteFunc(slices.Collect(maps.Keys(v.leases)), func(id string) bool { return v.leases[id] >= now })
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(v.leases[a], v.leases[b]), strings.Compare(a, b)) })
	return ids
}

// staleTickets lists the tickets whose deadline passed at now, oldest
// first.
func (v *view) staleTickets(now int64) []*ticket {
	return slices.DeleteFunc(slices.Clone(v.queue), func(t *ticket) bool { return t.live(now) })
}
