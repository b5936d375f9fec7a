package gateway

import (
	"container/list"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/tasks"
)

// taskPolls remembers, per principal and task, a gateway task's record as
// the store last gave it to that principal's tasks/get, and when it was
// read: a tasks/get of the same task by the same principal sooner than the
// record's pollIntervalMs after that read is answered from it, without
// reading the store (the answer is then at most one interval old, which
// the extension allows). So an agent that polls faster than it is told
// costs no more than one that does not. A status change made here
// (tasks/update, tasks/cancel, a worker's write) forgets the task's entry.
//
// It is bounded: at most maxEntries records of at most maxBytes in all,
// the least recently used dropped first; a record larger than a
// maxEntryShare-th of maxBytes is not kept.
type taskPolls struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int
	bytes      int
	order      *list.List // of *pollEntry, most recently used first
	byKey      map[pollKey]*list.Element
	// gen counts the forgets: a read begun before one (begin) may be
	// older than the change it follows, and is not kept (put).
	gen uint64
}

// The bounds of a process's remembered polls.
const (
	pollEntries   = 4096
	pollBytes     = 16 << 20
	maxEntryShare = 16
)

type pollKey struct{ owner, id string }

type pollEntry struct {
	key  pollKey
	r    *tasks.Record
	at   time.Time
	size int
}

func newTaskPolls(maxEntries, maxBytes int) *taskPolls {
	return &taskPolls{maxEntries: maxEntries, maxBytes: maxBytes, order: list.New(), byKey: map[pollKey]*list.Element{}}
}

// pollOf is the interval a record tells its agent to poll at.
func pollOf(r *tasks.Record) time.Duration {
	if r.PollInterval <= 0 {
		return defaultPollInterval
	}
	return r.PollInterval
}

// get returns the record owner last read of task id, if it was read less
// than its poll interval before now and has not expired; nil otherwise.
// The record returned is shared: it must not be changed.
func (p *taskPolls) get(owner, id string, now time.Time) *tasks.Record {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	el, ok := p.byKey[pollKey{owner, id}]
	if !ok {
		return nil
	}
	e := el.Value.(*pollEntry)
	if now.Sub(e.at) >= pollOf(e.r) || now.Before(e.at) || e.r.Expired(now) {
		p.drop(el)
		return nil
	}
	p.order.MoveToFront(el)
	return e.r
}

// begin marks the start of a store read whose record put may keep.
func (p *taskPolls) begin() uint64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// put remembers r, read from the store at at, for its owner, unless a
// change was made here since the read began (gen, from begin): the read
// may then be older than that change.
func (p *taskPolls) put(r *tasks.Record, at time.Time, gen uint64) {
	if p == nil {
		return
	}
	size := recordSize(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	k := pollKey{r.Owner, r.ID}
	if el, ok := p.byKey[k]; ok {
		p.drop(el)
	}
	if gen != p.gen {
		return
	}
	if size > p.maxBytes/maxEntryShare || p.maxEntries <= 0 {
		return
	}
	p.byKey[k] = p.order.PushFront(&pollEntry{key: k, r: r.Clone(), at: at, size: size})
	p.bytes += size
	for p.order.Len() > p.maxEntries || p.bytes > p.maxBytes {
		p.drop(p.order.Back())
	}
}

// forget drops what owner's polls of task id remember.
func (p *taskPolls) forget(owner, id string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	if el, ok := p.byKey[pollKey{owner, id}]; ok {
		p.drop(el)
	}
}

func (p *taskPolls) drop(el *list.Element) {
	e := p.order.Remove(el).(*pollEntry)
	delete(p.byKey, e.key)
	p.bytes -= e.size
}

// len returns how many records are remembered, and their bytes.
func (p *taskPolls) len() (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.order.Len(), p.bytes
}

// recordSize is about what a record takes in memory: its variable parts
// and a fixed overhead.
func recordSize(r *tasks.Record) int {
	n := 512
	for _, s := range []string{r.ID, r.ServerID, r.Tool, r.Owner, r.OwnerID, r.StatusMessage, r.Protocol, r.Traceparent, r.Tracestate,
		r.RequestState, r.LeaseID, r.UpstreamID, string(r.Kind), string(r.Status)} {
		n += len(s)
	}
	for _, b := range [][]byte{r.Principal, r.Params, r.Result, r.Error, r.InputRequests, r.InputResponses} {
		n += len(b)
	}
	return n
}
