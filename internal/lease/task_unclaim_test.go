package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// landedTakeStore runs landed once as a claim's take of ticket id has
// landed, before its answer goes back: a sleep (the answer late), or an
// error that is the answer instead (the answer lost).
type landedTakeStore struct {
	API
	id     string
	landed func() error
}

func (s *landedTakeStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := s.API.UpdateItem(ctx, in, opts...)
	if err == nil && s.landed != nil && isTakeOf(in, s.id) {
		lerr := s.landed()
		s.landed = nil
		if lerr != nil {
			return nil, lerr
		}
	}
	return out, err
}

// waitsUnclaimed fails t unless ticket id waits in db's item as it did
// before its claim: at number n, no lease of its id, no claim named in it
// (its start mark, if any, the next start's).
func waitsUnclaimed(t *testing.T, db API, id string, n int64) {
	t.Helper()
	it := mRead(rawItem(t, db, "srv"))
	tk := it.tickets[id]
	switch {
	case tk == nil || !tk.hasN || !tk.hasBody:
		t.Fatalf("ticket %s is gone (%+v): its task would never run", id, tk)
	case tk.n != n:
		t.Errorf("ticket %s numbered %d, was %d: it lost its place", id, tk.n, n)
	case tk.w != "":
		t.Errorf("ticket %s still names claim %q", id, tk.w)
	}
	if exp, held := it.leases[id]; held {
		t.Errorf("the lease of %s is still there (expiry %d)", id, exp)
	}
}

// Tasks (doc.go) and Claim's errors: a worker's own time (CallBy) is not
// its task's. A claim whose take lands after its worker's CallBy gives the
// place back keeping the ticket at its number (ErrStartLapsed), and the
// next worker is started and claims it.
func TestAClaimOutOfItsWorkersTimeKeepsTheTasksTicket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id, start := startedTask(t, mem)
		n := mRead(rawItem(t, mem, "srv")).tickets[id].n
		db := &landedTakeStore{API: mem, id: id, landed: func() error { time.Sleep(50 * time.Millisecond); return nil }}
		// The worker's invocation is nearly over.
		w, st, err := claimShortOfTime(t, db, id, start.Mark, 20*time.Millisecond, false)
		if !errors.Is(err, ErrStartLapsed) {
			t.Fatalf("claim: %v; want ErrStartLapsed (no time left for its call)", err)
		}
		waitsUnclaimed(t, mem, id, n)
		ls, err := w.Claim(context.Background(), taskReq("q"), id, nextStart(t, st, id).Mark)
		if err != nil {
			t.Fatalf("the next worker's claim: %v", err)
		}
		release(t, ls)
	})
}

// Unclaim: a worker that claimed its place and made no call gives it back
// with its tokens, and its ticket waits again at its number, before a
// caller who joined after it; the next start is made at once, and a
// second Unclaim, like a Finish after it, finds nothing held.
func TestUnclaimLeavesTheTicketWaitingAtItsNumber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		req := taskReq("q")
		req.Rates = []Rate{{Name: "server", PerMinute: 2}}
		id, err := l.Enqueue(context.Background(), req, "", "task-1", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		n := mRead(rawItem(t, db, "srv")).tickets[id].n
		first := st.list()
		if len(first) != 1 {
			t.Fatalf("starts: %+v; want one", first)
		}
		ls, err := l.Claim(context.Background(), req, id, first[0].Mark)
		if err != nil {
			t.Fatal(err)
		}
		charged := mRead(rawItem(t, db, "srv")).rates
		freed := mRead(rawItem(t, db, "srv")).freed
		if err := ls.Unclaim(context.Background()); err != nil {
			t.Fatalf("unclaim: %v", err)
		}
		after := mRead(rawItem(t, db, "srv"))
		waitsUnclaimed(t, db, id, n)
		if after.freed == freed {
			t.Errorf("freed stayed %d: takes judged before the place came back are not refused", freed)
		}
		for name, tat := range charged {
			if after.rates[name] >= tat {
				t.Errorf("bucket %s at %d, as charged (%d): the call never made kept its token", name, after.rates[name], tat)
			}
		}
		if err := ls.Unclaim(context.Background()); !errors.Is(err, ErrNotHeld) {
			t.Errorf("a second unclaim: %v; want ErrNotHeld", err)
		}
		if _, err := ls.Finish(context.Background(), Unused); !errors.Is(err, ErrNotHeld) {
			t.Errorf("a finish after the unclaim: %v; want ErrNotHeld", err)
		}
		got := st.list()
		if len(got) != 2 || got[1].Ticket != id || got[1].Mark == 0 {
			t.Fatalf("starts %+v; want a second of %s, made by the unclaim", got, id)
		}
		// The caller joins behind it; the task's next worker is served
		// first.
		cctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		caller := make(chan error, 1)
		go func() {
			ls, err := l.Acquire(cctx, Request{Key: "srv", Cap: 1, Hold: 10 * time.Second, Holder: "r", MaxQueued: 4, Wait: time.Minute})
			if ls != nil {
				_, _ = ls.Finish(context.Background(), Success)
			}
			caller <- err
		}()
		synctest.Wait()
		again, err := l.Claim(context.Background(), req, id, got[1].Mark)
		if err != nil {
			t.Fatalf("the next worker's claim, the caller behind it: %v", err)
		}
		release(t, again)
		if err := <-caller; err != nil {
			t.Errorf("the caller behind the task: %v", err)
		}
	})
}

// Unclaim of a lease whose ticket is gone (lapsed at its deadline and
// purged while the claim held its place) has nothing to keep: the place
// is given back as Finish gives it.
func TestUnclaimOfALeaseWhoseTicketIsGoneReleasesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		id, start := startedTask(t, db)
		l := New(db, "leases", Options{InstanceID: "w"})
		ls, err := l.Claim(context.Background(), taskReq("q"), id, start.Mark)
		if err != nil {
			t.Fatal(err)
		}
		// The ticket goes, as a purge of it past its deadline removes it.
		u := newUpdate()
		u.removeTicket(id, "q", mRead(rawItem(t, db, "srv")).tickets[id].n, true)
		u.ttl(time.Now().UnixMilli())
		if _, err := l.write(context.Background(), "srv", u, nil); err != nil {
			t.Fatal(err)
		}
		if err := ls.Unclaim(context.Background()); err != nil {
			t.Fatalf("unclaim: %v", err)
		}
		it := mRead(rawItem(t, db, "srv"))
		if _, held := it.leases[id]; held || it.tickets[id] != nil {
			t.Errorf("lease %v, ticket %+v left", it.leases[id], it.tickets[id])
		}
	})
}

// Unclaim is a task's: a caller's lease is refused it and stays held.
func TestUnclaimIsATasks(t *testing.T) {
	db := newMemStore()
	l := New(db, "leases", Options{InstanceID: "a"})
	ls := acquire(t, l, taskReq("p"))
	if err := ls.Unclaim(context.Background()); err == nil {
		t.Fatal("a caller's lease was unclaimed")
	}
	if _, held := mRead(rawItem(t, db, "srv")).leases[ls.ID()]; !held {
		t.Fatal("the refused unclaim gave the place back")
	}
	release(t, ls)
}

// Claim's failure: a worker whose context ends as its claim's take lands
// unseen gives the place back keeping the ticket (Unclaim, with a context
// of its own), so that the task does not wait, claimed, until the lease
// lapses, its whole hold and the margin later; the next worker is
// started, and claims it.
func TestAClaimEndingOnATakeOfUnknownOutcomeGivesItsPlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id, start := startedTask(t, mem)
		n := mRead(rawItem(t, mem, "srv")).tickets[id].n
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var st starts
		lost := func() error { cancel(); return context.Canceled }
		w := New(&landedTakeStore{API: mem, id: id, landed: lost}, "leases", Options{InstanceID: "w", OnTaskStart: st.hook})
		ls, err := w.Claim(ctx, taskReq("q"), id, start.Mark)
		if ls != nil || err == nil || errors.Is(err, ErrClaimed) || errors.Is(err, ErrStartLapsed) {
			t.Fatalf("claim: %v, %v; want its context's error", ls, err)
		}
		waitsUnclaimed(t, mem, id, n)
		got := st.list()
		if len(got) != 1 || got[0].Ticket != id {
			t.Fatalf("starts after the place came back: %+v; want the next one of %s", got, id)
		}
		if ls, err = w.Claim(context.Background(), taskReq("q"), id, got[0].Mark); err != nil {
			t.Fatalf("the next worker's claim: %v", err)
		}
		release(t, ls)
	})
}

// A claim whose take's answer was lost, and that found the place taken
// by another worker's claim since (the lease of the same id, the ticket
// naming the other claim), gives nothing back.
func TestAClaimEndingOnALostTakeLeavesAnothersClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id, start := startedTask(t, mem)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The store loses the first worker's take before it lands: the
		// second worker of the same start claims the place meanwhile (in
		// the same instant: the same expiry).
		other := New(mem, "leases", Options{InstanceID: "o"})
		var held *Lease
		lost := &lostBeforeStore{API: mem, id: id, before: func() {
			ls, err := other.Claim(context.Background(), taskReq("q"), id, start.Mark)
			if err != nil {
				t.Errorf("the other worker's claim: %v", err)
				return
			}
			held = ls
		}, cancel: cancel}
		w := New(lost, "leases", Options{InstanceID: "w"})
		if _, err := w.Claim(ctx, taskReq("q"), id, start.Mark); err == nil {
			t.Fatal("the worker whose take was lost claimed the place")
		}
		it := mRead(rawItem(t, mem, "srv"))
		if held == nil || it.leases[id] == 0 || it.tickets[id] == nil || it.tickets[id].w == "" {
			t.Fatalf("the other worker's claim was given back: lease %v, ticket %+v", it.leases[id], it.tickets[id])
		}
		release(t, held)
	})
}

// lostBeforeStore runs before, then ends the worker's context and fails a
// claim's take of ticket id without sending it.
type lostBeforeStore struct {
	API
	id     string
	before func()
	cancel context.CancelFunc
}

func (s *lostBeforeStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if s.before != nil && isTakeOf(in, s.id) {
		s.before()
		s.before = nil
		s.cancel()
		return nil, context.Canceled
	}
	return s.API.UpdateItem(ctx, in, opts...)
}

// A worker whose CallBy passes before its claim's take is made (its
// policy checks, or back-offs over others' releases, spent its time) has
// no time for the call, as one whose take lands past it: its task keeps
// its ticket and its turn, and the next worker is started (ErrStartLapsed,
// which the gateway reads as "not this start's to run"). A WaitTimeoutError
// here is settled by the gateway as the task's failed call, its ticket
// left marked by a start that will never claim.
func TestAClaimOutOfTimeBeforeItsTakeKeepsTheTasksTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		first := st.list()
		if len(first) != 1 {
			t.Fatalf("starts: %+v; want one", first)
		}
		r := taskReq("q")
		r.CallBy = time.Now().Add(-time.Millisecond)
		ls, err := l.Claim(context.Background(), r, id, first[0].Mark)
		if ls != nil {
			t.Fatalf("a claim with no time left holds %s", ls.ID())
		}
		if !errors.Is(err, ErrStartLapsed) {
			t.Errorf("claim with its CallBy passed: %v; want ErrStartLapsed (no call, the task keeps its turn)", err)
		}
		v := itemView(t, db, "srv")
		tk := v.ticketFor(id)
		if tk == nil {
			t.Fatal("the task's ticket is gone")
		}
		if _, held := v.leases[id]; held {
			t.Fatal("a lease of the task's id is left")
		}
		// Its turn stands: the next worker is started now, not StartTimeout
		// after the start that gave up.
		if got := st.list(); len(got) < 2 && tk.started == first[0].Mark {
			t.Errorf("the ticket keeps the mark %d of a start that gave up, and no next worker was started (starts %+v)", tk.started, got)
		}
	})
}

// An Unclaim whose answer is lost lands; its task's next worker, started
// by anyone who sees its turn, claims the ticket before the retry; the
// retry, refused, must still report the place given back (it was: the
// lease the item shows is the next claim's), as Finish counts a retry
// whose earlier attempt landed as done.
func TestAnUnclaimWhoseAnswerIsLostIsDoneThoughTheNextClaimHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &faultAPI{API: newMemStore()}
		ctx := context.Background()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		first := st.list()
		ls, err := l.Claim(ctx, taskReq("q"), id, first[0].Mark)
		if err != nil {
			t.Fatal(err)
		}
		var other starts
		l2 := New(db, "leases", Options{InstanceID: "b", OnTaskStart: other.hook})
		var next *Lease
		db.arm(rule{match: writes("REMOVE", ticketClaim), fate: lose, after: func() {
			time.Sleep(50 * time.Millisecond)
			if err := l2.StartDue(ctx, taskReq("q")); err != nil {
				t.Error(err)
				return
			}
			got := other.list()
			if len(got) != 1 {
				t.Errorf("starts after the unclaim landed: %+v; want one", got)
				return
			}
			var err error
			if next, err = l2.Claim(ctx, taskReq("q"), id, got[0].Mark); err != nil {
				t.Errorf("the next worker's claim: %v", err)
			}
		}})
		if err := ls.Unclaim(ctx); err != nil {
			t.Errorf("Unclaim whose first attempt landed: %v; want nil", err)
		}
		if next == nil {
			t.Fatal("no next claim")
		}
		v := itemView(t, db, "srv")
		if tk := v.ticketFor(id); tk == nil || tk.claim != next.claim || v.leases[id] != next.exps[0] {
			t.Fatalf("the next claim's lease or ticket was touched: %+v, lease %d", tk, v.leases[id])
		}
	})
}

// A task's worker that claimed its place as the probe of its principal's
// half-open breaker entry and gives it back before its call (Unclaim)
// told the upstream nothing: its ticket waits again, and its task gets a
// worker at once (invariant 16), which probes. The release's bar on an
// abandoned probe (its principal may not probe for Recovery) would pass
// the task over for Recovery, though no call was made, and with it every
// call of the principal, whose own entry only it can probe.
func TestAnUnclaimedProbeLeavesTheTaskItsProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		br := &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}
		r := taskReq("q")
		r.Tool, r.Breaker = "t", br
		ls, err := l.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Finish(ctx, Failure); err != nil {
			t.Fatal(err)
		}
		time.Sleep(br.Recovery + time.Second) // half-open: q's next call probes
		id := enqueue(t, l, r, "task-1")
		first := st.list()
		if len(first) != 1 {
			t.Fatalf("starts: %+v; want one (the task is the probe)", first)
		}
		claim, err := l.Claim(ctx, r, id, first[0].Mark)
		if err != nil {
			t.Fatal(err)
		}
		if len(claim.probes) == 0 {
			t.Fatal("the claim is not the breaker's probe")
		}
		if err := claim.Unclaim(ctx); err != nil {
			t.Fatal(err)
		}
		got := st.list()
		if len(got) != 2 {
			t.Fatalf("starts after the unclaim: %+v; want the next worker's at once", got)
		}
		next, err := l.Claim(ctx, r, id, got[1].Mark)
		if err != nil {
			t.Fatalf("the next worker's claim: %v; want the place, as the probe", err)
		}
		_, _ = next.Finish(ctx, Success)
	})
}

// The same out of time along the way: the worker's first take fails on
// the store (a reset connection, the write not applied) and CallBy passes
// while it reads again. Its next take is never made: the claim must leave
// the task its turn (ErrStartLapsed, the next worker started), not fail it
// with a WaitTimeoutError its start's mark outlives.
func TestAClaimRunningOutOfTimeBetweenTakesKeepsTheTasksTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &faultAPI{API: newMemStore()}
		var st starts
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		first := st.list()
		r := taskReq("q")
		r.CallBy = time.Now().Add(time.Second)
		db.arm(rule{match: writes("SET", ticketClaim), fate: hold, after: func() { time.Sleep(2 * time.Second) }})
		ls, err := l.Claim(context.Background(), r, id, first[0].Mark)
		if ls != nil {
			t.Fatalf("a claim with no time left holds %s", ls.ID())
		}
		if !errors.Is(err, ErrStartLapsed) {
			t.Errorf("claim whose CallBy passed between its takes: %v; want ErrStartLapsed", err)
		}
		if got := st.list(); len(got) < 2 {
			t.Errorf("no next worker started (starts %+v)", got)
		}
	})
}

// claimShortOfTime has a worker over api, its starts recorded in the
// starts returned, claim ticket id of start mark with left of its
// invocation: its CallBy, and with ctxEnds its context's deadline, left
// from now. The claim must fail: no time is left for its call.
func claimShortOfTime(t *testing.T, api API, id string, mark int64, left time.Duration, ctxEnds bool) (*Limiter, *starts, error) {
	t.Helper()
	st := &starts{}
	w := New(api, "leases", Options{InstanceID: "w", OnTaskStart: st.hook})
	req := taskReq("q")
	req.CallBy = time.Now().Add(left)
	ctx := context.Background()
	if ctxEnds {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, req.CallBy)
		defer cancel()
	}
	ls, err := w.Claim(ctx, req, id, mark)
	if ls != nil || err == nil {
		t.Fatalf("claim with %v left: %v, %v; want a failure (no time left for its call)", left, ls, err)
	}
	return w, st, err
}

// nextStart returns the one start st recorded, failing t unless it is of
// ticket id.
func nextStart(t *testing.T, st *starts, id string) TaskStart {
	t.Helper()
	got := st.list()
	if len(got) != 1 || got[0].Ticket != id {
		t.Fatalf("starts after the claim left its place or turn: %+v; want the next one of %s", got, id)
	}
	return got[0]
}
