package metrics_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/metrics/metricstest"
)

// TestTaskRecords: a task's records name its metric under both dimension
// sets, _aws first, and carry no task id; an unknown event writes nothing.
func TestTaskRecords(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.New(&buf, metrics.Options{})
	for _, ev := range []string{"created", "completed", "failed", "cancelled"} {
		if err := e.Task("reports", "build", ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Task("reports", "build", "working"); err == nil {
		t.Error("a task event that is no status it ends in was written")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d records, want 4:\n%s", len(lines), buf.String())
	}
	for i, name := range []string{metrics.MetricTasksCreated, metrics.MetricTasksCompleted, metrics.MetricTasksFailed, metrics.MetricTasksCancelled} {
		if !strings.HasPrefix(lines[i], `{"_aws"`) {
			t.Errorf("record %d does not start with _aws: %s", i, lines[i])
		}
		rec, err := metricstest.Parse([]byte(lines[i]))
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		d := rec.Directives[0]
		if len(d.Metrics) != 1 || d.Metrics[0].Name != name || len(d.Dimensions) != 2 {
			t.Errorf("record %d: %+v; want %s under [ServerID] and [ServerID, Tool]", i, d, name)
		}
	}
}

// TestTasksWaitingRecord: the sweep's gauge of tasks waiting on a server
// is one record under [ServerID] alone, its value the count; a negative
// count or no server writes nothing.
func TestTasksWaitingRecord(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.New(&buf, metrics.Options{})
	if err := e.TasksWaiting("reports", 7); err != nil {
		t.Fatal(err)
	}
	if e.TasksWaiting("reports", -1) == nil || e.TasksWaiting("", 1) == nil {
		t.Error("a negative count or an empty server id was written")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d records, want 1:\n%s", len(lines), buf.String())
	}
	rec, err := metricstest.Parse([]byte(lines[0]))
	if err != nil {
		t.Fatal(err)
	}
	d := rec.Directives[0]
	if len(d.Metrics) != 1 || d.Metrics[0].Name != metrics.MetricTasksWaiting || len(d.Dimensions) != 1 || len(d.Dimensions[0]) != 1 {
		t.Errorf("directive %+v; want TasksWaiting under [ServerID]", d)
	}
	if !strings.Contains(lines[0], `"TasksWaiting":7`) {
		t.Errorf("record %s; want TasksWaiting 7", lines[0])
	}
}
