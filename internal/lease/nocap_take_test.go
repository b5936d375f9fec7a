package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// A call with no cap beside tickets (doc.go, Buckets): it is charged in
// one write unless a waiting ticket needs its tokens, judged on the item;
// otherwise its take holds nothing, so neither its end nor its principal's
// places move anything another caller's turn depends on.

// writeCountAPI counts the writes made through it.
type writeCountAPI struct {
	API
	n *atomic.Int64
}

func (w writeCountAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	w.n.Add(1)
	return w.API.UpdateItem(ctx, in, opts...)
}

// Tasks (doc.go): "A claimed ticket — its lease, of the same id, live — is
// no waiter: it takes no turn, no start and no queue place"; it paid its
// tokens in its claim. Buckets: a charge counts only tickets that wait, a
// running task's on condition its claim still stands. Counting a running
// task's ticket, every call with no cap on a server with a server bucket
// would be a take (two writes where one does) while any task runs.
//
// A task of tool slow (server bucket 600 a minute) is claimed and runs.
// The worker's process then makes a call of tool light (no cap, same
// bucket), with the claim's answer as its view. Nobody waits.
func TestAChargeBesideARunningTaskIsOneWrite(t *testing.T) {
	db := newMemStore()
	ctx := context.Background()
	rate := []Rate{{Name: "server", PerMinute: 600}}
	taskR := Request{Key: "srv", Cap: 1 << 20, Tool: "slow", Hold: 10 * time.Minute, Holder: "p", MaxQueued: 8, Rates: rate}
	var st starts
	l := New(db, rgTable, Options{InstanceID: "a", OnTaskStart: st.hook})
	id := enqueue(t, l, taskR, "task-1")
	started := st.list()
	if len(started) != 1 {
		t.Fatalf("starts %v; want the task's one", started)
	}
	var n atomic.Int64
	w := New(writeCountAPI{db, &n}, rgTable, Options{InstanceID: "w"})
	task, err := w.Claim(ctx, taskR, id, started[0].Mark)
	if err != nil {
		t.Fatal(err)
	}
	if v := itemView(t, db, "srv"); v.waiting(time.Now().UnixMilli(), true) != 0 {
		t.Fatalf("a task still waits after its claim")
	}
	n.Store(0)
	light := Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "q", MaxQueued: 8, Rates: rate}
	ls, err := w.Acquire(ctx, light)
	if err != nil {
		t.Fatal(err)
	}
	takes := ls.TakesPlace()
	if _, err := ls.Finish(ctx, Success); err != nil {
		t.Fatal(err)
	}
	if takes || n.Load() != 1 {
		t.Errorf("a call with no cap beside a running task (no ticket waits) took a place: %v, in %d writes; want it charged in one write", takes, n.Load())
	}
	release(t, task)
}

// Buckets (doc.go): the charge is "judged on the item (refused on its
// process's view, it reads and is judged again)"; invariant 2: an
// uncontended call costs one write. A waiter seen on the process's cached
// view (up to an hour old) is judged on the item first: else a waiter
// since gone would turn the call into a take, from a view on the now
// empty queue, where one charge does.
//
// H (D) holds heavy (cap 1); W (A) waits for it from Q's process. P's
// process takes and releases a place of tool other, its answers showing
// W. W gives up (its leave is Q's write). Two seconds later P makes a
// call of tool light (no cap). Nobody waits.
func TestAChargeIsNotTurnedIntoATakeByAnOldViewOfAWaiterGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := []Rate{{Name: "server", PerMinute: 600}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		q := New(db, rgTable, Options{InstanceID: "q"})
		h := acquire(t, q, heavy("D"))
		wctx, wcancel := context.WithCancel(ctx)
		gotW := make(chan error, 1)
		go func() {
			_, err := q.Acquire(wctx, heavy("A"))
			gotW <- err
		}()
		synctest.Wait()
		var n atomic.Int64
		p := New(writeCountAPI{db, &n}, rgTable, Options{InstanceID: "p"})
		release(t, acquire(t, p, Request{Key: "srv", Tool: "other", ToolCap: 1, Hold: time.Minute, Holder: "B", Rates: rate}))
		if v := p.board("srv").recent(time.Hour); v == nil || len(v.queue) != 1 {
			t.Fatalf("P's process has not seen W waiting")
		}
		wcancel()
		if err := <-gotW; err == nil {
			t.Fatal("W got a place")
		}
		if q := itemView(t, db, "srv").queue; len(q) != 0 {
			t.Fatalf("W's ticket is still there: %v", ids(q))
		}
		time.Sleep(2 * time.Second)
		n.Store(0)
		ls, err := p.Acquire(ctx, Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "C", MaxQueued: 8, Rates: rate})
		if err != nil {
			t.Fatal(err)
		}
		takes := ls.TakesPlace()
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		if takes || n.Load() != 1 {
			t.Errorf("an uncontended call with no cap, its process's view showing a waiter since gone, took a place: %v, in %d writes; want it charged in one write", takes, n.Load())
		}
		release(t, h)
	})
}

// hookedAPI runs before() ahead of each write made through it once armed.
type hookedAPI struct {
	API
	armed  *atomic.Bool
	before func()
}

func (h hookedAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if h.armed.Load() {
		h.before()
	}
	return h.API.UpdateItem(ctx, in, opts...)
}

// Whose turn (doc.go): a waiter's take is conditioned on freed as seen
// (its tool capped, "mixed"). A call with no cap holds nothing in the
// item, charged or admitted in its turn, so its end moves nothing such a
// take is conditioned on: were it to hold a lease, each call with no cap
// made between a waiter's look and its take would refuse that take, and
// steady traffic with no cap would keep a capped tool's waiters out until
// they time out.
//
// H (D) holds heavy (cap 1), W (A) waits for it; server bucket 60,000 a
// minute. Once W has joined, a call of light (no cap, C, done at once) is
// made ahead of each of W's writes. H finishes: W's turn. W must get the
// place within its Wait (10 s).
func TestCallsWithNoCapDoNotRefuseAWaitersTake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := []Rate{{Name: "server", PerMinute: 60000}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: 10 * time.Second, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("D"))
		c := New(db, rgTable, Options{InstanceID: "c"})
		var made, placed atomic.Int64
		noCap := func() {
			ls, err := c.Acquire(ctx, Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "C", MaxQueued: 8, Rates: rate})
			if err != nil {
				return
			}
			made.Add(1)
			if ls.TakesPlace() {
				placed.Add(1)
			}
			_, _ = ls.Finish(ctx, Success)
		}
		var armed atomic.Bool
		type result struct {
			ls  *Lease
			err error
		}
		gotW := make(chan result, 1)
		go func() {
			ls, err := New(hookedAPI{db, &armed, noCap}, rgTable, Options{InstanceID: "w"}).Acquire(ctx, heavy("A"))
			gotW <- result{ls, err}
		}()
		synctest.Wait()
		if q := itemView(t, db, "srv").queue; len(q) != 1 {
			t.Fatalf("W is not waiting: %v", ids(q))
		}
		armed.Store(true)
		release(t, h) // W's turn
		w := <-gotW
		armed.Store(false)
		t.Logf("calls with no cap made: %d, of which %d took a place", made.Load(), placed.Load())
		if w.err != nil {
			t.Errorf("W, whose turn came at once, got no place in its 10 s: %v; the calls with no cap made between its looks and its takes (%d, %d of them taking a place) refused each of its takes", w.err, made.Load(), placed.Load())
		} else {
			release(t, w.ls)
		}
	})
}

// The model (sim_model_test.go, judgeCharge) accepts a charge beside a
// running task (nobody waiting), as TestAChargeBesideARunningTaskIsOneWrite
// has it.
func TestTheModelAcceptsAChargeBesideARunningTask(t *testing.T) {
	far := mNow + 60000
	k := mKey{MaxQueued: 8, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second, MaxPause: 5 * time.Second}
	running := func(f *mFix) *mFix {
		return f.taskTicket("k", 1, "pb", far, 0).lease("k", "pb", "", far).num("seq", 1)
	}
	judgeCase{name: "a charge beside a running task", k: k, me: mCaller{p: "pa"}, holdsNothing: true, outcome: mNoOutcome, judged: 1,
		before: running(mItemOf()), after: running(mItemOf().num("rate:server", mNow+30000))}.run(t)
}

// Whose turn (doc.go): places go to "the waiting principal that holds the
// fewest places on the key". A call with no cap holds nothing, in its
// principal's set or elsewhere, whether it was charged or admitted in its
// turn beside a ticket that needs its token: else its principal's capped
// waiters would rank behind others' by the chance of its timing.
//
// H (D) holds heavy (cap 1). P's caller WP waits for heavy first; P then
// makes a call of light (no cap, server bucket), still running; Q's
// caller WQ waits for heavy after WP. H finishes: WP, first in line, its
// principal holding no place under a cap, must get heavy.
func TestACallWithNoCapDoesNotRankItsPrincipalsWaitersLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := []Rate{{Name: "server", PerMinute: 600}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("D"))
		type result struct {
			who string
			ls  *Lease
			err error
		}
		got := make(chan result, 2)
		wait := func(id, who string) {
			go func() {
				ls, err := New(db, rgTable, Options{InstanceID: id}).Acquire(ctx, heavy(who))
				got <- result{who, ls, err}
			}()
			synctest.Wait()
		}
		wait("wp", "P")
		light := acquire(t, New(db, rgTable, Options{InstanceID: "p"}), Request{Key: "srv", Tool: "light", Hold: time.Minute, Holder: "P", MaxQueued: 8, Rates: rate})
		wait("wq", "Q")
		if q := itemView(t, db, "srv").queue; len(q) != 2 || q[0].label != "P" {
			t.Fatalf("WP and WQ are not waiting, WP first: %v", ids(q))
		}
		release(t, h)
		first := <-got
		if first.err != nil {
			t.Fatal(first.err)
		}
		if first.who != "P" {
			t.Errorf("heavy went to %s's later waiter: P's call of light, no cap (it took a place: %v), ranked P's waiter, first in line, behind it", first.who, light.TakesPlace())
		}
		release(t, first.ls)
		if second := <-got; second.err == nil {
			release(t, second.ls)
		}
		if _, err := light.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
	})
}

// Buckets (doc.go): a charge is "judged on the item (refused on its
// process's view, it reads and is judged again)". So is a call with no cap
// that may not wait, refused for the token it leaves to a waiter: never
// on its process's view alone, which may show a waiter since gone and its
// token free.
//
// The server's bucket holds 2 a minute. H (D) holds heavy (cap 1), taking
// a token; W (A) waits for heavy from Q's process. H finishes: W's turn
// (heavy free, one token), before W's next look. P's process takes and
// gives back a place of tool other (no bucket), its answer showing W's
// turn. W gives up (its leave is Q's write). At once P's process makes a
// call of light (no cap, Wait 0): nobody waits, a token is left.
func TestACallWithNoCapIsNotRefusedOnAViewOfAWaiterGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := []Rate{{Name: "server", PerMinute: 2}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("D"))
		wctx, wcancel := context.WithCancel(ctx)
		gotW := make(chan error, 1)
		go func() {
			ls, err := New(db, rgTable, Options{InstanceID: "q"}).Acquire(wctx, heavy("A"))
			if ls != nil {
				_, _ = ls.Finish(ctx, Unused)
			}
			gotW <- err
		}()
		synctest.Wait()
		release(t, h) // W's turn
		var reads, writes atomic.Int64
		p := New(readCountAPI{writeCountAPI{db, &writes}, &reads}, rgTable, Options{InstanceID: "p"})
		release(t, acquire(t, p, Request{Key: "srv", Tool: "other", ToolCap: 1, Hold: time.Minute, Holder: "B"}))
		if v := p.board("srv").recent(time.Hour); v == nil || len(v.queue) != 1 {
			t.Fatalf("P's process has not seen W waiting")
		}
		wcancel()
		if err := <-gotW; err == nil {
			t.Fatal("W got a place")
		}
		if v := itemView(t, db, "srv"); len(v.queue) != 0 {
			t.Fatalf("W's ticket is still there: %v", ids(v.queue))
		}
		reads.Store(0)
		writes.Store(0)
		ls, err := p.Acquire(ctx, Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "C", MaxQueued: 8, Rates: rate})
		if err != nil {
			t.Errorf("a call with no cap, nobody waiting and a token left, was refused (%d reads, %d writes): %v", reads.Load(), writes.Load(), err)
			return
		}
		_, _ = ls.Finish(ctx, Success)
	})
}
