package main

import (
	"net/http/httptest"
	"testing"

	"github.com/mcpgate/mcpgate/internal/taskserver"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// tasksScenarios are the conformance suite's scenarios of the tasks
// extension (io.modelcontextprotocol/tasks) that the gateway is held to,
// each in a run of the CLI of its own. tasks-mrtr-composition is run and reported, not held:
// it expects a required tool's first round answered synchronously.
var tasksScenarios = []string{
	"tasks-lifecycle", "tasks-capability-negotiation", "tasks-wire-fields", "tasks-request-state-removal",
	"tasks-request-headers", "tasks-dispatch-and-envelope", "tasks-required-task-error", "tasks-mrtr-input",
}

// TestConformanceTasksRelay runs the tasks scenarios of the conformance
// suite (0.2.0-alpha.12) against a task-capable upstream (the taskserver,
// implementing the extension itself) directly, and through a gateway
// process at /mcp/{server_id} that relays its tasks under handles of its
// own, kept in the tasks table: each scenario that passes directly must
// pass through the gateway.
func TestConformanceTasksRelay(t *testing.T) {
	t.Parallel()
	node22(t)
	s := suites[1]
	infraFile(t, s.pkg+"/dist/index.js")
	up := httptest.NewServer(taskserver.New(taskserver.Options{Tasks: true}).Handler())
	t.Cleanup(up.Close)
	rig := testkit.NewRig(t, testkit.RigOptions{})
	rig.PutServer(map[string]any{"server_id": "tasks", "url": up.URL, "max_concurrent_requests": 64})
	gw := rig.StartGateway()
	scenariosAsTheReference(t, s, up.URL, withBearer(t, gw.URL, rig.PutKey("tasks"))+"/mcp/tasks")
}

// scenariosAsTheReference runs each tasks scenario of suite s against the
// reference (a task-capable upstream) and against the gateway: each must
// pass against both (tasks-mrtr-composition is logged only). The scenarios
// run in parallel subtests, each against both at once: they spend most of
// their time waiting on their tasks, and each keeps to tasks it made.
func scenariosAsTheReference(t *testing.T, s suite, reference, gateway string) {
	for _, name := range append(tasksScenarios, "tasks-mrtr-composition") {
		t.Run(name, func(t *testing.T) {
			one := suite{name: s.name, pkg: s.pkg, args: []string{"--scenario", name}}
			t.Parallel()
			directRun, viaRun := startConformance(t, one, reference), startConformance(t, one, gateway)
			direct, directOut := directRun.wait(t)
			via, viaOut := viaRun.wait(t)
			d, g := passed(direct[name]), passed(via[name])
			switch {
			case name == "tasks-mrtr-composition":
				t.Logf("%s: against the reference passed=%v %s; through the gateway passed=%v %s", name, d, failures(direct[name]), g, failures(via[name]))
			case len(direct[name]) == 0 || len(via[name]) == 0:
				t.Errorf("scenario %s wrote no checks:\n%s\n%s", name, directOut, viaOut)
			case !d:
				t.Errorf("scenario %s fails against the task-capable upstream itself: %s\n%s", name, failures(direct[name]), directOut)
			case !g:
				t.Errorf("scenario %s passes against the task-capable upstream but fails through the gateway: %s\n%s", name, failures(via[name]), viaOut)
			}
		})
	}
}

// TestConformanceGatewayTasks runs the same scenarios through a gateway
// process at /mcp/{server_id} in front of the taskserver in its
// synchronous mode (a plain upstream that knows nothing of tasks), whose
// item makes each fixture task-supporting as the task-capable upstream
// declares it: the gateway makes the tasks, queues them, runs them and
// keeps their outcomes; the scenarios must pass as they do against the
// task-capable upstream itself.
func TestConformanceGatewayTasks(t *testing.T) {
	t.Parallel()
	node22(t)
	s := suites[1]
	infraFile(t, s.pkg+"/dist/index.js")
	reference := httptest.NewServer(taskserver.New(taskserver.Options{Tasks: true}).Handler())
	t.Cleanup(reference.Close)
	plain := httptest.NewServer(taskserver.New(taskserver.Options{}).Handler())
	t.Cleanup(plain.Close)
	rig := testkit.NewRig(t, testkit.RigOptions{})
	rig.PutServer(map[string]any{"server_id": "tasks", "url": plain.URL, "max_concurrent_requests": 64, "tools": map[string]any{
		"slow_compute":        map[string]any{"task_support": "optional"},
		"failing_job":         map[string]any{"task_support": "required"},
		"protocol_error_job":  map[string]any{"task_support": "optional"},
		"confirm_delete":      map[string]any{"task_support": "optional"},
		"multi_input":         map[string]any{"task_support": "optional"},
		"test_tool_with_task": map[string]any{"task_support": "required"},
	}})
	gw := rig.StartGateway()
	scenariosAsTheReference(t, s, reference.URL, withBearer(t, gw.URL, rig.PutKey("tasks"))+"/mcp/tasks")
}
