package lease

// What closing a gate for everyone is conditioned on, on an item holding
// an entry the limiter does not write itself (a hand edit): one with none
// of the fields a condition on an entry names.

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
)

// A pause that closes everyone's entry because another principal's is
// closed, where everyone's was absent as seen, is conditioned on it being
// absent still: pinning the gate by its size and each entry's fields does
// not say so when one entry seen has none of those fields (a hand edit,
// an empty map) and it was swapped for everyone's meanwhile. Closing
// everyone's then would shorten a closing that stands.
func TestPauseClosingEveryoneNeedsEveryoneAbsentAsSeen(t *testing.T) {
	ctx := context.Background()
	const now = int64(1_000_000)
	far := now + 600_000
	db := newMemStore()
	entry := func(until int64) types.AttributeValue {
		m := map[string]types.AttributeValue{}
		if until > 0 {
			m[gateUntil] = number(until)
		}
		return &types.AttributeValueMemberM{Value: m}
	}
	item := map[string]types.AttributeValue{
		store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "srv"},
		PauseAttr: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"q": entry(0),          // no field: says nothing of itself when absent
			"r": entry(now + 5000), // another principal's, closed
		}},
	}
	db.items["srv"] = cloneItem(item)
	v := parseItem(cloneItem(item))

	// Meanwhile q goes and everyone's comes, closed far longer.
	g := db.items["srv"][PauseAttr].(*types.AttributeValueMemberM)
	delete(g.Value, "q")
	g.Value[gateAll] = entry(far)

	u := newUpdate()
	u.pause(v, PauseAttr, "p", now+30_000, now)
	_, err := New(db, rgTable, Options{InstanceID: "a"}).write(ctx, "srv", u, nil)
	if err != nil && !errors.Is(err, errCondition) {
		t.Fatal(err)
	}
	after := parseItem(cloneItem(db.items["srv"])).gates[PauseAttr].entry(gateAll).until
	if after != far {
		t.Fatalf("everyone's pause closed until %d, was %d: a closing that stood was shortened (write error %v)", after, far, err)
	}
}
