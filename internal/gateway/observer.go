package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// CallObserver is told what happens to tool calls: the metrics implement
// it, and so could tracing. Its methods run on the call path and must not
// block. ctx is the request's (for ExchangeClosed and BreakerChanged after
// the answer, the exchange's, which keeps the request's values): an
// implementation may keep what it needs there, in values the gateway does
// not remove. The Gateway holds its observer, so it is reachable from
// every step, including those whose context the MCP route rebuilds.
type CallObserver interface {
	// Acquired: the call took its place on the server (its lease).
	Acquired(ctx context.Context, c CallInfo, ls *lease.Lease)
	// Waited: the call waited d for its place (zero when it got one at once).
	Waited(ctx context.Context, c CallInfo, d time.Duration)
	// Finished: the call was answered, or refused once the tool was known.
	Finished(ctx context.Context, c CallEnd)
	// ExchangeClosed: a call's exchange that outlived its answer is closed.
	ExchangeClosed(ctx context.Context, x ExchangeEnd)
	// BreakerChanged: a call's outcome changed its breaker's state.
	BreakerChanged(ctx context.Context, b BreakerChange)
}

// CallInfo says which call an event is about.
type CallInfo struct {
	RequestID, ServerID, Tool string
	Principal                 *auth.Principal // nil when unknown
}

// CallEnd is how a call ended.
type CallEnd struct {
	CallInfo
	Server  *registry.Server
	Latency time.Duration
	// Lease is the call's place on the server; nil when it took none.
	Lease *lease.Lease
	// Result is the tool's answer, nil when Fault is set.
	Result *mcp.CallToolResult
	Fault  *fault.Error
}

// ExchangeEnd is a closed exchange that outlived its call's answer.
type ExchangeEnd struct {
	CallInfo
	// Held is how long the slot was kept after the answer.
	Held time.Duration
	// StoppedBy says how the upstream was known to stop; "" if it was not.
	StoppedBy upstream.Stop
	LeaseID   string
}

// BreakerChange is a breaker's change of state, as "closed" to "open".
type BreakerChange struct {
	CallInfo
	From, To string
}

// observers tells each of its observers in turn.
type observers []CallObserver

var (
	_ CallObserver = observers(nil)
	_ CallObserver = (*metricsObserver)(nil)
)

func (os observers) Acquired(ctx context.Context, c CallInfo, ls *lease.Lease) {
	for _, o := range os {
		o.Acquired(ctx, c, ls)
	}
}

func (os observers) Waited(ctx context.Context, c CallInfo, d time.Duration) {
	for _, o := range os {
		o.Waited(ctx, c, d)
	}
}

func (os observers) Finished(ctx context.Context, c CallEnd) {
	for _, o := range os {
		o.Finished(ctx, c)
	}
}

func (os observers) ExchangeClosed(ctx context.Context, x ExchangeEnd) {
	for _, o := range os {
		o.ExchangeClosed(ctx, x)
	}
}

func (os observers) BreakerChanged(ctx context.Context, b BreakerChange) {
	for _, o := range os {
		o.BreakerChanged(ctx, b)
	}
}

// storeStatsEvery is how often the limiter's counters are emitted.
const storeStatsEvery = time.Minute

// metricsObserver writes the EMF records: one per call, per closed
// exchange and per breaker change, and, once a minute, the limiter's store
// counters since the last time.
type metricsObserver struct {
	em *metrics.Emitter
	// stats reads the limiter's counters; nil when there is no limiter.
	stats func() lease.Stats
	// When the limiter's counters were last emitted, and what they were.
	mu   sync.Mutex
	at   time.Time
	last lease.Stats
}

func (m *metricsObserver) Acquired(context.Context, CallInfo, *lease.Lease) {}
func (m *metricsObserver) Waited(context.Context, CallInfo, time.Duration)  {}

func (m *metricsObserver) Finished(_ context.Context, e CallEnd) {
	c := metrics.Call{ServerID: e.ServerID, Tool: e.Tool, Latency: e.Latency, Outcome: "ok", RequestID: e.RequestID}
	if e.Principal != nil {
		c.Principal = e.Principal.ID
	}
	if ls := e.Lease; ls != nil {
		c.QueueWait, c.LeaseID = ls.Waited, ls.ID()
		c.InFlightAfterAcquire, c.InFlightKnown = ls.InFlight, true
		if e.Server.Adaptive {
			c.ConcurrencyLimit = ls.Limit
		}
	}
	switch {
	case e.Fault != nil:
		c.Outcome = string(e.Fault.Code)
	case e.Result != nil && e.Result.IsError:
		c.Outcome = "tool_error"
	}
	_ = m.em.Call(c)
	m.storeStats()
}

// storeStats emits the limiter's counters since the last time, once a
// minute; the first call only starts counting.
func (m *metricsObserver) storeStats() {
	if m.stats == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.at.IsZero() {
		m.at, m.last = now, m.stats()
		return
	}
	if now.Sub(m.at) < storeStatsEvery {
		return
	}
	cur, last := m.stats(), m.last
	m.at, m.last = now, cur
	_ = m.em.StoreStats(metrics.StoreStats{
		Calls:        (cur.Acquired + cur.Shed + cur.WaitTimeouts + cur.CircuitOpen) - (last.Acquired + last.Shed + last.WaitTimeouts + last.CircuitOpen),
		Writes:       cur.Writes - last.Writes,
		FailedWrites: cur.FailedWrites - last.FailedWrites,
		Reads:        cur.Reads - last.Reads,
	})
}

func (m *metricsObserver) ExchangeClosed(_ context.Context, x ExchangeEnd) {
	_ = m.em.Exchange(metrics.Exchange{ServerID: x.ServerID, Tool: x.Tool, Held: x.Held,
		StoppedBy: string(x.StoppedBy), RequestID: x.RequestID, LeaseID: x.LeaseID})
}

func (m *metricsObserver) BreakerChanged(_ context.Context, b BreakerChange) {
	_ = m.em.BreakerTransition(b.ServerID, b.Tool, b.From, b.To)
}
