package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Outcome is what a finished call tells its breaker.
type Outcome int

const (
	// Success: the upstream answered (a tool's own isError answer
	// included). It resets the failure count; a probe's success closes
	// the breaker.
	Success Outcome = iota
	// Failure: an infrastructure failure of the upstream (timeout,
	// unreachable, broken transport, 5xx). It counts towards opening the
	// breaker; a probe's failure reopens it.
	Failure
	// Abandoned: the call ended without telling anything about the
	// upstream's health (the caller went away, the lease was lost, the
	// gateway shut down, the caller's own input was refused). The breaker
	// is left as it was; an abandoned probe only gives up being the probe.
	Abandoned
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Abandoned:
		return "abandoned"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Release gives the place back after a call that did not fail: it is
// Finish(ctx, Success).
func (ls *Lease) Release(ctx context.Context) error {
	_, err := ls.Finish(ctx, Success)
	return err
}

// Finish gives the place back and, if the lease has a breaker, reports the
// call's outcome to it in the same write. It returns the breaker change it
// made, if any.
//
// It is idempotent: finishing twice, or after the lease expired and was
// purged, never frees another holder's place; those cases return
// ErrNotHeld (after the first, without a store call). When the item it
// leaves behind holds leases that have expired (their holders died), it
// removes them with one more write, so dead leases do not linger.
func (ls *Lease) Finish(ctx context.Context, outcome Outcome) (Transition, error) {
	if ls.released.Swap(true) {
		return NoTransition, ErrNotHeld
	}
	l := ls.l
	if outcome == Success && !ls.probe && !l.marksLikely(ls.key) {
		if w := l.lines.claim(ls.key, attrSet(ls.attrs)); w != nil {
			next, item, err := ls.handOff(ctx, w.req)
			l.lines.settle(w, next)
			if err == nil {
				l.stats.released.Add(1)
				l.stats.handoffs.Add(1)
				ls.purgeLeftovers(ctx, item)
				return NoTransition, nil
			}
			// Not passed on (the lease is gone, or the breaker opened):
			// give it back the ordinary way, which tells which.
		}
	}
	tr, item, err := ls.finish(ctx, outcome)
	if err != nil {
		return NoTransition, err
	}
	l.stats.released.Add(1)
	l.lines.kick(ls.key)
	if tr != NoTransition {
		l.stats.transitions.Add(1)
	}
	ls.purgeLeftovers(ctx, item)
	return tr, nil
}

func (ls *Lease) itemKey() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: ls.key}}
}

// finish makes the release write (and, when a failure reaches the
// threshold, the write that opens the breaker).
func (ls *Lease) finish(ctx context.Context, outcome Outcome) (Transition, map[string]types.AttributeValue, error) {
	failed := outcome == Failure
	if ls.probe {
		tr, item, err := ls.finishProbe(ctx, outcome)
		if !errors.Is(err, ErrNotHeld) {
			return tr, item, err
		}
		// No longer the probe (its lease ended and another took over):
		// release as an ordinary lease.
	}
	b := newExprBuilder()
	id := b.name(ls.id)
	removes := make([]string, len(ls.attrs))
	for i, attr := range ls.attrs {
		removes[i] = b.name(attr) + "." + id
	}
	update := "REMOVE " + strings.Join(removes, ", ")
	var ba breakerAttrs
	if ls.breaker != nil && outcome != Abandoned {
		ba = ls.breaker.attrs()
		if failed {
			update += " ADD " + b.name(ba.fails) + " " + b.value(number(1))
		} else {
			update += " SET " + b.name(ba.fails) + " = " + b.value(number(0))
		}
	}
	out, err := ls.update(ctx, &dynamodb.UpdateItemInput{
		UpdateExpression:    aws.String(update),
		ConditionExpression: aws.String("attribute_exists(" + removes[0] + ")"),
		ReturnValues:        types.ReturnValueAllNew,
	}, b)
	if err != nil {
		return NoTransition, nil, err
	}
	if ls.breaker == nil || !failed || numberAttr(out.Attributes[ba.fails]) < int64(ls.breaker.Threshold) {
		return NoTransition, out.Attributes, nil
	}
	// This failure reached the threshold: open the breaker, unless it is
	// open already (another instance's failure got there first).
	ob := newExprBuilder()
	bo, bf := ob.name(ba.openUntil), ob.name(ba.fails)
	until := ls.l.clock().Add(ls.breaker.Recovery).UnixMilli()
	_, err = ls.update(ctx, &dynamodb.UpdateItemInput{
		UpdateExpression: aws.String("SET " + bo + " = " + ob.value(number(until))),
		ConditionExpression: aws.String(bf + " >= " + ob.value(number(int64(ls.breaker.Threshold))) +
			" AND (attribute_not_exists(" + bo + ") OR " + bo + " = " + ob.value(number(0)) + ")"),
	}, ob)
	switch {
	case err == nil:
		return Opened, out.Attributes, nil
	case errors.Is(err, ErrNotHeld):
		return NoTransition, out.Attributes, nil
	default:
		// The lease is released; the breaker stays closed until the next
		// failure tries again.
		return NoTransition, out.Attributes, fmt.Errorf("lease: open breaker %s: %w", ls.breaker.Name, err)
	}
}

// finishProbe releases a probe lease and closes (success) or reopens
// (failure) the breaker, only while this lease is still the probe. An
// abandoned probe gives up being the probe and leaves the breaker half-open,
// so the next caller may probe.
func (ls *Lease) finishProbe(ctx context.Context, outcome Outcome) (Transition, map[string]types.AttributeValue, error) {
	ba := ls.breaker.attrs()
	b := newExprBuilder()
	id := b.name(ls.id)
	removes := make([]string, 0, len(ls.attrs)+2)
	for _, attr := range ls.attrs {
		removes = append(removes, b.name(attr)+"."+id)
	}
	bp, bpe := b.name(ba.probe), b.name(ba.probeExp)
	removes = append(removes, bp, bpe)
	var set string
	tr := Closed
	switch outcome {
	case Failure:
		until := ls.l.clock().Add(ls.breaker.Recovery).UnixMilli()
		set, tr = " SET "+b.name(ba.openUntil)+" = "+b.value(number(until)), Reopened
	case Abandoned:
		// Every name in the expression must be used: nothing to set.
		tr = NoTransition
	default:
		set = " SET " + b.name(ba.openUntil) + " = " + b.value(number(0)) + ", " + b.name(ba.fails) + " = " + b.value(number(0))
	}
	out, err := ls.update(ctx, &dynamodb.UpdateItemInput{
		UpdateExpression:    aws.String("REMOVE " + strings.Join(removes, ", ") + set),
		ConditionExpression: aws.String("attribute_exists(" + removes[0] + ") AND " + bp + " = " + b.value(&types.AttributeValueMemberS{Value: ls.id})),
		ReturnValues:        types.ReturnValueAllNew,
	}, b)
	if err != nil {
		return NoTransition, nil, err
	}
	return tr, out.Attributes, nil
}

// update sends one conditional write on the lease's item; a failed
// condition is ErrNotHeld.
func (ls *Lease) update(ctx context.Context, in *dynamodb.UpdateItemInput, b *exprBuilder) (*dynamodb.UpdateItemOutput, error) {
	in.TableName = aws.String(ls.l.table)
	in.Key = ls.itemKey()
	in.ExpressionAttributeNames = b.names
	in.ExpressionAttributeValues = b.values
	ls.l.stats.writes.Add(1)
	out, err := ls.l.db.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &ccf):
		ls.l.stats.failedWrites.Add(1)
		return nil, ErrNotHeld
	default:
		return nil, fmt.Errorf("lease: write %s: %w", ls.key, err)
	}
}

// purgeLeftovers removes leases that item shows expired: the leases of
// holders that died. Best effort, and only when there are any.
func (ls *Lease) purgeLeftovers(ctx context.Context, item map[string]types.AttributeValue) {
	if len(item) == 0 {
		return
	}
	slots := make([]Slot, len(ls.attrs))
	for i, attr := range ls.attrs {
		slots[i] = Slot{Attr: attr}
	}
	snap := parseSnapshot(item, slots, nil)
	now := ls.l.clock()
	any := false
	for _, s := range slots {
		if len(snap.expired(s.Attr, now, 1)) > 0 {
			any = true
		}
	}
	if !any {
		return
	}
	a := &attempt{l: ls.l, req: Request{Key: ls.key, Slots: slots}}
	_, _ = a.purge(ctx, snap)
}

// remove deletes the lease id from its maps if it is there (cleanup after
// a failed acquire that may have landed).
func (ls *Lease) remove(ctx context.Context) error {
	b := newExprBuilder()
	id := b.name(ls.id)
	removes := make([]string, len(ls.attrs))
	for i, attr := range ls.attrs {
		removes[i] = b.name(attr) + "." + id
	}
	_, err := ls.update(ctx, &dynamodb.UpdateItemInput{
		UpdateExpression:    aws.String("REMOVE " + strings.Join(removes, ", ")),
		ConditionExpression: aws.String("attribute_exists(" + removes[0] + ")"),
	}, b)
	return err
}

// Renew extends the lease so it expires hold + Margin from now, only if it
// is still held with the expiry this holder last wrote: a renewal never
// brings back a lease that was released or purged (ErrNotHeld). A probe
// lease extends its probe too.
func (ls *Lease) Renew(ctx context.Context, hold time.Duration) error {
	if ls.released.Load() {
		return ErrNotHeld
	}
	l := ls.l
	localNow := time.Now()
	exp := l.clock().Add(hold + l.margin).UnixMilli()
	b := newExprBuilder()
	id := b.name(ls.id)
	newVal := b.value(number(exp))
	sets := make([]string, 0, len(ls.attrs)+1)
	for _, attr := range ls.attrs {
		sets = append(sets, b.name(attr)+"."+id+" = "+newVal)
	}
	cond := b.name(ls.attrs[0]) + "." + id + " = " + b.value(number(ls.exp))
	if ls.probe {
		ba := ls.breaker.attrs()
		sets = append(sets, b.name(ba.probeExp)+" = "+newVal)
		cond += " AND " + b.name(ba.probe) + " = " + b.value(&types.AttributeValueMemberS{Value: ls.id})
	}
	_, err := ls.update(ctx, &dynamodb.UpdateItemInput{
		UpdateExpression:    aws.String("SET " + strings.Join(sets, ", ")),
		ConditionExpression: aws.String(cond),
	}, b)
	if err != nil {
		return err
	}
	ls.exp = exp
	ls.Expiry = time.UnixMilli(exp)
	ls.CallDeadline = localNow.Add(hold)
	return nil
}

// errNoTime means a waiter's call would have no time left to run.
var errNoTime = errors.New("lease: no time left for the waiter's call")

// handOff passes this lease's place to a waiter in the same process in one
// write: its id goes out of every map and the waiter's comes in, so the
// count never changes and the waiter needs no write of its own. It is
// conditioned on still holding the lease and, with a breaker, on the
// breaker being closed (this call succeeded, which also resets its failure
// count). A failed condition is ErrNotHeld.
func (ls *Lease) handOff(ctx context.Context, req Request) (*Lease, map[string]types.AttributeValue, error) {
	l := ls.l
	if (ls.breaker == nil) != (req.Breaker == nil) || (ls.breaker != nil && ls.breaker.Name != req.Breaker.Name) {
		return nil, nil, ErrNotHeld
	}
	wallNow, localNow := l.clock(), time.Now()
	hold := req.Hold
	if !req.CallBy.IsZero() {
		hold = min(hold, req.CallBy.Sub(localNow))
	}
	if hold <= 0 {
		return nil, nil, errNoTime
	}
	exp := wallNow.Add(hold + l.margin).UnixMilli()
	id := l.newLeaseID()
	b := newExprBuilder()
	oldID, newID := b.name(ls.id), b.name(id)
	expVal := b.value(number(exp))
	removes := make([]string, len(ls.attrs))
	sets := make([]string, 0, len(ls.attrs)+2)
	for i, attr := range ls.attrs {
		m := b.name(attr)
		removes[i] = m + "." + oldID
		sets = append(sets, m+"."+newID+" = "+expVal)
	}
	cond := "attribute_exists(" + removes[0] + ")"
	for _, attr := range ls.attrs {
		// Not past a waiter marked in the item (see mark).
		wm := b.name(WaitingAttr(attr))
		cond += " AND (attribute_not_exists(" + wm + ") OR size(" + wm + ") = " + b.value(number(0)) + ")"
	}
	if ls.breaker != nil {
		ba := ls.breaker.attrs()
		bo := b.name(ba.openUntil)
		sets = append(sets, b.name(ba.fails)+" = "+b.value(number(0)))
		cond += " AND (attribute_not_exists(" + bo + ") OR " + bo + " = " + b.value(number(0)) + ")"
	}
	ttl := time.UnixMilli(exp).Add(abandonedAfter).Unix()
	sets = append(sets, b.name(store.TTLAttr)+" = "+b.value(number(ttl)))
	l.stats.writes.Add(1)
	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(l.table),
		Key:                                 ls.itemKey(),
		UpdateExpression:                    aws.String("SET " + strings.Join(sets, ", ") + " REMOVE " + strings.Join(removes, ", ")),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            b.names,
		ExpressionAttributeValues:           b.values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	next := &Lease{
		l: l, key: ls.key, attrs: slices.Clone(ls.attrs), id: id, exp: exp, breaker: req.Breaker,
		Expiry: time.UnixMilli(exp), CallDeadline: localNow.Add(hold),
	}
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		isCCF := errors.As(err, &ccf)
		if isCCF {
			l.stats.failedWrites.Add(1)
			snap := parseSnapshot(ccf.Item, []Slot{{Attr: ls.attrs[0]}}, nil)
			l.noteMarks(ls.key, snap, []Slot{{Attr: ls.attrs[0], Cap: 1}})
			if len(ccf.Item) > 0 {
				if _, landed := snap.holds(ls.attrs[0], id); !landed {
					return nil, nil, ErrNotHeld
				}
			}
		}
		// The write may have landed unseen (a lost answer the SDK retried
		// reads as a failed condition; without the item, there is no
		// telling): take the waiter's id out again rather than leave it
		// holding a place until it expires.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = next.remove(rctx)
		cancel()
		if isCCF {
			return nil, nil, ErrNotHeld
		}
		return nil, nil, fmt.Errorf("lease: write %s: %w", ls.key, err)
	}
	if m, ok := out.Attributes[ls.attrs[0]].(*types.AttributeValueMemberM); ok {
		next.InFlight = len(m.Value)
	}
	return next, out.Attributes, nil
}
