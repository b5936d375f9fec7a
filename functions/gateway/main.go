// Command gateway is the MCP gateway. Under AWS Lambda it serves the
// Function URL (response streaming); elsewhere, with GATEWAY_ADDR set, it
// serves the same handler as a local HTTP server.
//
// main only wires: it reads the configuration once (config.go), builds the
// AWS and MCP clients once per cold start, and starts the handler; under
// Lambda it also registers the internal extension that keeps an invocation
// alive until the calls it cut off have given their slots back.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-lambda-go/lambdaurl"

	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/extension"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, nil); err != nil {
		// Configuration errors may quote the URLs they refuse.
		fmt.Fprintln(os.Stderr, "gateway:", clip.Escape(safeurl.RedactText(err.Error())))
		os.Exit(1)
	}
}

// run serves until ctx ends. wrap, if not nil, wraps the gateway's handler
// (the benchmark puts an in-process semaphore in front, for comparison).
func run(ctx context.Context, getenv func(string) string, wrap func(http.Handler) http.Handler) error {
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	// Every record goes through URL redaction (upstream URLs may carry
	// credentials, and errors quote the URLs they failed on) and escaping
	// (what agents and upstreams send may hold control characters).
	log := slog.New(clip.NewLogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}), safeurl.RedactText))
	if cfg.MemoryLimit > 0 {
		debug.SetMemoryLimit(cfg.MemoryLimit)
	}
	if cfg.MaxProcs > 0 && cfg.MaxProcs < runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(cfg.MaxProcs)
	}
	// The collector's percent in effect (GOGC's, or 100; -1: off), read
	// by setting it, then the one the configuration gives.
	gcPercent := debug.SetGCPercent(100)
	if cfg.GCPercent > 0 {
		gcPercent = cfg.GCPercent
	}
	debug.SetGCPercent(gcPercent)

	// One AWS configuration for every client: the tables, and the
	// upstream credentials (secrets read with the function's own identity,
	// which also signs aws_sigv4 requests).
	awsCfg, err := store.LoadConfig(ctx)
	if err != nil {
		return err
	}
	db := store.NewClientFromConfig(awsCfg)
	// A task whose turn comes is started by whichever request sees it
	// (the limiter's), through startTask: set once the gateway is made.
	var startTask gateway.Starter
	limiter := lease.New(db, cfg.Tables.Leases, lease.Options{
		Margin: cfg.LeaseMargin,
		Clock:  cfg.Clock(),
		OnTaskStart: func(ctx context.Context, ts lease.TaskStart) {
			if startTask != nil {
				startTask(ctx, ts)
			}
		},
	})
	// Outside Lambda the listener comes first: the gateway's public URL
	// may be derived from its address.
	var ln net.Listener
	if !cfg.Lambda {
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
		}
		defer ln.Close()
	}
	publicURL, err := publicURL(cfg, ln)
	if err != nil {
		return err
	}
	var oauth *auth.OAuth
	if cfg.OAuth.Issuer != "" {
		if oauth, err = auth.NewOAuth(cfg.OAuth); err != nil {
			return err
		}
	}
	secretOpts := secret.Options{TTL: cfg.SecretsCacheTTL}
	if !cfg.Lambda {
		// env: references are for local development only: under Lambda
		// the environment holds the function's own credentials.
		secretOpts.Getenv = getenv
	}
	secrets := secret.NewFromConfig(awsCfg, secretOpts)
	states, stateKey, err := requestStates(ctx, cfg, secrets, log)
	if err != nil {
		return err
	}
	popts := upstream.Options{
		Logger: log, Version: version(), ToolsTTL: cfg.CatalogTTL,
		Secrets:        secrets,
		AWSCredentials: awsCfg.Credentials,
		AWSRegion:      awsCfg.Region,
		AllowLocal:     cfg.AllowLocal,
	}
	if stateKey != nil {
		// Whoever writes the servers table must not be able to have the
		// request-state key sent to a host of their choosing.
		popts.Reserved = []upstream.Reserved{*stateKey}
	}
	if cfg.Catalog {
		popts.Catalog = catalog.New(db, cfg.Tables.Leases, catalog.Options{Owner: limiter.InstanceID()})
	}
	// Off (nil) unless OTEL_TRACES_EXPORTER=otlp.
	tr, err := tracing.FromEnv(ctx)
	if err != nil {
		return err
	}
	if tr != nil {
		popts.Trace = tr
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tr.Shutdown(sctx)
		}()
	}
	pool := upstream.New(popts)
	defer pool.Close()
	em := metrics.New(os.Stdout, metrics.Options{Disabled: !cfg.Metrics})
	deps := gateway.Deps{
		Auth: auth.New(db, cfg.Tables.Keys, auth.Options{
			CacheTTL: cfg.KeysCacheTTL,
			OAuth:    oauth,
			IAM:      cfg.IAMGrants,
		}),
		Registry: registry.New(db, cfg.Tables.Servers, registry.Options{CacheTTL: cfg.RegistryCacheTTL}),
		Limiter:  limiter,
		Upstream: pool,
		Metrics:  em,
	}
	if tr != nil {
		deps.Tracer = tr
	}
	var taskStore *tasks.Store
	if cfg.Tables.Tasks != "" {
		// Task records: upstreams' tasks are relayed under gateway
		// handles, and server/discover advertises the tasks extension.
		taskStore = &tasks.Store{DB: db, Table: cfg.Tables.Tasks, MaxResultBytes: cfg.MaxTaskResultBytes}
		deps.TaskStore = taskStore
	}
	gw, err := gateway.New(deps, gateway.Options{
		MaxBodyBytes:   cfg.MaxBodyBytes,
		MaxLeaseHold:   cfg.LeaseHold,
		RequestTimeout: cfg.MaxRequest(),
		Logger:         log,
		Version:        version(),
		RequestID:      lambdaRequestID,
		AllowedOrigins: cfg.AllowedOrigins,
		PublicURL:      publicURL,
		IAMCaller:      iamCaller,
		RequestStates:  states,

		FunctionConcurrency:    cfg.FunctionConcurrency,
		ServerConcurrencyShare: cfg.ServerShare,
	})
	if err != nil {
		return err
	}
	var local *workers
	if taskStore != nil {
		// The gateway's own tasks: a worker per task whose turn came, an
		// asynchronous invocation of the function under Lambda, a
		// goroutine elsewhere.
		if cfg.Lambda && cfg.TaskWorkerFunction != "" {
			iv := &invoker{client: awslambda.NewFromConfig(awsCfg), function: cfg.TaskWorkerFunction, log: log}
			startTask = iv.start
		} else if !cfg.Lambda {
			local = &workers{gw: gw, log: log, ctx: ctx}
			startTask = local.start
			go sweepEvery(ctx, cfg.TaskSweepInterval, gw, log)
		}
		if startTask != nil {
			gw.EnableTasks(taskStore, limiter, startTask)
		}
	}
	handler := gw.Handler()
	if wrap != nil {
		handler = wrap(handler)
	}
	// The values in effect: the limiter's margin (its default when
	// LEASE_MARGIN is unset), and "none" for no request deadline.
	log.Info("starting", "version", version(), "instance", limiter.InstanceID(), "lease_margin", limiter.Margin().String(),
		"request_timeout", config.TimeoutText(cfg.MaxRequest()), "memory_limit", config.MemoryLimitText(debug.SetMemoryLimit(-1)), "gomaxprocs", runtime.GOMAXPROCS(0), "gogc", gcPercent,
		"oauth_issuer", cfg.OAuth.Issuer, "iam_grants", len(cfg.IAMGrants), "allow_local_upstreams", cfg.AllowLocal,
		"function_concurrency", cfg.FunctionConcurrency, "server_bulkhead", gateway.Bulkhead(cfg.FunctionConcurrency, cfg.ServerShare))

	if cfg.Lambda {
		// Response streaming lets MCP progress notifications reach the
		// agent while a tool runs; plain JSON answers stream as one chunk.
		// The invocation may be frozen once it answers: its metrics are
		// written before it does.
		// Its own events (task workers, the sweep) are told apart from
		// the Function URL's.
		h, returned := afterResponse(ctx, log, getenv("AWS_LAMBDA_RUNTIME_API"), handler, gw, tr)
		lambda.StartHandlerFunc(dispatch(gw, log, lambdaurl.Wrap(h), returned))
		return nil
	}
	if cfg.RequestTimeout > 0 {
		handler = withTimeout(handler, cfg.RequestTimeout)
	}
	err = serve(ctx, log, ln, handler, cfg.Local, gw)
	if local != nil {
		// Workers' calls were cut off with the server's; their records
		// are written before the process ends.
		local.wg.Wait()
	}
	return err
}

// afterResponse keeps each invocation alive after its response, until the
// exchanges it left open (calls cut off before their upstreams answered,
// still holding their slots) are closed: an internal Lambda extension,
// registered before the runtime asks for its first event, asks for its next
// event only then. Without it, Lambda could freeze the environment with
// those slots held and their leases unrenewed. If the extension cannot be
// registered, h is served as it is, and that is logged.
//
// The spans of an invocation (tr, nil when tracing is off) are flushed
// before it ends: once its exchanges are closed.
//
// returned is for the invocations that are no HTTP request (a task's
// worker, the sweep): called once their handler has returned, it lets the
// invocation end as an HTTP request's does.
func afterResponse(ctx context.Context, log *slog.Logger, api string, h http.Handler, gw *gateway.Gateway, tr *tracing.Tracing) (_ http.Handler, returned func(context.Context)) {
	ext, err := extension.Register(ctx, api, "mcpgate-exchanges")
	if err != nil {
		log.Error("cannot register the internal Lambda extension: calls cut off before their upstreams answer may be frozen with their slots", "error", err.Error())
		flush := func(ctx context.Context) {
			if tr != nil {
				_ = tr.Flush(ctx)
			}
		}
		if tr == nil {
			return h, flush
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			_ = tr.Flush(r.Context())
		}), flush
	}
	go func() {
		err := ext.Run(ctx, func(ictx context.Context) {
			gw.Drain(ictx)
			if err := tr.Flush(ictx); err != nil {
				log.Warn("spans not exported", "error", err.Error())
			}
		})
		log.Error("the internal Lambda extension stopped", "error", err.Error())
	}()
	return ext.Wrap(h, lambdaRequestID), func(ctx context.Context) {
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			ext.Returned(lc.AwsRequestID)
		}
	}
}

// withTimeout gives every request a deadline, as Lambda does.
func withTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// publicURL returns how the gateway finds its public base URL:
// OAUTH_RESOURCE_URL when set; under Lambda, the Function URL's domain from
// the invocation's request context (never the Host header, which a client
// chooses); outside Lambda, the listen address, unless it is unspecified
// (0.0.0.0), where tokens need OAUTH_RESOURCE_URL.
func publicURL(c config.Config, ln net.Listener) (func(*http.Request) string, error) {
	switch {
	case c.ResourceURL != "":
		u := c.ResourceURL
		return func(*http.Request) string { return u }, nil
	case c.Lambda:
		return func(r *http.Request) string {
			if ev, ok := lambdaurl.RequestFromContext(r.Context()); ok && ev.RequestContext.DomainName != "" {
				return "https://" + ev.RequestContext.DomainName
			}
			return ""
		}, nil
	}
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok || addr.IP.IsUnspecified() {
		if c.OAuth.Issuer != "" {
			return nil, fmt.Errorf("OAUTH_RESOURCE_URL is required with OAUTH_ISSUER when GATEWAY_ADDR (%s) listens on every interface: set it to the URL agents use", c.Addr)
		}
		return nil, nil
	}
	u := "http://" + addr.String()
	return func(*http.Request) string { return u }, nil
}

// iamCaller is the caller's ARN when the Function URL's auth type is
// AWS_IAM: Lambda has checked the SigV4 signature and says who signed in
// the request context, which no header can forge.
func iamCaller(r *http.Request) string {
	ev, ok := lambdaurl.RequestFromContext(r.Context())
	if !ok || ev.RequestContext.Authorizer == nil || ev.RequestContext.Authorizer.IAM == nil {
		return ""
	}
	iam := ev.RequestContext.Authorizer.IAM
	if iam.UserARN != "" {
		return iam.UserARN
	}
	// Signed, but by whom is not said: such a caller is granted nothing
	// by ARN and must bring a key.
	return "unknown-iam-caller:" + iam.CallerID
}

func lambdaRequestID(r *http.Request) string {
	if lc, ok := lambdacontext.FromContext(r.Context()); ok {
		return lc.AwsRequestID
	}
	return ""
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return s.Value[:12]
			}
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
	}
	return "dev"
}
