// Command demo-upstream runs the demo MCP server used by `make dev`: a
// stand-in for a batch backend whose slow_tool reports how many calls were
// in flight at once. See internal/demoupstream.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9100", "listen address (host:port; port 0 picks one)")
	var opts demoupstream.HandlerOptions
	flag.BoolVar(&opts.Stateless, "stateless", false, "serve /mcp without sessions")
	flag.BoolVar(&opts.JSONResponse, "json", false, "answer /mcp calls with application/json instead of an event stream")
	flag.BoolVar(&opts.PropagateCancellation, "propagate-cancel", false, "cancel a 2026-07-28 call when its request is closed")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, opts); err != nil {
		fmt.Fprintln(os.Stderr, "demo-upstream:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, opts demoupstream.HandlerOptions) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: demoupstream.New().HandlerWith(opts), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("demo upstream listening http://%s (MCP at /mcp, SSE at /sse, counters at /stats)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
