package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// BenchmarkToolCall is one tool call through the REST route's handler, as
// the gateway serves it (caches, metrics and an access log at their
// defaults, the log and the metrics written to io.Discard), against
// dynalite and the demo upstream on loopback: "capped" takes its place and
// gives it back (two store writes), "uncapped" makes no store request, and
// "direct" calls the upstream without the gateway. Every figure includes
// the demo upstream's own work (it runs in the same process): uncapped
// less direct is the gateway's own cost of a call, capped less uncapped
// that of its two store writes (dynalite's included).
//
// Besides ns/op it reports cpu-ns/op, the process's CPU time per call,
// which moves less than ns/op when other work shares the machine.
//
//	go test -run '^$' -bench ToolCall -benchmem ./internal/gateway
func BenchmarkToolCall(b *testing.B) {
	env := storetest.NewEnv(b)
	demo := testkit.StartDemo(b)
	log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pool := upstream.New(upstream.Options{AllowLocal: true, Logger: log, Secrets: secret.New(secret.Options{Getenv: os.Getenv})})
	b.Cleanup(pool.Close)
	g, err := New(Deps{
		Auth:     auth.New(env.Client, env.Tables.Keys, auth.Options{}),
		Registry: registry.New(env.Client, env.Tables.Servers, registry.Options{}),
		Limiter:  lease.New(env.Client, env.Tables.Leases, lease.Options{}),
		Upstream: pool,
		Metrics:  metrics.New(io.Discard, metrics.Options{}),
	}, Options{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	h := g.Handler()
	key := testkit.PutKey(b, env, "*")
	testkit.PutServer(b, env, map[string]any{"server_id": "capped", "url": demo.URL, "max_concurrent_requests": 8})
	testkit.PutServer(b, env, map[string]any{"server_id": "uncapped", "url": demo.URL})
	// The upstream alone, called as the gateway calls it: what a call
	// costs without the gateway.
	b.Run("direct", func(b *testing.B) {
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: demo.URL}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			if _, err := cs.CallTool(context.Background(), params); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu)
	})
	for _, id := range []string{"capped", "uncapped"} {
		b.Run(id, func(b *testing.B) {
			body := `{"server_id":"` + id + `","name":"echo","arguments":{"text":"x"}}`
			call := func() {
				req := httptest.NewRequest(http.MethodPost, "/mcp-rest/tools/call", strings.NewReader(body))
				req.RemoteAddr = "127.0.0.1:40000"
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("call: %d %s", w.Code, w.Body)
				}
			}
			call() // the upstream's session, the caches
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				call()
			}
			reportCPU(b, cpu)
		})
	}
}

// processCPU is the CPU time the process has used, user and system: on a
// busy machine a steadier measure of work than the time it took.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per operation since start, as
// cpu-ns/op: every goroutine's (the gateway's, the store client's, the
// upstream's, the garbage collector's).
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}
