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

// chargeCountAPI counts the writes through it that landed and set a
// token bucket (a charge, or a take that charges).
type chargeCountAPI struct {
	API
	bucket string
	n      *atomic.Int64
}

func (c chargeCountAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := c.API.UpdateItem(ctx, in, opts...)
	if err == nil && writes("SET", RateAttr(c.bucket))(in) {
		c.n.Add(1)
	}
	return out, err
}

// Buckets (doc.go): the take of a call with no cap that waited its turn
// "is sent once (an unknown outcome ends the call)"; "a token may be lost
// to a store error, never counted twice".
//
// H (A) holds heavy (cap 1); X (B) waits for it, needing a token of the
// server bucket (600 a minute). An operator's hold stands 5 s. N (C) calls
// light (no cap): X needs a token of its bucket, so N waits its turn; the
// hold refuses it, so it joins. The hold passes: N's turn (X's tool is
// full). N's take lands, its answer lost. The waiter's loop treats the
// store error as one met while waiting ("it keeps its ticket and looks
// again"): it reads, finds its ticket gone (taken), is a newcomer whose
// turn it is, and takes its tokens again.
func TestALostTakeOfAWaiterHoldingNothingIsNotTakenAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := []Rate{{Name: "server", PerMinute: 600}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("A"))
		xDone := make(chan struct{})
		go func() {
			defer close(xDone)
			if ls, err := New(db, rgTable, Options{InstanceID: "x"}).Acquire(ctx, heavy("B")); err == nil {
				_, _ = ls.Finish(ctx, Success)
			}
		}()
		synctest.Wait()
		if q := itemView(t, db, "srv").queue; len(q) != 1 {
			t.Fatalf("X is not waiting: %v", ids(q))
		}
		if err := NewAdmin(db, rgTable).Pause(ctx, "srv", time.Now().Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		var charges atomic.Int64
		f := &faultAPI{API: chargeCountAPI{db, "server", &charges}}
		n := New(f, rgTable, Options{InstanceID: "n"})
		type result struct {
			ls  *Lease
			err error
		}
		got := make(chan result, 1)
		go func() {
			ls, err := n.Acquire(ctx, Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "C", MaxQueued: 8, Wait: time.Minute, Rates: rate})
			got <- result{ls, err}
		}()
		synctest.Wait()
		if q := itemView(t, db, "srv").queue; len(q) != 2 {
			t.Fatalf("N did not join: %v", ids(q))
		}
		// N's take: the next write of N's that removes a ticket.
		f.arm(rule{match: writes("REMOVE", QueueAttr), fate: lose})
		r := <-got
		t.Logf("N: %v; charges landed: %d", r.err, charges.Load())
		if r.err == nil {
			t.Errorf("N's take of unknown outcome did not end the call: it got a lease (takes place: %v)", r.ls.TakesPlace())
			_, _ = r.ls.Finish(ctx, Success)
		}
		if c := charges.Load(); c > 1 {
			t.Errorf("N, one call with no cap, took its tokens %d times; want once at most", c)
		}
		release(t, h)
		<-xDone
	})
}

// Buckets (doc.go): a task running needs no token "on condition that its
// claim stands past Margin"; invariant 11: a call with no cap "is charged
// only while no ticket waiting needs a token of its buckets". A claim
// that lapsed before the charge landed (its lease past by more than the
// skew on the writer's clock) leaves its ticket waiting again, needing the
// server token: a charge that takes the bucket's last token then is one
// the task needed. The model must refuse it as it refuses a charge beside
// any waiter that needs its token. The mutant that drops the claim's
// condition from chargeRoom (acquire.go: u.cond(leases.<id> >= now +
// Margin)) passed 2000 seeds (12,700,000–12,701,999) of the simulation,
// which therefore does not pin that condition; this case tells whether the
// model would catch such a write at all.
func TestTheModelRefusesAChargeBesideATaskWhoseClaimLapsed(t *testing.T) {
	far := mNow + 60000
	k := mKey{MaxQueued: 8, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second, MaxPause: 5 * time.Second}
	// The server bucket (2 a minute, 30 s a token) holds one token.
	withClaim := func(f *mFix, exp int64) *mFix {
		return f.taskTicket("k", 1, "pb", far, 0).lease("k", "pb", "", exp).num("seq", 1)
	}
	for _, tc := range []judgeCase{
		{name: "a charge of the last token beside a running task", k: k, me: mCaller{p: "pa"}, holdsNothing: true, outcome: mNoOutcome, judged: 1,
			before: withClaim(mItemOf().num("rate:server", mNow+30000), far), after: withClaim(mItemOf().num("rate:server", mNow+60000), far)},
		{name: "a charge of the last token beside a task whose claim lapsed", k: k, me: mCaller{p: "pa"}, holdsNothing: true, outcome: mNoOutcome, judged: 1,
			before: withClaim(mItemOf().num("rate:server", mNow+30000), mNow-5000), after: withClaim(mItemOf().num("rate:server", mNow+60000), mNow-5000),
			want: []string{"rate"}},
	} {
		tc.run(t)
	}
}

// Buckets (doc.go): a task running needs no token "on condition that its
// claim stands past Margin" — the charge's condition leases.<id> >= now +
// Margin (chargeRoom). Nothing else pins it: with that condition dropped,
// every other test of the package and 2000 seeds of the fault simulation
// (12,700,000–12,701,999) pass.
//
// Server bucket 2 a minute. Task k (B) is claimed, its token taken: one
// left. N (C), a call with no cap that may not wait, is charged: its first
// write (no view) is refused, and its answer shows k claimed, live past
// Margin. Before N's charge from that answer lands, k's claim lapses
// unreleased and another caller's write purges its lease: k waits again,
// needing the token. N's charge must not take it.
func TestAChargeBesideAClaimPurgedBeforeItLandsLeavesTheTaskItsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		server := Rate{Name: "server", PerMinute: 2}
		rate := []Rate{server}
		taskR := Request{Key: "srv", Cap: 1 << 20, Tool: "slow", Hold: time.Second, Holder: "B", MaxQueued: 8, Rates: rate}
		var st starts
		l := New(db, rgTable, Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskR, "task-1")
		started := st.list()
		if len(started) != 1 {
			t.Fatalf("starts %v; want the task's one", started)
		}
		if _, err := New(db, rgTable, Options{InstanceID: "w"}).Claim(ctx, taskR, id, started[0].Mark); err != nil {
			t.Fatal(err)
		}
		purger := New(db, rgTable, Options{InstanceID: "p"})
		h := &hookAPI{API: db, at: 2, before: func() {
			time.Sleep(10 * time.Second) // the claim lapses (1 s + Margin)
			if _, _, err := purger.purgeAll(ctx, "srv", itemView(t, db, "srv")); err != nil {
				t.Errorf("purge: %v", err)
			}
			if v := itemView(t, db, "srv"); v.waiting(time.Now().UnixMilli(), true) != 1 {
				t.Errorf("the task does not wait again after its lapsed claim was purged")
			}
		}}
		n := New(h, rgTable, Options{InstanceID: "n"})
		ls, err := n.Acquire(ctx, Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "C", MaxQueued: 8, Rates: rate})
		t.Logf("N: %v (writes %d)", err, h.n)
		if err == nil {
			_, _ = ls.Finish(ctx, Success)
		}
		v := itemView(t, db, "srv")
		if left := server.Tokens(v.rates[RateAttr("server")], time.Now().UnixMilli()); left < 1 {
			t.Errorf("N's charge took the token task k, waiting again, needs (tokens left %d)", left)
		}
	})
}

// Whose turn and Buckets (doc.go): the take of a call holding nothing, in
// its turn, leaves each bucket the tokens of the callers whose turn comes
// first (u.charge's keep, as any take's): the bucket it saw may have been
// drained since by a writer whose clock runs ahead (by less than an
// interval). Nothing else pins that keep for such a take: with it dropped
// for takes that hold nothing, every other test of the package and 2000
// seeds of the fault simulation (12,700,000–12,701,999) pass.
//
// Server bucket 60 a minute (a token a second). H (A) held heavy (cap 1)
// and X (B) waits for it; H finishes: X's turn, X's process not yet
// looking. The bucket holds 2 tokens on the common clock (2.5), 3 on Z's,
// 0.9 s ahead. N (C), a call with no cap that may not wait, finds X
// waiting: its turn comes after X's, one token each. Before N's take lands,
// Z (D, no cap) takes one in its turn after X's, by its clock. N's take
// must not take X's token.
func TestATakeHoldingNothingLeavesTheTokenOfAWaiterBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		server := Rate{Name: "server", PerMinute: 60}
		rate := []Rate{server}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		light := func(who string) Request {
			return Request{Key: "srv", Tool: "light", MaxQueued: 8, Hold: 30 * time.Second, Holder: who, Rates: rate}
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("A"))
		xDone := make(chan struct{})
		go func() {
			defer close(xDone)
			if ls, err := New(db, rgTable, Options{InstanceID: "x"}).Acquire(ctx, heavy("B")); err == nil {
				_, _ = ls.Finish(ctx, Success)
			}
		}()
		synctest.Wait()
		if q := itemView(t, db, "srv").queue; len(q) != 1 {
			t.Fatalf("X is not waiting: %v", ids(q))
		}
		release(t, h) // X's turn
		now := time.Now().UnixMilli()
		handSet(t, db, RateAttr("server"), num(now+server.tolerance()-1500))
		z := New(db, rgTable, Options{InstanceID: "z", Clock: func() time.Time { return time.Now().Add(900 * time.Millisecond) }})
		var zErr error
		hk := &hookAPI{API: db, at: 2, before: func() { // before N's take
			var zl *Lease
			if zl, zErr = z.Acquire(ctx, light("D")); zErr == nil {
				_, _ = zl.Finish(ctx, Success)
			}
		}}
		ls, err := New(hk, rgTable, Options{InstanceID: "n"}).Acquire(ctx, light("C"))
		left := server.Tokens(itemView(t, db, "srv").rates[RateAttr("server")], time.Now().UnixMilli())
		t.Logf("Z: %v; N: %v; tokens left for X: %d (at %d ms past the setup)", zErr, err, left, time.Now().UnixMilli()-now)
		if err == nil {
			_, _ = ls.Finish(ctx, Success)
		}
		if zErr != nil {
			t.Fatalf("Z, whose turn came after X's by its clock, was refused: %v", zErr)
		}
		if left < 1 {
			t.Errorf("N's take, holding nothing, took the token of X, whose turn came first")
		}
		<-xDone
	})
}

// Buckets (doc.go): a charge is "conditioned on seq as seen, so nobody
// joined since"; Whose turn: "A newcomer, having no ticket, is the newest
// caller: its take is also conditioned on seq as seen"; invariant 11: a
// call with no cap "is charged only while no ticket waiting needs a token
// of its buckets". The model's judgeCharge (which judges both a charge
// and a newcomer's take holding nothing) counts the tickets numbered past
// the seq the write was judged from: such a write that took the token of
// a caller that joined after its view and ranks first is a violation,
// which the code's seq condition never lands.
//
// Server bucket 2 a minute, one token left. J (pb), a caller of light (no
// cap), joined (number 2) after the view the charge of N (pa) was judged
// from (seq 1). J and N hold no places: J, of the lower number, is first,
// and needs the token. N's charge takes it.
func TestTheModelRefusesAChargeTakingTheTokenOfACallerThatJoinedAfterItsView(t *testing.T) {
	far := mNow + 60000
	k := mKey{MaxQueued: 8, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second, MaxPause: 5 * time.Second}
	withJ := func(f *mFix) *mFix {
		return f.ticket("j", 2, "pb", "light", far, 0, 0).num("seq", 2)
	}
	for _, tc := range []judgeCase{
		{name: "J seen by the charge's view", k: k, me: mCaller{p: "pa"}, holdsNothing: true, outcome: mNoOutcome, judged: 2,
			before: withJ(mItemOf().num("rate:server", mNow+30000)), after: withJ(mItemOf().num("rate:server", mNow+60000)),
			want: []string{"rate"}},
		{name: "J joined after the charge's view", k: k, me: mCaller{p: "pa"}, holdsNothing: true, outcome: mNoOutcome, judged: 1,
			before: withJ(mItemOf().num("rate:server", mNow+30000)), after: withJ(mItemOf().num("rate:server", mNow+60000)),
			want: []string{"rate"}},
	} {
		tc.run(t)
	}
}

// Whose turn (doc.go): "A newcomer, having no ticket, is the newest
// caller: its take is also conditioned on seq as seen (nobody joined
// since it looked)"; Buckets: a call with no cap beside a ticket that
// needs its token "waits its turn as any caller does", its take holding
// nothing. Nothing else pins that condition on such a take: with it
// dropped, every other test of the package and 2000 seeds of the fault
// simulation (12,800,000–12,801,999) pass.
//
// Server bucket 2 a minute. H (A) holds heavy (cap 1), its token taken:
// one left. X (B) waits for heavy (tool full): its ticket shares the
// server bucket, so N (C), a call of light (no cap), is no charge; X
// cannot use a place, so N's turn comes in its view, and N takes. Just
// before N's take is sent, task T (D) joins: it ranks before N, the
// newest, and needs the last token. N's take must not land past it.
func TestANewcomersTakeHoldingNothingDoesNotPassATicketThatJoinedAfterItsLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		rate := []Rate{{Name: "server", PerMinute: 2}}
		heavy := func(who string) Request {
			return Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 8, Wait: time.Minute, Hold: 10 * time.Minute, Holder: who, Rates: rate}
		}
		h := acquire(t, New(db, rgTable, Options{InstanceID: "h"}), heavy("A"))
		xDone := make(chan struct{})
		go func() {
			defer close(xDone)
			if ls, err := New(db, rgTable, Options{InstanceID: "x"}).Acquire(ctx, heavy("B")); err == nil {
				_, _ = ls.Finish(ctx, Success)
			}
		}()
		synctest.Wait()
		if q := itemView(t, db, "srv").queue; len(q) != 1 {
			t.Fatalf("X is not waiting: %v", ids(q))
		}
		var st starts
		tl := New(db, rgTable, Options{InstanceID: "t", OnTaskStart: st.hook})
		taskR := Request{Key: "srv", Cap: 1 << 20, Tool: "slow", Hold: time.Minute, Holder: "D", MaxQueued: 8, Rates: rate}
		var armed atomic.Bool
		var nWrites atomic.Int64
		var charges atomic.Int64
		// N's first write is its charge (no view: an empty queue), refused
		// on X; its second, its take from that answer.
		hook := hookedAPI{API: db, armed: &armed, before: func() {
			if nWrites.Add(1) == 2 {
				enqueue(t, tl, taskR, "task-1")
			}
		}}
		armed.Store(true)
		n := New(chargeCountAPI{hook, "server", &charges}, rgTable, Options{InstanceID: "n"})
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ls, err := n.Acquire(nctx, Request{Key: "srv", Tool: "light", Hold: 30 * time.Second, Holder: "C", MaxQueued: 8, Wait: 5 * time.Second, Rates: rate})
		cancel()
		t.Logf("N: err %v; N's writes that charged the server bucket: %d", err, charges.Load())
		if err == nil {
			_, _ = ls.Finish(ctx, Success)
		}
		if c := charges.Load(); c > 0 {
			t.Errorf("N's take landed past task T, which joined after N's look and ranks before N (a newcomer, the newest), taking the last token T needed (%d charges of N's)", c)
		}
		release(t, h)
		<-xDone
	})
}
