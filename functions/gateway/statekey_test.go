package main

// TestRequestStateKeyFromSecretsManager: the fleet's request-state key is
// read from Secrets Manager (moto_server on loopback) with the AWS SDK; a
// state sealed by one gateway process opens on another that read the same
// secret, and references in any other form are refused at start.

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// startMoto runs moto_server (python3 moto: a real Secrets Manager over
// HTTP) on a free loopback port until the test ends, and returns its URL.
func startMoto(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("skipping: moto_server (python3 moto) is not installed")
		}
		t.Fatal("moto_server is not installed")
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", "0")
	storetest.SetParentDeathSignal(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, url, ok := strings.Cut(sc.Text(), "Running on "); ok {
				select {
				case found <- strings.TrimSpace(url):
				default:
				}
			}
		}
	}()
	select {
	case url := <-found:
		return url
	case <-time.After(30 * time.Second):
		t.Fatal("moto_server did not start within 30s")
	}
	return ""
}

func TestRequestStateKeyFromSecretsManager(t *testing.T) {
	moto := startMoto(t)
	awsEnv := map[string]string{
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": moto, "AWS_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
	}
	for k, v := range awsEnv {
		t.Setenv(k, v)
	}
	sm, err := newSecretsClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	created, err := sm.(*secretsmanager.Client).CreateSecret(t.Context(), &secretsmanager.CreateSecretInput{
		Name: aws.String("mcpgate/request-state"), SecretString: aws.String(strings.Repeat("z", 48)),
	})
	if err != nil {
		t.Fatal(err)
	}

	getenv := func(string) string { return "" }
	for _, ref := range []string{"secretsmanager:mcpgate/request-state", "secretsmanager:" + aws.ToString(created.ARN)} {
		got, err := readSecret(t.Context(), ref, getenv, newSecretsClient)
		if err != nil || string(got) != strings.Repeat("z", 48) {
			t.Errorf("%s: %q, %v", ref, got, err)
		}
	}
	for _, ref := range []string{"secretsmanager:no-such-secret", "plain-secret-value", "vault:x", "env:UNSET_VAR"} {
		if _, err := readSecret(t.Context(), ref, getenv, newSecretsClient); err == nil {
			t.Errorf("%s: read without error", ref)
		} else if strings.Contains(err.Error(), "plain-secret-value") {
			t.Errorf("%s: the error shows the value: %v", ref, err)
		}
	}

	// Two processes that read the secret share request states.
	env := storetest.NewEnv(t)
	up := startConfirmUpstream(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "mrtr", "url": up.URL})
	key := testkit.PutKey(t, env, "mrtr")
	extra := []string{"REQUEST_STATE_KEY=secretsmanager:" + aws.ToString(created.ARN)}
	for k, v := range awsEnv {
		if k != "AWS_REGION" { // the store's environment sets it
			extra = append(extra, k+"="+v)
		}
	}
	a := testkit.StartGateway(t, env, extra...)
	b := testkit.StartGateway(t, env, extra...)
	elicit := map[string]any{"elicitation": map[string]any{}}
	first := callRaw(t, a.URL+"/mcp/mrtr", key, "2026-07-28", "confirm", map[string]any{"item": "s"}, elicit, nil, "")
	if first.Result.RequestState == "" {
		t.Fatalf("first call: %+v", first)
	}
	r := callRaw(t, b.URL+"/mcp/mrtr", key, "2026-07-28", "confirm", map[string]any{"item": "s"}, elicit, accept, first.Result.RequestState)
	if r.Error != nil || len(r.Result.Content) != 1 || r.Result.Content[0].Text != "confirmed s" {
		t.Errorf("retry on the other process: %+v", r)
	}

	// A reference that cannot be read stops the gateway at start.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testkit.GatewayBinary(t))
	cmd.Env = append(append(os.Environ(), env.Vars()...), "GATEWAY_ADDR=127.0.0.1:0", "REQUEST_STATE_KEY=secretsmanager:missing")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "REQUEST_STATE_KEY") {
		t.Errorf("gateway with an unreadable key: %v\n%s", err, out)
	}
}
