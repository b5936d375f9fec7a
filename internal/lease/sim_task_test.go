package lease

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Tasks in the fault simulation. Some schedules also enqueue tasks
// (Enqueue, with deadlines), whose workers are started by whichever
// instance's request sees a task's turn come (Options.OnTaskStart) and
// claim its place (Claim) — some starts lost, some made twice (two
// workers for one start), some workers dying between their claim and the
// mark of the task's record (a tiny fake of it), some during their call —
// while tasks are withdrawn at random times (Withdraw)
// and a schedule of the key starts the tasks due (StartDue), every
// request under the same faults as the callers'. The model judges every
// write of theirs as it judges the callers' (mJudgeWrite: judgeClaim,
// judgeMark, the tasks' own queue places), and taskLiveness checks that
// a task whose turn has come is started again after a lost start.

const (
	// simSweepEvery is how often the key's schedule runs StartDue.
	simSweepEvery = 1500 * time.Millisecond
	// simWorkerDelay bounds how long a worker takes to start.
	simWorkerDelay = 500 * time.Millisecond
)

// simTask is one task: its request, deadline, and what became of it.
type simTask struct {
	n         int
	id        string // the task's own id (Enqueue's taskID)
	ticket    string // its ticket's id, once known
	inst      int
	principal string
	tool      string
	arrive    time.Duration
	wait      time.Duration // its deadline, from its enqueue
	withdraw  time.Duration // when it is withdrawn after its enqueue (-1: never)
	callFor   time.Duration
	req       Request
	enq       *simCaller // the enqueuer: owner of the ticket's id
	deadline  time.Time
	// workers are the workers started for it; claims the places they
	// were given. marked is the worker whose mark of the task's record
	// landed (nil: none), calls the calls its workers made: the record
	// as the gateway keeps it, cut to its conditional mark (a call is
	// made only once the record is marked, and never on a record an
	// earlier claim marked).
	workers []*simCaller
	claims  int
	marked  *simCaller
	calls   int
	// Liveness: since when its turn has come (zero: it has not), and
	// since when its start mark is as it is now.
	turnSince time.Time
	mark      int64
	markSince time.Time
	latAt     time.Duration
	// dead: its turn came only past callers dead ahead of it, passed by
	// the live callers behind: the claim windows of the dead callers seen
	// ahead of it in the streak (deadCW), the live callers' faulted
	// requests when each was first seen in it (deadLat), when each was
	// first seen (deadSeen), and their longest look period (deadLook).
	dead     bool
	deadCW   map[string]time.Duration
	deadLat  map[*simCaller]time.Duration
	deadSeen map[*simCaller]time.Time
	deadLook time.Duration
}

// simTaskRegressionSeeds are seeds that once found a defect with tasks in
// the schedule; every run of the simulation replays them. (Apart from
// simRegressionSeeds, whose schedules have no tasks.)
var simTaskRegressionSeeds = []uint64{
	721,     // a task's join landing late brought its ticket back after its claim and release: the task ran twice
	2537,    // two workers of one start: one's take landed, the other's answer was lost, and it took the lease for its own
	4016351, // a join whose answer was lost landed, its ticket was claimed and released, and Enqueue joined again: the task ran twice
	4017160, // the same
	4139,    // two workers of one start: one's take landed, the other's had an unknown outcome (found again once claims kept their tickets)
}

// taskPlan draws, from a stream of its own, the tasks of a run (none for
// the regression seeds, whose schedules stay as they were found).
func (s *sim) taskPlan(instances int) {
	tr := mrand.New(mrand.NewPCG(s.seed, 0x7a5c5))
	if slices.Contains(simRegressionSeeds, s.seed) || tr.IntN(3) > 0 && !slices.Contains(simTaskRegressionSeeds, s.seed) {
		return
	}
	s.planTasks(tr, instances)
}

// planTasks draws the tasks of a run from tr.
func (s *sim) planTasks(tr *mrand.Rand, instances int) {
	s.trng = tr
	s.mrng = mrand.New(mrand.NewPCG(s.seed, 0x3a7c))
	s.mtasks = newMTasks()
	principals := 2 + tr.IntN(3)
	for i := range 1 + tr.IntN(4) {
		t := &simTask{n: i, id: "t" + strconv.Itoa(i), inst: tr.IntN(instances), principal: "p" + strconv.Itoa(tr.IntN(principals)),
			arrive: time.Duration(tr.IntN(6000))*time.Millisecond + time.Duration(i)*time.Microsecond,
			wait:   time.Duration(2000+tr.IntN(10000)) * time.Millisecond, withdraw: -1,
			callFor: time.Duration(50+tr.IntN(1500)) * time.Millisecond}
		switch tr.IntN(3) {
		case 1:
			t.tool = "a"
		case 2:
			t.tool = "b"
		}
		if tr.IntN(3) == 0 {
			// A long task: its lost starts are made again, StartTimeout on.
			t.wait += StartTimeout
		}
		if tr.IntN(3) == 0 {
			t.withdraw = time.Duration(tr.IntN(int(t.wait / time.Millisecond)))
			t.withdraw *= time.Millisecond
		}
		t.enq = s.taskCaller(t, t.inst)
		t.req = t.enq.req
		s.tasks = append(s.tasks, t)
	}
	s.events["a run with tasks"]++
	s.logf("tasks: %d", len(s.tasks))
}

// taskCaller is a new actor of task t on instance inst: its enqueuer, a
// worker, its withdrawal.
func (s *sim) taskCaller(t *simTask, inst int) *simCaller {
	c := &simCaller{id: 1000 + len(s.taskCallers), inst: inst, principal: t.principal, tool: t.tool, wait: t.wait, task: t,
		settled: make(chan struct{}), final: mNoOutcome, grant: -1, inflight: map[*simReq]bool{}}
	c.req = s.request(c)
	s.taskCallers = append(s.taskCallers, c)
	return c
}

// taskStarter is instance inst's OnTaskStart: it records the start and
// starts its workers: none (a start lost), one, or two (a start made
// twice).
func (s *sim) taskStarter(limiters []*Limiter) func(context.Context, TaskStart) {
	return func(_ context.Context, ts TaskStart) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ending {
			return
		}
		var t *simTask
		for _, x := range s.tasks {
			if x.id == ts.Task {
				t = x
			}
		}
		if t == nil || ts.Key != "srv" || ts.Ticket == "" || ts.Mark == 0 {
			s.fail("task-start", ts.Task, "a start for an unknown task: %+v", ts)
			return
		}
		if o := s.owners[ts.Ticket]; o == nil || o.task != t {
			s.fail("task-start", ts.Task, "a start of %s names ticket %s, which is not its own", ts.Task, ts.Ticket)
			return
		}
		s.events["task start"]++
		workers := 1
		switch x := s.trng.IntN(10); {
		case x < 3:
			workers = 0
			s.events["task start lost"]++
		case x < 5:
			workers = 2
			s.events["task start made twice"]++
		}
		s.logf("start of %s (%s, mark %d): %d workers", t.id, ts.Ticket, ts.Mark, workers)
		for range workers {
			w := s.taskCaller(t, s.trng.IntN(len(limiters)))
			w.callFor = t.callFor
			w.outcome = []Outcome{Success, Success, Failure, Unused}[s.trng.IntN(4)]
			die := s.trng.IntN(6) == 0
			dieBeforeMark := s.mrng.IntN(6) == 0
			// Some workers' invocations are nearly over (their claim's take
			// may land past CallBy), and some workers that make no call
			// give their place back keeping the ticket (Unclaim).
			var short time.Duration
			if s.mrng.IntN(6) == 0 {
				short = time.Duration(s.mrng.IntN(300)) * time.Millisecond
			}
			unclaim := w.outcome == Unused && s.mrng.IntN(2) == 0
			delay := time.Duration(s.trng.IntN(int(simWorkerDelay/time.Millisecond))) * time.Millisecond
			t.workers = append(t.workers, w)
			s.taskWG.Add(1)
			go func() {
				defer s.taskWG.Done()
				s.worker(limiters[w.inst], w, ts, delay, short, die, dieBeforeMark, unclaim)
			}()
		}
	}
}

// worker claims its task's place, marks its record, and runs the call
// (or dies first, before its mark or during its call). A worker that
// finds the record marked by an earlier claim of the task (its worker
// died during its call) gives its place back unused: the call is made at
// most once. short (0: none) is the time its invocation has left for
// its claim (CallBy); with unclaim, a worker that makes no call gives its
// place back keeping the ticket.
func (s *sim) worker(l *Limiter, w *simCaller, ts TaskStart, delay, short time.Duration, die, dieBeforeMark, unclaim bool) {
	time.Sleep(delay)
	ctx := context.WithValue(context.Background(), simCallerKey{}, w)
	s.mu.Lock()
	if s.ending || w.state == simDead {
		s.mu.Unlock()
		return
	}
	w.state, w.arrivedAt = simAcquiring, time.Now()
	req := w.req
	if short > 0 {
		req.CallBy = time.Now().Add(short)
		s.events["task worker with little time left"]++
	}
	s.mu.Unlock()
	ls, err := l.Claim(ctx, req, ts.Ticket, ts.Mark)
	s.mu.Lock()
	if w.state == simDead {
		s.mu.Unlock()
		return
	}
	if err != nil {
		w.settle(simDone)
		s.logf("c%d claim of %s failed: %v", w.id, ts.Ticket, err)
		switch {
		case errors.Is(err, ErrClaimed):
			s.events["task claim: claimed already"]++
		case errors.Is(err, ErrNotYourTurn):
			s.events["task claim: not its turn"]++
		case errors.Is(err, ErrStartLapsed):
			s.events["task claim: its start lapsed"]++
		case errors.Is(err, ErrNoTicket):
			s.events["task claim: no ticket"]++
		default:
			s.events["task claim failed otherwise"]++
		}
		s.mu.Unlock()
		return
	}
	t := w.task
	if t.claims++; t.claims > 1 {
		s.events["task claimed again"]++
	}
	if ls.ID() != ts.Ticket {
		s.fail("task-claim", ts.Ticket, "the claim of %s gave lease %s", ts.Ticket, ls.ID())
	}
	// One place at a time: a claim is granted again only once the last
	// one's lease lapsed, which is past its holder's call deadline.
	for _, x := range t.workers {
		if x != w && x.state == simHolding && x.leaseID == ls.ID() && time.Now().Before(x.deadline) {
			s.fail("task-twice", ts.Ticket, "task %s claimed by c%d while c%d holds its place, its call deadline %v away", t.id, w.id, x.id, time.Until(x.deadline))
		}
	}
	w.state, w.leaseID, w.deadline = simHolding, ls.ID(), ls.CallDeadline
	s.events["task worker holds its place"]++
	s.logf("c%d (worker of %s) holds %s", w.id, t.id, ls.ID())
	if dieBeforeMark && w.outcome != Unused {
		// Its lease lapses; its ticket, kept by the claim, waits again.
		s.events["task worker died between its claim and its mark"]++
		s.kill(w)
		s.mu.Unlock()
		return
	}
	if w.outcome != Unused {
		// The mark, conditioned on the record as the worker read it: on
		// a record an earlier claim marked, it does not land.
		switch {
		case t.marked != nil:
			s.events["task worker found its record marked by an earlier claim"]++
			s.logf("c%d (worker of %s): its record was marked by c%d", w.id, t.id, t.marked.id)
			w.outcome = Unused
		case !time.Now().Before(ls.CallDeadline):
			s.events["task worker marked its record past its call's deadline"]++
			t.marked, w.outcome = w, Unused
		default:
			t.marked = w
			if t.calls++; t.calls > 1 {
				s.fail("task-twice", ts.Ticket, "task %s's call was made %d times", t.id, t.calls)
			}
			w.running, w.called = true, true
			s.events["task worker marked its record"]++
		}
	}
	if die && w.running {
		s.events["task worker died during its call"]++
		s.kill(w)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if w.outcome != Unused {
		time.Sleep(w.callFor)
	}
	s.mu.Lock()
	if w.state == simDead {
		s.mu.Unlock()
		return
	}
	w.state, w.running, w.final = simFinishing, false, w.outcome
	w.finishAt = s.clock(w, time.Now()).UnixMilli()
	unclaim = unclaim && w.outcome == Unused
	s.mu.Unlock()
	if unclaim {
		err = ls.Unclaim(ctx)
	} else {
		_, err = ls.Finish(ctx, w.outcome)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.state == simDead {
		return
	}
	w.settle(simDone)
	if unclaim && err == nil {
		s.events["task worker gave its place back keeping its ticket"]++
	}
	s.logf("c%d (worker of %s) finished %v (unclaim %v): %v", w.id, t.id, w.outcome, unclaim, err)
}

// task is one task's life: its enqueue and, for some, its withdrawal.
func (s *sim) task(limiters []*Limiter, t *simTask) {
	time.Sleep(t.arrive)
	c := t.enq
	ctx := context.WithValue(context.Background(), simCallerKey{}, c)
	s.mu.Lock()
	c.state, c.arrivedAt = simAcquiring, time.Now()
	t.deadline = c.arrivedAt.Add(t.wait)
	s.logf("task %s enqueued on i%d as %s for tool %q until %v", t.id, c.inst, t.principal, t.tool, t.wait)
	s.mu.Unlock()
	id, err := limiters[c.inst].Enqueue(ctx, t.req, "", t.id, t.deadline)
	s.mu.Lock()
	if err != nil {
		s.logf("task %s enqueue failed: %v", t.id, err)
		var full *FullError
		switch {
		case errors.As(err, &full):
			s.events["task refused: "+full.Reason]++
			s.judgeFull(c, full, true)
		default:
			s.events["task enqueue failed otherwise"]++
		}
	} else {
		t.ticket = id
		s.events["task enqueued"]++
		if c.reads == 0 {
			s.events["task enqueued with no read"]++
		}
	}
	c.settle(simDone)
	s.mu.Unlock()
	if err != nil || t.withdraw < 0 {
		return
	}
	time.Sleep(t.withdraw)
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return
	}
	wc := s.taskCaller(t, s.trng.IntN(len(limiters)))
	wc.state, wc.arrivedAt = simAcquiring, time.Now()
	s.mu.Unlock()
	err = limiters[wc.inst].Withdraw(context.WithValue(context.Background(), simCallerKey{}, wc), "srv", id, t.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	wc.settle(simDone)
	s.logf("task %s withdrawn: %v", t.id, err)
	switch {
	case err == nil:
		s.events["task withdrawn"]++
	case errors.Is(err, ErrClaimed):
		s.events["task withdraw: claimed already"]++
	case errors.Is(err, ErrNoTicket):
		s.events["task withdraw: no ticket"]++
	default:
		s.events["task withdraw failed otherwise"]++
	}
}

// sweepTasks is the key's schedule: StartDue every simSweepEvery, from a
// random instance, until the last task's ticket has lapsed or left.
func (s *sim) sweepTasks(limiters []*Limiter, until time.Duration) {
	for time.Since(simEpoch) < until {
		time.Sleep(simSweepEvery)
		s.mu.Lock()
		if s.ending || s.tasksOver() {
			s.mu.Unlock()
			return
		}
		c := &simCaller{id: 1000 + len(s.taskCallers), inst: s.trng.IntN(len(limiters)), principal: "sched",
			settled: make(chan struct{}), final: mNoOutcome, grant: -1, inflight: map[*simReq]bool{}, sweeper: true}
		c.req = s.request(c)
		s.taskCallers = append(s.taskCallers, c)
		c.state, c.arrivedAt = simAcquiring, time.Now()
		s.events["task schedule ran StartDue"]++
		s.mu.Unlock()
		err := limiters[c.inst].StartDue(context.WithValue(context.Background(), simCallerKey{}, c), c.req)
		s.mu.Lock()
		if c.state != simDead {
			c.settle(simDone)
		}
		if err != nil {
			s.events["task schedule's StartDue failed"]++
		}
		s.mu.Unlock()
	}
}

// tasksOver reports whether every task was enqueued (or refused) and no
// task's ticket is left in the item.
func (s *sim) tasksOver() bool {
	for _, t := range s.tasks {
		if t.enq.state != simDone {
			return false
		}
	}
	for _, tk := range s.cur.tickets {
		if tk.task {
			return false
		}
	}
	return true
}

// taskSweepLat is the time the schedule's faults cost the key's StartDue
// schedule: the sum of its callers' faulted requests.
func (s *sim) taskSweepLat(now time.Time) time.Duration {
	var lat time.Duration
	for _, c := range s.taskCallers {
		if !c.sweeper {
			continue
		}
		lat += c.lat
		for r := range c.inflight {
			lat += now.Sub(r.sent)
		}
	}
	return lat
}

// taskLiveness: a task whose turn has come (as the slowest clock within
// the skew sees it, its own ticket counted whatever its mark) is claimed,
// or started again, in time: while its ticket carries no start, someone
// must start it within simTaskSlack; while it carries one, within
// StartTimeout + simTaskSlack of that start (doc.go: a lost start is made
// again by the first to see the turn StartTimeout after it; here the
// schedule's StartDue sees it within simSweepEvery) — plus what the
// store's faults cost the schedule's StartDue meanwhile. Each new start,
// or a start given back, begins the count again.
func (s *sim) taskLiveness(it *mItem, now time.Time) {
	if s.ending || len(s.tasks) == 0 {
		return
	}
	slow := now.Add(-simSkew).UnixMilli()
	var turn []mCaller // the turn with every task not passed in it
	computed := false
	// The callers dead in the queue, which live callers behind a task
	// pass for it (doc.go Tasks), and what those live callers' faults and
	// look periods allow them.
	var deadTurn []mCaller
	live := map[*simCaller]*mTicket{}
	dead := map[string]bool{}
	for id, tk := range it.tickets {
		if tk.task {
			continue
		}
		c := s.owners[id]
		if c != nil && !c.operator && c.task == nil && c.state == simAcquiring && now.Before(c.arrivedAt.Add(c.wait)) {
			live[c] = tk
		} else if mLive(tk.d, slow) {
			dead[id] = true
		}
	}
	// Whose ticket comes first: fewest held by its principal, then number.
	held := map[string]int{}
	for p, ids := range it.principals {
		held[p] = it.liveIn(ids, slow)
	}
	first := func(a, b *mTicket) bool { return held[a.p] < held[b.p] || held[a.p] == held[b.p] && a.n < b.n }
	latOf := func(c *simCaller) time.Duration {
		lat := c.lat
		for r := range c.inflight {
			lat += now.Sub(r.sent)
		}
		return lat
	}
	for _, t := range s.tasks {
		tk := it.tickets[t.ticket]
		if t.ticket == "" || tk == nil || !tk.hasN || !tk.task || !mLive(tk.d, slow) || !now.Before(t.deadline) {
			t.turnSince = time.Time{}
			continue
		}
		if tk.s != t.mark || t.markSince.IsZero() {
			t.mark, t.markSince = tk.s, now
		}
		if !computed {
			turn, computed = it.handout(s.key, slow, nil, nil), true
		}
		served := mServed(turn, t.ticket)
		if mStale(tk, slow) {
			// Passed by the callers behind; its own turn counts it.
			served = mServed(it.handout(s.key, slow, []mCaller{tk.caller()}, nil), t.ticket)
		}
		// The live callers behind it, which pass the dead ones for it.
		behind := map[*simCaller]bool{}
		for c, ct := range live {
			if first(tk, ct) {
				behind[c] = true
			}
		}
		byDead := false
		if !served && len(dead) > 0 && len(behind) > 0 {
			if deadTurn == nil {
				deadTurn = it.handout(s.key, slow, nil, dead)
			}
			served, byDead = mServed(deadTurn, t.ticket), true
		}
		if !served || t.dead != byDead {
			t.turnSince, t.dead = time.Time{}, false
			if !served {
				continue
			}
		}
		lat := s.taskSweepLat(now)
		if t.turnSince.IsZero() {
			t.turnSince, t.latAt = now, lat
			t.dead, t.deadCW, t.deadLat, t.deadSeen, t.deadLook = byDead, map[string]time.Duration{}, map[*simCaller]time.Duration{}, map[*simCaller]time.Time{}, 0
		}
		from := t.turnSince
		if t.markSince.After(from) {
			from = t.markSince
		}
		allow := simTaskSlack + (lat - t.latAt)
		if t.mark != 0 {
			allow += StartTimeout
		}
		if t.dead {
			// A live caller behind sees the dead callers' turns within its
			// look period, presumes them gone a claim window on (each),
			// passes them after a claim window more of steady looks, and
			// starts it: what its faults cost it besides.
			for id := range dead {
				if d := it.tickets[id]; first(d, tk) {
					t.deadCW[id] = d.claimWindow()
				}
			}
			cws := time.Duration(0)
			for _, cw := range t.deadCW {
				cws += cw
			}
			for c := range behind {
				if _, ok := t.deadLat[c]; !ok {
					t.deadLat[c], t.deadSeen[c] = latOf(c), now
				}
				t.deadLook = max(t.deadLook, c.lookBound)
			}
			faults := time.Duration(0)
			for c, at := range t.deadLat {
				faults += latOf(c) - at
			}
			allow += 2*cws + t.deadLook + faults
			// Each caller sees the turns for itself: the count starts with
			// the one behind the longest (callers that each wait less than
			// the claim windows never pass the dead ones: doc.go Tasks).
			earliest := now
			for c := range behind {
				if t.deadSeen[c].Before(earliest) {
					earliest = t.deadSeen[c]
				}
			}
			if earliest.After(from) {
				from = earliest
			}
		}
		waited := now.Sub(from)
		s.maxEvent("task's wait for a start past StartTimeout (or none), of its slack, ms", int((waited - (allow - simTaskSlack)).Milliseconds()))
		if waited > allow {
			why, skip := "", map[string]bool(nil)
			if t.dead {
				why, skip = fmt.Sprintf(" (passing %d callers dead ahead of it)", len(t.deadCW)), dead
			}
			s.fail("task-liveness", t.ticket, "task %s (%s) has had its turn for %v%s, its start (mark %d) unchanged for %v, unclaimed; allowed %v: %s",
				t.id, t.ticket, now.Sub(t.turnSince), why, t.mark, now.Sub(t.markSince), allow, it.explain(s.key, slow, tk.caller(), skip))
			t.turnSince = now // once per streak
		}
	}
}

// simTaskSlack is how long after its turn came (or its last start went
// stale) a task may wait for a start: the schedule's period, its read
// answered (a request answered late is a fault, counted apart), clocks
// apart by twice the skew, and a look's worth besides.
const simTaskSlack = simSweepEvery + 2*simSkew + DefaultMaxLook

// taskOwns reports whether c, an actor of a task, owns id: an id of its
// task's ticket and lease.
func (s *sim) taskOwns(c *simCaller, id string) bool {
	o := s.owners[id]
	return o != nil && c.task != nil && o.task == c.task
}

// taskRest is how long after the run the last task's ticket may live.
func (s *sim) taskRest() time.Duration {
	var rest time.Duration
	for _, t := range s.tasks {
		// Its ticket lives to its deadline and a margin; a worker that
		// claims it at the last moment holds its lease a hold and a
		// margin more.
		if end := t.arrive + t.wait + simMargin + simHold + simMargin + 2*simSkew + time.Second; end > rest {
			rest = end
		}
	}
	return rest
}

// taskLeaseBound is the latest expiry task lease id may hold, given its
// workers (ok false: one of them is still there, or none has claimed).
func (s *sim) taskLeaseBound(t *simTask) (int64, bool) {
	var last time.Time
	for _, w := range t.workers {
		switch w.state {
		case simDone, simDead:
			if w.stoppedAt.After(last) {
				last = w.stoppedAt
			}
		case simArriving:
		default:
			return 0, false
		}
	}
	if last.IsZero() {
		return 0, false
	}
	return last.Add(simHold + simMargin + simSkew).UnixMilli(), true
}
