package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// lateTakeStore holds the first take of ticket id in flight (its caller
// told it failed: an unknown outcome) and lands it just before the next
// write that takes a start mark away without being a take (passTurn's
// give-back of the mark): a take of unknown outcome landing late, after
// the read that followed it.
type lateTakeStore struct {
	*faultAPI
	id string
}

func (s *lateTakeStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !isTakeOf(in, s.id) && writes("REMOVE", ticketStarted)(in) {
		s.faultAPI.release()
	}
	return s.faultAPI.UpdateItem(ctx, in, opts...)
}

// A claim's first take has an unknown outcome and lands late; the worker's
// CallBy passes before its next take, so it gives its start's mark back
// (passTurn) and fails with ErrStartLapsed. The give-back's answer shows
// the ticket claimed by this very claim (its lease at the expiry its lost
// take set): the claim reads the item once and gives that place back, the
// ticket waits again, and the next worker is started (Tasks, doc.go).
func TestAClaimOutOfTimeAfterALateLandingTakeGivesItsPlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &faultAPI{API: newMemStore()}
		var st starts
		l := New(&lateTakeStore{faultAPI: db, id: ""}, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, taskReq("q"), "task-1")
		first := st.list()
		if len(first) != 1 {
			t.Fatalf("starts: %+v; want one", first)
		}
		w := New(&lateTakeStore{faultAPI: db, id: id}, "leases", Options{InstanceID: "w", OnTaskStart: st.hook})
		db.arm(rule{match: func(in *dynamodb.UpdateItemInput) bool { return isTakeOf(in, id) }, fate: hold})
		r := taskReq("q")
		r.CallBy = time.Now().Add(time.Millisecond)
		ls, err := w.Claim(context.Background(), r, id, first[0].Mark)
		if ls != nil {
			t.Fatalf("a claim with no time left holds %s", ls.ID())
		}
		if !errors.Is(err, ErrStartLapsed) {
			t.Fatalf("claim: %v; want ErrStartLapsed", err)
		}
		v := itemView(t, db, "srv")
		tk := v.ticketFor(id)
		if tk == nil {
			t.Fatal("the task's ticket is gone")
		}
		if exp, held := v.leases[id]; held || tk.claim != "" {
			t.Errorf("after the claim gave up, the ticket is left claimed (lease %d, claim %q) with no worker, until the lease lapses", exp, tk.claim)
		}
		if got := st.list(); len(got) < 2 {
			t.Errorf("no next worker was started (starts %+v)", got)
		}
	})
}

// A worker's context ends with its CallBy (as the gateway gives it). Its
// claim's takes are refused on others' releases until it backs off; the
// CallBy passes in a back-off, before its next take is made, and the claim
// fails with its context's error: it gives its start's mark back and
// starts the next worker (Tasks, doc.go), rather than leave the ticket
// marked by a start that will never claim, no worker for StartTimeout.
func TestAClaimOutOfTimeInABackOffPassesTheTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts, _, _, id, start := churnedTask(t, -1, time.Now().Add(time.Hour))
		_, st, err := claimShortOfTime(t, &endedCtxStore{API: ts}, id, start.Mark, 300*time.Millisecond, true)
		if ts.takes.Load() <= eagerRetries {
			t.Fatalf("%d takes: the claim did not reach its back-offs", ts.takes.Load())
		}
		tk := mRead(rawItem(t, ts, "srv")).tickets[id]
		if tk == nil {
			t.Fatal("the task's ticket is gone")
		}
		if tk.s == start.Mark {
			t.Errorf("claim failed with %v; the ticket still carries its start's mark %d: no worker before StartTimeout", err, tk.s)
		}
		nextStart(t, st, id)
	})
}
