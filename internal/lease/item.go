package lease

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// snapshot is a lease item as one answer of the store showed it.
type snapshot struct {
	// slots maps each slot attribute to its leases: lease id → expiry.
	slots map[string]map[string]int64
	// tickets are the waiters' tickets, oldest first; hasTickets says
	// whether the map exists.
	tickets    []*ticket
	hasTickets bool
	breakers   map[string]breakerState
	// released is the lease whose release wrote last.
	released string
}

// ticket is one waiter's place in the queue.
type ticket struct {
	// id is the lease id the waiter will hold.
	id string
	// arrive is when its caller started waiting, exp when the ticket
	// lapses unless renewed (Unix ms); rawExp is the stored value, which
	// a purge is conditioned on.
	arrive, exp int64
	rawExp      types.AttributeValue
	// hold is how long (ms) a place given to it is held before it lapses,
	// less Margin.
	hold int64
	// slots are the places it wants, with the caps its caller saw.
	slots   []Slot
	breaker string
}

// Ticket fields, inside each value of the tickets map.
const (
	ticketArrive  = "a"
	ticketExpiry  = "e"
	ticketHold    = "h"
	ticketSlots   = "s"
	ticketBreaker = "b"
)

// isSlotAttr reports whether attr is a slot map of the item.
func isSlotAttr(attr string) bool {
	return attr == ServerAttr || strings.HasPrefix(attr, ToolAttrPrefix)
}

// parseItem reads a lease item. A lease whose expiry is not a number (a
// hand edit) counts as never expiring, as it counts towards size() in the
// store too; a ticket that cannot be read counts as lapsed.
func parseItem(item map[string]types.AttributeValue) *snapshot {
	s := &snapshot{slots: map[string]map[string]int64{}, breakers: map[string]breakerState{}}
	for attr, v := range item {
		m, isMap := v.(*types.AttributeValueMemberM)
		switch {
		case isMap && isSlotAttr(attr):
			leases := make(map[string]int64, len(m.Value))
			for id, e := range m.Value {
				leases[id] = numberOr(e, math.MaxInt64)
			}
			s.slots[attr] = leases
		case isMap && attr == TicketsAttr:
			s.hasTickets = true
			for id, tv := range m.Value {
				s.tickets = append(s.tickets, parseTicket(id, tv))
			}
		case attr == ReleasedAttr:
			if id, ok := v.(*types.AttributeValueMemberS); ok {
				s.released = id.Value
			}
		case IsBreakerAttr(attr):
			_, name, _ := strings.Cut(attr, ":")
			s.breakers[name] = parseBreaker(item, name)
		}
	}
	slices.SortFunc(s.tickets, func(a, b *ticket) int {
		return cmp.Or(cmp.Compare(a.arrive, b.arrive), strings.Compare(a.id, b.id))
	})
	return s
}

func parseTicket(id string, v types.AttributeValue) *ticket {
	t := &ticket{id: id}
	m, ok := v.(*types.AttributeValueMemberM)
	if !ok {
		return t
	}
	f := m.Value
	t.arrive, t.exp, t.rawExp, t.hold = numberOr(f[ticketArrive], 0), numberOr(f[ticketExpiry], 0), f[ticketExpiry], numberOr(f[ticketHold], 0)
	if b, ok := f[ticketBreaker].(*types.AttributeValueMemberS); ok {
		t.breaker = b.Value
	}
	if sm, ok := f[ticketSlots].(*types.AttributeValueMemberM); ok {
		for attr, c := range sm.Value {
			t.slots = append(t.slots, Slot{Attr: attr, Cap: int(numberOr(c, 0))})
		}
		slices.SortFunc(t.slots, func(a, b Slot) int { return strings.Compare(a.Attr, b.Attr) })
	}
	return t
}

// ticketValue is the stored form of t.
func (t *ticket) value() types.AttributeValue {
	slots := make(map[string]types.AttributeValue, len(t.slots))
	for _, s := range t.slots {
		slots[s.Attr] = number(int64(s.Cap))
	}
	f := map[string]types.AttributeValue{
		ticketArrive: number(t.arrive), ticketExpiry: number(t.exp), ticketHold: number(t.hold),
		ticketSlots: &types.AttributeValueMemberM{Value: slots},
	}
	if t.breaker != "" {
		f[ticketBreaker] = &types.AttributeValueMemberS{Value: t.breaker}
	}
	return &types.AttributeValueMemberM{Value: f}
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

// live reports whether t may still be served at now: it has not lapsed and
// it names the places it wants.
func (t *ticket) live(now int64) bool { return t.exp >= now && len(t.slots) > 0 }

// occupied is how many leases of attr have not expired at now.
func (s *snapshot) occupied(attr string, now int64) int {
	n := 0
	for _, exp := range s.slots[attr] {
		if exp >= now {
			n++
		}
	}
	return n
}

// stale is one entry a purge may remove: an expired lease or a lapsed
// ticket, with the value the removal is conditioned on.
type stale struct {
	attr, id string
	seen     types.AttributeValue
}

// stale lists every expired lease and lapsed ticket at now.
func (s *snapshot) stale(now int64) []stale {
	var out []stale
	for attr, m := range s.slots {
		for id, exp := range m {
			if exp < now {
				out = append(out, stale{attr, id, number(exp)})
			}
		}
	}
	for _, t := range s.tickets {
		if !t.live(now) {
			out = append(out, stale{TicketsAttr, t.id, t.rawExp})
		}
	}
	return out
}

// turn walks the live tickets oldest first, with me in its place by
// arrival if it has no ticket yet, and gives each a place in every slot it
// wants if all of them have room after the places given before it. It
// reports whether me gets its places, and how many live tickets older than
// me want a slot me wants (its place in the queue). A ticket that cannot
// use the places free (a slot of its own is full) does not hold up those
// behind it.
func (s *snapshot) turn(now int64, me *ticket) (served bool, ahead int) {
	taken := map[string]int{}
	queue := s.tickets
	if !s.queued(me.id) {
		at, _ := slices.BinarySearchFunc(queue, me, func(t, me *ticket) int { return cmp.Compare(t.arrive, me.arrive+1) })
		queue = slices.Insert(slices.Clone(queue), at, me)
	}
	for _, t := range queue {
		isMe := t.id == me.id
		if isMe {
			t = me
		} else if !t.live(now) {
			continue
		}
		room := true
		for _, sl := range t.slots {
			if s.occupied(sl.Attr, now)+taken[sl.Attr] >= sl.Cap {
				room = false
			}
		}
		if isMe {
			return room, ahead
		}
		if shares(t.slots, me.slots) {
			ahead++
		}
		if room {
			for _, sl := range t.slots {
				taken[sl.Attr]++
			}
		}
	}
	return false, ahead
}

// next is the newest of the live tickets the places free at now go to, if
// any: the one a release passes on the place it freed, the last to free.
// (Two releases that each see their own place free, one after the other,
// so pass them to different callers.)
func (s *snapshot) next(now int64) *ticket {
	var last *ticket
	for _, t := range s.tickets {
		if served, _ := s.turn(now, t); served && t.live(now) {
			last = t
		}
	}
	return last
}

func shares(a, b []Slot) bool {
	for _, x := range a {
		if slices.ContainsFunc(b, func(y Slot) bool { return y.Attr == x.Attr }) {
			return true
		}
	}
	return false
}

// queued reports whether the item holds a ticket with id.
func (s *snapshot) queued(id string) bool {
	return slices.ContainsFunc(s.tickets, func(t *ticket) bool { return t.id == id })
}

// holds returns the expiry of lease id in attr, if present.
func (s *snapshot) holds(attr, id string) (int64, bool) {
	exp, ok := s.slots[attr][id]
	return exp, ok
}

// missing lists the maps among attrs that the item lacks.
func (s *snapshot) missing(attrs ...string) []string {
	var out []string
	for _, a := range attrs {
		if _, ok := s.slots[a]; !ok && (a != TicketsAttr || !s.hasTickets) {
			out = append(out, a)
		}
	}
	return out
}

// without is s less lease id and any ticket of it, as the release of that
// lease leaves it.
func (s *snapshot) without(id string) *snapshot {
	c := *s
	c.tickets = slices.DeleteFunc(slices.Clone(s.tickets), func(t *ticket) bool { return t.id == id })
	c.slots = make(map[string]map[string]int64, len(s.slots))
	for attr, m := range s.slots {
		if _, ok := m[id]; ok {
			m = maps.Clone(m)
			delete(m, id)
		}
		c.slots[attr] = m
	}
	return &c
}

// TicketStatus is a queued caller's ticket as an item shows it, for people
// and tools.
type TicketStatus struct {
	// ID is the lease id the caller will hold; Instance and Caller are
	// its parts (see ParseLeaseID).
	ID       string `json:"id"`
	Instance string `json:"instance"`
	Caller   string `json:"caller,omitempty"`
	// Slots are the slot maps it waits for a place in.
	Slots []string `json:"slots"`
	// Since is when its caller started waiting; Expiry when the ticket
	// lapses unless its waiter renews it; Lapsed, whether it has.
	Since  time.Time `json:"since"`
	Expiry time.Time `json:"expiry"`
	Lapsed bool      `json:"lapsed"`
	// PlaceFree says a place it can use is free: the next look of its
	// waiter (or the next release) gives it the place.
	PlaceFree bool `json:"place_free"`
}

// Tickets reads the queue of a lease item, oldest first, as of now.
func Tickets(item map[string]types.AttributeValue, now time.Time) []TicketStatus {
	s := parseItem(item)
	ms := now.UnixMilli()
	out := []TicketStatus{}
	for _, t := range s.tickets {
		instance, caller := ParseLeaseID(t.id)
		free, _ := s.turn(ms, t)
		out = append(out, TicketStatus{ID: t.id, Instance: instance, Caller: caller, Slots: slotAttrs(t.slots),
			Since: time.UnixMilli(t.arrive), Expiry: time.UnixMilli(t.exp), Lapsed: !t.live(ms), PlaceFree: free && t.live(ms)})
	}
	return out
}
