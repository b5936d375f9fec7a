package lease

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Status is a lease item as it stands (mcpgate status).
type Status struct {
	// Leases are the places held, soonest to expire first.
	Leases []LeaseStatus `json:"leases"`
	// Queue lists the waiters in the order they will be served.
	Queue []TicketStatus `json:"queue"`
	// Principals: each one's places held and callers waiting.
	Principals []PrincipalStatus `json:"principals"`
	// Tools counts the places held per capped tool.
	Tools map[string]int `json:"tools,omitempty"`
	// CallLength is how long calls on the key last (0: unknown).
	CallLength time.Duration `json:"call_ms,omitempty"`
	// Breakers are the key's circuit breakers.
	Breakers []BreakerStatus `json:"breakers,omitempty"`
	// Pauses are the upstream's pauses that stand.
	Pauses []PauseStatus `json:"pauses,omitempty"`
	// Buckets are its rate buckets by name, with when each is full again
	// (its tokens follow from its limit: Rate.Tokens).
	Buckets map[string]time.Time `json:"buckets,omitempty"`
	// Limit is the key's adaptive limit, if Describe was given one.
	Limit *LimitStatus `json:"limit,omitempty"`
	// PausedUntil is when the server's pause for everyone ends, if it
	// stands.
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// HeldUntil is when an operator's hold ends, if one stands.
	HeldUntil *time.Time `json:"held_until,omitempty"`
}

// LimitStatus is an adaptive limit as the item shows it.
type LimitStatus struct {
	// Current is the limit in force; Min and Ceiling (the cap Describe was
	// given) its bounds.
	Current int `json:"current"`
	Min     int `json:"min"`
	Ceiling int `json:"ceiling"`
	// Why and At: its last move (zero: never moved).
	Why string    `json:"why,omitempty"`
	At  time.Time `json:"at,omitzero"`
	// Baselines are keyed "<principal label>/<tool>".
	Baselines map[string]time.Duration `json:"baselines,omitempty"`
}

// LeaseStatus is one held place.
type LeaseStatus struct {
	ID        string    `json:"id"`
	Instance  string    `json:"instance"`
	Principal string    `json:"principal,omitempty"`
	Tool      string    `json:"tool,omitempty"`
	Expiry    time.Time `json:"expiry"`
	// Lapsed: expired; the next write removes it.
	Lapsed bool `json:"lapsed"`
	// Task: a task's worker holds it.
	Task bool `json:"task,omitempty"`
}

// TicketStatus is one waiting caller, or task.
type TicketStatus struct {
	ID        string    `json:"id"`
	Instance  string    `json:"instance"`
	Principal string    `json:"principal"`
	Tool      string    `json:"tool,omitempty"`
	Number    int64     `json:"number"`
	Deadline  time.Time `json:"deadline"`
	// Lapsed: its caller gave up; the next write removes it.
	Lapsed bool `json:"lapsed"`
	// Turn: a place is free for it now, taken at its next look.
	Turn bool `json:"turn"`
	// Task: a task's ticket; Started is its worker's last start.
	Task    bool       `json:"task,omitempty"`
	Started *time.Time `json:"started,omitempty"`
	// Passed: a task whose starts have gone unclaimed StartTimeout since
	// the first (no worker came: invocations throttled, a missing
	// permission); the callers behind pass it, and it keeps its place.
	Passed bool `json:"passed,omitempty"`
}

// PrincipalStatus is one principal's share of the key.
type PrincipalStatus struct {
	Principal string `json:"principal"`
	Holding   int    `json:"holding"`
	Waiting   int    `json:"waiting"`
}

// Describe reads a lease item as of now, cap, principalCap and ad (0, nil:
// none) being the key's, which decide whose turn it is.
func Describe(item map[string]types.AttributeValue, now time.Time, cap, principalCap int, ad *Adaptive) Status {
	v := parseItem(item)
	ms := now.UnixMilli()
	st := Status{Leases: []LeaseStatus{}, Queue: []TicketStatus{}, CallLength: time.Duration(v.callMS) * time.Millisecond}
	st.Breakers, st.Pauses = v.gateStatus(ms)
	req := Request{Cap: cap, PrincipalCap: principalCap, Adaptive: ad}
	if ad != nil && cap > 0 {
		st.Limit = &LimitStatus{Current: req.capIn(v), Min: ad.floor(cap), Ceiling: cap, Why: v.why}
		if v.at > 0 {
			st.Limit.At = time.UnixMilli(v.at)
		}
		for tool, b := range v.bases {
			put(&st.Limit.Baselines, tool, time.Duration(b)*time.Millisecond)
		}
	}
	if e := v.gates[PauseAttr].entry(gateAll); e.shut(ms) {
		st.PausedUntil = msTime(e.until)
	}
	if v.hold > ms {
		st.HeldUntil = msTime(v.hold)
	}
	per := map[string]*PrincipalStatus{}
	share := func(label string) *PrincipalStatus {
		if per[label] == nil {
			per[label] = &PrincipalStatus{Principal: label}
		}
		return per[label]
	}
	for id, exp := range v.leases {
		ls := LeaseStatus{ID: id, Instance: InstanceOf(id), Expiry: time.UnixMilli(min(exp, math.MaxInt64/2)), Lapsed: exp < ms, Task: IsTaskID(id)}
		// Its principal and tool are the sets it is in ("" if none is known).
		for attr, members := range v.sets {
			if label, ok := strings.CutPrefix(attr, PrincipalAttrPrefix); ok && slices.Contains(members, id) {
				ls.Principal = label
			} else if tool, ok := strings.CutPrefix(attr, ToolAttrPrefix); ok && slices.Contains(members, id) {
				ls.Tool = tool
			}
		}
		if !ls.Lapsed {
			share(ls.Principal).Holding++
			if ls.Tool != "" {
				put(&st.Tools, ls.Tool, st.Tools[ls.Tool]+1)
			}
		}
		st.Leases = append(st.Leases, ls)
	}
	slices.SortFunc(st.Leases, func(a, b LeaseStatus) int { return cmp.Or(a.Expiry.Compare(b.Expiry), strings.Compare(a.ID, b.ID)) })
	// The queue in turn order, and whose turn it is now by the caps alone
	// (Describe is not given the buckets' limits).
	order := slices.Clone(v.queue)
	held := v.held(ms)
	slices.SortStableFunc(order, func(a, b *ticket) int { return ranks(a, b, held) })
	h, _, passed := v.presume(ms, nil, req.rules(v), nil)
	has := func(ts []*ticket, id string) bool {
		return slices.ContainsFunc(ts, func(x *ticket) bool { return x.id == id })
	}
	for _, t := range order {
		if v.claimed(t, ms) {
			continue // a task running: its lease shows it
		}
		ts := TicketStatus{ID: t.id, Instance: InstanceOf(t.id), Principal: t.label, Tool: t.tool, Number: t.n,
			Deadline: time.UnixMilli(t.deadline), Lapsed: !t.live(ms),
			Turn: has(h.ahead, t.id), Passed: has(passed, t.id), Task: t.task}
		if t.started > 0 {
			ts.Started = msTime(t.started)
		}
		if !ts.Lapsed {
			share(t.label).Waiting++
		}
		st.Queue = append(st.Queue, ts)
	}
	for attr, tat := range v.rates {
		put(&st.Buckets, strings.TrimPrefix(attr, RateAttrPrefix), time.UnixMilli(tat))
	}
	for _, label := range slices.Sorted(maps.Keys(per)) {
		st.Principals = append(st.Principals, *per[label])
	}
	return st
}
