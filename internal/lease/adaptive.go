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
// limit between Min and the request's Cap (the ceiling), moved by the
// releases of calls from what the upstream shows of its load — AIMD with a
// latency signal, in rounds, on evidence no single principal can make up
// for the others (see Adaptive limit in the package doc). Nothing probes
// by shedding traffic, and failures never count as successes, so steady
// timeouts drive the limit to Min.
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
	// LimitAtAttr is when it last moved (Unix ms) and LimitWhyAttr why:
	// for people only.
	LimitAtAttr  = "limit_at"
	LimitWhyAttr = "limit_why"
	// BaseAttrPrefix prefixes a principal's latency baseline of a tool
	// (ms): "base:<label>/<tool>".
	BaseAttrPrefix = "base:"
	// RatioAttr is how much slower than their baselines calls lately were,
	// in thousandths: a running mean over about 8 calls.
	RatioAttr = "latency_ratio"
)

// Tolerance is how much slower than its baseline a call may be before it
// is down evidence; MaxBaselines bounds the baselines in one item (a call
// without one is evidence by its outcome only).
const (
	Tolerance    = 1.5
	MaxBaselines = 32
)

// limitState is the adaptive limit as a view shows it.
type limitState struct {
	limit, round, ok, cut, at, ratio int64
	sig, why                         string
	bases                            map[string]int64
}

// read reads attr into s, reporting whether it is one of its.
func (s *limitState) read(attr string, n int64, str string) bool {
	nums := map[string]*int64{LimitAttr: &s.limit, LimitRoundAttr: &s.round, LimitOKAttr: &s.ok, LimitCutAttr: &s.cut, LimitAtAttr: &s.at, RatioAttr: &s.ratio}
	strs := map[string]*string{LimitSigAttr: &s.sig, LimitWhyAttr: &s.why}
	base, isBase := strings.CutPrefix(attr, BaseAttrPrefix)
	switch {
	case nums[attr] != nil:
		*nums[attr] = n
	case strs[attr] != nil:
		*strs[attr] = str
	case isBase:
		s.bases[base] = n
	default:
		return false
	}
	return true
}

func isLimitAttr(attr string) bool { return (&limitState{bases: map[string]int64{}}).read(attr, 0, "") }

// capIn is the request's cap as v shows it: its Cap, or with Adaptive the
// item's limit within [Min, Cap] (Min when there is none).
func (r *Request) capIn(v *view) int {
	if r.Adaptive == nil || r.Cap <= 0 {
		return r.Cap
	}
	floor, lim := int64(r.Adaptive.floor(r.Cap)), int64(0)
	if v != nil {
		lim = v.limit // none (0) or below the floor: the floor, at least 1
	}
	return int(min(max(lim, floor), int64(r.Cap)))
}

// floor is the lowest the limit goes under ceiling.
func (ad *Adaptive) floor(ceiling int) int { return min(max(ad.Min, 1), ceiling) }

// capConds conditions a take on room under the key's cap for it and the
// callers ahead: the cap (or limit) as seen, or with no view as stored.
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

// adapt adds to u the evidence the lease's call gives the adaptive limit
// as v shows it: its baseline and the ratio moved, the round's up or down
// evidence counted, or the limit moved (conditioned on the round).
func (ls *Lease) adapt(u *update, v *view, o Outcome, took time.Duration, now int64) (moved bool) {
	ad := ls.req.Adaptive
	if ad == nil || v == nil {
		return false
	}
	lim := int64(ls.req.capIn(v))
	floor := int64(ad.floor(ls.req.Cap))
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
	baseKey := ls.req.Holder + "/" + ls.req.Tool
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
		what = fmt.Sprintf("a call took %.1f × its baseline (%s: %d ms)", float64(ms)/float64(base), ls.req.Tool, base)
	}
	if o == Success && ms > 0 {
		quiet := int64(max(ls.InFlight, v.liveLeases(now))) <= max(1, lim/2)
		first := ms
		if others := v.basesOf(ls.req.Tool); len(others) > 0 {
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
	if ls.round != v.round {
		return false // no evidence of the limit as it is now
	}
	if what != "" {
		switch {
		case lim <= floor:
			return false
		case v.sig == "":
			// The round's first down evidence: recorded for the next to act on.
			sp := u.path(LimitSigAttr)
			u.cond(round(), "attribute_not_exists("+sp+")")
			u.set(sp, u.str(ls.req.Holder))
			return false
		case v.sig == ls.req.Holder && !v.alone(ls.req.Holder):
			return false // one principal's evidence alone
		case v.sig == ls.req.Holder:
			// Alone on the key, and conditioned so.
			u.aloneConds(v, ls.req.Holder)
		}
		// limit × ½, or for latency limit × max(½, Tolerance / ratio).
		to := lim / 2
		if slow {
			to = int64(math.Floor(float64(lim) * max(0.5, Tolerance*1000/float64(ratio))))
		}
		to = max(floor, min(lim-1, to))
		u.cond(u.path(LimitSigAttr) + " = " + u.str(v.sig))
		return move(to, fmt.Sprintf("down %d→%d: %s", lim, to, what))
	}
	if o != Success || !known || ls.InFlight < int(lim) || lim >= int64(ls.req.Cap) || float64(ms) > Tolerance*float64(base) {
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

// basesOf are the baselines of tool v shows, every principal's, sorted.
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

// idleBase is the first baseline whose principal holds no live lease and
// no ticket ("": none).
func (v *view) idleBase(now int64) string {
	for _, k := range slices.Sorted(maps.Keys(v.bases)) {
		label, _, _ := strings.Cut(k, "/")
		if v.liveIn(now, v.sets[PrincipalAttr(label)]) == 0 && len(v.sets[WaitingAttr(label)]) == 0 {
			return k
		}
	}
	return ""
}

// alone: every lease and ticket v shows (lapsed or not) is label's.
func (v *view) alone(label string) bool {
	return len(v.leases) == len(v.sets[PrincipalAttr(label)]) && len(v.halves) == 0 &&
		!slices.ContainsFunc(v.queue, func(t *ticket) bool { return t.label != label })
}

// aloneConds conditions u on the counts of leases and tickets v shows,
// all principal label's, which another principal's would change.
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
