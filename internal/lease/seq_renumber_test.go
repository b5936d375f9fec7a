package lease

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// exprMeter records the longest update and condition expression written.
type exprMeter struct {
	API
	update, cond atomic.Int64
}

func (m *exprMeter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, e := range []struct {
		s   *string
		max *atomic.Int64
	}{{in.UpdateExpression, &m.update}, {in.ConditionExpression, &m.cond}} {
		if n := int64(len(aws.ToString(e.s))); n > e.max.Load() {
			e.max.Store(n)
		}
	}
	return m.API.UpdateItem(ctx, in, opts...)
}

// topTickets writes by hand tickets ids numbered ns (label "q", all in
// its waiting set), ticket "x" numbered maxNumber − 2, and seq 5: one past
// the tickets is maxNumber − 1, so a repair renumbers tickets at the top.
func topTickets(t *testing.T, db API, table string, ids []string, ns []int64) {
	t.Helper()
	deadline := time.Now().Add(time.Hour).UnixMilli()
	info := mv(map[string]types.AttributeValue{ticketLabel: sv("q"), ticketDeadline: number(deadline)})
	edits := []edit{at(emptyMap(), QueueAttr), at(emptyMap(), TicketsAttr), at(emptyMap(), TasksAttr), at(emptyMap(), LeasesAttr)}
	for i, id := range ids {
		edits = append(edits, at(number(ns[i]), QueueAttr, id), at(info, TicketsAttr, id))
	}
	edits = append(edits,
		at(number(maxNumber-2), QueueAttr, "x"), at(info, TicketsAttr, "x"),
		at(&types.AttributeValueMemberSS{Value: append(slices.Clone(ids), "x")}, WaitingAttr("q")),
		at(number(5), SeqAttr))
	applyEdits(t, db, table, edits)
}

// Invariant 4 (doc.go, Repair) and DynamoDB's limits: an expression
// string is at most 4 KB. A queue of MaxQueued callers (up to 1000, and as
// many tasks) behind a ticket numbered at the top by hand is renumbered
// by one repair, which names every ticket twice (its condition and its
// SET): past a couple of hundred tickets DynamoDB refuses it as invalid,
// every time, and every caller on the key fails over the repair.
func TestARenumberingRepairStaysWithinDynamoDBsExpressionLimits(t *testing.T) {
	onBothStores(t, func(t *testing.T, api API, table string) {
		renumberWithinLimits(t, api, table)
	})
}

func renumberWithinLimits(t *testing.T, api API, table string) {
	db := &exprMeter{API: api}
	var ids []string
	var ns []int64
	for i := range 300 {
		ids, ns = append(ids, fmt.Sprintf("w%04d", i)), append(ns, int64(10+i))
	}
	topTickets(t, db, table, ids, ns)
	db.update.Store(0)
	db.cond.Store(0)
	ctx := context.Background()
	l := New(db, table, Options{InstanceID: "a"})
	v, err := l.read(ctx, "srv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.mend(ctx, "srv", v); err != nil {
		t.Fatal(err)
	}
	const limit = 4096
	if u, c := db.update.Load(), db.cond.Load(); u > limit || c > limit {
		t.Errorf("longest update expression %d bytes, condition expression %d bytes, renumbering %d tickets; DynamoDB allows %d", u, c, len(ids)+1, limit)
	}
	item := rgItem(t, db, table, "srv")
	if seq := numberOr(item[SeqAttr], -1); seq < 0 || seq >= maxNumber-1 {
		t.Errorf("seq %d after the repair; want it whole", seq)
	}
	q := item[QueueAttr].(*types.AttributeValueMemberM).Value
	if last, x := numberOr(q[ids[len(ids)-1]], -1), numberOr(q["x"], -1); x <= last || x >= maxNumber-2 {
		t.Errorf("ticket x numbered %d after the repair, the last before it %d; want it after, whole", x, last)
	}
}

// Invariant 2 (doc.go, Order): tickets numbered alike take their turns
// in the order of their ids (turn.go). A renumbering must keep that order,
// but numbers them in the order the view's queue holds them, which for
// tickets numbered alike is the item's map order: a tied ticket can
// come to stand before one whose turn came first.
func TestARenumberingKeepsTheTurnsOfTicketsNumberedAlike(t *testing.T) {
	db := newMemStore()
	var ids []string
	var ns []int64
	for i := range 12 {
		ids, ns = append(ids, fmt.Sprintf("t%02d", i)), append(ns, maxNumber-3)
	}
	topTickets(t, db, rgTable, ids, ns)
	ctx := context.Background()
	l := New(db, rgTable, Options{InstanceID: "a"})
	v, err := l.read(ctx, "srv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.mend(ctx, "srv", v); err != nil {
		t.Fatal(err)
	}
	q := rgItem(t, db, rgTable, "srv")[QueueAttr].(*types.AttributeValueMemberM).Value
	var got []int64
	for _, id := range ids {
		got = append(got, numberOr(q[id], -1))
	}
	if !slices.IsSorted(got) {
		t.Errorf("numbers of tickets %v (tied at maxNumber − 3, in turn order) after the renumbering: %v; want them rising", ids, got)
	}
}
