package lease

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Adaptive lets the fleet find a key's limit for itself: the item keeps a
// limit between Min and the request's Cap (the ceiling), which the
// releases of the calls move from what the upstream shows of its load.
// Every caller uses the same limit, so the fleet adapts as one.
//
// The controller is AIMD with a latency gradient, as TCP's congestion
// avoidance and Netflix's Gradient2 are:
//
//   - Latency: each tool has a baseline, its calls' mean latency while few
//     calls were in flight; every success moves a running mean of how
//     much slower than their tools' baselines calls are (over about 8
//     calls, so one slow call among quick ones is not a signal).
//   - Increase: while that mean is within Tolerance, a success within it
//     of a call granted since the limit last moved, while the limit was
//     binding (the calls in flight had reached it), counts towards the
//     next step; after twice as many such
//     successes as the limit, it goes up by one (about one step per two
//     rounds of calls); back to the limit it was last brought down from,
//     only after eight times as many, so that the knee is probed from
//     below a quarter as often as it is found. A server that never fills its limit never sees it
//     grow: an idle server's limit does not inflate.
//   - Decrease on latency: when the mean passes Tolerance, the limit comes
//     down in proportion, limit × max(½, Tolerance / mean), at least by
//     one, and the mean starts again from 1.
//   - Decrease on back-pressure and failures: a 429, a 503, a JSON-RPC
//     rate-limit error, a timeout or an unreachable upstream halves it.
//   - Once per round: a call granted before the limit last moved says
//     nothing about the limit as it is now, and cannot move it down; so a
//     burst of failures of calls already in flight halves the limit once,
//     not once per call.
//
// Baselines are kept for at most MaxBaselines tools; the calls of others
// move the limit by their outcomes only. A baseline moves (by an eighth of
// the difference) only with calls that ran with at most half the limit in
// flight, when they were granted and as they ended. So sustained overload,
// which keeps the limit full, never moves it (it cannot drift into taking
// the degradation for normal), while an upstream that became slower for
// every call is learnt at the low concurrency the decreases lead to.
// Nothing probes by shedding traffic: the limit only moves with calls that
// were made anyway. Failures never count as successes, so steady timeouts
// drive the limit to Min, never to the ceiling.
//
// The limit moves in the release writes the calls make anyway (their
// outcome and latency are known there), each move conditioned on the
// limit the releaser saw: when two releases race, one moves it, and the
// other gives its place back without moving it.
type Adaptive struct {
	// Min is the lowest the limit goes (at least 1, at most the ceiling).
	Min int
}

// Attributes of a key's adaptive limit and of its pause.
const (
	// LimitAttr is the adaptive limit; absent means Min.
	LimitAttr = "limit"
	// LimitOKAttr counts successes at the limit since it last moved.
	LimitOKAttr = "limit_ok"
	// LimitAtAttr is when the limit last moved (Unix ms); LimitWhyAttr why.
	LimitAtAttr  = "limit_at"
	LimitWhyAttr = "limit_why"
	// BaseAttrPrefix prefixes a tool's latency baseline in ms: "base:<tool>".
	BaseAttrPrefix = "base:"
	// LimitCutAttr is the limit it was last brought down from.
	LimitCutAttr = "limit_cut"
	// RatioAttr is how much slower than their tools' baselines calls have
	// lately been, in thousandths: a running mean over about 8 calls.
	RatioAttr = "latency_ratio"
	// PausedAttr is when calls may start again after the upstream asked
	// for a pause (Unix ms): no place is taken before it.
	PausedAttr = "paused_until"
)

// Tolerance is how much slower than its baseline a call may be before the
// limit comes down.
const Tolerance = 1.5

// MaxBaselines bounds the tools with a latency baseline in one item; the
// calls of others move the limit by their outcomes only.
const MaxBaselines = 32

// MaxPause bounds how long one answer may pause a key.
const MaxPause = 5 * time.Minute

// limitState is the adaptive limit and pause as a view shows them.
type limitState struct {
	limit, ok, at, paused int64
	ratio, cut            int64
	why                   string
	bases                 map[string]int64
}

// readLimit reads attr into s, reporting whether it was one of its.
func (s *limitState) read(attr string, n int64, str string) bool {
	switch {
	case attr == LimitAttr:
		s.limit = n
	case attr == LimitOKAttr:
		s.ok = n
	case attr == LimitAtAttr:
		s.at = n
	case attr == LimitWhyAttr:
		s.why = str
	case attr == RatioAttr:
		s.ratio = n
	case attr == LimitCutAttr:
		s.cut = n
	case attr == PausedAttr:
		s.paused = n
	case strings.HasPrefix(attr, BaseAttrPrefix):
		s.bases[strings.TrimPrefix(attr, BaseAttrPrefix)] = n
	default:
		return false
	}
	return true
}

func isLimitAttr(attr string) bool {
	switch attr {
	case LimitAttr, LimitOKAttr, LimitAtAttr, LimitWhyAttr, PausedAttr, RatioAttr, LimitCutAttr:
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

// notPaused adds to u the condition that the key is not paused at now.
func notPaused(u *update, now int64) {
	p := u.path(PausedAttr)
	u.cond("(attribute_not_exists(" + p + ") OR " + p + " <= " + u.num(now) + ")")
}

// PauseFor asks that no call of the lease's key start for d (at most
// MaxPause): the upstream answered the call with a Retry-After. The
// release writes it, for the whole fleet.
func (ls *Lease) PauseFor(d time.Duration) {
	if d <= 0 {
		return
	}
	ls.pauseUntil = ls.l.clock().Add(min(d, MaxPause)).UnixMilli()
}

// pause adds the lease's pause to u, unless v shows a later one.
func (ls *Lease) pause(u *update, v *view) {
	if ls.pauseUntil > 0 && (v == nil || v.paused < ls.pauseUntil) {
		// Never shorten a pause another release wrote meanwhile.
		pp := u.path(PausedAttr)
		u.cond("(attribute_not_exists(" + pp + ") OR " + pp + " < " + u.num(ls.pauseUntil) + ")")
		u.set(pp, u.num(ls.pauseUntil))
	}
}

// adapt adds to u the move of the adaptive limit that the call's outcome
// and latency call for, as v shows the limit, and reports whether it made
// one (conditioned on the limit as seen).
func (ls *Lease) adapt(u *update, v *view, o Outcome, took time.Duration, now int64) bool {
	ad := ls.adaptive
	if ad == nil || v == nil {
		return false
	}
	lim := int64(capIn(ls.ceiling, ad, v))
	floor := int64(ad.floor(ls.ceiling))
	ceiling := int64(ls.ceiling)
	fresh := ls.grantMS > v.at // granted since the limit last moved
	move := func(to int64, why string) bool {
		if to < lim {
			u.set(u.path(LimitCutAttr), u.num(lim))
		}
		lp := u.path(LimitAttr)
		u.cond(u.eqOrAbsent(lp, v.limit))
		u.set(lp, u.num(to))
		u.set(u.path(LimitOKAttr), u.num(0))
		u.set(u.path(LimitAtAttr), u.num(now))
		u.set(u.path(LimitWhyAttr), u.str(why))
		u.set(u.path(RatioAttr), u.num(1000))
		return true
	}
	switch o {
	case Failure, Overloaded:
		if fresh && lim > floor {
			what := "a failure (timeout, unreachable, 5xx)"
			if o == Overloaded {
				what = "back-pressure (429, 503 or a rate-limit error)"
			}
			return move(max(floor, min(lim-1, lim/2)), fmt.Sprintf("down %d→%d: %s", lim, max(floor, min(lim-1, lim/2)), what))
		}
		return false
	case Success:
	default:
		return false
	}
	ms := took.Milliseconds()
	if ms <= 0 {
		return false
	}
	base, known := v.bases[ls.toolName]
	quiet := int64(max(ls.InFlight, v.live(now, nil, true))) <= max(1, lim/2)
	switch {
	case !known && len(v.bases) < MaxBaselines:
		u.set(u.path(BaseAttrPrefix+ls.toolName), u.num(ms))
	case known && quiet:
		// Few calls in flight when it was granted and as it ends: its
		// latency is the upstream's own.
		u.set(u.path(BaseAttrPrefix+ls.toolName), u.num(max(base+(ms-base)/8, 1)))
	}
	if !known || base <= 0 {
		return false
	}
	ratio := v.ratio
	if ratio <= 0 {
		ratio = 1000
	}
	ratio += (ms*1000/base - ratio) / 8
	if ratio > Tolerance*1000 {
		if !fresh || lim <= floor {
			u.set(u.path(RatioAttr), u.num(ratio))
			return false
		}
		to := int64(math.Floor(float64(lim) * max(0.5, Tolerance*1000/float64(ratio))))
		to = max(floor, min(lim-1, to))
		return move(to, fmt.Sprintf("down %d→%d: calls took %.1f × their baseline (%s: %d ms)", lim, to, float64(ratio)/1000, ls.toolName, base))
	}
	// Evidence for a higher limit: a call granted at this limit, which
	// filled it, and was itself within the tolerance.
	binding := fresh && int64(ls.InFlight) >= lim && lim < ceiling && float64(ms) <= Tolerance*float64(base)
	need := 2 * lim
	if lim+1 == v.cut {
		need = 8 * lim // the limit it was last brought down from: try it again less often
	}
	if binding && v.ok+1 >= need {
		return move(lim+1, fmt.Sprintf("up %d→%d: %d calls at the limit within %.1f × their baseline", lim, lim+1, need, Tolerance))
	}
	u.set(u.path(RatioAttr), u.num(ratio))
	if binding {
		u.count(u.path(LimitOKAttr), 1)
	}
	return false
}

// pausedRefusal is the refusal of a call that takes no place while v shows
// the key paused at now; nil when it is not.
func pausedRefusal(v *view, now int64) error {
	if v == nil || v.paused <= now {
		return nil
	}
	return &FullError{Reason: Paused, What: "server", RetryAfter: time.Duration(v.paused-now) * time.Millisecond}
}
