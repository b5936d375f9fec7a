package lease

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// The repair on the real store's rules (dynalite) as on the simulation's:
// a map, sets, a gate and counts written by hand as other types at once
// are put right by the first caller's one write, conditioned on each as
// stored (a list, a number set, NULL and BOOL on their types, an empty
// string on its value), and the
// caller then takes the place that a dead holder left.
func TestAnItemWrittenByHandIsRepairedOnDynalite(t *testing.T) {
	env := storetest.NewEnv(t)
	stores := map[string]struct {
		db    API
		table string
	}{"dynalite": {env.Client, env.Tables.Leases}, "memStore": {newMemStore(), rgTable}}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := Request{Key: "srv", Cap: 1, Hold: time.Second, Wait: 10 * time.Second, MaxQueued: 8, Holder: "p",
				Tool: "t", ToolCap: 1, Breaker: &Breaker{Name: "t", Threshold: 3, Recovery: time.Second}}
			if _, err := New(s.db, s.table, Options{InstanceID: "a"}).Acquire(ctx, r); err != nil {
				t.Fatal(err) // its holder dies: the lease lapses in a second
			}
			edits := map[string]types.AttributeValue{
				QueueAttr:          &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}}},
				TasksAttr:          &types.AttributeValueMemberS{Value: ""},
				TicketsAttr:        &types.AttributeValueMemberNULL{Value: true},
				FreedAttr:          &types.AttributeValueMemberS{Value: "3"},
				HoldAttr:           &types.AttributeValueMemberBOOL{Value: true},
				WaitingAttr("p"):   &types.AttributeValueMemberNS{Value: []string{"1"}},
				PrincipalAttr("q"): &types.AttributeValueMemberS{Value: "x"},
				PauseAttr:          &types.AttributeValueMemberN{Value: "5"},
			}
			for attr, v := range edits {
				handEditIn(t, s.db, s.table, v, attr)
			}
			time.Sleep(1500 * time.Millisecond)
			ls, err := New(s.db, s.table, Options{InstanceID: "b"}).Acquire(ctx, r)
			if err != nil {
				t.Fatalf("a caller after the holder died: %v", err)
			}
			if _, err := ls.Finish(ctx, Success); err != nil {
				t.Fatal(err)
			}
			item := rgItem(t, s.db, s.table, "srv")
			for attr := range edits {
				if got := item[attr]; got != nil && isMalformed(attr, got) {
					t.Errorf("%s is still %#v", attr, got)
				}
			}
		})
	}
}
