// Package config reads the gateway's settings from its environment: what
// functions/gateway runs with, and what the template tests (infra/template)
// check template.yaml against.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// Config is everything the gateway reads from its environment.
type Config struct {
	// Tables are the table names; Tables.Tasks (TASKS_TABLE) is optional,
	// and without it the gateway runs no MCP tasks.
	Tables store.Tables
	// MaxTaskResultBytes is MAX_TASK_RESULT_BYTES: the largest result,
	// error or input request a task record keeps (tasks.Store's
	// MaxResultBytes); a larger one fails the task.
	MaxTaskResultBytes int
	// TaskWorkerFunction is TASK_WORKER_FUNCTION, the Lambda function
	// invoked asynchronously to run a task's call under Lambda (a name or
	// an ARN); under Lambda it defaults to the function itself
	// (AWS_LAMBDA_FUNCTION_NAME). Outside Lambda the worker runs in the
	// process.
	TaskWorkerFunction string
	// TaskSweepInterval is TASK_SWEEP_INTERVAL: outside Lambda, how often
	// the process sweeps for tasks whose start was lost (under Lambda the
	// template's schedule does).
	TaskSweepInterval time.Duration
	// Lambda is set when running under the Lambda runtime API.
	Lambda bool
	// Addr is GATEWAY_ADDR, the local listen address (outside Lambda).
	Addr             string
	LogLevel         slog.Level
	RegistryCacheTTL time.Duration
	KeysCacheTTL     time.Duration
	// SecretsCacheTTL is how long an upstream credential's secret is
	// reused before it is read again (SECRETS_CACHE_TTL).
	SecretsCacheTTL time.Duration
	LeaseMargin     time.Duration
	LeaseHold       time.Duration
	MaxBodyBytes    int64
	// RequestTimeout gives local requests a deadline, as Lambda does.
	RequestTimeout time.Duration
	// FunctionTimeout is FUNCTION_TIMEOUT, the Lambda function's timeout
	// (the template sets it): under Lambda, the longest a request may run.
	FunctionTimeout time.Duration
	// Local is how the local HTTP server bounds its clients.
	Local LocalLimits
	// MemoryLimit is the Go runtime's soft memory limit to set, in bytes:
	// memoryShare of the Lambda function's memory
	// (AWS_LAMBDA_FUNCTION_MEMORY_SIZE, in MiB), so the collector works
	// harder before the function runs out, rather than after. Zero leaves
	// the runtime's own: none, or GOMEMLIMIT, which wins when set.
	MemoryLimit int64
	// MaxProcs is the most threads to run Go code at once (GOMAXPROCS)
	// under Lambda: the vCPUs the function's memory buys (one per
	// lambdaMiBPerCPU, at least one). Zero leaves the runtime's own: its
	// default, or GOMAXPROCS, which wins when set.
	MaxProcs int
	// GCPercent is the garbage collector's percent (GOGC) under Lambda:
	// lambdaGCPercent, the memory limit bounding the heap. Zero leaves the
	// runtime's own: 100, or GOGC, which wins when set.
	GCPercent int
	// AllowedOrigins are the browser origins trusted to call cross-origin.
	AllowedOrigins []string
	// Metrics turns on the CloudWatch EMF records on stdout (EMF_METRICS;
	// on under Lambda, off elsewhere, by default).
	Metrics bool
	// RequestStateKey is REQUEST_STATE_KEY: a reference to the secret that
	// seals multi-round-trip request states; "" means a random key per
	// process.
	RequestStateKey string
	// RequestStateTTL is how long a sealed request state is accepted.
	RequestStateTTL time.Duration
	// CatalogTTL is the longest a tool list is reused by the fleet.
	CatalogTTL time.Duration
	// Catalog shares tool lists through the leases table (TOOL_CATALOG,
	// on by default).
	Catalog bool
	// AllowLocal lets every upstream be on a loopback or link-local
	// address (ALLOW_LOCAL_UPSTREAMS, off by default): local development
	// only, refused under Lambda, where 127.0.0.1 is the runtime API.
	AllowLocal bool
	// ClockOffset shifts the wall clock used for lease and request-state
	// expiries: a test hook to simulate clock skew between instances.
	// Never set it in production.
	ClockOffset time.Duration
	// OAuth is the token settings (OAUTH_*); Issuer empty means keys only.
	OAuth auth.OAuthOptions
	// ResourceURL is OAUTH_RESOURCE_URL, the gateway's public base URL;
	// empty means derived: from the Function URL's domain under Lambda,
	// from the listen address outside it.
	ResourceURL string
	// IAMGrants are IAM_GRANTS: servers granted to AWS_IAM callers that
	// present no key or token.
	IAMGrants []auth.IAMGrant
	// FunctionConcurrency is FUNCTION_CONCURRENCY: how many requests the
	// function serves at once (the template sets it from the reserved
	// concurrency); 0 means unknown.
	FunctionConcurrency int
	// ServerShare is SERVER_CONCURRENCY_SHARE: the share of it one server
	// may take, calls in flight and callers waiting (default 0.5).
	ServerShare float64
}

// LocalLimits bound the local server's clients, so slow or idle ones
// cannot hold it: under Lambda the Function URL does this.
type LocalLimits struct {
	// ReadTimeout bounds reading one request, headers and body
	// (GATEWAY_READ_TIMEOUT); the headers alone get at most
	// MaxReadHeaderTimeout of it.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle that long
	// (GATEWAY_IDLE_TIMEOUT).
	IdleTimeout time.Duration
	// MaxConns is how many connections are served at once
	// (GATEWAY_MAX_CONNS); further ones wait to be accepted.
	MaxConns int
}

// Defaults of LocalLimits.
const (
	defaultReadTimeout   = 30 * time.Second
	MaxReadHeaderTimeout = 10 * time.Second
	defaultIdleTimeout   = 2 * time.Minute
	defaultMaxConns      = 1024
)

// lambdaMiBPerCPU is the function memory that buys one vCPU's worth of
// CPU time under Lambda (the share grows with memory: 1,769 MB is one
// full vCPU). The function's environment may show more CPUs than it has
// time on: below one vCPU's worth, a second thread running Go code adds
// no CPU time, only hand-offs between threads and idle threads spinning
// for work (see A call's own cost in docs/performance.md).
const lambdaMiBPerCPU = 1769

// memoryShare is the part of the function's memory given to the Go
// runtime's memory limit; the rest is for what the limit does not count
// (the mapped executable, the runtime's own bookkeeping outside the heap).
const memoryShare = 0.9

// lambdaGCPercent is GOGC under Lambda, where the function's memory is its
// own and the memory limit bounds the heap: the collector runs a quarter
// as often as at the runtime's 100 (the heap grows to five times what is
// live, not twice, or to the limit), and a call's share of its work falls
// alike: each call allocates about 250 KiB, nearly all of it garbage once
// answered (see A call's own cost in docs/performance.md).
const lambdaGCPercent = 400

// MaxRequest is the longest one request may run, if known: the
// function's timeout under Lambda, REQUEST_TIMEOUT locally.
func (c Config) MaxRequest() time.Duration {
	if c.Lambda {
		return c.FunctionTimeout
	}
	return c.RequestTimeout
}

// Clock is the wall clock for lease and request-state expiries: nil (the
// real one) unless ClockOffset is set.
func (c Config) Clock() func() time.Time {
	if c.ClockOffset == 0 {
		return nil
	}
	off := c.ClockOffset
	return func() time.Time { return time.Now().Add(off) }
}

// Load reads the settings through getenv (os.Getenv in the gateway).
func Load(getenv func(string) string) (Config, error) {
	var errs []error
	tables, err := store.TablesFromEnv(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	c := Config{
		Tables: tables,
		Lambda: getenv("AWS_LAMBDA_RUNTIME_API") != "",
		Addr:   getenv("GATEWAY_ADDR"),
	}
	if !c.Lambda && c.Addr == "" {
		errs = append(errs, errors.New("GATEWAY_ADDR is not set (outside Lambda, set it to host:port, e.g. 127.0.0.1:8080)"))
	}
	dur := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a duration (e.g. 2s, 500ms)", name, v))
			return def
		}
		return d
	}
	c.loadTasks(getenv, &errs)
	c.RegistryCacheTTL = dur("REGISTRY_CACHE_TTL", 0)
	c.KeysCacheTTL = dur("KEYS_CACHE_TTL", 0)
	c.SecretsCacheTTL = dur("SECRETS_CACHE_TTL", 0)
	if c.SecretsCacheTTL < 0 {
		errs = append(errs, errors.New("SECRETS_CACHE_TTL must not be negative"))
	}
	c.LeaseMargin = dur("LEASE_MARGIN", 0)
	c.LeaseHold = dur("LEASE_HOLD", 0)
	c.RequestTimeout = dur("REQUEST_TIMEOUT", 0)
	c.FunctionTimeout = dur("FUNCTION_TIMEOUT", 0)
	c.Local.ReadTimeout = dur("GATEWAY_READ_TIMEOUT", defaultReadTimeout)
	c.Local.IdleTimeout = dur("GATEWAY_IDLE_TIMEOUT", defaultIdleTimeout)
	c.ClockOffset = dur("GATEWAY_TEST_CLOCK_OFFSET", 0)
	c.RequestStateKey = getenv("REQUEST_STATE_KEY")
	c.RequestStateTTL = dur("REQUEST_STATE_TTL", 0)
	c.CatalogTTL = dur("CATALOG_TTL", 0)
	if c.RequestStateTTL < 0 || c.CatalogTTL < 0 {
		errs = append(errs, errors.New("REQUEST_STATE_TTL and CATALOG_TTL must not be negative"))
	}
	switch strings.ToLower(getenv("TOOL_CATALOG")) {
	case "", "on", "true", "1":
		c.Catalog = true
	case "off", "false", "0":
	default:
		errs = append(errs, fmt.Errorf("TOOL_CATALOG=%q: use on or off", getenv("TOOL_CATALOG")))
	}
	switch strings.ToLower(getenv("ALLOW_LOCAL_UPSTREAMS")) {
	case "", "off", "false", "0":
	case "on", "true", "1":
		c.AllowLocal = true
		if c.Lambda {
			errs = append(errs, errors.New("ALLOW_LOCAL_UPSTREAMS is for local development and is refused under Lambda: set allow_local on the server items that need a local upstream"))
		}
	default:
		errs = append(errs, fmt.Errorf("ALLOW_LOCAL_UPSTREAMS=%q: use on or off", getenv("ALLOW_LOCAL_UPSTREAMS")))
	}
	if c.LeaseMargin < 0 {
		errs = append(errs, errors.New("LEASE_MARGIN must not be negative"))
	}
	if c.LeaseHold < 0 || (c.LeaseHold > 0 && c.LeaseHold < time.Second) {
		errs = append(errs, errors.New("LEASE_HOLD must be at least 1s"))
	}
	if c.RequestTimeout < 0 || c.FunctionTimeout < 0 {
		errs = append(errs, errors.New("REQUEST_TIMEOUT and FUNCTION_TIMEOUT must not be negative"))
	}
	if c.Local.ReadTimeout <= 0 || c.Local.IdleTimeout <= 0 {
		errs = append(errs, errors.New("GATEWAY_READ_TIMEOUT and GATEWAY_IDLE_TIMEOUT must be positive: the local server must not wait on a client for ever"))
	}
	c.Local.MaxConns = defaultMaxConns
	if v := getenv("FUNCTION_CONCURRENCY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("FUNCTION_CONCURRENCY=%q: use a whole number of requests (0: unknown)", v))
		}
		c.FunctionConcurrency = n
	}
	c.ServerShare = gateway.DefaultServerShare
	if v := getenv("SERVER_CONCURRENCY_SHARE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			errs = append(errs, fmt.Errorf("SERVER_CONCURRENCY_SHARE=%q: use a number above 0, at most 1", v))
		}
		c.ServerShare = f
	}
	if v := getenv("GATEWAY_MAX_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("GATEWAY_MAX_CONNS=%q is not a positive integer", v))
		}
		c.Local.MaxConns = n
	}
	if v := getenv("MAX_BODY_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("MAX_BODY_BYTES=%q is not a positive integer", v))
		}
		c.MaxBodyBytes = n
	}
	if v := getenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"); v != "" {
		mib, err := strconv.ParseInt(v, 10, 64)
		if err != nil || mib <= 0 || mib > 1<<20 {
			errs = append(errs, fmt.Errorf("AWS_LAMBDA_FUNCTION_MEMORY_SIZE=%q is not a size in MiB", v))
		} else {
			// What the runtime was told in its environment wins.
			if getenv("GOMEMLIMIT") == "" {
				c.MemoryLimit = int64(float64(mib<<20) * memoryShare)
			}
			if getenv("GOMAXPROCS") == "" {
				c.MaxProcs = int((mib + lambdaMiBPerCPU - 1) / lambdaMiBPerCPU)
			}
			if getenv("GOGC") == "" && c.MemoryLimit > 0 {
				c.GCPercent = lambdaGCPercent
			}
		}
	}
	switch strings.ToLower(getenv("EMF_METRICS")) {
	case "":
		c.Metrics = c.Lambda
	case "on", "true", "1":
		c.Metrics = true
	case "off", "false", "0":
	default:
		errs = append(errs, fmt.Errorf("EMF_METRICS=%q: use on or off", getenv("EMF_METRICS")))
	}
	for o := range strings.SplitSeq(getenv("ALLOWED_ORIGINS"), ",") {
		if o = strings.TrimSpace(o); o != "" {
			c.AllowedOrigins = append(c.AllowedOrigins, o)
		}
	}
	c.loadOAuth(getenv, &errs)
	grants, err := auth.ParseIAMGrants(getenv("IAM_GRANTS"))
	if err != nil {
		errs = append(errs, fmt.Errorf("IAM_GRANTS: %w", err))
	}
	c.IAMGrants = grants
	switch strings.ToLower(getenv("LOG_LEVEL")) {
	case "", "info":
		c.LogLevel = slog.LevelInfo
	case "debug":
		c.LogLevel = slog.LevelDebug
	case "warn":
		c.LogLevel = slog.LevelWarn
	case "error":
		c.LogLevel = slog.LevelError
	default:
		errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: use debug, info, warn or error", getenv("LOG_LEVEL")))
	}
	return c, errors.Join(errs...)
}

// TimeoutText renders a timeout for the startup log: "none" for 0.
func TimeoutText(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

// MemoryLimitText renders a runtime memory limit for the log.
func MemoryLimitText(limit int64) string {
	if limit == math.MaxInt64 {
		return "none"
	}
	return fmt.Sprintf("%d MiB", limit>>20)
}

// MinTaskResultBytes is the smallest MAX_TASK_RESULT_BYTES: below it nearly
// every task would fail.
const MinTaskResultBytes = 1 << 10

// functionName is what Lambda's Invoke takes as a function: a name, a
// partial ARN or an ARN, with an optional version or alias.
var functionName = regexp.MustCompile(`^(arn:aws[a-zA-Z-]*:lambda:[a-z]{2}(-gov)?-[a-z]+-\d:)?(\d{12}:)?(function:)?[a-zA-Z0-9_-]{1,64}(:(\$LATEST|[a-zA-Z0-9_-]{1,128}))?$`)

// loadTasks reads the tasks settings: TASKS_TABLE (in Tables) turns tasks
// on; the others without it are a mistake worth stopping for.
func (c *Config) loadTasks(getenv func(string) string, errs *[]error) {
	c.MaxTaskResultBytes = tasks.DefaultMaxResultBytes
	if v := getenv("MAX_TASK_RESULT_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < MinTaskResultBytes || n > tasks.MaxResultBytesLimit {
			*errs = append(*errs, fmt.Errorf("MAX_TASK_RESULT_BYTES=%q: use a whole number of bytes from %d to %d (DynamoDB keeps a task in one item of at most 400 KB)",
				v, MinTaskResultBytes, tasks.MaxResultBytesLimit))
		} else {
			c.MaxTaskResultBytes = n
		}
	}
	c.TaskSweepInterval = DefaultTaskSweepInterval
	if v := getenv("TASK_SWEEP_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < MinTaskSweepInterval || d > MaxTaskSweepInterval {
			*errs = append(*errs, fmt.Errorf("TASK_SWEEP_INTERVAL=%q: use a duration from %v to %v (e.g. 1m)", v, MinTaskSweepInterval, MaxTaskSweepInterval))
		} else {
			c.TaskSweepInterval = d
		}
	}
	c.TaskWorkerFunction = getenv("TASK_WORKER_FUNCTION")
	if c.TaskWorkerFunction != "" && !functionName.MatchString(c.TaskWorkerFunction) {
		*errs = append(*errs, fmt.Errorf("TASK_WORKER_FUNCTION=%q is not a Lambda function's name or ARN", c.TaskWorkerFunction))
	}
	if c.TaskWorkerFunction == "" && c.Lambda {
		c.TaskWorkerFunction = getenv("AWS_LAMBDA_FUNCTION_NAME")
	}
	if c.Tables.Tasks == "" {
		for _, name := range []string{"MAX_TASK_RESULT_BYTES", "TASK_WORKER_FUNCTION", "TASK_SWEEP_INTERVAL"} {
			if getenv(name) != "" {
				*errs = append(*errs, fmt.Errorf("%s is set but %s is not: set the tasks table to run MCP tasks", name, store.EnvTasksTable))
			}
		}
	}
}

// TASK_SWEEP_INTERVAL's default and bounds: a sweep reads every server
// item that has waiting tasks, so it is not run more often than once a
// second.
const (
	DefaultTaskSweepInterval = time.Minute
	MinTaskSweepInterval     = time.Second
	MaxTaskSweepInterval     = time.Hour
)

// maxClaimName bounds OAUTH_TEAM_CLAIM.
const maxClaimName = 256

// loadOAuth reads the OAUTH_* settings. OAUTH_ISSUER turns tokens on; the
// others without it are a mistake worth stopping for.
func (c *Config) loadOAuth(getenv func(string) string, errs *[]error) {
	o := auth.OAuthOptions{
		Issuer:      strings.TrimSpace(getenv("OAUTH_ISSUER")),
		JWKSURL:     strings.TrimSpace(getenv("OAUTH_JWKS_URL")),
		ScopePrefix: getenv("OAUTH_SCOPE_PREFIX"),
		TeamClaim:   strings.TrimSpace(getenv("OAUTH_TEAM_CLAIM")),
	}
	for a := range strings.SplitSeq(getenv("OAUTH_AUDIENCE"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.Audiences = append(o.Audiences, a)
		}
	}
	c.ResourceURL = strings.TrimSuffix(strings.TrimSpace(getenv("OAUTH_RESOURCE_URL")), "/")
	if o.Issuer == "" {
		for name, v := range map[string]bool{"OAUTH_AUDIENCE": len(o.Audiences) > 0, "OAUTH_JWKS_URL": o.JWKSURL != "", "OAUTH_RESOURCE_URL": c.ResourceURL != "", "OAUTH_TEAM_CLAIM": o.TeamClaim != ""} {
			if v {
				*errs = append(*errs, fmt.Errorf("%s is set but OAUTH_ISSUER is not: set the issuer to accept OAuth tokens", name))
			}
		}
		return
	}
	if _, err := auth.NewOAuth(o); err != nil {
		*errs = append(*errs, fmt.Errorf("OAUTH_*: %w", err))
	}
	if strings.ContainsAny(o.ScopePrefix, " \t\"") {
		*errs = append(*errs, fmt.Errorf("OAUTH_SCOPE_PREFIX=%q must not contain spaces or quotes", o.ScopePrefix))
	}
	if len(o.TeamClaim) > maxClaimName || strings.ContainsFunc(o.TeamClaim, func(r rune) bool { return r <= ' ' || r == '"' || r > '~' }) {
		*errs = append(*errs, fmt.Errorf("OAUTH_TEAM_CLAIM=%q must be a claim name: at most %d bytes of printable ASCII, no spaces or quotes", o.TeamClaim, maxClaimName))
	}
	if c.ResourceURL != "" {
		u, err := url.Parse(c.ResourceURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.ContainsAny(c.ResourceURL, "\" ") {
			*errs = append(*errs, fmt.Errorf("OAUTH_RESOURCE_URL=%q must be the gateway's base URL, scheme://host[:port] (e.g. https://gw.example.com)", c.ResourceURL))
		}
	}
	c.OAuth = o
}
