package metrics

import (
	"time"

	"github.com/mcpgate/mcpgate/internal/fault"
)

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

// sets are the dimension sets of a record about serverID and tool: both
// [ServerID] and [ServerID, Tool], or only [ServerID] when tool is empty.
func sets(tool string) [][]string {
	if tool == "" {
		return [][]string{{DimServerID}}
	}
	return [][]string{{DimServerID}, {DimServerID, DimTool}}
}

// Call is what one tool call's record says. It has no field for keys,
// tokens, arguments or results, on purpose: records are logs.
type Call struct {
	// ServerID is the server called (required): dimension of both sets.
	ServerID string
	// Tool is the tool called: dimension of the [ServerID, Tool] set.
	// Empty (refused before the tool was known) writes only [ServerID].
	Tool string
	// Outcome is a property: "ok", "tool_error", or the fault code. Some
	// fault codes also write a Count metric (see callLine.counter).
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
	// RequestID and LeaseID are properties, left out when empty.
	RequestID, LeaseID string
	// Principal is the caller's short ID (auth.Principal.ID, never a key
	// or token): a property, not a dimension, since callers are many.
	// Left out when empty.
	Principal string
}

// counter is the Count metric, written with value 1, that a call with
// outcome counts, and its member; nil for none. Shed: refused at capacity.
// QueueTimeout: no slot within the wait. CircuitOpen: the breaker refused.
// RateLimited: a request-rate limit refused it (with the Principal
// property, Logs Insights counts it per principal). StoreError: the lease
// store failed. UpstreamTimeout and UpstreamError: the upstream call failed
// so.
func (l *callLine) counter(outcome string) (*int, string) {
	switch fault.Code(outcome) {
	case fault.AtCapacity:
		return &l.Shed, MetricShed
	case fault.QueueTimeout:
		return &l.QueueTimeout, MetricQueueTimeout
	case fault.CircuitOpen:
		return &l.CircuitOpen, MetricCircuitOpen
	case fault.RateLimited:
		return &l.RateLimited, MetricRateLimited
	case fault.StoreUnavailable:
		return &l.StoreError, MetricStoreError
	case fault.UpstreamTimeout:
		return &l.UpstreamTimeout, MetricUpstreamTimeout
	case fault.UpstreamError:
		return &l.UpstreamError, MetricUpstreamError
	}
	return nil, ""
}

// callLine is a Call's record, members in the order they are written.
type callLine struct {
	AWS              meta    `json:"_aws"`
	ServerID         string  `json:"ServerID"`
	Tool             string  `json:"Tool,omitempty"`
	Latency          float64 `json:"Latency"`
	QueueWait        float64 `json:"QueueWait"`
	InFlight         *int    `json:"InFlight,omitempty"`
	ConcurrencyLimit int     `json:"ConcurrencyLimit,omitempty"`
	Shed             int     `json:"Shed,omitempty"`
	QueueTimeout     int     `json:"QueueTimeout,omitempty"`
	CircuitOpen      int     `json:"CircuitOpen,omitempty"`
	RateLimited      int     `json:"RateLimited,omitempty"`
	StoreError       int     `json:"StoreError,omitempty"`
	UpstreamTimeout  int     `json:"UpstreamTimeout,omitempty"`
	UpstreamError    int     `json:"UpstreamError,omitempty"`
	Outcome          string  `json:"Outcome,omitempty"`
	RequestID        string  `json:"RequestID,omitempty"`
	LeaseID          string  `json:"LeaseID,omitempty"`
	Principal        string  `json:"Principal,omitempty"`
}

// Call writes the record of one tool call. The call path may ignore its
// error: a record lost is a metric lost, nothing else.
func (e *Emitter) Call(c Call) error {
	if e == nil {
		return nil
	}
	if c.ServerID == "" {
		return ErrInvalid
	}
	l := callLine{ServerID: c.ServerID, Tool: c.Tool, Latency: millis(c.Latency), QueueWait: millis(c.QueueWait),
		Outcome: c.Outcome, RequestID: c.RequestID, LeaseID: c.LeaseID, Principal: c.Principal}
	defs := []metricDef{{MetricLatency, Milliseconds}, {MetricQueueWait, Milliseconds}}
	if c.InFlightKnown {
		l.InFlight = &c.InFlightAfterAcquire
		defs = append(defs, metricDef{MetricInFlight, Count})
	}
	if c.ConcurrencyLimit > 0 {
		l.ConcurrencyLimit = c.ConcurrencyLimit
		defs = append(defs, metricDef{MetricConcurrencyLimit, Count})
	}
	if n, name := l.counter(c.Outcome); n != nil {
		*n = 1
		defs = append(defs, metricDef{name, Count})
	}
	l.AWS = e.meta(sets(c.Tool), defs)
	return e.write(&l)
}

// BreakerTransition writes the record of a circuit breaker changing state
// (for example from "closed" to "open"): metric BreakerTransition (Count 1),
// properties From and To, dimension sets [ServerID] and [ServerID, Tool]
// (only [ServerID] when tool is empty).
func (e *Emitter) BreakerTransition(serverID, tool, from, to string) error {
	if e == nil {
		return nil
	}
	if serverID == "" {
		return ErrInvalid
	}
	return e.write(&struct {
		AWS               meta   `json:"_aws"`
		ServerID          string `json:"ServerID"`
		Tool              string `json:"Tool,omitempty"`
		BreakerTransition int    `json:"BreakerTransition"`
		From              string `json:"From"`
		To                string `json:"To"`
	}{e.meta(sets(tool), []metricDef{{MetricBreakerTransition, Count}}), serverID, tool, 1, from, to})
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
	if e == nil {
		return nil
	}
	if x.ServerID == "" {
		return ErrInvalid
	}
	l := struct {
		AWS              meta    `json:"_aws"`
		ServerID         string  `json:"ServerID"`
		Tool             string  `json:"Tool,omitempty"`
		HeldAfterAnswer  float64 `json:"HeldAfterAnswer"`
		CapMayBeExceeded int     `json:"CapMayBeExceeded,omitempty"`
		StoppedBy        string  `json:"StoppedBy"`
		RequestID        string  `json:"RequestID,omitempty"`
		LeaseID          string  `json:"LeaseID,omitempty"`
	}{ServerID: x.ServerID, Tool: x.Tool, HeldAfterAnswer: millis(x.Held), StoppedBy: x.StoppedBy, RequestID: x.RequestID, LeaseID: x.LeaseID}
	defs := []metricDef{{MetricHeldAfterAnswer, Milliseconds}}
	if l.StoppedBy == "" {
		l.CapMayBeExceeded, l.StoppedBy = 1, "unknown"
		defs = append(defs, metricDef{MetricCapMayBeExceeded, Count})
	}
	l.AWS = e.meta(sets(x.Tool), defs)
	return e.write(&l)
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
	if e == nil {
		return nil
	}
	l := struct {
		AWS                meta     `json:"_aws"`
		StoreCalls         int64    `json:"StoreCalls"`
		StoreWrites        int64    `json:"StoreWrites"`
		StoreFailedWrites  int64    `json:"StoreFailedWrites"`
		StoreReads         int64    `json:"StoreReads"`
		StoreWritesPerCall *float64 `json:"StoreWritesPerCall,omitempty"`
		StoreReadsPerCall  *float64 `json:"StoreReadsPerCall,omitempty"`
	}{StoreCalls: s.Calls, StoreWrites: s.Writes, StoreFailedWrites: s.FailedWrites, StoreReads: s.Reads}
	defs := []metricDef{{"StoreCalls", Count}, {"StoreWrites", Count}, {"StoreFailedWrites", Count}, {"StoreReads", Count}}
	if s.Calls > 0 {
		w, r := float64(s.Writes)/float64(s.Calls), float64(s.Reads)/float64(s.Calls)
		l.StoreWritesPerCall, l.StoreReadsPerCall = &w, &r
		defs = append(defs, metricDef{"StoreWritesPerCall", None}, metricDef{"StoreReadsPerCall", None})
	}
	// One set without dimensions: the metrics have none.
	l.AWS = e.meta([][]string{{}}, defs)
	return e.write(&l)
}
