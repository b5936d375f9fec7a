package main

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/mcpgate/mcpgate/internal/console"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

var consoleCmd = &command{
	name:    "console",
	args:    "[--addr HOST:PORT] [--log FILE | --log-group NAME] [--audit-log FILE]",
	summary: "a live web console: caps, queues, breakers and calls, and actions on them",
	help: `
Serves a web console of the stack this shell points at (the same
environment and --stack as every other command, with your own AWS
credentials) on a loopback address, and prints its URL: open it in a
browser on this machine. Ctrl-C stops it.

Screens, each updating every second: Fleet (every server's calls in
flight against its limit, waiting callers, breakers, pauses, rate buckets,
refusals), Server (attributes and their meaning, edits checked as servers
set checks them, leases, the queue by principal, breakers, a chart, a
connection test), Keys (create, revoke) and Calls (recent calls and
refusals from the gateway's log, per tool calls, errors, p50 and p99).
Actions: pause and resume admission, reset a breaker, release a lease,
change a cap or any attribute, create and revoke keys. Each is one
conditional write, and is recorded in the audit log with who did it.

Who you are: against a deployed stack (--stack, a log group, or tables in
AWS), the caller identity AWS STS returns for your credentials; against a
store on this machine alone, your OS user.

The audit log: deployed, the gateway's log group (--log-group, the
stack's LogGroupName output, or MCPGATE_LOG_GROUP), stream
mcpgate-console-audit; locally, --audit-log FILE, MCPGATE_AUDIT_LOG, or
console-audit.log beside the gateway's log (make dev: .dev/logs/).

Security: the console answers only on its loopback address, only to a
browser that opened the URL it printed (a per-run token, kept in a
cookie), and takes changes only from its own pages (their Origin). It
shows secrets as their references, never a key beyond the answer that
creates it.

Flags:
  --addr HOST:PORT   where to listen: a loopback address (default
                     127.0.0.1 and a free port); any other is refused
  --log FILE         the gateway's log file (MCPGATE_LOG; make dev's
                     .dev/logs/gateway.log)
  --log-group NAME   the gateway's CloudWatch log group (MCPGATE_LOG_GROUP;
                     with --stack, the stack's)
  --audit-log FILE   where a local console writes its audit records
`,
	run: runConsole,
}

// envAuditLog names the local console's audit log file.
const envAuditLog = "MCPGATE_AUDIT_LOG"

func runConsole(c *cli, args []string) error {
	fs := c.newFlags()
	addr := fs.String("addr", "127.0.0.1:0", "")
	logFile := fs.String("log", "", "")
	logGroup := fs.String("log-group", "", "")
	auditLog := fs.String("audit-log", "", "")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("want no arguments, got %d", len(pos))
	}
	if *logFile != "" && *logGroup != "" {
		return usagef("give --log or --log-group, not both")
	}
	ln, err := console.Listen(*addr)
	if err != nil {
		return usagef("--addr: %v", err)
	}
	defer ln.Close()
	if err := c.open(); err != nil {
		return err
	}
	cfg, err := c.awsConfig()
	if err != nil {
		return err
	}
	o := console.Options{Store: c.fleet(), Stack: c.stack}
	endpoint := c.getenv("AWS_ENDPOINT_URL_DYNAMODB")
	local := endpoint != "" && localEndpoint(endpoint)
	switch {
	case c.stack != "":
		s, err := c.readStack()
		if err != nil {
			return err
		}
		o.Where = fmt.Sprintf("stack %s in %s", s.Name, s.Region)
		if *logGroup == "" && *logFile == "" {
			*logGroup = s.LogGroup
		}
		o.DashboardURL = fmt.Sprintf("https://%s.console.aws.amazon.com/cloudwatch/home?region=%s#dashboards/dashboard/%s-mcpgate",
			url.PathEscape(s.Region), url.QueryEscape(s.Region), url.PathEscape(s.Name))
	case local:
		o.Where = "local store at " + endpoint
	default:
		o.Where = fmt.Sprintf("tables %s in %s", c.tables.Servers, cfg.Region)
	}
	if *logFile == "" && *logGroup == "" {
		*logGroup, *logFile = c.getenv(envLogGroup), c.getenv(envLog)
		if *logGroup != "" {
			*logFile = ""
		}
	}
	var cw *cloudwatchlogs.Client
	if *logGroup != "" {
		cw = cloudwatchlogs.NewFromConfig(cfg, func(o *cloudwatchlogs.Options) {
			c.setEndpoint(&o.BaseEndpoint, "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS")
		})
		o.LogGroup, o.Logs = *logGroup, cw
	} else {
		o.LogFile = *logFile
	}

	// Who acts, and where that is written down: a stack, or a log group in
	// CloudWatch, or tables in AWS itself are a deployed stack's.
	deployed := c.stack != "" || *logGroup != "" || !local
	if !deployed {
		u, err := user.Current()
		name := os.Getenv("USER")
		if err == nil {
			name = u.Username
		}
		o.Operator = "local:" + cmp.Or(name, "unknown")
	} else {
		client := sts.NewFromConfig(cfg, func(o *sts.Options) { c.setEndpoint(&o.BaseEndpoint, "AWS_ENDPOINT_URL_STS") })
		id, err := client.GetCallerIdentity(c.ctx, &sts.GetCallerIdentityInput{})
		if err != nil {
			return fmt.Errorf("who are you? AWS STS GetCallerIdentity: %w", c.awsHint(&awsError{err}))
		}
		o.Operator = aws.ToString(id.Arn)
	}
	switch {
	case deployed && *logGroup != "":
		a := &console.CloudWatchAudit{Logs: cw, Group: *logGroup}
		o.Audit, o.AuditLog = a, a
	default:
		path := cmp.Or(*auditLog, c.getenv(envAuditLog))
		if path == "" && *logFile != "" {
			path = filepath.Join(filepath.Dir(*logFile), "console-audit.log")
		}
		if path == "" {
			dir, err := os.UserConfigDir()
			if err != nil {
				return errors.New("where should the audit log go? give --audit-log FILE")
			}
			path = filepath.Join(dir, "mcpgate", "console-audit.log")
		}
		a := &console.FileAudit{Path: path}
		o.Audit, o.AuditLog = a, a
	}

	allowLocal := false
	switch strings.ToLower(c.getenv("ALLOW_LOCAL_UPSTREAMS")) {
	case "on", "true", "1":
		allowLocal = true
	}
	o.Upstream = upstream.Options{
		Secrets: secret.New(secret.Options{
			SecretsManager: secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) {
				c.setEndpoint(&o.BaseEndpoint, "AWS_ENDPOINT_URL_SECRETS_MANAGER")
			}),
			SSM:    ssm.NewFromConfig(cfg, func(o *ssm.Options) { c.setEndpoint(&o.BaseEndpoint, "AWS_ENDPOINT_URL_SSM") }),
			Getenv: c.getenv,
		}),
		AWSCredentials: cfg.Credentials, AWSRegion: cfg.Region, Version: "console", AllowLocal: allowLocal,
	}

	con, err := console.New(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "mcpgate console for %s, acting as %s\n%s\n", o.Where, o.Operator, con.URL(ln))
	fmt.Fprintf(c.stderr, "Open that URL in a browser on this machine (it holds this run's token). Audit log: %s. Ctrl-C stops.\n", o.AuditLog.Where())
	return con.Serve(c.ctx, ln)
}
