package lease

import (
	"fmt"
	"time"
)

// Rate is a request-rate limit: a bucket of PerMinute tokens refilled at
// PerMinute a minute, kept as its GCRA theoretical arrival time (when it
// would be full again; see Buckets in the package doc).
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
// up to a whole ms, so a bucket never admits more than PerMinute a minute
// beyond its burst: one that does not divide 60 000 sustains
// 60 000/interval a minute (under 2 % less up to 1,000 a minute). One an
// older gateway wrote with the interval rounded down reads, once, up to
// (PerMinute-1) × (1 - ⌊60 000/PerMinute⌋/interval) tokens fuller.
func (r Rate) interval() int64 {
	n := int64(max(r.PerMinute, 1))
	return (60_000 + n - 1) / n
}

// tolerance is how far the arrival time may run ahead of now while a token
// is left: the burst, PerMinute-1 intervals.
func (r Rate) tolerance() int64 { return int64(r.PerMinute-1) * r.interval() }

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

// charge takes one token from each bucket of rs at now, leaving keep[name]
// more for the callers whose turn comes first, conditioned on now only
// (see Buckets in the package doc), v the buckets as seen (nil: not
// seen), which chooses the form of the charge.
func (u *update) charge(rs []Rate, v *view, now int64, keep map[string]int) {
	for _, r := range rs {
		p := u.path(RateAttr(r.Name))
		var tat int64
		if v != nil {
			tat = v.rates[RateAttr(r.Name)]
		}
		// A bucket seen full holds PerMinute tokens: the full form,
		// conditioned on the time alone, only while keep leaves one.
		if tat >= now || keep[r.Name] >= r.PerMinute {
			u.cond(p+" >= "+u.num(now), p+" <= "+u.num(now+r.tolerance()-int64(keep[r.Name])*r.interval()))
			u.set(p, p+" + "+u.num(r.interval()))
			continue
		}
		u.cond(orAbsent(p, p+" < "+u.num(now)))
		u.set(p, u.num(now+r.interval()))
	}
}

// holds conditions the write on bucket r holding k tokens or more at now,
// or on unless (a condition) when that is not "".
func (u *update) holds(r Rate, now int64, k int, unless string) {
	p := u.path(RateAttr(r.Name))
	c := orAbsent(p, p+" <= "+u.num(now+r.tolerance()-int64(k-1)*r.interval()))
	if unless != "" {
		c = "(" + c + " OR " + unless + ")"
	}
	u.cond(c)
}

// charged is what the answer to a call's own charge showed: the arrival
// times it left its buckets at, and the refunds landed until then.
type charged struct {
	tats    map[string]int64
	refunds int64
}

// chargedIn is what v, the answer to a call's own charge, shows of rs.
func chargedIn(v *view, rs []Rate) *charged {
	if v == nil || len(rs) == 0 {
		return nil
	}
	c := &charged{tats: make(map[string]int64, len(rs)), refunds: v.refunds}
	for _, r := range rs {
		c.tats[r.Name] = v.rates[RateAttr(r.Name)]
	}
	return c
}

// refund gives back, at now, what may still be to come of the token each
// of rs gave a call never made, c its charge (nil: not known, nothing
// given: a token may be lost, never given twice), v the item as seen. Its
// charge left the bucket at c.tats[name]; each refund landed since may
// have moved that back by up to an interval (conditioned on the count as
// seen): so min(interval, that less now), none once the bucket may have
// regained it with time. It reports whether it gave any, and then counts
// itself (a bucket purged meanwhile was full, and stays so).
func (u *update) refund(rs []Rate, c *charged, v *view, now int64) bool {
	if c == nil {
		return false
	}
	since, gave := max(v.refunds-c.refunds, 0), false
	for _, r := range rs {
		back := min(r.interval(), c.tats[r.Name]-since*r.interval()-now)
		if back <= 0 {
			continue
		}
		p := u.path(RateAttr(r.Name))
		u.set(p, "if_not_exists("+p+", "+u.num(0)+") - "+u.num(back))
		gave = true
	}
	if gave {
		p := u.path(RefundsAttr)
		u.cond(u.eqOrAbsent(p, v.refunds))
		u.count(p, 1)
	}
	return gave
}

// RateLimitedError means the bucket named Name held no token for the
// call; RetryAfter is when it will hold one.
type RateLimitedError struct {
	Name       string
	PerMinute  int
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("lease: rate limit %s of %d a minute reached; a token in %v", e.Name, e.PerMinute, e.RetryAfter.Round(time.Millisecond))
}

// rateLimited is the refusal of a call whose buckets, as v shows them at
// now, lack a token (the longest wait), leaving keep[name] tokens of a
// bucket to the callers before it (nil: none); nil when each holds one.
func rateLimited(v *view, rates []Rate, now int64, keep map[string]int) *RateLimitedError {
	var worst *RateLimitedError
	for _, r := range rates {
		tat := v.rates[RateAttr(r.Name)]
		if k := keep[r.Name]; k > 0 {
			tat = max(tat, now) + int64(k)*r.interval()
		}
		// The wait until the bucket, at arrival time tat, holds a token.
		w := time.Duration(max(tat-r.tolerance()-now, 0)) * time.Millisecond
		if w > 0 && (worst == nil || w > worst.RetryAfter) {
			worst = &RateLimitedError{Name: r.Name, PerMinute: r.PerMinute, RetryAfter: w}
		}
	}
	return worst
}
