package main

// These tests run the real Lambda bootstrap (built with -tags lambda.norpc,
// as for provided.al2023) under the AWS Lambda Runtime Interface Emulator on
// loopback, and invoke it with Function URL events from testdata/: the
// handler, lambdaurl's response streaming and the Lambda request id are
// exercised as Lambda runs them.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/auth/authtest"
	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/metrics/metricstest"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

var (
	lambdaBuildOnce sync.Once
	lambdaBuildDir  string
	lambdaBuildErr  error
)

// removeLambdaBinaries removes what lambdaBinaries built.
func removeLambdaBinaries() {
	if lambdaBuildDir != "" {
		os.RemoveAll(lambdaBuildDir)
	}
}

// lambdaBinaries builds the bootstrap and the emulator once.
func lambdaBinaries(t *testing.T) (bootstrap, rie string) {
	t.Helper()
	lambdaBuildOnce.Do(func() {
		root, err := storetest.RepoRoot()
		if err != nil {
			lambdaBuildErr = err
			return
		}
		// Every test of the binary uses the build: removed by TestMain.
		if lambdaBuildDir, lambdaBuildErr = os.MkdirTemp("", "mcpgate-lambda-"); lambdaBuildErr != nil {
			return
		}
		for _, b := range [][]string{
			{"build", "-tags", "lambda.norpc", "-o", filepath.Join(lambdaBuildDir, "bootstrap"), "./functions/gateway"},
			{"build", "-o", filepath.Join(lambdaBuildDir, "rie"), "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"},
		} {
			cmd := exec.Command("go", b...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				lambdaBuildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(b, " "), err, out)
				return
			}
		}
	})
	if lambdaBuildErr != nil {
		t.Fatal(lambdaBuildErr)
	}
	return filepath.Join(lambdaBuildDir, "bootstrap"), filepath.Join(lambdaBuildDir, "rie")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// emulator is the bootstrap running under the emulator.
type emulator struct {
	addr string
	logs *bytes.Buffer
	mu   *sync.Mutex
	// wrote is closed and replaced (under mu) whenever output arrives.
	wrote *chan struct{}
}

// startEmulator runs the bootstrap under the emulator with env's store and
// extra environment variables (NAME=value).
func startEmulator(t *testing.T, env *storetest.Env, extra ...string) *emulator {
	t.Helper()
	bootstrap, rie := lambdaBinaries(t)
	wrote := make(chan struct{})
	e := &emulator{addr: freeAddr(t), logs: &bytes.Buffer{}, mu: &sync.Mutex{}, wrote: &wrote}
	cmd := exec.Command(rie,
		"--runtime-interface-emulator-address", e.addr,
		"--runtime-api-address", freeAddr(t),
		bootstrap)
	cmd.Env = append(os.Environ(), env.Vars()...)
	cmd.Env = append(cmd.Env, "LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, extra...)
	w := &lockedWriter{mu: e.mu, w: e.logs, wrote: e.wrote}
	cmd.Stdout, cmd.Stderr = w, w
	storetest.SetParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			e.mu.Lock()
			t.Logf("emulator logs:\n%s", e.logs)
			e.mu.Unlock()
		}
	})
	// The emulator prints nothing when it starts listening: wait until it
	// accepts a connection.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", e.addr)
		if err == nil {
			c.Close()
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("emulator did not listen on %s", e.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu    *sync.Mutex
	w     io.Writer
	wrote *chan struct{} // if set, closed and replaced after each write
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if l.wrote != nil {
		close(*l.wrote)
		*l.wrote = make(chan struct{})
	}
	return n, err
}

// streamedResponse is a Function URL response in Lambda's streaming wire
// format: a JSON prelude, eight NUL bytes, the body.
type streamedResponse struct {
	StatusCode int               `json:"statusCode"`
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"-"`
}

// invoke sends a Function URL event from testdata, with {{NAME}}
// placeholders replaced.
func (e *emulator) invoke(t *testing.T, fixture string, repl map[string]string) streamedResponse {
	t.Helper()
	out, err := e.send(fixture, repl)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// send is invoke, for any goroutine.
func (e *emulator) send(fixture string, repl map[string]string) (streamedResponse, error) {
	var out streamedResponse
	event, err := os.ReadFile(filepath.Join("testdata", fixture))
	if err != nil {
		return out, err
	}
	for k, v := range repl {
		event = bytes.ReplaceAll(event, []byte("{{"+k+"}}"), []byte(v))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.addr+"/2015-03-31/functions/function/invocations", bytes.NewReader(event))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, err
	}
	prelude, body, ok := bytes.Cut(raw, make([]byte, 8))
	if !ok {
		return out, fmt.Errorf("response is not in the streaming format: %q", raw)
	}
	if err := json.Unmarshal(prelude, &out); err != nil {
		return out, fmt.Errorf("prelude %q: %v", prelude, err)
	}
	out.Body = string(body)
	return out, nil
}

// output is what the emulator and the function have written so far.
func (e *emulator) output() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.logs.String()
}

func TestLambdaBootstrap(t *testing.T) {
	env := storetest.NewEnv(t)
	demo := testkit.StartDemo(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "demo", "url": demo.URL, "max_concurrent_requests": 1, "allow_local": true})
	key := testkit.PutKey(t, env, "*")
	// A server whose calls may take longer than the function may run.
	testkit.PutServer(t, env, map[string]any{"server_id": "slow", "url": demo.URL, "timeout": 90, "allow_local": true})
	e := startEmulator(t, env, "FUNCTION_TIMEOUT=60s", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256")

	health := e.invoke(t, "function-url-health.json", nil)
	if health.StatusCode != 200 || !strings.Contains(health.Body, `"ok"`) {
		t.Errorf("health: %+v", health)
	}
	// The Lambda request id is the gateway's request id.
	if id := health.Headers["X-Request-Id"]; id == "" || strings.Count(id, "-") != 4 {
		t.Errorf("X-Request-Id = %q, want the Lambda request id", id)
	}

	call := e.invoke(t, "function-url-tools-call.json", map[string]string{"KEY": key})
	if call.StatusCode != 200 || !strings.Contains(call.Body, "from lambda") {
		t.Errorf("REST tools/call: %+v", call)
	}
	if n := testkit.LeaseCount(t, env, "demo", "leases"); n != 0 {
		t.Errorf("%d leases left after the invocation", n)
	}
	// The call's EMF record was written (to stdout, hence CloudWatch Logs)
	// before the invocation ended.
	e.mu.Lock()
	logs := e.logs.String()
	e.mu.Unlock()
	found := false
	for line := range strings.SplitSeq(logs, "\n") {
		if !strings.Contains(line, `"_aws"`) {
			continue
		}
		rec, err := metricstest.Parse([]byte(line))
		if err != nil {
			t.Errorf("invalid EMF record %s: %v", line, err)
			continue
		}
		if tool, _ := rec.String(metrics.DimTool); tool == "echo" {
			found = true
		}
	}
	if !found {
		t.Errorf("no EMF record for the call in the function's output:\n%s", logs)
	}

	// "${GatewayUrl}/mcp-rest/..." with a URL ending in "/" is served.
	double := e.invoke(t, "function-url-double-slash-call.json", map[string]string{"KEY": key, "SERVER": "demo"})
	if double.StatusCode != 200 || !strings.Contains(double.Body, "double slash") {
		t.Errorf("//mcp-rest/tools/call: %+v", double)
	}
	// The function's 60 s cannot hold a 90 s call.
	slow := e.invoke(t, "function-url-double-slash-call.json", map[string]string{"KEY": key, "SERVER": "slow"})
	if slow.StatusCode != 502 || !strings.Contains(slow.Body, "SERVER_MISCONFIGURED") {
		t.Errorf("a server that cannot fit the function's timeout: %+v", slow)
	}
	// The Go memory limit comes from the function's memory, 90% of 256
	// MiB, and so does the number of threads running Go code: one; the
	// collector, its heap bounded so, runs at GOGC 400.
	e.mu.Lock()
	limited := strings.Contains(e.logs.String(), `"memory_limit":"230 MiB","gomaxprocs":1,"gogc":400,`)
	e.mu.Unlock()
	if !limited {
		t.Error(`the bootstrap did not log "memory_limit":"230 MiB","gomaxprocs":1,"gogc":400 for a 256 MiB function`)
	}

	denied := e.invoke(t, "function-url-tools-call.json", map[string]string{"KEY": "mcpg_not-a-real-key-0000000000"})
	if denied.StatusCode != 401 || !strings.Contains(denied.Body, "UNAUTHORIZED") {
		t.Errorf("bad key: %+v", denied)
	}

	// An MCP tool call with a progress token is answered as an event
	// stream through Lambda's response stream, the upstream's progress
	// relayed in order before the result. (The emulator hands the client
	// the stream only once it is complete, so this checks the format and
	// the order, not the timing.)
	mcpResp := e.invoke(t, "function-url-mcp-progress.json", map[string]string{"KEY": key})
	if mcpResp.StatusCode != 200 || mcpResp.Headers["Content-Type"] != "text/event-stream" {
		t.Fatalf("MCP call: status %d, headers %v", mcpResp.StatusCode, mcpResp.Headers)
	}
	started := strings.Index(mcpResp.Body, `"message":"started"`)
	done := strings.Index(mcpResp.Body, `"message":"done"`)
	result := strings.Index(mcpResp.Body, `"in_flight_at_entry"`)
	if started < 0 || done < started || result < done {
		t.Errorf("event stream does not carry progress before the result:\n%s", mcpResp.Body)
	}
}

// TestLambdaKeepsTheSlotAfterTheAnswer: under Lambda, a call cut off before
// its upstream answered (here a stateless upstream, which runs the call to
// its end whatever it is told) is answered at once, and the invocation goes
// on, kept alive by the gateway's internal extension, until the upstream's
// late answer arrives and the slot is given back. The emulator returns an
// invocation's response only once the invocation has ended, where Lambda
// returns it as soon as the runtime has sent it: what this shows is the
// order (the handler answered; the invocation went on while the upstream
// still ran the call; it ended after the slot was given back), not when the
// agent receives its answer.
func TestLambdaKeepsTheSlotAfterTheAnswer(t *testing.T) {
	env := storetest.NewEnv(t)
	demo := testkit.StartDemoWith(t, demoupstream.HandlerOptions{Stateless: true, JSONResponse: true})
	testkit.PutServer(t, env, map[string]any{"server_id": "demo", "url": demo.URL, "max_concurrent_requests": 1, "timeout": 0.5, "allow_local": true})
	key := testkit.PutKey(t, env, "*")
	e := startEmulator(t, env)

	type result struct {
		r   streamedResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := e.send("function-url-slow-call.json", map[string]string{"KEY": key})
		done <- result{r, err}
	}()
	// The handler answered (its request record is written as it returns).
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(e.output(), `"status":504`) {
		if time.Now().After(deadline) {
			t.Fatalf("the handler did not answer:\n%s", e.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The invocation goes on while the upstream runs the call. (Waiting
	// here can only hide an early end, never invent one.)
	select {
	case r := <-done:
		t.Fatalf("the invocation ended (%+v, %v) while the upstream still ran the call; leases %d",
			r.r, r.err, testkit.LeaseCount(t, env, "demo", "leases"))
	case <-time.After(time.Second):
	}
	if n := testkit.LeaseCount(t, env, "demo", "leases"); n != 1 {
		t.Errorf("%d leases while the upstream runs the cut-off call, want 1", n)
	}
	demo.OpenGate("g")
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.r.StatusCode != http.StatusGatewayTimeout || !strings.Contains(r.r.Body, "UPSTREAM_TIMEOUT") {
		t.Errorf("answer %+v, want 504 UPSTREAM_TIMEOUT", r.r)
	}
	// By the time the invocation ended, the slot was back.
	if n := testkit.LeaseCount(t, env, "demo", "leases"); n != 0 {
		t.Errorf("%d leases when the invocation ended, want 0", n)
	}
	if s := demo.Stats(); s.Completed != 1 {
		t.Errorf("upstream stats %+v, want the call run to its end", s)
	}
	for line := range strings.SplitSeq(e.output(), "\n") {
		if strings.HasPrefix(line, "REPORT") {
			t.Log(line)
		}
	}
}

// requestLog returns the gateway's request record for a Lambda request id,
// waiting for the emulator to pass it on: the function's output reaches
// the test apart from the invocation's answer.
func (e *emulator) requestLog(t *testing.T, requestID string) map[string]any {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		e.mu.Lock()
		logs, wrote := e.logs.String(), *e.wrote
		e.mu.Unlock()
		if rec, ok := testkit.Record(logs, requestRecords, testkit.Match{"request_id": requestID}); ok {
			return rec
		}
		select {
		case <-wrote:
		case <-deadline:
			t.Fatalf("no request record for %s in:\n%s", requestID, logs)
		}
	}
}

// TestLambdaIdentity runs the bootstrap under the emulator with Function
// URL events whose request context carries an IAM caller (a Function URL
// with AuthType AWS_IAM) and with OAuth access tokens, whose audience is
// the Function URL's own domain.
func TestLambdaIdentity(t *testing.T) {
	env := storetest.NewEnv(t)
	demo := testkit.StartDemo(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "demo", "url": demo.URL, "allow_local": true})
	key := testkit.PutKey(t, env, "demo")
	iss := authtest.NewIssuer(t)
	e := startEmulator(t, env,
		"OAUTH_ISSUER="+iss.URL,
		"IAM_GRANTS=arn:aws:sts::111122223333:assumed-role/agents/*=demo")
	iam := func(role, session, key string) streamedResponse {
		return e.invoke(t, "function-url-iam-tools-call.json", map[string]string{"ROLE": role, "SESSION": session, "KEY": key})
	}

	// An IAM caller granted by IAM_GRANTS needs no key; SigV4 occupies
	// Authorization and is not taken for a bad bearer.
	r := iam("agents", "alice", "")
	if r.StatusCode != 200 || !strings.Contains(r.Body, "from an IAM caller") {
		t.Fatalf("granted IAM caller: %+v", r)
	}
	rec := e.requestLog(t, r.Headers["X-Request-Id"])
	if p, _ := rec["principal"].(string); !strings.HasPrefix(p, "iam:") || rec["iam_caller"] != "arn:aws:sts::111122223333:assumed-role/agents/alice" {
		t.Errorf("IAM request record %v: want principal iam:<hash> and the caller's ARN", rec)
	}
	// Another role: no grant, so it must bring a key.
	if r := iam("other", "bob", ""); r.StatusCode != 401 {
		t.Errorf("IAM caller without a grant: %+v, want 401", r)
	}
	r = iam("other", "bob", key)
	if r.StatusCode != 200 {
		t.Fatalf("IAM caller with X-Api-Key: %+v", r)
	}
	rec = e.requestLog(t, r.Headers["X-Request-Id"])
	if p, _ := rec["principal"].(string); !strings.HasPrefix(p, "key:") || rec["iam_caller"] != "arn:aws:sts::111122223333:assumed-role/other/bob" {
		t.Errorf("IAM caller with a key, request record %v: want the key's principal and the caller's ARN", rec)
	}

	// A token for the Function URL's MCP endpoint: the audience is derived
	// from the request context's domain.
	const domain = "https://abcdefghij.lambda-url.us-east-1.on.aws"
	r = e.invoke(t, "function-url-tools-call.json", map[string]string{"KEY": iss.Token("carol", domain+"/mcp", "mcp:demo")})
	if r.StatusCode != 200 || !strings.Contains(r.Body, "from lambda") {
		t.Fatalf("token: %+v", r)
	}
	if p, _ := e.requestLog(t, r.Headers["X-Request-Id"])["principal"].(string); !strings.HasPrefix(p, "oauth:") {
		t.Errorf("token principal %q", p)
	}
	r = e.invoke(t, "function-url-tools-call.json", map[string]string{"KEY": iss.Token("carol", "https://elsewhere.example.com/mcp", "mcp:demo")})
	want := `Bearer resource_metadata="` + domain + `/.well-known/oauth-protected-resource", error="invalid_token"`
	if r.StatusCode != 401 || r.Headers["Www-Authenticate"] != want {
		t.Errorf("token for another resource: status %d, WWW-Authenticate %q, want 401 and %q", r.StatusCode, r.Headers["Www-Authenticate"], want)
	}
}
