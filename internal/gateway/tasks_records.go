package gateway

import (
	"context"
	"encoding/json"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// The records of MCP tasks and the engine that runs gateway tasks, as the
// gateway uses them: the front (tasks.go) reads records, creates those of
// relayed tasks, and asks the engine to create, cancel and give input to
// the tasks it runs.

// TaskStore keeps task records (a *tasks.Store): one consistent read per
// Get, which answers tasks.ErrNotFound for an unknown or expired task.
type TaskStore interface {
	Create(ctx context.Context, r *tasks.Record) error
	Get(ctx context.Context, id string) (*tasks.Record, error)
}

var _ TaskStore = (*tasks.Store)(nil)

// TaskEngine makes, cancels and feeds the tasks the gateway runs itself.
type TaskEngine interface {
	// Create makes a gateway task for a checked call (the caller allowed,
	// the tool seen and its arguments valid: the front has done what a
	// synchronous call does before admission) and returns its record once
	// it is stored (any instance's tasks/get resolves it). Admission
	// refusals that a synchronous call would get at once (queue full, rate
	// limited, breaker open, paused) come back as a *fault.Error, as they
	// do for a synchronous call.
	Create(ctx context.Context, srv *registry.Server, p *auth.Principal, params json.RawMessage, tool string, protocol string) (*tasks.Record, *fault.Error)
	// Cancel asks the task to stop: a waiting task leaves the queue, a
	// running one is cut off (its slot held until its upstream stopped).
	// It returns the record as it is after.
	Cancel(ctx context.Context, r *tasks.Record) (*tasks.Record, error)
	// Update brings input responses to a task in input_required: its next
	// round is queued.
	Update(ctx context.Context, r *tasks.Record, inputResponses json.RawMessage, requestState string) (*tasks.Record, error)
}
