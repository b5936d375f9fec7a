package main

import (
	"strings"
	"testing"
	"time"
)

// env is a getenv over a map.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// baseVars is a valid local configuration.
func baseVars(more map[string]string) map[string]string {
	vars := map[string]string{"SERVERS_TABLE": "s", "LEASES_TABLE": "l", "KEYS_TABLE": "k", "GATEWAY_ADDR": "127.0.0.1:0"}
	for k, v := range more {
		vars[k] = v
	}
	return vars
}

func TestConfigLimits(t *testing.T) {
	c, err := loadConfig(env(baseVars(nil)))
	if err != nil {
		t.Fatal(err)
	}
	want := localLimits{ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxConns: 1024}
	if c.Local != want {
		t.Errorf("default local limits %+v, want %+v", c.Local, want)
	}
	if c.MemoryLimit != 0 || c.requestTimeout() != 0 {
		t.Errorf("memory limit %d, request timeout %v; want neither outside Lambda", c.MemoryLimit, c.requestTimeout())
	}

	c, err = loadConfig(env(baseVars(map[string]string{"GATEWAY_READ_TIMEOUT": "5s", "GATEWAY_IDLE_TIMEOUT": "1m",
		"GATEWAY_MAX_CONNS": "16", "REQUEST_TIMEOUT": "40s", "FUNCTION_TIMEOUT": "900s"})))
	if err != nil {
		t.Fatal(err)
	}
	if c.Local != (localLimits{ReadTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxConns: 16}) {
		t.Errorf("local limits %+v", c.Local)
	}
	// Outside Lambda a request runs at most REQUEST_TIMEOUT.
	if c.requestTimeout() != 40*time.Second {
		t.Errorf("request timeout %v, want REQUEST_TIMEOUT", c.requestTimeout())
	}

	for _, bad := range [][2]string{
		{"GATEWAY_READ_TIMEOUT", "0s"},
		{"GATEWAY_IDLE_TIMEOUT", "-1s"},
		{"GATEWAY_MAX_CONNS", "0"},
		{"GATEWAY_MAX_CONNS", "many"},
		{"FUNCTION_TIMEOUT", "-5s"},
		{"FUNCTION_TIMEOUT", "120"},
		{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256MB"},
	} {
		_, err := loadConfig(env(baseVars(map[string]string{bad[0]: bad[1]})))
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: error %v, want one naming %s", bad[0], bad[1], err, bad[0])
		}
	}
}

func TestConfigUnderLambda(t *testing.T) {
	lambda := map[string]string{"SERVERS_TABLE": "s", "LEASES_TABLE": "l", "KEYS_TABLE": "k",
		"AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001", "FUNCTION_TIMEOUT": "120s", "REQUEST_TIMEOUT": "5s",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256"}
	c, err := loadConfig(env(lambda))
	if err != nil {
		t.Fatal(err)
	}
	// The function's timeout bounds a request; REQUEST_TIMEOUT is for the
	// local server only.
	if c.requestTimeout() != 120*time.Second {
		t.Errorf("request timeout %v, want FUNCTION_TIMEOUT", c.requestTimeout())
	}
	if want := int64(256 << 20 * 9 / 10); c.MemoryLimit != want {
		t.Errorf("memory limit %d, want 90%% of 256 MiB = %d", c.MemoryLimit, want)
	}
	// GOMEMLIMIT wins: the runtime has applied it, the gateway leaves it.
	lambda["GOMEMLIMIT"] = "100MiB"
	if c, err := loadConfig(env(lambda)); err != nil || c.MemoryLimit != 0 {
		t.Errorf("with GOMEMLIMIT: memory limit %d, %v; want 0 (the runtime's)", c.MemoryLimit, err)
	}
	if got := memoryLimitText(c.MemoryLimit); got != "230 MiB" {
		t.Errorf("memoryLimitText = %q", got)
	}
}
