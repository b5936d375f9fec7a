package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/auth/authtest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestIdentitiesSideBySide: one gateway process takes keys in each of the
// three headers and OAuth tokens at once, and logs each call's principal,
// never a credential.
func TestIdentitiesSideBySide(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Demo: true})
	rig.PutServer(map[string]any{"server_id": "demo", "url": rig.Demo.URL, "max_concurrent_requests": 4})
	key := rig.PutKey("demo")
	iss := authtest.NewIssuer(t)
	gw := rig.StartGateway("OAUTH_ISSUER=" + iss.URL)
	token := iss.Token("agent-42", gw.URL+"/mcp", "mcp:demo")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(hdr http.Header) testkit.Response {
		t.Helper()
		r, err := testkit.Do(ctx, http.MethodPost, gw.URL+"/mcp-rest/tools/call", hdr,
			map[string]any{"server_id": "demo", "name": "echo", "arguments": map[string]any{"text": "hi"}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for name, hdr := range map[string]http.Header{
		"Authorization: Bearer key":   {"Authorization": {"Bearer " + key}},
		"X-Api-Key":                   {"X-Api-Key": {key}},
		"x-litellm-api-key":           {"X-Litellm-Api-Key": {"Bearer " + key}},
		"Authorization: Bearer token": {"Authorization": {"Bearer " + token}},
	} {
		if r := call(hdr); r.Status != http.StatusOK {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	if r := call(http.Header{"Authorization": {"Bearer " + token}, "X-Api-Key": {key}}); r.Status != http.StatusUnauthorized {
		t.Errorf("a token and a key at once: %d %s, want 401", r.Status, r.Body)
	}

	// A request's record is logged as its answer goes out: once the
	// process has stopped, every record has been read.
	gw.Stop()
	principals := map[string]int{}
	for _, rec := range gw.Records(requestRecords, testkit.Match{"status": strconv.Itoa(http.StatusOK)}) {
		kind, _, _ := strings.Cut(testkit.Str(rec, "principal"), ":")
		principals[kind]++
		if sub := testkit.Str(rec, "sub"); kind == "oauth" && sub != "agent-42" {
			t.Errorf("token call logged with sub %q", sub)
		}
	}
	if principals["key"] != 3 || principals["oauth"] != 1 {
		t.Errorf("principals logged %v, want 3 key and 1 oauth", principals)
	}
	if logs := gw.Logs(); strings.Contains(logs, key) || strings.Contains(logs, token) {
		t.Error("a credential appears in the gateway's log")
	}
}

// TestStatusShowsPrincipal: while a token's call holds a slot, mcpgate
// status names the token's principal as the lease's caller: the logged
// principal cut to its kind's first letter and 8 characters ("o:1a2b3c4d"
// for "oauth:1a2b3c4d5e6f"), which is what a lease item pays for.
func TestStatusShowsPrincipal(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Demo: true})
	rig.PutServer(map[string]any{"server_id": "demo", "url": rig.Demo.URL, "max_concurrent_requests": 1})
	iss := authtest.NewIssuer(t)
	gw := rig.StartGateway("OAUTH_ISSUER=" + iss.URL)
	token := iss.Token("agent-42", gw.URL+"/mcp", "mcp:demo")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := make(chan testkit.Response, 1)
	go func() {
		r, _ := testkit.Do(ctx, http.MethodPost, gw.URL+"/mcp-rest/tools/call", http.Header{"Authorization": {"Bearer " + token}},
			map[string]any{"server_id": "demo", "name": "slow_tool", "arguments": map[string]any{"ms": 60000, "gate": "g"}})
		held <- r
	}()
	if err := rig.Demo.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	var callers []string
	for _, ls := range statusLeases(t, rig.Env, "demo") {
		callers = append(callers, ls.Caller)
	}
	rig.Demo.OpenGate("g")
	if r := <-held; r.Status != http.StatusOK {
		t.Fatalf("held call: %d %s", r.Status, r.Body)
	}
	gw.Stop() // every request record read
	var logged string
	for _, rec := range gw.Records(requestRecords, testkit.Match{"tool": "slow_tool"}) {
		logged = testkit.Str(rec, "principal")
	}
	// The label keeps 16 hex characters of the principal's hash; the
	// logged id, 12 of them.
	if !strings.HasPrefix(logged, "oauth:") || len(callers) != 1 || len(callers[0]) != len("o:")+16 ||
		!strings.HasPrefix(strings.TrimPrefix(callers[0], "o:"), strings.TrimPrefix(logged, "oauth:")) {
		t.Errorf("status callers %q while the token's call held the slot; logged principal %q", callers, logged)
	}
}
