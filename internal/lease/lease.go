package lease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
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
)

// ToolAttr is the attribute holding the leases of one capped tool.
func ToolAttr(tool string) string { return ToolAttrPrefix + tool }

// WaitingAttrPrefix prefixes the map of waiters that have waited longer
// than Options.PriorityAfter for a place in one slot map
// ("waiting:leases", "waiting:tool:<name>"): waiter id → when the mark
// lapses (Unix ms). While it holds a live mark, only marked waiters may
// take a place in that slot, so newcomers cannot keep writing past a
// waiter on another instance.
const WaitingAttrPrefix = "waiting:"

// WaitingAttr is the waiting-marks map of a slot map.
func WaitingAttr(attr string) string { return WaitingAttrPrefix + attr }

// Defaults for Options.
const (
	DefaultMargin        = 2 * time.Second
	DefaultMinBackoff    = 25 * time.Millisecond
	DefaultMaxBackoff    = 150 * time.Millisecond
	DefaultPriorityAfter = time.Second
	// markTTL is how long a waiting mark lasts unless renewed: a waiter
	// that dies blocks newcomers for at most that long.
	markTTL = time.Second
	// markedMaxBackoff bounds the backoff of a marked waiter that is next
	// in the fleet: while it is marked, a place it does not take stays
	// free.
	markedMaxBackoff = 50 * time.Millisecond
	// abandonedAfter is added to a lease's expiry to form the item's TTL:
	// DynamoDB may delete an item nobody has touched for that long.
	abandonedAfter = 24 * time.Hour
	// maxPurge bounds how many expired leases one write removes, keeping
	// the expression well under DynamoDB's size limits.
	maxPurge = 25
)

// Options configures a Limiter. The zero value means defaults.
type Options struct {
	// Margin is added to a lease's hold time to form its expiry. A lease
	// outlives its call by Margin, so another instance purges it only after
	// the call was cancelled, as long as clocks differ by less than Margin.
	// Zero means DefaultMargin.
	Margin time.Duration
	// MinBackoff and MaxBackoff bound the jittered wait between a waiter's
	// reads of a full item. Zero means the defaults.
	MinBackoff, MaxBackoff time.Duration
	// Clock returns the wall-clock time written into and compared with
	// lease expiries. Nil means time.Now. Tests use it to simulate skew.
	Clock func() time.Time
	// InstanceID prefixes every lease id this limiter writes, naming the
	// holder. Empty means a random id.
	InstanceID string
	// PriorityAfter is how long a waiter waits before it marks itself in
	// the item and so goes before every caller that has waited less, on
	// any instance. Zero means DefaultPriorityAfter; negative, never.
	PriorityAfter time.Duration
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
	priority time.Duration
	instance string
	seq      atomic.Uint64
	stats    counters
	lines    lines
	// marked holds, per limiter key, until when (Unix ms) the item was
	// last seen holding a live waiting mark.
	marked sync.Map
}

// New returns a Limiter storing its items in table.
func New(db API, table string, opts Options) *Limiter {
	l := &Limiter{
		db:       db,
		table:    table,
		margin:   opts.Margin,
		minBack:  opts.MinBackoff,
		maxBack:  opts.MaxBackoff,
		clock:    opts.Clock,
		priority: opts.PriorityAfter,
		instance: opts.InstanceID,
	}
	if l.priority == 0 {
		l.priority = DefaultPriorityAfter
	}
	if l.margin <= 0 {
		l.margin = DefaultMargin
	}
	if l.minBack <= 0 {
		l.minBack = DefaultMinBackoff
	}
	if l.maxBack <= 0 {
		l.maxBack = DefaultMaxBackoff
	}
	if l.maxBack < l.minBack {
		l.maxBack = l.minBack
	}
	if l.clock == nil {
		l.clock = time.Now
	}
	if l.instance == "" {
		l.instance = NewInstanceID()
	}
	return l
}

// InstanceID is the prefix of this limiter's lease ids.
func (l *Limiter) InstanceID() string { return l.instance }

// Margin is the time a lease outlives its call.
func (l *Limiter) Margin() time.Duration { return l.margin }

const idAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// NewInstanceID returns 8 random base-62 characters.
func NewInstanceID() string {
	var b strings.Builder
	max := big.NewInt(int64(len(idAlphabet)))
	for range 8 {
		n, err := rand.Int(rand.Reader, max)
		if err != nil {
			panic("crypto/rand failed: " + err.Error())
		}
		b.WriteByte(idAlphabet[n.Int64()])
	}
	return b.String()
}

func (l *Limiter) newLeaseID() string {
	return l.instance + "." + strconv.FormatUint(l.seq.Add(1), 36)
}

// Slot is one counter a lease counts against: a map attribute of the item
// and the cap on its size.
type Slot struct {
	// Attr is the map attribute: ServerAttr or ToolAttr(name).
	Attr string
	// Cap is the most live leases the map may hold. Zero means no cap: the
	// lease is recorded (for a breaker's sake) but never refused for room.
	Cap int
}

// Request describes one acquire.
type Request struct {
	// Key is the limiter key: the item's partition key (the server id).
	Key string
	// Slots are the counters the lease takes a place in, all in one write.
	Slots []Slot
	// Hold is the longest the holder will use the slot: the call timeout.
	// The lease expires at now + Hold + Margin.
	Hold time.Duration
	// CallBy, if set, is the latest instant the call may end (for example
	// the Lambda deadline minus time to answer). Hold is shortened so the
	// call ends by then, and waiting stops when no time would be left.
	CallBy time.Time
	// Wait is how long to wait for a place when every one is taken. Zero or
	// negative means do not wait: fail at once with *FullError.
	Wait time.Duration
	// Breaker, if set, refuses the acquire while that breaker is open, and
	// makes it the probe when the breaker is half-open and nobody else is.
	Breaker *Breaker
}

// FullError means every slot was taken and the request did not wait.
type FullError struct {
	// Attr is the map that was full.
	Attr string
	// Cap is its cap, as requested.
	Cap int
	// RetryAfter is a jittered hint for when to try again.
	RetryAfter time.Duration
}

func (e *FullError) Error() string {
	return fmt.Sprintf("lease: %s is full (%d in use)", e.Attr, e.Cap)
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
	attrs []string
	id    string
	exp   int64 // expiry in Unix ms, as stored
	// released guards against double release from one holder.
	released atomic.Bool

	// Expiry is when the lease lapses and may be purged by anyone.
	Expiry time.Time
	// CallDeadline is when the holder's call must end; it is Margin before
	// Expiry and measured on the local monotonic clock.
	CallDeadline time.Time
	// Waited is how long Acquire spent before the lease was granted.
	Waited time.Duration
	// InFlight is how many leases the first slot held right after this
	// one was granted, this one included (leases expired but not yet
	// purged count too).
	InFlight int

	breaker *Breaker
	probe   bool
}

// Probe reports whether this lease is its breaker's half-open probe.
func (ls *Lease) Probe() bool { return ls.probe }

// ID is the lease id (the holder's instance id, '.', a sequence number).
func (ls *Lease) ID() string { return ls.id }

// Key is the limiter key the lease was taken on.
func (ls *Lease) Key() string { return ls.key }

// Acquire takes a place in every slot of req in one conditional write. When
// a slot is full it purges leases that have expired (each removal
// conditioned on the expiry it saw), and otherwise fails with *FullError or,
// if req.Wait is positive, waits with jittered backoff, reading the item
// before each write attempt, until a place frees, req.Wait passes
// (*WaitTimeoutError) or ctx ends.
func (l *Limiter) Acquire(ctx context.Context, req Request) (*Lease, error) {
	if req.Key == "" || len(req.Slots) == 0 {
		return nil, errors.New("lease: request needs a key and at least one slot")
	}
	for i, s := range req.Slots {
		if s.Cap < 0 || s.Attr == "" || (s.Cap == 0 && req.Breaker == nil) {
			return nil, fmt.Errorf("lease: slot %q has cap %d; an uncapped slot without a breaker takes no lease", s.Attr, s.Cap)
		}
		for _, o := range req.Slots[:i] {
			if o.Attr == s.Attr {
				return nil, fmt.Errorf("lease: slot %q given twice", s.Attr)
			}
		}
	}
	if req.Hold <= 0 {
		return nil, errors.New("lease: hold must be positive")
	}
	start := time.Now()
	a := &attempt{l: l, req: req, id: l.newLeaseID()}
	a.since = a.now().UnixMilli()
	waitUntil := start.Add(max(req.Wait, 0))
	if dl, ok := ctx.Deadline(); ok && dl.Before(waitUntil) {
		waitUntil = dl
	}
	if !req.CallBy.IsZero() && req.CallBy.Before(waitUntil) {
		waitUntil = req.CallBy
	}
	backoff := l.minBack
	var snap *snapshot // what the last failed write or read showed
	eager := 0         // writes since the last wait
	set := slotSet(req.Slots)
	var w *waiter // this acquire's place in the process's line, once it waits
	defer func() {
		if w != nil {
			l.lines.leave(w)
		}
		a.unmark(ctx)
	}()
	if req.Wait > 0 && l.lines.busy(req.Key, set) {
		// Others here already wait for these slots: no writing past them.
		w = l.lines.join(req.Key, set, req)
	} else if l.marksLikely(req.Key) {
		// Lately the item had marked waiters, who a newcomer may not pass:
		// look (a read) rather than leap (a write that would fail).
		var err error
		if snap, err = a.read(ctx); err != nil {
			return nil, err
		}
	}
	for {
		if w != nil {
			select {
			case got := <-w.offer:
				if got != nil {
					return l.handedOver(got, start), nil
				}
			default:
			}
		}
		if w != nil && !w.head() {
			if err := a.awaitTurn(ctx, w, waitUntil, start, snap); err != nil {
				return nil, err
			}
			// The waiter ahead got its place or gave up: look again.
			var err error
			if snap, err = a.read(ctx); err != nil {
				return nil, err
			}
			eager = 0
		}
		if snap != nil && req.Breaker != nil {
			now := a.now()
			switch snap.br.phase(now) {
			case phaseOpen:
				l.stats.circuitOpen.Add(1)
				return nil, &CircuitOpenError{Name: req.Breaker.Name, RetryAfter: time.UnixMilli(snap.br.openUntil).Sub(now)}
			case phaseProbeActive:
				l.stats.circuitOpen.Add(1)
				return nil, &CircuitOpenError{Name: req.Breaker.Name, HalfOpen: true,
					RetryAfter: max(time.UnixMilli(snap.br.probeExp).Sub(now), 50*time.Millisecond)}
			case phaseHalfOpen:
				a.probe, a.seenOpenUntil = true, snap.br.openUntil
			default:
				a.probe = false
			}
		}
		if snap != nil && snap.backlog(a.now(), req.Slots) {
			// More expired leases than one acquire may purge: clear some.
			next, err := a.purge(ctx, snap)
			if err != nil {
				return nil, err
			}
			snap = next
			continue
		}
		if a.room(snap) && eager < maxEager {
			eager++
			ls, next, err := a.try(ctx, snap)
			if err != nil {
				return nil, err
			}
			if ls != nil {
				ls.Waited = time.Since(start)
				l.stats.acquired.Add(1)
				return ls, nil
			}
			// A place is free, or expired leases can be purged: loop and
			// write again at once with what the item now shows.
			snap = next
			continue
		}
		full := Slot{Attr: req.Slots[0].Attr, Cap: req.Slots[0].Cap}
		if snap != nil {
			full = a.blockingSlot(snap)
		}
		if req.Wait <= 0 {
			l.stats.shed.Add(1)
			return nil, &FullError{Attr: full.Attr, Cap: full.Cap, RetryAfter: l.retryHint(snap, a.now())}
		}
		if w == nil {
			w = l.lines.join(req.Key, set, req)
			if !w.head() {
				continue // wait in line, not at the store
			}
		}
		if l.priority > 0 && time.Since(start) >= l.priority {
			// Waited long: go before newcomers, fleet-wide.
			if err := a.mark(ctx, snap, full.Attr); err != nil {
				return nil, err
			}
		}
		// Wait, then read (cheap, and never a failed write) before writing.
		poll := backoff
		if a.front(snap) {
			// Next to be served fleet-wide: a place it does not take stays
			// free, so look often.
			poll = min(poll, markedMaxBackoff)
		}
		sleep := jitter(poll)
		if snap != nil {
			if untilExp := snap.earliestExpiry(full.Attr).Sub(a.now()); untilExp > 0 && untilExp < sleep {
				// The oldest lease lapses first: be there to purge it.
				sleep = untilExp + time.Millisecond
			}
		}
		if time.Now().Add(sleep).After(waitUntil) {
			sleep = time.Until(waitUntil)
		}
		if sleep <= 0 {
			l.stats.waitTimeouts.Add(1)
			return nil, &WaitTimeoutError{Attr: full.Attr, Waited: time.Since(start)}
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lease: waiting for %s: %w", req.Key, ctx.Err())
		case <-t.C:
		case <-w.kick:
			// A place was given back in this process: write for it now,
			// unless marked waiters elsewhere come first.
			t.Stop()
			snap, eager = nil, 0
			if a.markAttr == "" && l.marksLikely(req.Key) {
				var err error
				if snap, err = a.read(ctx); err != nil {
					return nil, err
				}
			}
			continue
		case got := <-w.offer:
			t.Stop()
			if got != nil {
				return l.handedOver(got, start), nil
			}
			// The hand-off failed; the place may be free: write now.
			snap, eager = nil, 0
			continue
		}
		backoff = min(backoff*3/2, l.maxBack)
		eager = 0
		var err error
		snap, err = a.read(ctx)
		if err != nil {
			return nil, err
		}
		if !time.Now().Before(waitUntil) && !a.room(snap) {
			l.stats.waitTimeouts.Add(1)
			return nil, &WaitTimeoutError{Attr: full.Attr, Waited: time.Since(start)}
		}
	}
}

// handedOver completes an acquire with the lease a holder in this process
// passed to it.
func (l *Limiter) handedOver(ls *Lease, start time.Time) *Lease {
	ls.Waited = time.Since(start)
	l.stats.acquired.Add(1)
	return ls
}

// awaitTurn holds a waiter until it heads its line, ctx ends or waiting
// time runs out.
func (a *attempt) awaitTurn(ctx context.Context, w *waiter, until, start time.Time, snap *snapshot) error {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-w.turn:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lease: waiting for %s: %w", a.req.Key, ctx.Err())
	case <-t.C:
		attr := a.req.Slots[0].Attr
		if snap != nil {
			attr = snap.fullSlot(a.now(), a.req.Slots).Attr
		}
		a.l.stats.waitTimeouts.Add(1)
		return &WaitTimeoutError{Attr: attr, Waited: time.Since(start)}
	}
}

// maxEager bounds the writes an acquire makes back to back, without waiting,
// when the item keeps changing under it (a hot item): after that many it
// backs off like a waiter, or is shed.
const maxEager = 6

// retryHint suggests when a shed caller should retry: up to a second, sooner
// if the oldest lease lapses sooner, jittered so shed callers spread out.
func (l *Limiter) retryHint(s *snapshot, now time.Time) time.Duration {
	d := time.Second
	if s == nil {
		return jitter(d)
	}
	for _, m := range s.maps {
		for _, exp := range m {
			if until := time.UnixMilli(exp).Sub(now); until > 0 && until < d {
				d = until
			}
		}
	}
	return max(jitter(d), 50*time.Millisecond)
}

// jitter returns a duration uniformly drawn from [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + mrand.N(d-half+1)
}

// attempt is the state of one Acquire call.
type attempt struct {
	l   *Limiter
	req Request
	id  string
	// probe: the item showed the breaker half-open with no live probe, so
	// the next write tries to become it.
	probe         bool
	seenOpenUntil int64
	// markAttr and markID name this waiter's waiting mark while it has
	// one; markUntil is when it lapses.
	markAttr, markID string
	markUntil        time.Time
	// since is when the acquire began, on the wall clock (Unix ms): the
	// order of marked waiters.
	since int64
}

func (a *attempt) now() time.Time { return a.l.clock() }

func (a *attempt) key() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: a.req.Key}}
}

// try makes one conditional write that adds the lease and purges what snap
// shows expired. It returns the lease on success, or what the item holds
// now when the condition failed.
func (a *attempt) try(ctx context.Context, snap *snapshot) (*Lease, *snapshot, error) {
	l := a.l
	wallNow := a.now()
	localNow := time.Now()
	hold := a.req.Hold
	if !a.req.CallBy.IsZero() {
		hold = min(hold, a.req.CallBy.Sub(localNow))
	}
	if hold <= 0 {
		return nil, nil, &WaitTimeoutError{Attr: a.req.Slots[0].Attr, Waited: 0}
	}
	exp := wallNow.Add(hold + l.margin).UnixMilli()

	b := newExprBuilder()
	idName := b.name(a.id)
	expVal := b.value(&types.AttributeValueMemberN{Value: strconv.FormatInt(exp, 10)})
	var sets, removes, conds []string
	for i, s := range a.req.Slots {
		m := b.name(s.Attr)
		sets = append(sets, m+"."+idName+" = "+expVal)
		limit := s.Cap
		if snap != nil {
			for _, p := range snap.expired(s.Attr, wallNow, maxPurge) {
				pn := b.name(p.id)
				removes = append(removes, m+"."+pn)
				conds = append(conds, m+"."+pn+" = "+b.value(&types.AttributeValueMemberN{Value: strconv.FormatInt(p.exp, 10)}))
				limit++
			}
		}
		if s.Cap > 0 {
			conds = append(conds, "size("+m+") < "+b.value(&types.AttributeValueMemberN{Value: strconv.Itoa(limit)}))
		} else {
			// No cap, but the map must exist for the SET to be valid.
			conds = append(conds, "attribute_exists("+m+")")
		}
		if i == 0 {
			conds = append(conds, "attribute_not_exists("+m+"."+idName+")")
		}
		if s.Cap > 0 && a.markAttr == "" {
			// Unmarked: only if nobody marked waits for this slot (marks
			// that lapsed are removed on the way).
			wm := b.name(WaitingAttr(s.Attr))
			limit := 1
			if snap != nil {
				for _, p := range snap.expired(WaitingAttr(s.Attr), wallNow, maxPurge) {
					pn := b.name(p.id)
					removes = append(removes, wm+"."+pn)
					conds = append(conds, wm+"."+pn+" = "+b.value(number(p.exp)))
					limit++
				}
			}
			conds = append(conds, "(attribute_not_exists("+wm+") OR size("+wm+") < "+b.value(number(int64(limit)))+")")
		}
	}
	if a.markAttr != "" {
		removes = append(removes, b.name(a.markAttr)+"."+b.name(a.markID))
	}
	if br := a.req.Breaker; br != nil {
		ba := br.attrs()
		bo := b.name(ba.openUntil)
		if a.probe {
			bp, bpe := b.name(ba.probe), b.name(ba.probeExp)
			conds = append(conds, bo+" = "+b.value(number(a.seenOpenUntil)),
				"(attribute_not_exists("+bp+") OR "+bpe+" < "+b.value(number(wallNow.UnixMilli()))+")")
			sets = append(sets, bp+" = "+b.value(&types.AttributeValueMemberS{Value: a.id}), bpe+" = "+expVal)
		} else {
			conds = append(conds, "(attribute_not_exists("+bo+") OR "+bo+" = "+b.value(number(0))+")")
		}
	}
	ttl := time.UnixMilli(exp).Add(abandonedAfter).Unix()
	sets = append(sets, b.name(store.TTLAttr)+" = "+b.value(&types.AttributeValueMemberN{Value: strconv.FormatInt(ttl, 10)}))
	update := "SET " + strings.Join(sets, ", ")
	if len(removes) > 0 {
		update += " REMOVE " + strings.Join(removes, ", ")
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                           aws.String(l.table),
		Key:                                 a.key(),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(strings.Join(conds, " AND ")),
		ExpressionAttributeNames:            b.names,
		ExpressionAttributeValues:           b.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		// The item after the write tells how many are in flight; it costs
		// no capacity, only response bytes.
		ReturnValues: types.ReturnValueAllNew,
	}
	l.stats.writes.Add(1)
	out, err := l.db.UpdateItem(ctx, in)
	if err == nil {
		a.markAttr = "" // removed by this write
		purged := len(removes)
		l.stats.purged.Add(int64(purged))
		if a.probe {
			l.stats.probes.Add(1)
		}
		ls := a.lease(exp, localNow.Add(hold))
		if m, ok := out.Attributes[a.req.Slots[0].Attr].(*types.AttributeValueMemberM); ok {
			ls.InFlight = len(m.Value)
		}
		l.noteMarks(a.req.Key, parseSnapshot(out.Attributes, a.req.Slots, nil), a.req.Slots)
		return ls, nil, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		if ctx.Err() != nil {
			a.cleanup(ctx)
			return nil, nil, fmt.Errorf("lease: acquire %s: %w", a.req.Key, ctx.Err())
		}
		// The write may still have landed (a timeout after the request
		// reached DynamoDB): remove it so it does not hold a place until
		// it expires. Best effort.
		a.cleanup(ctx)
		return nil, nil, fmt.Errorf("lease: acquire %s: %w", a.req.Key, err)
	}
	l.stats.failedWrites.Add(1)
	var next *snapshot
	if len(ccf.Item) > 0 {
		next = parseSnapshot(ccf.Item, a.req.Slots, a.req.Breaker)
		l.noteMarks(a.req.Key, next, a.req.Slots)
	} else {
		// DynamoDB returns the item with the failure; some compatible
		// servers do not, and the item may not exist yet: read it.
		next, err = a.read(ctx)
		if err != nil {
			return nil, nil, err
		}
	}
	if own, ok := next.holds(a.req.Slots[0].Attr, a.id); ok && own == exp {
		// An earlier attempt of this very write landed (the SDK retried
		// it): we hold the lease.
		a.markAttr = "" // that write removed it
		return a.lease(exp, localNow.Add(hold)), nil, nil
	} else if ok {
		a.id = a.l.newLeaseID()
	}
	if missing := next.missing(a.req.Slots); len(missing) > 0 {
		if err := a.init(ctx, missing); err != nil {
			return nil, nil, err
		}
		next = nil // unknown again: write at once
	}
	return nil, next, nil
}

// purge removes up to maxPurge expired leases per slot, without acquiring,
// each removal conditioned on the expiry snap showed. It returns the item
// as it is now.
func (a *attempt) purge(ctx context.Context, snap *snapshot) (*snapshot, error) {
	now := a.now()
	b := newExprBuilder()
	var removes, conds []string
	n := 0
	for _, s := range a.req.Slots {
		m := b.name(s.Attr)
		for _, p := range snap.expired(s.Attr, now, maxPurge) {
			pn := b.name(p.id)
			removes = append(removes, m+"."+pn)
			conds = append(conds, m+"."+pn+" = "+b.value(&types.AttributeValueMemberN{Value: strconv.FormatInt(p.exp, 10)}))
			n++
		}
	}
	a.l.stats.writes.Add(1)
	_, err := a.l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(a.l.table),
		Key:                                 a.key(),
		UpdateExpression:                    aws.String("REMOVE " + strings.Join(removes, ", ")),
		ConditionExpression:                 aws.String(strings.Join(conds, " AND ")),
		ExpressionAttributeNames:            b.names,
		ExpressionAttributeValues:           b.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		a.l.stats.purged.Add(int64(n))
	case errors.As(err, &ccf):
		a.l.stats.failedWrites.Add(1)
		if len(ccf.Item) > 0 {
			return parseSnapshot(ccf.Item, a.req.Slots, a.req.Breaker), nil
		}
	default:
		return nil, fmt.Errorf("lease: purge %s: %w", a.req.Key, err)
	}
	return a.read(ctx)
}

func (a *attempt) lease(exp int64, callDeadline time.Time) *Lease {
	attrs := make([]string, len(a.req.Slots))
	for i, s := range a.req.Slots {
		attrs[i] = s.Attr
	}
	return &Lease{
		l:            a.l,
		key:          a.req.Key,
		attrs:        attrs,
		id:           a.id,
		exp:          exp,
		breaker:      a.req.Breaker,
		probe:        a.probe,
		Expiry:       time.UnixMilli(exp),
		CallDeadline: callDeadline,
	}
}

// init creates the item and the missing maps, leaving existing ones alone.
func (a *attempt) init(ctx context.Context, attrs []string) error {
	b := newExprBuilder()
	empty := b.value(&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}})
	sets := make([]string, len(attrs))
	for i, attr := range attrs {
		n := b.name(attr)
		sets[i] = n + " = if_not_exists(" + n + ", " + empty + ")"
	}
	a.l.stats.writes.Add(1)
	a.l.stats.initWrites.Add(1)
	_, err := a.l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(a.l.table),
		Key:                       a.key(),
		UpdateExpression:          aws.String("SET " + strings.Join(sets, ", ")),
		ExpressionAttributeNames:  b.names,
		ExpressionAttributeValues: b.values,
	})
	if err != nil {
		return fmt.Errorf("lease: create item %s: %w", a.req.Key, err)
	}
	return nil
}

// read fetches the slot maps with a strongly consistent read.
func (a *attempt) read(ctx context.Context) (*snapshot, error) {
	b := newExprBuilder()
	proj := make([]string, 0, len(a.req.Slots)+4)
	for _, s := range a.req.Slots {
		proj = append(proj, b.name(s.Attr), b.name(WaitingAttr(s.Attr)))
	}
	if br := a.req.Breaker; br != nil {
		ba := br.attrs()
		proj = append(proj, b.name(ba.fails), b.name(ba.openUntil), b.name(ba.probe), b.name(ba.probeExp))
	}
	a.l.stats.reads.Add(1)
	out, err := a.l.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(a.l.table),
		Key:                      a.key(),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String(strings.Join(proj, ", ")),
		ExpressionAttributeNames: b.names,
	})
	if err != nil {
		return nil, fmt.Errorf("lease: read %s: %w", a.req.Key, err)
	}
	snap := parseSnapshot(out.Item, a.req.Slots, a.req.Breaker)
	a.l.noteMarks(a.req.Key, snap, a.req.Slots)
	return snap, nil
}

// cleanup removes this attempt's lease id if a failed write landed anyway.
func (a *attempt) cleanup(ctx context.Context) {
	ls := a.lease(0, time.Time{})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = ls.remove(cctx)
}
