package fleet

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Report is the fleet's limiters as their items show them: what mcpgate
// status prints (its --json as is) and the console shows.
type Report struct {
	Now      time.Time `json:"now"`
	Limiters []Limiter `json:"limiters"`
}

type Limiter struct {
	Key    string      `json:"limiter_key"`
	Server ServerState `json:"server"`
	// Slots holds the server's leases ("leases") first, then those of each
	// capped tool ("tool:<name>").
	Slots []Slot `json:"slots"`
	// Principals says, per principal, how many places it holds and how
	// many of its callers wait.
	Principals []lease.PrincipalStatus `json:"principals,omitempty"`
	// Waiting are the callers queued for a place, in the order they will
	// be served if nothing changes.
	Waiting []lease.TicketStatus `json:"waiting,omitempty"`
	// Breakers are the circuit breakers of the server's tools.
	Breakers []lease.BreakerStatus `json:"breakers,omitempty"`
	// CallMS is how long calls on the server last (the fleet's running
	// mean), 0 if unknown.
	CallMS int64 `json:"call_ms,omitempty"`
	// Buckets are the request-rate buckets: tokens left of the limit
	// (limit 0: not known, as for a bucket whose server or key no longer
	// sets that limit).
	Buckets []Bucket `json:"buckets,omitempty"`
	// Limit is an adaptive server's limit: where it is, its bounds, and
	// why it last moved.
	Limit *lease.LimitStatus `json:"limit,omitempty"`
	// PausedUntil is when calls may start again after the upstream asked
	// the whole server for a pause, for everyone (its Retry-After).
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// Pauses are every pause that stands: of the server or one tool, for
	// everyone or for some principals alone.
	Pauses []lease.PauseStatus `json:"pauses,omitempty"`
	// HeldUntil is when an operator's hold ends, if one stands.
	HeldUntil *time.Time `json:"held_until,omitempty"`
	// Other is every attribute status does not read, rendered as JSON
	// values.
	Other map[string]any `json:"other,omitempty"`
}

type ServerState struct {
	// Found says whether the servers table has this id.
	Found bool `json:"found"`
	// Cap is max_concurrent_requests as the gateway reads it; 0 = unlimited.
	Cap int `json:"cap"`
	// PerPrincipal is max_concurrent_per_principal; 0 = none.
	PerPrincipal int `json:"per_principal,omitempty"`
	// Invalid is why the gateway refuses the server's item, if it does.
	Invalid string `json:"invalid,omitempty"`
	// Key says the item is a key's own (max_parallel_requests, rpm_limit).
	Key bool `json:"key,omitempty"`
}

type Bucket struct {
	Name   string    `json:"name"`
	Limit  int       `json:"rpm_limit,omitempty"`
	Tokens int       `json:"tokens"`
	FullAt time.Time `json:"full_at"`
}

type Slot struct {
	Attr string `json:"attr"`
	// Cap is the limit the server item sets on it: the server's
	// max_concurrent_requests or the tool's max_concurrent; 0 = none.
	Cap    int     `json:"cap"`
	Leases []Lease `json:"leases"`
}

type Lease struct {
	ID string `json:"id"`
	// Holder is the gateway instance; Caller the label of the principal
	// whose call it is.
	Holder string `json:"holder"`
	Caller string `json:"caller,omitempty"`
	// ExpiresAt and TimeLeftMS are null when the stored expiry is not a
	// number (a hand edit): the limiter counts such a lease as never
	// expiring.
	ExpiresAt  *time.Time `json:"expires_at"`
	TimeLeftMS *int64     `json:"time_left_ms"`
	Expired    bool       `json:"expired"`
}

// Build reads the lease items against the server items and the
// keys' rpm limits (by principal ID), at now. Every capped server is
// shown, with a limiter item or not; all shows uncapped servers too
// (status of one server shows it whatever it is).
func Build(items, servers []map[string]types.AttributeValue, keyRPM map[string]int, now time.Time, all bool) *Report {
	type server struct {
		item map[string]types.AttributeValue
		srv  *registry.Server // nil when the item is invalid
		err  error
	}
	byID := map[string]*server{}
	for _, item := range servers {
		s := &server{item: item}
		s.srv, s.err = registry.Parse(item)
		byID[RawAttr(item, store.ServerIDAttr)] = s
	}
	seen := map[string]bool{}
	for _, item := range items {
		seen[RawAttr(item, store.LimiterKeyAttr)] = true
	}
	for id, s := range byID {
		capped := s.srv != nil && (s.srv.Capped() || slices.ContainsFunc(slices.Collect(maps.Values(s.srv.Tools)), func(t registry.ToolLimits) bool { return t.MaxConcurrent > 0 }))
		if !seen[id] && (all || capped) {
			items = append(items, map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: id}})
		}
	}
	r := &Report{Now: now.UTC(), Limiters: []Limiter{}}
	for _, item := range items {
		key := RawAttr(item, store.LimiterKeyAttr)
		if catalog.IsKey(key) {
			continue // the fleet's tool lists share the table
		}
		l := Limiter{Key: key}
		var srv *registry.Server
		capacity, perPrincipal := 0, 0
		if s, ok := byID[key]; ok {
			l.Server.Found = true
			if s.err != nil {
				l.Server.Invalid = OneLine(s.err.Error())
			} else {
				srv = s.srv
				l.Server.Cap, l.Server.PerPrincipal = srv.MaxConcurrent, srv.MaxPerPrincipal
				capacity, perPrincipal = srv.MaxConcurrent, srv.MaxPerPrincipal
			}
		} else if strings.Contains(key, ":") {
			l.Server.Key = true // a key's own item: no server id has a ':'
		}
		var ad *lease.Adaptive
		if srv != nil && srv.Adaptive {
			ad = &lease.Adaptive{Min: srv.AdaptiveMin}
		}
		st := lease.Describe(item, now, capacity, perPrincipal, ad)
		l.Limit, l.PausedUntil, l.Pauses, l.HeldUntil = st.Limit, st.PausedUntil, st.Pauses, st.HeldUntil
		l.Slots = []Slot{{Attr: lease.LeasesAttr, Cap: capacity, Leases: leasesOf(st.Leases, "", now)}}
		tools := slices.Sorted(maps.Keys(st.Tools))
		if srv != nil {
			// Every tool cap, with leases or not.
			for tool, t := range srv.Tools {
				if t.MaxConcurrent > 0 && !slices.Contains(tools, tool) {
					tools = append(tools, tool)
				}
			}
			slices.Sort(tools)
		}
		for _, tool := range tools {
			cap := 0
			if srv != nil {
				cap = srv.ToolCap(tool)
			}
			l.Slots = append(l.Slots, Slot{Attr: lease.ToolAttr(tool), Cap: cap, Leases: leasesOf(st.Leases, tool, now)})
		}
		l.Principals, l.Breakers, l.CallMS = st.Principals, st.Breakers, st.CallLength.Milliseconds()
		for _, name := range slices.Sorted(maps.Keys(st.Buckets)) {
			b := Bucket{Name: name, Limit: rpmOf(srv, name), FullAt: st.Buckets[name].UTC()}
			if l.Server.Key && name == "key" {
				b.Limit = keyRPM[key]
			}
			if b.Limit > 0 {
				b.Tokens = lease.Rate{Name: name, PerMinute: b.Limit}.Tokens(st.Buckets[name].UnixMilli(), now.UnixMilli())
			}
			l.Buckets = append(l.Buckets, b)
		}
		if len(st.Queue) > 0 {
			l.Waiting = st.Queue
		}
		other := map[string]types.AttributeValue{}
		for name, v := range item {
			if !lease.IsItemAttr(name) && name != store.LimiterKeyAttr && name != store.TTLAttr {
				other[name] = v
			}
		}
		if len(other) > 0 {
			l.Other = registry.ItemToJSON(other)
		}
		r.Limiters = append(r.Limiters, l)
	}
	slices.SortFunc(r.Limiters, func(a, b Limiter) int { return strings.Compare(a.Key, b.Key) })
	return r
}

// rpmOf is the limit of the bucket named name on srv (nil: unknown), 0 when
// not known (a key's own bucket is the key's: see keyLimits).
func rpmOf(srv *registry.Server, name string) int {
	switch {
	case srv == nil:
		return 0
	case name == "server":
		return srv.RPMLimit
	case strings.HasPrefix(name, "principal:"):
		return srv.RPMPerPrincipal
	case strings.HasPrefix(name, "tool:"):
		return srv.Tools[strings.TrimPrefix(name, "tool:")].RPMLimit
	}
	return 0
}

// leasesOf lists the leases of a slot (all of them, or those of one tool),
// soonest expiry first.
func leasesOf(all []lease.LeaseStatus, tool string, now time.Time) []Lease {
	out := []Lease{}
	for _, l := range all {
		if tool != "" && l.Tool != tool {
			continue
		}
		ls := Lease{ID: l.ID, Holder: l.Instance, Caller: l.Principal, Expired: l.Lapsed}
		if l.Expiry.Year() < 9999 {
			exp := l.Expiry.UTC()
			left := exp.Sub(now).Milliseconds()
			ls.ExpiresAt, ls.TimeLeftMS = &exp, &left
		}
		out = append(out, ls)
	}
	return out
}

// Refusing reports whether the limiter is in a state that refuses or
// delays calls: a cap full, callers waiting, a breaker not closed (for
// everyone, or for a principal).
func (l Limiter) Refusing() bool {
	for _, s := range l.Slots {
		live := 0
		for _, ls := range s.Leases {
			if !ls.Expired {
				live++
			}
		}
		if s.Cap > 0 && live >= s.Cap {
			return true
		}
	}
	return len(l.Waiting) > 0 || len(l.Pauses) > 0 || l.HeldUntil != nil ||
		slices.ContainsFunc(l.Breakers, func(b lease.BreakerStatus) bool { return b.State != "closed" || len(b.OpenFor) > 0 })
}

// OneLine joins the lines of a multi-line error text (errors.Join) with
// "; ".
func OneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }

// Live counts the slot's leases that have not expired.
func (s Slot) Live() int {
	n := 0
	for _, l := range s.Leases {
		if !l.Expired {
			n++
		}
	}
	return n
}
