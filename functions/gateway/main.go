// Command gateway is the MCP gateway. Under AWS Lambda it serves the
// Function URL (response streaming); elsewhere, with GATEWAY_ADDR set, it
// serves the same handler as a local HTTP server.
//
// main only wires: it reads the configuration once, builds the AWS and MCP
// clients once per cold start, and starts the handler.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/gateway"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/roundtrip"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, nil); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends. wrap, if not nil, wraps the gateway's handler
// (the benchmark puts an in-process semaphore in front, for comparison).
func run(ctx context.Context, getenv func(string) string, wrap func(http.Handler) http.Handler) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))

	db, err := store.NewClient(ctx)
	if err != nil {
		return err
	}
	limiter := lease.New(db, cfg.Tables.Leases, lease.Options{
		Margin: cfg.LeaseMargin,
		Clock:  cfg.clock(),
	})
	popts := upstream.Options{Logger: log, Version: version(), ToolsTTL: cfg.CatalogTTL}
	if cfg.Catalog {
		popts.Catalog = catalog.New(db, cfg.Tables.Leases, catalog.Options{Owner: limiter.InstanceID()})
	}
	pool := upstream.New(popts)
	defer pool.Close()
	states, err := requestStates(ctx, cfg, getenv, log)
	if err != nil {
		return err
	}
	em := metrics.New(os.Stdout, metrics.Options{Disabled: !cfg.Metrics})
	gw, err := gateway.New(gateway.Deps{
		Auth:     auth.New(db, cfg.Tables.Keys, auth.Options{CacheTTL: cfg.KeysCacheTTL}),
		Registry: registry.New(db, cfg.Tables.Servers, registry.Options{CacheTTL: cfg.RegistryCacheTTL}),
		Limiter:  limiter,
		Upstream: pool,
		Metrics:  em,
	}, gateway.Options{
		MaxBodyBytes:   cfg.MaxBodyBytes,
		MaxLeaseHold:   cfg.LeaseHold,
		Logger:         log,
		Version:        version(),
		RequestID:      lambdaRequestID,
		AllowedOrigins: cfg.AllowedOrigins,
		RequestStates:  states,
	})
	if err != nil {
		return err
	}
	handler := gw.Handler()
	if wrap != nil {
		handler = wrap(handler)
	}
	log.Info("starting", "version", version(), "instance", limiter.InstanceID(), "lease_margin", cfg.LeaseMargin.String())

	if cfg.Lambda {
		// Response streaming lets MCP progress notifications reach the
		// agent while a tool runs; plain JSON answers stream as one chunk.
		// The invocation may be frozen once it answers: its metrics are
		// written before it does.
		lambdaurl.Start(flushAfter(handler, em))
		return nil
	}
	defer em.Close(context.Background())
	if cfg.RequestTimeout > 0 {
		handler = withTimeout(handler, cfg.RequestTimeout)
	}
	return serve(ctx, log, cfg.Addr, handler)
}

// serve runs the local HTTP server until ctx ends, then drains in-flight
// requests (so their slots are released) before returning.
func serve(ctx context.Context, log *slog.Logger, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	log.Info("listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// flushAfter writes the request's queued metrics before the invocation
// ends (bounded, so a stuck stdout cannot hold it).
func flushAfter(h http.Handler, em *metrics.Emitter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 50*time.Millisecond)
		defer cancel()
		_ = em.Flush(ctx)
	})
}

// withTimeout gives every request a deadline, as Lambda does.
func withTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
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

// requestStates builds the sealer of multi-round-trip request states from
// the secret REQUEST_STATE_KEY names. Without one, each process has a key
// of its own: a client's retry then completes only on the instance that
// answered input_required.
func requestStates(ctx context.Context, cfg config, getenv func(string) string, log *slog.Logger) (*roundtrip.Sealer, error) {
	if cfg.RequestStateKey == "" {
		log.Warn("REQUEST_STATE_KEY is not set: input-required round trips complete only on the instance that started them")
		return nil, nil
	}
	secret, err := readSecret(ctx, cfg.RequestStateKey, getenv, newSecretsClient)
	if err != nil {
		return nil, fmt.Errorf("REQUEST_STATE_KEY: %w", err)
	}
	s, err := roundtrip.New(secret, roundtrip.Options{TTL: cfg.RequestStateTTL, Now: cfg.clock()})
	if err != nil {
		return nil, fmt.Errorf("REQUEST_STATE_KEY: %w", err)
	}
	return s, nil
}
