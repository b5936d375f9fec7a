package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/secret/secrettest"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

var stackSeq atomic.Int64

// deployed is a stack in moto's CloudFormation shaped like template.yaml's
// outputs: its tables are a dynalite env's, its log group a real moto log
// group.
type deployed struct {
	name     string
	logGroup string
	// vars point mcpgate at moto and dynalite, with no table names.
	vars map[string]string
}

// deployStack creates, in moto_server's CloudFormation, a stack whose
// outputs name env's tables and a log group it creates.
func deployStack(t *testing.T, env *storetest.Env, outputs bool) deployed {
	t.Helper()
	moto := secrettest.Shared(t)
	name := fmt.Sprintf("mcpgate-t%d-%d", os.Getpid(), stackSeq.Add(1))
	tpl := "Resources:\n  GatewayLogGroup:\n    Type: AWS::Logs::LogGroup\n    Properties:\n      RetentionInDays: 1\n"
	if outputs {
		tpl += fmt.Sprintf(`Outputs:
  GatewayUrl:
    Value: https://abcdefghij.lambda-url.us-east-1.on.aws
  LogGroupName:
    Value: !Ref GatewayLogGroup
  ServersTableName:
    Value: %s
  LeasesTableName:
    Value: %s
  KeysTableName:
    Value: %s
  TasksTableName:
    Value: %s
`, env.Tables.Servers, env.Tables.Leases, env.Tables.Keys, env.Tables.Tasks)
	}
	cf := cloudformation.NewFromConfig(moto.Config(), func(o *cloudformation.Options) { o.BaseEndpoint = aws.String(moto.Endpoint) })
	ctx := context.Background()
	// The name is this test's alone: a stack already there is this create's
	// own, landed by an SDK retry whose first attempt went through.
	var exists *cftypes.AlreadyExistsException
	if _, err := cf.CreateStack(ctx, &cloudformation.CreateStackInput{StackName: aws.String(name), TemplateBody: aws.String(tpl)}); err != nil && !errors.As(err, &exists) {
		t.Fatalf("create stack: %v", err)
	}
	res, err := cf.DescribeStackResource(ctx, &cloudformation.DescribeStackResourceInput{
		StackName: aws.String(name), LogicalResourceId: aws.String("GatewayLogGroup"),
	})
	if err != nil {
		t.Fatalf("describe stack resource: %v", err)
	}
	m := vars(env)
	maps.DeleteFunc(m, func(k, _ string) bool { return strings.HasSuffix(k, "_TABLE") })
	maps.Copy(m, map[string]string{
		"AWS_REGION":                       secrettest.Region,
		"AWS_ENDPOINT_URL_CLOUDFORMATION":  moto.Endpoint,
		"AWS_ENDPOINT_URL_CLOUDWATCH_LOGS": moto.Endpoint,
	})
	return deployed{name: name, logGroup: aws.ToString(res.StackResourceDetail.PhysicalResourceId), vars: m}
}

// TestStackFlag: with --stack (before or after the command) the CLI takes
// the table names from the stack's outputs, and `env --stack` prints them
// as exports a shell can load.
func TestStackFlag(t *testing.T) {
	env := storetest.NewEnv(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "quotes", "url": "https://quotes.example/mcp"})
	s := deployStack(t, env, true)

	// Without table names or a stack, the error says what to give.
	runWith(t, s.vars, "", "servers", "list").fails(t, 1, "SERVERS_TABLE is not set", "--stack NAME")
	for _, args := range [][]string{
		{"--stack", s.name, "servers", "list"},
		{"--stack=" + s.name, "servers", "list"},
		{"servers", "list", "--stack", s.name},
	} {
		if r := runWith(t, s.vars, "", args...).ok(t); !strings.Contains(r.stdout, "quotes") {
			t.Errorf("mcpgate %s does not list the stack's server:\n%s", strings.Join(args, " "), r.stdout)
		}
	}

	r := runWith(t, s.vars, "", "env", "--stack", s.name).ok(t)
	cmd := exec.Command("bash", "-c", `eval "$(cat)" && env -0`)
	cmd.Stdin = strings.NewReader(r.stdout)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("eval of env's output: %v\n%s", err, r.stdout)
	}
	got := map[string]string{}
	for kv := range strings.SplitSeq(string(out), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			got[k] = v
		}
	}
	for k, v := range map[string]string{
		"SERVERS_TABLE": env.Tables.Servers, "LEASES_TABLE": env.Tables.Leases, "KEYS_TABLE": env.Tables.Keys,
		"TASKS_TABLE":       env.Tables.Tasks,
		"MCPGATE_LOG_GROUP": s.logGroup, "MCPGATE_URL": "https://abcdefghij.lambda-url.us-east-1.on.aws",
		"AWS_REGION": secrettest.Region,
	} {
		if got[k] != v {
			t.Errorf("after eval \"$(mcpgate env --stack %s)\": %s=%q, want %q\n%s", s.name, k, got[k], v, r.stdout)
		}
	}
	// The exports alone reach the tables.
	with := merged(s.vars, got)
	if r := runWith(t, with, "", "servers", "list").ok(t); !strings.Contains(r.stdout, "quotes") {
		t.Errorf("servers list with env's exports:\n%s", r.stdout)
	}

	runWith(t, s.vars, "", "env").fails(t, 2, "--stack NAME is required")
	runWith(t, s.vars, "", "--stack", "no-such-stack", "servers", "list").fails(t, 1, `no stack "no-such-stack" in region us-east-1`)
	other := deployStack(t, env, false)
	runWith(t, other.vars, "", "--stack", other.name, "status").fails(t, 1, "has no output KeysTableName, LeasesTableName, ServersTableName", "mcpgate stack")
}

// merged is a with b's entries added.
func merged(a, b map[string]string) map[string]string {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}

// TestRefusalsLogGroup: refusals reads a deployed gateway's log group in
// CloudWatch Logs (moto_server's, holding the lines a Lambda function's log
// has: the gateway's records, EMF metrics, Lambda's own START/END/REPORT),
// named directly or through the stack's LogGroupName output.
func TestRefusalsLogGroup(t *testing.T) {
	env := storetest.NewEnv(t)
	s := deployStack(t, env, true)
	moto := secrettest.Shared(t)
	cw := cloudwatchlogs.NewFromConfig(moto.Config(), func(o *cloudwatchlogs.Options) { o.BaseEndpoint = aws.String(moto.Endpoint) })
	ctx := context.Background()
	stream := "2026/12/03/[$LATEST]0123456789abcdef"
	if _, err := cw.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String(s.logGroup), LogStreamName: aws.String(stream)}); err != nil {
		t.Fatal(err)
	}
	// The fixture's lines, as of the last minute (CloudWatch refuses old
	// events), one millisecond apart.
	f, err := os.Open("testdata/gateway-lambda.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []cwtypes.InputLogEvent
	now := time.Now().Add(-time.Minute)
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		at := now.Add(time.Duration(i) * time.Millisecond)
		line := sc.Text()
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["time"] != nil {
			rec["time"] = at.UTC().Format(time.RFC3339Nano)
			b, _ := json.Marshal(rec)
			line = string(b)
		}
		events = append(events, cwtypes.InputLogEvent{Timestamp: aws.Int64(at.UnixMilli()), Message: aws.String(line)})
	}
	if _, err := cw.PutLogEvents(ctx, &cloudwatchlogs.PutLogEventsInput{
		LogGroupName: aws.String(s.logGroup), LogStreamName: aws.String(stream), LogEvents: events,
	}); err != nil {
		t.Fatal(err)
	}

	type report struct {
		Source   string
		Requests *int
		Refused  int
		Records  []struct {
			RequestID string `json:"request_id"`
			Code      string
			ServerID  string `json:"server_id"`
			Error     string
		}
	}
	read := func(args ...string) report {
		t.Helper()
		r := runWith(t, s.vars, "", append([]string{"refusals", "--json"}, args...)...).ok(t)
		var rep report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v\n%s", err, r.stdout)
		}
		return rep
	}
	codes := func(rep report) string {
		var out []string
		for _, r := range rep.Records {
			out = append(out, r.Code)
		}
		return strings.Join(out, " ")
	}
	want := "UNAUTHORIZED FORBIDDEN QUEUE_TIMEOUT UPSTREAM_ERROR AT_CAPACITY"
	for _, args := range [][]string{{"--log-group", s.logGroup}, {"--stack", s.name}} {
		rep := read(args...)
		if got := codes(rep); got != want || rep.Refused != 5 {
			t.Errorf("refusals %s: %d refused, codes %q, want 5: %q", strings.Join(args, " "), rep.Refused, got, want)
		}
		if rep.Source != "log group "+s.logGroup {
			t.Errorf("refusals %s: source %q", strings.Join(args, " "), rep.Source)
		}
	}
	if rep := read("--log-group", s.logGroup, "--server", "quotes", "--code", "UPSTREAM_ERROR"); codes(rep) != "UPSTREAM_ERROR" ||
		!strings.Contains(rep.Records[0].Error, "connection refused") {
		t.Errorf("refusals --server quotes --code UPSTREAM_ERROR: %+v", rep.Records)
	}
	if rep := read("--log-group", s.logGroup, "--principal", "oauth:af68"); codes(rep) != "FORBIDDEN" {
		t.Errorf("refusals --principal oauth:af68: %q, want FORBIDDEN", codes(rep))
	}
	// MCPGATE_LOG_GROUP, as `mcpgate env --stack` exports it.
	r := runWith(t, merged(s.vars, map[string]string{"MCPGATE_LOG_GROUP": s.logGroup}), "", "refusals", "--since", "5m").ok(t)
	for _, w := range []string{"Refused or failed in log group " + s.logGroup, "QUEUE_TIMEOUT", "4f5a6b7c-8d9e-4fa0-b1c2-e3f4a5b6c7d8", "no slot came free"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("refusals with MCPGATE_LOG_GROUP does not show %q:\n%s", w, r.stdout)
		}
	}
	// Events older than --since are not read.
	if rep := read("--log-group", s.logGroup, "--since", "1s"); rep.Refused != 0 {
		t.Errorf("refusals --since 1s: %d refused, want none (every event is a minute old)", rep.Refused)
	}
	runWith(t, s.vars, "", "refusals").fails(t, 2, "--log FILE", "--log-group NAME", "--stack NAME")
	runWith(t, s.vars, "", "refusals", "--log-group", "no-such-group").fails(t, 1, "read log group no-such-group: ResourceNotFoundException")
}

func TestPrincipalMatches(t *testing.T) {
	// sha256("platform") begins d294fcce0cc88587.
	for _, tc := range []struct {
		got, team, want string
		match           bool
	}{
		{"key:1a2b3c4d5e6f", "", "key:1a2b3c4d5e6f", true},
		{"key:1a2b3c4d5e6f", "", "key:1a2b", true},
		{"key:1a2b3c4d5e6f", "", "k:1a2b3c4d", true},
		{"key:1a2b3c4d5e6f", "", "k:1a2b3c4d5e6f7a8b", true},
		{"key:1a2b3c4d5e6f", "", "k:1a2b3c4d5e6e7a8b", false},
		{"key:1a2b3c4d5e6f", "", "o:1a2b3c4d", false},
		{"oauth:9f8e7d6c5b4a", "", "o:9f8e", true},
		{"key:1a2b3c4d5e6f", "", "k:ffff", false},
		{"", "", "k:1a2b", false},
		{"key:1a2b3c4d5e6f", "platform", "t:d294fcce0cc88587", true},
		{"oauth:9f8e7d6c5b4a", "platform", "t:d294", true},
		{"key:1a2b3c4d5e6f", "other", "t:d294fcce0cc88587", false},
		{"key:1a2b3c4d5e6f", "", "t:d294fcce0cc88587", false},
		{"key:1a2b3c4d5e6f", "", "k:", false},
	} {
		if got := principalMatches(tc.got, tc.team, tc.want); got != tc.match {
			t.Errorf("principalMatches(%q, %q, %q) = %v, want %v", tc.got, tc.team, tc.want, got, tc.match)
		}
	}
}

// TestCodeHints: every code the gateway answers with has a hint.
func TestCodeHints(t *testing.T) {
	for _, c := range fault.Codes() {
		if codeHints[c] == "" {
			t.Errorf("no refusals hint for %s", c)
		}
	}
}
