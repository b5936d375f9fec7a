package lease

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"
)

// StartTimeout is how long a task's ticket whose turn has come waits for
// the worker last started for it to claim its place: past it, whoever
// sees its turn come starts another (a start lost with its instance, an
// invocation never delivered). A worker started twice claims once.
const StartTimeout = 10 * time.Second

// TaskStart is a worker to start: the task's ticket on Key, the task it
// waits for (Enqueue's taskID), and the start's mark, which the worker
// gives Claim.
type TaskStart struct {
	Key, Ticket, Task string
	Mark              int64
}

// Errors of Enqueue, Claim and Withdraw.
var (
	// ErrNoTicket: the task's ticket is not in the queue (withdrawn,
	// released with its lease, or lapsed at its deadline).
	ErrNoTicket = errors.New("lease: the task's ticket is not in the queue")
	// ErrNotYourTurn: the task's turn has not come (or has passed to
	// another caller meanwhile); it keeps its ticket, and a worker is
	// started again when its turn comes.
	ErrNotYourTurn = errors.New("lease: not the task's turn")
	// ErrStartLapsed: the task's turn had come, but others' writes
	// refused the claim's takes until its start was no longer the one to
	// run it (StartTimeout past its mark, or the ticket marked by another
	// start, or its mark given back), or the worker's CallBy passed
	// before its take was made (its mark given back) or landed (the place
	// given back at once, as Unclaim gives it): it keeps its ticket, and
	// the claim started the next worker unless another start had.
	ErrStartLapsed = errors.New("lease: the task's start lapsed before its claim landed")
	// ErrClaimed: the task's ticket is claimed: a live lease of its id
	// holds the place (Withdraw cannot take it back: its call must end).
	// Once that lease lapses unreleased, the ticket waits again.
	ErrClaimed = errors.New("lease: the task's place was claimed")
	// ErrNoQueue: a request that takes no place cannot wait in a queue.
	ErrNoQueue = errors.New("lease: the request takes no place, so it has no queue to wait in")
)

// Enqueue puts a task in req.Key's queue until deadline (see Tasks in the
// package doc); a worker started when its turn comes claims the place
// (Claim). It is refused as a caller that would wait is
// (*CircuitOpenError, *RateLimitedError, *FullError QueueFull). It returns
// the ticket's id, which its lease will have: ticket (from NewTaskID, so
// that the task's record can name it before the task waits), or a new one
// when ticket is empty.
func (l *Limiter) Enqueue(ctx context.Context, req Request, ticket, taskID string, deadline time.Time) (string, error) {
	if err := req.validate(); err != nil {
		return "", err
	}
	if !req.holds() {
		return "", ErrNoQueue
	}
	if taskID == "" || len(taskID) > MaxTaskID {
		return "", fmt.Errorf("lease: a task id of 1 to %d bytes, not %d", MaxTaskID, len(taskID))
	}
	if req.MaxQueued <= 0 {
		return "", &FullError{Reason: QueueFull, What: "server", Cap: req.Cap}
	}
	req.Wait = time.Until(deadline)
	if req.Wait <= 0 {
		return "", fmt.Errorf("lease: the task's deadline has passed")
	}
	req.CallBy = time.Time{}
	if ticket == "" {
		ticket = l.NewTaskID()
	} else if !IsTaskID(ticket) || InstanceOf(ticket) == "" || len(ticket) > MaxTaskID {
		return "", fmt.Errorf("lease: %q is not a task's ticket id (NewTaskID)", ticket)
	}
	a := l.newAttempt(req, ticket, true)
	a.taskID = taskID
	// A view this process saw within recentView stands in for the first
	// read, to make a join only: one that shows anything else (the ticket
	// or a lease of its id, a value to mend, a purge first, a refusal) is
	// judged again from a read. A join from a view behind the item is
	// refused on freed or its room (the store numbers it), and its answer
	// is the next look.
	v := l.board(req.Key).recent(recentView)
	if v != nil && !a.joinsFrom(v, deadline) {
		v = nil
	}
	sent := int64(-1) // freed as the last join whose outcome was unknown saw it
	mended := false   // a join refused as invalid read the item again
	for tries := 0; ; tries++ {
		var err error
		if err = contended(ctx, req.Key, tries); err != nil {
			return "", err
		}
		if v, err = l.mend(ctx, req.Key, v); err != nil {
			return "", err
		}
		now := a.now()
		if t := v.ticketFor(a.me.id); t != nil {
			// Its join landed (an attempt whose answer was lost, or this
			// one).
			_ = l.startDue(ctx, req.Key, v, a.req.rules(v))
			return a.me.id, nil
		}
		if a.joined && v.leases[a.me.id] != 0 {
			// Its join landed and a worker has claimed the ticket since:
			// no other write makes a lease of its id.
			return a.me.id, nil
		}
		if sent >= 0 && v.freed != sent && v.leases[a.me.id] == 0 {
			// A join whose outcome was unknown may have landed, and its
			// ticket gone since (claimed and released, withdrawn): joining
			// again could run the task twice.
			return "", fmt.Errorf("lease: enqueue on %s: the outcome of its join is unknown; its ticket may have been claimed", req.Key)
		}
		if _, err := v.admits(req.Tool, a.me.breaker, a.me.label, now, nil); errors.As(err, new(*CircuitOpenError)) {
			l.stats.refused(err)
			return "", err
		}
		if rl := rateLimited(v, req.Rates, now, nil); rl != nil {
			l.stats.rateLimited.Add(1)
			return "", rl
		}
		if a.mustPurge(v, now) {
			nv, _, err := l.purgeAll(ctx, req.Key, v)
			if err != nil {
				return "", err
			}
			v = nv
			continue
		}
		if !time.Now().Before(deadline) {
			return "", fmt.Errorf("lease: enqueue on %s: the task's deadline passed while its joins were refused", req.Key)
		}
		seen := v.freed
		if v, err = a.join(ctx, v); a.joined && sent < 0 {
			sent = seen
		}
		if invalid(err) && !mended {
			// A value written by hand since its view: read, mended, and
			// judged again, once.
			v, mended = nil, true
			continue
		}
		if err != nil {
			return "", err
		}
	}
}

// joinsFrom reports whether v shows an enqueue nothing to do but join
// before deadline: no ticket or lease of its id, nothing to mend or
// purge, no gate or bucket refusing it.
func (a *attempt) joinsFrom(v *view, deadline time.Time) bool {
	now := a.now()
	_, err := v.admits(a.req.Tool, a.me.breaker, a.me.label, now, nil)
	return err == nil && v.ticketFor(a.me.id) == nil && v.leases[a.me.id] == 0 && !v.needsRepair() &&
		rateLimited(v, a.req.Rates, now, nil) == nil && !a.mustPurge(v, now) && time.Now().Before(deadline)
}

// MaxTaskID bounds the task id a ticket carries, in bytes.
const MaxTaskID = 64

// newAttempt is the attempt of lease (or ticket) id under req; task: a
// task's (Enqueue's join, a worker's Claim).
func (l *Limiter) newAttempt(req Request, id string, task bool) *attempt {
	a := &attempt{l: l, req: req, start: time.Now(), b: l.board(req.Key), look: overdueLook, task: task}
	a.me = asker{id: id, label: req.Holder, tool: req.Tool, toolCap: req.ToolCap, rates: req.Rates, nothing: !req.holds()}
	if req.Breaker != nil {
		a.me.breaker = req.Breaker.Name
	}
	if i := slices.IndexFunc(req.Rates, func(r Rate) bool { return r.Name == "tool:"+req.Tool }); i >= 0 {
		a.me.toolRPM = req.Rates[i].PerMinute // its names are unique (validate)
	}
	return a
}

// Claim takes the place of task ticket id for its worker if the task's
// turn has come (see Tasks in the package doc). req is the task's request
// as Enqueue was given it, but for the worker's Hold and CallBy. When it
// is not the task's turn it gives back its start (mark, from TaskStart)
// and fails with ErrNotYourTurn. While it is, a take refused on others'
// writes is made again: eagerRetries times from its answer, then each
// after a back-off from a new read, while its start is the ticket's and
// until StartTimeout after mark (ErrStartLapsed: no second worker is
// started before then). ErrNoTicket: the ticket is gone, or its task past
// its deadline; ErrClaimed: another worker's claim holds it.
func (l *Limiter) Claim(ctx context.Context, req Request, id string, mark int64) (ls *Lease, err error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	a := l.newAttempt(req, id, true)
	a.claim = rand.Text()[:12] // 60 random bits: which of a start's workers claimed
	// last is the ticket as last judged, in lastV.
	var last *ticket
	var lastV *view
	defer func() {
		if err == nil || errors.Is(err, ErrClaimed) {
			return
		}
		// A take of it whose answer was lost may hold the place (landed
		// before or after what the claim last read), claimed until its
		// lease lapses: given back, which starts the next worker.
		if len(a.unsure) > 0 && a.unclaimUnsure(ctx) {
			return
		}
		// Its context ended (its invocation's time, with its CallBy)
		// before a take could be made: the turn goes to the next start at
		// once, as for a take refused for want of time. (A store error
		// leaves the mark: the next start, StartTimeout on, is its pause.)
		if ctx.Err() != nil && last != nil && !slices.ContainsFunc(claimVerdicts, func(e error) bool { return errors.Is(err, e) }) {
			l.passTurn(ctx, req.Key, lastV, last, mark, a.req)
		}
	}()
	// A view this process saw since the start this worker runs was marked
	// (its ticket carrying that mark) stands in for the first read, to
	// make a take only: whatever else it shows (the ticket claimed or
	// gone, a purge first, not the task's turn) is judged again from the
	// store's own answer. Then a refused take's answer is the next look.
	v := l.board(req.Key).recent(recentView)
	seen := v != nil
	for tries := 0; ; tries++ {
		if err := contended(ctx, req.Key, tries); err != nil {
			return nil, err
		}
		if tries > eagerRetries {
			// After a back-off the answer before it is out of date: a
			// take judged from it would be refused as long as others'
			// releases come faster than the back-off.
			v, seen = nil, false
		}
		if seen {
			// Its own start's view, and nothing in it for a read to judge
			// first: no lease of its id, nothing to mend or purge, its
			// ticket a task's within its deadline.
			now := a.now()
			_, held := v.leases[id]
			if t := v.ticketFor(id); t == nil || mark == 0 || t.started != mark || held || !t.task ||
				!t.live(now+l.margin.Milliseconds()) || v.needsRepair() || a.mustPurge(v, now) {
				v, seen = nil, false
			}
		}
		// Read when there is no view. A value written by hand is put
		// right before the take that would be refused on it, as before
		// any other write.
		var err error
		if v, err = l.mend(ctx, req.Key, v); err != nil {
			return nil, err
		}
		now := a.now()
		exp, held := v.leases[id]
		t := v.ticketFor(id)
		switch {
		case held && slices.Contains(a.unsure, exp) && t != nil && t.claim == a.claim:
			// A take of this claim whose answer was lost landed: an
			// expiry one of them set (a later claim, after a lapse, sets
			// a later one), in a ticket that names this claim (another
			// worker of the same start may set the same expiry).
			return a.lease(ctx, exp, v, false)
		case held && (exp >= now || t == nil):
			return nil, ErrClaimed
		}
		// Held (a lease that lapsed: its worker died or is late, and the
		// ticket waits again), or not.
		// Its ticket lives Margin past the task's deadline (no clock
		// within the margin purges it early); no place goes to a task
		// past that deadline.
		if t == nil || !t.task || !t.live(now+l.margin.Milliseconds()) {
			return nil, ErrNoTicket
		}
		a.n, a.joined = t.n, true
		last, lastV = t, v
		if held || a.mustPurge(v, now) {
			// A lapsed claim's lease goes first, purged as any other's.
			// Its answer is the next look (nothing sent: read again).
			nv, _, err := a.purge(ctx, v, func(d time.Duration) error { return sleep(ctx, d, req.Key) })
			if err != nil {
				return nil, err
			}
			if nv == v {
				nv = nil
			}
			v = nv
			continue
		}
		served, h, bypass := a.decide(v, now)
		if !served && seen {
			v, seen = nil, false
			continue
		}
		if !served {
			l.passTurn(ctx, req.Key, v, t, mark, a.req)
			return nil, ErrNotYourTurn
		}
		if tries >= eagerRetries && (t.started != mark || l.clock().UnixMilli()-mark >= StartTimeout.Milliseconds()) {
			// Its start is no longer the ticket's (another was made, or
			// the mark given back by another worker of it), or another
			// worker may be started from the mark: this one leaves the
			// turn to it, starting it when nobody has. Its start was not
			// lost (its worker came), so the next reads as the first, the
			// task not passed (passTurn, which also forgets this
			// process's note of a start still the ticket's: younger than
			// the mark, it would keep startDue from the next).
			l.passTurn(ctx, req.Key, v, t, mark, a.req)
			return nil, ErrStartLapsed
		}
		// Conditioned on the start marks of the tasks it passes, as any
		// take is (see Tasks in the package doc).
		seen = false
		ls, nv, err := a.take(ctx, v, h, bypass, now)
		if ls != nil {
			return ls, err
		}
		if _, late := errors.AsType[*WaitTimeoutError](err); late {
			// No time left for the call (its worker's CallBy passed before
			// the take was made): the turn goes to the next start at once,
			// as from a take landing past it.
			l.passTurn(ctx, req.Key, v, t, mark, a.req)
			return nil, ErrStartLapsed
		}
		if err != nil {
			return nil, err
		}
		v = nv
	}
}

// claimVerdicts are Claim's failures on what it read of the ticket.
var claimVerdicts = []error{ErrNotYourTurn, ErrStartLapsed, ErrClaimed, ErrNoTicket}

// passTurn takes back start mark of ticket t, if it is still there, and
// starts from the answer (v without one) the tasks whose turn has come
// under req's rules: for a worker that leaves its task's turn, or finds
// it not come, within withdrawBudget whatever ctx's end (its invocation's
// time may be what ends the claim). A worker came: a start made since in
// the same run of unclaimed starts, the ticket's, is given back alike, so
// that the next start is a first and the task is not passed for starts
// no worker came for (see Tasks in the package doc).
func (l *Limiter) passTurn(ctx context.Context, key string, v *view, t *ticket, mark int64, req Request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawBudget)
	defer cancel()
	if mark != 0 && (t.started == mark || t.started > mark && t.unclaimedSince() <= mark) {
		u := newUpdate()
		sp := u.path(TicketsAttr, t.id, ticketStarted)
		u.remove(sp, u.path(TicketsAttr, t.id, ticketFirst))
		u.cond(sp + " = " + u.num(t.started))
		u.ttl(t.deadline)
		if nv, _ := l.write(ctx, key, u, nil); nv != nil {
			v = nv
		}
		l.board(key).forgetStart(t.id)
	}
	_ = l.startDue(ctx, key, v, req.rules(v))
}

// unclaimUnsure gives back, keeping the ticket, the place a take of this
// claim whose answer was lost holds, if a read shows it there (the lease
// at an expiry one of them set, the ticket naming this claim), as
// Unclaim: within withdrawBudget, the claim's own context ended or not.
// It reports whether it found that place.
func (a *attempt) unclaimUnsure(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawBudget)
	defer cancel()
	v, err := a.l.read(ctx, a.req.Key)
	if err != nil {
		return false
	}
	exp := v.leases[a.me.id]
	if t := v.ticketFor(a.me.id); t == nil || t.claim != a.claim || !slices.Contains(a.unsure, exp) {
		return false
	}
	// Given back by lease itself when its worker's time is out.
	if ls, _ := a.lease(ctx, exp, v, false); ls != nil {
		_ = ls.Unclaim(ctx)
	}
	return true
}

// Withdraw takes task taskID's ticket id out of key's queue while no
// worker holds its place (see Tasks in the package doc). ErrNoTicket: it
// is not there, or is another task's (a start naming a ticket its task
// never had withdraws nothing); ErrClaimed: a worker holds its place.
func (l *Limiter) Withdraw(ctx context.Context, key, id, taskID string) error {
	v, err := l.read(ctx, key)
	if err != nil {
		return err
	}
	unsure := false
	for range maxAdminTries {
		// freed or a set written by hand as another type would refuse the
		// withdrawal's ADD or DELETE: mended first.
		if len(v.fixes) > 0 {
			if v, err = l.mend(ctx, key, v); err != nil {
				return err
			}
		}
		t := v.ticketFor(id)
		if t != nil && t.task && t.taskID != taskID {
			return ErrNoTicket
		}
		now := l.clock().UnixMilli()
		if exp, held := v.leases[id]; t == nil || !t.task || held && exp >= now {
			switch {
			case v.leases[id] != 0:
				return ErrClaimed
			case unsure:
				return nil // an attempt whose answer was lost landed
			}
			return ErrNoTicket
		}
		u := newUpdate()
		u.removeTicket(t.id, t.label, t.n, true)
		if _, held := v.leases[id]; held {
			// A claim's lease that lapsed (its worker died or is late)
			// goes with it, as it was.
			u.removeLease(v, id)
		} else {
			u.cond("attribute_not_exists(" + u.path(LeasesAttr, id) + ")")
		}
		u.count(u.path(FreedAttr), 1) // a ticket leaving can change whose turn it is
		u.ttl(now)
		nv, err := l.write(ctx, key, u, func() { unsure = true })
		if errors.Is(err, errCondition) && nv != nil {
			v = nv
			continue
		}
		return wrapf(err, "lease: withdraw %s from %s: %w", id, key)
	}
	return fmt.Errorf("lease: withdraw %s from %s: the item kept changing; try again", id, key)
}

// StartDue reads req.Key's item and starts a worker for each task whose
// turn has come and whose last start, if any, is StartTimeout old: what a
// schedule runs, so that a task whose start was lost runs although no
// request comes to see its turn. req gives the key's caps and buckets.
func (l *Limiter) StartDue(ctx context.Context, req Request) error {
	v, err := l.read(ctx, req.Key)
	if err != nil {
		return err
	}
	return l.startDue(ctx, req.Key, v, req.rules(v))
}

// startDue starts a worker for each task of v whose turn has come under
// r, unless a start of it is younger than StartTimeout (in the item, or
// here), each won by its mark (markStart). It returns the error of the
// mend a view showing a malformed value needs first (nothing started).
func (l *Limiter) startDue(ctx context.Context, key string, v *view, r rules) error {
	if l.onStart == nil || v == nil || v.tickets(true) == 0 {
		return nil
	}
	if len(v.fixes) > 0 {
		// A start mark written by hand would fail its mark's condition.
		var err error
		if v, err = l.mend(ctx, key, v); err != nil {
			return err
		}
	}
	now := l.clock().UnixMilli()
	b := l.board(key)
	// The tasks whose turn has come, passing those whose starts went
	// unclaimed StartTimeout (each started again when its last start is
	// that old): a task behind one no worker comes for is started too.
	// Nobody is presumed gone here (no turn seen before).
	h, _, passed := v.presume(now, nil, r, nil)
	for _, t := range append(passed, h.ahead...) {
		// This process's own note of a start it made holds only while the
		// ticket carries a mark: a worker that gave its start back took
		// the mark away, and the next to see the turn starts one at once.
		if !t.task || t.started > now-StartTimeout.Milliseconds() || !b.mayStart(t.id, time.Now()) && t.started != 0 {
			continue
		}
		if ctx.Err() != nil {
			// Its context ended: the marks not made leave the turns to
			// the next to see them, at once (no mark), rather than each
			// learning nothing from a store it cannot ask.
			return ctx.Err()
		}
		if l.markStart(ctx, key, v, t, now) {
			// A mark won is a start owed, whatever ended its context
			// meanwhile (markStart reads past it).
			l.onStart(context.WithoutCancel(ctx), TaskStart{Key: key, Ticket: t.id, Task: t.taskID, Mark: now})
		}
	}
	return nil
}

// markStart writes now as ticket t's start, keeping when its starts
// first went out unclaimed (see Tasks in the package doc): true when it
// landed. Its caller has judged t's last start, if any, StartTimeout old.
func (l *Limiter) markStart(ctx context.Context, key string, v *view, t *ticket, now int64) bool {
	u := newUpdate()
	sp := u.path(TicketsAttr, t.id, ticketStarted)
	u.set(sp, u.num(now))
	u.set(u.path(TicketsAttr, t.id, ticketFirst), u.num(cmp.Or(t.unclaimedSince(), now)))
	u.cond(u.path(TasksAttr, t.id) + " = " + u.num(t.n))
	// The last start as seen: the first is then what it saw.
	if t.started == 0 {
		u.cond("attribute_not_exists(" + sp + ")")
	} else {
		u.cond(sp + " = " + u.num(t.started))
	}
	if exp, held := v.leases[t.id]; held {
		u.cond(u.path(LeasesAttr, t.id) + " = " + u.num(exp))
	} else {
		u.cond("attribute_not_exists(" + u.path(LeasesAttr, t.id) + ")")
	}
	u.ttl(t.deadline)
	unsure := false
	nv, err := l.write(ctx, key, u, func() { unsure = true })
	if err == nil || !unsure {
		return err == nil
	}
	if !errors.Is(err, errCondition) || nv == nil {
		if ctx.Err() == nil {
			return false
		}
		// Its context ended with an attempt's answer out: the item tells
		// whether the mark landed, read within a budget of its own.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawBudget)
		defer cancel()
		if nv, err = l.read(rctx, key); err != nil {
			return false
		}
	}
	// An attempt whose answer was lost may have landed, and the next
	// failed on it: the mark is its own when the ticket shows it (another's
	// made the same millisecond starts a second worker, which claims
	// nothing).
	nt := nv.ticketFor(t.id)
	return nt != nil && nt.n == t.n && nt.started == now
}

// maxNamed bounds the tickets a join's reserve condition names as waiting
// no more: a principal with more in its waiting set is held to the
// reserve as if one of them waited.
const maxNamed = 8

// notWaiting returns label's tickets in v that wait no more at now —
// claimed or lapsed — when they are all its waiting set's members, at
// most maxNamed; ok false otherwise.
func (v *view) notWaiting(label string, now int64) (ts []*ticket, ok bool) {
	members := v.sets[WaitingAttr(label)]
	if len(members) > maxNamed {
		return nil, false
	}
	for _, id := range members {
		t := v.ticketFor(id)
		if t == nil || t.label != label || v.waits(t, now) {
			return nil, false
		}
		ts = append(ts, t)
	}
	return ts, true
}

// stillNotWaiting is the alternative, in a join's reserve condition, that
// label's waiting set wp holds only the tickets notWaiting returns, each
// still so at now: a claimed one's lease live, a lapsed one's deadline
// past. "" when there are none, or when one waits.
func (u *update) stillNotWaiting(wp string, v *view, label string, now int64) string {
	ts, ok := v.notWaiting(label, now)
	if !ok || len(ts) == 0 {
		return ""
	}
	set, at := u.path(wp), u.num(now)
	c := " OR (size(" + set + ") = " + u.num(int64(len(ts)))
	for _, t := range ts {
		c += " AND contains(" + set + ", " + u.str(t.id) + ")"
		if t.live(now) {
			c += " AND " + u.path(LeasesAttr, t.id) + " >= " + at
		} else {
			c += " AND " + u.path(TicketsAttr, t.id, ticketDeadline) + " < " + at
		}
	}
	return c + ")"
}
