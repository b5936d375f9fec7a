package lease

import (
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
		b := (&Breaker{Name: name}).attrs()
		st := breakerState{
			fails:     numberAttr(item[b.fails]),
			openUntil: numberAttr(item[b.openUntil]),
			probeExp:  numberAttr(item[b.probeExp]),
		}
		if v, ok := item[b.probe].(*types.AttributeValueMemberS); ok {
			st.probe = v.Value
		}
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
