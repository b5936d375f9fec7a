package lease

import (
	"errors"
	"sync/atomic"
)

// Stats counts what a Limiter did since it was built.
type Stats struct {
	// Writes and Reads count every UpdateItem attempt and GetItem sent;
	// FailedWrites the writes whose condition failed (still billed).
	Writes, FailedWrites, Reads int64
	// Acquired and Released count granted and given-back leases (a place
	// granted with no time left, given back inside Acquire or Claim,
	// counts as both).
	Acquired, Released int64
	// Tickets counts callers that joined the queue; Purged the writes made
	// only to purge; Shed the requests refused at once (a cap or the queue
	// full, callers ahead, a pause or hold); WaitTimeouts those that waited
	// their whole budget; RateLimited those a bucket refused.
	Tickets, Purged, Shed, WaitTimeouts, RateLimited int64
	// CircuitOpen counts acquires refused by an open breaker; Probes the
	// half-open probes granted (claims' too); Transitions the breaker
	// changes made.
	CircuitOpen, Probes, Transitions int64
}

// counters are Stats' fields, in their order, as they are counted.
type counters struct {
	writes, failedWrites, reads                      atomic.Int64
	acquired, released                               atomic.Int64
	tickets, purged, shed, waitTimeouts, rateLimited atomic.Int64
	circuitOpen, probes, transitions                 atomic.Int64
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	c := &l.stats
	return Stats{c.writes.Load(), c.failedWrites.Load(), c.reads.Load(), c.acquired.Load(), c.released.Load(),
		c.tickets.Load(), c.purged.Load(), c.shed.Load(), c.waitTimeouts.Load(), c.rateLimited.Load(),
		c.circuitOpen.Load(), c.probes.Load(), c.transitions.Load()}
}

// refused counts a refusal by the key's gates.
func (c *counters) refused(err error) {
	if _, open := errors.AsType[*CircuitOpenError](err); open {
		c.circuitOpen.Add(1)
	} else {
		c.shed.Add(1)
	}
}
