package lease

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// lapseRaceStore is the store as one worker's limiter sees it: before
// the first of its reads at or past at (Unix ms), before lands — another
// process's write made between the worker's last look and that read.
type lapseRaceStore struct {
	API
	at     int64
	before func()
	done   atomic.Bool
}

func (s *lapseRaceStore) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if time.Now().UnixMilli() >= s.at && s.done.CompareAndSwap(false, true) {
		s.before()
	}
	return s.API.GetItem(ctx, in, opts...)
}

// Tasks (doc.go): a worker that came ends its task's run of unclaimed
// starts: it gives its start back when still the ticket's, or a start
// made since in the same run that is (passTurn), so that the next start
// is a first and the task is not passed for starts no worker came for.
//
// The worker looks for its start's lapse only at its own reads, a
// back-off apart; anyone seeing the turn StartTimeout after the mark
// makes the next start meanwhile (StartDue's sweep here, as well a
// release or a take's startDue: the very writes that refuse the claim),
// keeping f, and starts task-2 behind the task passed. The worker then
// finds its start no longer the ticket's: it gives that start back, the
// task is started afresh, and task-2's worker finds it is not its turn.
func TestAClaimRefusedUntilAnotherStartsItsTaskEndsItsUnclaimedStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		db, _, st, id, first := churnedTask(t, -1, time.Now().Add(time.Hour))
		sweep := New(db, "leases", Options{InstanceID: "b", OnTaskStart: st.hook})
		ws := &lapseRaceStore{API: db, at: first.Mark + StartTimeout.Milliseconds()}
		ws.before = func() {
			if err := sweep.StartDue(ctx, taskReq("s")); err != nil {
				t.Errorf("the sweep: %v", err)
			}
		}
		w := New(ws, "leases", Options{InstanceID: "w"})
		_, err := w.Claim(ctx, taskReq("q"), id, first.Mark)
		if !errors.Is(err, ErrStartLapsed) {
			t.Fatalf("a claim refused on others' writes for StartTimeout: %v; want ErrStartLapsed", err)
		}
		if !ws.done.Load() {
			t.Fatal("the worker made no read past its start's StartTimeout")
		}
		tk := mRead(rawItem(t, db, "srv")).tickets[id]
		if tk == nil {
			t.Fatal("task-1's ticket is gone")
		}
		var task2 string
		for _, ts := range st.list() {
			if ts.Task == "task-2" {
				task2 = ts.Ticket
			}
		}
		t.Logf("after the claim (%v): task-1's ticket s=%d f=%d (the worker's mark %d); task-1's starts %v; task-2 started: %v", err, tk.s, tk.f, first.Mark, st.marksOf(id), task2 != "")
		if tk.s != 0 && tk.unclaimedSince() != tk.s {
			t.Errorf("task-1's worker came and was refused until its start lapsed, yet its next start reads as unclaimed since the worker's mark %d (f), not as a first (s=%d): callers behind pass it", tk.unclaimedSince(), tk.s)
		}
		if task2 == "" {
			return
		}
		var mark int64
		for _, ts := range st.list() {
			if ts.Ticket == task2 {
				mark = ts.Mark
			}
		}
		db.refuse.Store(0) // the churn stops: nothing refuses task-2's take
		ls, err := New(db, "leases", Options{InstanceID: "w2"}).Claim(ctx, taskReq("r"), task2, mark)
		if err == nil {
			t.Errorf("task-2's worker took the one place ahead of task-1, whose worker came and whose next start is %d ms old", time.Now().UnixMilli()-tk.s)
			release(t, ls)
		} else {
			t.Logf("task-2's claim: %v", err)
		}
	})
}

// setTicketField writes tickets.<id>.<field> = v by hand.
func setTicketField(t *testing.T, db API, key, id, field string, v types.AttributeValue) {
	t.Helper()
	_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(rgTable), Key: itemKey(key), UpdateExpression: aws.String("SET #t.#i.#f = :v"),
		ExpressionAttributeNames:  map[string]string{"#t": TicketsAttr, "#i": id, "#f": field},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": v},
	})
	if err != nil {
		t.Fatalf("set tickets.%s.%s: %v", id, field, err)
	}
}

// Invariant 4 (doc.go): "lapsed entries never wedge a key ..., nor do
// malformed ones"; Tasks: "while its starts have gone unclaimed that long
// since the first (f), however often made again, callers behind pass the
// ticket ...: a task no worker comes for holds back no task behind it".
//
// A mark or first written by hand as a whole number no start makes
// (negative) is not malformed to Repair (only one not whole is); it reads
// as no start (s) or as no first (f), so the next start is made over it,
// and the task, whose workers never claim (as in
// TestTasksBehindATaskWhoseWorkersNeverClaimAreServed), is passed
// StartTimeout after its first start. Were such a value carried over as
// f by every start made again, the task would never be passed and would
// hold back the one free place for good. Rows: s = -1 written before the
// task's first start; f = -1 written after it.
func TestAWholeStartMarkWrittenByHandDoesNotKeepATaskFromBeingPassed(t *testing.T) {
	type edit struct {
		field  string
		before bool // written before the task's first start
		value  func(now int64) int64
	}
	for name, e := range map[string]edit{
		"s -1 before its first start": {field: ticketStarted, before: true, value: func(int64) int64 { return -1 }},
		"f -1 after its first start":  {field: ticketFirst, value: func(int64) int64 { return -1 }},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db := newMemStore()
				var st starts
				l := New(db, rgTable, Options{InstanceID: "a", OnTaskStart: st.hook})
				req := func(who string) Request {
					return Request{Key: "srv", Cap: 1, Hold: 10 * time.Second, Holder: who, MaxQueued: 40, Wait: 2 * time.Minute}
				}
				h := acquire(t, l, req("h"))
				id := enqueue(t, l, req("q"), "task-0")
				write := func() {
					setTicketField(t, db, "srv", id, e.field, number(e.value(time.Now().UnixMilli())))
				}
				if e.before {
					write()
				}
				start := time.Now()
				got := callThrough(t, New(db, rgTable, Options{InstanceID: "c", OnTaskStart: st.hook}), req("c"))
				synctest.Wait()
				release(t, h)
				synctest.Wait()
				if !e.before {
					write()
				}
				err := <-got
				tk := mRead(rawItem(t, db, "srv")).tickets[id]
				t.Logf("C behind task-0: %v after %v; task-0 started %d times; its ticket %+v", err, time.Since(start), len(st.marksOf(id)), tk)
				if err != nil {
					t.Errorf("C behind a task whose workers never claim, its %s written by hand: %v after %v; want served once the task is passed", e.field, err, time.Since(start))
				}
			})
		})
	}
}

// Tasks (doc.go): callers behind pass the ticket only while its starts
// have gone unclaimed StartTimeout since the first (f); a worker's
// give-back (passTurn) or claim ends that run of starts, so the next
// start is a first; the f of an older instance's mark reads "absent: s".
// Open, skipped unless LEASE_OPEN_DEFECTS is set (docs/tasks.md, known
// limits: a rolling deploy).
//
// During a rolling deploy an instance built before f writes marks as it
// always did: its give-back (passTurn, on ErrNotYourTurn or an invocation
// out of time) and its claim's take REMOVE s alone, and its markStart
// SETs s alone. A give-back of an older worker after a new instance's
// start leaves the new start's f behind; the older instance's next start
// then carries that stale f, and the task reads as unclaimed since the
// start before the give-back. Here: a new instance marks task-1 at F
// (s = f = F); at F+5 s an older worker gives its start back (REMOVE s if
// s = F) and an older instance starts it again (SET s = F+5 s); at F+10 s
// (5 s after the first start since the give-back) a caller C behind it,
// on a new instance, passes task-1 (its take conditioned on f = F and s
// there, both as written) and takes the one place.
func TestAStaleFirstLeftByAnOlderInstancesGiveBackDoesNotPassAFreshStart(t *testing.T) {
	openDefect(t)
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		var st starts
		l := New(db, rgTable, Options{InstanceID: "a", OnTaskStart: st.hook})
		req := func(who string) Request {
			return Request{Key: "srv", Cap: 1, Hold: 10 * time.Second, Holder: who, MaxQueued: 40}
		}
		h := acquire(t, l, req("h"))
		id := enqueue(t, l, req("q"), "task-1")
		release(t, h)
		marks := st.marksOf(id)
		if len(marks) != 1 {
			t.Fatalf("task-1's starts %v; want one", marks)
		}
		first := marks[0]
		time.Sleep(5 * time.Second)
		// The older worker's give-back, then the older instance's start, as
		// their code writes them.
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(rgTable), Key: itemKey("srv"), UpdateExpression: aws.String("REMOVE #t.#i.#s"),
			ConditionExpression:       aws.String("#t.#i.#s = :m"),
			ExpressionAttributeNames:  map[string]string{"#t": TicketsAttr, "#i": id, "#s": ticketStarted},
			ExpressionAttributeValues: map[string]types.AttributeValue{":m": number(first)},
		})
		if err != nil {
			t.Fatalf("the older worker's give-back: %v", err)
		}
		again := time.Now().UnixMilli()
		_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(rgTable), Key: itemKey("srv"), UpdateExpression: aws.String("SET #t.#i.#s = :now"),
			ConditionExpression:       aws.String("attribute_not_exists(#t.#i.#s)"),
			ExpressionAttributeNames:  map[string]string{"#t": TicketsAttr, "#i": id, "#s": ticketStarted},
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": number(again)},
		})
		if err != nil {
			t.Fatalf("the older instance's start: %v", err)
		}
		time.Sleep(time.Duration(first+StartTimeout.Milliseconds()-time.Now().UnixMilli()) * time.Millisecond)
		c := req("c")
		c.Wait = 2 * time.Second
		ls, err := New(db, rgTable, Options{InstanceID: "c"}).Acquire(ctx, c)
		tk := mRead(rawItem(t, db, "srv")).tickets[id]
		t.Logf("C at F+%v: %v; task-1's ticket s=%d f=%d (F=%d, its start after the give-back %d)", time.Duration(time.Now().UnixMilli()-first)*time.Millisecond, err, tk.s, tk.f, first, again)
		if err == nil {
			t.Errorf("C passed task-1 and took the one place %v after task-1's first start since its worker gave the last back", time.Duration(time.Now().UnixMilli()-again)*time.Millisecond)
			release(t, ls)
		}
	})
}

// Tasks (doc.go): "the tasks whose turn that passing brings are started
// beside it"; a take passes at most maxPurge tasks (each a condition of
// it), and so does the start of due tasks: a task behind more such tasks
// is not started (its worker would be turned away, give its start back
// and start the next at once, without end), and waits for one of them to
// be claimed, given back or to lapse (docs/tasks.md, known limit).
//
// Cap 1, n tasks whose workers never come (a missing permission: every
// task of the key alike, say) before task-X, whose worker does come.
// Each is passed StartTimeout after its first start and the next started.
// With maxPurge of them, task-X is started and served; with one more, it
// is never started, nor turned away over and over.
func TestATaskBehindTasksPassedIsStartedWithinTheBound(t *testing.T) {
	for _, n := range []int{maxPurge, maxPurge + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			served, starts, turnedAway := tasksBehindPassed(t, n)
			if n <= maxPurge && !served {
				t.Errorf("task-X, whose worker comes, behind %d tasks no worker comes for (at most maxPurge %d), not served", n, maxPurge)
			}
			if n > maxPurge && (served || starts != 0) {
				t.Errorf("task-X behind %d tasks passed, more than maxPurge %d: served %v, started %d times; want neither (a take passes maxPurge)", n, maxPurge, served, starts)
			}
			if turnedAway > 1 {
				t.Errorf("task-X's workers turned away %d times: started again and again", turnedAway)
			}
		})
	}
}

// tasksBehindPassed runs the scenario above with n tasks ahead of task-X:
// whether task-X was served, how often started, and how often its worker
// was turned away (ErrNotYourTurn).
func tasksBehindPassed(t *testing.T, n int) (bool, int, int64) {
	var served1 atomic.Bool
	var startsX int
	var notYourTurn atomic.Int64
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req := func(who string) Request {
			return Request{Key: "srv", Cap: 1, Hold: 10 * time.Second, Holder: who, MaxQueued: 64}
		}
		var st starts
		var claims atomic.Int64
		var firstX, lastX atomic.Int64
		served := make(chan struct{})
		var hook func(context.Context, TaskStart)
		hook = func(_ context.Context, ts TaskStart) {
			st.hook(ctx, ts)
			if ts.Task != "task-X" || claims.Add(1) > 100 {
				return // the others' workers never come
			}
			firstX.CompareAndSwap(0, time.Now().UnixMilli())
			lastX.Store(time.Now().UnixMilli())
			go func() {
				w := New(db, rgTable, Options{InstanceID: "w", OnTaskStart: hook})
				ls, err := w.Claim(ctx, req("x"), ts.Ticket, ts.Mark)
				switch {
				case err == nil:
					if served1.CompareAndSwap(false, true) {
						close(served)
					}
					release(t, ls)
				case errors.Is(err, ErrNotYourTurn):
					notYourTurn.Add(1)
				}
			}()
		}
		l := New(db, rgTable, Options{InstanceID: "a", OnTaskStart: hook})
		h := acquire(t, l, req("h"))
		for i := range n {
			enqueue(t, l, req("q"), fmt.Sprintf("task-%d", i))
		}
		x := enqueue(t, l, req("x"), "task-X")
		begin := time.Now()
		release(t, h)
		// The schedule's StartDue, every 1.5 s.
		for end := begin.Add(time.Duration(n+3) * StartTimeout); time.Now().Before(end) && !served1.Load(); {
			time.Sleep(1500 * time.Millisecond)
			_ = l.StartDue(ctx, req("s"))
			synctest.Wait()
		}
		t.Logf("after %v: task-X served %v; %d starts of task-X (first %v after the release, the last %d ms after it), %d claims ErrNotYourTurn; %d starts in all",
			time.Since(begin), served1.Load(), len(st.marksOf(x)), time.Duration(firstX.Load()-begin.UnixMilli())*time.Millisecond, lastX.Load()-firstX.Load(), notYourTurn.Load(), len(st.list()))
		startsX = len(st.marksOf(x))
		cancel()
	})
	return served1.Load(), startsX, notYourTurn.Load()
}

// Describe (mcpgate status, the console) tells whose turn it is as the
// callers and the start of due tasks judge it: a task whose starts have
// gone unclaimed StartTimeout since the first is passed, and the task
// behind it has the turn.
func TestDescribeShowsATaskPassed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, rgTable, Options{InstanceID: "a", OnTaskStart: st.hook})
		req := func(who string) Request {
			return Request{Key: "srv", Cap: 1, Hold: 10 * time.Second, Holder: who, MaxQueued: 8}
		}
		h := acquire(t, l, req("h"))
		t0 := enqueue(t, l, req("q"), "task-0")
		t1 := enqueue(t, l, req("r"), "task-1")
		release(t, h) // task-0 started; its workers never claim
		state := func() map[string]TicketStatus {
			out := map[string]TicketStatus{}
			for _, ts := range Describe(rawItem(t, db, "srv"), time.Now(), 1, 0, nil).Queue {
				out[ts.ID] = ts
			}
			return out
		}
		time.Sleep(StartTimeout / 2)
		if s := state(); !s[t0].Turn || s[t0].Passed || s[t1].Turn || s[t1].Passed {
			t.Errorf("%v after the start: task-0 %+v, task-1 %+v; want task-0's turn, nobody passed", StartTimeout/2, s[t0], s[t1])
		}
		time.Sleep(StartTimeout)
		if err := l.StartDue(context.Background(), req("s")); err != nil {
			t.Fatal(err)
		}
		if s := state(); s[t0].Turn || !s[t0].Passed || !s[t1].Turn || s[t1].Passed {
			t.Errorf("task-0's start unclaimed %v, started again: task-0 %+v, task-1 %+v; want task-0 passed, task-1's turn", StartTimeout*3/2, s[t0], s[t1])
		}
	})
}
