package lease

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// endedCtxStore answers as the SDK does: a request made with its context
// ended fails before it is sent. Its hook, when set, runs once a write it
// matches has landed; an error from it is the write's answer instead.
type endedCtxStore struct {
	API
	mu    sync.Mutex
	match func(*dynamodb.UpdateItemInput) bool
	hook  func() error
}

func (s *endedCtxStore) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.API.GetItem(ctx, in, opts...)
}

func (s *endedCtxStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out, err := s.API.UpdateItem(ctx, in, opts...)
	s.mu.Lock()
	var hook func() error
	if err == nil && s.match != nil && s.match(in) {
		hook, s.hook, s.match = s.hook, nil, nil
	}
	s.mu.Unlock()
	if hook != nil {
		if herr := hook(); herr != nil {
			return nil, herr
		}
	}
	return out, err
}

// isUnclaimOf reports whether in is an Unclaim's write of ticket id: it
// removes the claim named in the ticket, keeping the ticket.
func isUnclaimOf(in *dynamodb.UpdateItemInput, id string) bool {
	var idp, wp string
	for p, n := range in.ExpressionAttributeNames {
		switch n {
		case id:
			idp = p
		case ticketClaim:
			wp = p
		}
	}
	ue := aws.ToString(in.UpdateExpression)
	return idp != "" && wp != "" && strings.Contains(ue, "REMOVE") && strings.Contains(ue, "."+wp)
}

// Tasks (doc.go): a claim whose take lands past its worker's CallBy
// gives its place back keeping the ticket, and the next worker is
// started. Here the worker's context ends with its CallBy (its
// invocation's end), and the take's answer comes back after both: the
// give-back is then made with a context already ended.
func TestAClaimLandingPastCallByWithItsContextEndedGivesItsPlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id, start := startedTask(t, mem)
		n := mRead(rawItem(t, mem, "srv")).tickets[id].n
		db := &endedCtxStore{API: mem, match: isClaimTake, hook: func() error { time.Sleep(50 * time.Millisecond); return nil }}
		_, st, _ := claimShortOfTime(t, db, id, start.Mark, 20*time.Millisecond, true)
		waitsUnclaimed(t, mem, id, n)
		nextStart(t, st, id)
	})
}

// Tasks (doc.go): an Unclaim whose answer is lost, after which the next
// worker claims the ticket, is done (nil) and leaves the next claim's
// lease and ticket as they are; the unclaiming limiter starts nobody while
// that claim holds the place.
func TestAnUnclaimLostBeforeTheNextClaimIsDoneAndLeavesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		db, st, id, ls := claimedThrough(t, mem)
		var bst starts
		b := New(mem, "leases", Options{InstanceID: "b", OnTaskStart: bst.hook})
		var next *Lease
		db.mu.Lock()
		db.match = func(in *dynamodb.UpdateItemInput) bool { return isUnclaimOf(in, id) }
		db.hook = func() error {
			time.Sleep(time.Millisecond)
			if err := b.StartDue(context.Background(), taskReq("q")); err != nil {
				return err
			}
			got := bst.list()
			if len(got) != 1 {
				t.Errorf("starts after the lost unclaim landed: %+v; want one", got)
				return errAnswerLost
			}
			var err error
			if next, err = b.Claim(context.Background(), taskReq("q"), id, got[0].Mark); err != nil {
				t.Errorf("the next worker's claim: %v", err)
			}
			return errAnswerLost
		}
		db.mu.Unlock()
		if err := ls.Unclaim(context.Background()); err != nil {
			t.Errorf("unclaim whose answer was lost, then claimed again: %v; want done", err)
		}
		if next == nil {
			t.Fatal("no next claim")
		}
		it := mRead(rawItem(t, mem, "srv"))
		if exp, held := it.leases[id]; !held || exp != next.Expiry.UnixMilli() {
			t.Errorf("lease of %s: %d, %v; want the next claim's %d", id, exp, held, next.Expiry.UnixMilli())
		}
		if tk := it.tickets[id]; tk == nil || tk.w != next.claim {
			t.Errorf("ticket %+v; want it naming the next claim %q", tk, next.claim)
		}
		if got := st.list(); len(got) != 0 {
			t.Errorf("the unclaiming limiter started %+v while the next claim holds the place", got)
		}
		release(t, next)
		if _, held := mRead(rawItem(t, mem, "srv")).tickets[id]; held {
			t.Errorf("ticket %s still there after the next claim's release", id)
		}
	})
}

// slowReadStore is endedCtxStore whose next read's answer, once armed,
// comes back after a pause.
type slowReadStore struct {
	endedCtxStore
	slow time.Duration
}

func (s *slowReadStore) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := s.endedCtxStore.GetItem(ctx, in, opts...)
	s.mu.Lock()
	d := s.slow
	s.slow = 0
	s.mu.Unlock()
	time.Sleep(d)
	return out, err
}

// Tasks (doc.go): a claim whose worker's CallBy passes before its take is
// made gives its start's mark back and starts the next worker. Here the
// worker's context ends with its CallBy, which passes while the claim's
// read is answered: the mark is then given back, and the next worker
// started, with a context already ended.
func TestAClaimOutOfTimeBeforeItsTakeWithItsContextEndedPassesTheTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id, start := startedTask(t, mem)
		db := &slowReadStore{endedCtxStore: endedCtxStore{API: mem}, slow: 50 * time.Millisecond}
		_, st, err := claimShortOfTime(t, db, id, start.Mark, 20*time.Millisecond, true)
		if tk := mRead(rawItem(t, mem, "srv")).tickets[id]; tk.s == start.Mark {
			t.Errorf("claim failed with %v, the ticket still carries its start's mark %d: no worker before StartTimeout", err, tk.s)
		}
		nextStart(t, st, id)
	})
}

// Stats: Acquired and Released count granted and given-back leases. A
// claim whose take lands with no time left gives the place back inside
// Claim; it counts as released, so it must count as granted too, or
// Acquired − Released (the leases held) goes below zero.
func TestAPlaceGivenBackInsideClaimIsCountedOnBothSides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id, start := startedTask(t, mem)
		db := &landedTakeStore{API: mem, id: id, landed: func() error { time.Sleep(50 * time.Millisecond); return nil }}
		w, _, _ := claimShortOfTime(t, db, id, start.Mark, 20*time.Millisecond, false)
		if s := w.Stats(); s.Released > s.Acquired {
			t.Errorf("stats: acquired %d, released %d: the leases held read %d", s.Acquired, s.Released, s.Acquired-s.Released)
		}
	})
}

// Stats: a claim whose take's answer was lost, found landed on its next
// look, returns the lease: it counts as acquired, as its release will
// count as released.
func TestAClaimFoundLandedAfterALostAnswerCountsAsAcquired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		id, start := startedTask(t, mem)
		db := &endedCtxStore{API: mem, match: isClaimTake, hook: func() error { return errAnswerLost }}
		w := New(db, "leases", Options{InstanceID: "w"})
		ls, err := w.Claim(context.Background(), taskReq("q"), id, start.Mark)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if s := w.Stats(); s.Acquired != 1 {
			t.Errorf("stats after a claim that holds its place: acquired %d; want 1", s.Acquired)
		}
		release(t, ls)
		if s := w.Stats(); s.Released > s.Acquired {
			t.Errorf("stats: acquired %d, released %d", s.Acquired, s.Released)
		}
	})
}

// Tasks (doc.go): an Unclaim whose answer is lost, after which the task
// is withdrawn (its ticket waiting again, unclaimed), is done: the lease
// is gone while nobody could take it for expired.
func TestAnUnclaimLostBeforeAWithdrawalIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := newMemStore()
		db, st, id, ls := claimedThrough(t, mem)
		b := New(mem, "leases", Options{InstanceID: "b"})
		db.mu.Lock()
		db.match = func(in *dynamodb.UpdateItemInput) bool { return isUnclaimOf(in, id) }
		db.hook = func() error {
			if err := b.Withdraw(context.Background(), "srv", id, "task-1"); err != nil {
				t.Errorf("withdraw after the unclaim landed: %v", err)
			}
			return errAnswerLost
		}
		db.mu.Unlock()
		if err := ls.Unclaim(context.Background()); err != nil {
			t.Errorf("unclaim whose answer was lost, then withdrawn: %v; want done", err)
		}
		it := mRead(rawItem(t, mem, "srv"))
		if _, held := it.leases[id]; held {
			t.Errorf("lease of %s still there", id)
		}
		if got := st.list(); len(got) != 0 {
			t.Errorf("starts %+v for a withdrawn task", got)
		}
	})
}

// claimedThrough starts a task on mem and has a worker claim it through
// an endedCtxStore over mem, the worker's limiter recording its starts in
// st: it returns the store, st, the ticket and the claim's lease.
func claimedThrough(t *testing.T, mem *memStore) (db *endedCtxStore, st *starts, id string, ls *Lease) {
	t.Helper()
	id, start := startedTask(t, mem)
	db, st = &endedCtxStore{API: mem}, &starts{}
	w := New(db, "leases", Options{InstanceID: "w", OnTaskStart: st.hook})
	ls, err := w.Claim(context.Background(), taskReq("q"), id, start.Mark)
	if err != nil {
		t.Fatal(err)
	}
	return db, st, id, ls
}
