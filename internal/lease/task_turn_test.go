package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// beforeAPI runs before, once, ahead of the first write match matches:
// another instance's writes landing between a caller's read and its write.
type beforeAPI struct {
	API
	mu     sync.Mutex
	match  func(*dynamodb.UpdateItemInput) bool
	before func()
}

func (b *beforeAPI) arm(match func(*dynamodb.UpdateItemInput) bool, before func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.match, b.before = match, before
}

func (b *beforeAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	b.mu.Lock()
	var run func()
	if b.before != nil && (b.match == nil || b.match(in)) {
		run, b.before, b.match = b.before, nil, nil
	}
	b.mu.Unlock()
	if run != nil {
		run()
	}
	return b.API.UpdateItem(ctx, in, opts...)
}

// Invariant 16 (and Tasks in doc.go): callers behind a task pass its
// ticket only once its starts have gone unclaimed StartTimeout since the
// first, "each such take conditioned on the first start as seen". A
// task's claim is such a take: task B's worker, judging from a read in
// which task A (before it) has a start StartTimeout old, passes A; before
// B's take lands, A's worker gives its start back (its invocation's time
// ran out) and A is started afresh. B's take must fail (A's fresh worker
// has the turn), as a caller's would; a claim sent with no bypass
// conditions took the place, and A's fresh worker found its turn gone.
func TestAClaimPassingATaskIsConditionedOnItsFirstStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := &beforeAPI{API: newMemStore()}
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		r := func(holder string) Request {
			return Request{Key: "srv", Cap: 2, Hold: time.Hour, Holder: holder, MaxQueued: 8}
		}
		x := acquire(t, l, r("p")) // p keeps one of the two places throughout
		defer release(t, x)
		// q1 is paused (its upstream's Retry-After) for 5 s: its task
		// waits it out while q2's, behind it, takes its turn.
		y := acquire(t, l, r("q1"))
		y.PauseFor(5 * time.Second)
		if _, err := y.Finish(ctx, Overloaded); err != nil {
			t.Fatal(err)
		}
		a := enqueue(t, l, r("q1"), "task-a")
		b := enqueue(t, l, r("q2"), "task-b")
		if got := st.list(); len(got) != 1 || got[0].Ticket != b {
			t.Fatalf("starts: %+v; want B's alone (A's principal paused)", got)
		}
		startB := st.list()[0] // B's worker is slow to come
		time.Sleep(6 * time.Second)
		// The pause over, A (numbered first, principals holding alike) has
		// the turn; its start is lost.
		if err := l.StartDue(ctx, r("q1")); err != nil {
			t.Fatal(err)
		}
		if got := st.list(); len(got) != 2 || got[1].Ticket != a {
			t.Fatalf("starts: %+v; want A's second", got)
		}
		time.Sleep(StartTimeout + time.Second)
		// B's worker claims, from a read showing A's start unclaimed past
		// StartTimeout; before its take lands, A's worker gives its start
		// back, which starts A afresh.
		other := New(db.API, "leases", Options{InstanceID: "o", OnTaskStart: st.hook})
		db.arm(writes("SET", LeasesAttr), func() {
			v, err := other.read(ctx, "srv")
			if err != nil {
				t.Error(err)
				return
			}
			ta := v.ticketFor(a)
			other.passTurn(ctx, "srv", v, ta, ta.started, r("q1"))
		})
		w := New(db, "leases", Options{InstanceID: "w"})
		ls, err := w.Claim(ctx, r("q2"), b, startB.Mark)
		got := st.list()
		if len(got) != 3 || got[2].Ticket != a {
			t.Fatalf("starts: %+v; want A started afresh before B's take", got)
		}
		if err == nil {
			defer release(t, ls)
			t.Errorf("B's claim took the place passing A, though A was started afresh before its take landed: the take was not conditioned on A's first start as seen")
		} else if !errors.Is(err, ErrNotYourTurn) {
			t.Fatalf("B's claim: %v; want ErrNotYourTurn", err)
		}
		// A's fresh worker claims its turn.
		wa := New(db.API, "leases", Options{InstanceID: "wa"})
		la, err := wa.Claim(ctx, r("q1"), a, got[2].Mark)
		if err != nil {
			t.Errorf("A's fresh worker: %v; want its place", err)
		} else {
			release(t, la)
		}
	})
}

// Release in doc.go: a release failing its condition while its lease is
// there is "made again from the answer ... eagerRetries (3) times at once,
// then each time after backoff, never given up while the lease is there"
// (Finish loops with no bound on tries, pacing with contended(tries)).
// backoff(n) shifting writeMinBackoff left by n−1 unchecked overflowed
// from n = 40 (negative, or 0 from n = 59), and sleep returned at once:
// from the 44th try a contended release wrote back to back on a hot item
// for as long as the contention lasted.
func TestAContendedReleasePausesBeforeEveryTryPastTheEagerOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		for n := eagerRetries + 1; n <= 100; n++ {
			start := time.Now()
			if err := contended(ctx, "srv", n); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took < writeMinBackoff/2 {
				t.Errorf("try %d of a release failing on others' writes waited %v (backoff %v); want a pause of %v at least", n+1, took, backoff(n-eagerRetries), writeMinBackoff/2)
			}
		}
	})
}

// Invariant 16: "a claim whose lease lapsed unreleased leaves its ticket
// waiting again with no start, so that its task gets a worker at once;
// tasks are served in the callers' turn order, callers passing one only
// once its start has gone unclaimed StartTimeout". A claim that kept the
// start mark it consumed (s) left, once it lapsed, a ticket showing a
// start older than StartTimeout — one that was claimed — and the caller
// behind passed it at its first look, before any new start of it. The
// claim takes the mark away.
func TestACallerBehindALapsedClaimWaitsForItsNewStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		claimOf(t, db, "w1", &st, id) // its worker dies before its call
		lapse := time.Now().Add(taskReq("q").Hold + DefaultMargin)
		c := New(db, "leases", Options{InstanceID: "c", OnTaskStart: st.hook})
		req := taskReq("p")
		req.Wait = 5 * time.Minute
		type result struct {
			ls *Lease
			at time.Time
		}
		got := make(chan result, 1)
		go func() {
			ls, err := c.Acquire(ctx, req)
			if err != nil {
				t.Errorf("the caller behind: %v", err)
			}
			got <- result{ls, time.Now()}
		}()
		r := <-got
		if r.ls != nil {
			defer release(t, r.ls)
		}
		starts := st.list()
		t.Logf("the claim lapsed at +0; the caller behind got its place at %+v; starts %d", r.at.Sub(lapse), len(starts))
		if r.at.Before(lapse.Add(StartTimeout)) {
			t.Errorf("the caller behind took the task's place %v after its claim lapsed (starts made since: %d); want none before a new start went unclaimed %v", r.at.Sub(lapse), len(starts)-1, StartTimeout)
		}
	})
}

// A start mark whose answer is lost (it landed) is retried identically by
// write; the retry fails its condition (a mark younger than StartTimeout:
// its own). Reported lost, it started no worker, and the task's place
// stayed idle, every caller behind it held back, for StartTimeout, though
// the failed answer shows the mark this very write set (the ticket's s is
// the now it wrote): that answer makes it won.
func TestAStartMarkWhoseAnswerWasLostStartsItsWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faultAPI{API: newMemStore()}
		var st starts
		l := New(f, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		marks := 0
		f.arm(rule{match: func(in *dynamodb.UpdateItemInput) bool {
			// The mark: it names a ticket's start (s) and sets no seq.
			for _, n := range in.ExpressionAttributeNames {
				if n == ticketStarted && !writes("SET", SeqAttr)(in) {
					marks++
					return true
				}
			}
			return false
		}, fate: lose})
		id := enqueue(t, l, taskReq("q"), "task-1")
		if marks != 1 {
			t.Fatalf("the mark's writes matched: %d; want one", marks)
		}
		v := parseItem(rawItem(t, f.API, "srv"))
		tk := v.ticketFor(id)
		if tk == nil || tk.started == 0 {
			t.Fatalf("ticket %+v; want the mark landed", tk)
		}
		if got := st.list(); len(got) != 1 {
			t.Errorf("the task's mark landed (its answer lost) and no worker was started (starts %+v): its place idle, callers behind held back, for StartTimeout", got)
		}
	})
}

// Cost (Answers and views in doc.go): "the item a refused write of its
// returns is a look, judged at once". A claim that read the item again
// after its refused take spent a read more per take refused. Here the take of task T's worker fails on freed (another
// principal's release landed first, which leaves T's turn as it was).
func TestAClaimJudgesAgainFromItsRefusedTakesAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := &beforeAPI{API: newMemStore()}
		var st starts
		l := New(db.API, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		r := func(holder string) Request {
			return Request{Key: "srv", Cap: 3, Hold: time.Hour, Holder: holder, MaxQueued: 8, Wait: 5 * time.Minute}
		}
		x := acquire(t, l, r("p"))
		defer release(t, x)
		y := acquire(t, l, r("r"))
		id := enqueue(t, l, r("q"), "task-t")
		starts := st.list()
		if len(starts) != 1 {
			t.Fatalf("starts: %+v; want T's", starts)
		}
		c := New(db.API, "leases", Options{InstanceID: "c"})
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { _, _ = c.Acquire(cctx, r("p")) }() // waits behind T: T's take is conditioned on freed
		synctest.Wait()
		db.arm(writes("SET", LeasesAttr), func() { release(t, y) })
		w := New(db, "leases", Options{InstanceID: "w"})
		ls, err := w.Claim(ctx, r("q"), id, starts[0].Mark)
		if err != nil {
			t.Fatalf("the claim: %v", err)
		}
		defer release(t, ls)
		s := w.Stats()
		t.Logf("the claim: %d writes (%d refused), %d reads", s.Writes, s.FailedWrites, s.Reads)
		if s.FailedWrites != 1 {
			t.Fatalf("refused writes: %d; want the one take", s.FailedWrites)
		}
		if s.Reads != 1 {
			t.Errorf("a claim whose take was refused once read the item %d times; want 1 (its refused take's answer is a look)", s.Reads)
		}
	})
}

// Isolation: a task's join is conditioned on freed as seen (so that a
// join landing late cannot bring back a ticket claimed and released), and
// every release on the key moves freed. Another principal's calls ending
// at a steady pace — one between each of Enqueue's answers and its next
// join, on a key with places to spare and nobody waiting — refuse joins
// one after another. Enqueue that failed after maxEager of them ("the item
// kept changing") let one principal's ordinary traffic keep another's
// tasks from being made at all; it tries again, paced, while the task's
// deadline allows.
func TestAnotherPrincipalsCallsDoNotFailATasksEnqueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := newMemStore()
		r := func(holder string) Request {
			return Request{Key: "srv", Cap: 8, Hold: time.Minute, Holder: holder, MaxQueued: 8}
		}
		other := New(mem, "leases", Options{InstanceID: "o"})
		release(t, acquire(t, other, r("p"))) // the item is there
		calls := 0
		joins := func(in *dynamodb.UpdateItemInput) bool {
			return writes("SET", TasksAttr)(in) && writes("SET", SeqAttr)(in)
		}
		db := &beforeWrites{API: mem, before: func() {
			if calls++; calls <= 3*maxEager {
				release(t, acquire(t, other, r("p"))) // p's call ends meanwhile
			}
		}}
		db.match.Store(&joins)
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		_, err := l.Enqueue(ctx, r("q"), "", "task-1", time.Now().Add(time.Hour))
		t.Logf("enqueue: %v, after %d joins, each with one call of p's ending before it", err, calls)
		if err != nil || calls <= 3*maxEager {
			t.Errorf("q's task could not be enqueued on a key with places to spare and nobody waiting, p's calls ending one per join (%d joins): %v", calls, err)
		}
	})
}

// Invariant 16: "no place goes to a task withdrawn, released or past its
// deadline". Its ticket lives Margin past the task's deadline (so that no
// clock within the margin takes it for gone early). A claim that checked
// the ticket's deadline alone let a worker started when a place frees just
// after the task's deadline, on the very clock that enqueued it, claim the
// place and hold it a full Hold more.
func TestNoPlaceGoesToATaskPastItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		x := acquire(t, l, taskReq("p"))
		deadline := time.Now().Add(time.Minute)
		id, err := l.Enqueue(ctx, taskReq("q"), "", "task-1", deadline)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(deadline.Add(DefaultMargin / 2)))
		release(t, x) // the place frees past the task's deadline
		got := st.list()
		if len(got) != 1 {
			t.Fatalf("starts: %+v; want one (the ticket lives Margin past the deadline)", got)
		}
		w := New(db, "leases", Options{InstanceID: "w"})
		ls, err := w.Claim(ctx, taskReq("q"), id, got[0].Mark)
		if err == nil {
			defer release(t, ls)
			t.Errorf("a claim %v past the task's deadline got its place, its call deadline %v past it", time.Since(deadline), ls.CallDeadline.Sub(deadline))
		}
	})
}
