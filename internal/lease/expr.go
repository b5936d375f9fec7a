package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/mcpgate/mcpgate/internal/store"
)

// update is one UpdateItem being put together. Every name and value goes
// through a placeholder, so no caller's text is spliced into an
// expression; the ADDs and DELETEs on one path are merged into one action,
// as DynamoDB takes each path once.
type update struct {
	names   map[string]string
	byName  map[string]string
	values  map[string]types.AttributeValue
	sets    []string
	removes []string
	conds   []string
	adds    map[string][]string // set path → members, or number path → [amount]
	dels    map[string][]string
	counts  map[string]int64
	// once: not sent again after an attempt whose outcome is unknown
	// (nothing in it would fail a second time).
	once bool
	// judged: sent once whatever the error (its caller judges again).
	judged bool
	// ttlAt is the latest expiry or deadline it sets (Unix ms; 0: no ttl).
	ttlAt int64
}

func newUpdate() *update {
	return &update{names: map[string]string{}, byName: map[string]string{}, values: map[string]types.AttributeValue{},
		adds: map[string][]string{}, dels: map[string][]string{}, counts: map[string]int64{}}
}

// path is the placeholder path of nested attribute names: "#n0.#n1".
func (u *update) path(parts ...string) string {
	out := make([]string, len(parts))
	for i, n := range parts {
		p, ok := u.byName[n]
		if !ok {
			p = "#n" + strconv.Itoa(len(u.names))
			u.names[p], u.byName[n] = n, p
		}
		out[i] = p
	}
	return strings.Join(out, ".")
}

// named is the placeholder path of parts if u names them all already, ""
// if not (path would add a name, which must then be used).
func (u *update) named(parts ...string) string {
	if slices.ContainsFunc(parts, func(n string) bool { return u.byName[n] == "" }) {
		return "" // a placeholder is never ""
	}
	return u.path(parts...)
}

// value returns a new placeholder for v.
func (u *update) value(v types.AttributeValue) string {
	p := ":v" + strconv.Itoa(len(u.values))
	u.values[p] = v
	return p
}

func (u *update) num(n int64) string  { return u.value(number(n)) }
func (u *update) str(s string) string { return u.value(&types.AttributeValueMemberS{Value: s}) }

func (u *update) set(path, val string)          { u.sets = append(u.sets, path+" = "+val) }
func (u *update) remove(paths ...string)        { u.removes = append(u.removes, paths...) }
func (u *update) cond(conds ...string)          { u.conds = append(u.conds, conds...) }
func (u *update) add(setPath, member string)    { u.adds[setPath] = append(u.adds[setPath], member) }
func (u *update) del(setPath, member string)    { u.dels[setPath] = append(u.dels[setPath], member) }
func (u *update) count(numPath string, n int64) { u.counts[numPath] += n }

// orAbsent is the condition that path does not exist or cond holds.
func orAbsent(path, cond string) string {
	return "(attribute_not_exists(" + path + ") OR " + cond + ")"
}

// eqOrAbsent is the condition that the number at path is n, 0 meaning
// also that it does not exist.
func (u *update) eqOrAbsent(path string, n int64) string {
	if n == 0 {
		return orAbsent(path, path+" = "+u.num(0))
	}
	return path + " = " + u.num(n)
}

// isSeen is the condition that path holds seen, the value a view showed
// there (nil: none). A map, a list or a set is conditioned on its type: a
// store may compare those by reference, so no value would ever equal it.
func (u *update) isSeen(path string, seen types.AttributeValue) string {
	switch seen.(type) {
	case nil:
		return "attribute_not_exists(" + path + ")"
	case *types.AttributeValueMemberN, *types.AttributeValueMemberS, *types.AttributeValueMemberB:
		return path + " = " + u.value(seen)
	}
	return "attribute_type(" + path + ", " + u.str(store.TypeOf(seen)) + ")"
}

// expression renders the update expression.
func (u *update) expression() string {
	var adds, dels []string
	for _, p := range slices.Sorted(maps.Keys(u.adds)) {
		if _, both := u.dels[p]; both {
			panic("lease: one write both adds to and deletes from " + u.names[p])
		}
		adds = append(adds, p+" "+u.value(&types.AttributeValueMemberSS{Value: u.adds[p]}))
	}
	for _, p := range slices.Sorted(maps.Keys(u.counts)) {
		if u.counts[p] != 0 {
			adds = append(adds, p+" "+u.num(u.counts[p]))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(u.dels)) {
		dels = append(dels, p+" "+u.value(&types.AttributeValueMemberSS{Value: u.dels[p]}))
	}
	expr := ""
	for i, list := range [][]string{u.sets, u.removes, adds, dels} {
		if len(list) > 0 {
			expr += " " + [...]string{"SET", "REMOVE", "ADD", "DELETE"}[i] + " " + strings.Join(list, ", ")
		}
	}
	return strings.TrimSpace(expr)
}

// purged counts what a purge removes: leases, and tickets from the queue
// and from tasks; more: it left stale entries for want of room.
type purged struct {
	leases, queue, tasks int
	more                 bool
}

// purge removes up to maxPurge entries v shows stale at now (see Purge in
// the package doc), but id's, those in a set in keep and, of a gate in
// keep, self's and everyone's: the write may change those itself.
func (u *update) purge(v *view, now int64, id, self string, keep ...string) purged {
	var p purged
	if v == nil {
		return p
	}
	n := 0
	room := func(skip bool) bool { // counts the entry if it is purged
		p.more = p.more || !skip && n == maxPurge
		if skip || n == maxPurge {
			return false
		}
		n++
		return true
	}
	kept := func(sets ...string) bool {
		return slices.ContainsFunc(sets, func(s string) bool { return slices.Contains(keep, s) })
	}
	for _, lid := range v.staleLeases(now) {
		if !room(lid == id || kept(v.setsOf(lid)...)) {
			continue
		}
		u.removeLease(v, lid)
		p.leases++
	}
	for _, t := range v.staleTickets(now) {
		if !room(t.id == id || kept(WaitingAttr(t.label))) {
			continue
		}
		u.removeTicket(t.id, t.label, t.n, t.task)
		if t.task {
			p.tasks++
		} else {
			p.queue++
		}
		u.count(u.path(FreedAttr), 1) // a ticket leaving can change whose turn it is
	}
	for _, attr := range slices.Sorted(maps.Keys(v.rates)) {
		// A principal's bucket full at now (its arrival time passed) may go:
		// absent is full.
		idle := strings.HasPrefix(attr, RateAttrPrefix+"principal:") && v.rates[attr] < now
		if !room(slices.Contains(keep, attr) || !idle) {
			continue
		}
		rp := u.path(attr)
		u.remove(rp)
		u.cond(rp + " = " + u.num(v.rates[attr]))
		u.count(u.path(FreedAttr), 1)
	}
	entries, empty := v.staleEntries(now)
	for _, e := range entries {
		if !room(slices.Contains(keep, e.attr) && (e.key == self || e.key == gateAll)) {
			continue
		}
		u.condEntry(v.gates[e.attr], e.key)
		u.remove(u.path(e.attr, e.key))
		u.count(u.path(FreedAttr), 1)
	}
	for _, attr := range empty {
		if !room(slices.Contains(keep, attr)) {
			continue
		}
		gp := u.path(attr)
		u.remove(gp)
		u.cond("size(" + gp + ") = " + u.num(0))
	}
	// Members of sets other than waiting sets that hold no lease (strays
	// of tickets are found whole, above).
	for _, s := range slices.Sorted(maps.Keys(v.sets)) {
		if slices.Contains(keep, s) || strings.HasPrefix(s, WaitingAttrPrefix) {
			continue
		}
		for _, sid := range v.sets[s] {
			if _, held := v.leases[sid]; !held && room(sid == id) {
				u.del(u.path(s), sid)
				u.cond("attribute_not_exists(" + u.path(LeasesAttr, sid) + ")")
			}
		}
	}
	return p
}

// removeLease adds to u the removal of lease id whole, as v shows it,
// conditioned on its expiry, counting the place freed.
func (u *update) removeLease(v *view, id string) {
	lp := u.path(LeasesAttr, id)
	u.remove(lp)
	if seen, ok := v.oddLeases[id]; ok {
		u.cond(u.isSeen(lp, seen)) // an expiry not whole, as stored
	} else {
		u.cond(lp + " = " + u.num(v.leases[id]))
	}
	for _, s := range v.setsOf(id) {
		u.del(u.path(s), id)
	}
	u.count(u.path(FreedAttr), 1)
}

// removeTicket removes ticket id, numbered n, whole (queue or tasks entry,
// details, waiting member), conditioned on its number; n 0 (a number not
// known: a join whose answer was lost) on its being there.
func (u *update) removeTicket(id, label string, n int64, task bool) {
	qp := u.path(kindAttr(task), id)
	u.remove(qp, u.path(TicketsAttr, id))
	u.del(u.path(WaitingAttr(label)), id)
	if n == 0 {
		u.cond("attribute_exists(" + qp + ")")
	} else {
		u.cond(qp + " = " + u.num(n))
	}
}

// ttl lets DynamoDB delete the item a day after exp if nobody writes it.
func (u *update) ttl(exp int64) { u.ttlAt = max(u.ttlAt, exp) }

// passesTask conditions a take passing task ticket t on its starts still
// out unclaimed since the same first, as seen (its mark as seen, for one
// of an older instance): not claimed, nor given back, since.
func (u *update) passesTask(t *ticket) {
	if t.first == 0 || t.first != t.unclaimedSince() {
		u.cond(u.path(TicketsAttr, t.id, ticketStarted) + " = " + u.num(t.started))
		return
	}
	u.cond(u.path(TicketsAttr, t.id, ticketFirst)+" = "+u.num(t.first), "attribute_exists("+u.path(TicketsAttr, t.id, ticketStarted)+")")
}

// errCondition means a write's condition failed; the item comes with it.
var errCondition = errors.New("lease: condition failed")

// Attempts and backoff of a write: the limiter retries itself, so it knows
// which attempts' outcomes it does not know.
const (
	writeAttempts   = 4
	writeMinBackoff = 25 * time.Millisecond
	writeMaxBackoff = 250 * time.Millisecond
)

// write sends u to the item of key and returns the item after the write
// or, with errCondition, as the failure found it (returned by the store,
// else one consistent read). Every item seen goes on the key's board.
//
// An attempt whose outcome is unknown (a timeout, a reset, a server error:
// it may still land) calls unknown and is retried identically: writes are
// built so a retry of one that landed fails its condition and shows it;
// one that cannot be (once) is not retried after it, and one judged for
// its moment (judged) never.
func (l *Limiter) write(ctx context.Context, key string, u *update, unknown func()) (*view, error) {
	if u.ttlAt > 0 {
		// Never a day before now (a write may land past the deadline it
		// carries), a hold or a task's deadline it last saw.
		exp := max(u.ttlAt, l.clock().UnixMilli())
		if v, _, _ := l.board(key).latest(); v != nil {
			exp = max(exp, v.hold)
			for _, t := range v.queue {
				if t.task {
					exp = max(exp, t.deadline)
				}
			}
		}
		u.set(u.path(store.TTLAttr), u.num(exp/1000+int64(abandonedAfter.Seconds())))
		u.ttlAt = 0
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                           aws.String(l.table),
		Key:                                 itemKey(key),
		UpdateExpression:                    aws.String(u.expression()),
		ExpressionAttributeNames:            u.names,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if len(u.values) > 0 {
		in.ExpressionAttributeValues = u.values
	}
	if len(u.conds) > 0 {
		in.ConditionExpression = aws.String(strings.Join(u.conds, " AND "))
	}
	var err error
	for attempt := range writeAttempts {
		if attempt > 0 && sleep(ctx, backoff(attempt), key) != nil {
			return nil, fmt.Errorf("lease: write %s: %w", key, err)
		}
		l.stats.writes.Add(1)
		sent := time.Now()
		var out *dynamodb.UpdateItemOutput
		// The SDK's own retries off: this loop makes them, knowing which
		// attempts' outcomes are unknown.
		out, err = l.db.UpdateItem(ctx, in, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
		var ccf *types.ConditionalCheckFailedException
		switch {
		case err == nil:
			return l.board(key).see(parseItem(out.Attributes), sent), nil
		case errors.As(err, &ccf):
			l.stats.failedWrites.Add(1)
			if len(ccf.Item) == 0 {
				// Not returned (a store that does not, or no item yet): read it.
				v, rerr := l.read(ctx, key)
				return v, cmp.Or(rerr, errCondition)
			}
			return l.board(key).see(parseItem(ccf.Item), sent), errCondition
		}
		retry, unsure := classify(err)
		if unsure && unknown != nil {
			unknown()
		}
		if !retry || u.judged || u.once && unsure || ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("lease: write %s: %w", key, err)
}

// wrapf is nil for a nil err, else err wrapped by format, whose last verb
// (%w) is err's, args filling the others.
func wrapf(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format, append(args, err)...)
}

// classify: may a failed request be retried, and may the store have
// applied it.
func classify(err error) (retry, unsure bool) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false, true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded":
			return true, false // refused before it was applied
		case "InternalServerError", "ServiceUnavailable", "InternalFailure":
			return true, true
		}
		return false, ae.ErrorFault() == smithy.FaultServer
	}
	return true, true // the connection failed, or the answer was lost
}

// backoff is the jittered wait before attempt n (n ≥ 1) of a write. The
// shift is bounded before it is made: past a few doublings the wait is
// writeMaxBackoff's, and a shift of 40 or more would overflow.
func backoff(n int) time.Duration {
	return jitter(min(writeMinBackoff<<min(max(n-1, 0), backoffDoublings), writeMaxBackoff))
}

// backoffDoublings is enough doublings of writeMinBackoff to pass
// writeMaxBackoff.
const backoffDoublings = 4

// eagerRetries is how many times a write failing its condition on others'
// writes is made again at once from the answer.
const eagerRetries = 3

// contended waits, before try n+1 of a write made again from the answer
// to its n-th failing its condition, backoff(n−eagerRetries) once the
// first eagerRetries tries are spent, or until ctx ends.
func contended(ctx context.Context, key string, n int) error {
	if n <= eagerRetries {
		return nil
	}
	return sleep(ctx, backoff(n-eagerRetries), key)
}

// read fetches the item of key with a strongly consistent read.
func (l *Limiter) read(ctx context.Context, key string) (*view, error) {
	l.stats.reads.Add(1)
	sent := time.Now()
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(l.table),
		Key:            itemKey(key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("lease: read %s: %w", key, err)
	}
	return l.board(key).see(parseItem(out.Item), sent), nil
}

// maxRepair bounds the malformed values one repair puts right: the next
// puts right the rest.
const maxRepair = 16

// repair purges what v shows stale, makes the maps missing, and puts
// right up to maxRepair values v shows malformed, each conditioned on its
// value as stored, ADDing 1 to freed (see Repair in the package doc). It
// returns the item as written (nil: it was not, the item having changed).
func (l *Limiter) repair(ctx context.Context, key string, v *view) (*view, error) {
	u := newUpdate()
	now := l.clock().UnixMilli()
	u.purge(v, now, "", "")
	// freed first: a purge's ADD to a freed of another type, left for the
	// next repair, would fail the whole write.
	fixes, freedSet := slices.Clone(v.fixes), false
	if i := slices.IndexFunc(fixes, func(f fix) bool { return len(f.path) == 1 && f.path[0] == FreedAttr }); i > 0 {
		fixes = slices.Insert(slices.Delete(fixes, i, i+1), 0, v.fixes[i])
	}
	fixes = fixes[:min(len(fixes), maxRepair)]
	for _, f := range fixes {
		if len(f.path) > 2 && slices.Contains(u.removes, u.named(f.path[:2]...)) {
			continue // its ticket is purged whole
		}
		p := u.path(f.path...)
		u.cond(u.isSeen(p, f.seen))
		switch attr := f.path[0]; {
		case f.member != "":
			u.del(p, f.member)
		case len(f.path) > 1:
			u.remove(p)
		case slices.Contains(itemMaps, attr):
			u.set(p, u.value(emptyMap()))
		case attr == SeqAttr:
			u.set(p, u.num(u.renumber(v)))
		case attr == FreedAttr || attr == LimitRoundAttr || attr == RefundsAttr:
			u.set(p, u.num(now))
			freedSet = freedSet || attr == FreedAttr
		default:
			u.remove(p)
		}
	}
	u.halvesAsSeen(v, fixes)
	for _, attr := range itemMaps {
		// One written or written inside is there (and one write may not
		// do both).
		p := u.path(attr)
		if !slices.ContainsFunc(slices.Concat(u.sets, u.removes), func(w string) bool { return strings.HasPrefix(w, p+" ") || strings.HasPrefix(w, p+".") || w == p }) {
			u.set(p, "if_not_exists("+p+", "+u.value(emptyMap())+")")
		}
	}
	if freedSet {
		delete(u.counts, u.path(FreedAttr)) // set to now: past any count
	} else if len(fixes) > 0 {
		u.count(u.path(FreedAttr), 1)
	}
	u.ttl(now)
	nv, err := l.write(ctx, key, u, nil)
	if errors.Is(err, errCondition) {
		return nil, nil // changed meanwhile: judged again from the item as it is
	}
	return nv, err
}

// mend returns v (nil: the item as read), or the item as repaired when v
// needs repair (see Repair in the package doc): on while each repair
// leaves fewer values to put right; after one that does not land or
// leaves as many, it waits backoff(n), n such repairs so far, reads the
// item and judges again, and past maxEager of them gives up.
func (l *Limiter) mend(ctx context.Context, key string, v *view) (*view, error) {
	if v == nil {
		var err error
		if v, err = l.read(ctx, key); err != nil {
			return nil, err
		}
	}
	for failed := 0; v.needsRepair(); {
		nv, err := l.repair(ctx, key, v)
		if err != nil {
			return nil, err
		}
		if nv != nil && (!nv.needsRepair() || len(nv.fixes) < len(v.fixes)) {
			v = nv
			continue
		}
		if failed++; failed > maxEager {
			return nil, fmt.Errorf("lease: %s still needs repair after %d repairs that put nothing right", key, failed)
		}
		if err := sleep(ctx, backoff(failed), key); err != nil {
			return nil, err
		}
		if v, err = l.read(ctx, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// send makes the write build makes from the item as v shows it (nil: no
// view) and returns write's answer. A view showing a malformed value is
// mended first; when the store refuses the write as invalid (the item is
// read then) or its failed condition's answer needs repair, the item is
// mended and the write built again from it. build may return nil, which
// sends nothing and returns the view it was given, or an error, which
// sends nothing and is returned.
func (l *Limiter) send(ctx context.Context, key string, v *view, build func(v *view) (*update, error), unknown func()) (*view, error) {
	for {
		var err error
		if v != nil && len(v.fixes) > 0 {
			if v, err = l.mend(ctx, key, v); err != nil {
				return nil, err
			}
		}
		u, err := build(v)
		if u == nil || err != nil {
			return v, err
		}
		nv, err := l.write(ctx, key, u, unknown)
		if invalid(err) {
			// Refused as invalid (an operand of another type than the item
			// holds): nothing applied, and no item comes with it.
			rv, rerr := l.read(ctx, key)
			if rerr != nil || !rv.needsRepair() {
				return nil, cmp.Or(rerr, err)
			}
			nv = rv
		} else if !errors.Is(err, errCondition) || !nv.needsRepair() {
			return nv, err
		}
		if v, err = l.mend(ctx, key, nv); err != nil {
			return nil, err
		}
	}
}

// invalid reports whether the store refused a write as invalid: an
// operand of another type than the item holds (a value written by hand).
// Nothing applied, and no item comes with it.
func invalid(err error) bool {
	ae := smithy.APIError(nil)
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationException"
}

// maxRenumber bounds the tickets one repair renumbers, well under
// DynamoDB's expression limits (each is named twice: its condition and
// its number).
const maxRenumber = 16

// renumber returns one past every ticket v shows, the seq a repair sets.
// When that is maxNumber − 1 or more (a ticket numbered so by hand), from
// which a join would number a half and which reads as malformed again,
// it has u number the fewest top tickets it does not purge (at most
// maxRenumber) on from the ticket below them, in their order, each on
// condition of its number as seen, and returns one past them; when no
// maxRenumber of them will do (more numbered that near the top), one
// past every ticket still, the tickets left to lapse.
func (u *update) renumber(v *view) int64 {
	next := v.lastNumber() + 1
	if next < maxNumber-1 {
		return next
	}
	kept := slices.DeleteFunc(slices.Clone(v.queue), func(t *ticket) bool {
		p := u.named(kindAttr(t.task), t.id)
		return p != "" && slices.Contains(u.removes, p)
	})
	for j := len(kept) - 1; j >= max(len(kept)-maxRenumber, 0); j-- {
		base := int64(0)
		if j > 0 {
			base = kept[j-1].n
		}
		if base+int64(len(kept)-j) >= maxNumber-2 {
			continue
		}
		n := base + 1
		for _, t := range kept[j:] {
			qp := u.path(kindAttr(t.task), t.id)
			u.cond(qp + " = " + u.num(t.n))
			u.set(qp, u.num(n))
			n++
		}
		return n
	}
	return next
}

// halvesAsSeen conditions u, which puts right fixes of v, on each half
// ticket a fix takes a part of still lacking the parts v shows it lacks,
// so that no join of its id since (its caller joining again) is taken
// apart: a join writes its tickets entry, and its queue or tasks entry.
func (u *update) halvesAsSeen(v *view, fixes []fix) {
	part := func(attr, id string) bool {
		return slices.ContainsFunc(v.fixes, func(f fix) bool { return len(f.path) == 2 && f.path[0] == attr && f.path[1] == id })
	}
	ids := map[string]bool{}
	for _, f := range fixes {
		switch {
		case f.member != "":
			ids[f.member] = true
		case len(f.path) == 2 && (f.path[0] == QueueAttr || f.path[0] == TasksAttr || f.path[0] == TicketsAttr):
			ids[f.path[1]] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		attrs := []string{TicketsAttr}
		if part(TicketsAttr, id) {
			attrs = []string{QueueAttr, TasksAttr}
		}
		for _, attr := range attrs {
			if !part(attr, id) {
				u.cond("attribute_not_exists(" + u.path(attr, id) + ")")
			}
		}
	}
}

func emptyMap() types.AttributeValue {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
}

func itemKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}}
}

// jitter returns a duration uniformly drawn from [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + randN(d-d/2+1)
}

// randN draws jitter (a variable the fault simulation seeds).
var randN = mrand.N[time.Duration]
