package lease

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// markLostAtEnd applies the first start mark (an update naming the ticket's
// "s" with no REMOVE) and then loses its answer as the caller's context
// ends: the mark landed, the writer's context is over.
type markLostAtEnd struct {
	*memStore
	mu     sync.Mutex
	armed  bool
	cancel context.CancelFunc
	hits   int
}

func (s *markLostAtEnd) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	s.mu.Lock()
	hit := s.armed && slices.Contains(mapValues(in.ExpressionAttributeNames), ticketStarted) &&
		!strings.Contains(*in.UpdateExpression, "REMOVE")
	if hit {
		s.armed = false
		s.hits++
	}
	s.mu.Unlock()
	out, err := s.memStore.UpdateItem(ctx, in, o...)
	if hit && err == nil {
		s.cancel()
		return nil, ctx.Err()
	}
	return out, err
}

func mapValues(m map[string]string) []string {
	var vs []string
	for _, v := range m {
		vs = append(vs, v)
	}
	return vs
}

// A mark whose answer was lost as its context ended is found won by the
// item read within withdrawBudget (markStart): the worker it wins must be
// started with a context that has not ended, or a hook that starts it with
// a call under ctx (an invoke, a send) fails at once, and the start is lost
// for StartTimeout while the ticket carries the mark.
func TestAStartWonAfterItsContextEndedIsHandedALiveContext(t *testing.T) {
	db := &markLostAtEnd{memStore: newMemStore()}
	var (
		mu     sync.Mutex
		starts []error
	)
	l := New(db, "t", Options{OnTaskStart: func(ctx context.Context, ts TaskStart) {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, ctx.Err())
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db.cancel, db.armed = cancel, true
	req := Request{Key: "k", Cap: 1, MaxQueued: 4, Hold: time.Minute, Holder: "p"}
	if _, err := l.Enqueue(ctx, req, "", "task-1", time.Now().Add(time.Hour)); err != nil {
		t.Logf("enqueue: %v", err)
	}
	if db.hits != 1 {
		t.Fatalf("the start mark was written %d times, want 1", db.hits)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 1 {
		t.Fatalf("%d workers started for a mark that landed, want 1", len(starts))
	}
	if starts[0] != nil {
		t.Fatalf("OnTaskStart was handed an ended context (%v): a hook starting its worker with ctx fails, the start lost for StartTimeout", starts[0])
	}
}

// slowFirstMark hangs the first start mark until its context ends (its
// answer lost, not landed) and, as the SDK does, sends no request under a
// context already ended; it counts the reads made after the hang.
type slowFirstMark struct {
	*memStore
	mu    sync.Mutex
	armed bool
	hung  bool
	after int  // reads after the hang
	slow  bool // reads after the hang wait for their context's end
	dead  int  // writes asked under an ended context (never sent)
}

func (s *slowFirstMark) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if ctx.Err() != nil {
		s.mu.Lock()
		s.dead++
		s.mu.Unlock()
		return nil, ctx.Err()
	}
	s.mu.Lock()
	hit := s.armed && slices.Contains(mapValues(in.ExpressionAttributeNames), ticketStarted) &&
		!strings.Contains(*in.UpdateExpression, "REMOVE")
	if hit {
		s.armed, s.hung = false, true
	}
	s.mu.Unlock()
	if hit {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.memStore.UpdateItem(ctx, in, o...)
}

func (s *slowFirstMark) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	s.mu.Lock()
	if s.hung {
		s.after++
	}
	slow := s.hung && s.slow
	s.mu.Unlock()
	if slow {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.memStore.GetItem(ctx, in, o...)
}

// A take whose answer shows several tasks due starts them under a context
// of its own (withdrawBudget). When the first mark's answer is out until
// that context ends, every later mark is asked under the ended context:
// never sent, yet classified unsure. They must not each read the item
// within a new withdrawBudget (markStart): the synchronous caller would pay
// a read per due task (and, on a slow store, a withdrawBudget per read);
// only the mark whose answer was actually out needs one.
func TestATakesStartsStopOnceTheirContextEnded(t *testing.T) {
	for _, slow := range []bool{false, true} {
		t.Run(map[bool]string{false: "reads answered", true: "reads slow"}[slow], func(t *testing.T) {
			takesStartsAfterEnd(t, slow)
		})
	}
}

func takesStartsAfterEnd(t *testing.T, slow bool) {
	synctest.Test(t, func(t *testing.T) {
		db := &slowFirstMark{memStore: newMemStore(), slow: slow}
		req := Request{Key: "k", Cap: 4, MaxQueued: 8, Hold: time.Minute, Holder: "p"}
		// Three tasks due, unmarked: enqueued by a limiter that starts none.
		quiet := New(db, "t", Options{})
		for i := range 3 {
			if _, err := quiet.Enqueue(t.Context(), req, "", "task-"+string(rune('a'+i)), time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		var started int
		l := New(db, "t", Options{OnTaskStart: func(context.Context, TaskStart) { started++ }})
		db.mu.Lock()
		db.armed = true
		db.mu.Unlock()
		t0 := time.Now()
		ls, err := l.Acquire(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		db.mu.Lock()
		defer db.mu.Unlock()
		if !db.hung {
			t.Fatal("the take's starts made no mark")
		}
		t.Logf("caller's acquire took %v; %d reads after the hang, %d writes never sent, %d started", took, db.after, db.dead, started)
		if db.after > 1 {
			t.Fatalf("%d reads after the starts' context ended (%d of them for marks never sent), want at most 1", db.after, db.dead)
		}
		_ = ls
	})
}
