package lease

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// API is the part of the DynamoDB client the limiter uses.
type API interface {
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Attribute names in a lease item.
const (
	// ServerAttr is the map of lease id → expiry (Unix milliseconds) that
	// counts against the limiter key's own cap.
	ServerAttr = "leases"
	// ToolAttrPrefix prefixes the map that counts against one tool's cap:
	// "tool:<name>".
	ToolAttrPrefix = "tool:"
	// TicketsAttr is the map of waiting callers' tickets: lease id → {a:
	// arrival, e: expiry, h: hold, s: {slot: cap}, b: breaker}.
	TicketsAttr = "tickets"
	// ReleasedAttr names the lease whose release wrote last.
	ReleasedAttr = "last_release"
)

// ToolAttr is the attribute holding the leases of one capped tool.
func ToolAttr(tool string) string { return ToolAttrPrefix + tool }

// Defaults for Options, and the protocol's fixed times.
const (
	DefaultMargin     = 2 * time.Second
	DefaultMinBackoff = 25 * time.Millisecond
	DefaultMaxBackoff = 150 * time.Millisecond
	// TicketTTL is how long a ticket lasts unless its waiter renews it: a
	// waiter that dies holds its place in the queue for at most that long.
	TicketTTL = 2 * time.Second
	// MaxHolder is the longest Request.Holder, in bytes.
	MaxHolder = 32
	// abandonedAfter is added to a lease's expiry to form the item's TTL:
	// DynamoDB may delete an item nobody has touched for that long.
	abandonedAfter = 24 * time.Hour
	// maxPurge bounds the stale entries one write removes, keeping the
	// expression well under DynamoDB's size limits.
	maxPurge = 25
	// maxEager bounds the writes an acquire makes back to back while the
	// item keeps changing under it; then it waits its turn, or is shed.
	maxEager = 6
	// recentView is how old a view of the item may be to stand in for a
	// first write that would fail (a queue is there) or to tell a release
	// whom to pass its place to.
	recentView = time.Second
	// overdueLook is the first wait of a waiter whose place was expected
	// to free already; it doubles up to MaxBackoff.
	overdueLook = 5 * time.Millisecond
)

// Options configures a Limiter. The zero value means defaults.
type Options struct {
	// Margin is added to a lease's hold time to form its expiry. A lease
	// outlives its call by Margin, so another instance purges it only after
	// the call was cancelled, as long as clocks differ by less than Margin.
	// Zero means DefaultMargin.
	Margin time.Duration
	// MinBackoff and MaxBackoff bound the wait between a waiter's looks at
	// the item while it cannot tell when its place will free. Zero means
	// the defaults.
	MinBackoff, MaxBackoff time.Duration
	// Clock returns the wall-clock time written into and compared with
	// expiries. Nil means time.Now. Tests use it to simulate skew.
	Clock func() time.Time
	// InstanceID starts every lease id this limiter writes, naming the
	// gateway instance. Empty means a random id.
	InstanceID string
}

// Limiter is a distributed counting semaphore over one DynamoDB table. It is
// safe for concurrent use; build one per process.
type Limiter struct {
	db       API
	table    string
	margin   time.Duration
	minBack  time.Duration
	maxBack  time.Duration
	clock    func() time.Time
	instance string
	seq      atomic.Uint64
	stats    counters
	boards   sync.Map // limiter key → *board
}

// New returns a Limiter storing its items in table.
func New(db API, table string, opts Options) *Limiter {
	l := &Limiter{db: db, table: table, margin: opts.Margin, minBack: opts.MinBackoff, maxBack: opts.MaxBackoff,
		clock: opts.Clock, instance: opts.InstanceID}
	if l.margin <= 0 {
		l.margin = DefaultMargin
	}
	if l.minBack <= 0 {
		l.minBack = DefaultMinBackoff
	}
	if l.maxBack <= 0 {
		l.maxBack = DefaultMaxBackoff
	}
	l.maxBack = max(l.maxBack, l.minBack)
	if l.clock == nil {
		l.clock = time.Now
	}
	if l.instance == "" {
		l.instance = NewInstanceID()
	}
	return l
}

// InstanceID is the start of this limiter's lease ids.
func (l *Limiter) InstanceID() string { return l.instance }

// Margin is the time a lease outlives its call.
func (l *Limiter) Margin() time.Duration { return l.margin }

// NewInstanceID returns 8 random base-32 characters.
func NewInstanceID() string { return rand.Text()[:8] }

// newLeaseID is "<instance>.<sequence>" and, for a named holder,
// ".<holder>".
func (l *Limiter) newLeaseID(holder string) string {
	id := l.instance + "." + strconv.FormatUint(l.seq.Add(1), 36)
	if holder != "" {
		id += "." + holder
	}
	return id
}

// ParseLeaseID splits a lease (or ticket) id into the gateway instance
// that wrote it and the caller's label it carries, if any.
func ParseLeaseID(id string) (instance, holder string) {
	instance, rest, _ := strings.Cut(id, ".")
	_, holder, _ = strings.Cut(rest, ".")
	return instance, holder
}

// Slot is one counter a lease counts against: a map attribute of the item
// and the cap on its size.
type Slot struct {
	// Attr is the map attribute: ServerAttr or ToolAttr(name).
	Attr string
	// Cap is the most live leases the map may hold; it must be positive.
	Cap int
}

// Request describes one acquire.
type Request struct {
	// Key is the limiter key: the item's partition key (the server id).
	Key string
	// Slots are the counters the lease takes a place in, all in one write.
	// It may be empty when Breaker is set: the call then takes no place
	// and only asks the breaker.
	Slots []Slot
	// Hold is the longest the holder will use the slot: the call timeout.
	// The lease expires at now + Hold + Margin.
	Hold time.Duration
	// CallBy, if set, is the latest instant the call may end (for example
	// the Lambda deadline minus time to answer). Hold is shortened so the
	// call ends by then, and waiting stops when no time would be left.
	CallBy time.Time
	// Wait is how long to wait for a place when none is free. Zero or
	// negative means do not wait: fail at once with *FullError.
	Wait time.Duration
	// Breaker, if set, refuses the acquire while that breaker is open, and
	// makes it the probe when the breaker is half-open and nobody else is.
	Breaker *Breaker
	// Holder is a short label of the caller (at most MaxHolder bytes of
	// printable ASCII), kept in the lease id so operators can see who
	// holds each place and who waits. Empty means none.
	Holder string
}

func (r *Request) validate() error {
	if r.Key == "" || (len(r.Slots) == 0 && r.Breaker == nil) {
		return errors.New("lease: request needs a key and a slot or a breaker")
	}
	for i, s := range r.Slots {
		if s.Cap <= 0 || s.Attr == "" || !isSlotAttr(s.Attr) {
			return fmt.Errorf("lease: slot %q has cap %d; want a slot map and a positive cap", s.Attr, s.Cap)
		}
		if slices.ContainsFunc(r.Slots[:i], func(o Slot) bool { return o.Attr == s.Attr }) {
			return fmt.Errorf("lease: slot %q given twice", s.Attr)
		}
	}
	if r.Hold <= 0 {
		return errors.New("lease: hold must be positive")
	}
	if len(r.Holder) > MaxHolder || strings.ContainsFunc(r.Holder, func(c rune) bool { return c <= ' ' || c > '~' }) {
		return fmt.Errorf("lease: holder label must be at most %d bytes of printable ASCII", MaxHolder)
	}
	return nil
}

// FullError means the request found no place and did not wait.
type FullError struct {
	// Attr is the map that had no place for it.
	Attr string
	// Cap is its cap, as requested; InUse how many live leases it held.
	Cap, InUse int
	// Waiting is how many callers queued before this one want the same
	// slots: with fewer than Cap in use, they, not the cap, refused it.
	Waiting int
	// RetryAfter is a jittered hint for when to try again.
	RetryAfter time.Duration
}

func (e *FullError) Error() string {
	if e.InUse < e.Cap {
		return fmt.Sprintf("lease: %s has %d callers waiting (%d of %d in use)", e.Attr, e.Waiting, e.InUse, e.Cap)
	}
	return fmt.Sprintf("lease: %s is full (%d in use)", e.Attr, e.InUse)
}

// WaitTimeoutError means the request waited its whole budget for a place.
type WaitTimeoutError struct {
	Attr   string
	Waited time.Duration
}

func (e *WaitTimeoutError) Error() string {
	return fmt.Sprintf("lease: no place in %s after waiting %v", e.Attr, e.Waited.Round(time.Millisecond))
}

// ErrNotHeld means a release or renewal found the lease gone: it was
// released already, or it expired and another instance purged it.
var ErrNotHeld = errors.New("lease: not held")

// Lease is a held place in one or more slots.
type Lease struct {
	l     *Limiter
	key   string
	slots []Slot
	id    string
	exp   int64 // expiry in Unix ms, as stored
	// since is when the holder got the lease (local clock).
	since time.Time
	// released guards against double release from one holder.
	released atomic.Bool

	// Expiry is when the lease lapses and may be purged by anyone.
	Expiry time.Time
	// CallDeadline is when the holder's call must end; it is Margin before
	// Expiry and measured on the local monotonic clock.
	CallDeadline time.Time
	// Waited is how long Acquire spent before the lease was granted.
	Waited time.Duration
	// InFlight is how many live leases the first slot held right after
	// this one was granted, this one included.
	InFlight int

	breaker   *Breaker
	probe     bool
	failsSeen int64 // a breaker-only lease: the failure count it saw
}

// Probe reports whether this lease is its breaker's half-open probe.
func (ls *Lease) Probe() bool { return ls.probe }

// ID is the lease id (see ParseLeaseID).
func (ls *Lease) ID() string { return ls.id }

// Key is the limiter key the lease was taken on.
func (ls *Lease) Key() string { return ls.key }

// Acquire takes a place in every slot of req in one conditional write, unless
// callers queued before it can use the places free. When it finds no place
// it fails with *FullError or, if req.Wait is positive, puts a ticket in
// the queue and waits until the place is its (a release passed it on, or it
// took it), req.Wait passes (*WaitTimeoutError) or ctx ends.
func (l *Limiter) Acquire(ctx context.Context, req Request) (*Lease, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	if len(req.Slots) == 0 {
		return l.acquireBreaker(ctx, req)
	}
	a := &attempt{l: l, req: req, start: time.Now(), b: l.board(req.Key)}
	a.me = &ticket{id: l.newLeaseID(req.Holder), arrive: l.clock().UnixMilli(), slots: req.Slots}
	if req.Breaker != nil {
		a.me.breaker = req.Breaker.Name
	}
	ls, err := a.run(ctx)
	if err != nil {
		a.withdraw(ctx)
		return nil, err
	}
	ls.Waited, ls.since = time.Since(a.start), time.Now()
	l.stats.acquired.Add(1)
	if ls.probe {
		l.stats.probes.Add(1)
	}
	return ls, nil
}

// attempt is the state of one Acquire.
type attempt struct {
	l     *Limiter
	req   Request
	b     *board
	me    *ticket
	start time.Time
	// wrote is set while a write that adds this attempt's id may have
	// landed; joined once its ticket write was sent.
	wrote, joined bool
	// probe: the item showed the breaker half-open with no live probe, so
	// the next write tries to become it.
	probe         bool
	seenOpenUntil int64
	// asked is when the last request of this attempt was sent; look is
	// the next wait for a place that was expected to be free already.
	asked time.Time
	look  time.Duration
	ahead int // callers ahead of it at its last look
	// ready: its last look found a place free for it.
	ready bool
}

func (a *attempt) now() time.Time { return a.l.clock() }

// hold is how long a place taken at localNow may be held.
func (r *Request) hold(localNow time.Time) time.Duration {
	if !r.CallBy.IsZero() {
		return min(r.Hold, r.CallBy.Sub(localNow))
	}
	return r.Hold
}

func (a *attempt) run(ctx context.Context) (*Lease, error) {
	waitUntil := a.start.Add(max(a.req.Wait, 0))
	if dl, ok := ctx.Deadline(); ok && dl.Before(waitUntil) {
		waitUntil = dl
	}
	if !a.req.CallBy.IsZero() && a.req.CallBy.Before(waitUntil) {
		waitUntil = a.req.CallBy
	}
	first := a.req.Slots[0].Attr
	// A recent view showing a queue saves a first write that would fail.
	snap := a.b.recent(recentView)
	if snap != nil && len(snap.tickets) == 0 {
		snap = nil
	}
	eager := 0
	for {
		now := a.now().UnixMilli()
		if snap != nil {
			if exp, ok := snap.holds(first, a.me.id); ok {
				return a.lease(ctx, exp, snap)
			}
			if br := a.req.Breaker; br != nil {
				// Refused while open or probing; half-open: be the probe.
				st := snap.breakers[br.Name]
				a.probe, a.seenOpenUntil = st.phase(a.now()) == phaseHalfOpen, st.openUntil
				if err := a.l.refuse(st, br.Name); err != nil {
					return nil, err
				}
			}
			if len(snap.stale(now)) > maxPurge {
				// More stale entries than a write removes with its own
				// business: clear some first (and pass on a place freed).
				snap = a.l.passOn(ctx, a.req.Key, snap, a.req.Slots)
				continue
			}
		}
		served, ahead := true, 0
		if snap != nil {
			served, ahead = snap.turn(now, a.me)
		}
		queued := snap != nil && snap.queued(a.me.id)
		var err error
		switch {
		case served && queued && !a.ready:
			// A release passes places on itself: take one only if it is
			// still free at the next look.
			a.ready = true
			snap, err = a.wait(ctx, snap, overdueLook, waitUntil)
		case served && eager < maxEager:
			eager++
			var ls *Lease
			if ls, snap, err = a.take(ctx, snap); ls != nil || err != nil {
				return ls, err
			}
			continue
		case a.req.Wait <= 0:
			a.l.stats.shed.Add(1)
			return nil, a.full(snap, now, ahead)
		case !queued:
			snap, err = a.join(ctx, snap)
		default:
			a.ready = false
			snap, err = a.wait(ctx, snap, a.nextLook(snap, ahead), waitUntil)
		}
		eager = 0
		if err != nil {
			return nil, err
		}
	}
}

// take makes one conditional write that puts the lease in every slot,
// removes this caller's ticket if it has one, and purges what snap shows
// stale. It returns the lease, or the item as it is now when the write
// found no place after all.
func (a *attempt) take(ctx context.Context, snap *snapshot) (*Lease, *snapshot, error) {
	wallNow, localNow := a.now(), time.Now()
	hold := a.req.hold(localNow)
	if hold <= 0 {
		return nil, nil, &WaitTimeoutError{Attr: a.req.Slots[0].Attr, Waited: time.Since(a.start)}
	}
	exp := wallNow.Add(hold + a.l.margin).UnixMilli()
	u := newUpdate()
	purged := u.purge(snap, wallNow.UnixMilli(), a.me.id)
	u.take(a.me.id, exp, a.req.Slots, purged)
	u.conds = append(u.conds, "attribute_not_exists("+u.path(a.req.Slots[0].Attr, a.me.id)+")")
	if a.joined {
		u.removes = append(u.removes, u.path(TicketsAttr, a.me.id))
	} else {
		// A newcomer goes only if nobody queued since it looked: it
		// judged from what it saw that none of them can use the place.
		n := 0
		if snap != nil {
			n = len(snap.tickets)
		}
		tp := u.path(TicketsAttr)
		u.conds = append(u.conds, "(attribute_not_exists("+tp+") OR size("+tp+") = "+u.num(int64(n))+")")
	}
	if br := a.req.Breaker; br != nil {
		if a.probe {
			u.probe(br, a.me.id, exp, a.seenOpenUntil, wallNow.UnixMilli())
		} else {
			u.closed(br.Name)
		}
	}
	u.ttl(exp)
	a.wrote, a.asked = true, time.Now()
	next, err := a.l.write(ctx, a.req.Key, u)
	if err == nil {
		a.l.stats.purged.Add(int64(len(u.removes)))
		ls, err := a.lease(ctx, exp, next)
		return ls, nil, err
	}
	if !errors.Is(err, errCondition) {
		return nil, nil, err
	}
	// Not landed, unless the item shows it did (the caller's loop looks).
	a.wrote = a.joined
	if missing := next.missing(slotAttrs(a.req.Slots)...); len(missing) > 0 {
		// A new item or a new tool: make the maps, then write again.
		return nil, nil, a.l.create(ctx, a.req.Key, missing)
	}
	return nil, next, nil
}

func slotAttrs(slots []Slot) []string {
	attrs := make([]string, len(slots))
	for i, s := range slots {
		attrs[i] = s.Attr
	}
	return attrs
}

// lease completes the acquire with the lease the item shows this attempt
// holding, expiring at exp: the place its write took, one passed on to its
// ticket, or one its own write took although the answer said otherwise (an
// SDK retry of a write that had landed). A place with no time left for the
// call is given back.
func (a *attempt) lease(ctx context.Context, exp int64, snap *snapshot) (*Lease, error) {
	localNow := time.Now()
	deadline := localNow.Add(time.UnixMilli(exp).Sub(a.now()) - a.l.margin)
	if !a.req.CallBy.IsZero() && a.req.CallBy.Before(deadline) {
		deadline = a.req.CallBy
	}
	ls := &Lease{l: a.l, key: a.req.Key, slots: a.req.Slots, id: a.me.id, exp: exp, breaker: a.req.Breaker, probe: a.probe,
		Expiry: time.UnixMilli(exp), CallDeadline: deadline, InFlight: snap.occupied(a.req.Slots[0].Attr, a.now().UnixMilli())}
	if snap.queued(a.me.id) {
		// It queued again on a view that had not caught up: a ticket left
		// behind would be passed a place nobody takes.
		u := newUpdate()
		u.removes = append(u.removes, u.path(TicketsAttr, a.me.id))
		_, _ = a.l.write(ctx, a.req.Key, u)
	}
	if !deadline.After(localNow) {
		_, _ = ls.Finish(ctx, Abandoned)
		return nil, &WaitTimeoutError{Attr: a.req.Slots[0].Attr, Waited: time.Since(a.start)}
	}
	return ls, nil
}

// join puts this caller's ticket in the queue (again, with its first
// arrival, if its ticket lapsed while it was away).
func (a *attempt) join(ctx context.Context, snap *snapshot) (*snapshot, error) {
	if snap == nil || len(snap.missing(append(slotAttrs(a.req.Slots), TicketsAttr)...)) > 0 {
		if err := a.l.create(ctx, a.req.Key, append(slotAttrs(a.req.Slots), TicketsAttr)); err != nil {
			return nil, err
		}
	}
	a.me.exp = a.now().Add(TicketTTL).UnixMilli()
	a.me.hold = a.req.hold(time.Now()).Milliseconds()
	u := newUpdate()
	u.sets = append(u.sets, u.path(TicketsAttr, a.me.id)+" = "+u.value(a.me.value()))
	u.ttl(a.me.exp)
	a.wrote, a.joined, a.asked = true, true, time.Now()
	a.l.stats.tickets.Add(1)
	return a.l.write(ctx, a.req.Key, u)
}

// wait holds a queued caller until there is news of the item from this
// process, or for look, then looks itself; it renews its ticket before it
// lapses.
func (a *attempt) wait(ctx context.Context, snap *snapshot, look time.Duration, until time.Time) (*snapshot, error) {
	if !time.Now().Before(until) {
		a.l.stats.waitTimeouts.Add(1)
		return nil, &WaitTimeoutError{Attr: a.req.Slots[0].Attr, Waited: time.Since(a.start)}
	}
	latest, at, changed := a.b.latest()
	if latest != nil && latest != snap && at.After(a.asked) {
		return latest, nil // news from another request here
	}
	renewIn := time.UnixMilli(a.me.exp).Sub(a.now()) - TicketTTL/2
	t := time.NewTimer(max(min(look, renewIn, time.Until(until)), 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("lease: waiting for %s: %w", a.req.Key, ctx.Err())
	case <-changed:
		latest, _, _ := a.b.latest()
		return latest, nil
	case <-t.C:
	}
	a.asked = time.Now()
	if time.UnixMilli(a.me.exp).Sub(a.now()) <= TicketTTL/2 {
		return a.renewTicket(ctx)
	}
	return a.l.read(ctx, a.req.Key)
}

// nextLook is how long a queued caller waits before it looks at the item
// again. When this process knows how long calls here last (their mean and
// spread, measured from when their caller got the place, so the time a
// waiter took to notice its place never makes others look later), it
// looks when its place may first free: the holders' grant times (from
// their expiries) plus the mean less the spread, a round of them per Cap
// callers ahead of it; then, while the place is late, every eighth of the
// spread (at least 5 ms), growing by half up to twice MinBackoff.
// Otherwise it backs off from MinBackoff to twice that, or waits
// MaxBackoff while a cap of callers or more are ahead of it.
func (a *attempt) nextLook(snap *snapshot, ahead int) time.Duration {
	if ahead < a.ahead {
		a.look = 0 // the queue moved: start over
	}
	a.ahead = ahead
	now := a.now().UnixMilli()
	held, spread := a.b.meanHeld()
	slot := a.blocking(snap, now)
	if held <= 0 {
		a.look = min(max(a.look*3/2, a.l.minBack), 2*a.l.minBack)
		if ahead >= slot.Cap {
			return a.l.maxBack
		}
		return jitter(a.look)
	}
	var ends []int64
	for _, exp := range snap.slots[slot.Attr] {
		if exp >= now {
			ends = append(ends, exp-a.me.hold-a.l.margin.Milliseconds()+(held-spread).Milliseconds())
		}
	}
	slices.Sort(ends)
	if len(ends) > 0 {
		eta := ends[ahead%len(ends)] + int64(ahead/len(ends))*held.Milliseconds()
		if d := time.Duration(eta-now) * time.Millisecond; d > 0 {
			a.look = 0
			return d
		}
	}
	a.look = min(max(a.look*3/2, overdueLook, spread/8), 2*a.l.minBack)
	return a.look
}

// renewTicket extends this caller's ticket by TicketTTL. A ticket found
// gone was passed a place, or lapsed and was purged: the caller's loop
// sees which.
func (a *attempt) renewTicket(ctx context.Context) (*snapshot, error) {
	exp := a.now().Add(TicketTTL).UnixMilli()
	u := newUpdate()
	u.sets = append(u.sets, u.path(TicketsAttr, a.me.id, ticketExpiry)+" = "+u.num(exp))
	u.conds = append(u.conds, "attribute_exists("+u.path(TicketsAttr, a.me.id)+")")
	snap, err := a.l.write(ctx, a.req.Key, u)
	if err == nil {
		a.me.exp = exp
	}
	if errors.Is(err, errCondition) {
		err = nil
	}
	return snap, err
}

// withdraw takes back what this failed attempt may have written: its
// ticket, and a lease that was passed to it or that landed unseen, which
// then goes on to the next in the queue. Best effort: a ticket left
// behind lapses, a lease expires.
func (a *attempt) withdraw(ctx context.Context) {
	if !a.wrote {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	u := newUpdate()
	if a.joined {
		u.removes = append(u.removes, u.path(TicketsAttr, a.me.id))
	}
	for _, s := range a.req.Slots {
		u.removes = append(u.removes, u.path(s.Attr, a.me.id))
	}
	if snap, err := a.l.write(ctx, a.req.Key, u); err == nil {
		a.l.passOn(ctx, a.req.Key, snap, a.req.Slots)
	}
}

// blocking is the first of the caller's slots that is full, else its first.
func (a *attempt) blocking(snap *snapshot, now int64) Slot {
	for _, s := range a.req.Slots {
		if snap.occupied(s.Attr, now) >= s.Cap {
			return s
		}
	}
	return a.req.Slots[0]
}

// full is the refusal of a caller that does not wait. It suggests trying
// again after about as long as calls here last, at most a second.
func (a *attempt) full(snap *snapshot, now int64, ahead int) *FullError {
	held, _ := a.b.meanHeld()
	s := a.req.Slots[0]
	e := &FullError{Attr: s.Attr, Cap: s.Cap, InUse: s.Cap, Waiting: ahead,
		RetryAfter: max(jitter(cmp.Or(min(held, time.Second), time.Second)), 50*time.Millisecond)}
	if snap != nil {
		s = a.blocking(snap, now)
		e.Attr, e.Cap, e.InUse = s.Attr, s.Cap, snap.occupied(s.Attr, now)
	}
	return e
}

// jitter returns a duration uniformly drawn from [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + mrand.N(d-d/2+1)
}
