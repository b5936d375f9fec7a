package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// An upstream that answers a call 429 or 503 with Retry-After asks for a
// pause. It stops the calls of the principal (or team) whose call got the
// answer, for at most the server's max_pause: for the whole fleet through
// the server's lease item when the call holds a lease there (its release
// writes the pause, which stops everyone once another principal's stands
// too), else on this instance alone. An OpenAPI server's pause stops the
// operation called, not the others.

// maxLocalPauses bounds the pauses an instance keeps for calls that hold
// no lease: past it, lapsed ones are dropped, then the soonest to end.
const maxLocalPauses = 4096

// pauseKey is what one pause kept on this instance stops: a principal's
// calls to a server, or to one operation of an OpenAPI server.
type pauseKey struct {
	server, label, tool string
}

// localPauses are the pauses this instance keeps, until when each stands.
type localPauses struct {
	mu    sync.Mutex
	until map[pauseKey]time.Time
}

// set pauses k until until, never shortening a later pause.
func (p *localPauses) set(k pauseKey, until, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.until == nil {
		p.until = map[pauseKey]time.Time{}
	}
	if old, ok := p.until[k]; ok {
		if old.After(until) {
			return
		}
	} else if len(p.until) >= maxLocalPauses {
		p.evictLocked(now)
	}
	p.until[k] = until
}

// evictLocked drops the lapsed pauses, and, if none had lapsed, the one
// that ends soonest.
func (p *localPauses) evictLocked(now time.Time) {
	var soonest pauseKey
	var at time.Time
	for k, u := range p.until {
		if !u.After(now) {
			delete(p.until, k)
			continue
		}
		if at.IsZero() || u.Before(at) {
			soonest, at = k, u
		}
	}
	if len(p.until) >= maxLocalPauses {
		delete(p.until, soonest)
	}
}

// left is how long k stays paused from now; 0 when it is not.
func (p *localPauses) left(k pauseKey, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.until[k]
	if !ok {
		return 0
	}
	if !u.After(now) {
		delete(p.until, k)
		return 0
	}
	return u.Sub(now)
}

// pauseFor is the pause an upstream's Retry-After of d imposes on srv's
// callers: at most the server's max_pause.
func pauseFor(srv *registry.Server, d time.Duration) time.Duration {
	if m := srv.MaxPause; m > 0 && d > m {
		return m
	}
	return min(d, lease.MaxPause)
}

// pauseKeyOf is the key of a local pause of the caller of ctx on tool of
// srv: per operation for an OpenAPI server, else the whole server.
func pauseKeyOf(ctx context.Context, srv *registry.Server, tool string) pauseKey {
	k := pauseKey{server: srv.ID, label: leaseHolder(principalFrom(ctx))}
	if srv.Transport == registry.TransportOpenAPI {
		k.tool = tool
	}
	return k
}

// pause stops the calls of ctx's principal to srv (or to tool, on an
// OpenAPI server) for d, its upstream's Retry-After: through the server's
// lease item when the call holds a lease there (its release writes it),
// else on this instance.
func (g *Gateway) pause(ctx context.Context, srv *registry.Server, tool string, leases []*lease.Lease, d time.Duration, rec *record) {
	d = pauseFor(srv, d)
	for _, ls := range leases {
		if ls.Key() == srv.ID {
			ls.PauseFor(d)
			g.log.Info("upstream asked for a pause", "request_id", rec.id, "server_id", srv.ID, "retry_after_ms", d.Milliseconds(), "fleet", true)
			return
		}
	}
	now := time.Now()
	g.pauses.set(pauseKeyOf(ctx, srv, tool), now.Add(d), now)
	g.log.Info("upstream asked for a pause", "request_id", rec.id, "server_id", srv.ID, "retry_after_ms", d.Milliseconds(), "fleet", false)
}

// paused is the refusal of a call of tool on srv that takes no lease
// while this instance keeps its principal paused there.
func (g *Gateway) paused(ctx context.Context, srv *registry.Server, tool string) *fault.Error {
	if left := g.pauses.left(pauseKeyOf(ctx, srv, tool), time.Now()); left > 0 {
		return pausedFault(srv, tool, left)
	}
	return nil
}

// pausedFault refuses a call of tool on srv while its upstream's pause
// stands for the caller.
func pausedFault(srv *registry.Server, tool string, left time.Duration) *fault.Error {
	what := fmt.Sprintf("server %q", srv.ID)
	if srv.Transport == registry.TransportOpenAPI && tool != "" {
		what = fmt.Sprintf("operation %q of server %q", clip.String(tool, clip.Name), srv.ID)
	}
	return fault.New(fault.AtCapacity, "%s asked for no calls for %v more (its Retry-After)", what, left.Round(time.Millisecond)).
		WithReason(lease.Paused).WithRetryAfter(left)
}
