package config_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// load is config.Load over a valid local configuration and kv.
func load(kv map[string]string) (config.Config, error) {
	vars := map[string]string{"SERVERS_TABLE": "s", "LEASES_TABLE": "l", "KEYS_TABLE": "k", "GATEWAY_ADDR": "127.0.0.1:0"}
	for k, v := range kv {
		vars[k] = v
	}
	return config.Load(func(name string) string { return vars[name] })
}

// TestConfigTasks: TASKS_TABLE is optional and turns tasks on; the result
// bound has a default and a range; the worker function defaults to the
// function itself under Lambda; the tasks settings without the table are
// refused.
func TestConfigTasks(t *testing.T) {
	c, err := load(nil)
	if err != nil {
		t.Fatalf("without TASKS_TABLE: %v", err)
	}
	if c.Tables.Tasks != "" || c.MaxTaskResultBytes != tasks.DefaultMaxResultBytes || c.TaskWorkerFunction != "" {
		t.Errorf("defaults: tasks table %q, max result %d, worker %q; want none, %d, none", c.Tables.Tasks, c.MaxTaskResultBytes, c.TaskWorkerFunction, tasks.DefaultMaxResultBytes)
	}
	if tasks.DefaultMaxResultBytes != 262144 || tasks.MaxResultBytesLimit != 358400 {
		t.Errorf("result bounds %d, %d; the documented ones are 262144 and 358400", tasks.DefaultMaxResultBytes, tasks.MaxResultBytesLimit)
	}

	for _, n := range []string{"1024", "262144", "358400"} {
		c, err := load(map[string]string{"TASKS_TABLE": "t", "MAX_TASK_RESULT_BYTES": n})
		if err != nil || c.Tables.Tasks != "t" || c.MaxTaskResultBytes == 0 || n != strconv.Itoa(c.MaxTaskResultBytes) {
			t.Errorf("MAX_TASK_RESULT_BYTES=%s: %d, %v", n, c.MaxTaskResultBytes, err)
		}
	}
	for _, n := range []string{"1023", "358401", "0", "-1", "256KiB", "1e5", " 2048"} {
		_, err := load(map[string]string{"TASKS_TABLE": "t", "MAX_TASK_RESULT_BYTES": n})
		if err == nil || !strings.Contains(err.Error(), "MAX_TASK_RESULT_BYTES=") || !strings.Contains(err.Error(), "from 1024 to 358400") {
			t.Errorf("MAX_TASK_RESULT_BYTES=%q: error %v, want one naming it and its range", n, err)
		}
	}

	lambda := map[string]string{"TASKS_TABLE": "t", "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001", "AWS_LAMBDA_FUNCTION_NAME": "mcpgate-GatewayFunction-AbC123"}
	c, err = load(lambda)
	if err != nil || c.TaskWorkerFunction != "mcpgate-GatewayFunction-AbC123" {
		t.Errorf("under Lambda: worker %q, %v; want the function itself", c.TaskWorkerFunction, err)
	}
	for _, fn := range []string{"worker", "mcpgate-worker:live", "arn:aws:lambda:us-east-1:123456789012:function:worker", "123456789012:function:w_1:$LATEST", "arn:aws-us-gov:lambda:us-gov-west-1:123456789012:function:w"} {
		lambda["TASK_WORKER_FUNCTION"] = fn
		if c, err := load(lambda); err != nil || c.TaskWorkerFunction != fn {
			t.Errorf("TASK_WORKER_FUNCTION=%s: %q, %v", fn, c.TaskWorkerFunction, err)
		}
	}
	for _, fn := range []string{"a b", "worker;rm", "arn:aws:s3:::bucket", strings.Repeat("w", 65), "https://example.com/"} {
		lambda["TASK_WORKER_FUNCTION"] = fn
		if _, err := load(lambda); err == nil || !strings.Contains(err.Error(), "TASK_WORKER_FUNCTION=") {
			t.Errorf("TASK_WORKER_FUNCTION=%q: error %v, want one naming it", fn, err)
		}
	}

	if c, err := load(map[string]string{"TASKS_TABLE": "t"}); err != nil || c.TaskSweepInterval != time.Minute {
		t.Errorf("TASK_SWEEP_INTERVAL unset: %v, %v; want the documented 1m", c.TaskSweepInterval, err)
	}
	for v, want := range map[string]time.Duration{"1s": time.Second, "1m": time.Minute, "1h": time.Hour, "2500ms": 2500 * time.Millisecond} {
		if c, err := load(map[string]string{"TASKS_TABLE": "t", "TASK_SWEEP_INTERVAL": v}); err != nil || c.TaskSweepInterval != want {
			t.Errorf("TASK_SWEEP_INTERVAL=%s: %v, %v", v, c.TaskSweepInterval, err)
		}
	}
	for _, v := range []string{"999ms", "0", "-1m", "61m", "60", "soon"} {
		if _, err := load(map[string]string{"TASKS_TABLE": "t", "TASK_SWEEP_INTERVAL": v}); err == nil || !strings.Contains(err.Error(), "TASK_SWEEP_INTERVAL=") || !strings.Contains(err.Error(), "from 1s to 1h0m0s") {
			t.Errorf("TASK_SWEEP_INTERVAL=%q: error %v, want one naming it and its range", v, err)
		}
	}

	for _, name := range []string{"MAX_TASK_RESULT_BYTES", "TASK_WORKER_FUNCTION", "TASK_SWEEP_INTERVAL"} {
		v := map[string]string{"MAX_TASK_RESULT_BYTES": "2048", "TASK_WORKER_FUNCTION": "worker", "TASK_SWEEP_INTERVAL": "5s"}[name]
		if _, err := load(map[string]string{name: v}); err == nil || !strings.Contains(err.Error(), name+" is set but TASKS_TABLE is not") {
			t.Errorf("%s without TASKS_TABLE: error %v", name, err)
		}
	}
}
