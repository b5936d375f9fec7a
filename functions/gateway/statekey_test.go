package main

// TestRequestStateKeyFromSecretsManager: the fleet's request-state key is
// read from Secrets Manager (moto_server on loopback) with the AWS SDK; a
// state sealed by one gateway process opens on another that read the same
// secret, and references in any other form are refused at start; no
// server's credential can be that key.

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/secret/secrettest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

func TestRequestStateKeyFromSecretsManager(t *testing.T) {
	moto := secrettest.Shared(t)
	name := secrettest.Name("request-state")
	arn := moto.PutSecret(t, name, strings.Repeat("z", 48))
	cfg := func(ref string) config.Config {
		return config.Config{RequestStateKey: ref}
	}
	log := slog.New(slog.DiscardHandler)
	for _, ref := range []string{"secretsmanager:" + name, "secretsmanager:" + arn} {
		if s, _, err := requestStates(t.Context(), cfg(ref), moto.Resolver(secret.Options{}), log); err != nil || s == nil {
			t.Errorf("%s: %v", ref, err)
		}
	}
	for _, ref := range []string{"secretsmanager:no-such-secret", "plain-secret-value", "vault:x", "env:UNSET_VAR"} {
		if _, _, err := requestStates(t.Context(), cfg(ref), moto.Resolver(secret.Options{}), log); err == nil {
			t.Errorf("%s: read without error", ref)
		} else if strings.Contains(err.Error(), "plain-secret-value") {
			t.Errorf("%s: the error shows the value: %v", ref, err)
		}
	}

	// Two processes that read the secret share request states.
	rig := testkit.NewRig(t, testkit.RigOptions{})
	up := startConfirmUpstream(t)
	rig.PutServer(map[string]any{"server_id": "mrtr", "url": up.URL})
	key := rig.PutKey("mrtr")
	extra := append([]string{"REQUEST_STATE_KEY=secretsmanager:" + arn}, moto.Vars()...)
	a := rig.StartGateway(extra...)
	b := rig.StartGateway(extra...)
	elicit := map[string]any{"elicitation": map[string]any{}}
	first := callRaw(t, a.URL+"/mcp/mrtr", key, "2026-07-28", "confirm", map[string]any{"item": "s"}, elicit, nil, "")
	if first.Result.RequestState == "" {
		t.Fatalf("first call: %+v", first)
	}
	r := callRaw(t, b.URL+"/mcp/mrtr", key, "2026-07-28", "confirm", map[string]any{"item": "s"}, elicit, accept, first.Result.RequestState)
	if r.Error != nil || len(r.Result.Content) != 1 || r.Result.Content[0].Text != "confirmed s" {
		t.Errorf("retry on the other process: %+v", r)
	}

	// No server may have the key sent upstream: not by the reference the
	// gateway reads it with, nor by the secret's name, nor by another
	// secret holding the same value.
	stateValue := strings.Repeat("z", 48)
	copyName := secrettest.Name("request-state-copy")
	moto.PutSecret(t, copyName, stateValue)
	demo, guard := testkit.StartGuardedDemo(t, func(*http.Request, []byte) bool { return true })
	for id, ref := range map[string]string{"by_arn": "secretsmanager:" + arn, "by_name": "secretsmanager:" + name, "by_copy": "secretsmanager:" + copyName} {
		rig.PutServer(map[string]any{"server_id": id, "url": demo.URL, "auth": map[string]any{"type": "bearer", "secret": ref}})
		thief := rig.PutKey(id)
		r, err := a.CallTool(t.Context(), thief, id, "echo", map[string]any{"text": "x"})
		if err != nil || r.Status != http.StatusBadGateway || !strings.Contains(string(r.Body), "SERVER_MISCONFIGURED") {
			t.Errorf("%s: %v %d %s; want SERVER_MISCONFIGURED", id, err, r.Status, r.Body)
		}
	}
	if sent := guard.Carrying(stateValue); len(sent) != 0 || len(guard.Seen()) != 0 {
		t.Errorf("the request-state key went upstream: %v (%d requests)", sent, len(guard.Seen()))
	}
	if strings.Contains(a.Logs(), stateValue) {
		t.Error("the gateway logged the request-state key")
	}

	// A reference that cannot be read stops the gateway at start.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testkit.GatewayBinary(t))
	cmd.Env = append(append(append(os.Environ(), rig.Env.Vars()...), moto.Vars()...), "GATEWAY_ADDR=127.0.0.1:0", "REQUEST_STATE_KEY=secretsmanager:missing")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "REQUEST_STATE_KEY") {
		t.Errorf("gateway with an unreadable key: %v\n%s", err, out)
	}
}
