package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/lease"
)

// The function's events other than its Function URL's: a task's worker
// ({"mcpgate":"task", ...}, an asynchronous invocation of the function
// itself, made when the task's turn comes) and the schedule's sweep
// ({"mcpgate":"sweep"}).

// event is one of those events.
type event struct {
	Kind   string `json:"mcpgate"`
	Key    string `json:"key,omitempty"`
	Ticket string `json:"ticket,omitempty"`
	Task   string `json:"task,omitempty"`
	Mark   int64  `json:"mark,omitempty"`
}

const (
	eventTask  = "task"
	eventSweep = "sweep"
)

// maxEvent bounds a worker's event, in bytes.
const maxEvent = 1 << 10

// invoker starts task workers as asynchronous invocations of function.
type invoker struct {
	client   *awslambda.Client
	function string
	log      *slog.Logger
}

// start invokes the worker of ts; a failed start is logged, and left to
// the sweep (lease.StartTimeout after the start's mark).
func (iv *invoker) start(ctx context.Context, ts lease.TaskStart) {
	payload, _ := json.Marshal(event{Kind: eventTask, Key: ts.Key, Ticket: ts.Ticket, Task: ts.Task, Mark: ts.Mark})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := iv.client.Invoke(ctx, &awslambda.InvokeInput{
		FunctionName:   aws.String(iv.function),
		InvocationType: lambdatypes.InvocationTypeEvent,
		Payload:        payload,
	})
	if err != nil {
		iv.log.Warn("task worker not started; the sweep starts it again", "task", ts.Task, "server_id", ts.Key, "error", err.Error())
	}
}

// workers runs task workers as goroutines of this process (outside
// Lambda), and waits for them on shutdown.
type workers struct {
	gw  *gateway.Gateway
	log *slog.Logger
	wg  sync.WaitGroup
	// ctx ends the workers' calls on shutdown (cut off, their slots kept
	// until their upstreams stopped, as any call's).
	ctx context.Context
}

func (w *workers) start(_ context.Context, ts lease.TaskStart) {
	w.wg.Go(func() {
		if err := w.gw.RunTask(w.ctx, ts); err != nil {
			w.log.Warn("task worker failed; the sweep starts it again", "task", ts.Task, "error", err.Error())
		}
	})
}

// sweepEvery runs the sweep every d until ctx ends (outside Lambda, where
// no schedule does).
func sweepEvery(ctx context.Context, d time.Duration, gw *gateway.Gateway, log *slog.Logger) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := gw.SweepTasks(ctx); err != nil {
			log.Warn("task sweep", "error", err.Error())
		}
	}
}

// dispatch is the function's handler: its own events to the task worker
// and the sweep, every other to url (the Function URL's handler).
// returned (nil: none) is told when an own event's handler has returned,
// so that the invocation ends then (afterResponse).
func dispatch(gw *gateway.Gateway, log *slog.Logger, url func(context.Context, *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error), returned func(context.Context)) func(context.Context, json.RawMessage) (any, error) {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var ev event
		if len(raw) <= maxEvent && json.Unmarshal(raw, &ev) == nil && ev.Kind != "" {
			if returned != nil {
				defer returned(ctx)
			}
			switch ev.Kind {
			case eventTask:
				if ev.Key == "" || ev.Task == "" {
					return nil, errors.New("a task event names its server and task")
				}
				// A worker's failure is logged, never returned: Lambda
				// would retry the invocation, and the sweep already does.
				if err := gw.RunTask(ctx, lease.TaskStart{Key: ev.Key, Ticket: ev.Ticket, Task: ev.Task, Mark: ev.Mark}); err != nil {
					log.Warn("task worker failed; the sweep starts it again", "task", ev.Task, "error", err.Error())
				}
				return nil, nil
			case eventSweep:
				if err := gw.SweepTasks(ctx); err != nil {
					log.Warn("task sweep", "error", err.Error())
				}
				return nil, nil
			}
			return nil, errors.New("unknown mcpgate event")
		}
		var req events.LambdaFunctionURLRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			return nil, err
		}
		return url(ctx, &req)
	}
}
