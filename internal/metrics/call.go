package metrics

import "time"

// Member names of the gateway's records.
const (
	DimServerID = "ServerID"
	DimTool     = "Tool"

	MetricLatency           = "Latency"
	MetricQueueWait         = "QueueWait"
	MetricInFlight          = "InFlight"
	MetricConcurrencyLimit  = "ConcurrencyLimit"
	MetricShed              = "Shed"
	MetricQueueTimeout      = "QueueTimeout"
	MetricCircuitOpen       = "CircuitOpen"
	MetricRateLimited       = "RateLimited"
	MetricStoreError        = "StoreError"
	MetricUpstreamTimeout   = "UpstreamTimeout"
	MetricUpstreamError     = "UpstreamError"
	MetricBreakerTransition = "BreakerTransition"
	MetricHeldAfterAnswer   = "HeldAfterAnswer"
	MetricCapMayBeExceeded  = "CapMayBeExceeded"

	PropOutcome   = "Outcome"
	PropRequestID = "RequestID"
	PropLeaseID   = "LeaseID"
	PropPrincipal = "Principal"
	PropFrom      = "From"
	PropTo        = "To"
	PropStoppedBy = "StoppedBy"
)

var (
	serverSets     = [][]string{{DimServerID}}
	serverToolSets = [][]string{{DimServerID}, {DimServerID, DimTool}}
)

// Call is what one tool call's record says. It has no field for keys,
// tokens, arguments or results, on purpose: records are logs.
type Call struct {
	// ServerID is the server called (required): dimension of both sets.
	ServerID string
	// Tool is the tool called: dimension of the [ServerID, Tool] set.
	// Empty (refused before the tool was known) writes only [ServerID].
	Tool string
	// Outcome is a property: "ok", "tool_error", or the fault code.
	Outcome string
	// Latency is the call's whole time in the gateway: metric Latency in
	// milliseconds, always written.
	Latency time.Duration
	// QueueWait is the time spent taking a slot: metric QueueWait in
	// milliseconds, always written (zero when uncapped or refused at once).
	QueueWait time.Duration
	// InFlightAfterAcquire is the server's calls in flight, this one
	// included, right after the slot was taken: metric InFlight (Count),
	// written only when InFlightKnown.
	InFlightAfterAcquire int
	// InFlightKnown says InFlightAfterAcquire was measured.
	InFlightKnown bool
	// ConcurrencyLimit is an adaptive server's limit when the call took
	// its slot: metric ConcurrencyLimit (Count), written when positive.
	ConcurrencyLimit int
	// Each flag set writes its metric (Count) with value 1; unset ones are
	// left out. Shed: refused at capacity (AT_CAPACITY). QueueTimeout: no
	// slot within the wait (QUEUE_TIMEOUT). CircuitOpen: the breaker
	// refused. StoreError: the lease store failed (STORE_UNAVAILABLE).
	// UpstreamTimeout and UpstreamError: the upstream call failed so.
	// RateLimited: a request-rate limit refused it (RATE_LIMITED); with
	// the Principal property, Logs Insights counts it per principal.
	Shed, QueueTimeout, CircuitOpen, StoreError, UpstreamTimeout, UpstreamError, RateLimited bool
	// RequestID and LeaseID are properties, left out when empty.
	RequestID, LeaseID string
	// Principal is the caller's short ID (auth.Principal.ID, never a key
	// or token): a property, not a dimension, since callers are many.
	// Left out when empty.
	Principal string
}

// Call writes the record of one tool call. Errors are as for Emit; the
// call path may ignore them, as they are counted in Stats.
func (e *Emitter) Call(c Call) error {
	if e == nil || e.off {
		return nil
	}
	dims := [2]Dimension{{DimServerID, c.ServerID}, {DimTool, c.Tool}}
	en := Entry{Dimensions: dims[:], Sets: serverToolSets}
	if c.Tool == "" {
		en.Dimensions, en.Sets = dims[:1], serverSets
	}
	var ms [10]Metric
	m := append(ms[:0],
		Metric{MetricLatency, Milliseconds, millis(c.Latency)},
		Metric{MetricQueueWait, Milliseconds, millis(c.QueueWait)})
	if c.InFlightKnown {
		m = append(m, Metric{MetricInFlight, Count, float64(c.InFlightAfterAcquire)})
	}
	if c.ConcurrencyLimit > 0 {
		m = append(m, Metric{MetricConcurrencyLimit, Count, float64(c.ConcurrencyLimit)})
	}
	for _, f := range [...]struct {
		on   bool
		name string
	}{
		{c.Shed, MetricShed},
		{c.QueueTimeout, MetricQueueTimeout},
		{c.CircuitOpen, MetricCircuitOpen},
		{c.RateLimited, MetricRateLimited},
		{c.StoreError, MetricStoreError},
		{c.UpstreamTimeout, MetricUpstreamTimeout},
		{c.UpstreamError, MetricUpstreamError},
	} {
		if f.on {
			m = append(m, Metric{f.name, Count, 1})
		}
	}
	en.Metrics = m
	var ps [4]Property
	p := ps[:0]
	for _, q := range [...]Property{{PropOutcome, c.Outcome}, {PropRequestID, c.RequestID}, {PropLeaseID, c.LeaseID}, {PropPrincipal, c.Principal}} {
		if q.Value != "" {
			p = append(p, q)
		}
	}
	en.Properties = p
	return e.Emit(en)
}

// BreakerTransition writes the record of a circuit breaker changing state
// (for example from "closed" to "open"): metric BreakerTransition (Count 1),
// properties From and To, dimension sets [ServerID] and [ServerID, Tool]
// (only [ServerID] when tool is empty).
func (e *Emitter) BreakerTransition(serverID, tool, from, to string) error {
	if e == nil || e.off {
		return nil
	}
	dims := [2]Dimension{{DimServerID, serverID}, {DimTool, tool}}
	en := Entry{Dimensions: dims[:], Sets: serverToolSets}
	if tool == "" {
		en.Dimensions, en.Sets = dims[:1], serverSets
	}
	ms := [1]Metric{{MetricBreakerTransition, Count, 1}}
	ps := [2]Property{{PropFrom, from}, {PropTo, to}}
	en.Metrics, en.Properties = ms[:], ps[:]
	return e.Emit(en)
}

// Exchange is what the record of a cut-off call's exchange says once the
// exchange is closed: the agent was answered before the upstream was known
// to have stopped, and the call kept its slot meanwhile.
type Exchange struct {
	// ServerID and Tool are as in Call.
	ServerID, Tool string
	// Held is how long the slot was kept after the agent's answer: metric
	// HeldAfterAnswer in milliseconds.
	Held time.Duration
	// StoppedBy says how the upstream was known to stop (property
	// StoppedBy); empty means it was not known: the exchange was closed at
	// the end of its grace (or by a lost slot, or shutdown) and metric
	// CapMayBeExceeded (Count 1) is written.
	StoppedBy string
	// RequestID and LeaseID are properties, left out when empty.
	RequestID, LeaseID string
}

// Exchange writes the record of a cut-off call's exchange, closed.
func (e *Emitter) Exchange(x Exchange) error {
	if e == nil || e.off {
		return nil
	}
	dims := [2]Dimension{{DimServerID, x.ServerID}, {DimTool, x.Tool}}
	en := Entry{Dimensions: dims[:], Sets: serverToolSets}
	if x.Tool == "" {
		en.Dimensions, en.Sets = dims[:1], serverSets
	}
	ms := [2]Metric{{MetricHeldAfterAnswer, Milliseconds, millis(x.Held)}}
	m := ms[:1]
	stopped := x.StoppedBy
	if stopped == "" {
		m = append(m, Metric{MetricCapMayBeExceeded, Count, 1})
		stopped = "unknown"
	}
	en.Metrics = m
	var ps [3]Property
	p := append(ps[:0], Property{PropStoppedBy, stopped})
	for _, q := range [...]Property{{PropRequestID, x.RequestID}, {PropLeaseID, x.LeaseID}} {
		if q.Value != "" {
			p = append(p, q)
		}
	}
	en.Properties = p
	return e.Emit(en)
}

// StoreStats are the lease store's operations over an interval: the
// difference of two lease.Limiter Stats, and the tool calls served in it.
type StoreStats struct {
	// Calls is the tool calls that went through the limiter.
	Calls int64
	// Writes, FailedWrites and Reads are the limiter's UpdateItem calls,
	// those whose condition failed, and its GetItem calls.
	Writes, FailedWrites, Reads int64
}

// StoreStats writes one record of s, without dimensions: metrics
// StoreCalls, StoreWrites, StoreFailedWrites and StoreReads (Count) and,
// when Calls > 0, StoreWritesPerCall and StoreReadsPerCall (None).
func (e *Emitter) StoreStats(s StoreStats) error {
	if e == nil || e.off {
		return nil
	}
	var ms [6]Metric
	m := append(ms[:0],
		Metric{"StoreCalls", Count, float64(s.Calls)},
		Metric{"StoreWrites", Count, float64(s.Writes)},
		Metric{"StoreFailedWrites", Count, float64(s.FailedWrites)},
		Metric{"StoreReads", Count, float64(s.Reads)})
	if s.Calls > 0 {
		m = append(m,
			Metric{"StoreWritesPerCall", None, float64(s.Writes) / float64(s.Calls)},
			Metric{"StoreReadsPerCall", None, float64(s.Reads) / float64(s.Calls)})
	}
	return e.Emit(Entry{Metrics: m})
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
