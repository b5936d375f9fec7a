package lease

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A gate closes a scope of the key — a tool's breaker, the upstream's
// pause of the server or of one tool — for one principal or for everyone
// (see the package doc). It is one map attribute: gateAll → the entry for
// everyone, and a principal's label → its own entry.
const (
	// BreakerAttrPrefix starts a breaker's gate: "breaker:<tool>".
	BreakerAttrPrefix = "breaker:"
	// PauseAttr is the gate of the server's pause; PauseAttrPrefix starts
	// a tool's: "pause:<tool>".
	PauseAttr       = "pause"
	PauseAttrPrefix = "pause:"
	// HoldAttr is an operator's hold: no place is taken before it (Unix
	// ms).
	HoldAttr = "hold"
	// gateAll is the key of a gate's entry for everyone.
	gateAll = "*"
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

// IdleGate is how long a gate entry that is open and saw no failure stays
// before it is stale.
const IdleGate = time.Minute

// MaxPause bounds any pause, and a pause when the request gives no
// MaxPause.
const MaxPause = 5 * time.Minute

// isGateAttr reports whether attr is a gate (breaker or pause).
func isGateAttr(attr string) bool {
	return attr == PauseAttr || strings.HasPrefix(attr, PauseAttrPrefix) || strings.HasPrefix(attr, BreakerAttrPrefix)
}

// BreakerAttr is the gate of the breaker named name.
func BreakerAttr(name string) string { return BreakerAttrPrefix + name }

// pauseAttr is the gate a pause of tool's upstream closes: the tool's when
// its server pauses per tool, else the server's.
func pauseAttr(tool string, perTool bool) string {
	if perTool && tool != "" {
		return PauseAttrPrefix + tool
	}
	return PauseAttr
}

// gate is one gate as a view shows it.
type gate struct {
	attr    string
	entries map[string]gateEntry
}

// gateEntry is one entry of a gate.
type gateEntry struct {
	until, probeExp, fails, last, barUntil int64
	probe, barred                          string
}

// barredFor reports whether principal label may not be the entry's probe
// at now: its last probe of the entry ended without a verdict.
func (e gateEntry) barredFor(label string, now int64) bool {
	return e.barred == label && e.barUntil > now
}

func parseGate(attr string, m *types.AttributeValueMemberM) *gate {
	g := &gate{attr: attr, entries: map[string]gateEntry{}}
	for key, v := range m.Value {
		f, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			g.entries[key] = gateEntry{}
			continue
		}
		e := gateEntry{until: numberOr(f.Value[gateUntil], 0), probeExp: numberOr(f.Value[gateProbeExp], 0),
			fails: numberOr(f.Value[gateFails], 0), last: numberOr(f.Value[gateLast], 0), barUntil: numberOr(f.Value[gateBarUntil], 0)}
		if p, ok := f.Value[gateProbe].(*types.AttributeValueMemberS); ok {
			e.probe = p.Value
		}
		if b, ok := f.Value[gateBarred].(*types.AttributeValueMemberS); ok {
			e.barred = b.Value
		}
		g.entries[key] = e
	}
	return g
}

func (g *gate) breaker() bool { return strings.HasPrefix(g.attr, BreakerAttrPrefix) }

// entry returns the entry of key (gateAll or a label), the zero entry when
// there is none.
func (g *gate) entry(key string) gateEntry {
	if g == nil {
		return gateEntry{}
	}
	return g.entries[key]
}

// closed reports whether the entry refuses every call at now.
func (e gateEntry) shut(now int64) bool { return e.until > now }

// probing reports whether the entry's closed time passed and its probe's
// call runs (a breaker's).
func (e gateEntry) probing(now int64) bool {
	return e.until > 0 && e.until <= now && e.probe != "" && e.probeExp >= now
}

// halfOpen reports whether the entry's closed time passed with no probe
// running: a breaker's next call is its probe.
func (e gateEntry) halfOpen(now int64) bool { return e.until > 0 && e.until <= now && !e.probing(now) }

// gateRef names one entry of one gate.
type gateRef struct{ attr, key string }

// gatesOf lists the gates that apply to a caller of tool (breaker the name
// of its breaker, "" if none) as v shows them: its breaker's, the server's
// pause and its tool's.
func (v *view) gatesOf(tool, breaker string) []*gate {
	var out []*gate
	for _, attr := range []string{BreakerAttr(breaker), PauseAttr, PauseAttrPrefix + tool} {
		if g := v.gates[attr]; g != nil && (attr != BreakerAttr("") || breaker != "") && attr != PauseAttrPrefix {
			out = append(out, g)
		}
	}
	return out
}

// passes says whether a caller of principal label may pass the gates gs
// at now, and which breaker entries it would probe; probing lists the
// entries whose probe was already handed out.
func passes(gs []*gate, label string, now int64, probing map[gateRef]bool) (ok bool, probes []gateRef) {
	for _, g := range gs {
		for _, key := range []string{gateAll, label} {
			e, ok := g.entries[key]
			switch {
			case !ok:
			case e.shut(now) || e.probing(now):
				return false, nil
			case g.breaker() && e.halfOpen(now):
				ref := gateRef{g.attr, key}
				if probing[ref] || e.barredFor(label, now) {
					return false, nil
				}
				probes = append(probes, ref)
			}
		}
	}
	return true, probes
}

// CircuitOpenError means a breaker refused the call.
type CircuitOpenError struct {
	Name string
	// HalfOpen is set when the refusal is because another call is the
	// probe; Principal when the breaker is closed for the caller's
	// principal alone (its own calls failed).
	HalfOpen, Principal bool
	// RetryAfter is how long until the breaker lets a call through again
	// (the time left closed, or until the probe's lease ends).
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

// refusal is the refusal of a caller of principal label by the gates gs
// at now: its breaker's (a *CircuitOpenError, which fails the call at
// once), else the latest pause or the hold (a *FullError, Reason Paused
// or Held, which a waiter waits out); nil when every gate lets it pass.
func refusal(gs []*gate, label string, now, hold int64) error {
	var pause int64
	for _, g := range gs {
		for _, key := range []string{gateAll, label} {
			e, ok := g.entries[key]
			if !ok {
				continue
			}
			if !g.breaker() {
				if e.shut(now) {
					pause = max(pause, e.until)
				}
				continue
			}
			name := strings.TrimPrefix(g.attr, BreakerAttrPrefix)
			switch {
			case e.shut(now):
				return &CircuitOpenError{Name: name, Principal: key != gateAll, RetryAfter: time.Duration(e.until-now) * time.Millisecond}
			case e.probing(now):
				return &CircuitOpenError{Name: name, HalfOpen: true, RetryAfter: max(time.Duration(e.probeExp-now)*time.Millisecond, 50*time.Millisecond)}
			case e.halfOpen(now) && e.barredFor(label, now):
				return &CircuitOpenError{Name: name, HalfOpen: true, Principal: true, RetryAfter: time.Duration(e.barUntil-now) * time.Millisecond}
			}
		}
	}
	switch {
	case hold > now && hold >= pause:
		return &FullError{Reason: Held, What: "server", RetryAfter: time.Duration(hold-now) * time.Millisecond}
	case pause > now:
		return &FullError{Reason: Paused, What: "server", RetryAfter: time.Duration(pause-now) * time.Millisecond}
	}
	return nil
}

// admit adds to u the conditions that the caller of principal label still
// passes its gates, as a take made at now, and names it the probe of
// the entries probes. Each entry is conditioned on what makes it pass,
// never on a value another call's release moves (a failure count): a
// breaker entry never closed (or opened again), or half-open with no live
// probe when it probes; a pause entry passed or absent. With no view
// (every entry absent), the same conditions hold the take to entries that
// never closed.
func (u *update) admit(gs []string, label string, id string, exp, now int64, probes []gateRef, v *view) {
	for _, attr := range gs {
		var g *gate
		if v != nil {
			g = v.gates[attr]
		}
		for _, key := range []string{gateAll, label} {
			ep := u.path(attr, key)
			up := ep + "." + u.path(gateUntil)
			switch {
			case slices.Contains(probes, gateRef{attr, key}):
				pp := ep + "." + u.path(gateProbe)
				bp := ep + "." + u.path(gateBarred)
				u.cond(up+" = "+u.num(g.entry(key).until), "(attribute_not_exists("+pp+") OR "+ep+"."+u.path(gateProbeExp)+" < "+u.num(now)+")",
					"(attribute_not_exists("+bp+") OR "+bp+" <> "+u.str(label)+" OR "+ep+"."+u.path(gateBarUntil)+" <= "+u.num(now)+")")
				u.set(pp, u.str(id))
				u.set(ep+"."+u.path(gateProbeExp), u.num(exp))
			case strings.HasPrefix(attr, BreakerAttrPrefix):
				u.cond("attribute_not_exists(" + up + ")")
			default:
				u.cond("(attribute_not_exists(" + up + ") OR " + up + " <= " + u.num(now) + ")")
			}
		}
	}
	hp := u.path(HoldAttr)
	u.cond("(attribute_not_exists(" + hp + ") OR " + hp + " <= " + u.num(now) + ")")
}

// entryValue is a gate entry as written.
func entryValue(fields map[string]int64, probe string) types.AttributeValue {
	m := map[string]types.AttributeValue{}
	for k, n := range fields {
		m[k] = number(n)
	}
	if probe != "" {
		m[gateProbe] = &types.AttributeValueMemberS{Value: probe}
	}
	return &types.AttributeValueMemberM{Value: m}
}

// setEntry adds to u the write of entry key of gate attr as v shows the
// gate: the whole map when the gate is not there, the entry when it is,
// each conditioned on the state seen (a gate made meanwhile, an entry
// changed, fail the write, which is made again from its answer).
func (u *update) setEntry(v *view, attr, key string, val types.AttributeValue) {
	gp := u.path(attr)
	g := v.gates[attr]
	if g == nil {
		u.cond("attribute_not_exists(" + gp + ")")
		u.set(gp, u.value(&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{key: val}}))
		return
	}
	// A nested write needs its map there: conditioned on it, a map
	// removed meanwhile fails the condition rather than the request.
	u.cond("attribute_exists(" + gp + ")")
	u.condEntry(g, key)
	u.set(u.path(attr, key), u.value(val))
}

// condEntry conditions u on entry key of g being as seen: absent, or
// with the same closing time, probe and failures.
func (u *update) condEntry(g *gate, key string) {
	ep := u.path(g.attr, key)
	e, ok := g.entries[key]
	if !ok {
		u.cond("attribute_not_exists(" + ep + ")")
		return
	}
	for _, f := range []struct {
		name string
		n    int64
	}{{gateUntil, e.until}, {gateFails, e.fails}, {gateLast, e.last}} {
		fp := ep + "." + u.path(f.name)
		if f.n == 0 {
			u.cond("attribute_not_exists(" + fp + ")")
		} else {
			u.cond(fp + " = " + u.num(f.n))
		}
	}
	pp := ep + "." + u.path(gateProbe)
	if e.probe == "" {
		u.cond("attribute_not_exists(" + pp + ")")
	} else {
		u.cond(pp + " = " + u.str(e.probe))
	}
}

// shutByAnother reports whether g has an entry of a principal other
// than label closed at now, returning its key.
func (g *gate) shutByAnother(label string, now int64) (string, bool) {
	if g == nil {
		return "", false
	}
	for _, key := range slices.Sorted(maps.Keys(g.entries)) {
		if key != gateAll && key != label && g.entries[key].shut(now) {
			return key, true
		}
	}
	return "", false
}

// shutAll adds to u the closing of g's entry for everyone until until,
// because another principal's entry (other) is closed: conditioned on that
// entry being as seen, and never shortening a closing that stands.
func (u *update) shutAll(g *gate, other string, until int64) {
	u.condEntry(g, other)
	e, ok := g.entries[gateAll]
	switch {
	case !ok:
		u.cond("attribute_not_exists(" + u.path(g.attr, gateAll) + ")")
		u.set(u.path(g.attr, gateAll), u.value(entryValue(map[string]int64{gateUntil: until}, "")))
	case e.until < until:
		u.condEntry(g, gateAll)
		u.set(u.path(g.attr, gateAll, gateUntil), u.num(until))
	}
}

// outcome adds to u what a finished call of principal label, lease id,
// tells breaker br as v shows it: the verdicts of the entries it probed,
// or its failure counted (its principal's entry closing at Threshold, and
// the entry for everyone with it while another principal's is closed), or
// its success resetting its principal's count. It returns the transition.
func (u *update) outcome(br *Breaker, v *view, id, label string, probes []gateRef, o Outcome, now int64) Transition {
	attr := BreakerAttr(br.Name)
	g := v.gates[attr]
	reopen := now + br.Recovery.Milliseconds()
	tr := NoTransition
	for _, p := range probes {
		ep := u.path(attr, p.key)
		u.cond(ep + "." + u.path(gateProbe) + " = " + u.str(id))
		switch {
		case o == Success:
			u.remove(ep)
			tr = Closed
		case o == Failure && p.key == label:
			u.set(ep, u.value(entryValue(map[string]int64{gateUntil: reopen, gateLast: now}, "")))
			tr = Reopened
		case o == Failure:
			// The everyone-entry's failed probe: half-open again, for
			// another caller to probe (below, shut again only with another
			// principal's entry shut).
			u.remove(ep+"."+u.path(gateProbe), ep+"."+u.path(gateProbeExp))
		default:
			// A probe that ended without a verdict: half-open again, and
			// its principal may not be the probe for Recovery, so that
			// one principal's abandoned probes cannot keep the others
			// out.
			u.remove(ep+"."+u.path(gateProbe), ep+"."+u.path(gateProbeExp))
			u.set(ep+"."+u.path(gateBarred), u.str(label))
			u.set(ep+"."+u.path(gateBarUntil), u.num(reopen))
		}
	}
	ownProbed := slices.Contains(probes, gateRef{attr, label})
	switch {
	case o != Failure && o != Success, ownProbed && o == Success:
		return tr // its own entry had its probe's verdict
	case ownProbed:
		// Its own entry shut again by its probe's failure: for everyone
		// too if another principal's is shut, judged from the gate as
		// seen, every entry conditioned.
		return u.shutWith(g, attr, label, probes, reopen, now, tr)
	}
	// What the call tells its principal's entry is judged from the entry
	// as seen, and conditioned on it: a view that missed a change (a
	// failure counted, the entry shut or opened) fails the release, which
	// is made again from the item its answer shows.
	e := g.entry(label)
	if g == nil {
		u.cond("attribute_not_exists(" + u.path(attr) + ")")
	} else {
		u.cond("attribute_exists(" + u.path(attr) + ")")
		u.condEntry(g, label)
	}
	starFailed := len(probes) > 0 && o == Failure // the everyone-entry's probe
	switch {
	case o == Success:
		if e.until == 0 && e.fails > 0 {
			u.remove(u.path(attr, label))
		}
		return tr
	case e.until != 0:
		return tr // shut or half-open: it counts no failure
	case !starFailed && e.fails+1 < int64(br.Threshold):
		u.setEntryAs(g, attr, label, entryValue(map[string]int64{gateFails: e.fails + 1, gateLast: now}, ""))
		return tr
	}
	// Its principal's entry shuts (a failed everyone-probe is its own
	// signal too).
	u.setEntryAs(g, attr, label, entryValue(map[string]int64{gateUntil: reopen, gateLast: now}, ""))
	tr = OpenedForPrincipal
	if starFailed {
		tr = Reopened
	}
	return u.shutWith(g, attr, label, probes, reopen, now, tr)
}

// shutWith adds to u, as principal label's entry of gate attr shuts until
// reopen, the entry for everyone's shutting with it if another
// principal's entry is shut — judged from the gate g as seen, every entry
// of it conditioned (those of probes are, by their probe) — and returns
// the transition: tr, or Opened when the everyone-entry shuts.
func (u *update) shutWith(g *gate, attr, label string, probes []gateRef, reopen, now int64, tr Transition) Transition {
	if g == nil {
		return tr
	}
	u.cond("size(" + u.path(attr) + ") = " + u.num(int64(len(g.entries))))
	for _, key := range slices.Sorted(maps.Keys(g.entries)) {
		if key != label && !slices.Contains(probes, gateRef{attr, key}) {
			u.condEntry(g, key)
		}
	}
	other, ok := g.shutByAnother(label, now)
	switch {
	case !ok:
		return tr
	case slices.Contains(probes, gateRef{attr, gateAll}):
		// Its failed probe of the everyone-entry left it half-open: shut
		// again.
		u.set(u.path(attr, gateAll, gateUntil), u.num(reopen))
		return Reopened
	}
	u.shutAll(g, other, reopen)
	return Opened
}

// setEntryAs adds to u the write of entry key of gate attr, g being the
// gate as seen (nil: none) and the conditions on it already made: the
// whole map when there was none, else the entry.
func (u *update) setEntryAs(g *gate, attr, key string, val types.AttributeValue) {
	if g == nil {
		u.set(u.path(attr), u.value(&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{key: val}}))
		return
	}
	u.set(u.path(attr, key), u.value(val))
}

// pause adds to u the closing of the pause gate attr for principal label
// until until, the upstream having asked for it, as v shows the gate:
// never shortening a closing that stands, and closing it for everyone
// while another principal's entry is closed too.
func (u *update) pause(v *view, attr, label string, until, now int64) {
	g := v.gates[attr]
	if e := g.entry(label); e.until >= until || until <= now {
		return // a later pause stands, or this one has passed already
	}
	val := entryValue(map[string]int64{gateUntil: until}, "")
	if g == nil {
		u.setEntry(v, attr, label, val)
		return
	}
	// Whether it shuts for everyone is judged from the gate as seen,
	// every other entry of it conditioned.
	ep := u.path(attr, label)
	u.cond("attribute_exists(" + u.path(attr) + ")")
	u.cond("size(" + u.path(attr) + ") = " + u.num(int64(len(g.entries))))
	// Its own entry too, as seen (absent included): with the size, that
	// pins the gate's entries, so that one purged and another's added
	// meanwhile cannot pass for the gate as seen.
	for _, key := range slices.Sorted(maps.Keys(g.entries)) {
		u.condEntry(g, key)
	}
	if _, seen := g.entries[label]; !seen {
		u.condEntry(g, label)
	}
	u.set(ep, u.value(val))
	if other, ok := g.shutByAnother(label, now); ok && g.entry(gateAll).until < until {
		u.shutAll(g, other, until)
	}
}

// staleEntries lists the gate entries stale at now, with the gate maps
// left empty: a breaker entry open (never closed, or opened again) whose
// last failure is IdleGate old; a pause entry whose time passed.
func (v *view) staleEntries(now int64) (entries []gateRef, empty []string) {
	for _, attr := range slices.Sorted(maps.Keys(v.gates)) {
		g := v.gates[attr]
		if len(g.entries) == 0 {
			empty = append(empty, attr)
		}
		for _, key := range slices.Sorted(maps.Keys(g.entries)) {
			e := g.entries[key]
			switch {
			case g.breaker() && e.probe == "" && e.last+IdleGate.Milliseconds() < now &&
				(e.until == 0 || key != gateAll && e.until+IdleGate.Milliseconds() < now),
				!g.breaker() && e.until <= now:
				entries = append(entries, gateRef{attr, key})
			}
		}
	}
	return entries, empty
}

// BreakerStatus is a breaker as an item shows it, for people and tools.
type BreakerStatus struct {
	// Name is the breaker's (the tool's) name.
	Name string `json:"name"`
	// State is the entry for everyone's: "closed" (calls pass), "open",
	// "half-open" (the next call will be the probe) or "probing".
	State string `json:"state"`
	// Failures counts each principal's consecutive failures.
	Failures map[string]int `json:"failures,omitempty"`
	// OpenUntil is when an open breaker lets a probe through.
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// Probe and ProbeExpiry name the running probe's lease.
	Probe       string     `json:"probe,omitempty"`
	ProbeExpiry *time.Time `json:"probe_expiry,omitempty"`
	// OpenFor lists the principals it is open for alone (or half-open
	// for, their own probe due), with when each may probe.
	OpenFor map[string]time.Time `json:"open_for,omitempty"`
}

// PauseStatus is a pause the upstream asked for, as an item shows it.
type PauseStatus struct {
	// Tool is the tool paused, "" for the whole server.
	Tool string `json:"tool,omitempty"`
	// Until is when it ends for everyone (zero: it does not stand for
	// everyone); For, per principal paused alone, when it ends.
	Until time.Time            `json:"until,omitzero"`
	For   map[string]time.Time `json:"for,omitempty"`
}

// status reads v's breakers and pauses at now.
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
					if p.For == nil {
						p.For = map[string]time.Time{}
					}
					p.For[key] = time.UnixMilli(e.until)
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
		case all.halfOpen(now):
			s.State = "half-open"
		}
		if all.until > 0 {
			at := time.UnixMilli(all.until)
			s.OpenUntil = &at
		}
		if all.probe != "" && all.probing(now) {
			at := time.UnixMilli(all.probeExp)
			s.Probe, s.ProbeExpiry = all.probe, &at
		}
		for key, e := range g.entries {
			if key == gateAll {
				continue
			}
			if e.fails > 0 {
				if s.Failures == nil {
					s.Failures = map[string]int{}
				}
				s.Failures[key] = int(e.fails)
			}
			if e.until > 0 {
				if s.OpenFor == nil {
					s.OpenFor = map[string]time.Time{}
				}
				s.OpenFor[key] = time.UnixMilli(e.until)
			}
		}
		breakers = append(breakers, s)
	}
	slices.SortFunc(pauses, func(a, b PauseStatus) int { return cmp.Compare(a.Tool, b.Tool) })
	return breakers, pauses
}

// Breaker is a circuit breaker kept in the lease item as a gate
// (breaker:<Name>), so checking it costs no store operation of its own: the
// take's condition refuses while it is closed for the caller.
//
// A failed call (timeout, unreachable, 5xx) counts towards its principal's
// entry; Threshold consecutive failures close it for Recovery; after it,
// one call of that principal is the probe, whose success opens the entry
// and whose failure closes it again. When a principal's entry closes while
// another's is closed, the entry for everyone closes too, and after
// Recovery one call of anyone is its probe: a success opens it; a failure
// closes the prober's own entry, and the everyone-entry again only while
// another principal's is closed. An abandoned call leaves the breaker as
// it was; an abandoned probe gives up being the probe.
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
	// NoTransition: the release left the breaker as it was.
	NoTransition Transition = ""
	// Opened: closed for everyone (two principals' entries closed).
	Opened Transition = "opened"
	// OpenedForPrincipal: closed for the releasing call's principal
	// alone.
	OpenedForPrincipal Transition = "opened_for_principal"
	// Closed: a probe succeeded, and calls pass again.
	Closed Transition = "closed"
	// Reopened: a probe failed, and its entry is closed again.
	Reopened Transition = "reopened"
)

// Breakers reads every breaker of a lease item as of now.
func Breakers(item map[string]types.AttributeValue, now time.Time) []BreakerStatus {
	b, _ := parseItem(item).gateStatus(now.UnixMilli())
	return b
}
