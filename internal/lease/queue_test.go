package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// waitFor acquires in the background; the lease (nil on error, which fails
// the test) arrives on the channel.
func waitFor(t *testing.T, l *Limiter, r Request) <-chan *Lease {
	got := make(chan *Lease, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), r)
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	return got
}

// queued waits until the key's queue holds n tickets, and returns the view.
func queued(t *testing.T, env *storetest.Env, key string, n int) *view {
	t.Helper()
	for range 500 {
		if v := parseItem(item(t, env, key)); len(v.queue) == n {
			return v
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the queue never held %d tickets", n)
	return nil
}

func waiting(key string, cap int, label string) Request {
	r := req(key, cap, label)
	r.Wait = 20 * time.Second
	return r
}

// Invariant 6 (the fourth defect of the earlier design): a newcomer whose
// view of the queue is out of date — one caller left it and another joined
// since, leaving it the same size — cannot pass the one that joined.
func TestNewcomerDoesNotPassAQueuedCaller(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	holder := acquire(t, l, req("srv", 1, "h"))
	first := New(env.Client, env.Tables.Leases, Options{InstanceID: "first"})
	firstCtx, firstGone := context.WithCancel(context.Background())
	go func() { _, _ = first.Acquire(firstCtx, waiting("srv", 1, "a")) }()
	stale := queued(t, env, "srv", 1) // the newcomer's view: one waiting
	firstGone()
	queued(t, env, "srv", 0)
	second := waitFor(t, New(env.Client, env.Tables.Leases, Options{InstanceID: "second"}), waiting("srv", 1, "b"))
	queued(t, env, "srv", 1)
	release(t, holder)
	// The newcomer judges from its stale view, in which it is its turn
	// once the one it saw is gone…
	newcomer := New(env.Client, env.Tables.Leases, Options{InstanceID: "newcomer"})
	stale.queue = nil
	stale.leases = map[string]int64{}
	a := &attempt{l: newcomer, req: req("srv", 1, "n"), b: newcomer.board("srv"), start: time.Now()}
	a.me = asker{id: newcomer.newLeaseID(), label: "n"}
	now := newcomer.clock().UnixMilli()
	served, ahead, _ := a.decide(stale, now)
	if !served {
		t.Fatal("the stale view does not give the newcomer the place")
	}
	// …but its take is conditioned on nobody having joined since.
	ls, _, err := a.take(context.Background(), stale, ahead, nil, now)
	if err != nil || ls != nil {
		t.Fatalf("the newcomer's take: %v, %v; want its condition to fail", ls, err)
	}
	release(t, <-second)
}

// Invariant 6: the next free place goes to the waiting principal that
// holds the fewest places, whoever came first; within a principal, first
// come, first served.
func TestFairBetweenPrincipals(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	a1, a2 := acquire(t, l, req("srv", 2, "A")), acquire(t, l, req("srv", 2, "A"))
	// A's flood queues first…
	var floods []<-chan *Lease
	for i := range 3 {
		floods = append(floods, waitFor(t, New(env.Client, env.Tables.Leases, Options{}), waiting("srv", 2, "A")))
		queued(t, env, "srv", i+1)
	}
	// …then B, alone.
	b := waitFor(t, New(env.Client, env.Tables.Leases, Options{}), waiting("srv", 2, "B"))
	queued(t, env, "srv", 4)
	release(t, a1)
	got := <-b
	if got == nil {
		t.Fatal("B got no place")
	}
	if n := len(parseItem(item(t, env, "srv")).queue); n != 3 {
		t.Errorf("%d waiting after B's turn; want A's 3", n)
	}
	// A's callers are served in the order they came: the two places
	// freed go to the first two.
	release(t, a2)
	release(t, got)
	first, second := <-floods[0], <-floods[1]
	if first == nil || second == nil {
		t.Fatal("A's first callers got no place")
	}
	if v := queued(t, env, "srv", 1); v.queue[0].label != "A" {
		t.Errorf("the one left waiting: %+v", v.queue[0])
	}
	release(t, first)
	release(t, second)
	if last := <-floods[2]; last != nil {
		release(t, last)
	}
}

// Invariant 6: a caller that cannot use the free place (its tool is full)
// does not keep it from the callers behind it.
func TestBlockedTicketDoesNotHoldUpAFreePlace(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	tool := req("srv", 3, "A")
	tool.Tool, tool.ToolCap = "slow", 1
	busy := acquire(t, l, tool)
	blocked := tool
	blocked.Wait = 20 * time.Second
	stuck := waitFor(t, New(env.Client, env.Tables.Leases, Options{}), blocked)
	queued(t, env, "srv", 1)
	// A server place is free: a caller of another tool takes it at once.
	other := acquire(t, New(env.Client, env.Tables.Leases, Options{}), req("srv", 3, "B"))
	release(t, other)
	release(t, busy)
	release(t, <-stuck)
}

// Invariant 6 (the fifth defect of the earlier design): a caller whose
// breaker is open for it does not keep the free place from the caller
// behind it.
func TestOpenBreakerDoesNotHoldUpTheQueue(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	br := &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}
	holder := acquire(t, l, req("srv", 1, "h"))
	// A's ticket waits at the front…
	ra := waiting("srv", 1, "A")
	ra.Tool, ra.Breaker, ra.Wait = "t", br, 3*time.Second
	aCtx, aGone := context.WithCancel(context.Background())
	aDone := make(chan error, 1)
	go func() { _, err := New(env.Client, env.Tables.Leases, Options{}).Acquire(aCtx, ra); aDone <- err }()
	queued(t, env, "srv", 1)
	b := waitFor(t, New(env.Client, env.Tables.Leases, Options{}), waiting("srv", 1, "B"))
	queued(t, env, "srv", 2)
	// …when A's own calls open the breaker for A alone.
	putFailure(t, env, "srv", br, "A")
	release(t, holder)
	select {
	case ls := <-b:
		if ls == nil {
			t.Fatal("B got no place")
		}
		release(t, ls)
	case <-time.After(10 * time.Second):
		t.Fatal("B waited behind a caller its breaker refuses")
	}
	aGone()
	if err := <-aDone; err == nil {
		t.Error("A got a place through a breaker open for it")
	}
}

// putFailure opens breaker br of key for principal label alone, as its
// own failed calls would.
func putFailure(t *testing.T, env *storetest.Env, key string, br *Breaker, label string) {
	t.Helper()
	u := newUpdate()
	u.condGate(nil, BreakerAttr(br.Name), label)
	u.setEntry(nil, BreakerAttr(br.Name), label, entryValue(map[string]int64{gateUntil: time.Now().Add(br.Recovery).UnixMilli()}))
	if _, err := New(env.Client, env.Tables.Leases, Options{}).write(context.Background(), key, u, nil); err != nil {
		t.Fatal(err)
	}
}

// Invariant 7: the queue holds at most MaxQueued tickets; the caller past
// it is told at once.
func TestQueueIsBounded(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	holder := acquire(t, l, req("srv", 1, "h"))
	var ws []<-chan *Lease
	for i, who := range []string{"w", "x"} {
		r := waiting("srv", 1, who)
		r.MaxQueued = 2
		ws = append(ws, waitFor(t, New(env.Client, env.Tables.Leases, Options{}), r))
		queued(t, env, "srv", i+1)
	}
	r := waiting("srv", 1, "y")
	r.MaxQueued = 2
	_, err := New(env.Client, env.Tables.Leases, Options{}).Acquire(context.Background(), r)
	var full *FullError
	if !errors.As(err, &full) || full.Reason != QueueFull || full.RetryAfter <= 0 {
		t.Fatalf("a third waiter: %v; want a full queue, with when to retry", err)
	}
	release(t, holder)
	for _, w := range ws {
		release(t, <-w)
	}
}

// Invariant 10: waiting costs no store write while nothing changes: no
// ticket is renewed, so the item's write units do not grow with waiters
// times time.
func TestWaitersCostNoRenewals(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	holder := acquire(t, l, req("srv", 1, "h"))
	w := New(env.Client, env.Tables.Leases, Options{})
	r := waiting("srv", 1, "w")
	const n = 5
	var ws []<-chan *Lease
	for i := range n {
		ws = append(ws, waitFor(t, w, r))
		queued(t, env, "srv", i+1)
	}
	before := w.Stats()
	time.Sleep(3 * time.Second)
	if d := w.Stats().Writes - before.Writes; d != 0 {
		t.Errorf("%d waiters made %d writes in 3 s with nothing changing; want none: before %+v after %+v", n, d, before, w.Stats())
	}
	release(t, holder)
	for _, c := range ws {
		release(t, <-c)
	}
}

// A release removes its holder's own ticket, should one be left (a join
// of it that landed late): no place can be pulled by a caller that holds
// one (the third defect of the earlier design passed places to it).
func TestReleaseRemovesItsHoldersTicket(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	ls := acquire(t, l, req("srv", 2, "h"))
	u := newUpdate()
	u.set(u.path(QueueAttr, ls.ID()), u.num(99))
	u.set(u.path(TicketsAttr, ls.ID()), u.value(&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		ticketLabel: &types.AttributeValueMemberS{Value: "h"}, ticketDeadline: number(time.Now().Add(time.Minute).UnixMilli())}}))
	if _, err := l.write(context.Background(), "srv", u, nil); err != nil {
		t.Fatal(err)
	}
	release(t, ls)
	v := parseItem(item(t, env, "srv"))
	if v.ticketFor(ls.ID()) != nil || len(v.queue) != 0 {
		t.Errorf("the holder's ticket is left after its release: %+v", v.queue)
	}
}

// Every write refreshes the item's ttl: an item in use is never deleted
// by DynamoDB TTL, breakers and all.
func TestEveryWriteRefreshesTTL(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	ttl := func() int64 { return numberOr(item(t, env, "srv")["ttl"], 0) }
	ls := acquire(t, l, req("srv", 1, "h"))
	u := newUpdate()
	u.set(u.path("ttl"), u.num(1))
	if _, err := l.write(context.Background(), "srv", u, nil); err != nil {
		t.Fatal(err)
	}
	if err := ls.Renew(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if got := ttl(); got < time.Now().Unix() {
		t.Errorf("ttl %d after a renewal; want it refreshed", got)
	}
	u = newUpdate()
	u.set(u.path("ttl"), u.num(1))
	if _, err := l.write(context.Background(), "srv", u, nil); err != nil {
		t.Fatal(err)
	}
	release(t, ls)
	if got := ttl(); got < time.Now().Unix() {
		t.Errorf("ttl %d after a release; want it refreshed", got)
	}
}
