package lease

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// A waiter polls the store at random; a newcomer writes at once. Left at
// that, a caller that keeps arriving just after places are given back (an
// agent making calls one after another) takes them again and again while
// a waiter on another instance waits out its queue timeout. So a waiter
// that has waited PriorityAfter marks itself in the item's waiting map for
// the slot it cannot get; while a live mark is there, only marked waiters
// take places in that slot: everyone who has waited long goes first,
// fleet-wide. A mark lapses markTTL after its waiter last renewed it, so a
// waiter that dies holds newcomers back for at most that long, and it is
// removed by the write that gets its waiter a place, or when the waiter
// gives up. Marks only ever narrow who may write: the cap is the lease
// maps' alone.

// room reports whether a write by this attempt would find a place: room in
// every slot and, unless it is marked itself, no live mark on a capped one.
func (a *attempt) room(snap *snapshot) bool {
	now := a.now()
	if !snap.room(now, a.req.Slots) {
		return false
	}
	if snap == nil {
		return true
	}
	if a.markAttr != "" {
		// Marked: behind the waiters marked before it, as many as there
		// are free places, so marked waiters do not all write for one.
		for _, s := range a.req.Slots {
			if s.Cap > 0 && WaitingAttr(s.Attr) == a.markAttr && a.ahead(snap) >= s.Cap-snap.occupied(s.Attr, now) {
				return false
			}
		}
		return true
	}
	for _, s := range a.req.Slots {
		if s.Cap > 0 && snap.occupied(WaitingAttr(s.Attr), now) > 0 {
			return false
		}
	}
	return true
}

// ahead counts the live marks in snap older than this waiter's own.
func (a *attempt) ahead(snap *snapshot) int {
	now := a.now().UnixMilli()
	n := 0
	for id, exp := range snap.maps[a.markAttr] {
		if exp >= now && id != a.markID && markSince(id) < a.since {
			n++
		}
	}
	return n
}

// front reports whether this waiter is marked and among the first Cap
// marked waiters of its slot, so the next place given back is its: only
// those poll fast, the marked waiters behind them at the usual backoff.
func (a *attempt) front(snap *snapshot) bool {
	if a.markAttr == "" {
		return false
	}
	if snap == nil {
		return true
	}
	for _, s := range a.req.Slots {
		if s.Cap > 0 && WaitingAttr(s.Attr) == a.markAttr {
			return a.ahead(snap) < s.Cap
		}
	}
	return true
}

// markSince reads when a marked waiter started waiting from its mark's id
// ("<Unix ms>.<lease id>"); an id of another shape counts as the oldest.
func markSince(id string) int64 {
	ms, _, _ := strings.Cut(id, ".")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// blockingSlot is the slot that keeps this attempt waiting: the first
// full one, else the first with marked waiters ahead of it.
func (a *attempt) blockingSlot(snap *snapshot) Slot {
	now := a.now()
	for _, s := range a.req.Slots {
		if s.Cap > 0 && snap.occupied(s.Attr, now) >= s.Cap {
			return s
		}
	}
	for _, s := range a.req.Slots {
		if s.Cap > 0 && snap.occupied(WaitingAttr(s.Attr), now) > 0 {
			return s
		}
	}
	return a.req.Slots[0]
}

// mark puts (or renews) this waiter's mark in the waiting map of attr.
func (a *attempt) mark(ctx context.Context, snap *snapshot, attr string) error {
	now := a.now()
	if a.markAttr != "" && a.markUntil.Sub(now) > markTTL/2 {
		return nil
	}
	wattr := a.markAttr
	if wattr == "" {
		wattr = WaitingAttr(attr)
		a.markID = strconv.FormatInt(a.since, 10) + "." + a.id
		if snap == nil || snap.maps[wattr] == nil {
			if err := a.init(ctx, []string{wattr}); err != nil {
				return err
			}
		}
	}
	until := now.Add(markTTL)
	// Recorded before the write: a write cut off by cancellation may
	// still land, and unmark must then remove it.
	a.markAttr = wattr
	b := newExprBuilder()
	a.l.stats.writes.Add(1)
	_, err := a.l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(a.l.table),
		Key:                       a.key(),
		UpdateExpression:          aws.String("SET " + b.name(wattr) + "." + b.name(a.markID) + " = " + b.value(number(until.UnixMilli()))),
		ExpressionAttributeNames:  b.names,
		ExpressionAttributeValues: b.values,
	})
	if err != nil {
		return fmt.Errorf("lease: mark waiter on %s: %w", a.req.Key, err)
	}
	a.markUntil = until
	a.l.stats.marks.Add(1)
	return nil
}

// unmark removes this waiter's mark, if it still has one (it gave up, or
// got its place without a write of its own). Best effort: a mark left
// behind lapses by itself.
func (a *attempt) unmark(ctx context.Context) {
	if a.markAttr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	b := newExprBuilder()
	a.l.stats.writes.Add(1)
	_, _ = a.l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(a.l.table),
		Key:                      a.key(),
		UpdateExpression:         aws.String("REMOVE " + b.name(a.markAttr) + "." + b.name(a.markID)),
		ExpressionAttributeNames: b.names,
	})
	a.markAttr = ""
}

// noteMarks records that snap showed live marks on key's capped slots, so
// newcomers read before writing until they lapse.
func (l *Limiter) noteMarks(key string, snap *snapshot, slots []Slot) {
	if snap == nil {
		return
	}
	now := l.clock().UnixMilli()
	var until int64
	for _, s := range slots {
		for _, exp := range snap.maps[WaitingAttr(s.Attr)] {
			if exp > now {
				until = max(until, exp)
			}
		}
	}
	if until > 0 {
		l.marked.Store(key, until)
	} else if _, ok := l.marked.Load(key); ok {
		l.marked.Delete(key)
	}
}

// marksLikely reports whether key's item was seen with a live mark that
// has not lapsed yet.
func (l *Limiter) marksLikely(key string) bool {
	v, ok := l.marked.Load(key)
	return ok && v.(int64) > l.clock().UnixMilli()
}
