// Package cache keeps values read from the store for a short time, per
// process: a miss is loaded once however many callers ask at once, a value
// a little too old can stand in while loads fail, a value found wanting can
// be loaded again at a pace the caller sets, and past its bound the cache
// drops the value used least recently, never all of them.
package cache

import (
	"container/list"
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Loader caches the values Load returns, by key. Its zero value is not
// usable; set Load, and the other fields as needed.
type Loader[V any] struct {
	// Load reads a key's value. It runs detached from the caller's
	// cancellation (the result is shared by every caller waiting for it),
	// bounded by LoadTimeout. A returned error is not cached.
	Load func(ctx context.Context, key string) (V, error)
	// TTL is how long a value is served from memory; zero or negative
	// disables caching.
	TTL time.Duration
	// MaxStale is how old a value may be and still be served when Load
	// fails; zero means never.
	MaxStale time.Duration
	// Max bounds the number of keys held; past it, the key used least
	// recently is dropped, so that a flood of new keys (say, random API
	// keys) cannot empty the cache of the ones in use. Zero means 4096.
	Max int
	// LoadTimeout bounds one Load; zero means 5 s.
	LoadTimeout time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time

	group singleflight.Group
	mu    sync.Mutex
	m     map[string]*list.Element // of *entry[V]
	lru   list.List                // most recently used first
}

type entry[V any] struct {
	key string
	Held[V]
}

func (l *Loader[V]) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// Get returns key's value: from memory if younger than TTL, else from one
// Load shared with concurrent callers; if that fails, a value younger than
// MaxStale, else the error. If ctx ends first, Get returns at once (with a
// value younger than MaxStale, else ctx's error) while the Load goes on for
// the others.
func (l *Loader[V]) Get(ctx context.Context, key string) (V, error) {
	e, have := l.held(key)
	if have && l.fresh(e.Held) {
		return e.Value, nil
	}
	v, err := l.load(ctx, key, false, l.fresh)
	if err != nil {
		if have && l.MaxStale > 0 && l.now().Sub(e.Loaded) < l.MaxStale {
			return e.Value, nil
		}
		var zero V
		return zero, err
	}
	return v, nil
}

func (l *Loader[V]) fresh(h Held[V]) bool {
	return l.TTL > 0 && l.now().Sub(h.Loaded) < l.TTL
}

// load runs Load for key once for every concurrent caller, unless what is
// held by then satisfies keep; reload marks a load started by Reload.
func (l *Loader[V]) load(ctx context.Context, key string, reload bool, keep func(Held[V]) bool) (V, error) {
	ch := l.group.DoChan(key, func() (any, error) {
		// A caller that missed just before another's load finished
		// finds its value here instead of loading again.
		if e, ok := l.held(key); ok && keep(e.Held) {
			return e.Value, nil
		}
		timeout := l.LoadTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		v, err := l.Load(lctx, key)
		if err != nil {
			return nil, err
		}
		l.put(key, v, reload)
		return v, nil
	})
	var zero V
	select {
	case res := <-ch:
		if res.Err != nil {
			return zero, res.Err
		}
		v, _ := res.Val.(V) // a nil V is held as a nil any
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Held is what a Loader holds for a key, as Reload's keep sees it.
type Held[V any] struct {
	// Value is what Load returned.
	Value V
	// Loaded is when Load returned Value.
	Loaded time.Time
	// Reloaded is when a Load started by Reload last returned a value for
	// the key (a Get's Load leaves it as it was); zero if none has.
	Reloaded time.Time
}

// Reload returns key's value from a new Load shared with concurrent
// callers, Get's included, unless what is held satisfies keep; then it
// returns that at once. It is for reading a value again after it was
// found wanting (say, a credential refused as stale): keep says whether
// what is held is already good enough, or was reloaded too recently to
// ask again. A failed Load returns its error; no stale value stands in.
// Like Get, it returns at once when ctx ends. With TTL and MaxStale both
// zero or negative nothing is held, and every Reload loads.
func (l *Loader[V]) Reload(ctx context.Context, key string, keep func(Held[V]) bool) (V, error) {
	if e, ok := l.held(key); ok && keep(e.Held) {
		return e.Value, nil
	}
	return l.load(ctx, key, true, keep)
}

// held returns what is held for key, however old, and marks it used.
func (l *Loader[V]) held(key string) (entry[V], bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.m[key]
	if !ok {
		return entry[V]{}, false
	}
	l.lru.MoveToFront(el)
	return *el.Value.(*entry[V]), true
}

// put holds v for key; reload marks it loaded by Reload.
func (l *Loader[V]) put(key string, v V, reload bool) {
	if l.TTL <= 0 && l.MaxStale <= 0 {
		return
	}
	limit := l.Max
	if limit <= 0 {
		limit = 4096
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[string]*list.Element)
	}
	e := &entry[V]{key: key, Held: Held[V]{Value: v, Loaded: now}}
	if reload {
		e.Reloaded = now
	}
	if el, ok := l.m[key]; ok {
		if !reload {
			e.Reloaded = el.Value.(*entry[V]).Reloaded
		}
		el.Value = e
		l.lru.MoveToFront(el)
		return
	}
	for len(l.m) >= limit {
		last := l.lru.Back()
		delete(l.m, last.Value.(*entry[V]).key)
		l.lru.Remove(last)
	}
	l.m[key] = l.lru.PushFront(e)
}
