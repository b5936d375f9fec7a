package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/secret/secrettest"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	storetest.StopShared()
	secrettest.StopShared()
	os.Exit(code)
}

// result is what one mcpgate invocation did.
type result struct {
	code           int
	stdout, stderr string
}

// vars returns env's environment as a map; nil env means an empty
// environment.
func vars(env *storetest.Env) map[string]string {
	m := map[string]string{}
	if env != nil {
		for _, kv := range env.Vars() {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
	}
	return m
}

// runWith runs mcpgate in process with exactly the environment vars.
func runWith(t *testing.T, vars map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb, func(k string) string { return vars[k] })
	return result{code, out.String(), errb.String()}
}

// mcpgate runs mcpgate against env.
func mcpgate(t *testing.T, env *storetest.Env, args ...string) result {
	t.Helper()
	return runWith(t, vars(env), "", args...)
}

// ok fails the test unless r succeeded.
func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

// fails checks r exited with code and that stderr has each of want.
func (r result) fails(t *testing.T, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
		}
	}
}

// serverItem reads a server item directly; nil if absent.
func serverItem(t *testing.T, env *storetest.Env, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(env.Tables.Servers),
		Key:            map[string]types.AttributeValue{store.ServerIDAttr: &types.AttributeValueMemberS{Value: id}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Item) == 0 {
		return nil
	}
	return out.Item
}

// scanAll reads every item of table directly.
func scanAll(t *testing.T, env *storetest.Env, table string) []map[string]types.AttributeValue {
	t.Helper()
	out, err := env.Client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Items
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		// out and err must appear in stdout and stderr.
		out, err string
	}{
		{args: nil, code: 2, err: "Commands:"},
		{args: []string{"help"}, code: 0, out: "Commands:"},
		{args: []string{"-h"}, code: 0, out: "Commands:"},
		{args: []string{"--help"}, code: 0, out: "SERVERS_TABLE"},
		{args: []string{"help", "servers"}, code: 0, out: "servers set"},
		{args: []string{"servers", "-h"}, code: 0, out: "servers put"},
		{args: []string{"help", "keys", "create"}, code: 0, out: "Usage: mcpgate keys create --servers"},
		{args: []string{"help", "nope"}, code: 2, err: `no command "nope"`},
		{args: []string{"nope"}, code: 2, err: `unknown command "nope"`},
		{args: []string{"server", "list"}, code: 2, err: `unknown command "server"; did you mean "servers"?`},
		{args: []string{"--help"}, code: 0, out: "Why was a call refused? 'mcpgate refusals'"},
		{args: []string{"--stack"}, code: 2, err: "--stack needs a stack name"},
		{args: []string{"refusals", "--log", "a", "--log-group", "b"}, code: 2, err: "not both"},
		{args: []string{"servers"}, code: 2, err: "missing subcommand"},
		{args: []string{"servers", "nope"}, code: 2, err: `unknown subcommand "nope"`},
		{args: []string{"servers", "put", "--bogus", "x.json"}, code: 2, err: "flag provided but not defined: -bogus"},
		{args: []string{"servers", "put"}, code: 2, err: "want one FILE"},
		{args: []string{"servers", "get"}, code: 2, err: "want one ID"},
		{args: []string{"servers", "get", "a", "b"}, code: 2, err: "want one ID, got 2"},
		{args: []string{"servers", "list", "extra"}, code: 2, err: `unexpected argument "extra"`},
		{args: []string{"servers", "set", "github"}, code: 2, err: "at least one name=value"},
		{args: []string{"servers", "set", "github", "timeout"}, code: 2, err: `"timeout" is not name=value`},
		{args: []string{"keys", "create"}, code: 2, err: "--servers is required"},
		{args: []string{"keys", "create", "--servers", "bad-id"}, code: 2, err: `--servers: server_id "bad-id" is invalid`},
		{args: []string{"keys", "create", "--servers"}, code: 2, err: "flag needs an argument: -servers"},
		{args: []string{"keys", "revoke", "abc"}, code: 2, err: "at least 8 hex characters"},
		{args: []string{"keys", "revoke", "zzzzzzzz"}, code: 2, err: "at least 8 hex characters"},
		{args: []string{"status", "a", "b"}, code: 2, err: "at most one SERVER_ID"},
		{args: []string{"status", "--json=maybe"}, code: 2, err: "invalid boolean value"},
		{args: []string{"import", "litellm"}, code: 2, err: "want one FILE"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runWith(t, nil, "", tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, tc.out) {
				t.Errorf("stdout does not say %q:\n%s", tc.out, r.stdout)
			}
			if !strings.Contains(r.stderr, tc.err) {
				t.Errorf("stderr does not say %q:\n%s", tc.err, r.stderr)
			}
			if tc.code == 2 && tc.err != "" && !strings.Contains(r.stderr, "Usage:") {
				t.Errorf("a usage error prints no usage:\n%s", r.stderr)
			}
		})
	}
}

// TestEveryCommandHasHelp checks that -h on each command prints its help
// on stdout and exits 0, and that help COMMAND prints the same.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, cmd := range commands {
		t.Run(cmd.name, func(t *testing.T) {
			args := append(strings.Fields(cmd.name), "-h")
			r := runWith(t, nil, "", args...).ok(t)
			if !strings.HasPrefix(r.stdout, "Usage: mcpgate "+cmd.name) || len(r.stdout) < 100 {
				t.Errorf("-h printed:\n%s", r.stdout)
			}
			h := runWith(t, nil, "", append([]string{"help"}, strings.Fields(cmd.name)...)...).ok(t)
			if h.stdout != r.stdout {
				t.Errorf("help %s differs from -h:\n%s\nvs\n%s", cmd.name, h.stdout, r.stdout)
			}
		})
	}
}

func TestMissingEnvironment(t *testing.T) {
	r := runWith(t, nil, "", "servers", "list")
	r.fails(t, 1, "SERVERS_TABLE is not set", "KEYS_TABLE is not set", "for make dev's stack: source .dev/env", "--stack NAME")
	if n := strings.Count(r.stderr, "\n"); n != 1 {
		t.Errorf("got %d lines on stderr, want one:\n%s", n, r.stderr)
	}
	v := vars(storetest.NewEnv(t))
	delete(v, "AWS_REGION")
	runWith(t, v, "", "servers", "list").fails(t, 1, "AWS_REGION")
}

// TestStoreErrorIsShort checks an AWS error reaches the admin as one short
// line: the service's code and message, without request ids or retries.
func TestStoreErrorIsShort(t *testing.T) {
	v := vars(storetest.NewEnv(t))
	v[store.EnvServersTable] = "no-such-table"
	r := runWith(t, v, "", "servers", "list")
	r.fails(t, 1, "mcpgate servers list: scan no-such-table: ResourceNotFoundException")
	if n := strings.Count(r.stderr, "\n"); n != 1 {
		t.Errorf("got %d lines on stderr, want one:\n%s", n, r.stderr)
	}
	for _, noise := range []string{"RequestID", "operation error", "StatusCode", "https response"} {
		if strings.Contains(r.stderr, noise) {
			t.Errorf("stderr carries AWS internals (%q):\n%s", noise, r.stderr)
		}
	}
}

func TestStoreUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	v := vars(storetest.NewEnv(t))
	v["AWS_ENDPOINT_URL_DYNAMODB"] = "http://" + addr
	r := runWith(t, v, "", "keys", "list")
	r.fails(t, 1, "mcpgate keys list: scan "+v[store.EnvKeysTable]+": cannot reach DynamoDB: dial tcp "+addr)
	if n := strings.Count(r.stderr, "\n"); n != 1 || strings.Contains(r.stderr, "operation error") {
		t.Errorf("stderr is not one short line:\n%s", r.stderr)
	}
}

func TestAWSErrorText(t *testing.T) {
	creds := errors.New("operation error DynamoDB: Scan, get identity: get credentials: failed to refresh cached credentials, no EC2 IMDS role found")
	if got := dbErr("scan t", creds).Error(); !strings.HasPrefix(got, "scan t: no usable AWS credentials") || !strings.Contains(got, "no EC2 IMDS role found") {
		t.Errorf("credentials error shown as %q", got)
	}
	long := errors.New(strings.Repeat("x", 500))
	if got := dbErr("scan t", long).Error(); len(got) > 220 {
		t.Errorf("a long error is shown whole (%d bytes)", len(got))
	}
	if got := dbErr("scan t", context.Canceled); got.Error() != "scan t: interrupted" || !errors.Is(got, context.Canceled) {
		t.Errorf("cancellation shown as %q (errors.Is = %v)", got, errors.Is(got, context.Canceled))
	}
}

func TestTablesCreate(t *testing.T) {
	env := storetest.NewEnv(t)
	r := mcpgate(t, env, "tables", "create").ok(t)
	for _, table := range []string{env.Tables.Servers, env.Tables.Leases, env.Tables.Keys, env.Tables.Tasks} {
		if !strings.Contains(r.stdout, table+": already exists") {
			t.Errorf("output does not say %s already exists:\n%s", table, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "no tasks table") {
		t.Errorf("with TASKS_TABLE set, the output says there is no tasks table:\n%s", r.stdout)
	}

	v := vars(env)
	fresh := env.Tables.Servers + "-fresh"
	v[store.EnvServersTable] = fresh
	r = runWith(t, v, "", "tables", "create").ok(t)
	if !strings.Contains(r.stdout, fresh+": created\n") {
		t.Errorf("output does not say %s was created:\n%s", fresh, r.stdout)
	}
	// The leases and tasks tables keep a TTL (the local store has no TTL
	// API: the line says so); the others do not.
	for _, table := range []string{env.Tables.Leases, env.Tables.Tasks, env.Tables.Keys} {
		line := ""
		for l := range strings.SplitSeq(r.stdout, "\n") {
			if strings.HasPrefix(l, table+":") {
				line = l
			}
		}
		if hasTTL := strings.Contains(line, "TTL"); hasTTL != (table != env.Tables.Keys) {
			t.Errorf("%s's line: %q; want a TTL note only for the leases and tasks tables", table, line)
		}
	}
	if got := len(scanAll(t, env, fresh)); got != 0 {
		t.Errorf("fresh table has %d items", got)
	}

	// Without TASKS_TABLE there is no tasks table, and it says so.
	delete(v, store.EnvTasksTable)
	v[store.EnvServersTable] = env.Tables.Servers
	r = runWith(t, v, "", "tables", "create").ok(t)
	if !strings.Contains(r.stdout, "no tasks table: TASKS_TABLE is not set") || strings.Contains(r.stdout, env.Tables.Tasks) {
		t.Errorf("without TASKS_TABLE:\n%s", r.stdout)
	}
	if r := mcpgate(t, env, "servers", "list").ok(t); !strings.Contains(r.stdout, "no servers") {
		t.Errorf("servers list on an empty table:\n%s", r.stdout)
	}
}

// TestUnreachableServiceIsNamed: a network failure names the AWS service
// that could not be reached, not DynamoDB whatever it was: the same
// configuration reaches CloudFormation (--stack) and CloudWatch Logs
// (refusals), each of which may be cut off on its own.
func TestUnreachableServiceIsNamed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	v := map[string]string{
		"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
		"AWS_ENDPOINT_URL_CLOUDFORMATION":  "http://" + addr,
		"AWS_ENDPOINT_URL_CLOUDWATCH_LOGS": "http://" + addr,
	}
	r := runWith(t, v, "", "env", "--stack", "mcpgate")
	r.fails(t, 1, `read stack "mcpgate": cannot reach CloudFormation: dial tcp `+addr)
	if strings.Contains(r.stderr, "DynamoDB") {
		t.Errorf("env --stack blames DynamoDB for CloudFormation:\n%s", r.stderr)
	}
	r = runWith(t, v, "", "refusals", "--log-group", "/aws/lambda/mcpgate")
	r.fails(t, 1, "cannot reach CloudWatch Logs: dial tcp "+addr)
	if strings.Contains(r.stderr, "DynamoDB") {
		t.Errorf("refusals blames DynamoDB for CloudWatch Logs:\n%s", r.stderr)
	}
}

// TestSummariesListEveryFlag: the two summaries of the CLI people read
// without running it, the package documentation (go doc) and the
// operating guide's CLI block (docs/operating.md), give every flag of
// every command, next to that command.
func TestSummariesListEveryFlag(t *testing.T) {
	root, err := storetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	docGo := read("cmd/mcpgate/doc.go")
	_, usage, _ := strings.Cut(docGo, "// Usage:")
	usage, _, _ = strings.Cut(usage, "\n//\n// ")
	guide := read("docs/operating.md")
	_, block, _ := strings.Cut(guide, "\n## The CLI\n")
	_, block, _ = strings.Cut(block, "\n```\n")
	block, _, _ = strings.Cut(block, "\n```")
	flagRE := regexp.MustCompile(`--[a-z][a-z-]*`)
	for name, summary := range map[string]string{"cmd/mcpgate/doc.go": usage, "docs/operating.md": block} {
		// Each "mcpgate <command>" starts a segment that runs to the next.
		segments := strings.Split(summary, "mcpgate ")
		for _, cmd := range commands {
			i := slices.IndexFunc(segments, func(s string) bool { return strings.HasPrefix(s, cmd.name+" ") || strings.HasPrefix(s, cmd.name+"\n") })
			if i < 0 {
				t.Errorf("%s: no summary of mcpgate %s", name, cmd.name)
				continue
			}
			for _, flag := range flagRE.FindAllString(cmd.args, -1) {
				if !strings.Contains(segments[i], flag) {
					t.Errorf("%s: the summary of mcpgate %s lacks %s:\nmcpgate %s", name, cmd.name, flag, segments[i])
				}
			}
		}
	}
}
