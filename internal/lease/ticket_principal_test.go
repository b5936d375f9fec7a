package lease

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// A ticket names its principal once, by the waiting set that holds it:
// its body carries no copy (a fifth of a task's ticket, written with
// every write to the item). A ticket written with its own p, as tickets
// were before, is whole when p names the same principal, and a half to
// be repaired when it names another.
func TestATicketsPrincipalIsTheWaitingSetHoldingIt(t *testing.T) {
	env := storetest.NewEnv(t)
	ctx := context.Background()
	var st starts
	l := New(env.Client, env.Tables.Leases, Options{OnTaskStart: st.hook})
	held := acquire(t, l, taskReq("h")) // cap 1: the task waits
	defer release(t, held)
	id, err := l.Enqueue(ctx, taskReq("q"), "", "task-1", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	body := func() map[string]types.AttributeValue {
		tickets, _ := item(t, env, "srv")[TicketsAttr].(*types.AttributeValueMemberM)
		if tickets == nil {
			t.Fatal("no tickets")
		}
		b, _ := tickets.Value[id].(*types.AttributeValueMemberM)
		if b == nil {
			t.Fatalf("no ticket %s", id)
		}
		return b.Value
	}
	if p, ok := body()[ticketLabel]; ok {
		t.Errorf("the ticket's body names its principal again: %v", p)
	}
	if tk := parseItem(item(t, env, "srv")).ticketFor(id); tk == nil || tk.label != "q" {
		t.Fatalf("the ticket is not read as q's: %+v", tk)
	}
	for _, c := range []struct {
		p     string
		whole bool
	}{{"q", true}, {"z", false}} {
		u := newUpdate()
		u.set(u.path(TicketsAttr, id)+"."+u.path(ticketLabel), u.value(&types.AttributeValueMemberS{Value: c.p}))
		if _, err := l.write(ctx, "srv", u, nil); err != nil {
			t.Fatal(err)
		}
		v := parseItem(item(t, env, "srv"))
		if tk := v.ticketFor(id); (tk != nil && tk.label == "q") != c.whole || (len(v.halves) == 0) != c.whole {
			t.Errorf("a ticket of q's naming p %q: read as %+v, halves %v; whole: want %v", c.p, tk, v.halves, c.whole)
		}
	}
}
