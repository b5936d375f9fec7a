package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// invokeRaw sends one event as it is (an asynchronous invocation's
// payload) and returns the answer's body.
func (e *emulator) invokeRaw(t *testing.T, event string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.addr+"/2015-03-31/functions/function/invocations", strings.NewReader(event))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// The internal extension that keeps an invocation alive until the
// exchanges it left open are closed (afterResponse) waits, for each
// INVOKE, until the Function URL handler it wraps says that invocation's
// handler returned. The function's own events — a task's worker
// ({"mcpgate":"task"}) and the schedule's sweep ({"mcpgate":"sweep"}) —
// are dispatched around that wrapper, so nothing ever says so: the
// extension holds every such invocation until its deadline. Each worker
// and each sweep then runs for the function's whole timeout (up to 900 s,
// billed, holding an environment and a unit of the function's concurrency
// that bulkheads count on), ends as a timeout (a function error, which
// Lambda retries twice for an asynchronous invocation) and its
// environment is reset (the next invocation starts cold), or, when the
// extension's own wake at the deadline wins the race, it answers just
// before it. The handler here returns in milliseconds, so an invocation's
// length is either that or its whole timeout: the check below tells the
// two apart (half the timeout), it measures nothing finer.
func TestReviewLambdaWorkerAndSweepEventsRunToTheirTimeout(t *testing.T) {
	env := storetest.NewEnv(t)
	const timeout = 10 * time.Second
	e := startEmulator(t, env, "AWS_LAMBDA_FUNCTION_TIMEOUT=10")
	for _, ev := range []string{`{"mcpgate":"sweep"}`, `{"mcpgate":"task","key":"demo","task":"tsk_AAAAAAAAAAAAAAAAAAAAAAAA"}`} {
		out := e.invokeRaw(t, ev)
		if strings.Contains(out, "timed out") {
			t.Errorf("invocation of %s answered %q; want its handler's answer", ev, out)
		}
	}
	// The emulator writes an invocation's REPORT line after its answer.
	countReports := func(out string) int {
		n := 0
		for line := range strings.SplitSeq(out, "\n") {
			if strings.HasPrefix(line, "REPORT") {
				n++
			}
		}
		return n
	}
	out := e.output()
	for deadline := time.Now().Add(timeout); countReports(out) < 2 && time.Now().Before(deadline); out = e.output() {
		time.Sleep(20 * time.Millisecond)
	}
	reports := 0
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.HasPrefix(line, "REPORT") {
			continue
		}
		reports++
		_, rest, _ := strings.Cut(line, "\tDuration: ")
		ms, _, _ := strings.Cut(rest, " ms")
		d, err := time.ParseDuration(strings.TrimSpace(ms) + "ms")
		if err != nil {
			t.Fatalf("REPORT line %q: %v", line, err)
		}
		if d >= timeout/2 {
			t.Errorf("an invocation of the function's own events lasted %v of its %v timeout: %s", d, timeout, line)
		}
	}
	if reports != 2 {
		t.Errorf("%d REPORT lines; want 2", reports)
	}
}
