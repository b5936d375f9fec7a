package lease

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// revzMarkLost applies the first start mark (an update naming the ticket's
// "s" with no REMOVE) and then loses its answer as the caller's context
// ends: the mark landed, the writer's context is over.
type revzMarkLost struct {
	*memStore
	mu     sync.Mutex
	armed  bool
	cancel context.CancelFunc
	hits   int
}

func (s *revzMarkLost) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
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
// item read within withdrawBudget (markStart); the worker it wins is then
// started with that ended context: OnTaskStart, which "should start the
// worker", is handed a context that is already done, so a hook that starts
// it with a call under ctx (an invoke, a send) fails at once, and the start
// is lost for StartTimeout while the ticket carries the mark.
func TestRevzAStartWonAfterItsContextEndedIsHandedALiveContext(t *testing.T) {
	db := &revzMarkLost{memStore: newMemStore()}
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
