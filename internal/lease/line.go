package lease

import (
	"context"
	"strings"
	"sync"
	"time"
)

// lines are this process's waiters, in arrival order, one line per limiter
// key and set of slots. Only the head of a line polls the store; the others
// wait their turn in memory. So a process's waiters cost the store one
// poller's reads, not one each; they are served first come, first served;
// a newcomer does not write past a line already waiting; and a place given
// back in this process wakes the head at once instead of at its next poll.
//
// Lines are per process: across processes, waiters still compete through
// the store, with each process's head polling as before.
type lines struct {
	mu sync.Mutex
	m  map[string]map[string][]*waiter // key → slot set → line
}

// waiter is one Acquire in a line.
type waiter struct {
	key, set string
	req      Request
	// turn is closed when the waiter reaches the head of its line.
	turn chan struct{}
	// kick tells the head that a place was given back in this process.
	kick chan struct{}
	// offer receives the outcome of a hand-off claimed for this waiter: a
	// lease passed to it by a holder in this process, or nil.
	offer chan *Lease
	// claimed is set (under lines.mu) while a holder is passing its place
	// to this waiter.
	claimed bool
}

// head reports whether w is at the head of its line.
func (w *waiter) head() bool {
	select {
	case <-w.turn:
		return true
	default:
		return false
	}
}

// slotSet names the slots of a request: waiters for the same slots are
// interchangeable; a call for another tool of the same server is not in
// their line (it may find room they cannot use).
func slotSet(slots []Slot) string {
	attrs := make([]string, len(slots))
	for i, s := range slots {
		attrs[i] = s.Attr
	}
	return attrSet(attrs)
}

func attrSet(attrs []string) string { return strings.Join(attrs, "\x00") }

// busy reports whether anyone is in the line for key and set.
func (q *lines) busy(key, set string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.m[key][set]) > 0
}

// join puts a new waiter at the end of the line for key and set.
func (q *lines) join(key, set string, req Request) *waiter {
	w := &waiter{key: key, set: set, req: req, turn: make(chan struct{}), kick: make(chan struct{}, 1), offer: make(chan *Lease, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = map[string]map[string][]*waiter{}
	}
	sets := q.m[key]
	if sets == nil {
		sets = map[string][]*waiter{}
		q.m[key] = sets
	}
	sets[set] = append(sets[set], w)
	if len(sets[set]) == 1 {
		close(w.turn)
	}
	return w
}

// leave takes w out of its line; if it was the head, the next one's turn
// comes. A lease passed to w that it did not take is given back.
func (q *lines) leave(w *waiter) {
	q.mu.Lock()
	claimed := w.claimed
	q.remove(w)
	q.mu.Unlock()
	var unused *Lease
	if claimed {
		unused = <-w.offer
	} else {
		select {
		case unused = <-w.offer:
		default:
		}
	}
	if unused != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = unused.Release(ctx)
	}
}

// claim picks the head of the line for key and set to pass a place to,
// unless a hand-off to it is under way already.
func (q *lines) claim(key, set string) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.m[key][set]
	if len(line) == 0 || line[0].claimed || len(line[0].offer) > 0 {
		return nil // none, or one hand-off at a time
	}
	line[0].claimed = true
	return line[0]
}

// settle ends a claim on w with the lease passed to it, or nil.
func (q *lines) settle(w *waiter, ls *Lease) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// Both at once, so leave either waits for the offer or finds it. The
	// send never blocks: claim made sure the buffer was empty.
	w.offer <- ls
	w.claimed = false
}

func (q *lines) remove(w *waiter) {
	sets := q.m[w.key]
	line := sets[w.set]
	for i, o := range line {
		if o != w {
			continue
		}
		line = append(line[:i], line[i+1:]...)
		if i == 0 && len(line) > 0 {
			close(line[0].turn)
		}
		break
	}
	if len(line) == 0 {
		delete(sets, w.set)
		if len(sets) == 0 {
			delete(q.m, w.key)
		}
		return
	}
	sets[w.set] = line
}

// kick tells the head of every line for key that a place was given back.
func (q *lines) kick(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, line := range q.m[key] {
		select {
		case line[0].kick <- struct{}{}:
		default:
		}
	}
}
