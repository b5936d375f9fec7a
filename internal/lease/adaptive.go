package lease

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Adaptive lets the fleet find a key's limit for itself: the item keeps a
// limit between Min and the request's Cap (the ceiling), which the
// releases of the calls move from what the upstream shows of its load.
// Every caller uses the same limit, so the fleet adapts as one. It is AIMD
// with a latency signal, as TCP's congestion avoidance and Netflix's
// Gradient2 are, moved in rounds and only on evidence no single principal
// can make up for the others:
//
//   - Rounds: limit_round counts the limit's moves. A lease knows the round
//     it was granted in (from its take's answer), and only a lease of the
//     current round is evidence, each move conditioned on the round: a
//     burst of failures of calls already in flight moves the limit once,
//     whatever the instances' clocks say.
//   - Latency: each principal has a baseline for each tool it calls, the
//     mean latency of its calls of the tool while few calls were in
//     flight — one principal's quick calls (an error answered at once, a
//     small argument) make nobody else's usual calls look slow; every
//     success moves a running mean of how much slower than their
//     baselines calls are (latency_ratio, over about 8 calls, so one slow
//     call among quick ones is not a signal).
//   - Down evidence: a failure (timeout, unreachable, 5xx), a push-back
//     (429, 503, a rate-limit error), or a success slower than Tolerance ×
//     its baseline (its principal.s, of its tool) while the running mean is too: a principal whose
//     own calls are slow (a tarpit argument) raises the mean, but the
//     others' quick calls are no evidence. The first in a round is
//     recorded (limit_sig, its principal's label); the limit comes down on
//     the next one of another principal, or of the same when every lease
//     and ticket of the item is its principal's (and the move is
//     conditioned so): to half for failures and
//     push-back, in proportion to the mean for latency (limit × max(½,
//     Tolerance / mean)), at least by one, never below Min.
//   - Up evidence: a success within Tolerance of its baseline of a call
//     granted while the limit was binding (the calls in flight had reached
//     it). After twice as many as the limit in a round it goes up by one;
//     back to the limit it was last brought down from (limit_cut) only
//     after eight times as many, so the knee is probed from below a
//     quarter as often as it is found. A server that never fills its
//     limit never sees it grow.
//   - Baselines: a principal's mean latency of a tool's calls while few
//     calls were in flight (at most half the limit, when granted and as
//     it ended), moved by an eighth of the difference; a principal's first
//     is the median of the tool's others (its own first call's latency
//     when there are none); at most MaxBaselines in the item: a new one
//     takes the place of one of a principal holding no lease and no
//     ticket, or is not kept.
//     Sustained overload, which keeps the limit full, never moves them.
//
// Nothing probes by shedding traffic: the limit only moves with calls
// that were made anyway. Failures never count as successes, so steady
// timeouts drive the limit to Min, never to the ceiling.
type Adaptive struct {
	// Min is the lowest the limit goes (at least 1, at most the ceiling).
	Min int
}

// Attributes of a key's adaptive limit.
const (
	// LimitAttr is the adaptive limit; absent means Min.
	LimitAttr = "limit"
	// LimitRoundAttr counts the limit's moves.
	LimitRoundAttr = "limit_round"
	// LimitOKAttr counts the up evidence of the round.
	LimitOKAttr = "limit_ok"
	// LimitSigAttr is the label of the principal whose down evidence the
	// round has seen.
	LimitSigAttr = "limit_sig"
	// LimitCutAttr is the limit it was last brought down from.
	LimitCutAttr = "limit_cut"
	// LimitAtAttr is when the limit last moved (Unix ms) and LimitWhyAttr
	// why: for people; the protocol never reads them.
	LimitAtAttr  = "limit_at"
	LimitWhyAttr = "limit_why"
	// BaseAttrPrefix prefixes a principal's latency baseline of a tool in
	// ms: "base:<label>/<tool>" (a label has no "/").
	BaseAttrPrefix = "base:"
	// RatioAttr is how much slower than their tools' baselines calls have
	// lately been, in thousandths: a running mean over about 8 calls.
	RatioAttr = "latency_ratio"
)

// Tolerance is how much slower than its baseline a call may be before it
// is down evidence.
const Tolerance = 1.5

// MaxBaselines bounds the latency baselines (a principal's, of a tool) in
// one item; calls without one are evidence by their outcomes only.
const MaxBaselines = 32

// limitState is the adaptive limit as a view shows it.
type limitState struct {
	limit, round, ok, cut, at, ratio int64
	sig, why                         string
	bases                            map[string]int64
}

// read reads attr into s, reporting whether it was one of its.
func (s *limitState) read(attr string, n int64, str string) bool {
	switch {
	case attr == LimitAttr:
		s.limit = n
	case attr == LimitRoundAttr:
		s.round = n
	case attr == LimitOKAttr:
		s.ok = n
	case attr == LimitCutAttr:
		s.cut = n
	case attr == LimitAtAttr:
		s.at = n
	case attr == RatioAttr:
		s.ratio = n
	case attr == LimitSigAttr:
		s.sig = str
	case attr == LimitWhyAttr:
		s.why = str
	case strings.HasPrefix(attr, BaseAttrPrefix):
		s.bases[strings.TrimPrefix(attr, BaseAttrPrefix)] = n
	default:
		return false
	}
	return true
}

func isLimitAttr(attr string) bool {
	switch attr {
	case LimitAttr, LimitRoundAttr, LimitOKAttr, LimitSigAttr, LimitCutAttr, LimitAtAttr, LimitWhyAttr, RatioAttr:
		return true
	}
	return strings.HasPrefix(attr, BaseAttrPrefix)
}

// capIn is the request's cap as v shows it: its Cap, or with Adaptive the
// item's limit within [Min, Cap] (Min when the item has none yet).
func (r *Request) capIn(v *view) int { return capIn(r.Cap, r.Adaptive, v) }

func capIn(ceiling int, ad *Adaptive, v *view) int {
	if ad == nil || ceiling <= 0 {
		return ceiling
	}
	floor := ad.floor(ceiling)
	lim := int64(floor)
	if v != nil && v.limit > 0 {
		lim = v.limit
	}
	return int(min(max(lim, int64(floor)), int64(ceiling)))
}

// floor is the lowest the limit goes under ceiling.
func (ad *Adaptive) floor(ceiling int) int { return min(max(ad.Min, 1), ceiling) }

// capConds adds to u the take's conditions on the key's cap: with a view,
// room for the callers ahead under the cap it shows (and, adaptive, the
// limit still as seen); without, room under the ceiling and the stored
// limit.
func (a *attempt) capConds(u *update, v *view, purgedLeases, ahead int) {
	if a.req.Cap <= 0 {
		return
	}
	size := "size(" + u.path(LeasesAttr) + ")"
	if a.req.Adaptive == nil || v != nil {
		u.cond(size + " < " + u.num(int64(a.req.capIn(v)+purgedLeases-ahead)))
		if a.req.Adaptive != nil {
			u.cond(u.eqOrAbsent(u.path(LimitAttr), v.limit))
		}
		return
	}
	floor := a.req.Adaptive.floor(a.req.Cap)
	u.cond(size+" < "+u.num(int64(a.req.Cap)), "("+size+" < "+u.num(int64(floor))+" OR "+size+" < "+u.path(LimitAttr)+")")
}

// adapt adds to u the evidence the lease's call gives the adaptive limit,
// as v shows it, and reports whether it moves the limit (conditioned on
// the round).
func (ls *Lease) adapt(u *update, v *view, o Outcome, took time.Duration, now int64) (moved bool) {
	ad := ls.adaptive
	if ad == nil || v == nil {
		return false
	}
	fresh := ls.round == v.round // else: no evidence of the limit as it is now
	lim := int64(capIn(ls.ceiling, ad, v))
	floor := int64(ad.floor(ls.ceiling))
	round := func() string { return u.eqOrAbsent(u.path(LimitRoundAttr), v.round) }
	move := func(to int64, why string) bool {
		u.cond(round(), u.eqOrAbsent(u.path(LimitAttr), v.limit))
		if to < lim {
			u.set(u.path(LimitCutAttr), u.num(lim))
		}
		u.set(u.path(LimitAttr), u.num(to))
		u.set(u.path(LimitRoundAttr), u.num(v.round+1))
		u.set(u.path(LimitOKAttr), u.num(0))
		u.remove(u.path(LimitSigAttr))
		u.set(u.path(LimitAtAttr), u.num(now))
		u.set(u.path(LimitWhyAttr), u.str(why))
		u.set(u.path(RatioAttr), u.num(1000))
		return true
	}
	ms := took.Milliseconds()
	baseKey := ls.label + "/" + ls.toolName
	base, known := v.bases[baseKey]
	ratio := v.ratio
	if ratio <= 0 {
		ratio = 1000
	}
	if o == Success && known && base > 0 && ms > 0 {
		ratio += (ms*1000/base - ratio) / 8
	}
	slow := o == Success && known && base > 0 && float64(ms) > Tolerance*float64(base) && float64(ratio) > Tolerance*1000
	var what string
	switch {
	case o == Failure:
		what = "a failure (timeout, unreachable, 5xx)"
	case o == Overloaded:
		what = "back-pressure (429, 503 or a rate-limit error)"
	case slow:
		what = fmt.Sprintf("a call took %.1f × its baseline (%s: %d ms)", float64(ms)/float64(base), ls.toolName, base)
	}
	if o == Success && ms > 0 {
		quiet := int64(max(ls.InFlight, v.liveLeases(now))) <= max(1, lim/2)
		first := ms
		if others := v.basesOf(ls.toolName); len(others) > 0 {
			first = others[len(others)/2] // the tool's baseline among the others
		}
		switch {
		case !known && len(v.bases) < MaxBaselines:
			u.set(u.path(BaseAttrPrefix+baseKey), u.num(first))
		case !known:
			if gone := v.idleBase(now); gone != "" {
				u.remove(u.path(BaseAttrPrefix + gone))
				u.set(u.path(BaseAttrPrefix+baseKey), u.num(first))
			}
		case quiet:
			u.set(u.path(BaseAttrPrefix+baseKey), u.num(max(base+(ms-base)/8, 1)))
		}
	}
	if ratio != max(v.ratio, 0) && !(v.ratio == 0 && ratio == 1000) {
		defer func() {
			if !moved { // a move starts it again
				u.set(u.path(RatioAttr), u.num(ratio))
			}
		}()
	}
	if !fresh {
		return false
	}
	if what != "" {
		switch {
		case lim <= floor:
			return false
		case v.sig == "":
			// The round's first down evidence: recorded, for another
			// principal's (or, alone on the key, its own next) to act on.
			sp := u.path(LimitSigAttr)
			u.cond(round(), "attribute_not_exists("+sp+")")
			u.set(sp, u.str(ls.label))
			return false
		case v.sig == ls.label && !v.alone(ls.label):
			return false // one principal's evidence alone
		case v.sig == ls.label:
			// Alone on the key as the item shows it, and conditioned so:
			// every lease and ticket of the item is its principal's.
			u.aloneConds(v, ls.label)
		}
		// Halved for failures and push-back; for latency, in proportion to
		// how much slower calls are: limit × max(½, Tolerance / ratio).
		to := lim / 2
		if slow {
			to = int64(math.Floor(float64(lim) * max(0.5, Tolerance*1000/float64(ratio))))
		}
		to = max(floor, min(lim-1, to))
		u.cond(u.path(LimitSigAttr) + " = " + u.str(v.sig))
		return move(to, fmt.Sprintf("down %d→%d: %s", lim, to, what))
	}
	if o != Success || !known || ls.InFlight < int(lim) || lim >= int64(ls.ceiling) || float64(ms) > Tolerance*float64(base) {
		return false
	}
	need := 2 * lim
	if lim+1 == v.cut {
		need = 8 * lim // the limit it was last brought down from: try it again less often
	}
	if v.ok+1 >= need {
		return move(lim+1, fmt.Sprintf("up %d→%d: %d calls at the limit within %.1f × their baseline", lim, lim+1, need, Tolerance))
	}
	u.cond(round())
	u.count(u.path(LimitOKAttr), 1)
	return false
}

// basesOf are the baselines of tool's calls v shows, of every principal,
// in order.
func (v *view) basesOf(tool string) []int64 {
	var out []int64
	for k, ms := range v.bases {
		if _, t, _ := strings.Cut(k, "/"); t == tool {
			out = append(out, ms)
		}
	}
	slices.Sort(out)
	return out
}

// idleBase is a baseline whose principal holds no live lease and has no
// ticket as v shows it, the first in order ("": none).
func (v *view) idleBase(now int64) string {
	for _, k := range slices.Sorted(maps.Keys(v.bases)) {
		label, _, _ := strings.Cut(k, "/")
		if v.liveIn(now, v.sets[PrincipalAttr(label)]) == 0 && len(v.sets[WaitingAttr(label)]) == 0 {
			return k
		}
	}
	return ""
}

// alone reports whether every lease and ticket v shows (lapsed or not) is
// principal label's.
func (v *view) alone(label string) bool {
	return len(v.leases) == len(v.sets[PrincipalAttr(label)]) && len(v.halves) == 0 &&
		!slices.ContainsFunc(v.queue, func(t *ticket) bool { return t.label != label })
}

// aloneConds conditions u on the item holding only principal label's
// leases and tickets, as v shows it (alone): the counts of each, which
// another principal's lease or ticket would change.
func (u *update) aloneConds(v *view, label string) {
	u.cond("size("+u.path(LeasesAttr)+") = "+u.num(int64(len(v.leases))),
		"size("+u.path(QueueAttr)+") = "+u.num(int64(v.tickets(false))),
		"size("+u.path(TasksAttr)+") = "+u.num(int64(v.tickets(true))))
	if n := len(v.sets[PrincipalAttr(label)]); n > 0 {
		u.cond("size(" + u.path(PrincipalAttr(label)) + ") = " + u.num(int64(n)))
	}
	if n := len(v.queue); n > 0 {
		u.cond("size(" + u.path(WaitingAttr(label)) + ") = " + u.num(int64(n)))
	}
}
