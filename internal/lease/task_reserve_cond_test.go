package lease

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// Invariant 7, the join's reserve condition against the item as the store
// holds it rather than as the joiner saw it: a principal whose waiting set
// the joiner's view shows as claimed tickets alone may take the last
// places only if, when its join lands, the set is still those tickets
// (its size), each still in it (contains) and each claim's lease still
// live at the joiner's now. Each test below has a join made from a view
// that one of those has since stopped matching, and a caller of the
// principal waiting meanwhile (or its claim gone): the join must be
// refused queue_full, not land in the reserve. (The fault simulation
// reaches these cases too seldom to catch a condition missing one part.)
func TestAReserveJoinFromAStaleViewOfRunningTasks(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, db API, table string)
	}{
		{"a caller of the principal joined since (the set's size)", staleViewNewWaiter},
		{"the claimed ticket purged past its deadline, a caller joined since (contains)", staleViewTicketPurged},
		{"the claim's lease purged on a faster clock (the lease)", staleViewLeasePurged},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Run("memStore", func(t *testing.T) { c.run(t, newMemStore(), "leases") })
			t.Run("dynalite", func(t *testing.T) {
				env := storetest.NewEnv(t)
				c.run(t, env.Client, env.Tables.Leases)
			})
		})
	}
}

// handClock is a wall clock moved by hand (no waiting, so the same on
// dynalite as in memory), skewed for each instance.
type handClock struct{ off atomic.Int64 }

func (c *handClock) skewed(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(time.Duration(c.off.Load()) + d) }
}

func (c *handClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// staleJoinSetup has p's task enqueued (with taskDeadline) and claimed by
// a worker, and callers of others waiting in the callers' queue
// (MaxQueued 4, a reserve of 1); it returns the limiters of the enqueuer
// (l) and of a joiner j whose clock is behind l's by skew (within the
// margin), and the view j has of the item then.
func staleJoinSetup(t *testing.T, db API, table string, clk *handClock, skew, taskDeadline time.Duration, others ...string) (l, j *Limiter, v0 *view) {
	t.Helper()
	ctx := context.Background()
	var st starts
	l = New(db, table, Options{InstanceID: "a", OnTaskStart: st.hook, Clock: clk.skewed(0)})
	id, err := l.Enqueue(ctx, taskReq("p"), "", "task-p1", time.Now().Add(taskDeadline))
	if err != nil {
		t.Fatal(err)
	}
	w := New(db, table, Options{InstanceID: "w", Clock: clk.skewed(0)})
	if _, err := w.Claim(ctx, taskReq("p"), id, st.list()[0].Mark); err != nil {
		t.Fatal(err) // its worker runs past the end of the test
	}
	for _, who := range others {
		queuedAttempt(t, l, callerReq(who))
	}
	j = New(db, table, Options{InstanceID: "j", Clock: clk.skewed(-skew)})
	if v0, err = j.read(ctx, "srv"); err != nil {
		t.Fatal(err)
	}
	if ts, ok := v0.notWaiting("p", j.clock().UnixMilli()); !ok || len(ts) != 1 || ts[0].id != id {
		t.Fatalf("j's view: p's tickets %v, %v; want its task's alone, claimed", ts, ok)
	}
	return l, j, v0
}

func callerReq(who string) Request {
	r := taskReq(who)
	r.Wait = time.Hour
	return r
}

// joinFrom makes p's caller's join through j from the view v0, and
// requires it refused queue_full with the callers' queue left at want.
func joinFrom(t *testing.T, db API, table string, j *Limiter, v0 *view, want int) {
	t.Helper()
	r := callerReq("p")
	a := &attempt{l: j, req: r, b: j.board(r.Key), start: time.Now()}
	a.me = asker{id: j.newLeaseID(), label: "p"}
	_, err := a.join(context.Background(), v0)
	item := rawItemOf(t, db, table)
	if fe := (*FullError)(nil); !errors.As(err, &fe) || fe.Reason != QueueFull {
		t.Errorf("p's caller joining from a view of p's task running, p having a ticket waiting now: %v; want the queue full", err)
	}
	if n := rgMapLen(item, QueueAttr); n != want {
		t.Errorf("callers' queue after the join: %d; want %d (the last place is the reserve's)", n, want)
	}
}

func rawItemOf(t *testing.T, db API, table string) map[string]types.AttributeValue {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: itemKey("srv"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// The set's size: p's caller joined (place 3 of 4, p having nothing
// waiting then) after j's view; j's join of another caller of p names
// the claimed ticket alone.
func staleViewNewWaiter(t *testing.T, db API, table string) {
	clk := &handClock{}
	l, j, v0 := staleJoinSetup(t, db, table, clk, 0, time.Hour, "r", "s")
	queuedAttempt(t, l, callerReq("p"))
	joinFrom(t, db, table, j, v0, 3)
}

// Contains: p's task's ticket passes its deadline while its claim runs
// and a purger whose clock is ahead of j's (by less than the margin)
// removes it; p's caller joins; j, still seeing the ticket live and
// claimed, names it — the set is as large as it saw, but not the same.
func staleViewTicketPurged(t *testing.T, db API, table string) {
	ctx := context.Background()
	clk := &handClock{}
	// The ticket lives to +5 s + the margin (2 s), the claim's lease to
	// +10 s + 2 s; j's clock is 1.5 s behind.
	l, j, v0 := staleJoinSetup(t, db, table, clk, 1500*time.Millisecond, 5*time.Second, "r", "s")
	clk.advance(8 * time.Second)
	v, err := l.read(ctx, "srv")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.purgeAll(ctx, "srv", v); err != nil || !ok {
		t.Fatalf("purge: %v, %v", ok, err)
	}
	queuedAttempt(t, l, callerReq("p"))
	joinFrom(t, db, table, j, v0, 3)
}

// The lease: p's task's claim lapses on a clock ahead of j's (by less
// than the margin), whose purge removes its lease: the ticket waits
// again. j, still seeing the claim live, names it.
func staleViewLeasePurged(t *testing.T, db API, table string) {
	ctx := context.Background()
	clk := &handClock{}
	l, j, v0 := staleJoinSetup(t, db, table, clk, 1500*time.Millisecond, time.Hour, "r", "s", "u")
	clk.advance(13 * time.Second) // the lease's expiry, +12 s, passed on l's clock, not on j's
	v, err := l.read(ctx, "srv")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.purgeAll(ctx, "srv", v); err != nil || !ok {
		t.Fatalf("purge: %v, %v", ok, err)
	}
	joinFrom(t, db, table, j, v0, 3)
}

// A principal whose waiting set holds more tickets than a join's condition
// names (maxNamed), all of them claimed, is held to the reserve as one
// with a ticket waiting (doc.go, Tasks); with maxNamed of them it is not.
func TestAPrincipalWithMoreRunningTasksThanNamedIsHeldToTheReserve(t *testing.T) {
	for _, running := range []int{maxNamed, maxNamed + 1} {
		t.Run(strconv.Itoa(running), func(t *testing.T) {
			ctx := context.Background()
			db := newMemStore()
			var st starts
			l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
			w := New(db, "leases", Options{InstanceID: "w"})
			req := taskReq("p")
			req.Cap = running
			for i := range running {
				id := enqueue(t, l, req, "task-p"+strconv.Itoa(i))
				var mark int64
				for _, s := range st.list() {
					if s.Ticket == id {
						mark = s.Mark
					}
				}
				if _, err := w.Claim(ctx, req, id, mark); err != nil {
					t.Fatalf("claim %d: %v", i, err)
				}
			}
			// MaxQueued 4, a reserve of 1: three callers of others wait.
			for _, who := range []string{"r", "s", "u"} {
				queuedAttempt(t, l, callerReq(who))
			}
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			if n := len(v.sets[WaitingAttr("p")]); n != running {
				t.Fatalf("p's waiting set: %d members; want its %d claimed tickets", n, running)
			}
			r := callerReq("p")
			r.Cap = running
			a := &attempt{l: l, req: r, b: l.board(r.Key), start: time.Now()}
			a.me = asker{id: l.newLeaseID(), label: "p"}
			_, err = a.join(ctx, v)
			fe := (*FullError)(nil)
			switch full := errors.As(err, &fe) && fe.Reason == QueueFull; {
			case running <= 8 && (err != nil || !a.joined):
				t.Errorf("p's caller, its %d tasks running, 3 of 4 places taken: %v; want it to join", running, err)
			case running > 8 && !full:
				t.Errorf("p's caller, its %d tasks running (more than a join names), 3 of 4 places taken: %v; want the queue full", running, err)
			}
		})
	}
}
