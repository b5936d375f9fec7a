package lease

import (
	"errors"
	"sync/atomic"
)

// Stats counts what a Limiter did since it was built.
type Stats struct {
	// Writes is every UpdateItem attempt sent (take, join, release, renew,
	// purge, breaker).
	Writes int64
	// FailedWrites is the writes whose condition failed (still billed).
	FailedWrites int64
	// Reads is every GetItem sent.
	Reads int64
	// Acquired and Released count granted and given-back leases.
	Acquired, Released int64
	// Tickets counts callers that joined the queue.
	Tickets int64
	// Purged counts the writes made only to purge stale entries.
	Purged int64
	// Shed counts requests refused at once: a cap full, callers waiting
	// ahead, or the queue full.
	Shed int64
	// WaitTimeouts counts requests that waited their whole budget.
	WaitTimeouts int64
	// RateLimited counts requests refused by a request-rate limit.
	RateLimited int64
	// CircuitOpen counts acquires refused by an open breaker; Probes the
	// half-open probes granted; Transitions the breaker changes made.
	CircuitOpen, Probes, Transitions int64
}

type counters struct {
	writes, failedWrites, reads      atomic.Int64
	acquired, released, purged       atomic.Int64
	tickets                          atomic.Int64
	shed, waitTimeouts, rateLimited  atomic.Int64
	circuitOpen, probes, transitions atomic.Int64
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	c := &l.stats
	return Stats{
		Writes:       c.writes.Load(),
		FailedWrites: c.failedWrites.Load(),
		Reads:        c.reads.Load(),
		Acquired:     c.acquired.Load(),
		Released:     c.released.Load(),
		Tickets:      c.tickets.Load(),
		Purged:       c.purged.Load(),
		Shed:         c.shed.Load(),
		WaitTimeouts: c.waitTimeouts.Load(),
		RateLimited:  c.rateLimited.Load(),
		CircuitOpen:  c.circuitOpen.Load(),
		Probes:       c.probes.Load(),
		Transitions:  c.transitions.Load(),
	}
}

// refused counts a refusal of the key's gates: a breaker's, or a pause's
// or the hold's of a caller that does not wait.
func (c *counters) refused(err error) {
	var open *CircuitOpenError
	if errors.As(err, &open) {
		c.circuitOpen.Add(1)
		return
	}
	c.shed.Add(1)
}
