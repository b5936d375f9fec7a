package console

import (
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
