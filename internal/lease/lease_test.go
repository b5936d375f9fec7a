package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestMain(m *testing.M) {
	if isWorker() {
		runWorker()
		return
	}
	storetest.Main(m)
}

func serverSlot(cap int) []Slot { return []Slot{{Attr: ServerAttr, Cap: cap}} }

func offsetClock(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// item reads the raw lease item.
func item(t *testing.T, env *storetest.Env, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// leaseIDs lists the ids in one slot map of the item.
func leaseIDs(t *testing.T, env *storetest.Env, key, attr string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	if m, ok := item(t, env, key)[attr].(*types.AttributeValueMemberM); ok {
		for id := range m.Value {
			ids[id] = true
		}
	}
	return ids
}

func acquire(t *testing.T, l *Limiter, req Request) *Lease {
	t.Helper()
	ls, err := l.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("acquire %s: %v", req.Key, err)
	}
	return ls
}

// acquireAsync acquires in the background; the lease (nil on error,
// which fails the test) arrives on the channel.
func acquireAsync(t *testing.T, l *Limiter, req Request) <-chan *Lease {
	got := make(chan *Lease, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), req)
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	return got
}

func TestUncontendedCostsTwoWrites(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(2), Hold: time.Second}
	// The first acquire on a new key creates the item.
	if err := acquire(t, l, req).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := l.Stats()
	for range 5 {
		ls := acquire(t, l, req)
		if err := ls.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	after := l.Stats()
	if w, r := after.Writes-before.Writes, after.Reads-before.Reads; w != 10 || r != 0 {
		t.Errorf("5 uncontended acquire+release pairs: %d writes, %d reads; want 10 and 0", w, r)
	}
}

func TestCapHoldsAcrossGoroutines(t *testing.T) {
	env := storetest.NewEnv(t)
	const cap, workers, rounds = 3, 12, 4
	var inFlight, peak, done atomic.Int64
	ids := sync.Map{}
	var wg sync.WaitGroup
	for w := range workers {
		// Separate limiters stand for separate instances.
		l := New(env.Client, env.Tables.Leases, Options{InstanceID: "w" + strconv.Itoa(w)})
		wg.Go(func() {
			for range rounds {
				ls, err := l.Acquire(context.Background(), Request{Key: "srv", Slots: serverSlot(cap), Hold: 5 * time.Second, Wait: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if _, dup := ids.LoadOrStore(ls.ID(), true); dup {
					t.Errorf("lease id %s granted twice", ls.ID())
				}
				n := inFlight.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(time.Millisecond) // hold the slot briefly
				inFlight.Add(-1)
				if err := ls.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > cap {
		t.Errorf("peak holders = %d, cap %d", p, cap)
	}
	if d := done.Load(); d != workers*rounds {
		t.Errorf("completed %d acquire/release rounds, want %d", d, workers*rounds)
	}
	if left := leaseIDs(t, env, "srv", ServerAttr); len(left) != 0 {
		t.Errorf("leases left after all released: %v", left)
	}
}

func TestShedWhenFull(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second}
	held := acquire(t, l, req)
	_, err := l.Acquire(context.Background(), req)
	var full *FullError
	if !errors.As(err, &full) {
		t.Fatalf("err = %v, want *FullError", err)
	}
	if full.RetryAfter <= 0 || full.RetryAfter > time.Second {
		t.Errorf("RetryAfter = %v, want in (0, 1s]", full.RetryAfter)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	acquire(t, l, req)
}

func TestWaitTimeout(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second}
	acquire(t, l, req)
	req.Wait = 100 * time.Millisecond
	_, err := l.Acquire(context.Background(), req)
	var wt *WaitTimeoutError
	if !errors.As(err, &wt) {
		t.Fatalf("err = %v, want *WaitTimeoutError", err)
	}
}

func TestWaiterGetsReleasedSlot(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second}
	held := acquire(t, l, req)
	got := make(chan error, 1)
	go func() {
		r := req
		r.Wait = time.Minute
		ls, err := l.Acquire(context.Background(), r)
		if err == nil {
			err = ls.Release(context.Background())
		}
		got <- err
	}()
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func TestDoubleReleaseIsHarmless(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(3), Hold: 10 * time.Second}
	a, b, c := acquire(t, l, req), acquire(t, l, req), acquire(t, l, req)
	for _, ls := range []*Lease{a, c} {
		if err := ls.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	writes := l.Stats().Writes
	if err := a.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second release: err = %v, want ErrNotHeld", err)
	}
	if l.Stats().Writes != writes {
		t.Error("second release of the same lease sent a write")
	}
	// A copy of the lease (another path holding the same id) cannot free b.
	stale := &Lease{l: a.l, key: a.key, slots: a.slots, id: a.id, exp: a.exp}
	if err := stale.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Errorf("stale release: err = %v, want ErrNotHeld", err)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 || !ids[b.ID()] {
		t.Errorf("leases = %v, want only %s", ids, b.ID())
	}
}

func TestExpiredLeaseIsPurged(t *testing.T) {
	env := storetest.NewEnv(t)
	a := New(env.Client, env.Tables.Leases, Options{InstanceID: "a", Margin: time.Second})
	// b's clock runs 5 s ahead: a's lease (hold 1 s + margin 1 s) has lapsed for b.
	b := New(env.Client, env.Tables.Leases, Options{InstanceID: "b", Clock: offsetClock(5 * time.Second)})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: time.Second}
	old := acquire(t, a, req)
	got := acquire(t, b, req) // no waiting: the purge happens in the acquire
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 || !ids[got.ID()] {
		t.Fatalf("leases = %v, want only b's %s", ids, got.ID())
	}
	if b.Stats().Purged != 1 {
		t.Errorf("purged = %d, want 1", b.Stats().Purged)
	}
	// a's late release and renewal find their lease gone and touch nothing.
	if err := old.Renew(context.Background(), time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("renew after purge: err = %v, want ErrNotHeld", err)
	}
	if err := old.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Errorf("release after purge: err = %v, want ErrNotHeld", err)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 || !ids[got.ID()] {
		t.Errorf("after late release/renew: leases = %v, want only %s", ids, got.ID())
	}
}

func TestRenewedLeaseIsNotPurged(t *testing.T) {
	env := storetest.NewEnv(t)
	a := New(env.Client, env.Tables.Leases, Options{InstanceID: "a", Margin: time.Second})
	b := New(env.Client, env.Tables.Leases, Options{InstanceID: "b", Clock: offsetClock(5 * time.Second)})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: time.Second}
	held := acquire(t, a, req)
	stale := parseItem(item(t, env, "srv")) // b's view before the renewal
	if err := held.Renew(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	// b writes with the stale view: its purge of a's old expiry must fail.
	att := &attempt{l: b, req: req, b: b.board("srv"), me: &ticket{id: b.newLeaseID(""), slots: req.Slots}, start: time.Now()}
	ls, next, err := att.take(context.Background(), stale)
	if err != nil || ls != nil {
		t.Fatalf("take with stale view: lease %v, err %v; want a failed condition", ls, err)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 || !ids[held.ID()] {
		t.Fatalf("leases = %v, want only the renewed %s", ids, held.ID())
	}
	if served, _ := next.turn(b.clock().UnixMilli(), att.me); served {
		t.Error("fresh view shows room although the renewed lease is live")
	}
	if err := held.Release(context.Background()); err != nil {
		t.Errorf("release of renewed lease: %v", err)
	}
}

func TestKeysAreIsolated(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	acquire(t, l, Request{Key: "one", Slots: serverSlot(1), Hold: time.Minute})
	if _, err := l.Acquire(context.Background(), Request{Key: "one", Slots: serverSlot(1), Hold: time.Minute}); err == nil {
		t.Fatal("second lease on a full key granted")
	}
	acquire(t, l, Request{Key: "two", Slots: serverSlot(1), Hold: time.Minute})
}

func TestToolSlotSharesTheWrite(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	slow := []Slot{{Attr: ServerAttr, Cap: 3}, {Attr: ToolAttr("slow"), Cap: 1}}
	fast := []Slot{{Attr: ServerAttr, Cap: 3}, {Attr: ToolAttr("fast"), Cap: 2}}
	held := acquire(t, l, Request{Key: "srv", Slots: slow, Hold: time.Minute})
	var full *FullError
	if _, err := l.Acquire(context.Background(), Request{Key: "srv", Slots: slow, Hold: time.Minute}); !errors.As(err, &full) || full.Attr != ToolAttr("slow") {
		t.Fatalf("second slow call: err = %v, want the slow tool full", err)
	}
	acquire(t, l, Request{Key: "srv", Slots: fast, Hold: time.Minute})
	acquire(t, l, Request{Key: "srv", Slots: fast, Hold: time.Minute})
	// The server cap (3) is now reached by 1 slow + 2 fast.
	if _, err := l.Acquire(context.Background(), Request{Key: "srv", Slots: serverSlot(3), Hold: time.Minute}); !errors.As(err, &full) || full.Attr != ServerAttr {
		t.Fatalf("fourth call: err = %v, want the server full", err)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ids := leaseIDs(t, env, "srv", ToolAttr("slow")); len(ids) != 0 {
		t.Errorf("slow tool leases after release: %v", ids)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 2 {
		t.Errorf("server leases after release: %d, want 2", len(ids))
	}
}

func TestBacklogOfExpiredLeases(t *testing.T) {
	env := storetest.NewEnv(t)
	// 60 leases of crashed holders, long expired: more than one write purges.
	m := map[string]types.AttributeValue{}
	for i := range 60 {
		m[fmt.Sprintf("dead.%d", i)] = &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)}
	}
	_, err := env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(env.Tables.Leases),
		Item: map[string]types.AttributeValue{
			store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "srv"},
			ServerAttr:           &types.AttributeValueMemberM{Value: m},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	l := New(env.Client, env.Tables.Leases, Options{})
	ls := acquire(t, l, Request{Key: "srv", Slots: serverSlot(2), Hold: time.Second})
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) > 60-maxPurge+1 || !ids[ls.ID()] {
		t.Errorf("%d leases left, want at most %d including ours", len(ids), 60-maxPurge+1)
	}
}

// replayAPI sends every acquire write twice, as an SDK retry after a lost
// response would, and reports the second outcome.
type replayAPI struct {
	API
	fail error // if set, returned after the first send instead of replaying
}

func (r *replayAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := r.API.UpdateItem(ctx, in, opts...)
	if err != nil || in.ConditionExpression == nil || in.ReturnValuesOnConditionCheckFailure == "" {
		return out, err
	}
	if r.fail != nil {
		return nil, r.fail
	}
	return r.API.UpdateItem(ctx, in, opts...)
}

func TestRetriedAcquireThatLandedIsKept(t *testing.T) {
	env := storetest.NewEnv(t)
	warm := New(env.Client, env.Tables.Leases, Options{})
	if err := acquire(t, warm, Request{Key: "srv", Slots: serverSlot(1), Hold: time.Second}).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := New(&replayAPI{API: env.Client}, env.Tables.Leases, Options{})
	ls := acquire(t, l, Request{Key: "srv", Slots: serverSlot(1), Hold: time.Minute})
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 || !ids[ls.ID()] {
		t.Fatalf("leases = %v, want only %s", ids, ls.ID())
	}
}

func TestFailedAcquireThatLandedIsRemoved(t *testing.T) {
	env := storetest.NewEnv(t)
	warm := New(env.Client, env.Tables.Leases, Options{})
	if err := acquire(t, warm, Request{Key: "srv", Slots: serverSlot(1), Hold: time.Second}).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := New(&replayAPI{API: env.Client, fail: errors.New("connection reset")}, env.Tables.Leases, Options{})
	if _, err := l.Acquire(context.Background(), Request{Key: "srv", Slots: serverSlot(1), Hold: time.Minute}); err == nil {
		t.Fatal("acquire succeeded despite the store error")
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 0 {
		t.Errorf("leases = %v after a failed acquire, want none", ids)
	}
}

func TestBadRequests(t *testing.T) {
	l := New(nil, "t", Options{})
	for name, req := range map[string]Request{
		"no key":              {Slots: serverSlot(1), Hold: time.Second},
		"no slots":            {Key: "k", Hold: time.Second},
		"zero cap":            {Key: "k", Slots: serverSlot(0), Hold: time.Second},
		"no slot, no breaker": {Key: "k", Hold: time.Second},
		"not a slot map":      {Key: "k", Slots: []Slot{{Attr: TicketsAttr, Cap: 1}}, Hold: time.Second},
		"long holder":         {Key: "k", Slots: serverSlot(1), Hold: time.Second, Holder: strings.Repeat("h", MaxHolder+1)},
		"holder with a space": {Key: "k", Slots: serverSlot(1), Hold: time.Second, Holder: "a b"},
		"no hold":             {Key: "k", Slots: serverSlot(1)},
		"same twice":          {Key: "k", Slots: []Slot{{ServerAttr, 1}, {ServerAttr, 2}}, Hold: time.Second},
	} {
		if _, err := l.Acquire(context.Background(), req); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestInFlightAfterAcquire(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(5), Hold: time.Minute}
	for want := 1; want <= 3; want++ {
		if got := acquire(t, l, req).InFlight; got != want {
			t.Errorf("lease %d: InFlight = %d", want, got)
		}
	}
}
