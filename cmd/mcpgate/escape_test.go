package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestTextViewsEscape: what a log or an item holds (an agent's text in a
// request record, an admin's or an intruder's in a server or key item, a
// lease's holder, instance and tool) is printed escaped by refusals,
// status, servers and keys, text and JSON views alike; a JSON view read
// back gives the exact values.
func TestTextViewsEscape(t *testing.T) {
	const bad = "\x1b]0;owned\x07\x1b[2J\x1b[1A\x7f\u009b2J\u202eKO\u2066\u200f\r\n"
	env := storetest.NewEnv(t)
	ctx := context.Background()
	testkit.PutServer(t, env, map[string]any{"server_id": "ok", "url": "https://example.com/mcp", "max_concurrent_requests": 2, "description": bad})
	testkit.PutServer(t, env, map[string]any{"server_id": "bad" + bad, "url": "https://example.com/" + bad + "?token=s3cr3t", "max_concurrent_requests": 1})
	item := auth.KeyItem(&auth.Key{Hash: auth.HashKey(auth.NewKey()), Name: "name" + bad, Servers: []string{"ok", "s" + bad}}, time.Now())
	if _, err := env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(env.Tables.Keys), Item: item}); err != nil {
		t.Fatal(err)
	}
	ls, err := lease.New(env.Client, env.Tables.Leases, lease.Options{InstanceID: "inst" + bad}).
		Acquire(ctx, lease.Request{Key: "ok", Cap: 2, Tool: "t" + bad, ToolCap: 1, Hold: time.Hour, Holder: "k:ok"})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Finish(ctx, lease.Success)

	var log strings.Builder
	for _, rec := range []map[string]any{
		{"time": time.Now().UTC(), "msg": "request", "request_id": "r1" + bad, "status": 403, "code": "FORBIDDEN", "server_id": "demo" + bad, "principal": "key:" + bad},
		{"time": time.Now().UTC(), "msg": "request", "request_id": "r2", "status": 404, "code": "NOT_FOUND" + bad, "server_id": "demo", "tool": "echo" + bad,
			"error": "upstream said " + bad + " at https://up.example/x?token=s3cr3t"},
	} {
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		log.Write(append(b, '\n'))
	}
	logFile := filepath.Join(t.TempDir(), "gateway.log")
	if err := os.WriteFile(logFile, []byte(log.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		// shows: the output names something hostile, escaped.
		shows bool
	}{
		{[]string{"refusals", "--log", logFile, "--since", "0"}, true},
		{[]string{"refusals", "--log", logFile, "--since", "0", "--json"}, true},
		{[]string{"status"}, true},
		{[]string{"status", "--json"}, true},
		{[]string{"status", "bad" + bad}, true},
		{[]string{"servers", "list"}, true},
		{[]string{"servers", "get", "ok"}, true},
		{[]string{"servers", "get", "bad" + bad}, true},
		{[]string{"keys", "list"}, true},
		{[]string{"keys", "revoke", "nothing" + bad}, false},
	} {
		r := mcpgate(t, env, tc.args...)
		out := r.stdout + r.stderr
		for _, c := range out {
			if c != '\n' && clip.IsEscaped(c) {
				t.Errorf("mcpgate %q prints %U unescaped: %q", tc.args, c, out)
				break
			}
		}
		if strings.Contains(out, "s3cr3t") {
			t.Errorf("mcpgate %q prints a URL's token: %q", tc.args, out)
		}
		if tc.shows && !strings.Contains(out, `\u001b]0;owned`) {
			t.Errorf("mcpgate %q does not show the hostile text escaped: %q", tc.args, out)
		}
	}

	// JSON views read back exact.
	r := mcpgate(t, env, "servers", "get", "ok").ok(t)
	var doc map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc["description"] != bad {
		t.Errorf("servers get: description %q (%v), want the item's own %q", doc["description"], err, bad)
	}
	r = mcpgate(t, env, "refusals", "--log", logFile, "--since", "0", "--json").ok(t)
	var rep refusalsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Records) != 2 || rep.Records[0].ServerID != "demo"+bad {
		t.Errorf("refusals --json read back: %v, %+v", err, rep.Records)
	}
}
