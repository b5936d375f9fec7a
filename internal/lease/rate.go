package lease

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Rate is a request-rate limit: a bucket of PerMinute tokens, refilled at
// PerMinute a minute (a burst of up to PerMinute calls, then one every
// 60/PerMinute seconds). It is kept as one number in the item, the
// bucket's theoretical arrival time (GCRA): the instant by which it would
// be full again. A call takes one token from each of its request's buckets
// in the write that admits it to the upstream (its take), so a call that
// waits pays when its turn comes, and a call refused before costs nothing.
type Rate struct {
	// Name tells the item's buckets apart: "server", "principal:<label>",
	// "tool:<name>", "key".
	Name string
	// PerMinute is the limit; it must be positive.
	PerMinute int
}

// RateAttrPrefix prefixes a bucket's attribute: "rate:<name>" holds its
// theoretical arrival time (Unix ms).
const RateAttrPrefix = "rate:"

// RateAttr is the attribute of the bucket named name.
func RateAttr(name string) string { return RateAttrPrefix + name }

// interval is the time one token stands for: 60 000/PerMinute ms rounded
// up to a whole ms, as the item keeps arrival times in whole ms. Rounded
// up, a bucket never admits more than PerMinute calls a minute beyond its
// burst (rounded down, a limit of 7,000 would sustain 7,500 a minute, and
// any limit above 30,000 one a ms). The cost: a limit that does not divide
// 60,000 sustains 60,000/interval a minute, less than PerMinute — under
// 2 % less up to 1,000 a minute, under 10 % up to 6,000, and any limit
// between 30,000 and 60,000 sustains 30,000 — while its burst stays
// PerMinute. An arrival time written with a rounded-down interval (by an
// older gateway still running during a deploy) reads as up to
// (PerMinute-1) × (1 - ⌊60 000/PerMinute⌋/interval) tokens fuller, once:
// 777 for 7,000 a minute, none where PerMinute divides 60,000.
func (r Rate) interval() int64 {
	n := int64(max(r.PerMinute, 1))
	return (60_000 + n - 1) / n
}

// tolerance is how far the arrival time may run ahead of now while a token
// is left: PerMinute-1 intervals, the burst.
func (r Rate) tolerance() int64 { return int64(r.PerMinute-1) * r.interval() }

// wait is how long until the bucket, at arrival time tat (0: none yet),
// holds a token at now: zero when it holds one.
func (r Rate) wait(tat, now int64) time.Duration {
	if d := tat - r.tolerance() - now; d > 0 {
		return time.Duration(d) * time.Millisecond
	}
	return 0
}

// Tokens is how many tokens the bucket at arrival time tat holds at now.
func (r Rate) Tokens(tat, now int64) int {
	if tat <= now {
		return r.PerMinute
	}
	if slack := now + r.tolerance() - tat; slack >= 0 {
		return int(slack/r.interval()) + 1
	}
	return 0
}

// charge adds to u the taking of one token from r at now, leaving keep
// more for the callers whose turn comes first. An arrival time known to be
// ahead of now (the bucket partly drained) is moved one interval on, on
// condition that it still is ahead and that the tokens are left;
// otherwise (the bucket full, or never used) it is set to now plus one
// interval, on condition that it is behind now or absent. No condition
// names a value another write just changed, only where it stands against
// now, so concurrent callers of a partly drained bucket do not fail each
// other; of callers that all found it full, the first moves it ahead of
// now, and each other's write fails once and is made again from the
// bucket its answer shows.
func (u *update) charge(r Rate, tat, now int64, keep int) {
	p := u.path(RateAttr(r.Name))
	if tat >= now {
		u.cond(p+" >= "+u.num(now), p+" <= "+u.num(now+r.tolerance()-int64(keep)*r.interval()))
		u.set(p, p+" + "+u.num(r.interval()))
		return
	}
	u.cond("(attribute_not_exists(" + p + ") OR " + p + " < " + u.num(now) + ")")
	u.set(p, u.num(now+r.interval()))
}

// refund adds to u the return of a token r gave a call that was not made.
// A bucket purged meanwhile was full, and stays so.
func (u *update) refund(r Rate) {
	p := u.path(RateAttr(r.Name))
	u.set(p, "if_not_exists("+p+", "+u.num(0)+") - "+u.num(r.interval()))
}

// RateLimitedError means a request-rate limit refused the call: no token
// was left in the bucket named Name.
type RateLimitedError struct {
	Name      string
	PerMinute int
	// RetryAfter is when the bucket will hold a token again.
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("lease: rate limit %s of %d a minute reached; a token in %v", e.Name, e.PerMinute, e.RetryAfter.Round(time.Millisecond))
}

// rateLimited is the refusal of a call whose buckets, as v shows them at
// now, lack a token; nil when each holds one.
func rateLimited(v *view, rates []Rate, now int64) *RateLimitedError {
	return rateLimitedKeeping(v, rates, now, nil)
}

// rateLimitedKeeping is rateLimited for a call that must leave keep[name]
// tokens of a bucket to callers before it.
func rateLimitedKeeping(v *view, rates []Rate, now int64, keep map[string]int) *RateLimitedError {
	var worst *RateLimitedError
	for _, r := range rates {
		tat := v.rates[RateAttr(r.Name)]
		if k := keep[r.Name]; k > 0 {
			tat = max(tat, now) + int64(k)*r.interval()
		}
		if w := r.wait(tat, now); w > 0 && (worst == nil || w > worst.RetryAfter) {
			worst = &RateLimitedError{Name: r.Name, PerMinute: r.PerMinute, RetryAfter: w}
		}
	}
	return worst
}

// idleBucket reports whether the bucket attribute attr, at arrival time
// tat, is full at now and a principal's, so that a purge may remove it:
// an absent bucket is a full one.
func idleBucket(attr string, tat, now int64) bool {
	return strings.HasPrefix(attr, RateAttrPrefix+"principal:") && tat < now
}

// validRates checks a request's buckets.
func validRates(rates []Rate) error {
	for i, r := range rates {
		if r.PerMinute <= 0 || r.Name == "" {
			return fmt.Errorf("lease: rate %q of %d a minute; want a name and a positive limit", r.Name, r.PerMinute)
		}
		if slices.ContainsFunc(rates[:i], func(o Rate) bool { return o.Name == r.Name }) {
			return fmt.Errorf("lease: rate %q twice", r.Name)
		}
	}
	return nil
}
