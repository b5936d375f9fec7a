package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

var serversCheckCmd = &command{
	name:    "servers check",
	args:    "ID [--timeout SECONDS]",
	summary: "check a server: its item, its credential, and that the upstream answers",
	help: `
Checks what the gateway needs to call the server, step by step, and says
which step failed:

  item         the server's item is valid
  credential   every secret reference of auth is read (Secrets Manager, SSM,
               or, for env:, this shell's environment), or for aws_sigv4 AWS
               credentials are found; values are never printed
  initialize   the upstream answers MCP initialize with the credential (an
               OpenAPI server: its document is read)
  tools/list   the upstream lists its tools; the count says how many
               allowed_tools and disallowed_tools hide

Upstreams on loopback or link-local addresses are refused, as the gateway
refuses them, unless the item sets allow_local or this shell sets
ALLOW_LOCAL_UPSTREAMS=on (make dev's environment does). It runs with this
shell's AWS identity, not the gateway's: a secret this identity may read may
still be out of the gateway's reach (see the template's SecretsPrefix and
ParametersPrefix). forward_headers cannot be checked here:
no agent sends any. The exit status is 1 when a step failed.

Flags:
  --timeout SECONDS   bound each upstream step (default 20)
`,
	run: runServersCheck,
}

func runServersCheck(c *cli, args []string) error {
	fs := c.newFlags()
	timeout := fs.Float64("timeout", 20, "")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return usagef("want one ID, got %d arguments", len(pos))
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	id := pos[0]
	item, err := c.existingServer(id)
	if err != nil {
		return err
	}
	// What a step says may quote the upstream's answers and errors (and
	// the URLs they failed on): one line, redacted and escaped.
	step := func(name, format string, a ...any) {
		fmt.Fprintf(c.stdout, "%-11s %s\n", name+":", oneLine(fmt.Sprintf(format, a...)))
	}
	srv, err := registry.Parse(item)
	if err != nil {
		step("item", "INVALID: %s", oneLine(err.Error()))
		return fmt.Errorf("server %q is invalid", id)
	}
	step("item", "ok (%s)", describe(srv))

	awsCfg, err := c.awsConfig()
	if err != nil {
		return err
	}
	res := secret.New(secret.Options{
		SecretsManager: secretsmanager.NewFromConfig(awsCfg, func(o *secretsmanager.Options) {
			c.setEndpoint(&o.BaseEndpoint, "AWS_ENDPOINT_URL_SECRETS_MANAGER")
		}),
		SSM: ssm.NewFromConfig(awsCfg, func(o *ssm.Options) {
			c.setEndpoint(&o.BaseEndpoint, "AWS_ENDPOINT_URL_SSM")
		}),
		Getenv: c.getenv,
	})
	if err := c.checkCredential(srv, res, awsCfg, step); err != nil {
		return err
	}

	// Local upstreams as the gateway would reach them: with allow_local, or
	// ALLOW_LOCAL_UPSTREAMS on in this shell (as make dev's environment).
	allowLocal := false
	switch strings.ToLower(c.getenv("ALLOW_LOCAL_UPSTREAMS")) {
	case "on", "true", "1":
		allowLocal = true
	}
	pool := upstream.New(upstream.Options{Secrets: res, AWSCredentials: awsCfg.Credentials, AWSRegion: awsCfg.Region, Version: "cli", AllowLocal: allowLocal})
	defer pool.Close()
	who := upstream.Caller{Principal: "mcpgate-cli"}
	d := time.Duration(*timeout * float64(time.Second))
	ctx, cancel := context.WithTimeout(c.ctx, d)
	info, err := pool.Info(ctx, srv, who)
	cancel()
	if err != nil {
		step("initialize", "FAILED: %s", upstreamProblem(err))
		return fmt.Errorf("server %q: the upstream could not be initialized", id)
	}
	name := srv.ID
	if info.ServerInfo != nil {
		name = info.ServerInfo.Name + " " + info.ServerInfo.Version
	}
	if srv.Transport == registry.TransportOpenAPI {
		step("initialize", "ok (OpenAPI document %q read; its API is reached only by a call)", info.ServerInfo.Name)
	} else {
		step("initialize", "ok (%s, protocol %s)", name, info.ProtocolVersion)
	}
	ctx, cancel = context.WithTimeout(c.ctx, d)
	tools, err := pool.Tools(ctx, srv, who)
	cancel()
	if err != nil {
		step("tools/list", "FAILED: %s", upstreamProblem(err))
		return fmt.Errorf("server %q: the upstream could not list its tools", id)
	}
	hidden := 0
	for _, t := range tools {
		if !srv.ToolAllowed(t.Name) {
			hidden++
		}
	}
	step("tools/list", "ok (%d tools, %d hidden by allowed_tools/disallowed_tools)", len(tools), hidden)
	return nil
}

// checkCredential reads every secret reference of srv's auth, or finds
// AWS credentials for aws_sigv4, and reports each without its value.
func (c *cli) checkCredential(srv *registry.Server, res *secret.Resolver, awsCfg aws.Config, step func(string, string, ...any)) error {
	a := srv.Auth
	if a == nil {
		step("credential", "none (the server has no auth)")
		return nil
	}
	if a.Type == registry.AuthSigV4 {
		region := a.Region
		if region == "" {
			region = awsCfg.Region
		}
		creds, err := awsCfg.Credentials.Retrieve(c.ctx)
		if err != nil {
			step("credential", "FAILED: aws_sigv4: no AWS credentials: %v", err)
			return fmt.Errorf("server %q: no credential", srv.ID)
		}
		step("credential", "ok (aws_sigv4 for %s in %s, AWS credentials from %s)", a.Service, region, creds.Source)
		return nil
	}
	where := a.Secret.String()
	if a.Secret.Kind == secret.Env {
		where += " (read from this shell's environment)"
	}
	if _, err := res.Resolve(c.ctx, a.Secret); err != nil {
		step("credential", "FAILED: %s: %v", a.Type, errors.Unwrap(err))
		return fmt.Errorf("server %q: its secret %s cannot be read", srv.ID, a.Secret)
	}
	step("credential", "ok (%s, secret %s read; value not shown)", a.Type, where)
	return nil
}

// upstreamProblem says what went wrong reaching an upstream.
func upstreamProblem(err error) string {
	var ce *upstream.CredentialError
	if errors.As(err, &ce) {
		return "the credential could not be produced: " + ce.Err.Error()
	}
	return clip.String(oneLine(err.Error()), 300)
}
