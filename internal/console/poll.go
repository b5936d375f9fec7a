package console

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/smithy-go"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
)

// snapshot is one reading of the stack.
type snapshot struct {
	// At is when the reading was made; OK when the store last answered
	// (zero: never); Err why this reading failed ("" if it did not).
	At, OK time.Time
	Err    string
	Report *fleet.Report
	// Items are the server items by id, as read.
	Items map[string]fleet.Item
	// Keys are the key items (read while the Keys screen is watched),
	// KeysAt when.
	Keys   []fleet.Item
	KeysAt time.Time
}

// sample is one point of a server's chart.
type sample struct {
	At                       time.Time
	InFlight, Limit, Waiting int
}

// poller reads the stack every interval into the latest snapshot, keeps
// the charts' history, and follows the gateway's log.
type poller struct {
	o *Options

	mu      sync.Mutex
	snap    *snapshot
	history map[string][]sample
	// seen is when each lease and ticket id was first read, for how long
	// it has been held or waiting (the lease item does not say).
	seen map[string]time.Time
	// keysWanted is until when the Keys screen asked for keys.
	keysWanted atomic.Int64
	// changed is closed and replaced after each reading.
	changed chan struct{}

	calls *callLog
}

func newPoller(o *Options) *poller {
	return &poller{o: o, snap: &snapshot{}, history: map[string][]sample{}, seen: map[string]time.Time{},
		changed: make(chan struct{}), calls: newCallLog(o)}
}

// run reads until ctx ends.
func (p *poller) run(ctx context.Context) {
	t := time.NewTicker(p.o.Interval)
	defer t.Stop()
	for {
		p.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// wantKeys asks the next readings for the keys (the Keys screen is open).
func (p *poller) wantKeys() {
	p.keysWanted.Store(p.o.Now().Add(10 * time.Second).UnixMilli())
}

// latest returns the latest snapshot.
func (p *poller) latest() *snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snap
}

// next returns a channel closed after the next reading.
func (p *poller) next() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// refresh makes one reading: the servers, their lease items, the keys
// when wanted, and the log.
func (p *poller) refresh(ctx context.Context) {
	now := p.o.Now()
	rctx, cancel := context.WithTimeout(ctx, p.o.ReadTimeout)
	defer cancel()
	snap, err := p.read(rctx, now)
	p.calls.refresh(ctx, now)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		// Keep what was read last; say why this reading failed.
		old := *p.snap
		old.At, old.Err = now, storeProblem(err)
		p.snap = &old
		p.o.Log.Warn("console: store read failed", "error", err)
	} else {
		if snap.Keys == nil && p.snap.Keys != nil && p.keysWanted.Load() > now.UnixMilli() {
			snap.Keys, snap.KeysAt = p.snap.Keys, p.snap.KeysAt
		}
		p.snap = snap
		p.record(snap, now)
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// read reads the stack once.
func (p *poller) read(ctx context.Context, now time.Time) (*snapshot, error) {
	s := p.o.Store
	servers, err := s.Scan(ctx, s.Tables.Servers)
	if err != nil {
		return nil, err
	}
	snap := &snapshot{At: now, OK: now, Items: map[string]fleet.Item{}}
	var ids []string
	for _, item := range servers {
		id := fleet.RawAttr(item, store.ServerIDAttr)
		snap.Items[id] = item
		ids = append(ids, id)
	}
	keys := ids
	if p.keysWanted.Load() > now.UnixMilli() {
		if snap.Keys, err = s.Scan(ctx, s.Tables.Keys); err != nil {
			return nil, err
		}
		snap.KeysAt = now
		for _, item := range snap.Keys {
			if k, err := auth.ParseItem(item); err == nil && k.Hash != "" && (k.MaxParallel > 0 || k.RPMLimit > 0) {
				keys = append(keys, k.Principal().ID)
			}
		}
	}
	slices.Sort(keys)
	items, err := s.Leases(ctx, slices.Compact(keys))
	if err != nil {
		return nil, err
	}
	items = slices.DeleteFunc(items, func(it fleet.Item) bool { return catalog.IsKey(fleet.RawAttr(it, store.LimiterKeyAttr)) })
	snap.Report = fleet.Build(items, servers, fleet.KeyRPM(snap.Keys), now, true)
	return snap, nil
}

// record adds the reading to the charts and the first-seen times.
func (p *poller) record(snap *snapshot, now time.Time) {
	present := map[string]bool{}
	for _, l := range snap.Report.Limiters {
		if l.Server.Key {
			continue
		}
		row := rowOf(&l, nil, now)
		h := append(p.history[l.Key], sample{At: now, InFlight: row.InFlight, Limit: row.Limit, Waiting: row.Waiting})
		cut := 0
		for cut < len(h) && now.Sub(h[cut].At) > p.o.History {
			cut++
		}
		p.history[l.Key] = h[cut:]
		for _, s := range l.Slots {
			for _, ls := range s.Leases {
				present[ls.ID] = true
			}
		}
		for _, t := range l.Waiting {
			present["t:"+t.ID] = true
		}
	}
	for id := range present {
		if _, ok := p.seen[id]; !ok {
			p.seen[id] = now
		}
	}
	maps.DeleteFunc(p.seen, func(id string, _ time.Time) bool { return !present[id] })
	maps.DeleteFunc(p.history, func(id string, _ []sample) bool { _, ok := snap.Items[id]; return !ok })
}

// since returns when id (a lease id, or "t:" and a ticket id) was first
// read, zero if it was not.
func (p *poller) since(id string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[id]
}

// chart returns a copy of server id's history.
func (p *poller) chart(id string) []sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.history[id])
}

// storeProblem says in one line, without internals, why the store did not
// answer.
func storeProblem(err error) string {
	msg := err.Error()
	var api smithy.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "context deadline exceeded"):
		return "no answer in time (the store is slow or unreachable)"
	case strings.Contains(msg, "connection refused"):
		return "connection refused (is the store running?)"
	case errors.As(err, &api):
		return clip.String(api.ErrorCode()+": "+api.ErrorMessage(), 200)
	}
	return clip.String(fleet.OneLine(msg), 200)
}

// server returns server id's parsed item (nil, and why, when invalid), and
// the item as read; found reports whether it exists.
func (s *snapshot) server(id string) (srv *registry.Server, invalid string, item fleet.Item, found bool) {
	item, found = s.Items[id]
	if !found {
		return nil, "", nil, false
	}
	srv, err := registry.Parse(item)
	if err != nil {
		return nil, fleet.OneLine(err.Error()), item, true
	}
	return srv, "", item, true
}

// limiter returns the report's limiter of key.
func (s *snapshot) limiter(key string) *fleet.Limiter {
	if s.Report == nil {
		return nil
	}
	for i := range s.Report.Limiters {
		if s.Report.Limiters[i].Key == key {
			return &s.Report.Limiters[i]
		}
	}
	return nil
}
