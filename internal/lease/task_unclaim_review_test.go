package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// ctxStore is a memStore that, as the SDK does, refuses a request whose
// context has ended, and runs hooks around its requests.
type ctxStore struct {
	*memStore
	mu sync.Mutex
	// update, when set, is called for each write: it may sleep, land the
	// write (next) and lose its answer, or refuse it.
	update func(ctx context.Context, in *dynamodb.UpdateItemInput, next func() (*dynamodb.UpdateItemOutput, error)) (*dynamodb.UpdateItemOutput, error)
	// get, when set, is called before each read.
	get    func(ctx context.Context) error
	writes int
	reads  int
}

func (s *ctxStore) hooks() (func(context.Context, *dynamodb.UpdateItemInput, func() (*dynamodb.UpdateItemOutput, error)) (*dynamodb.UpdateItemOutput, error), func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.update, s.get
}

func (s *ctxStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.writes++
	s.mu.Unlock()
	next := func() (*dynamodb.UpdateItemOutput, error) { return s.memStore.UpdateItem(ctx, in, opts...) }
	if up, _ := s.hooks(); up != nil {
		return up(ctx, in, next)
	}
	return next()
}

func (s *ctxStore) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.reads++
	s.mu.Unlock()
	if _, get := s.hooks(); get != nil {
		if err := get(ctx); err != nil {
			return nil, err
		}
	}
	return s.memStore.GetItem(ctx, in, opts...)
}

func (s *ctxStore) set(up func(context.Context, *dynamodb.UpdateItemInput, func() (*dynamodb.UpdateItemOutput, error)) (*dynamodb.UpdateItemOutput, error), get func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.update, s.get = up, get
}

// hookedTask is a limiter over a ctxStore recording the starts it makes,
// and a task enqueued on a free key (its first start made).
type hookedTask struct {
	db     *ctxStore
	l      *Limiter
	req    Request
	ticket string
	mu     sync.Mutex
	starts []TaskStart
}

func newHookedTask(t *testing.T) *hookedTask {
	t.Helper()
	k := &hookedTask{db: &ctxStore{memStore: newMemStore()}}
	k.l = New(k.db, "leases", Options{InstanceID: "h", OnTaskStart: func(_ context.Context, ts TaskStart) {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.starts = append(k.starts, ts)
	}})
	k.req = Request{Key: "srv", Cap: 1, Hold: time.Minute, Holder: "p1", MaxQueued: 8}
	id, err := k.l.Enqueue(context.Background(), k.req, "", "task-1", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	k.ticket = id
	if s := k.started(); len(s) != 1 || s[0].Ticket != id {
		t.Fatalf("enqueue on a free key: starts %+v, want one of %s", s, id)
	}
	return k
}

func (k *hookedTask) started() []TaskStart {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]TaskStart(nil), k.starts...)
}

// A worker whose time runs out while its claim reads the item (a slow
// store, a claim refused until then) makes no take: no time is left for
// a call. As a claim whose take lands past CallBy, it leaves the task to
// the next worker (ErrStartLapsed), its start's mark given back and the
// next worker started at once, not StartTimeout later.
func TestAClaimOutOfTimeInItsReadLeavesTheTaskToTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newHookedTask(t)
		mark := k.started()[0].Mark
		time.Sleep(2 * recentView) // the claim reads the item
		req := k.req
		req.CallBy = time.Now().Add(500 * time.Millisecond)
		k.db.set(nil, func(context.Context) error {
			time.Sleep(time.Second) // the read's answer comes past CallBy
			return nil
		})
		_, err := k.l.Claim(context.Background(), req, k.ticket, mark)
		k.db.set(nil, nil)
		if !errors.Is(err, ErrStartLapsed) {
			t.Errorf("claim out of time before its take: %v (%T), want ErrStartLapsed", err, err)
		}
		v := itemView(t, k.db.memStore, req.Key)
		tk := v.ticketFor(k.ticket)
		if tk == nil {
			t.Fatal("the task's ticket is gone")
		}
		if len(k.started()) < 2 && tk.started == mark {
			t.Errorf("no next worker started, and the ticket keeps the lapsed claim's mark (%d): the task waits StartTimeout for its next start", mark)
		}
	})
}

// isClaimTake reports whether in is a claim's take: it sets a ticket's
// claim (w).
func isClaimTake(in *dynamodb.UpdateItemInput) bool {
	for p, n := range in.ExpressionAttributeNames {
		if n == ticketClaim && strings.Contains(*in.UpdateExpression, "."+p+" = ") {
			return true
		}
	}
	return false
}

var errAnswerLost = errors.New("connection reset (answer lost)")

// loseTake lands the first claim's take it sees and loses its answer.
func loseTake(landed *bool) func(context.Context, *dynamodb.UpdateItemInput, func() (*dynamodb.UpdateItemOutput, error)) (*dynamodb.UpdateItemOutput, error) {
	return func(_ context.Context, in *dynamodb.UpdateItemInput, next func() (*dynamodb.UpdateItemOutput, error)) (*dynamodb.UpdateItemOutput, error) {
		if *landed || !isClaimTake(in) {
			return next()
		}
		*landed = true
		if _, err := next(); err != nil {
			return nil, err
		}
		return nil, errAnswerLost
	}
}

// A claim whose take landed with its answer lost and whose reads then
// fail gives the place back keeping the ticket, at its number, naming no
// claim, and the next worker is started once and claims it.
func TestALostTakeThenFailingReadsGivesBackAndStartsTheNextOnce(t *testing.T) {
	k := newHookedTask(t)
	st := k.started()[0]
	n := itemView(t, k.db.memStore, k.req.Key).ticketFor(k.ticket).n
	landed, fails := false, 0
	k.db.set(loseTake(&landed), func(context.Context) error {
		if landed && fails < writeAttempts-1 {
			fails++
			return errors.New("read failed")
		}
		return nil
	})
	_, err := k.l.Claim(context.Background(), k.req, k.ticket, st.Mark)
	k.db.set(nil, nil)
	if err == nil || !landed {
		t.Fatalf("claim: %v, take landed %v: want a store error after a landed take", err, landed)
	}
	v := itemView(t, k.db.memStore, k.req.Key)
	tk := v.ticketFor(k.ticket)
	switch {
	case v.leases[k.ticket] != 0:
		t.Errorf("the lost take's place is still held: %d", v.leases[k.ticket])
	case tk == nil:
		t.Fatal("the ticket is gone")
	case tk.n != n || tk.claim != "":
		t.Errorf("ticket %+v, want number %d and no claim", tk, n)
	}
	s := k.started()
	if len(s) != 2 {
		t.Fatalf("starts %+v, want the next one made", s)
	}
	ls, err := k.l.Claim(context.Background(), k.req, k.ticket, s[1].Mark)
	if err != nil {
		t.Fatalf("the next worker's claim: %v", err)
	}
	if _, err := ls.Finish(context.Background(), Success); err != nil {
		t.Fatal(err)
	}
	if len(k.started()) != 2 {
		t.Errorf("starts %+v after the task ran, want 2", k.started())
	}
}

// A claim whose lost take landed, lapsed and was taken over by the next
// start's worker before the first claim's last read must leave that
// worker's place alone, though the lease has the same id.
func TestALostTakeLapsedAndClaimedByTheNextStartIsLeftAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newHookedTask(t)
		req := k.req
		req.Hold = time.Second
		st := k.started()[0]
		landed, reads := false, 0
		var next *Lease
		var nextErr error
		k.db.set(loseTake(&landed), func(context.Context) error {
			if !landed {
				return nil
			}
			if reads++; reads < writeAttempts {
				return errors.New("read failed")
			}
			if reads > writeAttempts {
				return nil
			}
			// The first claim's last read: meanwhile its lease lapsed, and
			// a worker of the next start claimed the place.
			k.db.set(nil, nil)
			time.Sleep(req.Hold + k.l.Margin() + time.Second)
			if err := k.l.StartDue(context.Background(), req); err != nil {
				nextErr = err
				return nil
			}
			s := k.started()
			if len(s) != 2 {
				nextErr = errors.New("no next start")
				return nil
			}
			next, nextErr = k.l.Claim(context.Background(), req, k.ticket, s[1].Mark)
			return nil
		})
		_, err := k.l.Claim(context.Background(), req, k.ticket, st.Mark)
		k.db.set(nil, nil)
		if err == nil || !landed {
			t.Fatalf("first claim: %v, take landed %v", err, landed)
		}
		if nextErr != nil || next == nil {
			t.Fatalf("next start's claim: %v", nextErr)
		}
		v := itemView(t, k.db.memStore, req.Key)
		if v.leases[k.ticket] != next.exps[0] || v.ticketFor(k.ticket) == nil || v.ticketFor(k.ticket).claim != next.claim {
			t.Fatalf("the next worker's place was touched: lease %d (want %d), ticket %+v", v.leases[k.ticket], next.exps[0], v.ticketFor(k.ticket))
		}
		if err := next.Renew(context.Background(), req.Hold); err != nil {
			t.Errorf("the next worker's renewal: %v", err)
		}
	})
}

// A task's claim that became its breaker's half-open probe and gives the
// place back unused, having made no call (its take landed past its
// worker's CallBy), tells the breaker nothing: the probe is given up with
// no bar on its principal, and the task, waiting again as the claim found
// it, gets its next worker at once, which probes.
func TestAProbeOutOfTimeAtItsClaimDoesNotBarItsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &ctxStore{memStore: newMemStore()}
		var mu sync.Mutex
		var starts []TaskStart
		l := New(db, "leases", Options{InstanceID: "h", OnTaskStart: func(_ context.Context, ts TaskStart) {
			mu.Lock()
			defer mu.Unlock()
			starts = append(starts, ts)
		}})
		started := func() []TaskStart {
			mu.Lock()
			defer mu.Unlock()
			return append([]TaskStart(nil), starts...)
		}
		br := &Breaker{Name: "tool", Threshold: 1, Recovery: 10 * time.Second}
		req := Request{Key: "srv", Cap: 2, Tool: "tool", Breaker: br, Hold: time.Minute, Holder: "p1", MaxQueued: 8}
		ls, err := l.Acquire(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Finish(context.Background(), Failure); err != nil {
			t.Fatal(err)
		}
		time.Sleep(br.Recovery + time.Second) // half-open
		id, err := l.Enqueue(context.Background(), req, "", "task-1", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(started()) != 1 {
			t.Fatalf("starts %+v, want the task started", started())
		}
		time.Sleep(2 * recentView)
		wreq := req
		wreq.CallBy = time.Now().Add(time.Second)
		db.set(func(_ context.Context, in *dynamodb.UpdateItemInput, next func() (*dynamodb.UpdateItemOutput, error)) (*dynamodb.UpdateItemOutput, error) {
			if isClaimTake(in) {
				time.Sleep(2 * time.Second) // its answer comes past CallBy
			}
			return next()
		}, nil)
		_, err = l.Claim(context.Background(), wreq, id, started()[0].Mark)
		db.set(nil, nil)
		if !errors.Is(err, ErrStartLapsed) {
			t.Fatalf("claim landing past CallBy: %v, want ErrStartLapsed", err)
		}
		v := itemView(t, db.memStore, req.Key)
		if v.leases[id] != 0 {
			t.Fatalf("place not given back: %d", v.leases[id])
		}
		s := started()
		if len(s) < 2 {
			e := v.gates[BreakerAttr(br.Name)].entry(req.Holder)
			t.Fatalf("no next worker started for the task given back (its principal barred from probing until %v from now: %v)",
				time.Duration(e.barUntil-time.Now().UnixMilli())*time.Millisecond, e.barredFor(req.Holder, time.Now().UnixMilli()))
		}
		if _, err := l.Claim(context.Background(), req, id, s[len(s)-1].Mark); err != nil {
			t.Errorf("the next worker's claim: %v", err)
		}
	})
}

// Tasks (doc.go) and invariant 16: a place given back before its call
// leaves the ticket waiting with no start, so that its task gets a worker
// at once. A give-back of a take landing past CallBy whose answer is lost
// after it landed is retried and refused; as its lease's expiry was made
// from the little time that was left, the retry cannot count as done (it
// is within Margin of the expiry), but the next worker is started from
// the refusal's answer all the same.
func TestAGiveBackOfALateTakeWhoseAnswerIsLostStartsTheNextWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id, start := startedTask(t, mem)
		n := mRead(rawItem(t, mem, "srv")).tickets[id].n
		late := &landedTakeStore{API: mem, id: id, landed: func() error { time.Sleep(50 * time.Millisecond); return nil }}
		db := &faultAPI{API: late}
		db.arm(rule{match: writes("REMOVE", ticketClaim), fate: lose})
		var st starts
		w := New(db, "leases", Options{InstanceID: "w", OnTaskStart: st.hook})
		req := taskReq("q")
		req.CallBy = time.Now().Add(20 * time.Millisecond)
		ls, err := w.Claim(context.Background(), req, id, start.Mark)
		if ls != nil || !errors.Is(err, ErrStartLapsed) {
			t.Fatalf("claim: %v, %v; want ErrStartLapsed", ls, err)
		}
		waitsUnclaimed(t, mem, id, n)
		if tk := mRead(rawItem(t, mem, "srv")).tickets[id]; tk != nil && tk.s != 0 {
			return // marked: a worker was started
		}
		if got := st.list(); len(got) != 1 || got[0].Ticket != id {
			t.Fatalf("starts after the place came back: %+v; want the next one of %s (the ticket waits with no start)", got, id)
		}
	})
}

// The same for a worker's own Unclaim made once its call deadline has
// passed (the lease within Margin of its expiry): the retry after the lost
// answer may report ErrNotHeld, and the next worker is started from the
// item it is answered with.
func TestALateUnclaimWhoseAnswerIsLostStartsTheNextWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id, start := startedTask(t, mem)
		n := mRead(rawItem(t, mem, "srv")).tickets[id].n
		db := &faultAPI{API: mem}
		var st starts
		w := New(db, "leases", Options{InstanceID: "w", OnTaskStart: st.hook})
		ls, err := w.Claim(context.Background(), taskReq("q"), id, start.Mark)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(ls.CallDeadline)) // its call deadline reached: no call made
		db.arm(rule{match: writes("REMOVE", ticketClaim), fate: lose})
		_ = ls.Unclaim(context.Background())
		waitsUnclaimed(t, mem, id, n)
		if tk := mRead(rawItem(t, mem, "srv")).tickets[id]; tk != nil && tk.s != 0 {
			return
		}
		if got := st.list(); len(got) != 1 || got[0].Ticket != id {
			t.Fatalf("starts after the place came back: %+v; want the next one of %s (the ticket waits with no start)", got, id)
		}
	})
}

// Unclaim (doc.go, Tasks) and invariant 16, at most one place at a time
// to a task: a give-back lands and its answer is lost; before its retry
// the next worker claims the ticket with the same expiry (the same clock
// millisecond, the same hold), and the ticket then lapses at its task's
// deadline and is purged while the next worker's call runs. The retry,
// refused, finds no ticket to keep, and with it nothing to tell its own
// lease from the next worker's: it leaves the lease (ErrNotHeld), where a
// plain release would remove the place of a call still running.
func TestALostUnclaimsPlainRetryDoesNotReleaseTheNextClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		deadline := time.Now().Add(2 * time.Second)
		id, start := startedTaskUntil(t, mem, deadline)
		db := &faultAPI{API: mem}
		w := New(db, "leases", Options{InstanceID: "w"})
		ls, err := w.Claim(context.Background(), taskReq("q"), id, start.Mark)
		if err != nil {
			t.Fatal(err)
		}
		var st starts
		other := New(mem, "leases", Options{InstanceID: "o", OnTaskStart: st.hook})
		var next *Lease
		db.arm(rule{match: writes("REMOVE", ticketClaim), fate: lose, after: func() {
			if err := other.StartDue(context.Background(), taskReq("q")); err != nil {
				t.Error(err)
				return
			}
			got := st.list()
			if len(got) != 1 {
				t.Errorf("starts after the give-back landed: %+v; want one", got)
				return
			}
			var err error
			if next, err = other.Claim(context.Background(), taskReq("q"), id, got[0].Mark); err != nil {
				t.Errorf("the next worker's claim: %v", err)
				return
			}
			// The task's deadline passes while the next call runs; its
			// ticket lapses and is purged (here by hand, as a purge does).
			time.Sleep(time.Until(deadline.Add(DefaultMargin + time.Millisecond)))
			u := newUpdate()
			u.removeTicket(id, "q", mRead(rawItem(t, mem, "srv")).tickets[id].n, true)
			u.ttl(time.Now().UnixMilli())
			if _, err := other.write(context.Background(), "srv", u, nil); err != nil {
				t.Error(err)
			}
		}})
		_ = ls.Unclaim(context.Background())
		if next == nil {
			t.Fatal("no next claim")
		}
		if next.exps[0] != ls.exps[0] {
			t.Fatalf("the claims' expiries differ (%d, %d): the case is not made", next.exps[0], ls.exps[0])
		}
		if exp, held := mRead(rawItem(t, mem, "srv")).leases[id]; !held || exp != next.exps[0] {
			t.Errorf("the next worker's place, its call running, was released by the first worker's retried give-back (lease %d, held %v)", exp, held)
		}
		if _, err := next.Finish(context.Background(), Success); err != nil {
			t.Errorf("the next worker's release: %v", err)
		}
	})
}
