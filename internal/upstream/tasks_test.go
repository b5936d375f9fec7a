package upstream

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/taskserver"
)

func taskServer(t *testing.T, tasks bool) (*taskserver.Server, *registry.Server) {
	t.Helper()
	ts := taskserver.New(taskserver.Options{Tasks: tasks})
	hs := httptest.NewServer(ts.Handler())
	t.Cleanup(hs.Close)
	return ts, &registry.Server{ID: "tasks", URL: hs.URL, Transport: registry.TransportHTTP, Timeout: 10 * time.Second}
}

// declaring is a call's _meta declaring the tasks extension.
func declaring() mcp.Meta {
	return mcp.Meta{mcp.MetaKeyClientCapabilities: map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}
}

// TestUpstreamTaskSupport: the pool reads what the SDK drops of a
// task-capable upstream: that it declares the extension, each tool's
// execution.taskSupport (kept under TaskSupportKey, which Listed removes),
// and an upstream that declares nothing lists no task support.
func TestUpstreamTaskSupport(t *testing.T) {
	for _, tasks := range []bool{true, false} {
		_, srv := taskServer(t, tasks)
		p := New(Options{AllowLocal: true})
		t.Cleanup(p.Close)
		info, err := p.Info(t.Context(), srv, Caller{})
		if err != nil {
			t.Fatal(err)
		}
		if DeclaresTasks(info) != tasks {
			t.Errorf("tasks %v: DeclaresTasks = %v", tasks, DeclaresTasks(info))
		}
		want := map[string]string{"greet": "", "slow_compute": "optional", "failing_job": "required", "confirm_delete": "optional"}
		for name, support := range want {
			if !tasks {
				support = ""
			}
			tool, err := p.Tool(t.Context(), srv, Caller{}, name)
			if err != nil {
				t.Fatal(err)
			}
			if got := TaskSupport(tool); got != support {
				t.Errorf("tasks %v: TaskSupport(%s) = %q, want %q", tasks, name, got, support)
			}
			if _, kept := Listed(tool).Meta[TaskSupportKey]; kept {
				t.Errorf("Listed(%s) keeps %s", name, TaskSupportKey)
			}
			if support != "" && TaskSupport(tool) != support {
				t.Errorf("Listed changed the pool's own tool")
			}
		}
	}
}

// TestUpstreamTaskAnswer: a call that declares the extension and is
// answered with a CreateTaskResult gives the task (its raw answer: working,
// or already asking for input when the upstream got there first) and an
// empty result; one that does not declare it is answered synchronously;
// tasks/get, tasks/update and tasks/cancel reach the upstream with the
// task id in Mcp-Name and the extension declared.
func TestUpstreamTaskAnswer(t *testing.T) {
	ts, srv := taskServer(t, true)
	p := New(Options{AllowLocal: true})
	t.Cleanup(p.Close)
	ctx := t.Context()

	x := p.Start(ctx, srv, Caller{}, &mcp.CallToolParams{Name: "slow_compute", Arguments: map[string]any{"seconds": 0}}, nil)
	if res, err := x.Result(); err != nil || x.Task() != nil || len(res.Content) == 0 {
		t.Fatalf("undeclared call: result %+v, task %v, error %v; want a result", res, x.Task(), err)
	}
	x = p.Start(ctx, srv, Caller{}, &mcp.CallToolParams{Name: "confirm_delete", Arguments: map[string]any{"filename": "a"}, Meta: declaring()}, nil)
	res, err := x.Result()
	if err != nil {
		t.Fatal(err)
	}
	task := x.Task()
	if task == nil || len(res.Content) != 0 {
		t.Fatalf("declared call: task %v, result %+v; want a task", task, res)
	}
	var created struct {
		ResultType, TaskID, Status string
	}
	if err := json.Unmarshal(task.Raw, &created); err != nil || created.ResultType != "task" || created.TaskID == "" || created.Status != "working" && created.Status != "input_required" {
		t.Fatalf("task answer %s: %+v, %v", task.Raw, created, err)
	}
	get := func() map[string]json.RawMessage {
		t.Helper()
		raw, err := p.TaskRequest(ctx, srv, Caller{}, "tasks/get", created.TaskID, nil)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	deadline := time.Now().Add(10 * time.Second)
	for string(get()["status"]) != `"input_required"` {
		if time.Now().After(deadline) {
			t.Fatalf("task never asked for input: %v", get())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := p.TaskRequest(ctx, srv, Caller{}, "tasks/update", created.TaskID, json.RawMessage(`{"confirm":{"action":"accept","content":{"confirm":true}}}`)); err != nil {
		t.Fatal(err)
	}
	for string(get()["status"]) != `"completed"` {
		if time.Now().After(deadline) {
			t.Fatalf("task never completed: %v", get())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := string(get()["result"]); !strings.Contains(r, "deleted a") {
		t.Errorf("result %s, want the deletion", r)
	}
	if _, err := p.TaskRequest(ctx, srv, Caller{}, "tasks/cancel", created.TaskID, nil); err != nil {
		t.Errorf("cancel of an ended task: %v", err)
	}
	_, err = p.TaskRequest(ctx, srv, Caller{}, "tasks/get", "no-such-task", nil)
	var ue *Error
	if !errors.As(err, &ue) || ue.Kind != KindRPC || ue.RPC.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("unknown task: %v, want the upstream's invalid params", err)
	}
	if _, err := p.TaskRequest(ctx, srv, Caller{}, "tasks/list", created.TaskID, nil); !errors.Is(err, ErrNotTaskMethod) {
		t.Errorf("tasks/list: %v", err)
	}
	st := ts.Stats()
	if st.WrongName != 0 || st.Requests["tasks/get"] == 0 || st.Requests["tasks/update"] != 1 || st.Requests["tasks/cancel"] != 1 {
		t.Errorf("upstream saw %+v", st)
	}
}
