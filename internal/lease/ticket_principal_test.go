package lease

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// A ticket's principal is the one whose waiting set holds it. Its body
// names it again (p) for instances built before tickets were read so:
// they take a ticket without p for a half and remove it. A ticket
// without p, as a later version may write, is whole; one whose p names
// another principal than its set is a half, as before.
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
	tickets, _ := item(t, env, "srv")[TicketsAttr].(*types.AttributeValueMemberM)
	if b, _ := tickets.Value[id].(*types.AttributeValueMemberM); b == nil {
		t.Fatalf("no ticket %s", id)
	} else if p, _ := b.Value[ticketLabel].(*types.AttributeValueMemberS); p == nil || p.Value != "q" {
		t.Errorf("the ticket's body does not name its principal for older instances: %v", b.Value[ticketLabel])
	}
	for _, c := range []struct {
		p     string // "": none
		whole bool
	}{{"", true}, {"q", true}, {"z", false}} {
		u := newUpdate()
		lp := u.path(TicketsAttr, id) + "." + u.path(ticketLabel)
		if c.p == "" {
			u.remove(lp)
		} else {
			u.set(lp, u.value(&types.AttributeValueMemberS{Value: c.p}))
		}
		if _, err := l.write(ctx, "srv", u, nil); err != nil {
			t.Fatal(err)
		}
		v := parseItem(item(t, env, "srv"))
		if tk := v.ticketFor(id); (tk != nil && tk.label == "q") != c.whole || (len(v.halves) == 0) != c.whole {
			t.Errorf("a ticket of q's with p %q: read as %+v, halves %v; whole: want %v", c.p, tk, v.halves, c.whole)
		}
	}
}

// prevWhole is how instances built before tickets were read by their
// waiting set read a ticket of raw: whole only when its body names its
// principal (p, a string) and the one waiting set holding it is that
// principal's. A half there is removed by the first write of such an
// instance that reads it.
func prevWhole(raw map[string]types.AttributeValue, id string) bool {
	var in []string
	for attr, a := range raw {
		if ss, ok := a.(*types.AttributeValueMemberSS); ok && strings.HasPrefix(attr, WaitingAttrPrefix) && slices.Contains(ss.Value, id) {
			in = append(in, strings.TrimPrefix(attr, WaitingAttrPrefix))
		}
	}
	tickets, _ := raw[TicketsAttr].(*types.AttributeValueMemberM)
	if tickets == nil || len(in) != 1 {
		return false
	}
	body, _ := tickets.Value[id].(*types.AttributeValueMemberM)
	if body == nil {
		return false
	}
	p, ok := body.Value[ticketLabel].(*types.AttributeValueMemberS)
	return ok && p.Value == in[0]
}

// A deploy mixes the versions for a while, and a rollback mixes them
// again (docs/admission.md, Upgrading): a caller's ticket and a task's,
// joined by this version, are whole to an older instance, which would
// otherwise remove them.
func TestATicketJoinedNowIsWholeToOlderInstances(t *testing.T) {
	env := storetest.NewEnv(t)
	ctx := context.Background()
	var st starts
	l := New(env.Client, env.Tables.Leases, Options{OnTaskStart: st.hook})
	held := acquire(t, l, taskReq("h")) // cap 1: the caller and the task wait
	r := taskReq("c")
	r.Wait = 20 * time.Second
	got := waitFor(t, l, r)
	caller := queued(t, env, "srv", 1).queue[0].id
	task, err := l.Enqueue(ctx, taskReq("q"), "", "task-1", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	raw := item(t, env, "srv")
	if v := parseItem(raw); len(v.halves) != 0 || len(v.queue) != 2 {
		t.Fatalf("this version reads halves %v, queue %d; want two whole tickets", v.halves, len(v.queue))
	}
	for _, id := range []string{caller, task} {
		if !prevWhole(raw, id) {
			t.Errorf("ticket %s, joined by this version, is a half to an older instance (which removes it)", id)
		}
	}
	release(t, held)
	if ls := <-got; ls != nil {
		release(t, ls)
	}
}
