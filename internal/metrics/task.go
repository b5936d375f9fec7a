package metrics

import (
	"encoding/json"
	"strconv"
)

// Metrics of MCP tasks the gateway runs itself: one record when a task is
// made, one when it ends. A task's id is never a dimension.
const (
	MetricTasksCreated   = "TasksCreated"
	MetricTasksCompleted = "TasksCompleted"
	MetricTasksFailed    = "TasksFailed"
	MetricTasksCancelled = "TasksCancelled"
	// MetricTasksWaiting is how many tasks wait for a place on a server,
	// as the sweep reads its lease item (once a minute): [ServerID] only.
	MetricTasksWaiting = "TasksWaiting"
)

// TaskMetric names the metric of a task's event: "created", or the status
// it ended in ("completed", "failed", "cancelled"); "" for any other.
func TaskMetric(event string) string {
	switch event {
	case "created":
		return MetricTasksCreated
	case "completed":
		return MetricTasksCompleted
	case "failed":
		return MetricTasksFailed
	case "cancelled":
		return MetricTasksCancelled
	}
	return ""
}

// Task writes the record of a task of tool on serverID being made or
// ending (event as TaskMetric reads it): its metric (Count 1), dimension
// sets [ServerID] and [ServerID, Tool].
func (e *Emitter) Task(serverID, tool, event string) error {
	return e.taskRecord(serverID, tool, TaskMetric(event), 1)
}

// TasksWaiting writes how many tasks wait for a place on serverID
// (MetricTasksWaiting, Count n), under [ServerID].
func (e *Emitter) TasksWaiting(serverID string, n int) error {
	if n < 0 {
		return ErrInvalid
	}
	return e.taskRecord(serverID, "", MetricTasksWaiting, n)
}

func (e *Emitter) taskRecord(serverID, tool, name string, n int) error {
	if e == nil {
		return nil
	}
	if serverID == "" || name == "" {
		return ErrInvalid
	}
	// Written in order, _aws first, as every record is.
	aws, err := json.Marshal(e.meta(sets(tool), []metricDef{{name, Count}}))
	if err != nil {
		return err
	}
	sid, _ := json.Marshal(serverID)
	line := `{"_aws":` + string(aws) + `,"` + DimServerID + `":` + string(sid)
	if tool != "" {
		t, _ := json.Marshal(tool)
		line += `,"` + DimTool + `":` + string(t)
	}
	return e.write(json.RawMessage(line + `,"` + name + `":` + strconv.Itoa(n) + `}`))
}
