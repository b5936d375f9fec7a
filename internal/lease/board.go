package lease

import (
	"cmp"
	"maps"
	"sync"
	"time"
)

// board is what this process last saw of one key's item: every answer
// goes on it, and wakes the waiters here.
type board struct {
	mu sync.Mutex
	v  *view
	// at is when the request v answers was sent.
	at      time.Time
	changed chan struct{} // closed when v is replaced
	// starts: when this process lately started a worker for each task
	// ticket; held and spread: running means of how long leases here were
	// held, and of the distance from that mean.
	starts       map[string]time.Time
	held, spread time.Duration
}

func (l *Limiter) board(key string) *board {
	if b, ok := l.boards.Load(key); ok {
		return b.(*board)
	}
	b, _ := l.boards.LoadOrStore(key, &board{changed: make(chan struct{})})
	return b.(*board)
}

// see puts v, the answer to a request sent at sent, on the board unless
// it holds a later one's, wakes the waiters, and returns v.
func (b *board) see(v *view, sent time.Time) *view {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sent.Before(b.at) {
		return v // an answer that was overtaken
	}
	b.v, b.at = v, sent
	close(b.changed)
	b.changed = make(chan struct{})
	return v
}

// latest returns the board's view, when its request was sent, and a
// channel closed when it changes.
func (b *board) latest() (*view, time.Time, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.v, b.at, b.changed
}

// recent returns the board's item if it was seen within maxAge.
func (b *board) recent(maxAge time.Duration) *view {
	v, at, _ := b.latest()
	if v == nil || time.Since(at) > maxAge {
		return nil
	}
	return v
}

// heldFor records that a lease here was held for d.
func (b *board) heldFor(d time.Duration) {
	if d <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held = cmp.Or(b.held, d) // the first measured starts the mean
	b.spread += (max(d-b.held, b.held-d) - b.spread) / 4
	b.held += (d - b.held) / 4
}

// meanHeld is how long a lease on the key is held, and this process's
// spread: the fleet's call_ms when v shows one, else this process's mean.
func (b *board) meanHeld(v *view) (held, spread time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v != nil && v.callMS > 0 {
		return time.Duration(v.callMS) * time.Millisecond, b.spread
	}
	return b.held, b.spread
}

// mayStart reports whether this process may start a worker for task
// ticket id at now (it has not within StartTimeout), noting it if so.
func (b *board) mayStart(id string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	maps.DeleteFunc(b.starts, func(_ string, at time.Time) bool { return now.Sub(at) >= StartTimeout })
	if _, ok := b.starts[id]; ok {
		return false
	}
	put(&b.starts, id, now)
	return true
}

// forgetStart forgets this process's start of a worker for task ticket
// id, so that it may start one at once.
func (b *board) forgetStart(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.starts, id)
}
