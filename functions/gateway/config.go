package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// config is everything the gateway reads from its environment.
type config struct {
	Tables store.Tables
	// Lambda is set when running under the Lambda runtime API.
	Lambda bool
	// Addr is GATEWAY_ADDR, the local listen address (outside Lambda).
	Addr             string
	LogLevel         slog.Level
	RegistryCacheTTL time.Duration
	KeysCacheTTL     time.Duration
	LeaseMargin      time.Duration
	LeaseHold        time.Duration
	MaxBodyBytes     int64
	// RequestTimeout gives local requests a deadline, as Lambda does.
	RequestTimeout time.Duration
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
	// ClockOffset shifts the wall clock used for lease and request-state
	// expiries: a test hook to simulate clock skew between instances.
	// Never set it in production.
	ClockOffset time.Duration
}

func (c config) clock() func() time.Time {
	if c.ClockOffset == 0 {
		return nil
	}
	off := c.ClockOffset
	return func() time.Time { return time.Now().Add(off) }
}

func loadConfig(getenv func(string) string) (config, error) {
	var errs []error
	tables, err := store.TablesFromEnv(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	c := config{
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
	c.RegistryCacheTTL = dur("REGISTRY_CACHE_TTL", 0)
	c.KeysCacheTTL = dur("KEYS_CACHE_TTL", 0)
	c.LeaseMargin = dur("LEASE_MARGIN", 0)
	c.LeaseHold = dur("LEASE_HOLD", 0)
	c.RequestTimeout = dur("REQUEST_TIMEOUT", 0)
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
	if c.LeaseMargin < 0 {
		errs = append(errs, errors.New("LEASE_MARGIN must not be negative"))
	}
	if c.LeaseHold < 0 || (c.LeaseHold > 0 && c.LeaseHold < time.Second) {
		errs = append(errs, errors.New("LEASE_HOLD must be at least 1s"))
	}
	if v := getenv("MAX_BODY_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("MAX_BODY_BYTES=%q is not a positive integer", v))
		}
		c.MaxBodyBytes = n
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
