package tasks_test

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/mcpgate/mcpgate/internal/tasks"
)

// A writer reads the task, judges, and writes; when another write came
// first it reads again and judges again, since what it saw may no longer
// hold (here: a task cancelled meanwhile keeps its status). An outcome too
// large to keep fails the task instead, saying why.
func ExampleStore_Update() {
	var s *tasks.Store // &tasks.Store{DB: client, Table: cfg.Tables.Tasks, MaxResultBytes: cfg.MaxTaskResultBytes}
	ctx, id := context.Background(), "tsk_…"
	result := json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`)
	outcome := func(n *tasks.Record) error {
		n.Status, n.Result, n.InputRequests = tasks.StatusCompleted, result, nil
		return nil
	}
	for {
		r, err := s.Get(ctx, id)
		if err != nil {
			return // tasks.ErrNotFound: expired or gone
		}
		if tasks.Terminal(r.Status) {
			return // cancelled (or ended) meanwhile
		}
		_, err = s.Update(ctx, r, outcome)
		if errors.Is(err, tasks.ErrTooLarge) {
			msg, _ := json.Marshal(err.Error())
			outcome = func(n *tasks.Record) error {
				n.Status, n.InputRequests = tasks.StatusFailed, nil
				n.Error = json.RawMessage(`{"code":-32603,"message":` + string(msg) + `}`)
				return nil
			}
			_, err = s.Update(ctx, r, outcome)
		}
		if !errors.Is(err, tasks.ErrConflict) {
			return
		}
	}
}
