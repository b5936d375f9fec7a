package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/safeurl"
	"github.com/mcpgate/mcpgate/internal/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// command is one subcommand: its name as typed ("servers put"), a one-line
// summary for the overview, and a help text a person can act on.
type command struct {
	name    string
	args    string // synopsis after the name, e.g. "FILE [--if-absent]"
	summary string
	help    string
	run     func(c *cli, args []string) error
}

// commands lists every subcommand, in the order help shows them.
var commands = []*command{
	tablesCreateCmd,
	serversPutCmd, serversGetCmd, serversListCmd, serversDeleteCmd, serversSetCmd, serversCheckCmd,
	keysCreateCmd, keysListCmd, keysRevokeCmd,
	statusCmd, refusalsCmd, consoleCmd,
	importLiteLLMCmd,
	envCmd,
}

// cli is one invocation: its streams, environment and, once a command needs
// the store, the DynamoDB client and table names.
type cli struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	cmd            *command

	db     *dynamodb.Client
	tables store.Tables

	// stack is --stack: the CloudFormation stack whose outputs name the
	// tables and log group, instead of the environment; stackInfo is what
	// was read of it.
	stack     string
	stackInfo *stackInfo
	awsCfg    *aws.Config
}

// usageError is a mistake in how the command was invoked: it prints the
// command's usage and exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := &cli{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	args, err := c.globalFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "mcpgate: %s\n\n%s", oneLine(err.Error()), overview())
		return exitUsage
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, overview())
		return exitUsage
	}
	if isHelp(args[0]) || args[0] == "help" {
		return c.help(args[1:])
	}
	cmd, rest := lookup(args)
	if cmd == nil {
		if group := groupOf(args[0]); group != "" {
			if len(args) > 1 && isHelp(args[1]) {
				fmt.Fprint(stdout, groupHelp(group))
				return exitOK
			}
			if len(args) == 1 {
				fmt.Fprintf(stderr, "mcpgate %s: missing subcommand\n\n%s", group, groupHelp(group))
			} else {
				fmt.Fprintf(stderr, "mcpgate %s: unknown subcommand %q\n\n%s", group, args[1], groupHelp(group))
			}
			return exitUsage
		}
		if near := nearestCommand(args[0]); near != "" {
			help := groupHelp(near)
			if cmd, _ := lookup([]string{near}); cmd != nil {
				help = cmdHelp(cmd)
			}
			fmt.Fprintf(stderr, "mcpgate: unknown command %q; did you mean %q?\n\n%s", args[0], near, help)
			return exitUsage
		}
		fmt.Fprintf(stderr, "mcpgate: unknown command %q\n\n%s", args[0], overview())
		return exitUsage
	}
	c.cmd = cmd
	err = cmd.run(c, rest)
	var uerr *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, cmdHelp(cmd))
		return exitOK
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "mcpgate %s: %s\n\n%s", cmd.name, oneLine(uerr.msg), cmdHelp(cmd))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "mcpgate %s: %s\n", cmd.name, oneLine(err.Error()))
		return exitFail
	}
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// globalFlags takes the flags given before the command (--stack NAME) off
// args.
func (c *cli) globalFlags(args []string) ([]string, error) {
	for len(args) > 0 {
		switch a := args[0]; {
		case a == "--stack" || a == "-stack":
			if len(args) < 2 || args[1] == "" {
				return nil, errors.New("--stack needs a stack name")
			}
			c.stack, args = args[1], args[2:]
		case strings.HasPrefix(a, "--stack=") || strings.HasPrefix(a, "-stack="):
			_, c.stack, _ = strings.Cut(a, "=")
			args = args[1:]
		default:
			return args, nil
		}
	}
	return args, nil
}

// lookup finds the command named by the first one or two words of args.
func lookup(args []string) (*command, []string) {
	for _, cmd := range commands {
		words := strings.Fields(cmd.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == cmd.name {
			return cmd, args[len(words):]
		}
	}
	return nil, nil
}

// nearestCommand returns the first word of a command that word is likely
// a slip for ("server" for "servers"), or "".
func nearestCommand(word string) string {
	best, bestDist := "", 3
	for _, cmd := range commands {
		first, _, _ := strings.Cut(cmd.name, " ")
		if d := editDistance(strings.ToLower(word), first); d < bestDist && d < len(first)/2 {
			best, bestDist = first, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// groupOf returns word if it is the first word of a two-word command.
func groupOf(word string) string {
	for _, cmd := range commands {
		if g, _, ok := strings.Cut(cmd.name, " "); ok && g == word {
			return g
		}
	}
	return ""
}

func (c *cli) help(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stdout, overview())
		return exitOK
	}
	if cmd, rest := lookup(args); cmd != nil && len(rest) == 0 {
		fmt.Fprint(c.stdout, cmdHelp(cmd))
		return exitOK
	}
	if group := groupOf(args[0]); group != "" && len(args) == 1 {
		fmt.Fprint(c.stdout, groupHelp(group))
		return exitOK
	}
	fmt.Fprintf(c.stderr, "mcpgate help: no command %q\n\n%s", strings.Join(args, " "), overview())
	return exitUsage
}

const envHelp = `Environment:
  SERVERS_TABLE, LEASES_TABLE, KEYS_TABLE   the gateway's table names (required without --stack)
  TASKS_TABLE                               the tasks table (optional; tables create makes it when set)
  AWS_REGION                                AWS region (else the profile's region)
  AWS_ENDPOINT_URL_DYNAMODB                 a local endpoint, e.g. http://127.0.0.1:8000
  AWS_PROFILE, AWS_ACCESS_KEY_ID, ...       credentials, as for any AWS SDK tool
  MCPGATE_LOG, MCPGATE_LOG_GROUP            where refusals reads the gateway's log (a file; a log group)
  MCPGATE_AUDIT_LOG                         where a local console writes its audit records

Global flag:
  --stack NAME   read the table names and log group from the outputs of the
                 CloudFormation stack NAME (sam deploy's) instead of the
                 environment; 'mcpgate env --stack NAME' prints them as exports
`

func overview() string {
	var b strings.Builder
	b.WriteString("mcpgate administers the MCP gateway's DynamoDB tables.\n\nUsage: mcpgate COMMAND [ARGS]\n\nCommands:\n")
	listCommands(&b, "")
	b.WriteString("\nRun 'mcpgate help COMMAND' (or 'mcpgate COMMAND -h') for its arguments and flags.\n")
	b.WriteString("Why was a call refused? 'mcpgate refusals' lists recent refusals and failures\n")
	b.WriteString("by server, caller and code, with request ids, from the gateway's log.\n\n")
	b.WriteString(envHelp)
	return b.String()
}

func groupHelp(group string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: mcpgate %s SUBCOMMAND [ARGS]\n\nSubcommands:\n", group)
	listCommands(&b, group+" ")
	fmt.Fprintf(&b, "\nRun 'mcpgate help %s SUBCOMMAND' for its arguments and flags.\n", group)
	return b.String()
}

// listCommands writes the name and summary of each command whose name
// starts with prefix, aligned.
func listCommands(b *strings.Builder, prefix string) {
	tw := tabwriter.NewWriter(b, 0, 4, 3, ' ', 0)
	for _, cmd := range commands {
		if strings.HasPrefix(cmd.name, prefix) {
			fmt.Fprintf(tw, "  %s\t%s\n", cmd.name, cmd.summary)
		}
	}
	if prefix == "" {
		fmt.Fprintf(tw, "  help [COMMAND]\tshow how to use a command\n")
	}
	tw.Flush()
}

func cmdHelp(cmd *command) string {
	return fmt.Sprintf("Usage: mcpgate %s %s\n\n%s\n", cmd.name, cmd.args, strings.TrimSpace(cmd.help))
}

// parse parses the command's flags, which may come before, between or
// after its positional arguments ("--" ends the flags), and returns the
// positional arguments.
func (c *cli) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// newFlags returns a flag set for the command, with the global --stack.
func (c *cli) newFlags() *flag.FlagSet {
	fs := flag.NewFlagSet(c.cmd.name, flag.ContinueOnError)
	fs.StringVar(&c.stack, "stack", c.stack, "")
	return fs
}

// open reads the table names (from the environment, or from the stack's
// outputs with --stack) and builds the DynamoDB client.
func (c *cli) open() error {
	var tables store.Tables
	if c.stack != "" {
		s, err := c.readStack()
		if err != nil {
			return err
		}
		tables = s.Tables
	} else {
		t, err := store.TablesFromEnv(c.getenv)
		if err != nil {
			return fmt.Errorf("%w (for make dev's stack: source .dev/env; for a deployed one: --stack NAME)", err)
		}
		tables = t
	}
	cfg, err := c.awsConfig()
	if err != nil {
		return err
	}
	// The endpoint is DynamoDB's alone: the same configuration reaches
	// CloudFormation and CloudWatch Logs.
	c.setEndpoint(&cfg.BaseEndpoint, "AWS_ENDPOINT_URL_DYNAMODB")
	c.db, c.tables = store.NewClientFromConfig(cfg), tables
	return nil
}

// setEndpoint sets *endpoint, one service client's base endpoint, to the
// variable name (AWS_ENDPOINT_URL_<SERVICE>, read through getenv) when it
// is set, and leaves the SDK's otherwise.
func (c *cli) setEndpoint(endpoint **string, name string) {
	if v := c.getenv(name); v != "" {
		*endpoint = aws.String(v)
	}
}

// awsConfig loads the AWS SDK's configuration once: the standard variables
// read through getenv, which must name a region (or a profile with one).
func (c *cli) awsConfig() (aws.Config, error) {
	if c.awsCfg == nil {
		cfg, err := store.LoadConfig(c.ctx, awsBaseOptions(c.getenv)...)
		if err != nil {
			return aws.Config{}, err
		}
		c.awsCfg = &cfg
	}
	return *c.awsCfg, nil
}

// awsBaseOptions hands the standard AWS variables read through getenv to
// the SDK, which otherwise reads the process environment itself; with
// os.Getenv they change nothing. Service endpoints are each client's own.
func awsBaseOptions(getenv func(string) string) []func(*config.LoadOptions) error {
	var opts []func(*config.LoadOptions) error
	if v := getenv("AWS_REGION"); v != "" {
		opts = append(opts, config.WithRegion(v))
	}
	if v := getenv("AWS_PROFILE"); v != "" {
		opts = append(opts, config.WithSharedConfigProfile(v))
	}
	if id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(id, secret, getenv("AWS_SESSION_TOKEN"))))
	}
	return opts
}

// awsError shortens an AWS client error to what an admin can act on
// (the service's error code and message, or the network failure), keeping
// the full error for errors.As and errors.Is.
type awsError struct{ err error }

func (e *awsError) Error() string {
	var api smithy.APIError
	var op *net.OpError
	msg := e.err.Error()
	switch {
	case strings.Contains(msg, "get credentials: "):
		// The SDK has no error type for this; its chain of providers is
		// in the message.
		_, detail, _ := strings.Cut(msg, "get credentials: ")
		return "no usable AWS credentials (set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY): " + clip.String(detail, 120)
	case errors.As(e.err, &api):
		return api.ErrorCode() + ": " + api.ErrorMessage()
	case errors.As(e.err, &op):
		// Name the service that could not be reached: the same
		// configuration reaches DynamoDB, CloudFormation and
		// CloudWatch Logs, and each may be cut off on its own.
		service := "AWS"
		var oe *smithy.OperationError
		if errors.As(e.err, &oe) && oe.ServiceID != "" {
			service = oe.ServiceID
		}
		return "cannot reach " + service + ": " + op.Error()
	case errors.Is(e.err, context.Canceled):
		return "interrupted"
	case errors.Is(e.err, context.DeadlineExceeded):
		return "timed out"
	}
	return clip.String(msg, clip.Message)
}

func (e *awsError) Unwrap() error { return e.err }

// dbErr wraps a DynamoDB client error with a short context.
func dbErr(context string, err error) error {
	return fmt.Errorf("%s: %w", context, &awsError{err})
}

// oneLine is a message (an error's text, a logged error) as the CLI
// prints it: its lines (errors.Join) joined with "; ", any URL in it
// redacted (safeurl.RedactText) and what is left escaped (clip.Escape).
func oneLine(s string) string {
	return clip.Escape(safeurl.RedactText(strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")))
}
