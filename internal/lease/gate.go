package lease

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Gates' attributes (see Item and Gates in the package doc); gateAll keys
// everyone's entry.
const (
	BreakerAttrPrefix = "breaker:"
	PauseAttr         = "pause"
	PauseAttrPrefix   = "pause:"
	HoldAttr          = "hold"
	gateAll           = "*"
)

// Fields of a gate entry.
const (
	gateUntil    = "u" // closed until (Unix ms); absent: never closed, or opened again
	gateProbe    = "p" // the probe's lease id
	gateProbeExp = "e" // the probe's expiry
	gateFails    = "f" // consecutive failures (a principal's breaker entry)
	gateLast     = "t" // when the last failure was (Unix ms)
	gateBarred   = "a" // the principal whose probe ended without a verdict
	gateBarUntil = "w" // until when it may not be the entry's probe (Unix ms)
)

// IdleGate is how long an open entry with no failure stays before it is
// stale.
const IdleGate = time.Minute

// MaxPause bounds any pause, and is a request's when it gives none.
const MaxPause = 5 * time.Minute

func isGateAttr(attr string) bool {
	return attr == PauseAttr || strings.HasPrefix(attr, PauseAttrPrefix) || strings.HasPrefix(attr, BreakerAttrPrefix)
}

// BreakerAttr is the gate of the breaker named name.
func BreakerAttr(name string) string { return BreakerAttrPrefix + name }

type gate struct {
	attr    string
	entries map[string]gateEntry
	// bad counts the entries malformed (not in entries).
	bad int
}

type gateEntry struct {
	until, probeExp, fails, last, barUntil int64
	probe, barred                          string
	// seen is the entry as stored (every entry of a gate has it).
	seen *types.AttributeValueMemberM
}

// gateRef names one entry of one gate.
type gateRef struct{ attr, key string }

// parseGate reads gate attr; an entry not a map, with a field of another
// type than the protocol writes, or with a probe or a bar and no whole
// time to it, is malformed (bad): the repair removes it whole.
func parseGate(attr string, m *types.AttributeValueMemberM, bad func(seen types.AttributeValue, path ...string)) *gate {
	g := &gate{attr: attr, entries: map[string]gateEntry{}}
	for key, v := range m.Value {
		f, _ := v.(*types.AttributeValueMemberM)
		if !wellFormed(f) {
			bad(v, attr, key)
			g.bad++
			continue
		}
		g.entries[key] = gateEntry{until: numberOr(f.Value[gateUntil], 0), probeExp: numberOr(f.Value[gateProbeExp], 0),
			fails: numberOr(f.Value[gateFails], 0), last: numberOr(f.Value[gateLast], 0), barUntil: numberOr(f.Value[gateBarUntil], 0),
			probe: strOr(f.Value[gateProbe]), barred: strOr(f.Value[gateBarred]), seen: f}
	}
	return g
}

// wellFormed: gate entry f is a map, a probe and a bar strings with
// their times, its other fields whole numbers.
func wellFormed(f *types.AttributeValueMemberM) bool {
	if f == nil || f.Value[gateProbe] != nil && f.Value[gateProbeExp] == nil || f.Value[gateBarred] != nil && f.Value[gateBarUntil] == nil {
		return false
	}
	for k, fv := range f.Value {
		if _, isS := fv.(*types.AttributeValueMemberS); (k == gateProbe || k == gateBarred) != isS || !isS && !whole(fv) {
			return false
		}
	}
	return true
}

func (g *gate) breaker() bool { return strings.HasPrefix(g.attr, BreakerAttrPrefix) }

// entry is the entry of key (gateAll or a label); zero when there is none.
func (g *gate) entry(key string) gateEntry {
	if g == nil {
		return gateEntry{}
	}
	return g.entries[key]
}

// shut: the entry refuses every call at now.
func (e gateEntry) shut(now int64) bool { return e.until > now }

// probing: its closed time passed and its probe's call runs.
func (e gateEntry) probing(now int64) bool {
	return e.until > 0 && e.until <= now && e.probe != "" && e.probeExp >= now
}

// halfOpen: its closed time passed with no probe running.
func (e gateEntry) halfOpen(now int64) bool { return e.until > 0 && e.until <= now && !e.probing(now) }

// barredFor: principal label's last probe of the entry ended without a
// verdict, and it may not probe it yet.
func (e gateEntry) barredFor(label string, now int64) bool {
	return e.barred == label && e.barUntil > now
}

// gateAttrs are the gates of a caller of tool with breaker ("" if none):
// the server's pause, its tool's and its breaker's.
func gateAttrs(tool, breaker string) []string {
	out := []string{PauseAttr}
	if tool != "" {
		out = append(out, PauseAttrPrefix+tool)
	}
	if breaker != "" {
		out = append(out, BreakerAttr(breaker))
	}
	return out
}

// stillProbes keeps of probes the entries v shows id the probe of.
func (v *view) stillProbes(probes []gateRef, id string) []gateRef {
	return slices.DeleteFunc(probes, func(p gateRef) bool { return v.gates[p.attr].entry(p.key).probe != id })
}

// CircuitOpenError means a breaker refused the call.
type CircuitOpenError struct {
	Name string
	// HalfOpen: another call is the probe; Principal: it is closed for
	// the caller's principal alone.
	HalfOpen, Principal bool
	// RetryAfter is how long until it lets a call through again.
	RetryAfter time.Duration
}

func (e *CircuitOpenError) Error() string {
	switch {
	case e.HalfOpen:
		return fmt.Sprintf("lease: circuit %q is half-open and its probe is running", e.Name)
	case e.Principal:
		return fmt.Sprintf("lease: circuit %q is open for this principal for %v", e.Name, e.RetryAfter.Round(time.Millisecond))
	}
	return fmt.Sprintf("lease: circuit %q is open for %v", e.Name, e.RetryAfter.Round(time.Millisecond))
}

// admits judges a caller of principal label, tool and breaker ("" if
// none) at now against the gates v shows and the hold: the breaker entries
// it would probe (probing lists those whose probe was already handed out),
// or why it may not pass: *CircuitOpenError, else *FullError Paused or
// Held.
func (v *view) admits(tool, breaker, label string, now int64, probing map[gateRef]bool) ([]gateRef, error) {
	var pause int64
	var probes []gateRef
	ms := func(t int64) time.Duration { return time.Duration(t-now) * time.Millisecond }
	for _, attr := range gateAttrs(tool, breaker) {
		for _, key := range []string{gateAll, label} {
			// An entry absent (or of no time) passes: every case below
			// needs a closed time.
			e, ref := v.gates[attr].entry(key), gateRef{attr, key}
			switch name := strings.TrimPrefix(attr, BreakerAttrPrefix); {
			case name == attr: // a pause
				if e.shut(now) {
					pause = max(pause, e.until)
				}
			case e.shut(now):
				// The later of the closings that refuse the caller: its
				// own may outlast everyone's.
				own := v.gates[attr].entry(label)
				if key == gateAll && own.shut(now) && own.until > e.until {
					return nil, &CircuitOpenError{Name: name, Principal: true, RetryAfter: ms(own.until)}
				}
				return nil, &CircuitOpenError{Name: name, Principal: key != gateAll, RetryAfter: ms(e.until)}
			case e.probing(now):
				return nil, &CircuitOpenError{Name: name, HalfOpen: true, RetryAfter: max(ms(e.probeExp), 50*time.Millisecond)}
			case e.halfOpen(now) && e.barredFor(label, now):
				return nil, &CircuitOpenError{Name: name, HalfOpen: true, Principal: true, RetryAfter: ms(e.barUntil)}
			case e.halfOpen(now) && probing[ref]:
				return nil, &CircuitOpenError{Name: name, HalfOpen: true}
			case e.halfOpen(now):
				probes = append(probes, ref)
			}
		}
	}
	switch {
	case v.hold > now && v.hold >= pause:
		return nil, &FullError{Reason: Held, What: "server", RetryAfter: ms(v.hold)}
	case pause > now:
		return nil, &FullError{Reason: Paused, What: "server", RetryAfter: ms(pause)}
	}
	return probes, nil
}

// admit conditions a take made at now on the caller of principal label
// still passing the gates gs and the hold, each entry on what makes it
// pass (never on a failure count), and names it the probe of probes (v
// shows them).
func (u *update) admit(gs []string, label string, id string, exp, now int64, probes []gateRef, v *view) {
	for _, attr := range gs {
		for _, key := range []string{gateAll, label} {
			ep := u.path(attr, key)
			up := ep + "." + u.path(gateUntil)
			switch {
			case slices.Contains(probes, gateRef{attr, key}):
				// A probe is one v showed (decide, with no view, hands none).
				e := v.gates[attr].entry(key)
				pp, pe := ep+"."+u.path(gateProbe), ep+"."+u.path(gateProbeExp)
				bp, bu := ep+"."+u.path(gateBarred), ep+"."+u.path(gateBarUntil)
				free := "(attribute_not_exists(" + pp + ") OR " + pe + " < " + u.num(now) + ")"
				unbarred := orAbsent(bp, bp+" <> "+u.str(label)+" OR "+bu+" <= "+u.num(now))
				u.cond(up+" = "+u.num(e.until), free, unbarred)
				u.set(pp, u.str(id))
				u.set(pe, u.num(exp))
			case strings.HasPrefix(attr, BreakerAttrPrefix):
				// Not closed, as admits reads it: no time, or none after
				// 0 (which the protocol never writes).
				u.cond(orAbsent(up, up+" <= "+u.num(0)))
			default:
				u.cond(orAbsent(up, up+" <= "+u.num(now)))
			}
		}
	}
	hp := u.path(HoldAttr)
	u.cond(orAbsent(hp, hp+" <= "+u.num(now)))
}

// entryValue is a gate entry as written.
func entryValue(fields map[string]int64) types.AttributeValue {
	m := map[string]types.AttributeValue{}
	for k, n := range fields {
		m[k] = number(n)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// condGate conditions u on gate attr being as g shows it (nil: absent)
// and, when there, on its entry key.
func (u *update) condGate(g *gate, attr, key string) {
	if g == nil {
		u.cond("attribute_not_exists(" + u.path(attr) + ")")
		return
	}
	// A map removed meanwhile fails the condition, not the request.
	u.cond("attribute_exists(" + u.path(attr) + ")")
	u.condEntry(g, key)
}

// setEntry writes entry key of gate attr, g the gate as seen (conditioned
// by condGate): the whole map when there was none.
func (u *update) setEntry(g *gate, attr, key string, val types.AttributeValue) {
	if g == nil {
		u.set(u.path(attr), u.value(&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{key: val}}))
		return
	}
	u.set(u.path(attr, key), u.value(val))
}

// condEntry conditions u on entry key of g being as seen: absent, or
// with the same closing time, failures, last failure and probe.
func (u *update) condEntry(g *gate, key string) {
	ep := u.path(g.attr, key)
	e, ok := g.entries[key]
	if !ok {
		u.cond("attribute_not_exists(" + ep + ")")
		return
	}
	for _, f := range []string{gateUntil, gateFails, gateLast, gateProbe} {
		u.cond(u.isSeen(ep+"."+u.path(f), e.seen.Value[f]))
	}
}

// pinGate conditions u on g holding the entries seen, each closing as
// seen (the one field a judgement of the whole gate reads: othersUntil),
// and no other (its size), but those skip names (conditioned otherwise).
// An entry seen open is pinned by its failures, which its closing
// rewrites and its removal takes away, so that neither a closing nor an
// entry removed and another made meanwhile goes unseen; one with neither
// field, by being there open. One clause an entry, mostly: the gate of
// about 150 principals stays within DynamoDB's expression limits.
func (u *update) pinGate(g *gate, skip func(key string) bool) {
	u.cond("size(" + u.path(g.attr) + ") = " + u.num(int64(len(g.entries))))
	for _, key := range slices.Sorted(maps.Keys(g.entries)) {
		if skip != nil && skip(key) {
			continue
		}
		ep, seen := u.path(g.attr, key), g.entries[key].seen.Value
		switch {
		case seen[gateUntil] != nil:
			u.cond(u.isSeen(ep+"."+u.path(gateUntil), seen[gateUntil]))
		case seen[gateFails] != nil:
			u.cond(u.isSeen(ep+"."+u.path(gateFails), seen[gateFails]))
		default:
			u.cond("attribute_exists("+ep+")", "attribute_not_exists("+ep+"."+u.path(gateUntil)+")")
		}
	}
}

// probeOf conditions u on id being the probe of entry p, and returns the
// entry's path.
func (u *update) probeOf(p gateRef, id string) string {
	ep := u.path(p.attr, p.key)
	u.cond(ep + "." + u.path(gateProbe) + " = " + u.str(id))
	return ep
}

// unprobe leaves the entry at ep half-open, with no probe.
func (u *update) unprobe(ep string) { u.remove(ep+"."+u.path(gateProbe), ep+"."+u.path(gateProbeExp)) }

// outcome adds to u what a finished call of principal label (lease id)
// tells breaker br as v shows it (see Breaker in the package doc), each
// judgement conditioned on the gate as seen, and returns the transition.
func (u *update) outcome(br *Breaker, v *view, id, label string, probes []gateRef, o Outcome, now int64) Transition {
	attr := BreakerAttr(br.Name)
	g := v.gates[attr]
	reopen := now + br.Recovery.Milliseconds()
	tr := NoTransition
	for _, p := range probes {
		ep := u.probeOf(gateRef{attr, p.key}, id)
		switch {
		case o == Success:
			u.remove(ep)
			tr = Closed
		case o == Failure && p.key == label:
			u.set(ep, u.value(entryValue(map[string]int64{gateUntil: reopen, gateLast: now})))
			tr = Reopened
		case o == Failure:
			u.unprobe(ep) // everyone's: shut below only with another's shut
		default:
			// No verdict: its principal may not probe it for Recovery.
			u.unprobe(ep)
			u.set(ep+"."+u.path(gateBarred), u.str(label))
			u.set(ep+"."+u.path(gateBarUntil), u.num(reopen))
		}
	}
	ownProbed := slices.Contains(probes, gateRef{attr, label})
	switch {
	case o != Failure && o != Success, ownProbed && o == Success:
		return tr
	case ownProbed:
		return u.shutWith(g, attr, label, probes, reopen, now, tr)
	}
	e := g.entry(label)
	u.condGate(g, attr, label)
	starFailed := len(probes) > 0 && o == Failure // everyone's probe: its own signal too
	switch {
	case o == Success:
		if e.until == 0 && e.fails > 0 {
			u.remove(u.path(attr, label))
		}
		return tr
	case e.until != 0:
		return tr // shut or half-open: it counts no failure
	case !starFailed && e.fails+1 < int64(br.Threshold):
		u.setEntry(g, attr, label, entryValue(map[string]int64{gateFails: e.fails + 1, gateLast: now}))
		return tr
	}
	u.setEntry(g, attr, label, entryValue(map[string]int64{gateUntil: reopen, gateLast: now}))
	tr = OpenedForPrincipal
	if starFailed {
		tr = Reopened
	}
	return u.shutWith(g, attr, label, probes, reopen, now, tr)
}

// shutWith closes, as label's entry of gate attr closes until reopen (a
// breaker's, or a pause's with no probes), everyone's too while another
// principal's is closed, and no longer, judged from g as seen and pinned,
// and returns the transition.
func (u *update) shutWith(g *gate, attr, label string, probes []gateRef, reopen, now int64, tr Transition) Transition {
	if g == nil {
		return tr
	}
	u.pinGate(g, func(key string) bool { return key == label || slices.Contains(probes, gateRef{attr, key}) })
	// Until the earlier of label's end and the others' as seen (pinned), as
	// a pause: a write that lands late, or is sent again as built, closes
	// everyone's no later than another's closing that stood when it was
	// built.
	until := min(reopen, g.othersUntil(label))
	switch all, seen := g.entries[gateAll]; {
	case until <= now: // no other principal's entry closed
		return tr
	case slices.Contains(probes, gateRef{attr, gateAll}):
		u.set(u.path(attr, gateAll, gateUntil), u.num(until))
		return Reopened
	case !seen:
		// pinGate cannot tell an entry seen with no field from an absent
		// one: everyone's is conditioned absent too.
		ep := u.path(g.attr, gateAll)
		u.cond("attribute_not_exists(" + ep + ")")
		u.set(ep, u.value(entryValue(map[string]int64{gateUntil: until})))
	case all.until < until: // never shortening a closing that stands
		u.set(u.path(g.attr, gateAll, gateUntil), u.num(until))
	}
	return Opened
}

// pause closes pause gate attr for principal label until until, as v
// shows the gate (see Pause in the package doc), and reports whether it
// closes it (not when a later pause stands, or it has passed).
func (u *update) pause(v *view, attr, label string, until, now int64) bool {
	g := v.gates[attr]
	if until <= now {
		return false // it has passed
	}
	u.condGate(g, attr, label)
	if g.entry(label).until >= until {
		return false // a later pause stands, so long as it does
	}
	u.setEntry(g, attr, label, entryValue(map[string]int64{gateUntil: until}))
	// Everyone's closes while another principal's is closed too, and no
	// longer: until the earlier of the two ends, the others' as seen
	// (pinned). So a write that lands late, or is sent again as built
	// after an unknown outcome, closes it no later than a pause that
	// stood when it was built.
	u.shutWith(g, attr, label, nil, until, now, NoTransition)
	return true
}

// othersUntil is the latest time an entry of g of a principal other than
// label is closed until (0: none).
func (g *gate) othersUntil(label string) int64 {
	var last int64
	if g != nil {
		for key, e := range g.entries {
			if key != gateAll && key != label {
				last = max(last, e.until)
			}
		}
	}
	return last
}

// staleEntries lists the gate entries stale at now (see Gates in the
// package doc; a pause entry whose time passed), and the gate maps left
// empty.
func (v *view) staleEntries(now int64) (entries []gateRef, empty []string) {
	idle := IdleGate.Milliseconds()
	for _, attr := range slices.Sorted(maps.Keys(v.gates)) {
		g := v.gates[attr]
		if len(g.entries)+g.bad == 0 {
			empty = append(empty, attr)
		}
		for _, key := range slices.Sorted(maps.Keys(g.entries)) {
			e := g.entries[key]
			if g.breaker() && e.probe == "" && e.last+idle < now && (e.until == 0 || key != gateAll && e.until+idle < now) ||
				!g.breaker() && e.until <= now {
				entries = append(entries, gateRef{attr, key})
			}
		}
	}
	return entries, empty
}

// BreakerStatus is a breaker as an item shows it.
type BreakerStatus struct {
	// Name is the breaker's (the tool's).
	Name string `json:"name"`
	// State is everyone's entry's: "closed" (calls pass), "open",
	// "half-open" (the next call is the probe) or "probing".
	State string `json:"state"`
	// Failures counts each principal's consecutive failures.
	Failures map[string]int `json:"failures,omitempty"`
	// OpenUntil is when an open breaker lets a probe through.
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// Probe and ProbeExpiry name the running probe's lease.
	Probe       string     `json:"probe,omitempty"`
	ProbeExpiry *time.Time `json:"probe_expiry,omitempty"`
	// OpenFor: the principals it is open (or half-open) for alone, with
	// when each may probe.
	OpenFor map[string]time.Time `json:"open_for,omitempty"`
}

// PauseStatus is a pause the upstream asked for.
type PauseStatus struct {
	// Tool is the tool paused, "" for the whole server.
	Tool string `json:"tool,omitempty"`
	// Until is when it ends for everyone (zero: not for everyone); For,
	// per principal paused alone, when it ends.
	Until time.Time            `json:"until,omitzero"`
	For   map[string]time.Time `json:"for,omitempty"`
}

// put sets (*m)[k], making the map if needed.
func put[V any](m *map[string]V, k string, v V) {
	if *m == nil {
		*m = map[string]V{}
	}
	(*m)[k] = v
}

// msTime is a Unix ms time, by reference.
func msTime(ms int64) *time.Time {
	t := time.UnixMilli(ms)
	return &t
}

// gateStatus reads v's breakers and pauses at now.
func (v *view) gateStatus(now int64) (breakers []BreakerStatus, pauses []PauseStatus) {
	for _, attr := range slices.Sorted(maps.Keys(v.gates)) {
		g := v.gates[attr]
		if !g.breaker() {
			p := PauseStatus{Tool: strings.TrimPrefix(strings.TrimPrefix(attr, PauseAttr), ":")}
			for key, e := range g.entries {
				switch {
				case !e.shut(now):
				case key == gateAll:
					p.Until = time.UnixMilli(e.until)
				default:
					put(&p.For, key, time.UnixMilli(e.until))
				}
			}
			if !p.Until.IsZero() || len(p.For) > 0 {
				pauses = append(pauses, p)
			}
			continue
		}
		s := BreakerStatus{Name: strings.TrimPrefix(attr, BreakerAttrPrefix), State: "closed"}
		all := g.entry(gateAll)
		switch {
		case all.shut(now):
			s.State = "open"
		case all.probing(now):
			s.State = "probing"
			s.Probe, s.ProbeExpiry = all.probe, msTime(all.probeExp)
		case all.halfOpen(now):
			s.State = "half-open"
		}
		if all.until > 0 {
			s.OpenUntil = msTime(all.until)
		}
		for key, e := range g.entries {
			if key != gateAll && e.fails > 0 {
				put(&s.Failures, key, int(e.fails))
			}
			if key != gateAll && e.until > 0 {
				put(&s.OpenFor, key, time.UnixMilli(e.until))
			}
		}
		breakers = append(breakers, s)
	}
	return breakers, pauses
}

// Breaker is a circuit breaker kept in the lease item as a gate
// (breaker:<Name>; see Gates in the package doc), so checking it costs no
// store operation of its own.
type Breaker struct {
	// Name tells breakers of one item apart (the tool name).
	Name string
	// Threshold is the consecutive failures that close a principal's
	// entry.
	Threshold int
	// Recovery is how long an entry stays closed.
	Recovery time.Duration
}

// Transition is a change of breaker state made by a release.
type Transition string

const (
	NoTransition Transition = ""
	// Opened: closed for everyone (two principals' entries closed).
	Opened Transition = "opened"
	// OpenedForPrincipal: closed for the releasing call's principal alone.
	OpenedForPrincipal Transition = "opened_for_principal"
	// Closed: a probe succeeded, and calls pass again.
	Closed Transition = "closed"
	// Reopened: a probe failed, and its entry is closed again.
	Reopened Transition = "reopened"
)
