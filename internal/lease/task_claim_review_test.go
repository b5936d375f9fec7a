package lease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A claim that makes its take again while the turn is its task's: what
// must end it, and what must let it land.

// breakerTaskReq is taskReq("q") through tool t's breaker.
func breakerTaskReq() Request {
	r := taskReq("q")
	r.Tool, r.Breaker = "t", &Breaker{Name: "t", Threshold: 3, Recovery: time.Second}
	return r
}

// handSet writes value at attr of key srv's item, as an operator's hand
// edit would.
func handSet(t *testing.T, db API, attr string, value types.AttributeValue) {
	t.Helper()
	if _, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String("leases"), Key: itemKey("srv"), UpdateExpression: aws.String("SET #a = :v"),
		ExpressionAttributeNames:  map[string]string{"#a": attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": value},
	}); err != nil {
		t.Fatal(err)
	}
}

// takeStore counts a claim's takes of ticket id (writes naming it and
// its claim field) and, while refuse is not 0, moves freed before each, as
// another principal's release would, so that it is refused: refuse takes
// in all, or every one while it is negative.
type takeStore struct {
	API
	id     atomic.Value
	takes  atomic.Int64
	refuse atomic.Int64
}

// newTakeStore is a takeStore over api refusing refuse takes (-1: all).
func newTakeStore(api API, refuse int64) *takeStore {
	s := &takeStore{API: api}
	s.refuse.Store(refuse)
	return s
}

func isTakeOf(in *dynamodb.UpdateItemInput, id string) bool {
	names := make([]string, 0, len(in.ExpressionAttributeNames))
	for _, n := range in.ExpressionAttributeNames {
		names = append(names, n)
	}
	return id != "" && slices.Contains(names, id) && slices.Contains(names, ticketClaim) && strings.HasPrefix(aws.ToString(in.UpdateExpression), "SET")
}

func (c *takeStore) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if id, _ := c.id.Load().(string); isTakeOf(in, id) {
		c.takes.Add(1)
		if n := c.refuse.Load(); n < 0 || n > 0 && c.refuse.CompareAndSwap(n, n-1) {
			if err := moveFreed(ctx, c.API, in.TableName, in.Key); err != nil {
				return nil, err
			}
		}
	}
	return c.API.UpdateItem(ctx, in, opts...)
}

// moveFreed adds one to freed in the item of key, as a release does.
func moveFreed(ctx context.Context, api API, table *string, key map[string]types.AttributeValue) error {
	_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: table, Key: key, UpdateExpression: aws.String("ADD #f :one"),
		ExpressionAttributeNames:  map[string]string{"#f": FreedAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1)},
	})
	return err
}

// Gates (doc.go): a take is conditioned on each entry being as the walk
// that let it pass read it. A breaker entry written by hand with a time
// the protocol never writes — everyone's "until" -1, or the caller's own
// 0 — is no closed breaker to the walk, and must be none to the take's
// condition: else every take is refused while the walk serves the
// caller, and its claim (or a waiter's acquire) never lands.
func TestAClaimOverABreakerEntryItsWalkPassesLands(t *testing.T) {
	for _, c := range []struct {
		name  string
		entry map[string]types.AttributeValue
	}{
		{"everyone's entry until -1", map[string]types.AttributeValue{gateAll: mv(map[string]types.AttributeValue{gateUntil: number(-1)})}},
		{"its principal's entry until 0", map[string]types.AttributeValue{"q": mv(map[string]types.AttributeValue{gateUntil: number(0)})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newTakeStore(newMemStore(), 0)
				var st starts
				l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
				id, err := l.Enqueue(context.Background(), breakerTaskReq(), "", "task-1", time.Now().Add(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				got := st.list()
				if len(got) != 1 {
					t.Fatalf("starts %+v; want one", got)
				}
				handSet(t, db, BreakerAttr("t"), mv(c.entry))
				db.id.Store(id)
				// The worker's invocation: 15 minutes (Lambda's most).
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
				defer cancel()
				w := New(db, "leases", Options{InstanceID: "w"})
				start := time.Now()
				ls, err := w.Claim(ctx, breakerTaskReq(), id, got[0].Mark)
				took := time.Since(start)
				s := w.Stats()
				t.Logf("claim: %v, %v after %v; %d takes, %d writes (%d refused), %d reads", ls != nil, err, took, db.takes.Load(), s.Writes, s.FailedWrites, s.Reads)
				if err != nil || ls == nil {
					t.Fatalf("a claim over a breaker entry its walk passes, nothing else written: %v after %v, %d takes", err, took, db.takes.Load())
				}
				release(t, ls)
			})
		})
	}
}

// steadyChurn moves freed, as other principals' releases do: before each
// of the first left takes of ticket id (the claim's eager ones), and every
// period until stop is closed.
type steadyChurn struct {
	*memStore
	mu    sync.Mutex
	id    string
	match func(in *dynamodb.UpdateItemInput, id string) bool // a take of id (nil: isTakeOf)
	left  int
	takes []time.Time
	lands []time.Time
}

func (b *steadyChurn) move(ctx context.Context) error {
	return moveFreed(ctx, b.memStore, aws.String("leases"), itemKey("srv"))
}

func (b *steadyChurn) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	time.Sleep(storeLatency)
	out, err := b.memStore.GetItem(ctx, in, opts...)
	time.Sleep(storeLatency)
	return out, err
}

// storeLatency is each way of a request to the store.
const storeLatency = 5 * time.Millisecond

func (b *steadyChurn) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	b.mu.Lock()
	match := b.match
	if match == nil {
		match = isTakeOf
	}
	take := match(in, b.id)
	move := take && b.left > 0
	if take {
		b.takes = append(b.takes, time.Now())
	}
	if move {
		b.left--
	}
	b.mu.Unlock()
	if move {
		if err := b.move(ctx); err != nil {
			return nil, err
		}
	}
	time.Sleep(storeLatency) // the request's way to the store
	out, err := b.memStore.UpdateItem(ctx, in, opts...)
	time.Sleep(storeLatency) // the answer's way back
	if take && err == nil {
		b.mu.Lock()
		b.lands = append(b.lands, time.Now())
		b.mu.Unlock()
	}
	return out, err
}

// Others' releases every 20 ms (50 a second on the key, as a server of
// cap 50 with one-second calls sees), the store 5 ms away: the claim's
// first eagerRetries+1 takes are refused as in
// TestAClaimOverOthersReleasesKeepsItsTurn. A take judged after a
// back-off from the answer before it would be refused on freed every time
// while the releases go on: each is judged from a new read, and the claim
// lands while they do, before StartDue (every 1.5 s) starts a second
// worker.
func TestAClaimUnderSteadyReleasesLandsBeforeASecondStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &steadyChurn{memStore: newMemStore(), left: eagerRetries + 1}
		var st starts
		l := New(b, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id, start := startedBehind(t, l, &st, time.Now().Add(time.Hour))
		const churnFor = time.Minute
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // others' releases
			for end := time.Now().Add(churnFor); time.Now().Before(end); {
				time.Sleep(20 * time.Millisecond)
				if err := b.move(ctx); err != nil {
					t.Error(err)
					return
				}
			}
			close(stop)
		})
		sweep := New(b, "leases", Options{InstanceID: "s", OnTaskStart: st.hook})
		wg.Go(func() { // the schedule's StartDue
			for {
				select {
				case <-stop:
					return
				case <-time.After(1500 * time.Millisecond):
				}
				_ = sweep.StartDue(ctx, taskReq("s"))
			}
		})
		b.mu.Lock()
		b.id = id
		b.mu.Unlock()
		w := New(b, "leases", Options{InstanceID: "w"})
		begin := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
		defer cancel()
		ls, err := w.Claim(cctx, taskReq("q"), id, start.Mark)
		took := time.Since(begin)
		if err == nil {
			release(t, ls)
		}
		wg.Wait()
		b.mu.Lock()
		takes := len(b.takes)
		during := 0
		for _, at := range b.takes {
			if at.Sub(begin) < churnFor {
				during++
			}
		}
		b.mu.Unlock()
		s := w.Stats()
		t.Logf("claim: %v after %v; %d takes (%d while the releases went on: %.1f a second), %d writes, %d reads; task-1's starts %v",
			err, took, takes, during, float64(during)/min(took, churnFor).Seconds(), s.Writes, s.Reads, st.marksOf(id))
		if err != nil {
			t.Fatal(err)
		}
		if took >= churnFor {
			t.Errorf("the claim took its place only once others' releases stopped (%v): %d takes refused on freed, a waiter in its place lands at once", took, during)
		}
		if got := st.marksOf(id); len(got) != 1 {
			t.Errorf("task-1 started %d times (%v) while its first worker's claim was still making takes", len(got), got)
		}
	})
}

// A waiter (Acquire) in the claim's place under the same releases and
// store, its first eagerRetries+1 takes refused alike, lands too.
func TestAWaiterUnderSteadyReleasesLands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &steadyChurn{memStore: newMemStore(), left: eagerRetries + 1}
		b.match = func(in *dynamodb.UpdateItemInput, id string) bool {
			names := make([]string, 0, len(in.ExpressionAttributeNames))
			for _, n := range in.ExpressionAttributeNames {
				names = append(names, n)
			}
			return id != "" && slices.Contains(names, id) && slices.Contains(names, LeasesAttr) && !slices.Contains(names, SeqAttr) &&
				strings.Contains(aws.ToString(in.ConditionExpression), "attribute_not_exists(")
		}
		l := New(b, "leases", Options{InstanceID: "a"})
		held := acquire(t, l, taskReq("h"))
		w := New(b, "leases", Options{InstanceID: "w"})
		b.mu.Lock()
		b.id = "w.1" // the waiter's lease id: w's first
		b.mu.Unlock()
		r := taskReq("q")
		r.Wait = 5 * time.Minute
		type acquired struct {
			ls  *Lease
			err error
		}
		got := make(chan acquired, 1)
		var wg sync.WaitGroup
		wg.Go(func() {
			ls, err := w.Acquire(ctx, r)
			got <- acquired{ls, err}
		})
		time.Sleep(time.Second) // it joins (the store 5 ms away: not synctest.Wait, which its requests' way would end)
		if itemView(t, b, "srv").ticketFor("w.1") == nil {
			t.Fatal("the waiter did not join")
		}
		enqueue(t, l, taskReq("r"), "task-2") // another principal waits, after it: its take is conditioned on freed
		stop := make(chan struct{})
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				_ = b.move(ctx)
			}
		})
		begin := time.Now()
		release(t, held)
		var a acquired
		select {
		case a = <-got:
		case <-time.After(time.Minute):
			a.err = errors.New("still waiting a minute after the release")
		}
		close(stop)
		wg.Wait()
		ls, err := a.ls, a.err
		b.mu.Lock()
		takes := len(b.takes)
		b.mu.Unlock()
		t.Logf("waiter: %v, %v after %v; %d takes, %d writes, %d reads", ls != nil, err, time.Since(begin), takes, w.Stats().Writes, w.Stats().Reads)
		if err != nil || ls == nil {
			t.Fatalf("waiter: %v", err)
		}
		release(t, ls)
	})
}

// startedBehind: a held place, task-1 (q) and task-2 (r, another
// principal: a claim's take is conditioned on freed) queued behind it; the
// place's release marks task-1's start. It returns task-1's ticket and
// that start.
func startedBehind(t *testing.T, l *Limiter, st *starts, deadline time.Time) (string, TaskStart) {
	t.Helper()
	held := acquire(t, l, taskReq("h"))
	id, err := l.Enqueue(context.Background(), taskReq("q"), "", "task-1", deadline)
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, l, taskReq("r"), "task-2")
	release(t, held)
	got := st.list()
	if len(got) != 1 || got[0].Ticket != id {
		t.Fatalf("starts %+v; want one of %s", got, id)
	}
	return id, got[0]
}

// churnedTask is startedBehind on limiter "a" over a takeStore refusing
// refuse of the task's takes (-1: all): the store, the limiter, its
// starts, and task-1's ticket and start.
func churnedTask(t *testing.T, refuse int64, deadline time.Time) (*takeStore, *Limiter, *starts, string, TaskStart) {
	t.Helper()
	db := newTakeStore(newMemStore(), refuse)
	st := &starts{}
	l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
	id, start := startedBehind(t, l, st, deadline)
	db.id.Store(id)
	return db, l, st, id, start
}

// marksOf is the marks of ticket id's starts so far.
func (s *starts) marksOf(id string) (marks []int64) {
	for _, ts := range s.list() {
		if ts.Ticket == id {
			marks = append(marks, ts.Mark)
		}
	}
	return marks
}

// A claim making its take again ends at the task's withdrawal (the
// gateway's Cancel withdraws the ticket) with ErrNoTicket, after at most
// one take more, and at the task's deadline, also with ErrNoTicket.
func TestAClaimMakingItsTakeAgainEndsAtWithdrawalAndDeadline(t *testing.T) {
	for _, c := range []string{"withdrawn", "deadline"} {
		t.Run(c, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				deadline := time.Now().Add(time.Hour)
				if c == "deadline" {
					deadline = time.Now().Add(8 * time.Second) // within StartTimeout of its start
				}
				db, l, _, id, start := churnedTask(t, -1, deadline)
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
				defer cancel()
				w := New(db, "leases", Options{InstanceID: "w"})
				var ls *Lease
				var cerr error
				done := make(chan struct{})
				begin := time.Now()
				go func() {
					defer close(done)
					ls, cerr = w.Claim(ctx, taskReq("q"), id, start.Mark)
				}()
				var before int64
				if c == "withdrawn" {
					time.Sleep(5 * time.Second) // within StartTimeout of its start
					before = db.takes.Load()
					if err := l.Withdraw(context.Background(), "srv", id, "task-1"); err != nil {
						t.Fatalf("withdraw while the claim makes its takes: %v", err)
					}
				}
				<-done
				t.Logf("%s: claim %v, %v after %v; %d takes, %d after the withdrawal", c, ls, cerr, time.Since(begin), db.takes.Load(), db.takes.Load()-before)
				if ls != nil || !errors.Is(cerr, ErrNoTicket) {
					t.Fatalf("claim: %v, %v; want ErrNoTicket", ls, cerr)
				}
				if c == "withdrawn" && db.takes.Load()-before > 1 {
					t.Errorf("%d takes after the withdrawal; want one at most", db.takes.Load()-before)
				}
				if c == "deadline" && time.Since(begin) > 9*time.Second {
					t.Errorf("the claim ended %v after a deadline 8 s away", time.Since(begin))
				}
			})
		})
	}
}

// Tasks (doc.go): a start is made again for a start lost, not for a
// worker still claiming. A claim whose takes never land (endless releases
// by others) ends StartTimeout after its start (ErrStartLapsed), when the
// next start may be made from its mark: StartDue (the sweep, every 1.5 s)
// starting workers that run real claims never has more than two claims of
// the task running at once (one ending as the next begins), however long
// it goes on.
func TestWorkersDoNotPileUpOverAClaimThatCannotLand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		db := newTakeStore(newMemStore(), -1)
		var inFlight, most atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var results []error
		var st starts
		run := func(_ context.Context, ts TaskStart) {
			st.hook(ctx, ts)
			if ts.Task != "task-1" {
				return
			}
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			wg.Go(func() {
				defer inFlight.Add(-1)
				w := New(db, "leases", Options{InstanceID: "w"})
				_, err := w.Claim(ctx, taskReq("q"), ts.Ticket, ts.Mark)
				mu.Lock()
				results = append(results, err)
				mu.Unlock()
			})
		}
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: run})
		id, _ := startedBehind(t, l, &st, time.Now().Add(time.Hour))
		db.id.Store(id)
		const span = 5 * time.Minute
		for end := time.Now().Add(span); time.Now().Before(end); {
			time.Sleep(1500 * time.Millisecond)
			_ = l.StartDue(context.Background(), taskReq("s"))
		}
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		lapsed := 0
		for _, err := range results {
			if errors.Is(err, ErrStartLapsed) {
				lapsed++
			}
		}
		t.Logf("after %v: %d claims (%d at most at once), %d ended ErrStartLapsed, %d takes in all", span, len(results), most.Load(), lapsed, db.takes.Load())
		if most.Load() > 2 {
			t.Errorf("%d workers' claims ran at once for one task, none of them lost", most.Load())
		}
		if lapsed == 0 {
			t.Errorf("no claim ended with ErrStartLapsed: %v", results)
		}
	})
}
