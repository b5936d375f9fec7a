package lease

// Regression tests of doc.go's promises of liveness and isolation (and,
// in regress_cost_test.go, of cost and rates), each a scene in which the
// limiter once broke its promise. They use the package's exported API
// only (New, Options, Request, Acquire, the Lease's methods, Outcome
// values and errors); where a scene needs it they read the item, or write
// a number into it, by the attribute names of doc.go's item table. Store
// requests are counted by a wrapper around the API interface; in fake time
// (testing/synctest) the in-memory store stands in for DynamoDB.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// Attributes of a lease item, as doc.go's item table names them.
const (
	rgLeases  = "leases"
	rgQueue   = "queue"
	rgTickets = "tickets"
	rgSeq     = "seq"
	rgFreed   = "freed"
	rgLimit   = "limit"
)

// rgTable is the table the in-memory store's items are kept under (it
// ignores the name).
const rgTable = "leases"

// rgCounter counts the requests a process sends to the store: writes,
// the writes whose condition failed, and reads. Past runaway writes it
// pauses each write for a (fake) millisecond, so a loop that never pauses
// lets fake time move on and the test ends with its count instead of
// spinning.
type rgCounter struct {
	API
	writes, failed, reads atomic.Int64
}

const rgRunaway = 2000

func (c *rgCounter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if c.writes.Add(1) > rgRunaway {
		time.Sleep(time.Millisecond)
	}
	out, err := c.API.UpdateItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		c.failed.Add(1)
	}
	return out, err
}

func (c *rgCounter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.reads.Add(1)
	return c.API.GetItem(ctx, in, opts...)
}

// rgCount is a snapshot of an rgCounter.
type rgCount struct{ writes, failed, reads int64 }

func (c *rgCounter) now() rgCount {
	return rgCount{c.writes.Load(), c.failed.Load(), c.reads.Load()}
}

func (a rgCount) minus(b rgCount) rgCount {
	return rgCount{a.writes - b.writes, a.failed - b.failed, a.reads - b.reads}
}

// String says how many writes were sent and how many failed; past
// rgRunaway, that the counter had to slow the writer down.
func (a rgCount) String() string {
	s := fmt.Sprintf("%d writes (%d failed)", a.writes, a.failed)
	if a.writes > rgRunaway {
		s += fmt.Sprintf(", the first %d at one instant (a loop that does not pause, slowed by the test to 1 a ms)", rgRunaway)
	}
	return s
}

// rgFreezer is a process's line to the store that can be cut: once frozen,
// every request it sends waits until the test ends and then fails. A
// caller whose process froze after its ticket landed is a dead waiter: it
// never looks, takes or leaves again.
type rgFreezer struct {
	API
	frozen atomic.Bool
	thawed chan struct{}
	// done closes when the caller's Acquire returned.
	done chan struct{}
}

var errRgGone = errors.New("the process is gone")

func newRgFreezer(db API) *rgFreezer {
	return &rgFreezer{API: db, thawed: make(chan struct{}), done: make(chan struct{})}
}

func (f *rgFreezer) gone() bool {
	if f.frozen.Load() {
		<-f.thawed
		return true
	}
	return false
}

// rgBury ends the test's dead callers: it cancels their context, lets
// their frozen requests fail, and waits until each Acquire returned.
func rgBury(cancel context.CancelFunc, dead []*rgFreezer) {
	cancel()
	for _, f := range dead {
		f.frozen.Store(true)
		close(f.thawed)
	}
	for _, f := range dead {
		<-f.done
	}
}

func (f *rgFreezer) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.gone() {
		return nil, errRgGone
	}
	return f.API.UpdateItem(ctx, in, opts...)
}

func (f *rgFreezer) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.gone() {
		return nil, errRgGone
	}
	return f.API.GetItem(ctx, in, opts...)
}

// rgDeadWaiter starts a caller of r in a process of its own, lets it join
// the queue, and then freezes its process. It returns the process, which
// the test buries (rgBury) before it ends.
func rgDeadWaiter(t *testing.T, ctx context.Context, db API, id string, r Request) *rgFreezer {
	t.Helper()
	f := newRgFreezer(db)
	l := New(f, rgTable, Options{InstanceID: id})
	go func() {
		defer close(f.done)
		_, _ = l.Acquire(ctx, r)
	}()
	synctest.Wait()
	f.frozen.Store(true)
	return f
}

func rgItemKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}}
}

// rgItem reads a lease item as it stands.
func rgItem(t *testing.T, db API, table, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: rgItemKey(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// rgSetNumber writes one number attribute of a lease item (doc.go's item
// table names it), as an operator or an earlier state of the fleet left it.
func rgSetNumber(t *testing.T, db API, table, key, attr string, n int64) {
	t.Helper()
	_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       rgItemKey(key),
		UpdateExpression:          aws.String("SET #a = :v"),
		ExpressionAttributeNames:  map[string]string{"#a": attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// rgNumber is a number attribute of item; ok is false when it is absent.
func rgNumber(item map[string]types.AttributeValue, attr string) (int64, bool) {
	n, ok := item[attr].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	return v, err == nil
}

// rgMapLen is the number of entries in a map attribute (leases, queue).
func rgMapLen(item map[string]types.AttributeValue, attr string) int {
	m, _ := item[attr].(*types.AttributeValueMemberM)
	if m == nil {
		return 0
	}
	return len(m.Value)
}

// rgWaiting counts the tickets in the queue by principal: the label of
// the waiting set that holds each.
func rgWaiting(item map[string]types.AttributeValue) map[string]int {
	out := map[string]int{}
	queue, _ := item[rgQueue].(*types.AttributeValueMemberM)
	if queue == nil {
		return out
	}
	for id := range queue.Value {
		label := "?"
		for attr, v := range item {
			if ss, ok := v.(*types.AttributeValueMemberSS); ok && strings.HasPrefix(attr, WaitingAttrPrefix) && slices.Contains(ss.Value, id) {
				label = strings.TrimPrefix(attr, WaitingAttrPrefix)
			}
		}
		out[label]++
	}
	return out
}

func rgPaused(err error) bool {
	var full *FullError
	return errors.As(err, &full) && full.Reason == Paused
}

// Invariant 8 (doc.go, "Whose turn"): a waiter whose turn came and that
// does not take its place within its claim window — ClaimWindow past the
// look period its ticket announces — is presumed gone by the callers
// behind it, so D dead waiters before a live one delay it by at most the
// sum of their claim windows past its own turn, plus a look. Here one
// place frees (cap 1) with dead waiters — callers that joined and then
// never looked again — before a live one: the live caller gets the place
// within that bound of the release, the periods read from the dead
// tickets (fake time: the store answers at once, so no allowance for its
// latency), not when the dead tickets lapse at their deadline.
func TestDeadWaitersDelayALiveOneByAClaimWindowEach(t *testing.T) {
	for _, dead := range []int{2, 5} {
		t.Run(fmt.Sprint(dead), func(t *testing.T) { deadWaitersDelayALiveOne(t, dead) })
	}
}

func deadWaitersDelayALiveOne(t *testing.T, dead int) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const maxLook = time.Second
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: 30 * time.Second, Wait: time.Minute, Holder: "p"}
		holder, err := New(db, rgTable, Options{InstanceID: "h", MaxLook: maxLook}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		var buried []*rgFreezer
		defer func() { rgBury(cancel, buried) }()
		for i := range dead {
			buried = append(buried, rgDeadWaiter(t, ctx, db, fmt.Sprintf("d%d", i), r))
		}
		type result struct {
			ls  *Lease
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		live := New(db, rgTable, Options{InstanceID: "live", MaxLook: maxLook})
		go func() {
			ls, err := live.Acquire(ctx, r)
			got <- result{ls, err, time.Now()}
		}()
		synctest.Wait()
		item := rgItem(t, db, rgTable, "srv")
		if n := rgMapLen(item, rgQueue); n != dead+1 {
			t.Fatalf("%d tickets in the queue; want the %d dead waiters' and the live one's", n, dead)
		}
		// The dead waiters' claim windows, from the periods their tickets
		// announce.
		windows := time.Duration(0)
		for id, b := range item[rgTickets].(*types.AttributeValueMemberM).Value {
			if strings.HasPrefix(id, "live.") {
				continue
			}
			l, _ := b.(*types.AttributeValueMemberM).Value["l"].(*types.AttributeValueMemberN)
			if l == nil {
				t.Fatalf("the ticket of %s announces no look period", id)
			}
			ms, _ := strconv.ParseInt(l.Value, 10, 64)
			windows += ClaimWindow + time.Duration(ms)*time.Millisecond
		}
		freed := time.Now()
		if _, err := holder.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		res := <-got
		// The live waiter, at rank dead, first finds the place free at its
		// next look, at most dead × MaxLook away (MaxLookFar at most), then
		// passes each dead waiter in its claim window.
		bound := windows + min(time.Duration(dead)*maxLook, MaxLookFar)
		if res.err != nil {
			t.Fatalf("the live waiter, %d dead ones before it: %v after %v; want the place within %v (their claim windows + a look)",
				dead, res.err, res.at.Sub(freed), bound)
		}
		if waited := res.at.Sub(freed); waited > bound {
			t.Errorf("the live waiter got the free place %v after it freed, %d dead ones before it; want within %v (their claim windows + a look)",
				waited, dead, bound)
		}
		if _, err := res.ls.Finish(ctx, Success); err != nil {
			t.Error(err)
		}
	})
}

// Invariant 4 (doc.go, "Purge"): lapsed entries never wedge a key,
// whatever its cap is lowered to — a write whose view shows more stale
// entries than it can remove that its own conditions would count purges
// them first — and no loop writes again without a pause unless the
// answer showed progress.
//
// Thirty leases of dead holders lapse; the cap is lowered to 8. With
// nothing live, every call succeeds, and the calls' writes are bounded:
// a take and a release each, at most one take that fails on the stale
// entries, and at most one purge write per lapsed lease (3 × calls + 30);
// only those failed takes fail (≤ calls). A caller that would wait up to
// 3 s gets the place at once, having sent at most a take, a join, a take
// and one purge per lapsed lease (33 writes). With 8 live leases besides
// (the lowered cap full), such a caller sends at most a take, a join, a
// leave and one purge per lapsed lease: waiting costs no write while
// nothing changes.
func TestLapsedLeasesDoNotWedgeALoweredCap(t *testing.T) {
	const lapsed, lowered = 30, 8
	scene := func(t *testing.T, db API, live int) {
		t.Helper()
		ctx := context.Background()
		wide := Request{Key: "srv", Cap: lapsed + live, Hold: 10 * time.Minute, Holder: "h"}
		holders := New(db, rgTable, Options{InstanceID: "h"})
		for range live {
			if _, err := holders.Acquire(ctx, wide); err != nil {
				t.Fatal(err)
			}
		}
		wide.Hold = time.Second
		dead := New(db, rgTable, Options{InstanceID: "dead"})
		for range lapsed {
			if _, err := dead.Acquire(ctx, wide); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(wide.Hold + DefaultMargin + time.Second) // the dead holders' leases lapse
		if n := rgMapLen(rgItem(t, db, rgTable, "srv"), rgLeases); n != lapsed+live {
			t.Fatalf("%d leases in the item; want %d lapsed and %d live", n, lapsed, live)
		}
	}
	t.Run("nothing live", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			db := newMemStore()
			scene(t, db, 0)
			c := &rgCounter{API: db}
			l := New(c, rgTable, Options{InstanceID: "c"})
			ctx := context.Background()
			const calls = 20
			var refused []error
			for range calls {
				ls, err := l.Acquire(ctx, Request{Key: "srv", Cap: lowered, Hold: time.Minute, Holder: "c"})
				if err != nil {
					refused = append(refused, err)
					continue
				}
				if _, err := ls.Finish(ctx, Success); err != nil {
					t.Fatal(err)
				}
			}
			n := c.now()
			if len(refused) > 0 {
				t.Errorf("%d of %d calls refused under cap %d with %d lapsed leases and none live (first: %v)", len(refused), calls, lowered, lapsed, refused[0])
			}
			if bound := int64(3*calls + lapsed); n.writes > bound {
				t.Errorf("%d calls sent %v; want at most %d (a take and a release each, one failed take each, one purge per lapsed lease)",
					calls, n, bound)
			}
			if n.failed > calls {
				t.Errorf("%d of the calls' %d writes failed; want at most %d (one take each judged without a view)", n.failed, n.writes, calls)
			}
			if left := rgMapLen(rgItem(t, db, rgTable, "srv"), rgLeases); left != 0 {
				t.Errorf("%d leases left in the item after every call ended; want the lapsed ones purged", left)
			}
		})
	})
	t.Run("a waiter, nothing live", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			db := newMemStore()
			scene(t, db, 0)
			c := &rgCounter{API: db}
			l := New(c, rgTable, Options{InstanceID: "w"})
			const wait = 3 * time.Second
			start := time.Now()
			ls, err := l.Acquire(context.Background(), Request{Key: "srv", Cap: lowered, MaxQueued: 4, Hold: time.Minute, Wait: wait, Holder: "w"})
			n := c.now()
			if err != nil {
				t.Errorf("a caller waiting up to %v, cap %d, %d lapsed leases and none live: %v after %v; want the place", wait, lowered, lapsed, err, time.Since(start))
			} else if _, err := ls.Finish(context.Background(), Success); err != nil {
				t.Fatal(err)
			}
			if bound := int64(3 + lapsed); n.writes > bound {
				t.Errorf("a caller waiting up to %v sent %v before Acquire returned; want at most %d (a take, a join, a take, one purge per lapsed lease)", wait, n, bound)
			}
		})
	})
	t.Run("a waiter behind the lowered cap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			db := newMemStore()
			scene(t, db, lowered)
			c := &rgCounter{API: db}
			l := New(c, rgTable, Options{InstanceID: "w"})
			const wait = 3 * time.Second
			_, err := l.Acquire(context.Background(), Request{Key: "srv", Cap: lowered, MaxQueued: 4, Hold: time.Minute, Wait: wait, Holder: "w"})
			var timeout *WaitTimeoutError
			if !errors.As(err, &timeout) {
				t.Errorf("a waiter behind %d live leases (cap %d): %v; want it to wait its %v and time out", lowered, lowered, err, wait)
			}
			if n, bound := c.now(), int64(3+lapsed); n.writes > bound {
				t.Errorf("a caller waiting %v behind a full cap sent %v with %d lapsed leases in the item; want at most %d (a take, a join, a leave, one purge per lapsed lease)",
					wait, n, lapsed, bound)
			}
		})
	})
}

// Invariant 4 (doc.go, "Purge", "Join"): tickets past their deadline
// never wedge a key whose max_queued was lowered under them. Thirty
// callers joined (max_queued 30) and died; their tickets lapse; max_queued
// is now 8 and nobody else waits. A new caller joins — its join, after
// purging what it would count, is the one write a join is — and gets the
// place when the holder releases it. Its writes until it joined are at
// most a take, a join and one purge per lapsed ticket.
func TestLapsedTicketsDoNotWedgeALoweredQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const lapsed, lowered = 30, 8
		r := Request{Key: "srv", Cap: 1, MaxQueued: lapsed, Hold: 10 * time.Minute, Wait: 2 * time.Second, Holder: "d"}
		holder, err := New(db, rgTable, Options{InstanceID: "h"}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		var buried []*rgFreezer
		defer func() { rgBury(cancel, buried) }()
		for i := range lapsed {
			// Each of its own principal: one principal may not take the
			// last places of the queue (QueueReserve).
			rd := r
			rd.Holder = fmt.Sprintf("d%d", i)
			buried = append(buried, rgDeadWaiter(t, ctx, db, fmt.Sprintf("d%d", i), rd))
		}
		if n := rgMapLen(rgItem(t, db, rgTable, "srv"), rgQueue); n != lapsed {
			t.Fatalf("%d tickets in the queue; want the %d dead waiters'", n, lapsed)
		}
		time.Sleep(r.Wait + DefaultMargin + time.Second) // their tickets lapse
		c := &rgCounter{API: db}
		l := New(c, rgTable, Options{InstanceID: "w"})
		w := r
		w.MaxQueued, w.Wait, w.Holder = lowered, 30*time.Second, "w"
		got := make(chan error, 1)
		go func() {
			ls, err := l.Acquire(ctx, w)
			if err == nil {
				_, err = ls.Finish(ctx, Success)
			}
			got <- err
		}()
		synctest.Wait()
		joined := c.now()
		select {
		case err := <-got:
			t.Fatalf("a caller under max_queued %d, %d lapsed tickets in the queue and nobody else waiting: %v after %v; want it to join",
				lowered, lapsed, err, joined)
		default:
		}
		if n := rgWaiting(rgItem(t, db, rgTable, "srv"))["w"]; n != 1 {
			t.Errorf("the new caller holds %d tickets; want 1", n)
		}
		if bound := int64(2 + lapsed); joined.writes > bound {
			t.Errorf("the new caller sent %v to join; want at most %d (a take, a join, one purge per lapsed ticket)", joined, bound)
		}
		if _, err := holder.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Errorf("the new caller, the place freed: %v", err)
		}
	})
}

// rgBreakerCall is a call of tool "t" through breaker br by principal who.
func rgBreakerCall(br *Breaker, who string) Request {
	return Request{Key: "srv", Cap: 8, Tool: br.Name, Breaker: br, Hold: 30 * time.Second, Holder: who}
}

// Invariant 10 (doc.go, "Gates", Breaker): a probe's failure closes its
// principal's entry again, and "*" only while another principal's entry
// is closed — so one tenant whose own calls fail cannot hold the breaker
// closed for the others. The breaker opened for everyone (A's and B's
// calls failed, threshold 2); every recovery period, A's call comes first
// and fails. Another principal, C, gets through within two recovery
// periods.
func TestOneTenantsProbeCannotHoldTheBreakerOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		br := &Breaker{Name: "t", Threshold: 2, Recovery: 10 * time.Second}
		la := New(db, rgTable, Options{InstanceID: "a"})
		lb := New(db, rgTable, Options{InstanceID: "b"})
		lc := New(db, rgTable, Options{InstanceID: "c"})
		var failing []*Lease
		for _, p := range []struct {
			l   *Limiter
			who string
		}{{la, "A"}, {la, "A"}, {lb, "B"}, {lb, "B"}} {
			ls, err := p.l.Acquire(ctx, rgBreakerCall(br, p.who))
			if err != nil {
				t.Fatal(err)
			}
			failing = append(failing, ls)
		}
		for _, ls := range failing {
			if _, err := ls.Finish(ctx, Failure); err != nil {
				t.Fatal(err)
			}
		}
		var open *CircuitOpenError
		if _, err := lc.Acquire(ctx, rgBreakerCall(br, "C")); !errors.As(err, &open) || open.Principal {
			t.Fatalf("C's call after two principals' failures reached the threshold: %v; want the breaker open for everyone", err)
		}
		const periods, within = 10, 2
		for period := 1; period <= periods; period++ {
			time.Sleep(br.Recovery + 10*time.Millisecond)
			if a, err := la.Acquire(ctx, rgBreakerCall(br, "A")); err == nil {
				if _, err := a.Finish(ctx, Failure); err != nil {
					t.Fatal(err)
				}
			}
			c, err := lc.Acquire(ctx, rgBreakerCall(br, "C"))
			if err != nil {
				continue
			}
			if _, err := c.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
			if period > within {
				t.Errorf("C got through only in recovery period %d; want within %d: A's failing probes held the breaker open for C", period, within)
			}
			return
		}
		t.Errorf("C refused for %d recovery periods while A's own calls failed as its probes; want C through within %d", periods, within)
	})
}

// Invariant 10 (doc.go, "Gates", Breaker): each principal's consecutive
// failures count apart (f), its entry closes at Threshold, and "*" closes
// only when an entry closes while another principal's is closed. With
// threshold 5, four failures of A and one stray failure of B close no
// entry: C's call passes, and so do A's and B's.
func TestOneTenantsFailuresAndAStrayOneDoNotOpenForAll(t *testing.T) {
	env := storetest.NewEnv(t)
	ctx := context.Background()
	br := &Breaker{Name: "t", Threshold: 5, Recovery: time.Minute}
	l := New(env.Client, env.Tables.Leases, Options{})
	for _, who := range []string{"A", "A", "A", "A", "B"} {
		ls, err := l.Acquire(ctx, rgBreakerCall(br, who))
		if err != nil {
			t.Fatalf("%s's call: %v", who, err)
		}
		if tr, err := ls.Finish(ctx, Failure); err != nil || tr != NoTransition {
			t.Errorf("%s's failure: transition %q, %v; want none (no principal reached the threshold of %d)", who, tr, err, br.Threshold)
		}
	}
	for _, who := range []string{"C", "A", "B"} {
		ls, err := l.Acquire(ctx, rgBreakerCall(br, who))
		if err != nil {
			t.Errorf("%s's call after 4 failures of A and 1 of B (threshold %d): %v; want it through", who, br.Threshold, err)
			continue
		}
		if _, err := ls.Finish(ctx, Success); err != nil {
			t.Fatal(err)
		}
	}
}

// Invariant 10 (doc.go, "Gates"): one probe at a time per entry — a
// breaker open for one principal alone is half-open after Recovery like
// any other: the first of that principal's calls goes through as its
// probe (Lease.Probe) and the rest are refused while it runs, not all of
// them at once to a sick upstream. The probe's success opens the entry.
func TestBreakerOpenForOnePrincipalHasAProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		br := &Breaker{Name: "t", Threshold: 2, Recovery: 10 * time.Second}
		l := New(db, rgTable, Options{InstanceID: "a"})
		for range br.Threshold {
			ls, err := l.Acquire(ctx, rgBreakerCall(br, "A"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ls.Finish(ctx, Failure); err != nil {
				t.Fatal(err)
			}
		}
		var open *CircuitOpenError
		if _, err := l.Acquire(ctx, rgBreakerCall(br, "A")); !errors.As(err, &open) {
			t.Fatalf("A's call after its %d failures: %v; want the breaker open for A", br.Threshold, err)
		}
		time.Sleep(br.Recovery + 10*time.Millisecond)
		const calls = 5
		var through []*Lease
		var refused []error
		for range calls {
			ls, err := l.Acquire(ctx, rgBreakerCall(br, "A"))
			if err != nil {
				refused = append(refused, err)
				continue
			}
			through = append(through, ls)
		}
		probes := 0
		for _, ls := range through {
			if ls.Probe() {
				probes++
			}
		}
		if len(through) != 1 || probes != 1 {
			t.Errorf("after the recovery of a breaker open for A alone, %d of A's %d calls went through (%d named the probe); want exactly one, its probe", len(through), calls, probes)
		}
		for _, err := range refused {
			if !errors.As(err, &open) {
				t.Errorf("a call refused while A's probe runs: %v; want *CircuitOpenError", err)
			}
		}
		for _, ls := range through {
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
		}
		if len(through) == 1 {
			if _, err := l.Acquire(ctx, rgBreakerCall(br, "A")); err != nil {
				t.Errorf("A's call after its probe succeeded: %v; want it through", err)
			}
		}
	})
}

// Invariant 10 (doc.go, "Gates", Pause): a release whose upstream asked
// for a pause (a 429 or 503 with Retry-After, at most the request's
// MaxPause) closes its principal's entry until then; "*" closes when
// another principal's entry is closed; with PauseTool the gate is the
// tool's (pause:<tool>), not the server's.
func TestOnePrincipalsRetryAfterPausesItAlone(t *testing.T) {
	// pause makes a call of r whose upstream answered with Retry-After d.
	pause := func(t *testing.T, l *Limiter, r Request, d time.Duration) {
		t.Helper()
		ls, err := l.Acquire(context.Background(), r)
		if err != nil {
			t.Fatalf("%s's call of tool %s, whose upstream will ask for a pause: %v; want it through", r.Holder, r.Tool, err)
		}
		ls.PauseFor(d)
		if _, err := ls.Finish(context.Background(), Overloaded); err != nil {
			t.Fatal(err)
		}
	}
	// call makes a call of r at once and returns its refusal, if any.
	call := func(t *testing.T, l *Limiter, r Request) error {
		t.Helper()
		ls, err := l.Acquire(context.Background(), r)
		if err != nil {
			return err
		}
		if _, err := ls.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	of := func(r Request, who, tool string) Request {
		r.Holder, r.Tool = who, tool
		return r
	}
	base := Request{Key: "srv", Cap: 4, Hold: 10 * time.Second}

	t.Run("another principal", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := New(newMemStore(), rgTable, Options{InstanceID: "i"})
			pause(t, l, of(base, "A", "x"), 30*time.Second)
			if err := call(t, l, of(base, "B", "x")); err != nil {
				t.Errorf("B's call after A's upstream answer asked for a pause: %v; want it through (A's pause is A's alone)", err)
			}
			if err := call(t, l, of(base, "A", "x")); !rgPaused(err) {
				t.Errorf("A's own call during its pause: %v; want refused, paused", err)
			}
		})
	})
	t.Run("another tool", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := New(newMemStore(), rgTable, Options{InstanceID: "i"})
			tb := base
			tb.PauseTool = true
			pause(t, l, of(tb, "A", "x"), 30*time.Second)
			if err := call(t, l, of(tb, "A", "y")); err != nil {
				t.Errorf("A's call of tool y after its pause of tool x (PauseTool): %v; want it through", err)
			}
			if err := call(t, l, of(tb, "B", "x")); err != nil {
				t.Errorf("B's call of tool x after A's pause of it: %v; want it through", err)
			}
			if err := call(t, l, of(tb, "A", "x")); !rgPaused(err) {
				t.Errorf("A's call of tool x during its pause of x: %v; want refused, paused", err)
			}
		})
	})
	t.Run("two principals", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := New(newMemStore(), rgTable, Options{InstanceID: "i"})
			pause(t, l, of(base, "A", "x"), 30*time.Second)
			pause(t, l, of(base, "B", "x"), 30*time.Second)
			if err := call(t, l, of(base, "C", "x")); !rgPaused(err) {
				t.Errorf("C's call after A's and B's upstream answers asked for a pause: %v; want refused, paused for everyone", err)
			}
		})
	})
	t.Run("bounded by MaxPause", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := New(newMemStore(), rgTable, Options{InstanceID: "i"})
			r := base
			r.MaxPause = 5 * time.Second
			pause(t, l, of(r, "A", "x"), time.Hour)
			if err := call(t, l, of(r, "A", "x")); !rgPaused(err) {
				t.Errorf("A's call during its pause: %v; want refused, paused", err)
			}
			time.Sleep(r.MaxPause + 10*time.Millisecond)
			if err := call(t, l, of(r, "A", "x")); err != nil {
				t.Errorf("A's call %v after its upstream asked for an hour's pause, MaxPause %v: %v; want it through", r.MaxPause+10*time.Millisecond, r.MaxPause, err)
			}
		})
	})
}

// Invariant 12 (doc.go, "Adaptive limit"): down evidence of one principal
// is recorded; the limit comes down on the next down evidence of another
// principal, or of the same one only when no other holds or waits on the
// key. While B holds a place, A's timeouts (calls that ran their hold and
// failed) and A's quick failures leave the limit where it was; B's own
// failure then, a second principal's evidence, brings it down.
func TestOnePrincipalsFailuresDoNotLowerTheLimitForOthers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
		fails int
		last  time.Duration // how long each of A's calls runs before it fails
	}{
		{"timeouts", 4, 3, 5 * time.Second},
		{"quick failures", 8, 10, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				ctx := context.Background()
				ad := &Adaptive{Min: 1}
				rgSetNumber(t, db, rgTable, "srv", rgLimit, int64(tc.limit))
				limit := func() int64 {
					n, _ := rgNumber(rgItem(t, db, rgTable, "srv"), rgLimit)
					return n
				}
				b, err := New(db, rgTable, Options{InstanceID: "b"}).Acquire(ctx, Request{Key: "srv", Cap: tc.limit, Adaptive: ad, Hold: 10 * time.Minute, Holder: "B"})
				if err != nil {
					t.Fatal(err)
				}
				la := New(db, rgTable, Options{InstanceID: "a"})
				for i := range tc.fails {
					ls, err := la.Acquire(ctx, Request{Key: "srv", Cap: tc.limit, Adaptive: ad, Hold: tc.last, Holder: "A"})
					if err != nil {
						t.Fatalf("A's call %d, B holding one place: %v (limit now %d of %d)", i+1, err, limit(), tc.limit)
					}
					time.Sleep(tc.last)
					if _, err := ls.Finish(ctx, Failure); err != nil {
						t.Fatal(err)
					}
				}
				if got := limit(); got != int64(tc.limit) {
					t.Errorf("%d failures of A's calls (each %v) while B holds a place moved the limit %d → %d; want it left at %d",
						tc.fails, tc.last, tc.limit, got, tc.limit)
				}
				if _, err := b.Finish(ctx, Failure); err != nil {
					t.Fatal(err)
				}
				if got := limit(); got >= int64(tc.limit) {
					t.Errorf("B's failure after A's: limit %d; want it brought down from %d (two principals' evidence)", got, tc.limit)
				}
			})
		})
	}
}

// Invariant 12 (doc.go, "Adaptive limit"): the limit moves in rounds, and
// only a lease granted in the current round moves it, conditioned on the
// round — so a burst of failures of calls already in flight moves it once,
// whatever the clocks say. Two instances whose clocks are 1 s apart (well
// within the 2 s margin) each hold calls of A and B granted in one round
// at limit 8; all four fail: the limit comes down once, to 4.
func TestSkewedClocksMoveTheLimitOncePerRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		ad := &Adaptive{Min: 1}
		const limit = 8
		rgSetNumber(t, db, rgTable, "srv", rgLimit, limit)
		slow := New(db, rgTable, Options{InstanceID: "x"})
		fast := New(db, rgTable, Options{InstanceID: "y", Clock: func() time.Time { return time.Now().Add(time.Second) }})
		var calls []*Lease
		for _, l := range []*Limiter{slow, fast} {
			for _, who := range []string{"A", "B"} {
				ls, err := l.Acquire(ctx, Request{Key: "srv", Cap: limit, Adaptive: ad, Hold: 30 * time.Second, Holder: who})
				if err != nil {
					t.Fatal(err)
				}
				calls = append(calls, ls)
			}
		}
		time.Sleep(100 * time.Millisecond)
		for _, ls := range calls {
			if _, err := ls.Finish(ctx, Failure); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ := rgNumber(rgItem(t, db, rgTable, "srv"), rgLimit); got != limit/2 {
			t.Errorf("four failures of calls granted in one round, on two instances 1 s apart: limit %d → %d; want it halved once, to %d", limit, got, limit/2)
		}
	})
}

// Invariant 7 (doc.go, "Join"): a join is conditioned, when its principal
// already has callers waiting, on more than QueueReserve(MaxQueued) places
// staying free, so a principal cannot fill the last places of the queue
// and another principal's lone caller finds one. A's twenty callers come
// first (max_queued 8, the place held); B's lone caller then joins.
func TestOneTenantCannotFillTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		r := Request{Key: "srv", Cap: 1, MaxQueued: 8, Hold: time.Minute, Wait: time.Minute, Holder: "A"}
		holder, err := New(db, rgTable, Options{InstanceID: "h"}).Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 20 {
			l := New(db, rgTable, Options{InstanceID: fmt.Sprintf("a%d", i)})
			wg.Go(func() {
				if ls, err := l.Acquire(ctx, r); err == nil {
					_, _ = ls.Finish(context.Background(), Success)
				}
			})
			synctest.Wait()
		}
		rb := r
		rb.Holder = "B"
		bDone := make(chan error, 1)
		lb := New(db, rgTable, Options{InstanceID: "b"})
		wg.Go(func() {
			ls, err := lb.Acquire(ctx, rb)
			if err == nil {
				_, _ = ls.Finish(context.Background(), Success)
			}
			bDone <- err
		})
		synctest.Wait()
		waiting := rgWaiting(rgItem(t, db, rgTable, "srv"))
		select {
		case err := <-bDone:
			t.Errorf("B's lone caller, after A's callers filled what they could of a queue of %d (A waiting: %d): %v; want it to join", r.MaxQueued, waiting["A"], err)
		default:
			if waiting["B"] != 1 {
				t.Errorf("B's caller waits without a ticket: %v", waiting)
			}
		}
		cancel()
		wg.Wait()
		if _, err := holder.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	})
}

// Invariant 8 (doc.go, "Whose turn") across clocks: a pause that has
// passed on a fast clock and not yet on a slow one. A's call of tool x
// pauses A alone; A waits for x behind its pause on the slow instance.
// The fast instance purges the pause (its time has passed there); then B
// comes to the slow instance, whose recent view still shows A held back.
// A purged gate entry moves freed, so B's take, judged from that view,
// fails its condition; judged anew, the place is A's, and B (who does not
// wait) is refused. Without it B's take landed, passing A, whose turn it
// was on the item as it stood (seed 5000581).
func TestAPausePurgedOnAFastClockIsNotPassedOnASlowOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		const skew = 300 * time.Millisecond
		fast := New(db, rgTable, Options{InstanceID: "f", Clock: func() time.Time { return time.Now().Add(skew) }})
		slow := New(db, rgTable, Options{InstanceID: "s", Clock: func() time.Time { return time.Now().Add(-skew) }})
		base := Request{Key: "srv", Cap: 1, Hold: 10 * time.Second, Tool: "x", MaxQueued: 8}
		a, b := base, base
		a.Holder, b.Holder = "A", "B"
		ls, err := fast.Acquire(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		ls.PauseFor(time.Second)
		if _, err := ls.Finish(context.Background(), Overloaded); err != nil {
			t.Fatal(err)
		}
		// The pause ends 1 s after the call, on the fast clock: at true
		// +1 s there, +1.6 s on the slow one.
		time.Sleep(1100 * time.Millisecond)
		got := make(chan error, 1)
		go func() {
			aw := a
			aw.Wait = 5 * time.Second
			ls, err := slow.Acquire(context.Background(), aw)
			if err == nil {
				_, err = ls.Finish(context.Background(), Success)
			}
			got <- err
		}()
		synctest.Wait() // A joined, and waits for its pause to pass on the slow clock
		v, err := fast.read(context.Background(), base.Key)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := fast.purgeAll(context.Background(), base.Key, v); err != nil {
			t.Fatal(err)
		}
		if v, err = fast.read(context.Background(), base.Key); err != nil || v.gates[PauseAttr] != nil && len(v.gates[PauseAttr].entries) > 0 || len(v.queue) != 1 {
			t.Fatalf("after the fast instance's purge: pause %+v, queue %d, %v; want the pause gone and A waiting", v.gates[PauseAttr], len(v.queue), err)
		}
		if ls, err := slow.Acquire(context.Background(), b); err == nil {
			_, _ = ls.Finish(context.Background(), Success)
			t.Errorf("B, a newcomer on the slow instance, took the place while A waited with its pause passed on the item; want B refused, A served first")
		}
		if err := <-got; err != nil {
			t.Errorf("A's call, waiting behind its pause: %v; want it through", err)
		}
	})
}
