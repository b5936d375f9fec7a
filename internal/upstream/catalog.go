package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// Catalog shares upstreams' tool lists across the fleet (package catalog).
type Catalog interface {
	Load(ctx context.Context, id, endpoint, have string, fetch func(context.Context) (catalog.Fetched, error)) (catalog.Entry, error)
	Invalidate(ctx context.Context, id string) error
}

var _ Catalog = (*catalog.Catalog)(nil)

// catalogued reports whether srv's shared list is kept in the fleet's
// catalog: for limited servers (an unlimited one causes no store traffic).
func (p *Pool) catalogued(srv *registry.Server) bool {
	return p.catalog != nil && srv.Limited()
}

func (p *Pool) renewTools(ctx context.Context, srv *registry.Server, who Caller, tl *toolList, shared bool) error {
	now := time.Now()
	if !shared || !p.catalogued(srv) {
		f, err := p.fetchTools(ctx, srv, who)
		if err != nil {
			return err
		}
		tl.set(f.list, f.scope, now.Add(f.ttl), now.Add(f.ttl), "", shared)
		return nil
	}
	var fetchErr error
	e, err := p.catalog.Load(ctx, srv.ID, identityKey(srv), tl.version, func(ctx context.Context) (catalog.Fetched, error) {
		f, err := p.fetchTools(ctx, srv, who)
		if err != nil {
			fetchErr = err
			return catalog.Fetched{}, err
		}
		if f.scope == catalog.ScopePrivate {
			// Never shared: the fleet learns only that it is private.
			return catalog.Fetched{Scope: f.scope, TTL: f.ttl}, nil
		}
		data, err := json.Marshal(f.list)
		if err != nil {
			return catalog.Fetched{}, fmt.Errorf("encode the tools of %s: %w", srv.ID, err)
		}
		return catalog.Fetched{Data: data, Scope: f.scope, TTL: f.ttl}, nil
	})
	if err != nil && e.Data == nil && e.Version == "" {
		if fetchErr != nil {
			return fetchErr
		}
		if ctx.Err() != nil {
			// The call's time ran out while the catalog was read: it is
			// the call's timeout (or its caller's leaving), not the
			// upstream's failure.
			return p.classify(ctx, srv, err)
		}
		// The catalog cannot be read: a store outage must not stop tool
		// calls. Keep this instance's copy a little longer, or list the
		// upstream as if there were no catalog.
		p.log.Warn("tool catalog unavailable; listing without it", "server_id", srv.ID, "error", err.Error())
		if tl.ordered != nil || tl.private {
			tl.reuse = now.Add(p.check)
			return nil
		}
		f, err := p.fetchTools(ctx, srv, who)
		if err != nil {
			return err
		}
		tl.set(f.list, f.scope, now.Add(f.ttl), now.Add(p.check), "", true)
		return nil
	}
	if err != nil {
		// Listed, but not shared: this instance keeps its copy.
		p.log.Warn("tool list not shared with the fleet", "server_id", srv.ID, "error", err.Error())
	}
	reuse := now.Add(p.check)
	if e.Expires.Before(reuse) {
		reuse = e.Expires
	}
	if e.Stale {
		reuse = now.Add(catalog.DefaultPoll * 4)
	}
	switch {
	case e.Scope == catalog.ScopePrivate:
		tl.set(nil, e.Scope, e.Expires, reuse, e.Version, true)
		return nil
	case e.Data == nil:
		// This instance holds that version already.
		tl.set(tl.ordered, e.Scope, e.Expires, reuse, e.Version, true)
		return nil
	}
	if int64(len(e.Data)) > p.maxList {
		return &Error{Kind: KindTooLarge, ServerID: srv.ID, Err: &LimitError{What: "tool list", Limit: p.maxList}}
	}
	var list []*mcp.Tool
	if err := json.Unmarshal(e.Data, &list); err != nil {
		return &Error{Kind: KindUnavailable, ServerID: srv.ID, Err: fmt.Errorf("decode the catalog's tools: %w", err)}
	}
	list = slices.DeleteFunc(list, func(t *mcp.Tool) bool { return t == nil })
	tl.set(list, e.Scope, e.Expires, reuse, e.Version, true)
	return nil
}

// listChangedEvery is the least time between two invalidations of one
// upstream's lists that its notifications/tools/list_changed cause.
const listChangedEvery = 5 * time.Second

// lists is what the pool knows of the tool lists of one upstream identity:
// a generation that invalidations advance (a list renewed in an older one
// is stale), and the coalescing of the upstream's invalidations.
type lists struct {
	gen atomic.Int64

	mu      sync.Mutex
	srv     *registry.Server // the latest item seen for the identity
	last    time.Time        // when the last invalidation started
	running bool             // the catalog's invalidation is being written
	pending bool             // another notification came since
	timer   *time.Timer      // a trailing invalidation is due
}

// listsOf returns the list state of srv's upstream identity.
func (p *Pool) listsOf(srv *registry.Server) *lists { return held(p, p.gens, identityKey(srv)) }

// InvalidateTools makes srv's lists stale here (every caller's) and in the
// catalog, after the upstream said it changed. Invalidations are coalesced
// per upstream, however many notifications arrive: the first runs at once,
// at most one is written to the catalog at a time and one per
// listChangedEvery, and notifications meanwhile cause one more at the end
// of that time. Each notification costs a lock and a comparison, never a
// goroutine or a store write of its own.
func (p *Pool) InvalidateTools(srv *registry.Server) {
	l := p.listsOf(srv)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.srv = srv
	if l.running || l.timer != nil {
		l.pending = true
		return
	}
	if wait := p.coalesce - time.Since(l.last); wait > 0 {
		l.pending = true
		l.timer = time.AfterFunc(wait, func() { p.trailing(l) })
		return
	}
	p.invalidateLocked(l)
}

// trailing runs the invalidation due after notifications were coalesced.
func (p *Pool) trailing(l *lists) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	if l.pending && !l.running {
		p.invalidateLocked(l)
	}
}

// invalidateLocked makes l's lists stale here at once and, for a
// catalogued server, in the catalog in the background; l.mu is held.
func (p *Pool) invalidateLocked(l *lists) {
	l.last, l.pending = time.Now(), false
	l.gen.Add(1)
	srv := l.srv
	if !p.catalogued(srv) {
		return
	}
	l.running = true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.catalog.Invalidate(ctx, srv.ID); err != nil {
			p.log.Warn("invalidating the tool catalog failed", "server_id", srv.ID, "error", err.Error())
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.running = false
		if l.pending && l.timer == nil {
			wait := max(p.coalesce-time.Since(l.last), 0)
			l.timer = time.AfterFunc(wait, func() { p.trailing(l) })
		}
	}()
}
