package console

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/lease"
)

// TestRowCountsTasksApart: a server's row counts the callers waiting and
// the tasks waiting apart (a task's ticket has no caller behind it), and
// neither counts a ticket that lapsed.
func TestRowCountsTasksApart(t *testing.T) {
	now := time.Now()
	l := &fleet.Limiter{Key: "reports", Waiting: []lease.TicketStatus{
		{ID: "a.1", Deadline: now.Add(time.Minute)},
		{ID: "a.T1", Deadline: now.Add(time.Hour), Task: true},
		{ID: "a.T2", Deadline: now.Add(time.Hour), Task: true},
		{ID: "a.2", Deadline: now.Add(-time.Second), Lapsed: true},
	}}
	r := rowOf(l, nil, now)
	if r.Waiting != 1 || r.Tasks != 2 {
		t.Errorf("row: %d callers and %d tasks waiting; want 1 and 2", r.Waiting, r.Tasks)
	}
}

// TestServerScreenMarksATaskPassed: the Server screen's queue marks a
// task no worker came for as passed, and the task behind it as its turn.
func TestServerScreenMarksATaskPassed(t *testing.T) {
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	d := &pageData{Page: "server", Now: now, Server: &serverView{ID: "reports", Found: true, Principals: []principalRow{{
		Principal: "k:1", Waiting: 2, Tickets: []lease.TicketStatus{
			{ID: "a.T1", Number: 1, Deadline: now.Add(time.Hour), Task: true, Passed: true},
			{ID: "a.T2", Number: 2, Deadline: now.Add(time.Hour), Task: true, Turn: true},
		}}}}}
	var b strings.Builder
	if err := pages["server"].t.ExecuteTemplate(&b, "live", d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<span class="ticket passed">#1 passed (no worker came) gives up`, `<span class="ticket turn">#2 gives up`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the Server screen without %q:\n%s", want, b.String())
		}
	}
}
