package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// Tests of the queue's invariants, as doc.go states them.

// tickets returns the ids of the tickets in the item of key.
func tickets(t *testing.T, env *storetest.Env, key string) map[string]bool {
	return leaseIDs(t, env, key, TicketsAttr)
}

// queued waits until the item of key holds n tickets.
func queued(t *testing.T, env *storetest.Env, key string, n int) {
	t.Helper()
	for len(tickets(t, env, key)) < n {
	}
}

// Callers on different instances are served in the order they queued.
func TestQueueIsFirstComeFirstServedAcrossInstances(t *testing.T) {
	env := storetest.NewEnv(t)
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	holder := New(env.Client, env.Tables.Leases, Options{InstanceID: "holder"})
	held := acquire(t, holder, req)
	const n = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		l := New(env.Client, env.Tables.Leases, Options{InstanceID: "w" + strconv.Itoa(i)})
		wg.Go(func() {
			ls, err := l.Acquire(context.Background(), req)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := ls.Release(context.Background()); err != nil {
				t.Error(err)
			}
		})
		queued(t, env, "srv", i+1) // i queues before i+1 comes
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if fmt.Sprint(order) != "[0 1 2 3 4]" {
		t.Errorf("served in order %v, want 0..4", order)
	}
	if left := tickets(t, env, "srv"); len(left) != 0 {
		t.Errorf("tickets left: %v", left)
	}
}

// A place that frees while a caller is queued is that caller's: a newcomer
// that does not wait is refused, and told it is the queue, not the cap.
func TestNewcomerDoesNotPassAQueuedCaller(t *testing.T) {
	env := storetest.NewEnv(t)
	a := New(env.Client, env.Tables.Leases, Options{InstanceID: "a"})
	b := New(env.Client, env.Tables.Leases, Options{InstanceID: "b", MinBackoff: time.Hour, MaxBackoff: time.Hour})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, a, req)
	got := acquireAsync(t, b, req)
	queued(t, env, "srv", 1)
	// The holder's lease goes without passing the place on (as when it
	// expires and is purged): the place is free, the waiter has not
	// looked yet.
	rawRemove(t, env, "srv", ServerAttr, held.ID())
	newcomer := New(env.Client, env.Tables.Leases, Options{InstanceID: "c"})
	_, err := newcomer.Acquire(context.Background(), Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second})
	var full *FullError
	if !errors.As(err, &full) || full.InUse != 0 || full.Waiting != 1 || full.Cap != 1 {
		t.Fatalf("newcomer past a queued caller: %v (%+v), want refused with 0 of 1 in use and 1 waiting", err, full)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 0 {
		t.Fatalf("leases = %v, want the place still free", ids)
	}
	// A waiter on the newcomer's instance queues behind, not before.
	second := acquireAsync(t, newcomer, req)
	queued(t, env, "srv", 2)
	// The first waiter takes the place at its next look (when it renews
	// its ticket, within a second).
	ls := <-got
	if ls == nil {
		t.FailNow()
	}
	if err := ls.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ls2 := <-second; ls2 == nil {
		t.FailNow()
	} else if err := ls2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A queued caller that cannot use a free place (another slot of its own is
// full) does not keep it from a caller behind it that can.
func TestCallerBlockedOnAnotherSlotDoesNotHoldUpAFreePlace(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	toolA := Request{Key: "srv", Slots: []Slot{{Attr: ServerAttr, Cap: 2}, {Attr: ToolAttr("a"), Cap: 1}}, Hold: 10 * time.Second, Wait: time.Minute}
	toolB := Request{Key: "srv", Slots: []Slot{{Attr: ServerAttr, Cap: 2}}, Hold: 10 * time.Second, Wait: time.Minute}
	heldA, heldB := acquire(t, l, toolA), acquire(t, l, toolB)
	waitA := acquireAsync(t, New(env.Client, env.Tables.Leases, Options{InstanceID: "wa"}), toolA)
	queued(t, env, "srv", 1)
	waitB := acquireAsync(t, New(env.Client, env.Tables.Leases, Options{InstanceID: "wb"}), toolB)
	queued(t, env, "srv", 2)
	// A server place frees; tool a is still full, so the place is b's.
	if err := heldB.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	lsB := <-waitB
	if lsB == nil {
		t.FailNow()
	}
	select {
	case ls := <-waitA:
		t.Fatalf("tool a's caller got a place while tool a was full: %v", ls)
	default:
	}
	// A newcomer for tool b is not held up by a's caller either... there
	// is no server place left, so it is refused for the cap.
	var full *FullError
	if _, err := l.Acquire(context.Background(), Request{Key: "srv", Slots: toolB.Slots, Hold: time.Second}); !errors.As(err, &full) || full.InUse != 2 {
		t.Fatalf("newcomer with the server full: %v", err)
	}
	// Tool a's place frees: its caller gets it.
	if err := heldA.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	lsA := <-waitA
	if lsA == nil {
		t.FailNow()
	}
	for _, ls := range []*Lease{lsA, lsB} {
		if err := ls.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// putTickets writes n tickets for the server slot that lapsed a minute ago:
// callers that died while they waited.
func putTickets(t *testing.T, env *storetest.Env, key string, n int, leases map[string]types.AttributeValue) {
	t.Helper()
	ts := map[string]types.AttributeValue{}
	past := time.Now().Add(-time.Minute).UnixMilli()
	for i := range n {
		dead := &ticket{id: fmt.Sprintf("dead.%d", i), arrive: past - 1000, exp: past, hold: 1000, slots: serverSlot(1)}
		ts[dead.id] = dead.value()
	}
	_, err := env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(env.Tables.Leases),
		Item: map[string]types.AttributeValue{
			store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key},
			ServerAttr:           &types.AttributeValueMemberM{Value: leases},
			TicketsAttr:          &types.AttributeValueMemberM{Value: ts},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Tickets of callers that died never keep a place from anyone, however
// many they are, and anyone removes them.
func TestLapsedTicketsDoNotWedge(t *testing.T) {
	env := storetest.NewEnv(t)
	putTickets(t, env, "srv", 3*maxPurge, map[string]types.AttributeValue{})
	l := New(env.Client, env.Tables.Leases, Options{})
	// A caller that does not wait (a shed server) gets in.
	ls := acquire(t, l, Request{Key: "srv", Slots: serverSlot(1), Hold: time.Second})
	if left := len(tickets(t, env, "srv")); left != 0 {
		t.Errorf("%d lapsed tickets left after a caller got in", left)
	}
	if err := ls.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Nor do they stand before a queued caller: a release passes its
	// place to the live one.
	putTickets(t, env, "srv", 30, map[string]types.AttributeValue{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, l, req)
	got := acquireAsync(t, New(env.Client, env.Tables.Leases, Options{MinBackoff: time.Hour, MaxBackoff: time.Hour}), req)
	for !liveTicket(t, env, "srv") {
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := <-got; w == nil {
		t.FailNow()
	}
}

// liveTicket reports whether the item of key holds a live ticket.
func liveTicket(t *testing.T, env *storetest.Env, key string) bool {
	for _, tk := range parseItem(item(t, env, key)).tickets {
		if tk.live(time.Now().UnixMilli()) {
			return true
		}
	}
	return false
}

// A purge removes a ticket only if it still holds the expiry seen: a
// waiter that renewed its ticket meanwhile keeps it.
func TestRenewedTicketIsNotPurged(t *testing.T) {
	env := storetest.NewEnv(t)
	putTickets(t, env, "srv", 1, map[string]types.AttributeValue{})
	stale := parseItem(item(t, env, "srv"))
	// The waiter renews it.
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(env.Tables.Leases),
		Key:                       map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "srv"}},
		UpdateExpression:          aws.String("SET #t.#id.#e = :e"),
		ExpressionAttributeNames:  map[string]string{"#t": TicketsAttr, "#id": "dead.0", "#e": ticketExpiry},
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": number(time.Now().Add(time.Minute).UnixMilli())},
	})
	if err != nil {
		t.Fatal(err)
	}
	New(env.Client, env.Tables.Leases, Options{}).passOn(context.Background(), "srv", stale, serverSlot(1))
	if !tickets(t, env, "srv")["dead.0"] {
		t.Error("a renewed ticket was purged on a stale view")
	}
}

// A caller that gives up (its context ends, or its wait) leaves no ticket.
func TestWaiterThatGivesUpLeavesNoTicket(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, l, req)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := New(env.Client, env.Tables.Leases, Options{}).Acquire(ctx, req)
		done <- err
	}()
	queued(t, env, "srv", 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if left := tickets(t, env, "srv"); len(left) != 0 {
		t.Errorf("ticket left by a waiter that gave up: %v", left)
	}
	r := req
	r.Wait = 50 * time.Millisecond
	var wt *WaitTimeoutError
	if _, err := l.Acquire(context.Background(), r); !errors.As(err, &wt) {
		t.Fatalf("waiter with a short budget: %v", err)
	}
	if left := tickets(t, env, "srv"); len(left) != 0 {
		t.Errorf("ticket left by a waiter that timed out: %v", left)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A caller that waits longer than a ticket lasts keeps its ticket alive.
func TestLongWaiterRenewsItsTicket(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{MinBackoff: time.Hour, MaxBackoff: time.Hour})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, New(env.Client, env.Tables.Leases, Options{}), req)
	got := acquireAsync(t, l, req)
	queued(t, env, "srv", 1)
	first := parseItem(item(t, env, "srv")).tickets[0].exp
	for parseItem(item(t, env, "srv")).tickets[0].exp == first {
		time.Sleep(50 * time.Millisecond)
	}
	snap := parseItem(item(t, env, "srv"))
	if tk := snap.tickets[0]; !tk.live(time.Now().UnixMilli()) {
		t.Errorf("renewed ticket lapsed: %+v", tk)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ls := <-got; ls == nil {
		t.FailNow()
	}
}

// A place given back in this process reaches a waiter here at once: its
// own looks are an hour apart.
func TestLocalReleaseReachesTheWaiter(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{MinBackoff: time.Hour, MaxBackoff: time.Hour})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Hour}
	held := acquire(t, l, req)
	got := acquireAsync(t, l, req)
	for snap := l.board("srv").recent(time.Minute); snap == nil || len(snap.tickets) == 0; snap = l.board("srv").recent(time.Minute) {
	} // until the waiter's ticket is on this process's board
	before := l.Stats()
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	ls := <-got
	if ls == nil {
		t.FailNow()
	}
	s := l.Stats()
	if s.Grants-before.Grants != 1 || s.Writes-before.Writes != 1 || s.Reads != before.Reads {
		t.Errorf("release passed %d places with %d writes and %d reads; want 1 place in 1 write, no read",
			s.Grants-before.Grants, s.Writes-before.Writes, s.Reads-before.Reads)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 || !ids[ls.ID()] || ls.ID() == held.ID() {
		t.Fatalf("item holds %v; want only the waiter's lease %s", ids, ls.ID())
	}
	if err := held.Release(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second release of the passed-on lease: %v, want ErrNotHeld", err)
	}
	if err := ls.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// No place is passed on to a caller of a tool whose breaker opened.
func TestNoPlacePassedOnWhileTheBreakerIsOpen(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{MinBackoff: time.Hour, MaxBackoff: time.Hour})
	br := &Breaker{Name: "srv", Threshold: 1, Recovery: time.Minute}
	req := Request{Key: "srv", Slots: serverSlot(2), Hold: 10 * time.Second, Wait: time.Minute, Breaker: br}
	held, failing := acquire(t, l, req), acquire(t, l, req)
	done := make(chan error, 1)
	go func() {
		_, err := New(env.Client, env.Tables.Leases, Options{}).Acquire(context.Background(), req)
		done <- err
	}()
	queued(t, env, "srv", 1)
	if tr, err := failing.Finish(context.Background(), Failure); err != nil || tr != Opened {
		t.Fatalf("failure with threshold 1: %v %v, want the breaker opened", tr, err)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var open *CircuitOpenError
	if err := <-done; !errors.As(err, &open) {
		t.Fatalf("waiter after the breaker opened: %v, want circuit open", err)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 0 {
		t.Errorf("leases left: %v", ids)
	}
	if left := tickets(t, env, "srv"); len(left) != 0 {
		t.Errorf("tickets left: %v", left)
	}
}

// Calls of a tool with a breaker and no cap take no place: the item does
// not grow with them.
func TestBreakerOnlyCallsTakeNoPlace(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Hold: time.Minute, Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Minute}}
	var held []*Lease
	before := l.Stats()
	for range 200 {
		held = append(held, acquire(t, l, req))
	}
	if s := l.Stats(); s.Writes != before.Writes || s.Reads-before.Reads != 200 {
		t.Errorf("200 acquires: %d writes, %d reads; want 0 and 200", s.Writes-before.Writes, s.Reads-before.Reads)
	}
	if size := store.ItemSize(item(t, env, "srv")); size > 100 {
		t.Errorf("item is %d bytes with 200 calls in flight", size)
	}
	for _, ls := range held {
		if err := ls.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if s := l.Stats(); s.Writes != before.Writes {
		t.Errorf("successful releases with no failures to reset wrote %d times", s.Writes-before.Writes)
	}
}

// A probe whose lease was lost (purged by an instance that saw it expire)
// neither closes the breaker nor keeps it from a new probe.
func TestLostProbeLeavesTheBreakerHalfOpen(t *testing.T) {
	env := storetest.NewEnv(t)
	now := New(env.Client, env.Tables.Leases, Options{Margin: time.Second})
	later := New(env.Client, env.Tables.Leases, Options{Margin: time.Second, Clock: offsetClock(11 * time.Second)})
	muchLater := New(env.Client, env.Tables.Leases, Options{Clock: offsetClock(20 * time.Second)})
	req := breakerReq(5)
	openBreaker(t, now, req)
	probe := acquire(t, later, req)
	// Another instance, past the probe's expiry, takes over.
	next := acquire(t, muchLater, req)
	if !next.Probe() {
		t.Fatal("no new probe once the first one's lease had expired")
	}
	for _, o := range []Outcome{Abandoned, Success} {
		p := &Lease{l: later, key: probe.key, slots: probe.slots, id: probe.id, exp: probe.exp, breaker: probe.breaker, probe: true}
		if tr, err := p.Finish(context.Background(), o); tr != NoTransition || !errors.Is(err, ErrNotHeld) {
			t.Errorf("%v finish of the lost probe: %q %v, want no transition, not held", o, tr, err)
		}
	}
	_, err := muchLater.Acquire(context.Background(), req)
	var open *CircuitOpenError
	if !errors.As(err, &open) || !open.HalfOpen {
		t.Fatalf("acquire while the new probe runs: %v, want half-open refusal", err)
	}
}

// An answer to a request sent before the one whose answer the board holds
// was overtaken: it must not replace the newer view (a waiter reading it
// would think its ticket gone and queue again).
func TestOvertakenAnswerDoesNotReplaceANewerView(t *testing.T) {
	b := &board{changed: make(chan struct{})}
	newer, older := &snapshot{}, &snapshot{}
	now := time.Now()
	b.see(newer, now)
	b.see(older, now.Add(-time.Millisecond))
	if got, _, _ := b.latest(); got != newer {
		t.Error("an overtaken answer replaced the newer view")
	}
}

// A place is never passed to a caller that holds one already (a ticket
// left behind by a caller that got its place): its lease is not
// overwritten, and the ticket stays for its owner to remove.
func TestNoPlacePassedToACallerThatHoldsOne(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(2), Hold: time.Minute, Wait: time.Minute}
	held := acquire(t, l, req)
	stray := &ticket{id: held.ID(), arrive: 1, exp: time.Now().Add(time.Minute).UnixMilli(), hold: 1000, slots: req.Slots}
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(env.Tables.Leases),
		Key:                       map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "srv"}},
		UpdateExpression:          aws.String("SET #t = :t"),
		ExpressionAttributeNames:  map[string]string{"#t": TicketsAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{stray.id: stray.value()}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	l.passOn(context.Background(), "srv", parseItem(item(t, env, "srv")), req.Slots)
	snap := parseItem(item(t, env, "srv"))
	if exp, _ := snap.holds(ServerAttr, held.ID()); exp != held.exp {
		t.Errorf("the holder's lease was overwritten: expiry %d, want %d", exp, held.exp)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
