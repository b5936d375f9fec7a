package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Breaker is a circuit breaker kept in the lease item, beside the leases,
// so checking it costs no store operation of its own: the acquire write's
// condition refuses while it is open.
//
// Its state is top-level attributes suffixed with the breaker's name (the
// tool):
//
//	breaker_failed:<t>      SS  the calls that failed since the last success, "<lease id>/<label>"
//	breaker_open_until:<t>  N   Unix ms; absent or 0 = closed for everyone
//	breaker_probe:<t>       S   the one lease allowed through while half-open,
//	breaker_probe_expiry:<t> N  until its call's lease expires
//	breaker_own:<t>         S   principals it is open for alone: "label=until label=until"
//
// A failure adds its call (its lease id and principal) to the failed set
// (idempotent: a retried release counts once), a success removes the set; the count of
// consecutive failures is the set's size, never stored apart. When it
// reaches Threshold:
//
//   - if the failed calls are of two or more principals, the breaker opens
//     for everyone: every acquire is refused (*CircuitOpenError) until
//     open_until; then exactly one acquire in the fleet wins a conditional
//     write that names it the probe, holding a probe lease with its call's
//     expiry (a probe that dies does not wedge the breaker); the probe's
//     success closes the breaker, its failure opens it again for Recovery;
//   - if they are all of one principal, it opens for that principal alone,
//     for Recovery: its calls are refused, everybody else's pass — one
//     tenant whose own calls fail (a tarpit argument, a huge query) cannot
//     cut a tool off for the others. Should another principal's call fail
//     before a success, the calls failing are two principals' and the
//     breaker opens for everyone; a success resets the count.
//
// A call to a tool with a breaker but no cap takes no place: its acquire is
// one consistent read of the breaker, and its release writes only when the
// breaker's state changes (a failure, or a success after failures). An
// abandoned call — one that tells nothing about the upstream — leaves the
// breaker as it was, and an abandoned probe only gives up being the probe.
type Breaker struct {
	// Name tells breakers of one item apart (the tool name).
	Name string
	// Threshold is the consecutive failures that open it.
	Threshold int
	// Recovery is how long it stays open.
	Recovery time.Duration
}

func (b *Breaker) attrs() breakerAttrs { return attrsOf(b.Name) }

func attrsOf(name string) breakerAttrs {
	return breakerAttrs{
		failed:    "breaker_failed:" + name,
		openUntil: "breaker_open_until:" + name,
		probe:     "breaker_probe:" + name,
		probeExp:  "breaker_probe_expiry:" + name,
		own:       "breaker_own:" + name,
	}
}

type breakerAttrs struct{ failed, openUntil, probe, probeExp, own string }

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
	case "failed", "open_until", "probe", "probe_expiry", "own":
		return ok
	}
	return false
}

// CircuitOpenError means the breaker refused the call.
type CircuitOpenError struct {
	Name string
	// HalfOpen is set when the refusal is because another call is the
	// probe; Principal when the breaker is open for the caller's principal
	// alone (its own calls failed).
	HalfOpen, Principal bool
	// RetryAfter is how long until the breaker lets a call through again
	// (the time left open, or until the probe's lease ends).
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

// Transition is a change of breaker state made by a release.
type Transition string

const (
	// NoTransition: the release left the breaker as it was.
	NoTransition Transition = ""
	// Opened: closed → open for everyone (the threshold was reached by
	// calls of two or more principals).
	Opened Transition = "opened"
	// OpenedForPrincipal: closed → open for the releasing call's principal
	// alone (the threshold was reached by its calls only).
	OpenedForPrincipal Transition = "opened_for_principal"
	// Closed: half-open → closed (the probe succeeded).
	Closed Transition = "closed"
	// Reopened: half-open → open (the probe failed).
	Reopened Transition = "reopened"
)

// breakerState is the breaker as a view shows it.
type breakerState struct {
	failed    []string
	openUntil int64 // Unix ms; 0 = closed
	probe     string
	probeExp  int64
	own       map[string]int64 // principal label → open until
	ownRaw    string
}

type breakerPhase int

const (
	phaseClosed breakerPhase = iota
	phaseOpen
	phaseHalfOpen    // open_until passed, no live probe: one may become it
	phaseProbeActive // half-open with a live probe
)

func (b breakerState) phase(now int64) breakerPhase {
	switch {
	case b.openUntil == 0:
		return phaseClosed
	case now < b.openUntil:
		return phaseOpen
	case b.probe != "" && now <= b.probeExp:
		return phaseProbeActive
	default:
		return phaseHalfOpen
	}
}

// admits reports whether a call of principal label may pass at now (a
// half-open breaker admits one probe).
func (b breakerState) admits(now int64, label string) bool {
	switch b.phase(now) {
	case phaseOpen, phaseProbeActive:
		return false
	}
	return b.own[label] < now
}

// principals lists the labels of the failed calls.
func (b breakerState) principals() []string {
	var out []string
	for _, f := range b.failed {
		_, label, _ := strings.Cut(f, "/")
		if !slices.Contains(out, label) {
			out = append(out, label)
		}
	}
	slices.Sort(out)
	return out
}

func parseBreaker(item map[string]types.AttributeValue, name string) breakerState {
	b := attrsOf(name)
	st := breakerState{openUntil: numberOr(item[b.openUntil], 0), probeExp: numberOr(item[b.probeExp], 0), own: map[string]int64{}}
	if v, ok := item[b.failed].(*types.AttributeValueMemberSS); ok {
		st.failed = slices.Sorted(slices.Values(v.Value))
	}
	if v, ok := item[b.probe].(*types.AttributeValueMemberS); ok {
		st.probe = v.Value
	}
	if v, ok := item[b.own].(*types.AttributeValueMemberS); ok {
		st.ownRaw = v.Value
		st.own = parseOwn(v.Value)
	}
	return st
}

// parseOwn reads "label=until label=until".
func parseOwn(s string) map[string]int64 {
	out := map[string]int64{}
	for _, f := range strings.Fields(s) {
		label, until, ok := strings.Cut(f, "=")
		if n, err := strconv.ParseInt(until, 10, 64); ok && err == nil {
			out[label] = n
		}
	}
	return out
}

// formatOwn writes the entries of own still open at now, in label order.
func formatOwn(own map[string]int64, now int64) string {
	var fs []string
	for _, label := range slices.Sorted(maps.Keys(own)) {
		if own[label] >= now {
			fs = append(fs, label+"="+strconv.FormatInt(own[label], 10))
		}
	}
	return strings.Join(fs, " ")
}

// maxOwn bounds the principals a breaker is open for alone at once; past
// it, a principal's failures open it for everyone.
const maxOwn = 8

// refusal is the refusal of a call of principal label while breaker name
// is open for it, or half-open with its probe running; nil otherwise.
func (l *Limiter) refusal(st breakerState, name, label string) error {
	now := l.clock().UnixMilli()
	var e *CircuitOpenError
	switch st.phase(now) {
	case phaseOpen:
		e = &CircuitOpenError{Name: name, RetryAfter: time.Duration(st.openUntil-now) * time.Millisecond}
	case phaseProbeActive:
		e = &CircuitOpenError{Name: name, HalfOpen: true, RetryAfter: max(time.Duration(st.probeExp-now)*time.Millisecond, 50*time.Millisecond)}
	default:
		if until := st.own[label]; until >= now {
			e = &CircuitOpenError{Name: name, Principal: true, RetryAfter: time.Duration(until-now) * time.Millisecond}
		}
	}
	if e == nil {
		return nil
	}
	l.stats.circuitOpen.Add(1)
	return e
}

// admit adds to a write that lets a call of principal label through breaker
// br the conditions that it still may (the breaker as seen in st, or, with
// no view, closed and open for nobody alone), and, when the breaker is
// half-open, the election of this call as its probe until exp.
func (u *update) admit(br *Breaker, st *breakerState, id, label string, exp, now int64) (probe bool) {
	ba := br.attrs()
	bo, own := u.path(ba.openUntil), u.path(ba.own)
	if st == nil {
		u.cond("(attribute_not_exists(" + bo + ") OR " + bo + " = " + u.num(0) + ")")
		u.cond("attribute_not_exists(" + own + ")")
		return false
	}
	if st.ownRaw == "" {
		u.cond("attribute_not_exists(" + own + ")")
	} else {
		u.cond(own + " = " + u.str(st.ownRaw))
	}
	if st.phase(now) != phaseHalfOpen {
		u.cond("(attribute_not_exists(" + bo + ") OR " + bo + " = " + u.num(0) + ")")
		return false
	}
	bp, bpe := u.path(ba.probe), u.path(ba.probeExp)
	u.cond(bo+" = "+u.num(st.openUntil), "(attribute_not_exists("+bp+") OR "+bpe+" < "+u.num(now)+")")
	u.set(bp, u.str(id))
	u.set(bpe, u.num(exp))
	return true
}

// outcome adds what a finished call tells its breaker to its release
// write: the probe's verdict (only while it is still the probe), or the
// failure set's change.
func (u *update) outcome(br *Breaker, id, label string, probe bool, o Outcome, now time.Time) {
	ba := br.attrs()
	switch {
	case probe:
		u.remove(u.path(ba.probe), u.path(ba.probeExp))
		u.cond(u.path(ba.probe) + " = " + u.str(id))
		switch o {
		case Failure:
			u.set(u.path(ba.openUntil), u.num(now.Add(br.Recovery).UnixMilli()))
		case Success:
			u.set(u.path(ba.openUntil), u.num(0))
			u.remove(u.path(ba.failed), u.path(ba.own))
		}
	case o == Failure:
		u.add(u.path(ba.failed), id+"/"+label)
	case o == Success:
		u.remove(u.path(ba.failed))
	}
}

// verdict is the breaker change a probe's release with this outcome made.
func verdict(probe bool, o Outcome) Transition {
	switch {
	case !probe || o == Abandoned:
		return NoTransition
	case o == Failure:
		return Reopened
	}
	return Closed
}

// open opens br, after a failure released as v shows, if the failures
// reached its threshold: for everyone when they are of two or more
// principals (or too many principals have it open for them alone), else
// for their one principal alone. Nobody else's write may have changed the
// failures in between.
func (l *Limiter) open(ctx context.Context, key string, br *Breaker, v *view) (Transition, error) {
	st := v.breakers[br.Name]
	now := l.clock()
	ms := now.UnixMilli()
	if len(st.failed) < br.Threshold || st.phase(ms) != phaseClosed {
		return NoTransition, nil
	}
	who := st.principals()
	if len(who) == 1 && st.own[who[0]] >= ms {
		return NoTransition, nil // open for it already
	}
	ba := br.attrs()
	u := newUpdate()
	u.ttl(ms)
	fp, bo, own := u.path(ba.failed), u.path(ba.openUntil), u.path(ba.own)
	u.cond("size("+fp+") = "+u.num(int64(len(st.failed))), "(attribute_not_exists("+bo+") OR "+bo+" = "+u.num(0)+")")
	for _, id := range st.failed {
		u.cond("contains(" + fp + ", " + u.str(id) + ")")
	}
	until := now.Add(br.Recovery).UnixMilli()
	tr := Opened
	if open := maps.Clone(st.own); len(who) == 1 && len(open) < maxOwn {
		open[who[0]] = until
		tr = OpenedForPrincipal
		if st.ownRaw == "" {
			u.cond("attribute_not_exists(" + own + ")")
		} else {
			u.cond(own + " = " + u.str(st.ownRaw))
		}
		u.set(own, u.str(formatOwn(open, ms)))
	} else {
		u.set(bo, u.num(until))
		u.remove(own)
	}
	_, err := l.write(ctx, key, u, nil)
	switch {
	case err == nil:
		l.stats.transitions.Add(1)
		return tr, nil
	case errors.Is(err, errCondition):
		return NoTransition, nil // someone else's write came first
	}
	// The call is released; the breaker stays as it was until the next
	// failure tries again.
	return NoTransition, fmt.Errorf("lease: open breaker %s: %w", br.Name, err)
}

// acquireBreaker admits a call that takes no place, only its breaker's
// say: one consistent read, and a write only to become the probe.
func (l *Limiter) acquireBreaker(ctx context.Context, req Request) (*Lease, error) {
	br := req.Breaker
	v, err := l.read(ctx, req.Key)
	if err != nil {
		return nil, err
	}
	st := v.breakers[br.Name]
	if err := l.refusal(st, br.Name, req.Holder); err != nil {
		return nil, err
	}
	if err := pausedRefusal(v, l.clock().UnixMilli()); err != nil {
		return nil, err
	}
	wallNow, localNow := l.clock(), time.Now()
	hold := req.hold(localNow)
	ls := &Lease{l: l, key: req.Key, id: l.newLeaseID(), breaker: br, label: req.Holder, noPlace: true, failsSeen: st.failed,
		exps: []int64{wallNow.Add(hold + l.margin).UnixMilli()}, CallDeadline: localNow.Add(hold), since: localNow}
	ls.Expiry = time.UnixMilli(ls.exp())
	if st.phase(wallNow.UnixMilli()) == phaseHalfOpen {
		u := newUpdate()
		u.admit(br, &st, ls.id, req.Holder, ls.exp(), wallNow.UnixMilli())
		u.ttl(ls.exp())
		if nv, err := l.write(ctx, req.Key, u, nil); errors.Is(err, errCondition) && nv.breakers[br.Name].probe != ls.id {
			l.stats.circuitOpen.Add(1)
			return nil, &CircuitOpenError{Name: br.Name, HalfOpen: true, RetryAfter: 50 * time.Millisecond}
		} else if err != nil && !errors.Is(err, errCondition) {
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
	if !ls.probe && (o == Abandoned || o == Success && len(ls.failsSeen) == 0) {
		l.stats.released.Add(1)
		return NoTransition, nil
	}
	u := newUpdate()
	u.ttl(l.clock().UnixMilli())
	if !ls.probe && o == Success {
		// The failures it saw, and no later ones: this write has no
		// condition, so a copy of it may land after newer failures.
		fp := u.path(br.attrs().failed)
		for _, f := range ls.failsSeen {
			u.del(fp, f)
		}
	} else {
		u.outcome(br, ls.id, ls.label, ls.probe, o, l.clock())
		if ls.probe {
			// The breaker closes, or is half-open again: the tickets it
			// held back may rank otherwise, as when a place frees.
			u.count(u.path(FreedAttr), 1)
		}
	}
	unsure := false
	v, err := l.write(ctx, ls.key, u, func() { unsure = true })
	if errors.Is(err, errCondition) {
		// Only a probe's write has a condition: it is no longer the probe
		// (its lease expired and another call took over), or an earlier
		// attempt of this write, whose outcome was unknown, landed.
		if unsure && v.breakers[br.Name].probe != ls.id && time.Now().Before(ls.CallDeadline) {
			err = nil
		} else {
			return NoTransition, ErrNotHeld
		}
	}
	if err != nil {
		return NoTransition, err
	}
	l.stats.released.Add(1)
	tr := verdict(ls.probe, o)
	if !ls.probe && o == Failure {
		tr, err = l.open(ctx, ls.key, br, v)
	}
	if tr != NoTransition && ls.probe {
		l.stats.transitions.Add(1)
	}
	return tr, err
}

// BreakerStatus is a breaker as an item shows it, for people and tools.
type BreakerStatus struct {
	// Name is the breaker's (the tool's) name.
	Name string `json:"name"`
	// State is "closed", "open", "half-open" (the next call will be the
	// probe) or "probing" (a probe is running).
	State string `json:"state"`
	// Failures is the count of consecutive failures, and Principals the
	// principals whose calls they were.
	Failures   int      `json:"failures"`
	Principals []string `json:"principals,omitempty"`
	// OpenUntil is when an open breaker lets a probe through.
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// Probe and ProbeExpiry name the running probe's lease.
	Probe       string     `json:"probe,omitempty"`
	ProbeExpiry *time.Time `json:"probe_expiry,omitempty"`
	// OpenFor lists the principals it is open for alone, with when each
	// may call again.
	OpenFor map[string]time.Time `json:"open_for,omitempty"`
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
	ms := now.UnixMilli()
	var out []BreakerStatus
	for _, name := range slices.Sorted(maps.Keys(names)) {
		st := parseBreaker(item, name)
		s := BreakerStatus{Name: name, Failures: len(st.failed), Principals: st.principals()}
		switch st.phase(ms) {
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
		for label, until := range st.own {
			if until >= ms {
				if s.OpenFor == nil {
					s.OpenFor = map[string]time.Time{}
				}
				s.OpenFor[label] = time.UnixMilli(until)
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b BreakerStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
