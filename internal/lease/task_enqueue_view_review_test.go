package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// itemViewIn reads srv's item in table.
func itemViewIn(t *testing.T, db API, table string) *view {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: itemKey("srv"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return parseItem(out.Item)
}

// viewedQueue leaves a limiter on api (instance "a") with a recent view of
// srv (a place held by another process, task-1 of principal q waiting):
// its next enqueue joins from that view.
func viewedQueue(t *testing.T, api API, table string) *Limiter {
	t.Helper()
	l := New(api, table, Options{InstanceID: "a"})
	other := New(api, table, Options{InstanceID: "b"})
	held := acquire(t, other, Request{Key: "srv", Cap: 1, Hold: time.Hour, Holder: "p", MaxQueued: 4})
	t.Cleanup(func() { release(t, held) })
	r := taskReq("q")
	r.MaxQueued = 16
	enqueue(t, l, r, "task-1")
	return l
}

// Repair and Tasks in doc.go: a value written by hand since the view a
// join was judged from refuses the join as invalid; the enqueue reads,
// mends and joins, as from a read.
func TestAHandEditSinceTheRecentViewDoesNotFailAnEnqueue(t *testing.T) {
	onBothStores(t, func(t *testing.T, mem API, table string) {
		l := viewedQueue(t, mem, table)
		handEditIn(t, mem, table, sv("x"), WaitingAttr("r"))
		r := taskReq("r")
		r.MaxQueued = 16
		id, err := l.Enqueue(context.Background(), r, "", "task-2", time.Now().Add(time.Hour))
		if err != nil {
			t.Fatalf("an enqueue over a set written by hand as a string since its view: %v", err)
		}
		if itemViewIn(t, mem, table).ticketFor(id) == nil {
			t.Fatalf("enqueue reported %s, not in the item", id)
		}
	})
}

// Tasks and invariant 7 in doc.go: a view showing a claim since given
// back (Unclaim: its ticket waiting again) counts the claim as taking no
// queue place; a join judged from it is refused on freed, which the give
// back moved, and MaxQueued holds.
func TestAStaleViewOfAClaimGivenBackDoesNotPassMaxQueued(t *testing.T) {
	ctx := context.Background()
	mem := newMemStore()
	var st starts
	l := New(mem, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
	w := New(mem, "leases", Options{InstanceID: "w"})
	other := New(mem, "leases", Options{InstanceID: "b"})
	x := enqueue(t, l, taskReq("q"), "task-x")
	got := st.list()
	if len(got) != 1 {
		t.Fatalf("starts %+v; want one", got)
	}
	ls, err := w.Claim(ctx, taskReq("q"), x, got[0].Mark)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"r1", "r2", "r3"} {
		enqueue(t, other, taskReq(p), "task-"+p)
	}
	if err := l.StartDue(ctx, taskReq("q")); err != nil { // l's view: x claimed, 3 waiting
		t.Fatal(err)
	}
	if err := ls.Unclaim(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = l.Enqueue(ctx, taskReq("r4"), "", "task-r4", time.Now().Add(time.Hour))
	if fe, ok := errors.AsType[*FullError](err); !ok || fe.Reason != QueueFull {
		t.Errorf("an enqueue past MaxQueued (4 waiting, x among them again): %v; want QueueFull", err)
	}
	if n := itemView(t, mem, "srv").waiting(time.Now().UnixMilli(), true); n > 4 {
		t.Errorf("%d tasks wait; MaxQueued 4", n)
	}
}
