package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Claim (doc.go Release, Tasks): a worker whose task's turn it is keeps
// its turn while others' releases refuse its takes, however many: its
// takes are made again from their answers, paced, and it takes the place
// once freed stops moving. It neither fails with ErrNotYourTurn (the turn
// was its own) nor gives its start back (which would start a second
// worker for the same turn at once).
func TestAClaimOverOthersReleasesKeepsItsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const refused = maxEager + 4
		b, l, st, id, start := churnedTask(t, refused, time.Now().Add(time.Hour))
		ls, err := l.Claim(ctx, taskReq("q"), id, start.Mark)
		takes := int(b.takes.Load())
		t.Logf("claim: %v after %d takes; task-1's starts %v", err, takes, st.marksOf(id))
		if err != nil {
			t.Fatalf("a claim whose takes were refused %d times on others' releases, its turn its own: %v", refused, err)
		}
		if takes != refused+1 {
			t.Errorf("%d takes; want %d refused and one that lands", takes, refused)
		}
		if got := st.marksOf(id); len(got) != 1 {
			t.Errorf("task-1 started %d times (%v); want once", len(got), got)
		}
		release(t, ls)
	})
}

// Claim (doc.go Tasks): a claim whose takes others' releases refuse
// without end stops StartTimeout after its start's mark, each take after
// the eager ones paced, with ErrStartLapsed, and starts the next worker
// (its mark on the ticket) as it leaves: never two claiming at once, and
// never none.
func TestAClaimOverEndlessReleasesStopsAtItsStartsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, l, st, id, first := churnedTask(t, -1, time.Now().Add(time.Hour))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := l.Claim(ctx, taskReq("q"), id, first.Mark)
		took := time.Now().UnixMilli() - first.Mark
		takes := int(b.takes.Load())
		t.Logf("claim: %v after %d takes, %d ms after its start", err, takes, took)
		if !errors.Is(err, ErrStartLapsed) {
			t.Errorf("a claim refused without end: %v; want ErrStartLapsed", err)
		}
		if took < StartTimeout.Milliseconds() {
			t.Errorf("it stopped %d ms after its start; want StartTimeout (%v) at least", took, StartTimeout)
		}
		// At most eagerRetries+1 at once, then one a writeMinBackoff/2 (the
		// least a jittered back-off is) at the most.
		if most := eagerRetries + 1 + int(time.Duration(took)*time.Millisecond/(writeMinBackoff/2)); takes > most {
			t.Errorf("%d takes in %d ms; want at most %d (paced)", takes, took, most)
		}
		after := st.list()
		if len(after) != 2 || after[1].Ticket != id || after[1].Mark < first.Mark+StartTimeout.Milliseconds() {
			t.Fatalf("starts after the claim stopped: %+v; want a second of %s, StartTimeout after the first", after, id)
		}
		if tk := mRead(rawItem(t, b, "srv")).tickets[id]; tk == nil || tk.s != after[1].Mark {
			t.Errorf("the ticket after the claim stopped: %+v; want it kept with the next start's mark %d", tk, after[1].Mark)
		}
	})
}
