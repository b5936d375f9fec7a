package lease

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// asker is the caller judging whose turn it is: its ticket's id, or a
// newcomer's (number +∞), with what it needs of a place.
type asker struct {
	id, label, tool  string
	toolCap, toolRPM int
	// breaker is its breaker's name, "" if it has none.
	breaker string
	// rates are its own buckets (its request's).
	rates []Rate
	// nothing: its call holds nothing.
	nothing bool
}

// rules are the key's limits that apply to every caller alike, as the
// asker's request gives them.
type rules struct {
	// cap is the key's cap as the view shows it (the adaptive limit, with
	// Adaptive); 0: none.
	cap, principalCap int
	// serverRPM and principalRPM are the server's and each principal's
	// bucket, a minute (0: none).
	serverRPM, principalRPM int
}

// handout is whose turn it is, from one walk over a view.
type handout struct {
	// served: a place goes to the asker; probes are the gate entries it
	// is the probe of.
	served bool
	probes []gateRef
	// ahead are the tickets handed a place before the asker.
	ahead []*ticket
	// passed: a live ticket numbered before the asker got no place (it
	// could not use one); read only by a take, so only with an asker.
	passed bool
}

// candidate is one caller in a walk; rates are the buckets it takes a
// token from: the asker's own, or those a ticket's principal and tool imply.
type candidate struct {
	t     *ticket
	me    bool
	done  bool
	rates []Rate
}

// walk hands the places free in v at now, one by one, to the tickets
// waiting not in skip and me (nil: none), in the order of Whose turn in
// the package doc.
func (v *view) walk(now int64, me *asker, r rules, skip map[string]bool) handout {
	var cands []*candidate
	mine := int64(math.MaxInt64)
	if me != nil {
		c := &candidate{t: v.mine(me), me: true, rates: me.rates}
		cands, mine = append(cands, c), c.t.n
	}
	for _, t := range v.queue {
		if (me == nil || t.id != me.id) && v.waits(t, now) && !skip[t.id] {
			cands = append(cands, &candidate{t: t, rates: r.buckets(t)})
		}
	}
	room := math.MaxInt
	if r.cap > 0 {
		room = r.cap - v.liveLeases(now)
	}
	held := v.held(now)
	toolUsed, tokensUsed := map[string]int{}, map[string]int{}
	probing := map[gateRef]bool{}
	fits := func(c *candidate) (bool, []gateRef) {
		t := c.t
		toolFull := t.toolCap > 0 && v.liveIn(now, v.sets[ToolAttr(t.tool)])+toolUsed[t.tool] >= t.toolCap
		empty := func(b Rate) bool { return b.Tokens(v.rates[RateAttr(b.Name)], now)-tokensUsed[b.Name] < 1 }
		if toolFull || r.principalCap > 0 && held[t.label] >= r.principalCap || slices.ContainsFunc(c.rates, empty) {
			return false, nil // its tool's or its principal's cap, or one of its buckets
		}
		breaker := t.tool
		if c.me {
			breaker = me.breaker
		}
		probes, err := v.admits(t.tool, breaker, t.label, now, probing)
		return err == nil, probes
	}
	var h handout
	for room > 0 {
		var best *candidate
		var bestProbes []gateRef
		for _, c := range cands {
			if c.done {
				continue
			}
			if ok, probes := fits(c); ok && (best == nil || ranks(c.t, best.t, held) < 0) {
				best, bestProbes = c, probes
			}
		}
		if best == nil {
			break
		}
		best.done = true
		room--
		t := best.t
		if !t.nothing {
			held[t.label]++ // a call holding nothing gives its principal no place
		}
		if t.toolCap > 0 {
			toolUsed[t.tool]++
		}
		for _, b := range best.rates {
			tokensUsed[b.Name]++
		}
		for _, p := range bestProbes {
			probing[p] = true
		}
		if best.me {
			h.served, h.probes = true, bestProbes
			break
		}
		h.ahead = append(h.ahead, t)
	}
	h.passed = slices.ContainsFunc(cands, func(c *candidate) bool { return !c.me && !c.done && c.t.n < mine })
	return h
}

// buckets are the buckets a caller of ticket t takes a token from.
func (r rules) buckets(t *ticket) []Rate {
	var out []Rate
	if r.serverRPM > 0 {
		out = append(out, Rate{Name: "server", PerMinute: r.serverRPM})
	}
	if r.principalRPM > 0 {
		out = append(out, Rate{Name: "principal:" + t.label, PerMinute: r.principalRPM})
	}
	if t.toolRPM > 0 {
		out = append(out, Rate{Name: "tool:" + t.tool, PerMinute: t.toolRPM})
	}
	return out
}

// tokens counts, for each bucket, the tickets of ahead that take a token
// from it.
func (r rules) tokens(ahead []*ticket) map[string]int {
	n := map[string]int{}
	for _, t := range ahead {
		for _, b := range r.buckets(t) {
			n[b.Name]++
		}
	}
	return n
}

// rules are the rules every caller of the key shares, as r and v give
// them: the cap, and the server's and the per-principal bucket.
func (r *Request) rules(v *view) rules {
	out := rules{cap: r.capIn(v), principalCap: r.PrincipalCap}
	for _, rt := range r.Rates {
		switch {
		case rt.Name == "server":
			out.serverRPM = rt.PerMinute
		case strings.HasPrefix(rt.Name, "principal:"):
			out.principalRPM = rt.PerMinute
		}
	}
	return out
}

// ranks orders two waiting callers: the one whose principal holds fewer
// places first, then the lower number.
func ranks(a, b *ticket, held map[string]int) int {
	return cmp.Or(cmp.Compare(held[a.label], held[b.label]), cmp.Compare(a.n, b.n), strings.Compare(a.id, b.id))
}

// mine is me's ticket as a walk counts it: its number in v (+∞ for a
// newcomer), with what me needs of a place.
func (v *view) mine(me *asker) *ticket {
	t := &ticket{id: me.id, label: me.label, n: math.MaxInt64, tool: me.tool, toolCap: me.toolCap, toolRPM: me.toolRPM, nothing: me.nothing}
	if q := v.ticketFor(me.id); q != nil {
		t.n, t.deadline = q.n, q.deadline
	}
	return t
}

// before counts the tickets waiting that come before me in the order of
// walk, as the item stands: where me is in the queue.
func (v *view) before(now int64, me *asker) int { return v.beforeIf(now, me, nil) }

// beforeIf is before, counting only the tickets keep holds of (nil: all).
func (v *view) beforeIf(now int64, me *asker, keep func(*ticket) bool) int {
	held, mine := v.held(now), v.mine(me)
	return countIf(v.queue, func(t *ticket) bool {
		return t.id != me.id && v.waits(t, now) && ranks(t, mine, held) < 0 && (keep == nil || keep(t))
	})
}
