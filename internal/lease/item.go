package lease

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// view is a lease item as one answer of the store showed it.
type view struct {
	// leases maps each lease id to its expiry.
	leases map[string]int64
	// sets maps each tool or principal set attribute to its members.
	sets map[string][]string
	// queue holds the tickets of the queue, by number; strays are queue
	// entries or ticket details without their other half, and tombstones
	// the tickets entries that are tombstones: each with the value a purge
	// is conditioned on.
	queue      []*ticket
	strays     []stale
	tombstones map[string]int64
	hasMaps    bool // leases, queue and tickets exist
	seq, freed int64
	callMS     int64
	breakers   map[string]breakerState
	// rates maps each bucket attribute to its arrival time.
	rates map[string]int64
	// limitState is the adaptive limit and the pause.
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
}

// Ticket fields, inside each value of the tickets map.
const (
	ticketLabel    = "p"
	ticketDeadline = "d"
	ticketTool     = "t"
	ticketToolCap  = "c"
	ticketTomb     = "x"
)

// isSetAttr reports whether attr is a tool or principal set.
func isSetAttr(attr string) bool {
	return strings.HasPrefix(attr, ToolAttrPrefix) || strings.HasPrefix(attr, PrincipalAttrPrefix)
}

// parseItem reads a lease item. An entry that cannot be read counts as the
// store counts it: a lease whose expiry is not a number (a hand edit)
// never expires; a ticket without its details is stale.
func parseItem(item map[string]types.AttributeValue) *view {
	v := &view{leases: map[string]int64{}, sets: map[string][]string{}, tombstones: map[string]int64{}, breakers: map[string]breakerState{},
		rates: map[string]int64{}, limitState: limitState{bases: map[string]int64{}}}
	queue, details := map[string]int64{}, map[string]*types.AttributeValueMemberM{}
	_, hasLeases := item[LeasesAttr].(*types.AttributeValueMemberM)
	_, hasQueue := item[QueueAttr].(*types.AttributeValueMemberM)
	_, hasTickets := item[TicketsAttr].(*types.AttributeValueMemberM)
	v.hasMaps = hasLeases && hasQueue && hasTickets
	for attr, a := range item {
		switch x := a.(type) {
		case *types.AttributeValueMemberM:
			switch attr {
			case LeasesAttr:
				for id, e := range x.Value {
					v.leases[id] = numberOr(e, math.MaxInt64)
				}
			case QueueAttr:
				for id, n := range x.Value {
					queue[id] = numberOr(n, 0)
				}
			case TicketsAttr:
				for id, d := range x.Value {
					if m, ok := d.(*types.AttributeValueMemberM); ok {
						details[id] = m
					} else {
						v.strays = append(v.strays, stale{attr: TicketsAttr, id: id})
					}
				}
			}
		case *types.AttributeValueMemberSS:
			if isSetAttr(attr) {
				v.sets[attr] = x.Value
			}
		case *types.AttributeValueMemberN:
			switch attr {
			case SeqAttr:
				v.seq = numberOr(x, 0)
			case FreedAttr:
				v.freed = numberOr(x, 0)
			case CallAttr:
				v.callMS = numberOr(x, 0)
			default:
				if strings.HasPrefix(attr, RateAttrPrefix) {
					v.rates[attr] = numberOr(x, 0)
				} else {
					v.limitState.read(attr, numberOr(x, 0), "")
				}
			}
		case *types.AttributeValueMemberS:
			v.limitState.read(attr, 0, x.Value)
		}
		if IsBreakerAttr(attr) {
			_, name, _ := strings.Cut(attr, ":")
			v.breakers[name] = parseBreaker(item, name)
		}
	}
	for id, d := range details {
		if x, ok := d.Value[ticketTomb]; ok {
			v.tombstones[id] = numberOr(x, 0)
			continue
		}
		n, queued := queue[id]
		if !queued || n <= 0 {
			v.strays = append(v.strays, stale{attr: TicketsAttr, id: id, seen: d.Value[ticketDeadline], field: ticketDeadline})
			continue
		}
		t := &ticket{id: id, n: n, deadline: numberOr(d.Value[ticketDeadline], 0)}
		if s, ok := d.Value[ticketLabel].(*types.AttributeValueMemberS); ok {
			t.label = s.Value
		}
		if s, ok := d.Value[ticketTool].(*types.AttributeValueMemberS); ok {
			t.tool = s.Value
		}
		t.toolCap = int(numberOr(d.Value[ticketToolCap], 0))
		v.queue = append(v.queue, t)
	}
	for id, n := range queue {
		if _, ok := details[id]; !ok || n <= 0 {
			v.strays = append(v.strays, stale{attr: QueueAttr, id: id, seen: number(n)})
		} else if _, tomb := v.tombstones[id]; tomb {
			v.strays = append(v.strays, stale{attr: QueueAttr, id: id, seen: number(n)})
		}
	}
	slices.SortFunc(v.queue, func(a, b *ticket) int { return cmp.Compare(a.n, b.n) })
	slices.SortFunc(v.strays, func(a, b stale) int { return cmp.Or(strings.Compare(a.attr, b.attr), strings.Compare(a.id, b.id)) })
	return v
}

// numberOr reads an N attribute, or returns def.
func numberOr(v types.AttributeValue, def int64) int64 {
	if n, ok := v.(*types.AttributeValueMemberN); ok {
		if i, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
			return i
		}
	}
	return def
}

func number(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// ticketFor returns the ticket of id, if it waits.
func (v *view) ticketFor(id string) *ticket {
	for _, t := range v.queue {
		if t.id == id {
			return t
		}
	}
	return nil
}

// live reports whether t still waits at now.
func (t *ticket) live(now int64) bool { return t.deadline >= now }

// waiting counts the live tickets.
func (v *view) waiting(now int64) int {
	n := 0
	for _, t := range v.queue {
		if t.live(now) {
			n++
		}
	}
	return n
}

// live counts the leases of ids (all of them when ids is nil) that have
// not expired at now.
func (v *view) live(now int64, ids []string, all bool) int {
	n := 0
	if all {
		for _, exp := range v.leases {
			if exp >= now {
				n++
			}
		}
		return n
	}
	for _, id := range ids {
		if exp, ok := v.leases[id]; ok && exp >= now {
			n++
		}
	}
	return n
}

// held counts the live leases of each principal label.
func (v *view) held(now int64) map[string]int {
	h := map[string]int{}
	for attr, members := range v.sets {
		if label, ok := strings.CutPrefix(attr, PrincipalAttrPrefix); ok {
			h[label] = v.live(now, members, false)
		}
	}
	return h
}

// labelOf is the principal of lease id, "" if its set is not known.
func (v *view) labelOf(id string) string {
	for attr, members := range v.sets {
		if label, ok := strings.CutPrefix(attr, PrincipalAttrPrefix); ok && slices.Contains(members, id) {
			return label
		}
	}
	return ""
}

// stale is one entry a purge may remove: a lease whose expiry passed, a
// ticket whose deadline passed, a tombstone that lapsed, or half a ticket;
// with the value the removal is conditioned on.
type stale struct {
	attr, id string
	seen     types.AttributeValue
	// field names the member of a tickets entry seen holds ("" = the
	// entry itself).
	field string
}

// staleLeases lists the leases expired at now, oldest first.
func (v *view) staleLeases(now int64) []string {
	var ids []string
	for id, exp := range v.leases {
		if exp < now {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(v.leases[a], v.leases[b]), strings.Compare(a, b)) })
	return ids
}

// staleTickets lists the queue entries and tickets entries a purge may
// remove at now.
func (v *view) staleTickets(now int64) []stale {
	out := slices.Clone(v.strays)
	for _, t := range v.queue {
		if !t.live(now) {
			out = append(out, stale{attr: QueueAttr, id: t.id, seen: number(t.n)})
		}
	}
	for id, x := range v.tombstones {
		if x < now {
			out = append(out, stale{attr: TicketsAttr, id: id, seen: number(x), field: ticketTomb})
		}
	}
	return out
}

// setsOf lists the sets lease id is a member of.
func (v *view) setsOf(id string) []string {
	var out []string
	for attr, members := range v.sets {
		if slices.Contains(members, id) {
			out = append(out, attr)
		}
	}
	slices.Sort(out)
	return out
}

// strayMembers lists set members that are not leases of the item (a hand
// edit, or an item written by an older design), by set.
func (v *view) strayMembers() map[string][]string {
	out := map[string][]string{}
	for attr, members := range v.sets {
		for _, id := range members {
			if _, ok := v.leases[id]; !ok {
				out[attr] = append(out[attr], id)
			}
		}
	}
	return out
}

// asker is the caller judging whose turn it is: its ticket, or a newcomer
// (number +∞) with the places it wants.
type asker struct {
	id, label string
	tool      string
	toolCap   int
	breaker   string
}

// caps are the key's own limits, as the asker's request gives them.
type caps struct{ cap, principalCap int }

// turn hands the places free in v at now, one by one, to the waiting
// callers — the live tickets, and me if it has none (me may be nil: the
// tickets alone) — as the protocol
// orders them: each to the caller whose principal holds the fewest places
// (the places handed out counting as held), the lower number first among
// equals, skipping callers that cannot use a place (their tool full, their
// principal at its cap, their breaker open). It reports whether me gets
// one, and the tickets handed a place before it. Tickets in skip are
// passed over as if gone.
func (v *view) turn(now int64, me *asker, c caps, skip map[string]bool) (served bool, ahead []*ticket) {
	type cand struct {
		t    *ticket
		me   bool
		done bool
	}
	var cands []*cand
	for _, t := range v.queue {
		if me != nil && t.id == me.id {
			cands = append(cands, &cand{t: &ticket{id: me.id, label: me.label, n: t.n, tool: me.tool, toolCap: me.toolCap, deadline: t.deadline}, me: true})
			continue
		}
		if t.live(now) && !skip[t.id] {
			cands = append(cands, &cand{t: t})
		}
	}
	if me != nil && !slices.ContainsFunc(cands, func(x *cand) bool { return x.me }) {
		cands = append(cands, &cand{t: &ticket{id: me.id, label: me.label, n: math.MaxInt64, tool: me.tool, toolCap: me.toolCap}, me: true})
	}
	held := v.held(now)
	room := math.MaxInt
	if c.cap > 0 {
		room = c.cap - v.live(now, nil, true)
	}
	if v.paused > now {
		room = 0 // the upstream asked for a pause
	}
	toolUsed := map[string]int{}
	principalUsed := map[string]int{}
	probing := map[string]bool{} // a half-open breaker's probe was handed out
	fits := func(t *ticket, isMe bool) bool {
		if t.toolCap > 0 {
			if v.live(now, v.sets[ToolAttr(t.tool)], false)+toolUsed[t.tool] >= t.toolCap {
				return false
			}
		}
		if c.principalCap > 0 {
			if v.live(now, v.sets[PrincipalAttr(t.label)], false)+principalUsed[t.label] >= c.principalCap {
				return false
			}
		}
		name := t.tool
		if isMe {
			name = me.breaker
		}
		if st, ok := v.breakers[name]; ok && name != "" {
			if !st.admits(now, t.label) || st.phase(now) == phaseHalfOpen && probing[name] {
				return false
			}
		}
		return true
	}
	for room > 0 {
		var best *cand
		for _, x := range cands {
			if x.done || !fits(x.t, x.me) {
				continue
			}
			if best == nil || ranks(x.t, best.t, held) < 0 {
				best = x
			}
		}
		if best == nil {
			break
		}
		best.done = true
		room--
		held[best.t.label]++
		if best.t.toolCap > 0 {
			toolUsed[best.t.tool]++
		}
		principalUsed[best.t.label]++
		name := best.t.tool
		if best.me {
			name = me.breaker
		}
		if st, ok := v.breakers[name]; ok && st.phase(now) == phaseHalfOpen {
			probing[name] = true
		}
		if best.me {
			return true, ahead
		}
		ahead = append(ahead, best.t)
	}
	return false, ahead
}

// ranks orders two waiting callers: the one whose principal holds fewer
// places first, then the lower number.
func ranks(a, b *ticket, held map[string]int) int {
	return cmp.Or(cmp.Compare(held[a.label], held[b.label]), cmp.Compare(a.n, b.n), strings.Compare(a.id, b.id))
}

// before counts the live tickets that come before me in the order of
// turn, as the item stands: where me is in the queue.
func (v *view) before(now int64, me *asker) int {
	held := v.held(now)
	mine := &ticket{id: me.id, label: me.label, n: math.MaxInt64}
	if t := v.ticketFor(me.id); t != nil {
		mine.n = t.n
	}
	n := 0
	for _, t := range v.queue {
		if t.id != me.id && t.live(now) && ranks(t, mine, held) < 0 {
			n++
		}
	}
	return n
}
