package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// lostTakeStore lands a claim's take of ticket id, then ends its
// worker's context and loses the answer (the worker sees its context's
// error: an outcome unknown to it).
type lostTakeStore struct {
	API
	id     string
	cancel context.CancelFunc
}

func (s *lostTakeStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := s.API.UpdateItem(ctx, in, opts...)
	if err == nil && s.cancel != nil && isTakeOf(in, s.id) {
		s.cancel()
		s.cancel = nil
		return nil, context.Canceled
	}
	return out, err
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
		w := New(&lostTakeStore{API: mem, id: id, cancel: cancel}, "leases", Options{InstanceID: "w", OnTaskStart: st.hook})
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
