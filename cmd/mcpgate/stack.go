package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/smithy-go"

	"github.com/mcpgate/mcpgate/internal/store"
)

var envCmd = &command{
	name:    "env",
	args:    "--stack NAME",
	summary: "print the exports that point this shell at a deployed stack",
	help: `
Reads the outputs of the CloudFormation stack NAME (what sam deploy
created from template.yaml) and prints shell exports for it: the table
names, the log group, the gateway's URL and the region. Load them
into the shell with:

  eval "$(mcpgate env --stack NAME)"

Every later mcpgate command then works on that stack, as would the AWS
CLI on its tables. Without it, give any command --stack NAME (before or
after the command: mcpgate --stack NAME status), which reads the same
outputs each time.

The region is the AWS SDK's: AWS_REGION, or the profile's. Credentials
come from the usual chain (AWS_PROFILE, ...). A shell that sourced
.dev/env still has its local endpoint and fake credentials: the stack
cannot be read there, so use a fresh shell.

Flags:
  --stack NAME   the CloudFormation stack (required)
`,
	run: runEnv,
}

// Stack outputs the CLI reads (template.yaml's Outputs).
const (
	outServers = "ServersTableName"
	outLeases  = "LeasesTableName"
	outKeys    = "KeysTableName"
	// outTasks is optional: stacks from before tasks have none.
	outTasks    = "TasksTableName"
	outLogGroup = "LogGroupName"
	outURL      = "GatewayUrl"
)

// Where refusals reads the gateway's log: a file (make dev's .dev/env sets
// it) or a CloudWatch log group (mcpgate env prints it).
const (
	envLog      = "MCPGATE_LOG"
	envLogGroup = "MCPGATE_LOG_GROUP"
)

// stackAPI is the CloudFormation operation the CLI uses.
type stackAPI interface {
	DescribeStacks(ctx context.Context, in *cloudformation.DescribeStacksInput, optFns ...func(*cloudformation.Options)) (*cloudformation.DescribeStacksOutput, error)
}

var _ stackAPI = (*cloudformation.Client)(nil)

// stackInfo is what the CLI needs of a deployed stack.
type stackInfo struct {
	Name, Region string
	Tables       store.Tables
	LogGroup     string
	URL          string
}

// readStack reads the outputs of the stack named by --stack.
func (c *cli) readStack() (*stackInfo, error) {
	if c.stackInfo != nil {
		return c.stackInfo, nil
	}
	cfg, err := c.awsConfig()
	if err != nil {
		return nil, err
	}
	cf := cloudformation.NewFromConfig(cfg, func(o *cloudformation.Options) {
		c.setEndpoint(&o.BaseEndpoint, "AWS_ENDPOINT_URL_CLOUDFORMATION")
	})
	if v := c.getenv("AWS_ENDPOINT_URL_DYNAMODB"); v != "" && localEndpoint(v) {
		fmt.Fprintf(c.stderr, "mcpgate: note: AWS_ENDPOINT_URL_DYNAMODB=%s sends the table commands to that local store, not to stack %q's tables (a shell that sourced .dev/env?)\n", v, c.stack)
	}
	s, err := describeStack(c, cf, c.stack, cfg.Region)
	if err != nil {
		return nil, err
	}
	c.stackInfo = s
	return s, nil
}

func describeStack(c *cli, cf stackAPI, name, region string) (*stackInfo, error) {
	out, err := cf.DescribeStacks(c.ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
	if err != nil {
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() == "ValidationError" && strings.Contains(api.ErrorMessage(), "does not exist") {
			return nil, fmt.Errorf("no stack %q in region %s (set AWS_REGION or the profile's region to the stack's)", name, region)
		}
		return nil, fmt.Errorf("read stack %q: %w", name, c.awsHint(&awsError{err}))
	}
	if len(out.Stacks) == 0 {
		return nil, fmt.Errorf("no stack %q in region %s", name, region)
	}
	st := out.Stacks[0]
	outputs := map[string]string{}
	for _, o := range st.Outputs {
		outputs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	var missing []string
	for _, k := range []string{outServers, outLeases, outKeys} {
		if outputs[k] == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("stack %q (%s) has no output %s: is it an mcpgate stack, deployed from template.yaml?",
			name, st.StackStatus, strings.Join(missing, ", "))
	}
	return &stackInfo{
		Name:   name,
		Region: region,
		Tables: store.Tables{Servers: outputs[outServers], Leases: outputs[outLeases], Keys: outputs[outKeys], Tasks: outputs[outTasks]},
		// Older stacks may lack these two (and the tasks table); the
		// commands that need them say so.
		LogGroup: outputs[outLogGroup],
		URL:      outputs[outURL],
	}, nil
}

// localEndpoint reports whether the endpoint URL is on this machine, as
// make dev's store is.
func localEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	switch h := u.Hostname(); h {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// awsHint adds to an AWS error the likely reason when the shell still holds
// make dev's settings: its fake credentials are refused by AWS.
func (c *cli) awsHint(err error) error {
	if c.getenv("AWS_ACCESS_KEY_ID") == "local" && c.getenv("AWS_SECRET_ACCESS_KEY") == "local" {
		return fmt.Errorf("%w (this shell has make dev's fake credentials from .dev/env: use a fresh shell)", err)
	}
	return err
}

func runEnv(c *cli, args []string) error {
	pos, err := c.parse(c.newFlags(), args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("want no arguments, got %d", len(pos))
	}
	if c.stack == "" {
		return usagef("--stack NAME is required")
	}
	s, err := c.readStack()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "# mcpgate stack %s in %s, from its CloudFormation outputs\n", s.Name, s.Region)
	vars := [][2]string{
		{"AWS_REGION", s.Region},
		{store.EnvServersTable, s.Tables.Servers},
		{store.EnvLeasesTable, s.Tables.Leases},
		{store.EnvKeysTable, s.Tables.Keys},
		{store.EnvTasksTable, s.Tables.Tasks},
		{envLogGroup, s.LogGroup},
		{"MCPGATE_URL", s.URL},
	}
	for _, kv := range vars {
		if kv[1] != "" {
			fmt.Fprintf(c.stdout, "export %s=%s\n", kv[0], shellQuote(kv[1]))
		}
	}
	return nil
}

// shellQuote quotes s for a POSIX shell, unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@=+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
