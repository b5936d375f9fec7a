package gateway

import (
	"container/list"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// taskPolls remembers, per principal and task, a gateway task's record as
// the store last gave it to that principal's tasks/get, and when it was
// read: a tasks/get of the same task by the same principal sooner than the
// record's pollIntervalMs after that read is answered from it, without
// reading the store (the answer is then at most one interval old, which
// the extension allows). So an agent that polls faster than it is told
// costs no more than one that does not. A relayed task's is its handle's
// record with the upstream's answer, kept for the pollIntervalMs that
// answer tells: a faster poll sends the upstream nothing. A status change
// made here (tasks/update, tasks/cancel, a worker's write) forgets the
// task's entry.
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
	// gen counts the forgets and the entries lost (expired, pushed out):
	// a read begun before one (begin) may be older than the change or the
	// entry it follows, and is not kept (put).
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
	// A relayed task's: the upstream's answer as the agent got it, and
	// the interval it told.
	answer *objectResult
	every  time.Duration
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
	if e := p.fresh(owner, id, now); e != nil {
		return e.r
	}
	return nil
}

// relayed returns the answer owner's last tasks/get of relayed task id
// got, if it came less than the interval it told before now; nil
// otherwise.
func (p *taskPolls) relayed(owner, id string, now time.Time) *objectResult {
	e := p.fresh(owner, id, now)
	if e == nil || e.answer == nil {
		return nil
	}
	// Each request gets its own: the members are never changed, the maps
	// may be.
	return e.answer.clone()
}

// fresh is the entry of owner's polls of task id, if it is younger than
// its interval at now and its task has not expired.
func (p *taskPolls) fresh(owner, id string, now time.Time) *pollEntry {
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
	every := pollOf(e.r)
	if e.answer != nil {
		every = e.every
	}
	// A running task's read is not kept past the time its outcome is
	// written by (outcome): a poll then reads the store, which may say it
	// ended, rather than take the read for a worker that stopped.
	late := !e.r.RunUntil.IsZero() && !now.Before(e.r.RunUntil.Add(-lease.DefaultMargin))
	if now.Sub(e.at) >= every || now.Before(e.at) || e.r.Expired(now) || late {
		p.lose(el)
		return nil
	}
	p.order.MoveToFront(el)
	return e
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
	p.keep(&pollEntry{r: r, at: at}, gen)
}

// putRelayed remembers the answer a tasks/get of relayed task r sent at at
// got from its upstream, telling the agent to poll every every, unless a
// change was made here since (gen, from begin).
func (p *taskPolls) putRelayed(r *tasks.Record, answer *objectResult, every time.Duration, at time.Time, gen uint64) {
	p.keep(&pollEntry{r: r, at: at, answer: answer, every: every}, gen)
}

// keep remembers e, as put says.
func (p *taskPolls) keep(e *pollEntry, gen uint64) {
	if p == nil {
		return
	}
	r := e.r
	e.size = recordSize(r)
	if e.answer != nil {
		e.answer = e.answer.clone()
		for k, v := range e.answer.fields {
			e.size += len(k) + len(v)
		}
		if len(e.answer.Meta) > 0 {
			// The upstream's, as big as it made it: counted as encoded.
			m, err := marshalPlain(e.answer.Meta)
			if err != nil {
				return
			}
			e.size += len(m)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := pollKey{r.Owner, r.ID}
	if el, ok := p.byKey[k]; ok {
		if el.Value.(*pollEntry).at.After(e.at) && gen == p.gen {
			return // a poll sent later was answered first: it stays
		}
		p.drop(el)
	}
	if gen != p.gen {
		return
	}
	if e.size > p.maxBytes/maxEntryShare || p.maxEntries <= 0 {
		return
	}
	e.key, e.r = k, r.Clone()
	p.byKey[k] = p.order.PushFront(e)
	p.bytes += e.size
	for p.order.Len() > p.maxEntries || p.bytes > p.maxBytes {
		p.lose(p.order.Back())
	}
}

// lose drops an entry no newer read replaces (expired, or pushed out), as
// forget does: a read in flight meanwhile may be older than it, and is not
// kept (put), or it would answer a status the dropped entry had moved past.
func (p *taskPolls) lose(el *list.Element) {
	p.gen++
	p.drop(el)
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
