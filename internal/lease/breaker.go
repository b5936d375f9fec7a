package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Breaker is a circuit breaker kept in the lease item, beside the leases,
// so checking it costs no store operation of its own: the acquire write's
// condition refuses while it is open.
//
// Its state is four top-level attributes, suffixed with the breaker's name
// (the tool): breaker_fails (consecutive infrastructure failures),
// breaker_open_until (Unix ms; absent or 0 = closed), breaker_probe and
// breaker_probe_expiry (the one lease allowed through while half-open).
//
// A call to a tool with a breaker but no cap takes no place: its acquire
// is one consistent read of the breaker, and its release writes only when
// the count changes (a failure, or a success after failures). Nothing of it
// stays in the item, so the item does not grow with the calls in flight.
//
//   - closed: calls pass. A failed call adds 1 to the count in its release
//     write, a successful one resets it. The release that brings the count
//     to Threshold also opens the breaker, with a second conditional write.
//   - open: until open_until, every acquire is refused (*CircuitOpenError)
//     with the time left.
//   - half-open: once open_until has passed, exactly one acquire in the
//     fleet wins a conditional write that names it the probe; it holds a
//     probe lease with the call's expiry, so a probe that dies does not
//     wedge the breaker. The probe's success closes the breaker, its
//     failure opens it again for Recovery.
type Breaker struct {
	// Name tells breakers of one item apart (the tool name).
	Name string
	// Threshold is the consecutive failures that open it.
	Threshold int
	// Recovery is how long it stays open.
	Recovery time.Duration
}

func (b *Breaker) attrs() breakerAttrs {
	return breakerAttrs{
		fails:     "breaker_fails:" + b.Name,
		openUntil: "breaker_open_until:" + b.Name,
		probe:     "breaker_probe:" + b.Name,
		probeExp:  "breaker_probe_expiry:" + b.Name,
	}
}

type breakerAttrs struct{ fails, openUntil, probe, probeExp string }

// BreakerAttrPrefix starts the names of every breaker attribute.
const BreakerAttrPrefix = "breaker_"

// IsBreakerAttr reports whether an item attribute holds breaker state
// ("breaker_<field>:<name>").
func IsBreakerAttr(attr string) bool {
	rest, ok := strings.CutPrefix(attr, BreakerAttrPrefix)
	if !ok {
		return false
	}
	field, _, ok := strings.Cut(rest, ":")
	switch field {
	case "fails", "open_until", "probe", "probe_expiry":
		return ok
	}
	return false
}

// CircuitOpenError means the breaker refused the call.
type CircuitOpenError struct {
	Name string
	// HalfOpen is set when the refusal is because another call is the
	// probe.
	HalfOpen bool
	// RetryAfter is how long until the breaker lets a call through again
	// (the time left open, or until the probe's lease ends).
	RetryAfter time.Duration
}

func (e *CircuitOpenError) Error() string {
	if e.HalfOpen {
		return fmt.Sprintf("lease: circuit %q is half-open and its probe is running", e.Name)
	}
	return fmt.Sprintf("lease: circuit %q is open for %v", e.Name, e.RetryAfter.Round(time.Millisecond))
}

// Transition is a change of breaker state made by a release.
type Transition string

const (
	// NoTransition: the release left the breaker as it was.
	NoTransition Transition = ""
	// Opened: closed → open (the threshold was reached).
	Opened Transition = "opened"
	// Closed: half-open → closed (the probe succeeded).
	Closed Transition = "closed"
	// Reopened: half-open → open (the probe failed).
	Reopened Transition = "reopened"
)

// breakerState is the breaker as a snapshot shows it.
type breakerState struct {
	fails     int64
	openUntil int64 // Unix ms; 0 = closed
	probe     string
	probeExp  int64
}

type breakerPhase int

const (
	phaseClosed breakerPhase = iota
	phaseOpen
	phaseHalfOpen    // open_until passed, no live probe: one may become it
	phaseProbeActive // half-open with a live probe
)

func (b breakerState) phase(now time.Time) breakerPhase {
	ms := now.UnixMilli()
	switch {
	case b.openUntil == 0:
		return phaseClosed
	case ms < b.openUntil:
		return phaseOpen
	case b.probe != "" && ms <= b.probeExp:
		return phaseProbeActive
	default:
		return phaseHalfOpen
	}
}

// BreakerStatus is a breaker as an item shows it, for people and tools.
type BreakerStatus struct {
	// Name is the breaker's (the tool's) name.
	Name string `json:"name"`
	// State is "closed", "open", "half-open" (the next call will be the
	// probe) or "probing" (a probe is running).
	State string `json:"state"`
	// Failures is the count of consecutive failures.
	Failures int64 `json:"failures"`
	// OpenUntil is when an open breaker lets a probe through.
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// Probe and ProbeExpiry name the running probe's lease.
	Probe       string     `json:"probe,omitempty"`
	ProbeExpiry *time.Time `json:"probe_expiry,omitempty"`
}

func parseBreaker(item map[string]types.AttributeValue, name string) breakerState {
	b := (&Breaker{Name: name}).attrs()
	st := breakerState{fails: numberOr(item[b.fails], 0), openUntil: numberOr(item[b.openUntil], 0), probeExp: numberOr(item[b.probeExp], 0)}
	if v, ok := item[b.probe].(*types.AttributeValueMemberS); ok {
		st.probe = v.Value
	}
	return st
}

// refuse is the refusal of a call while breaker name is open, or half-open
// with its probe running; nil otherwise.
func (l *Limiter) refuse(st breakerState, name string) error {
	now := l.clock()
	switch st.phase(now) {
	case phaseOpen:
		l.stats.circuitOpen.Add(1)
		return &CircuitOpenError{Name: name, RetryAfter: time.UnixMilli(st.openUntil).Sub(now)}
	case phaseProbeActive:
		l.stats.circuitOpen.Add(1)
		return &CircuitOpenError{Name: name, HalfOpen: true, RetryAfter: max(time.UnixMilli(st.probeExp).Sub(now), 50*time.Millisecond)}
	}
	return nil
}

// probe makes the write name id the probe of br until exp, only while the
// breaker is still the half-open one seen (open until openUntil, which
// has passed) and no live probe runs.
func (u *update) probe(br *Breaker, id string, exp, openUntil, now int64) {
	ba := br.attrs()
	bp, bpe := u.path(ba.probe), u.path(ba.probeExp)
	u.conds = append(u.conds, u.path(ba.openUntil)+" = "+u.num(openUntil),
		"(attribute_not_exists("+bp+") OR "+bpe+" < "+u.num(now)+")")
	u.sets = append(u.sets, bp+" = "+u.value(&types.AttributeValueMemberS{Value: id}), bpe+" = "+u.num(exp))
}

// outcome adds what a finished call tells its breaker to a release write:
// the probe's verdict (only while it is still the probe), or the failure
// count's change.
func (u *update) outcome(br *Breaker, id string, probe bool, o Outcome, now time.Time) {
	ba := br.attrs()
	switch {
	case probe:
		u.removes = append(u.removes, u.path(ba.probe), u.path(ba.probeExp))
		u.conds = append(u.conds, u.path(ba.probe)+" = "+u.value(&types.AttributeValueMemberS{Value: id}))
		switch o {
		case Failure:
			u.sets = append(u.sets, u.path(ba.openUntil)+" = "+u.num(now.Add(br.Recovery).UnixMilli()))
		case Success:
			u.sets = append(u.sets, u.path(ba.openUntil)+" = "+u.num(0), u.path(ba.fails)+" = "+u.num(0))
		}
	case o == Failure:
		u.adds = append(u.adds, u.path(ba.fails)+" "+u.num(1))
	case o == Success:
		u.sets = append(u.sets, u.path(ba.fails)+" = "+u.num(0))
	}
}

// verdict is the breaker change a release with this outcome made.
func verdict(probe bool, o Outcome) Transition {
	switch {
	case !probe || o == Abandoned:
		return NoTransition
	case o == Failure:
		return Reopened
	}
	return Closed
}

// open opens br if the failure count seen reached its threshold and no
// other instance opened it first.
func (l *Limiter) open(ctx context.Context, key string, br *Breaker, snap *snapshot) (*snapshot, Transition, error) {
	if snap.breakers[br.Name].fails < int64(br.Threshold) || snap.breakers[br.Name].openUntil != 0 {
		return snap, NoTransition, nil
	}
	ba := br.attrs()
	u := newUpdate()
	bo := u.path(ba.openUntil)
	u.sets = append(u.sets, bo+" = "+u.num(l.clock().Add(br.Recovery).UnixMilli()))
	u.conds = append(u.conds, u.path(ba.fails)+" >= "+u.num(int64(br.Threshold)), "(attribute_not_exists("+bo+") OR "+bo+" = "+u.num(0)+")")
	next, err := l.write(ctx, key, u)
	switch {
	case err == nil:
		return next, Opened, nil
	case errors.Is(err, errCondition):
		return next, NoTransition, nil
	}
	// The lease is released; the breaker stays closed until the next
	// failure tries again.
	return snap, NoTransition, fmt.Errorf("lease: open breaker %s: %w", br.Name, err)
}

// acquireBreaker admits a call that takes no place, only its breaker's
// say: one consistent read, and a write only to become the probe.
func (l *Limiter) acquireBreaker(ctx context.Context, req Request) (*Lease, error) {
	br := req.Breaker
	snap, err := l.read(ctx, req.Key)
	if err != nil {
		return nil, err
	}
	st := snap.breakers[br.Name]
	if err := l.refuse(st, br.Name); err != nil {
		return nil, err
	}
	wallNow, localNow := l.clock(), time.Now()
	hold := req.hold(localNow)
	ls := &Lease{l: l, key: req.Key, id: l.newLeaseID(req.Holder), breaker: br, failsSeen: st.fails,
		exp: wallNow.Add(hold + l.margin).UnixMilli(), CallDeadline: localNow.Add(hold)}
	ls.Expiry = time.UnixMilli(ls.exp)
	if st.phase(wallNow) == phaseHalfOpen {
		u := newUpdate()
		u.probe(br, ls.id, ls.exp, st.openUntil, wallNow.UnixMilli())
		if _, err := l.write(ctx, req.Key, u); errors.Is(err, errCondition) {
			l.stats.circuitOpen.Add(1)
			return nil, &CircuitOpenError{Name: br.Name, HalfOpen: true, RetryAfter: 50 * time.Millisecond}
		} else if err != nil {
			return nil, err
		}
		ls.probe = true
		l.stats.probes.Add(1)
	}
	l.stats.acquired.Add(1)
	return ls, nil
}

// finishBreaker reports the outcome of a call that took no place.
func (ls *Lease) finishBreaker(ctx context.Context, o Outcome) (Transition, error) {
	l, br := ls.l, ls.breaker
	u := newUpdate()
	switch {
	case ls.probe:
		u.outcome(br, ls.id, true, o, l.clock())
		u.released(ls.id)
	case o == Failure:
		u.outcome(br, ls.id, false, o, l.clock())
		rp := u.released(ls.id)
		u.conds = append(u.conds, "(attribute_not_exists("+rp+") OR "+rp+" <> "+u.value(&types.AttributeValueMemberS{Value: ls.id})+")")
	case o == Success && ls.failsSeen > 0:
		u.outcome(br, ls.id, false, o, l.clock())
	default:
		l.stats.released.Add(1)
		return NoTransition, nil
	}
	snap, err := l.write(ctx, ls.key, u)
	if errors.Is(err, errCondition) {
		if snap.released != ls.id {
			return NoTransition, ErrNotHeld
		}
		err = nil // an earlier attempt of this write landed
	}
	if err != nil {
		return NoTransition, err
	}
	l.stats.released.Add(1)
	tr := verdict(ls.probe, o)
	if !ls.probe && o == Failure {
		_, tr, err = l.open(ctx, ls.key, br, snap)
	}
	if tr != NoTransition {
		l.stats.transitions.Add(1)
	}
	return tr, err
}

// Breakers reads every breaker of a lease item, by name, as of now.
func Breakers(item map[string]types.AttributeValue, now time.Time) []BreakerStatus {
	names := map[string]bool{}
	for attr := range item {
		if IsBreakerAttr(attr) {
			_, name, _ := strings.Cut(attr, ":")
			names[name] = true
		}
	}
	var out []BreakerStatus
	for _, name := range slices.Sorted(maps.Keys(names)) {
		st := parseBreaker(item, name)
		s := BreakerStatus{Name: name, Failures: st.fails}
		switch st.phase(now) {
		case phaseClosed:
			s.State = "closed"
		case phaseOpen:
			s.State = "open"
		case phaseHalfOpen:
			s.State = "half-open"
		case phaseProbeActive:
			s.State = "probing"
			s.Probe = st.probe
			pe := time.UnixMilli(st.probeExp)
			s.ProbeExpiry = &pe
		}
		if st.openUntil > 0 {
			ou := time.UnixMilli(st.openUntil)
			s.OpenUntil = &ou
		}
		out = append(out, s)
	}
	return out
}
