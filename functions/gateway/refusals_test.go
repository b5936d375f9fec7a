package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestRefusalsFromGatewayLog: `mcpgate refusals` reads a gateway process's
// own log (what make dev keeps in .dev/logs/gateway.log) and lists each
// refused call, and no successful one, grouped by code, server and caller
// with the request ids the callers got in X-Request-Id.
func TestRefusalsFromGatewayLog(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Demo: true})
	rig.PutServer(map[string]any{"server_id": "demo", "url": rig.Demo.URL, "max_concurrent_requests": 1, "on_limit": "shed"})
	rig.PutServer(map[string]any{"server_id": "other", "url": rig.Demo.URL})
	key := rig.PutKey("demo")
	otherKey := rig.PutKey("other")
	gw := rig.StartGateway()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// want is each refused request's id and code; ok the successful ones.
	want := map[string]string{}
	var ok []string
	call := func(key, tool string, args map[string]any, status int, code string) {
		t.Helper()
		r, err := gw.CallTool(ctx, key, "demo", tool, args)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != status {
			t.Fatalf("%s: %d %s, want %d", tool, r.Status, r.Body, status)
		}
		id := r.Header.Get("X-Request-Id")
		if code == "" {
			ok = append(ok, id)
		} else {
			want[id] = code
		}
	}
	call(key, "echo", map[string]any{"text": "hi"}, http.StatusOK, "")
	call("", "echo", map[string]any{"text": "hi"}, http.StatusUnauthorized, "UNAUTHORIZED")
	call(otherKey, "echo", map[string]any{"text": "hi"}, http.StatusForbidden, "FORBIDDEN")
	call(key, "no_such_tool", map[string]any{}, http.StatusNotFound, "NOT_FOUND")
	// The cap of 1 held by a call at a closed gate: the next is shed.
	held := make(chan error, 1)
	go func() {
		r, err := gw.CallTool(ctx, key, "demo", "slow_tool", map[string]any{"ms": 60000, "gate": "hold"})
		if err == nil && r.Status != http.StatusOK {
			err = fmt.Errorf("%d %s", r.Status, r.Body)
		}
		held <- err
	}()
	if err := rig.Demo.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	call(key, "slow_tool", map[string]any{"ms": 0}, http.StatusTooManyRequests, "AT_CAPACITY")
	call(key, "slow_tool", map[string]any{"ms": 0}, http.StatusTooManyRequests, "AT_CAPACITY")
	rig.Demo.OpenGate("hold")
	if err := <-held; err != nil {
		t.Fatalf("held call: %v", err)
	}

	// The request records are logged as each request ends.
	if err := gw.WaitLogs(ctx, func(logs string) bool {
		for id := range want {
			if !strings.Contains(logs, `"request_id":"`+id+`"`) {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "gateway.log")
	if err := os.WriteFile(log, []byte(gw.Logs()), 0o600); err != nil {
		t.Fatal(err)
	}
	mcpgate := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(testkit.Binary(t, "./cmd/mcpgate"), args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mcpgate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	type group struct {
		Code       string
		ServerID   string `json:"server_id"`
		Principal  string
		Count      int
		RequestIDs []string `json:"request_ids"`
	}
	var rep struct {
		Requests *int
		Refused  int
		Groups   []group
		Records  []struct {
			RequestID string `json:"request_id"`
			Code      string
		}
	}
	out := mcpgate(nil, "refusals", "--log", log, "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("refusals --json: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, r := range rep.Records {
		got[r.RequestID] = r.Code
	}
	for id, code := range want {
		if got[id] != code {
			t.Errorf("request %s: listed with code %q, want %q\n%s", id, got[id], code, out)
		}
	}
	for _, id := range ok {
		if _, listed := got[id]; listed {
			t.Errorf("the successful request %s is listed as refused", id)
		}
	}
	if rep.Refused != len(want) || rep.Requests == nil || *rep.Requests < len(want)+len(ok) {
		t.Errorf("refused %d of %v requests, want %d of at least %d", rep.Refused, rep.Requests, len(want), len(want)+len(ok))
	}
	sum := sha256.Sum256([]byte(key))
	principal := "key:" + hex.EncodeToString(sum[:])[:12]
	i := slices.IndexFunc(rep.Groups, func(g group) bool { return g.Code == "AT_CAPACITY" })
	if i < 0 || rep.Groups[i].Count != 2 || rep.Groups[i].ServerID != "demo" || rep.Groups[i].Principal != principal || len(rep.Groups[i].RequestIDs) != 2 {
		t.Errorf("AT_CAPACITY group: %+v, want 2 refusals of %s on demo with their ids", rep.Groups, principal)
	}

	// The text view, narrowed to one code and caller (by the label mcpgate
	// status gives leases), from the file .dev/env names.
	text := mcpgate([]string{"MCPGATE_LOG=" + log}, "refusals", "--code", "at_capacity", "--principal", "k:"+principal[4:12])
	for id, code := range want {
		if shown := strings.Contains(text, id); shown != (code == "AT_CAPACITY") {
			t.Errorf("request %s (%s) shown: %v\n%s", id, code, shown, text)
		}
	}
	for _, s := range []string{"2 AT_CAPACITY", "429", "demo", principal, "What the codes mean", "mcpgate status SERVER"} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), s) {
			t.Errorf("the text view does not show %q:\n%s", s, text)
		}
	}
	if strings.Contains(text, key) || strings.Contains(text, otherKey) {
		t.Errorf("refusals printed a key:\n%s", text)
	}
}
