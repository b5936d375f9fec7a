package lease

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
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

// Attribute names in a lease item (see Item in the package doc); a
// prefix starts a set's or a gate's name.
const (
	LeasesAttr          = "leases"
	ToolAttrPrefix      = "tool:"
	PrincipalAttrPrefix = "principal:"
	QueueAttr           = "queue"
	TasksAttr           = "tasks"
	TicketsAttr         = "tickets"
	WaitingAttrPrefix   = "waiting:"
	SeqAttr             = "seq"
	FreedAttr           = "freed"
	RefundsAttr         = "refunds"
	CallAttr            = "call_ms"
)

// IsItemAttr reports whether the limiter keeps attr in a lease item.
func IsItemAttr(attr string) bool {
	switch attr {
	case LeasesAttr, QueueAttr, TasksAttr, TicketsAttr, SeqAttr, FreedAttr, RefundsAttr, CallAttr, HoldAttr:
		return true
	}
	return isSetAttr(attr) || isLimitAttr(attr) || isGateAttr(attr) || strings.HasPrefix(attr, RateAttrPrefix)
}

// ToolAttr is the set holding the leases of one capped tool.
func ToolAttr(tool string) string { return ToolAttrPrefix + tool }

// PrincipalAttr is the set holding one principal's leases.
func PrincipalAttr(label string) string { return PrincipalAttrPrefix + label }

// WaitingAttr is the set holding one principal's tickets.
func WaitingAttr(label string) string { return WaitingAttrPrefix + label }

// QueueReserve is how many of a queue's maxQueued places a principal
// with callers waiting may not take: the last quarter, rounded down.
func QueueReserve(maxQueued int) int { return max(maxQueued, 0) / 4 }

// Defaults for Options, and the protocol's fixed times.
const (
	DefaultMargin = 2 * time.Second
	// DefaultMaxLook is the longest a waiter goes without looking at the
	// item.
	DefaultMaxLook = time.Second
	// ClaimWindow is how long, beyond the look period its ticket announces,
	// a waiter whose turn came may leave its place untaken (see Whose turn).
	ClaimWindow = 3 * time.Second
	// MaxHolder is the longest Request.Holder, in bytes.
	MaxHolder = 40
	// abandonedAfter is added to the latest expiry a write knows of to form
	// the item's TTL.
	abandonedAfter = 24 * time.Hour
	// maxEager bounds the writes made back to back from failed answers.
	maxEager = 8
	// recentView is how old a view may be to stand in for a first write.
	recentView = time.Second
	// overdueLook is the first wait of a waiter whose place was expected to
	// free already.
	overdueLook = 5 * time.Millisecond
	// MaxLookFar is the longest look period a ticket announces: the
	// longest a waiter far back in the queue goes without looking.
	MaxLookFar = 30 * time.Second
	// legacyLook is the look period of a ticket that announces none.
	legacyLook = 2 * time.Second
)

// maxPurge bounds the stale entries one write removes, well under
// DynamoDB's expression limits (a variable the fault simulation cuts).
var maxPurge = 16

// maxAheadBuckets bounds the buckets of other callers a take is
// conditioned on (see Buckets in the package doc), within DynamoDB's
// expression limits.
const maxAheadBuckets = 16

// Options configures a Limiter. The zero value means defaults.
type Options struct {
	// Margin is how long a lease outlives its call (see Guarantee in the
	// package doc). Zero means DefaultMargin.
	Margin time.Duration
	// MaxLook is the longest a waiter goes without looking at the item
	// (at most MaxLookFar). Zero means DefaultMaxLook.
	MaxLook time.Duration
	// Clock is the wall clock of expiries. Nil means time.Now.
	Clock func() time.Time
	// InstanceID starts every lease id this limiter writes. Empty means a
	// random one.
	InstanceID string
	// OnTaskStart starts a worker for a task whose turn has come (see
	// Enqueue), called inline by the request that won the start: it should
	// start the worker, not run it. Its context carries the request's
	// values but not its end: a start won is owed. Nil: this limiter
	// starts none.
	OnTaskStart func(context.Context, TaskStart)
}

// Limiter is one process's admission control over one table; safe for
// concurrent use.
type Limiter struct {
	db       API
	table    string
	margin   time.Duration
	maxLook  time.Duration
	clock    func() time.Time
	instance string
	seq      atomic.Uint64
	stats    counters
	boards   sync.Map // limiter key → *board
	onStart  func(context.Context, TaskStart)
}

// New returns a Limiter storing its items in table.
func New(db API, table string, opts Options) *Limiter {
	// A margin or a look period not positive is the default's.
	l := &Limiter{db: db, table: table, margin: cmp.Or(max(opts.Margin, 0), DefaultMargin),
		maxLook: min(cmp.Or(max(opts.MaxLook, 0), DefaultMaxLook), MaxLookFar), clock: opts.Clock, instance: opts.InstanceID, onStart: opts.OnTaskStart}
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

// newLeaseID is "<instance>.<sequence>", short as it is written twice.
func (l *Limiter) newLeaseID() string { return l.instance + "." + strconv.FormatUint(l.seq.Add(1), 36) }

// NewTaskID is a new id for a task's ticket and lease:
// "<instance>.T<sequence>" (base 36 is lowercase: IsTaskID).
func (l *Limiter) NewTaskID() string { return l.instance + ".T" + strconv.FormatUint(l.seq.Add(1), 36) }

// IsTaskID reports whether a ticket or lease id is a task's.
func IsTaskID(id string) bool {
	_, seq, _ := strings.Cut(id, ".")
	return strings.HasPrefix(seq, "T")
}

// InstanceOf is the gateway instance that wrote a lease (or ticket) id.
func InstanceOf(id string) string {
	instance, _, _ := strings.Cut(id, ".")
	return instance
}

// Request describes one acquire.
type Request struct {
	// Key is the limiter key: the item's partition key (a server id).
	Key string
	// Cap is the most leases the key may hold at once; zero: no cap.
	Cap int
	// Tool names the tool called. With ToolCap positive the lease takes a
	// place in the tool's set, and at most ToolCap leases hold one.
	Tool    string
	ToolCap int
	// PrincipalCap, when positive, is the most leases Holder may hold on
	// the key at once.
	PrincipalCap int
	// MaxQueued is the most callers that may wait on the key, fleet-wide
	// (beyond: *FullError QueueFull). Zero: nobody may wait.
	MaxQueued int
	// Hold is the longest the holder will use the place (the call
	// timeout); the lease expires at now + Hold + Margin.
	Hold time.Duration
	// CallBy, if set, is the latest the call may end: Hold is shortened
	// to it, and waiting stops when no time would be left.
	CallBy time.Time
	// Wait is how long to wait for a place; not positive: fail at once
	// with *FullError.
	Wait time.Duration
	// Breaker, if set, refuses the acquire while it is open for the
	// caller, and makes it the probe when half-open.
	Breaker *Breaker
	// Rates are the buckets the call takes a token from when admitted
	// (see Rate): "server", "principal:<Holder>", "tool:<Tool>", "key".
	Rates []Rate
	// MaxPause bounds the pause its upstream may ask for (PauseFor); zero
	// means MaxPause.
	MaxPause time.Duration
	// PauseTool: its upstream's pauses close the tool alone, not the
	// server (an OpenAPI server's operations are endpoints of their own).
	PauseTool bool
	// Adaptive, with Cap as its ceiling, lets the fleet find the key's
	// limit (see Adaptive).
	Adaptive *Adaptive
	// Holder is the caller's principal's label (1 to MaxHolder bytes of
	// printable ASCII but "/" and "*"): what principal caps, fair shares,
	// gates and queue places count.
	Holder string
}

// TakesPlace reports whether the request takes a place under a cap.
func (r *Request) TakesPlace() bool { return r.Cap > 0 || r.ToolCap > 0 || r.PrincipalCap > 0 }

// holds reports whether the call holds a lease in the item: a place, or
// a breaker to tell its outcome.
func (r *Request) holds() bool { return r.TakesPlace() || r.Breaker != nil }

func (r *Request) validate() error {
	switch {
	case r.Key == "":
		return errors.New("lease: request needs a key")
	case !r.holds() && len(r.Rates) == 0:
		return errors.New("lease: request needs a cap, a rate or a breaker")
	case r.Cap < 0 || r.ToolCap < 0 || r.PrincipalCap < 0 || r.MaxQueued < 0:
		return errors.New("lease: caps must not be negative")
	case r.ToolCap > 0 && r.Tool == "":
		return errors.New("lease: a tool cap needs the tool's name")
	case r.Hold <= 0:
		return errors.New("lease: request needs a positive hold")
	case r.Holder == "" || len(r.Holder) > MaxHolder:
		return fmt.Errorf("lease: holder label must be 1 to %d bytes", MaxHolder)
	}
	if strings.ContainsFunc(r.Holder, func(c rune) bool { return c <= ' ' || c > '~' || c == '/' || c == '*' }) {
		return fmt.Errorf("lease: holder label %q has a character other than printable ASCII but '/' and '*'", r.Holder)
	}
	if r.Adaptive != nil && (r.Cap <= 0 || r.Adaptive.Min < 1 || r.Adaptive.Min > r.Cap) {
		return errors.New("lease: an adaptive limit needs a cap as its ceiling and a minimum from 1 to it")
	}
	if r.Breaker != nil && (r.Breaker.Name == "" || r.Breaker.Name != r.Tool || r.Breaker.Threshold < 1) {
		return errors.New("lease: a breaker needs its tool's name and a threshold")
	}
	if r.MaxPause < 0 || r.MaxPause > MaxPause {
		return fmt.Errorf("lease: MaxPause must be from 0 to %v", MaxPause)
	}
	for i, rt := range r.Rates {
		if rt.PerMinute <= 0 || rt.Name == "" {
			return fmt.Errorf("lease: rate %q of %d a minute; want a name and a positive limit", rt.Name, rt.PerMinute)
		}
		if slices.ContainsFunc(r.Rates[:i], func(o Rate) bool { return o.Name == rt.Name }) {
			return fmt.Errorf("lease: rate %q twice", rt.Name)
		}
	}
	return nil
}

// hold is how long a place taken at localNow may be held.
func (r *Request) hold(localNow time.Time) time.Duration {
	return earlier(localNow.Add(r.Hold), r.CallBy).Sub(localNow)
}

// earlier is t, or by when by is set and comes before t.
func earlier(t, by time.Time) time.Time {
	if !by.IsZero() && by.Before(t) {
		return by
	}
	return t
}

// Reasons a FullError gives: every place the call needs is taken; one is
// free, but callers waiting before it come first; the call would wait and
// MaxQueued callers already do; the upstream asked for a pause; an
// operator holds the key.
const (
	AtCapacity  = "at_capacity"
	QueuedAhead = "queued_ahead"
	QueueFull   = "queue_full"
	Paused      = "paused"
	Held        = "held"
)

// FullError means no place was free for the caller and it did not (or
// could not) wait.
type FullError struct {
	Reason string
	// What names the cap that refused it: "server", "tool" or "principal";
	// Cap and InUse are that cap and its live leases, Waiting the callers
	// waiting on the key.
	What                string
	Cap, InUse, Waiting int
	// RetryAfter is when the calls held are expected to have made room.
	RetryAfter time.Duration
}

func (e *FullError) Error() string {
	switch e.Reason {
	case QueueFull:
		return fmt.Sprintf("lease: %d callers already wait (%d of %d in use)", e.Waiting, e.InUse, e.Cap)
	case QueuedAhead:
		return fmt.Sprintf("lease: %s has %d callers waiting ahead (%d of %d in use)", e.What, e.Waiting, e.InUse, e.Cap)
	case Paused:
		return fmt.Sprintf("lease: paused at its upstream's request for %v more", e.RetryAfter.Round(time.Millisecond))
	case Held:
		return fmt.Sprintf("lease: held by an operator for %v more", e.RetryAfter.Round(time.Millisecond))
	}
	return fmt.Sprintf("lease: %s is full (%d of %d in use)", e.What, e.InUse, e.Cap)
}

// WaitTimeoutError means the request waited its whole budget for a place.
type WaitTimeoutError struct {
	Waited time.Duration
}

func (e *WaitTimeoutError) Error() string {
	return fmt.Sprintf("lease: no place after waiting %v", e.Waited.Round(time.Millisecond))
}

// ErrNotHeld means a release or renewal found the lease gone (released,
// or purged once expired).
var ErrNotHeld = errors.New("lease: not held")

// Lease is a held place.
type Lease struct {
	l   *Limiter
	req Request // as granted: a task's with its worker's Hold and CallBy
	id  string
	// exps are the expiries the store may hold for it: the one known
	// written, then those of unknown renewals.
	exps     []int64
	since    time.Time // when the holder got it (local clock)
	released atomic.Bool

	// Expiry is when the lease lapses; CallDeadline, Margin before it on
	// the local monotonic clock, when the call must end. Both move with
	// each renewal: read them while none runs.
	Expiry       time.Time
	CallDeadline time.Time
	// Waited is how long Acquire spent before the lease was granted.
	Waited time.Duration
	// QueuedBehind is how many live tickets came before its own as the
	// item stood after its join (0: it never queued).
	QueuedBehind int
	// InFlight is the key's live leases right after its grant, its own
	// included; Limit the key's cap (or adaptive limit) then.
	InFlight int
	Limit    int

	round      int64     // the adaptive round it was granted in
	probes     []gateRef // the entries it is the probe of
	pauseUntil int64     // the pause its release asks for (PauseFor)
	// charged is what its take's own answer showed of its buckets (nil:
	// not known), which bounds what a refund gives back.
	charged *charged
	task    bool // claimed from a task's ticket, which its release removes
	// claim is what a task's claim named itself in the ticket (Claim):
	// its release and renewals are conditioned on the ticket naming it.
	claim string
}

// TakesPlace reports whether the lease holds an entry in the item.
func (ls *Lease) TakesPlace() bool { return ls.req.holds() }

// Probe reports whether this lease is its breaker's half-open probe.
func (ls *Lease) Probe() bool { return len(ls.probes) > 0 }

// ID is the lease id, "<instance>.<sequence>" (see InstanceOf).
func (ls *Lease) ID() string { return ls.id }

// Key is the limiter key the lease was taken on.
func (ls *Lease) Key() string { return ls.req.Key }

// firstExp is the earliest expiry the store may hold for the lease.
func (ls *Lease) firstExp() int64 { return slices.Min(ls.exps) }
