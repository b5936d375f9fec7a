package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The fault simulation runs the limiter's public API — Acquire, Renew,
// Finish — for many callers on several simulated gateway instances against
// one store, in fake time (testing/synctest), and checks the protocol's
// invariants after every store answer. Each seed is one reproducible
// schedule: when callers arrive, on which instance, as which principal,
// for which tool, how long they wait and hold, how their calls end, and
// what happens to each store request — answered, its answer lost after it
// landed, not sent, sent twice (an SDK retry whose first attempt landed),
// its first attempt landing late after a retry, answered late — and which
// callers and instances die, with each instance's clock skewed within the
// margin. Store requests are served one at a time, in an order the seed
// picks among those pending, so a failing seed replays the same way.
//
// LEASE_SIM_SEEDS sets how many seeds run (make test runs a short budget,
// make soak a long one), from LEASE_SIM_FROM (1); LEASE_SIM_SEED runs one
// seed, with its event log.

const (
	simHold   = 2 * time.Second
	simMargin = time.Second
	simSkew   = 400 * time.Millisecond // < simMargin
)

// simFate is what the simulated network does with one store request.
type simFate int

const (
	simPass   simFate = iota
	simLose           // landed; its answer lost (an error returned)
	simRefuse         // not sent; an error returned
	simDelay          // sent late: landed and answered after a while
	simSlow           // landed now; answered after a while
	simRetry          // the attempt landed with its answer lost, or is held and lands later; the SDK sends it again after a backoff
	simLate           // (one attempt only) held, landing later; the caller is told it failed
	simDie            // the caller dies here (the request may have landed)
)

var errSim = errors.New("sim: connection reset")

type simCallerKey struct{}

// simCaller is one call through the limiter, and what the simulation knows
// of it.
type simCaller struct {
	id        int
	inst      int
	principal string
	tool      string // "" (server slot only), "a" (capped tool) or "b"; the breaker guards a or b
	wait      time.Duration
	arrive    time.Duration
	callFor   time.Duration
	outcome   Outcome
	pause     time.Duration // the Retry-After its upstream answers with

	// Ground truth, under sim.mu.
	state     simState
	arrivedAt time.Time
	stoppedAt time.Time // when it stopped being there (gave up, finished, died)
	leaseID   string
	probe     bool
	running   bool // its call is running upstream, until deadline
	deadline  time.Time
	reqs      int
	settled   chan struct{} // closed once it is done or dead
	// lastLanded: the caller's last write landed; sealed: it was so when
	// the caller ended, its tombstone or withdrawal in place.
	lastLanded, sealed bool
}

// settle marks c done or dead, under sim.mu.
func (c *simCaller) settle(st simState) {
	if c.state == simDone || c.state == simDead {
		return
	}
	c.state, c.stoppedAt, c.running = st, time.Now(), false
	c.sealed = c.lastLanded
	close(c.settled)
}

type simState int

const (
	simArriving simState = iota
	simAcquiring
	simHolding
	simFinishing
	simDone
	simDead
)

type simReq struct {
	c      *simCaller
	seq    int
	upd    *dynamodb.UpdateItemInput
	get    *dynamodb.GetItemInput
	single bool // the caller turned the SDK's retries off: one attempt
	retry  bool // an SDK retry of an earlier attempt
	// judged is the seq of the view a take was judged from (-1: none).
	judged int64
	sent   time.Time
	done   chan simAns
}

type simAns struct {
	upd *dynamodb.UpdateItemOutput
	get *dynamodb.GetItemOutput
	err error
}

// noteTurns records, for each ticket whose turn comes in item — the item
// an instance was just given, which its waiters may judge from now or
// later — the earliest time a clock within the skew could judge so: at
// once, or once a lease in it expires or a ticket lapses. A caller whose
// turn came may be presumed gone ClaimWindow after that, not before.
func (s *sim) noteTurns(item map[string]types.AttributeValue) {
	if item == nil {
		return
	}
	v := parseItem(item)
	now := time.Now()
	first := now.Add(simSkew).UnixMilli()
	at := []int64{first}
	for _, exp := range v.leases {
		if exp >= first {
			at = append(at, exp+1)
		}
	}
	for _, t := range v.queue {
		if t.deadline >= first {
			at = append(at, t.deadline+1)
		}
	}
	for _, ms := range at {
		ahead := v.walk(ms, nil, s.limits(v), nil).ahead
		came := time.UnixMilli(ms).Add(-simSkew)
		for _, t := range ahead {
			if old, ok := s.turnCame[t.id]; !ok || came.Before(old) {
				s.turnCame[t.id] = came
			}
		}
	}
}

// item is the item the answer shows, if any.
func (a simAns) item() map[string]types.AttributeValue {
	var ccf *types.ConditionalCheckFailedException
	switch {
	case a.get != nil:
		return a.get.Item
	case a.upd != nil:
		return a.upd.Attributes
	case errors.As(a.err, &ccf):
		return ccf.Item
	}
	return nil
}

// seq is the seq of the item the answer shows (0 if none).
func (a simAns) seq() int64 { return numberOr(a.item()[SeqAttr], 0) }

// simWrite is one write the simulated store applied, and its answer: the
// item after it, or as it was when its condition failed.
type simWrite struct {
	in   *dynamodb.UpdateItemInput
	err  error
	item map[string]types.AttributeValue
}

// simDue is a request the scheduler deferred, due now: numbered, so that
// those due at one instant go in the order they were deferred.
type simDue struct {
	n int
	f func()
}

type sim struct {
	t     *testing.T
	seed  uint64
	rng   *mrand.Rand
	store *memStore
	caps  simCaps

	mu        sync.Mutex
	pending   []*simReq
	due       []simDue // held and delayed requests due now
	deferred  int      // numbers them in the order the scheduler deferred them
	kick      chan struct{}
	callers   []*simCaller
	owners    map[string]*simCaller // lease or ticket id → its caller
	skews     []time.Duration
	graveyard []*simReq // requests of dead callers, never answered until the end
	ending    bool
	log       []string
	failures  []string
	seen      map[string]bool
	trace     []simWrite // every write applied, in order, and its answer (for the store cross-check)
	// released: lease ids whose own release write landed.
	released map[string]bool
	// shown is, per instance, the highest seq of an item answer it was
	// given: a take cannot have been judged from a view newer than that.
	shown map[int]int64
	// turnCame is when each ticket's turn first came in the stored item,
	// as the fastest clock within the skew would judge it: nobody may
	// presume its caller gone before ClaimWindow from then.
	turnCame map[string]time.Time
	// tokens are when each token of the server's bucket was taken, refunds
	// when one was given back.
	tokens, refunds []time.Time
	// seen counts, for the whole run of seeds, what happened: evidence the
	// schedules reach each part of the protocol.
	events map[string]int
}

// simCaps are the limits of one run.
type simCaps struct {
	server, toolA, principal, queued int
	breaker                          *Breaker
	rate                             int // the server's bucket, a minute; 0: none
	adaptive                         bool
}

func (s *sim) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%8.3fs ", s.elapsed().Seconds())+fmt.Sprintf(format, args...))
}

var simEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // synctest's start

func (s *sim) elapsed() time.Duration { return time.Since(simEpoch) }

// fail records a violation of invariant kind, once per kind and subject.
func (s *sim) fail(kind, subject, format string, args ...any) {
	msg := kind + ": " + fmt.Sprintf(format, args...)
	s.logf("VIOLATION %s", msg)
	if s.seen[kind+"/"+subject] {
		return
	}
	s.seen[kind+"/"+subject] = true
	s.failures = append(s.failures, msg)
}

// simAPI is one instance's view of the store: every request goes through
// the simulation's scheduler.
type simAPI struct {
	s    *sim
	inst int
}

func (a simAPI) do(ctx context.Context, r *simReq, opts []func(*dynamodb.Options)) simAns {
	var o dynamodb.Options
	for _, f := range opts {
		f(&o)
	}
	r.single = o.RetryMaxAttempts == 1
	r.judged = -1
	if seq, ok := ctx.Value(judgedKey{}).(int64); ok {
		r.judged = seq
	}
	c, _ := ctx.Value(simCallerKey{}).(*simCaller)
	if c == nil {
		panic("sim: a store request without its caller")
	}
	r.c, r.done, r.sent = c, make(chan simAns, 1), time.Now()
	s := a.s
	s.mu.Lock()
	c.reqs++
	r.seq = c.reqs
	if r.upd != nil {
		// Until it lands, the caller's last write has not: a caller that
		// ends with its withdrawal still in flight is not sealed.
		c.lastLanded = false
		for _, n := range r.upd.ExpressionAttributeNames {
			if _, ok := s.owners[n]; !ok && isSimID(n) {
				s.owners[n] = c
			}
		}
	}
	if r.judged > s.shown[a.inst] {
		s.fail("judged", "", "c%d's take says it was judged from seq %d; its instance was shown no item past seq %d", c.id, r.judged, s.shown[a.inst])
	}
	s.pending = append(s.pending, r)
	s.mu.Unlock()
	s.poke()
	select {
	case ans := <-r.done:
		s.mu.Lock()
		s.shown[a.inst] = max(s.shown[a.inst], ans.seq())
		s.noteTurns(ans.item())
		s.mu.Unlock()
		return ans
	case <-ctx.Done():
		// The caller gave up on the answer; the request goes on.
		return simAns{err: ctx.Err()}
	}
}

func (a simAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	ans := a.do(ctx, &simReq{upd: in}, opts)
	return ans.upd, ans.err
}

func (a simAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	ans := a.do(ctx, &simReq{get: in}, opts)
	return ans.get, ans.err
}

func (s *sim) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// schedule serves store requests one at a time until stop is closed.
func (s *sim) schedule(stop <-chan struct{}) {
	for {
		synctest.Wait()
		s.mu.Lock()
		if len(s.due) > 0 {
			slices.SortFunc(s.due, func(a, b simDue) int { return a.n - b.n })
			d := s.due[0]
			s.due = s.due[1:]
			d.f()
			s.mu.Unlock()
			continue
		}
		if len(s.pending) > 0 {
			slices.SortFunc(s.pending, func(a, b *simReq) int {
				if a.c.id != b.c.id {
					return a.c.id - b.c.id
				}
				return a.seq - b.seq
			})
			i := s.rng.IntN(len(s.pending))
			r := s.pending[i]
			s.pending = slices.Delete(s.pending, i, i+1)
			s.serve(r)
			s.mu.Unlock()
			continue
		}
		s.mu.Unlock()
		select {
		case <-stop:
			return
		case <-s.kick:
		}
	}
}

func (s *sim) fate(r *simReq) simFate {
	if s.ending {
		return simPass
	}
	x := s.rng.IntN(1000)
	if r.get != nil {
		switch {
		case x < 40:
			return simRefuse
		case x < 70:
			return simSlow
		case x < 100:
			return simDelay
		}
		return simPass
	}
	switch {
	case x < 30:
		return simLose
	case x < 60:
		return simRefuse
	case x < 100:
		return simDelay
	case x < 130:
		return simSlow
	case x < 180:
		if r.single {
			return simLate
		}
		return simRetry
	case x < 190:
		return simDie
	}
	return simPass
}

// serve decides the fate of r and carries it out, under s.mu.
func (s *sim) serve(r *simReq) {
	c := r.c
	if c.state == simDead {
		if s.ending {
			r.done <- simAns{err: errSim}
		} else {
			s.graveyard = append(s.graveyard, r)
		}
		return
	}
	fate := s.fate(r)
	what := "read"
	if r.upd != nil {
		what = "write"
	}
	if r.retry {
		what += " (SDK retry)"
	}
	delay := time.Duration(1+s.rng.IntN(3000)) * time.Millisecond
	switch fate {
	case simPass:
		r.done <- s.exec(r, what)
	case simLose:
		s.exec(r, what+" (answer lost)")
		r.done <- simAns{err: errSim}
	case simRefuse:
		s.logf("c%d %s not sent", c.id, what)
		r.done <- simAns{err: errSim}
	case simDelay:
		s.logf("c%d %s delayed %v", c.id, what, delay)
		s.later(delay, func() { r.done <- s.exec(r, what+" (delayed)") })
	case simSlow:
		ans := s.exec(r, what+" (answered late)")
		time.AfterFunc(delay, func() { r.done <- ans })
	case simRetry:
		if s.rng.IntN(2) == 0 {
			s.exec(r, what+" (answer lost)")
		} else {
			s.logf("c%d %s held for %v", c.id, what, delay)
			s.holdLate(r, delay)
		}
		backoff := time.Duration(25+s.rng.IntN(225)) * time.Millisecond
		retry := &simReq{c: c, upd: r.upd, get: r.get, single: r.single, judged: r.judged, sent: r.sent, done: r.done, retry: true}
		s.later(backoff, func() {
			c.reqs++
			retry.seq = c.reqs
			s.pending = append(s.pending, retry)
		})
	case simLate:
		s.logf("c%d %s held for %v; the caller is told it failed", c.id, what, delay)
		s.holdLate(r, delay)
		r.done <- simAns{err: errSim}
	case simDie:
		if s.rng.IntN(2) == 0 {
			s.exec(r, what+" (then the caller died)")
		} else {
			s.logf("c%d died before its %s was sent", c.id, what)
		}
		s.kill(c)
		s.graveyard = append(s.graveyard, r)
	}
}

func (s *sim) holdLate(r *simReq, delay time.Duration) {
	s.later(delay, func() { s.apply(nil, r, fmt.Sprintf("late attempt of c%d", r.c.id)) })
}

// later has the scheduler run f, under s.mu, after delay.
func (s *sim) later(delay time.Duration, f func()) {
	s.deferred++
	d := simDue{n: s.deferred, f: f}
	time.AfterFunc(delay, func() {
		s.mu.Lock()
		s.due = append(s.due, d)
		s.mu.Unlock()
		s.poke()
	})
}

func (s *sim) kill(c *simCaller) {
	if c.state == simDead || c.state == simDone {
		return
	}
	c.settle(simDead)
	s.logf("c%d dead", c.id)
}

// exec applies r to the store and checks the invariants.
func (s *sim) exec(r *simReq, what string) simAns {
	if r.get != nil {
		s.events["store read answered"]++
		out, err := s.store.GetItem(context.Background(), r.get)
		return simAns{get: out, err: err}
	}
	out, err := s.apply(r.c, r, what)
	return simAns{upd: out, err: err}
}

// apply sends one write to the store, records who owns the ids it names,
// and checks the invariants after it.
func (s *sim) apply(c *simCaller, r *simReq, what string) (*dynamodb.UpdateItemOutput, error) {
	in := r.upd
	pre, _ := s.store.GetItem(context.Background(), &dynamodb.GetItemInput{Key: in.Key})
	out, err := s.store.UpdateItem(context.Background(), in)
	landed := err == nil
	who := "late"
	if c != nil {
		who = "c" + strconv.Itoa(c.id)
		c.lastLanded = landed
	}
	w := simWrite{in: in, err: err}
	if out != nil {
		w.item = out.Attributes
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		w.item = ccf.Item
	}
	s.trace = append(s.trace, w)
	res := "landed"
	if !landed {
		res = "refused: " + err.Error()
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			res = "condition failed"
		}
	}
	s.logf("%s %s %s: %s", who, what, res, shortExpr(in))
	if c == nil {
		s.events["late attempt "+map[bool]string{true: "landed", false: "refused"}[landed]]++
	}
	if os.Getenv("LEASE_SIM_CONDITIONS") != "" {
		s.logf("    if %s", shortCond(in))
	}
	s.events["store write answered, invariants checked"]++
	if landed {
		s.landed(in, pre.Item, r.sent, r.judged)
	}
	if isValidation(err) {
		s.fail("invalid", "", "the store refused a write as invalid: %v: %s", err, aws.ToString(in.UpdateExpression))
	}
	s.check()
	return out, err
}

func shortExpr(in *dynamodb.UpdateItemInput) string {
	return expand(in, aws.ToString(in.UpdateExpression))
}

func shortCond(in *dynamodb.UpdateItemInput) string {
	c := expand(in, aws.ToString(in.ConditionExpression))
	for p, v := range in.ExpressionAttributeValues {
		c = strings.ReplaceAll(c, p+")", fmt.Sprint(v)+")")
		c = strings.ReplaceAll(c, p+" ", fmt.Sprint(v)+" ")
		if strings.HasSuffix(c, p) {
			c = strings.TrimSuffix(c, p) + fmt.Sprint(v)
		}
	}
	return c
}

func expand(in *dynamodb.UpdateItemInput, e string) string {
	for p, n := range in.ExpressionAttributeNames {
		e = strings.ReplaceAll(e, p+".", n+".")
		e = strings.ReplaceAll(e, p+" ", n+" ")
		e = strings.ReplaceAll(e, p+",", n+",")
		if strings.HasSuffix(e, p) {
			e = strings.TrimSuffix(e, p) + n
		}
	}
	if len(e) > 400 && os.Getenv("LEASE_SIM_CONDITIONS") == "" {
		e = e[:400] + "…"
	}
	return e
}

// landed checks what a landed write did, against the item as it was
// before it (and the time as it was when the write was sent, as the caller
// judges by it): a place goes to a caller whose turn it is, callers that
// joined after a waiter's look (judged) coming after it (invariant 6), and
// the breaker opens for everyone only on two principals' failures
// (invariant 9). It records releases that landed.
func (s *sim) landed(in *dynamodb.UpdateItemInput, pre map[string]types.AttributeValue, sent time.Time, judged int64) {
	expr := aws.ToString(in.UpdateExpression)
	set, remove := clause(expr, "SET"), clause(expr, "REMOVE")
	byName := map[string]string{}
	for p, n := range in.ExpressionAttributeNames {
		byName[n] = p
	}
	lp := byName[LeasesAttr]
	v := parseItem(pre)
	if rp, ok := byName[RateAttr("server")]; ok && s.caps.rate > 0 {
		for a := range strings.SplitSeq(set, ",") {
			if a = strings.TrimSpace(a); strings.HasPrefix(a, rp+" = ") {
				s.charged(sent, strings.Contains(a, "if_not_exists")) // a refund gives one back
			}
		}
	}
	for id, ip := range byName {
		c := s.owners[id]
		if c == nil || lp == "" {
			continue
		}
		if inClause(remove, lp+"."+ip) && c.leaseID == id && strings.Contains(aws.ToString(in.ConditionExpression), "attribute_exists("+lp+"."+ip+")") {
			s.released[id] = true
		}
		if !strings.Contains(set, lp+"."+ip+" = ") || !strings.Contains(aws.ToString(in.ConditionExpression), "attribute_not_exists("+lp+"."+ip+")") {
			if strings.Contains(set, lp+"."+ip+" = ") {
				s.events["renewal landed"]++
			}
			continue // not a take
		}
		s.events["take landed"]++
		if v.ticketFor(id) != nil {
			s.events["take by a waiter landed"]++
		}
		// Under the limit the item held, and not while paused as the
		// writer's clock told it.
		post, _ := s.store.GetItem(context.Background(), &dynamodb.GetItemInput{Key: itemKey("srv")})
		if c := capIn(s.caps.server, s.adaptive(), v); byName[LimitAttr] != "" && len(parseItem(post.Item).leases) > c {
			s.fail("limit", id, "a take left %d leases in the item; its limit was %d", len(parseItem(post.Item).leases), c)
		}
		if pu := v.gates[PauseAttr].entry(gateAll).until; pu > sent.Add(s.skews[c.inst]).UnixMilli() {
			s.fail("pause", id, "c%d took a place %v before the pause ended", c.id, time.UnixMilli(pu).Sub(sent.Add(s.skews[c.inst])))
		}

		me := s.asker(c, id)
		later := map[string]bool{}
		if v.ticketFor(id) != nil {
			if judged < 0 {
				s.fail("order", id, "c%d took a place as a waiter without a view to judge from", c.id)
			}
			for _, t := range v.queue {
				if t.n > judged {
					later[t.id] = true
				}
			}
		}
		// A take: was it this caller's turn in the item as the write found
		// it, as of when the caller sent it — a waiter's, among the
		// callers that had joined when it looked?
		now := sent.Add(s.skews[c.inst]).UnixMilli()
		for _, t := range v.queue {
			if t.id == id || !t.live(now) || byName[t.id] == "" || !inClause(remove, byName[QueueAttr]+"."+byName[t.id]) {
				continue // its own, or purged past its deadline
			}
			// A waiter presumed gone: its turn must have come ClaimWindow
			// before the taker judged it so.
			if came, ok := s.turnCame[t.id]; !ok || sent.Sub(came) < ClaimWindow {
				s.fail("bypass", t.id, "c%d took the place of %s (c%d), presumed gone %v after its turn came (ClaimWindow %v)",
					c.id, t.id, s.owners[t.id].id, sent.Sub(came), ClaimWindow)
			}
		}
		h := v.walk(now, me, s.limits(v), later)
		served, ahead := h.served, h.ahead
		if !served {
			skip := maps.Clone(later)
			for _, t := range ahead {
				if byName[t.id] != "" && inClause(remove, byName[QueueAttr]+"."+byName[t.id]) {
					skip[t.id] = true
				}
			}
			served = v.walk(now, me, s.limits(v), skip).served
			if served {
				s.events["take past a waiter presumed gone"]++
			}
		}
		if !served {
			var who []string
			for _, t := range ahead {
				who = append(who, fmt.Sprintf("%s (c%d)", t.id, s.owners[t.id].id))
			}
			var ls []string
			for lid, exp := range v.leases {
				ls = append(ls, fmt.Sprintf("%s@%+dms", lid, exp-now))
			}
			var qs []string
			for _, t := range v.queue {
				qs = append(qs, fmt.Sprintf("%s#%d@%+dms", t.id, t.n, t.deadline-now))
			}
			s.fail("order", id, "c%d took a place that was the turn of %v (leases %v, queue %v, seq %d, freed %d)", c.id, who, ls, qs, v.seq, v.freed)
		}
	}
	for _, val := range in.ExpressionAttributeValues {
		_ = val
	}
	if lp := byName[LimitAttr]; lp != "" && strings.Contains(set, lp+" = ") {
		if numberOr(in.ExpressionAttributeValues[strings.TrimSpace(strings.Split(strings.Split(set, lp+" = ")[1], ",")[0])], 0) > int64(capIn(s.caps.server, s.adaptive(), v)) {
			s.events["limit moved up"]++
		} else {
			s.events["limit moved down"]++
		}
	}
	if pp := byName[PauseAttr]; pp != "" && strings.Contains(set, pp) {
		s.events["paused"]++
	}
	post, _ := s.store.GetItem(context.Background(), &dynamodb.GetItemInput{Key: in.Key})
	pv := parseItem(post.Item)
	for attr, g := range pv.gates {
		if !g.breaker() {
			continue
		}
		for key, e := range g.entries {
			was := v.gates[attr].entry(key)
			switch {
			case e.until > was.until && key == gateAll:
				s.events["breaker opened or closed"]++
			case e.until > was.until:
				s.events["breaker opened for one principal"]++
			}
			if e.probe != "" && e.probe != was.probe {
				s.events["probe elected"]++
			}
		}
	}
}

// charged checks a token taken (or given back) at sent against the
// server's bucket: in no stretch of time were more taken, less those given
// back, than the bucket gives (its burst, then one an interval), give or
// take one for the clocks' skew.
func (s *sim) charged(sent time.Time, refund bool) {
	r := Rate{Name: "server", PerMinute: s.caps.rate}
	if refund {
		s.events["token given back"]++
		s.refunds = append(s.refunds, sent)
		return
	}
	s.events["token taken"]++
	s.tokens = append(s.tokens, sent)
	in := func(ts []time.Time, from time.Time) int {
		n := 0
		for _, at := range ts {
			if !at.Before(from) && !at.After(sent) {
				n++
			}
		}
		return n
	}
	for _, from := range s.tokens {
		n := in(s.tokens, from) - in(s.refunds, from)
		if allowed := r.PerMinute + int(sent.Sub(from).Milliseconds()/r.interval()) + 1; n > allowed {
			s.fail("rate", "", "%d tokens taken in %v; the bucket gives %d", n, sent.Sub(from), allowed)
		}
	}
}

// limits are the caps as the item v shows them.
func (s *sim) limits(v *view) rules {
	r := rules{cap: capIn(s.caps.server, s.adaptive(), v), principalCap: s.caps.principal}
	if s.caps.rate > 0 {
		r.serverRPM = s.caps.rate
	}
	return r
}

func (s *sim) adaptive() *Adaptive {
	if s.caps.adaptive {
		return &Adaptive{Min: 1}
	}
	return nil
}

// asker is c judging its turn, as the limiter does.
func (s *sim) asker(c *simCaller, id string) *asker {
	a := &asker{id: id, label: c.principal, tool: c.tool}
	if c.tool == "a" {
		a.toolCap = s.caps.toolA
	}
	if s.caps.breaker != nil && c.tool == s.caps.breaker.Name {
		a.breaker = c.tool
	}
	return a
}

// inClause reports whether path is one of the paths of a REMOVE clause
// (placeholders "#n1" and "#n12" told apart).
func inClause(clause, path string) bool {
	return slices.Contains(strings.Split(strings.ReplaceAll(clause, " ", ""), ","), path)
}

// clause returns the text of one clause (SET, REMOVE, ADD, DELETE) of an
// update expression.
func clause(expr, kw string) string {
	i := strings.Index(expr, kw+" ")
	if i < 0 {
		return ""
	}
	rest := expr[i+len(kw)+1:]
	end := len(rest)
	for _, other := range []string{"SET ", "REMOVE ", "ADD ", "DELETE "} {
		if j := strings.Index(rest, other); j >= 0 && j < end {
			end = j
		}
	}
	return rest[:end]
}

// check tests the invariants that hold at every instant against the item
// as it is now and what the callers are doing.
func (s *sim) check() {
	out, _ := s.store.GetItem(context.Background(), &dynamodb.GetItemInput{Key: itemKey("srv")})
	v := parseItem(out.Item)
	now := time.Now()
	ms := now.UnixMilli()
	// 1. No cap is exceeded, in the item…
	if c := s.caps.server; c > 0 && v.liveLeases(ms) > c {
		s.fail("cap", "server", "leases holds %d live leases; cap %d", v.liveLeases(ms), c)
	}
	for attr, members := range v.sets {
		c := s.caps.toolA
		if strings.HasPrefix(attr, PrincipalAttrPrefix) {
			c = s.caps.principal
		}
		if c > 0 && v.liveIn(ms, members) > c {
			s.fail("cap", attr, "%s holds %d live leases; cap %d", attr, v.liveIn(ms, members), c)
		}
		// 3. …and a lease is whole.
		if strings.HasPrefix(attr, WaitingAttrPrefix) {
			continue
		}
		for _, id := range members {
			if _, ok := v.leases[id]; !ok {
				s.fail("whole", id, "%s holds %s, which is not a lease", attr, id)
			}
		}
	}
	// The adaptive limit stays between its floor and its ceiling.
	if v.limit != 0 && (v.limit < 1 || v.limit > int64(s.caps.server)) {
		s.fail("limit", "", "the limit is %d; it lives in [1, %d]", v.limit, s.caps.server)
	}
	// 7. The queue is bounded.
	if s.caps.queued > 0 && v.waiting(ms) > s.caps.queued {
		s.fail("queue", "", "%d callers wait; at most %d", v.waiting(ms), s.caps.queued)
	}
	// 1. …and upstream: no more calls run than the caps allow.
	running, runningA, probes := 0, 0, 0
	byPrincipal := map[string]int{}
	for _, c := range s.callers {
		if c.running && now.Before(c.deadline) {
			running++
			byPrincipal[c.principal]++
			if c.tool == "a" {
				runningA++
			}
			if c.probe {
				probes++
			}
		}
	}
	if s.caps.server > 0 && running > s.caps.server {
		s.fail("cap-running", "", "%d calls running; cap %d", running, s.caps.server)
	}
	if s.caps.toolA > 0 && runningA > s.caps.toolA {
		s.fail("cap-running", "a", "%d calls of tool a running; cap %d", runningA, s.caps.toolA)
	}
	for p, n := range byPrincipal {
		if s.caps.principal > 0 && n > s.caps.principal {
			s.fail("cap-running", p, "%d calls of %s running; cap %d", n, p, s.caps.principal)
		}
	}
	// 9. One probe.
	if probes > 1 {
		s.fail("probe", "", "%d half-open probes running", probes)
	}
	// 5. No place held for a caller that is not there, past what its own
	// writes could give it (hold + margin from when it stopped).
	for id, exp := range v.leases {
		c := s.owners[id]
		if c == nil {
			s.fail("owner", id, "leases holds %s, which no caller wrote", id)
			continue
		}
		if c.state == simAcquiring || c.state == simHolding || c.state == simFinishing {
			continue
		}
		if limit := c.stoppedAt.Add(simHold + simMargin + simSkew).UnixMilli(); exp > limit {
			s.fail("orphan", id, "leases holds %s of c%d (%s %v ago) until %v after it stopped; at most hold+margin+skew",
				id, c.id, stateName(c.state), now.Sub(c.stoppedAt), time.UnixMilli(exp).Sub(c.stoppedAt))
		}
	}
}

func stateName(st simState) string {
	return [...]string{"arriving", "acquiring", "holding", "finishing", "done", "dead"}[st]
}

// run is one seed's schedule.
func (s *sim) run() {
	const instances = 3
	s.caps = simCaps{server: s.rng.IntN(4), queued: 1 + s.rng.IntN(6)} // server 0: no cap on the key
	maxPurge = 1 + s.rng.IntN(3)                                       // purges cut short
	jr := mrand.New(mrand.NewPCG(s.seed, 7))
	var jmu sync.Mutex
	randN = func(n time.Duration) time.Duration {
		jmu.Lock()
		defer jmu.Unlock()
		return time.Duration(jr.Int64N(int64(n)))
	}
	if s.rng.IntN(2) == 0 {
		s.caps.toolA = 1 + s.rng.IntN(2)
	}
	if s.rng.IntN(3) == 0 {
		s.caps.principal = 1 + s.rng.IntN(2)
	}
	if s.rng.IntN(3) == 0 {
		s.caps.rate = 4 + s.rng.IntN(8)
	}
	if s.caps.server >= 2 && s.rng.IntN(2) == 0 {
		s.caps.adaptive = true
		s.caps.rate = 0 // calls enough for the limit to move both ways
		s.caps.queued = 12
	}
	pauses := s.rng.IntN(3) == 0
	if s.rng.IntN(3) > 0 {
		s.caps.breaker = &Breaker{Name: "b", Threshold: 2 + s.rng.IntN(2), Recovery: time.Duration(500+s.rng.IntN(1500)) * time.Millisecond}
		// A third of the breakers guard tool a, the capped tool, as a
		// server item may configure. (Drawn apart from the schedule's
		// stream, and never for the regression seeds, so that those
		// replay the schedules they were found with.)
		if !slices.Contains(simRegressionSeeds, s.seed) && mrand.New(mrand.NewPCG(s.seed, 0xb7ea)).IntN(3) == 0 {
			s.caps.breaker.Name = "a"
		}
	}
	breaker := "none"
	if s.caps.breaker != nil {
		breaker = "on tool " + s.caps.breaker.Name
	}
	s.logf("seed %d: caps %+v, breaker %s, purges of %d", s.seed, s.caps, breaker, maxPurge)
	limiters := make([]*Limiter, instances)
	for i := range limiters {
		skew := time.Duration(s.rng.IntN(int(2*simSkew))) - simSkew
		s.skews = append(s.skews, skew)
		limiters[i] = New(simAPI{s: s, inst: i}, "leases", Options{Margin: simMargin, InstanceID: "i" + strconv.Itoa(i),
			Clock: func() time.Time { return time.Now().Add(skew) }})
		s.logf("instance %d skew %v", i, skew)
	}
	guarded := "b" // the breaker's tool
	if s.caps.breaker != nil {
		guarded = s.caps.breaker.Name
	}
	// Some runs are a burst: every caller within a second.
	n, window := 8+s.rng.IntN(16), 8000
	if s.rng.IntN(2) == 0 {
		n, window = 12+s.rng.IntN(20), 1000
	}
	principals := 2 + s.rng.IntN(3)
	for i := range n {
		c := &simCaller{id: i, settled: make(chan struct{}), inst: s.rng.IntN(instances), principal: "p" + strconv.Itoa(s.rng.IntN(principals)),
			arrive: time.Duration(s.rng.IntN(window))*time.Millisecond + time.Duration(i)*time.Microsecond, callFor: time.Duration(50+s.rng.IntN(3500)) * time.Millisecond}
		if s.caps.adaptive {
			// Calls of like length, so that the limit can also go up.
			c.callFor = time.Duration(400+s.rng.IntN(150)) * time.Millisecond
		}
		switch s.rng.IntN(3) {
		case 1:
			c.tool = "a"
		case 2:
			c.tool = "b"
		}
		if s.rng.IntN(4) > 0 {
			c.wait = time.Duration(s.rng.IntN(6000)) * time.Millisecond
		}
		switch x := s.rng.IntN(10); {
		case s.caps.adaptive && x < 1, !s.caps.adaptive && (c.tool == guarded && x < 6 || c.tool != guarded && x < 3): // calls of the breaker's tool fail more
			c.outcome = Failure
		case x < 8:
			c.outcome = Success
		case x < 9:
			c.outcome = Overloaded
			if pauses {
				c.pause = time.Duration(100+s.rng.IntN(1500)) * time.Millisecond
			}
		default:
			c.outcome = Abandoned
		}
		s.callers = append(s.callers, c)
	}
	// Instances die at seeded times.
	for i := range instances {
		if s.rng.IntN(4) == 0 {
			at := time.Duration(s.rng.IntN(9000)) * time.Millisecond
			time.AfterFunc(at, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.logf("instance %d dies", i)
				for _, c := range s.callers {
					if c.inst == i {
						s.kill(c)
					}
				}
			})
		}
	}
	stop := make(chan struct{})
	schedDone := make(chan struct{})
	go func() { s.schedule(stop); close(schedDone) }()
	exited := make(chan struct{}, len(s.callers))
	for _, c := range s.callers {
		go func() {
			defer func() { exited <- struct{}{} }()
			s.call(limiters[c.inst], c)
		}()
	}
	for _, c := range s.callers {
		<-c.settled
	}
	// Every place comes back once every lease, ticket and tombstone has
	// lapsed.
	time.Sleep(2*(simHold+simMargin) + 8*time.Second)
	sweeper := &simCaller{id: len(s.callers), principal: "sweep", settled: make(chan struct{})}
	s.mu.Lock()
	s.ending = true
	s.callers = append(s.callers, sweeper)
	for _, r := range s.graveyard {
		r.done <- simAns{err: errSim}
	}
	s.graveyard = nil
	s.mu.Unlock()
	for range len(s.callers) - 1 {
		<-exited
	}
	s.sweep(limiters[0], sweeper)
	close(stop)
	<-schedDone
}

// request is what c asks the limiter for.
func (s *sim) request(c *simCaller) Request {
	req := Request{Key: "srv", Hold: simHold, Wait: c.wait, Holder: c.principal, Cap: s.caps.server,
		PrincipalCap: s.caps.principal, MaxQueued: s.caps.queued, Tool: c.tool}
	if c.tool == "a" {
		req.ToolCap = s.caps.toolA
	}
	if s.caps.breaker != nil && c.tool == s.caps.breaker.Name {
		req.Breaker = s.caps.breaker
	}
	if s.caps.rate > 0 {
		req.Rates = []Rate{{Name: "server", PerMinute: s.caps.rate}}
	}
	if !req.holds() {
		req.Cap = 1000
	}
	if s.caps.adaptive && req.Cap == s.caps.server {
		req.Adaptive = s.adaptive()
	}
	return req
}

// call is one caller's life: acquire, hold (renewing as the gateway does),
// finish.
func (s *sim) call(l *Limiter, c *simCaller) {
	time.Sleep(c.arrive)
	ctx := context.WithValue(context.Background(), simCallerKey{}, c)
	s.mu.Lock()
	if c.state == simDead {
		s.mu.Unlock()
		return
	}
	c.state, c.arrivedAt = simAcquiring, time.Now()
	s.logf("c%d arrives on i%d as %s for tool %q, waits %v", c.id, c.inst, c.principal, c.tool, c.wait)
	s.mu.Unlock()
	ls, err := l.Acquire(ctx, s.request(c))
	s.mu.Lock()
	if c.state == simDead {
		s.mu.Unlock()
		return
	}
	if err != nil {
		c.settle(simDone)
		s.logf("c%d acquire failed: %v", c.id, err)
		var full *FullError
		var wt *WaitTimeoutError
		var open *CircuitOpenError
		var rl *RateLimitedError
		switch {
		case errors.As(err, &rl):
			s.events["refused: rate limited"]++
		case errors.As(err, &full):
			s.events["refused: "+full.Reason]++
		case errors.As(err, &wt):
			s.events["wait timed out"]++
		case errors.As(err, &open):
			s.events["refused by the breaker"]++
		default:
			s.events["acquire failed otherwise"]++
		}
		s.mu.Unlock()
		return
	}
	c.state, c.leaseID, c.probe, c.running, c.deadline = simHolding, ls.ID(), ls.Probe(), true, ls.CallDeadline
	s.events["acquired"]++
	if ls.Waited > 0 && c.wait > 0 {
		s.events["acquired after waiting"]++
	}
	s.logf("c%d holds %s (probe %v), call deadline in %v", c.id, ls.ID(), ls.Probe(), time.Until(ls.CallDeadline))
	s.check()
	s.mu.Unlock()

	// The call runs for callFor, its lease kept alive as the gateway does;
	// it is stopped when the lease cannot be kept.
	outcome := c.outcome
	callCtx, stop := ls.KeepAlive(ctx, time.Now().Add(c.callFor), func() time.Duration { return simHold }, func(err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.logf("c%d lost its lease: %v", c.id, err)
	})
	t := time.NewTimer(c.callFor)
	select {
	case <-t.C:
	case <-callCtx.Done():
		outcome = Abandoned
	}
	stop()
	ls.PauseFor(c.pause)
	s.mu.Lock()
	c.deadline = ls.CallDeadline
	s.mu.Unlock()
	s.mu.Lock()
	if c.state == simDead {
		s.mu.Unlock()
		return
	}
	c.state, c.running = simFinishing, false
	s.mu.Unlock()
	_, err = ls.Finish(ctx, outcome)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.state == simDead {
		return
	}
	c.settle(simDone)
	s.logf("c%d finished %v: %v", c.id, outcome, err)
	s.events["finished "+outcome.String()]++
	if err != nil {
		s.events["finished with an error"]++
	}
	if errors.Is(err, ErrNotHeld) && s.released[c.leaseID] && time.Now().Add(s.skews[c.inst]).Before(ls.Expiry.Add(-simMargin)) {
		s.fail("release-unseen", c.leaseID, "c%d's release landed but was reported as not held", c.id)
	}
}

// sweep makes calls once everything has lapsed, each purging a few
// entries: what is left must be only tombstones.
func (s *sim) sweep(l *Limiter, c *simCaller) {
	ctx := context.WithValue(context.Background(), simCallerKey{}, c)
	s.mu.Lock()
	c.state = simAcquiring
	s.mu.Unlock()
	var err error
	for range 20 {
		var ls *Lease
		ls, err = l.Acquire(ctx, Request{Key: "srv", Cap: 1000, Hold: simHold, Holder: c.principal})
		if err == nil {
			_, err = ls.Finish(ctx, Abandoned)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.settle(simDone)
	if err != nil {
		s.fail("sweep", "", "the sweep after the run failed: %v", err)
		return
	}
	out, _ := s.store.GetItem(ctx, &dynamodb.GetItemInput{Key: itemKey("srv")})
	v := parseItem(out.Item)
	if len(v.leases) > 0 || len(v.queue) > 0 || len(v.sets) > 0 {
		s.fail("leftover", "", "after the run the item holds %d leases, %d tickets, %d sets", len(v.leases), len(v.queue), len(v.sets))
	}
}

func simSeeds(t *testing.T) []uint64 {
	if one := os.Getenv("LEASE_SIM_SEED"); one != "" {
		n, err := strconv.ParseUint(one, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return []uint64{n}
	}
	count := 300
	if v := os.Getenv("LEASE_SIM_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		count = n
	}
	first := 1
	if v := os.Getenv("LEASE_SIM_FROM"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		first = n
	}
	seeds := make([]uint64, count)
	for i := range seeds {
		seeds[i] = uint64(first + i)
	}
	for _, seed := range simRegressionSeeds {
		if !slices.Contains(seeds, seed) {
			seeds = append(seeds, seed)
		}
	}
	return seeds
}

// simRegressionSeeds are seeds that once found a defect; every run of the
// simulation replays them.
var simRegressionSeeds = []uint64{
	7402,   // a release left no tombstone for a take landing late whose lease had lapsed on the releaser's clock only
	42933,  // a ticket that left promoted another past a take judged before (freed did not change)
	136540, // the same
	133846, // a take resent after an unknown outcome landed on a turn judged for an earlier moment
	136859, // the same
	49336,  // (the checker) a caller whose withdrawal was still in flight when it ended was taken as sealed
	227318, // a caller giving up after an unknown take left no tombstone when making the maps got no answer
	249019, // found with it
	260188, // found with it
	274404, // found with it
	290845, // found with it
}

// runSim runs one seed's schedule, adding what happened to events, and
// returns its violations, its log and every write it applied.
func runSim(t *testing.T, seed uint64, events map[string]int) (failures, log []string, trace []simWrite) {
	defer func(p int, r func(time.Duration) time.Duration) { maxPurge, randN = p, r }(maxPurge, randN)
	synctest.Test(t, func(t *testing.T) {
		s := &sim{t: t, seed: seed, rng: mrand.New(mrand.NewPCG(seed, 0x1ea5e)), store: newMemStore(),
			kick: make(chan struct{}, 1), seen: map[string]bool{}, owners: map[string]*simCaller{}, released: map[string]bool{}, events: events,
			shown: map[int]int64{}, turnCame: map[string]time.Time{}}
		s.run()
		failures, log, trace = s.failures, s.log, s.trace
	})
	return failures, log, trace
}

func TestFaultSimulation(t *testing.T) {
	verbose := os.Getenv("LEASE_SIM_SEED") != ""
	events := map[string]int{}
	failed := 0
	for _, seed := range simSeeds(t) {
		failures, log, _ := runSim(t, seed, events)
		if len(failures) > 0 {
			failed++
			kinds := map[string]int{}
			for _, f := range failures {
				k, _, _ := strings.Cut(f, ":")
				kinds[k]++
			}
			t.Errorf("seed %d: violations %v; first: %s (LEASE_SIM_SEED=%d replays it with its log)", seed, kinds, failures[0], seed)
		}
		if verbose {
			t.Log("\n" + strings.Join(log, "\n"))
		}
	}
	if failed > 0 {
		t.Errorf("%d seeds of %d failed", failed, len(simSeeds(t)))
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(events)) {
		lines = append(lines, fmt.Sprintf("%9d %s", events[k], k))
	}
	t.Logf("what the schedules did:\n%s", strings.Join(lines, "\n"))
	if len(simSeeds(t)) < 100 {
		return
	}
	// Evidence that the schedules reach every part of the protocol the
	// invariants speak of.
	for _, k := range []string{"take by a waiter landed", "take past a waiter presumed gone", "late attempt landed",
		"late attempt refused", "renewal landed", "probe elected", "breaker opened for one principal", "breaker opened or closed",
		"refused: queue_full", "refused: at_capacity", "refused: queued_ahead", "wait timed out", "refused by the breaker",
		"finished failure", "finished abandoned", "token taken", "refused: rate limited", "limit moved up", "limit moved down",
		"paused", "finished overloaded"} {
		if events[k] == 0 {
			t.Errorf("no schedule had %q", k)
		}
	}
}

// isSimID reports whether an attribute name is a lease id the simulation's
// instances ("i0", "i1", …) write.
func isSimID(n string) bool {
	inst, seq, ok := strings.Cut(n, ".")
	return ok && strings.HasPrefix(inst, "i") && seq != "" && !strings.Contains(seq, ".")
}
