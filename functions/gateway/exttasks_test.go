package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/taskserver"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestExtTasksClient drives the @modelcontextprotocol/ext-tasks client
// (testdata/exttasks.mjs) through a gateway process relaying a
// task-capable upstream: it creates tasks and polls them to their result,
// answers an elicitation through tasks/update, and cancels a long task,
// holding only gateway handles. (Against the upstream itself the client
// refuses its results, which lack resultType: the gateway's inlined result
// is what the call would have answered, resultType included.)
func TestExtTasksClient(t *testing.T) {
	node := node22(t)
	pkg := filepath.Dir(filepath.Dir(filepath.Dir(infraFile(t, "@modelcontextprotocol/ext-tasks/dist/client/index.js"))))
	root, err := storetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ts := taskserver.New(taskserver.Options{Tasks: true})
	up := httptest.NewServer(ts.Handler())
	t.Cleanup(up.Close)
	rig := testkit.NewRig(t, testkit.RigOptions{})
	rig.PutServer(map[string]any{"server_id": "tasks", "url": up.URL, "max_concurrent_requests": 4})
	gw := rig.StartGateway()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(root, "functions", "gateway", "testdata", "exttasks.mjs"), pkg, gw.URL+"/mcp/tasks", rig.PutKey("tasks"))
	cmd.WaitDelay = 5 * time.Second
	storetest.SetParentDeathSignal(cmd)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("exttasks.mjs: %v\n%s\n%s", err, raw, stderr.String())
	}
	var out struct {
		QuickKind, QuickText     string
		ConfirmKind, ConfirmText string
		LongKind, LongStatus     string
		Error                    string
		Methods                  map[string]int
		Handles                  []string
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("exttasks.mjs printed %s: %v", raw, err)
	}
	if out.Error != "" {
		t.Fatalf("the client failed: %s", out.Error)
	}
	if out.QuickKind != "task" || out.QuickText != "computed quick after 0.3s" {
		t.Errorf("a task polled to its result: kind %q, text %q", out.QuickKind, out.QuickText)
	}
	if out.ConfirmKind != "task" || out.ConfirmText != "deleted notes.txt" {
		t.Errorf("a task given input: kind %q, text %q", out.ConfirmKind, out.ConfirmText)
	}
	if out.LongKind != "task" || out.LongStatus != "cancelled" {
		t.Errorf("a cancelled task: kind %q, status %q", out.LongKind, out.LongStatus)
	}
	for _, m := range []string{"tools/call", "tasks/get", "tasks/update", "tasks/cancel"} {
		if out.Methods[m] == 0 {
			t.Errorf("the client sent no %s (it sent %v)", m, out.Methods)
		}
	}
	if len(out.Handles) == 0 {
		t.Error("no task handle seen")
	}
	for _, h := range out.Handles {
		if !tasks.ValidID(h) {
			t.Errorf("the client saw %q, not a gateway handle", h)
		}
	}
	if s := ts.Stats(); s.Created != 3 || s.Requests["tasks/update"] == 0 || s.Requests["tasks/cancel"] == 0 || s.WrongName != 0 {
		t.Errorf("the upstream saw %+v", s)
	}
}
