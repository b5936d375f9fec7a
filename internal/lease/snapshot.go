package lease

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// snapshot is what a lease item held when last seen: for each slot map
// present, lease id → expiry in Unix ms, and for each waiting map, waiter
// id → when its mark lapses.
type snapshot struct {
	maps map[string]map[string]int64
	br   breakerState
}

type entry struct {
	id  string
	exp int64
}

// parseSnapshot extracts the slot maps from an item. An entry that is not a
// number (a hand edit) counts as a lease that never expires, as it counts
// towards size() in the store too.
func parseSnapshot(item map[string]types.AttributeValue, slots []Slot, br *Breaker) *snapshot {
	s := &snapshot{maps: make(map[string]map[string]int64, len(slots))}
	if br != nil {
		a := br.attrs()
		s.br = breakerState{
			fails:     numberAttr(item[a.fails]),
			openUntil: numberAttr(item[a.openUntil]),
			probeExp:  numberAttr(item[a.probeExp]),
		}
		if v, ok := item[a.probe].(*types.AttributeValueMemberS); ok {
			s.br.probe = v.Value
		}
	}
	attrs := make([]string, 0, 2*len(slots))
	for _, slot := range slots {
		attrs = append(attrs, slot.Attr, WaitingAttr(slot.Attr))
	}
	for _, attr := range attrs {
		m, ok := item[attr].(*types.AttributeValueMemberM)
		if !ok {
			continue
		}
		leases := make(map[string]int64, len(m.Value))
		for id, v := range m.Value {
			exp := int64(math.MaxInt64)
			if n, ok := v.(*types.AttributeValueMemberN); ok {
				if e, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
					exp = e
				}
			}
			leases[id] = exp
		}
		s.maps[attr] = leases
	}
	return s
}

// numberAttr reads an N attribute, 0 if absent or not a number.
func numberAttr(v types.AttributeValue) int64 {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0
	}
	return i
}

// missing lists the slot maps the item lacks.
func (s *snapshot) missing(slots []Slot) []string {
	var out []string
	for _, slot := range slots {
		if _, ok := s.maps[slot.Attr]; !ok {
			out = append(out, slot.Attr)
		}
	}
	return out
}

// expired returns up to limit entries of attr that lapsed before now,
// oldest first.
func (s *snapshot) expired(attr string, now time.Time, limit int) []entry {
	nowMS := now.UnixMilli()
	var out []entry
	for id, exp := range s.maps[attr] {
		if exp < nowMS {
			out = append(out, entry{id, exp})
		}
	}
	slices.SortFunc(out, func(a, b entry) int {
		if a.exp != b.exp {
			if a.exp < b.exp {
				return -1
			}
			return 1
		}
		if a.id < b.id {
			return -1
		}
		if a.id > b.id {
			return 1
		}
		return 0
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// occupied is how many entries of attr would remain after one write purges
// what it may: exactly what the write's size() condition compares.
func (s *snapshot) occupied(attr string, now time.Time) int {
	m := s.maps[attr]
	return len(m) - len(s.expired(attr, now, maxPurge))
}

// room reports whether a write would find a place in every slot. A nil
// snapshot (nothing known) has room: the write finds out.
func (s *snapshot) room(now time.Time, slots []Slot) bool {
	if s == nil {
		return true
	}
	if len(s.missing(slots)) > 0 {
		return true
	}
	for _, slot := range slots {
		if slot.Cap > 0 && s.occupied(slot.Attr, now) >= slot.Cap {
			return false
		}
	}
	return true
}

// fullSlot is the first slot without room.
func (s *snapshot) fullSlot(now time.Time, slots []Slot) Slot {
	for _, slot := range slots {
		if slot.Cap > 0 && s.occupied(slot.Attr, now) >= slot.Cap {
			return slot
		}
	}
	return slots[0]
}

// backlog reports whether some slot holds more expired leases than one
// write may purge.
func (s *snapshot) backlog(now time.Time, slots []Slot) bool {
	for _, slot := range slots {
		if len(s.expired(slot.Attr, now, maxPurge+1)) > maxPurge {
			return true
		}
	}
	return false
}

// earliestExpiry is when the first lease of attr lapses (zero if none).
func (s *snapshot) earliestExpiry(attr string) time.Time {
	first := int64(math.MaxInt64)
	for _, exp := range s.maps[attr] {
		first = min(first, exp)
	}
	if first == math.MaxInt64 {
		return time.Time{}
	}
	return time.UnixMilli(first)
}

// holds returns the expiry of lease id in attr, if present.
func (s *snapshot) holds(attr, id string) (int64, bool) {
	exp, ok := s.maps[attr][id]
	return exp, ok
}
