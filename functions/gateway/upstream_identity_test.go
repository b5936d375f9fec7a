package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/mcpgate/mcpgate/internal/secret/secrettest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestIdentityProcess runs the real gateway binary reading Secrets Manager
// and SSM on moto, in front of upstreams that refuse calls without their
// credential: every auth type works over REST and MCP, a rotated secret is
// picked up after the upstream's 401, failures are answered; and in the
// whole run no secret value, OAuth token or agent key appears in the
// process's logs or metrics, nor in what the CLI prints of the servers.
func TestIdentityProcess(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{})
	moto := secrettest.Shared(t)
	var never []string // values that must never be logged or printed
	secretIn := func(value string) string {
		name := secrettest.Name("proc")
		moto.PutSecret(t, name, value)
		never = append(never, value)
		return "secretsmanager:" + name
	}
	var guards []*testkit.Guard
	guard := func(check func(*http.Request, []byte) bool) (*testkit.Demo, *testkit.Guard) {
		d, g := testkit.StartGuardedDemo(t, check)
		guards = append(guards, g)
		return d, g
	}
	header := func(name, want string) func(*http.Request, []byte) bool {
		return func(r *http.Request, _ []byte) bool { return r.Header.Get(name) == want }
	}

	// bearer, rotated below.
	var rotMu sync.Mutex
	bearerWant := "Bearer FAKESECRET-proc-bearer-1"
	bearerRef := secretIn("FAKESECRET-proc-bearer-1")
	bearerDemo, _ := guard(func(r *http.Request, _ []byte) bool {
		rotMu.Lock()
		defer rotMu.Unlock()
		return r.Header.Get("Authorization") == bearerWant
	})
	rig.PutServer(map[string]any{"server_id": "bearer", "url": bearerDemo.URL, "auth": map[string]any{"type": "bearer", "secret": bearerRef}})
	rig.PutServer(map[string]any{"server_id": "bearer_api", "transport": "openapi", "spec_url": bearerDemo.SpecURL, "auth": map[string]any{"type": "bearer", "secret": bearerRef}})

	// api_key from SSM.
	param := "/" + secrettest.Name("proc-param")
	moto.PutParameter(t, param, "FAKESECRET-proc-ssm-key")
	never = append(never, "FAKESECRET-proc-ssm-key")
	d, _ := guard(header("X-Api-Key", "FAKESECRET-proc-ssm-key"))
	rig.PutServer(map[string]any{"server_id": "apikey", "url": d.URL, "auth": map[string]any{"type": "api_key", "secret": "ssm:" + param}})

	// basic from a JSON key.
	basicRef := secretIn(`{"userpass": "gw:FAKESECRET-proc-password"}`)
	never = append(never, "FAKESECRET-proc-password")
	d, _ = guard(func(r *http.Request, _ []byte) bool {
		u, p, ok := r.BasicAuth()
		return ok && u == "gw" && p == "FAKESECRET-proc-password"
	})
	rig.PutServer(map[string]any{"server_id": "basic", "url": d.URL, "auth": map[string]any{"type": "basic", "secret": basicRef + "#userpass"}})

	// header.
	d, _ = guard(header("Private-Token", "FAKESECRET-proc-header"))
	rig.PutServer(map[string]any{"server_id": "hdr", "url": d.URL, "auth": map[string]any{"type": "header", "header": "Private-Token", "secret": secretIn("FAKESECRET-proc-header")}})

	// aws_sigv4 with the process's own credentials (storetest's static ones).
	procCreds := aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}
	d, _ = guard(func(r *http.Request, body []byte) bool {
		return testkit.VerifySigV4(r, body, procCreds, "execute-api", "us-east-1") == nil
	})
	rig.PutServer(map[string]any{"server_id": "sigv4", "url": d.URL, "auth": map[string]any{"type": "aws_sigv4", "service": "execute-api"}})

	// oauth2 client credentials.
	tokens := testkit.StartTokenEndpoint(t, "gateway", "FAKESECRET-proc-client", time.Hour, nil)
	d, _ = guard(tokens.BearerValid)
	rig.PutServer(map[string]any{"server_id": "oauth", "url": d.URL, "auth": map[string]any{
		"type": "oauth2_client_credentials", "token_url": tokens.URL, "client_id": "gateway", "secret": secretIn("FAKESECRET-proc-client")}})

	// Failures: a secret that does not exist, a value the upstream refuses.
	rig.PutServer(map[string]any{"server_id": "nocred", "url": d.URL, "auth": map[string]any{"type": "bearer", "secret": "secretsmanager:" + secrettest.Name("absent")}})
	rig.PutServer(map[string]any{"server_id": "refused", "url": bearerDemo.URL, "auth": map[string]any{"type": "bearer", "secret": secretIn("FAKESECRET-proc-wrong")}})

	key := rig.PutKey("*")
	never = append(never, key)
	gw := rig.StartGateway(append(moto.Vars(), "EMF_METRICS=on", "LOG_LEVEL=debug", "SECRETS_CACHE_TTL=1h")...)
	ctx := context.Background()
	call := func(id, tool string, args map[string]any, want int) {
		t.Helper()
		r, err := gw.CallTool(ctx, key, id, tool, args)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != want {
			t.Errorf("%s %s: HTTP %d, want %d: %s", id, tool, r.Status, want, r.Body)
		}
	}
	echo := map[string]any{"text": "hello"}
	for _, id := range []string{"bearer", "apikey", "basic", "hdr", "sigv4", "oauth"} {
		call(id, "echo", echo, http.StatusOK)
		status, body := testkit.AgentRequest(t, http.MethodPost, gw.URL+"/mcp/"+id, key, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`, nil)
		if status != http.StatusOK || !strings.Contains(body, `"hello"`) {
			t.Errorf("MCP %s: %d %s", id, status, body)
		}
	}
	call("bearer_api", "echo_api", map[string]any{"body": echo}, http.StatusOK)

	// Rotation: the secret changes, the upstream takes only the new value;
	// the process's cached value is refused once, read again, and used.
	moto.RotateSecret(t, strings.TrimPrefix(bearerRef, "secretsmanager:"), "FAKESECRET-proc-bearer-2")
	never = append(never, "FAKESECRET-proc-bearer-2")
	rotMu.Lock()
	bearerWant = "Bearer FAKESECRET-proc-bearer-2"
	rotMu.Unlock()
	call("bearer", "echo", echo, http.StatusOK)
	call("bearer_api", "echo_api", map[string]any{"body": echo}, http.StatusOK)

	call("nocred", "echo", echo, http.StatusBadGateway)
	call("refused", "echo", echo, http.StatusBadGateway)

	gw.Stop()
	never = append(never, tokens.Issued()...)
	logs, metrics := gw.Logs(), gw.Stdout()
	if !strings.Contains(metrics, `"_aws"`) || !strings.Contains(logs, `"server_id":"oauth"`) {
		t.Fatalf("the run's logs or metrics were not captured:\nlogs:\n%s\nmetrics:\n%s", logs, metrics)
	}
	if !strings.Contains(logs, "upstream refused the gateway's credential") {
		t.Errorf("the refused credential was not logged:\n%s", logs)
	}

	// What the CLI prints of the servers and their state.
	cli := testkit.Binary(t, "./cmd/mcpgate")
	var printed strings.Builder
	for _, args := range [][]string{{"servers", "list"}, {"servers", "get", "bearer"}, {"servers", "get", "oauth"}, {"status"}} {
		cmd := exec.Command(cli, args...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, rig.Env.Vars()...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("mcpgate %v: %v\n%s", args, err, out)
		}
		printed.Write(out)
	}
	// What the upstreams received: never the agent's key.
	for _, g := range guards {
		if got := g.Carrying(key); len(got) > 0 {
			t.Errorf("the agent's key reached an upstream: %v", got)
		}
	}
	if !strings.Contains(printed.String(), bearerRef) {
		t.Errorf("servers get does not show the reference:\n%s", printed.String())
	}
	for _, v := range never {
		for what, text := range map[string]string{"logs": logs, "metrics": metrics, "CLI output": printed.String()} {
			if strings.Contains(text, v) {
				t.Errorf("the %s show a secret value, token or key (%.12s…)", what, v)
			}
		}
	}
}
