package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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
// which moves less than ns/op when other work shares the machine; p50-ns,
// the median call; and, for the gateway's calls, own-p50-ns: the median of
// each call's time less its store round trips (the limiter's requests,
// timed from their sending until their answer is read), less the direct
// call's median. That is what the gateway itself adds to a call: its
// handler and the store client's and the MCP client's work, the demo
// upstream's and dynalite's excluded (own-p50-ns needs the direct run: it
// is left out when -bench selects only the others). For the capped call,
// sdk-p50-ns is the median of the store client's share of that: each
// call's time in the limiter's store requests less their round trips (the
// AWS SDK's building, serialising and signing of each request and its
// middleware around the round trip).
//
// "paced" is the uncapped call again, each after a pause as long as the
// capped call's median store round trips: the process idle as a capped
// call leaves it while its writes are out. Its own-p50-ns less the
// uncapped call's is what that idleness alone adds to the rest of the
// call (threads parked and woken again, a garbage collection's work moved
// into the gaps); the capped call's less its own, the two writes' work.
// Its ns/op and cpu-ns/op include the pauses.
//
//	go test -run '^$' -bench ToolCall -benchmem ./internal/gateway
func BenchmarkToolCall(b *testing.B) {
	env := storetest.NewEnv(b)
	demo := testkit.StartDemo(b)
	log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pool := upstream.New(upstream.Options{AllowLocal: true, Logger: log, Secrets: secret.New(secret.Options{Getenv: os.Getenv})})
	b.Cleanup(pool.Close)
	timed := &storeTimer{base: env.Client.Options().HTTPClient}
	leases := &sdkTimer{API: dynamodb.New(env.Client.Options(), func(o *dynamodb.Options) { o.HTTPClient = timed }), timed: timed}
	g, err := New(Deps{
		Auth:     auth.New(env.Client, env.Tables.Keys, auth.Options{}),
		Registry: registry.New(env.Client, env.Tables.Servers, registry.Options{}),
		Limiter:  lease.New(leases, env.Tables.Leases, lease.Options{}),
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
	var directP50 time.Duration // 0 until the direct run
	var storeP50 time.Duration  // a capped call's store round trips; 0 until the capped run
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
		var took []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := cs.CallTool(context.Background(), params); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		reportCPU(b, cpu)
		directP50 = median(took)
		b.ReportMetric(float64(directP50), "p50-ns")
	})
	for _, id := range []string{"capped", "uncapped", "paced"} {
		b.Run(id, func(b *testing.B) {
			server, pause := id, time.Duration(0)
			if id == "paced" {
				if storeP50 == 0 {
					b.Skip("needs the capped run's store round trips")
				}
				server, pause = "uncapped", storeP50
			}
			body := `{"server_id":"` + server + `","name":"echo","arguments":{"text":"x"}}`
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
			var took, beyond, sdk, stores []time.Duration
			for b.Loop() {
				if pause > 0 {
					time.Sleep(pause) // in ns/op: stopping the timer would stop the world
				}
				start, stored, sdkBefore := time.Now(), timed.spent.Load(), leases.own.Load()
				call()
				d := time.Since(start)
				rt := time.Duration(timed.spent.Load() - stored)
				took = append(took, d)
				beyond = append(beyond, d-rt)
				stores = append(stores, rt)
				sdk = append(sdk, time.Duration(leases.own.Load()-sdkBefore))
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(median(took)), "p50-ns")
			if id == "capped" {
				b.ReportMetric(float64(median(sdk)), "sdk-p50-ns")
				storeP50 = median(stores)
			}
			if directP50 > 0 {
				b.ReportMetric(float64(median(beyond)-directP50), "own-p50-ns")
			}
		})
	}
}

// storeTimer is an HTTP client for the store that sums the time its
// requests take, each from its sending until its answer's body is closed
// (the SDK closes it once it has read and decoded it).
type storeTimer struct {
	base  dynamodb.HTTPClient
	spent atomic.Int64 // nanoseconds
}

func (t *storeTimer) Do(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.base.Do(req)
	if err != nil {
		t.spent.Add(int64(time.Since(start)))
		return resp, err
	}
	resp.Body = &timedBody{ReadCloser: resp.Body, t: t, start: start}
	return resp, nil
}

// sdkTimer is the limiter's store client, summing the time of its
// requests beyond their round trips as timed sums them.
type sdkTimer struct {
	lease.API
	timed *storeTimer
	own   atomic.Int64 // nanoseconds
}

func (t *sdkTimer) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	start, stored := time.Now(), t.timed.spent.Load()
	out, err := t.API.UpdateItem(ctx, in, opts...)
	t.own.Add(int64(time.Since(start)) - (t.timed.spent.Load() - stored))
	return out, err
}

func (t *sdkTimer) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	start, stored := time.Now(), t.timed.spent.Load()
	out, err := t.API.GetItem(ctx, in, opts...)
	t.own.Add(int64(time.Since(start)) - (t.timed.spent.Load() - stored))
	return out, err
}

type timedBody struct {
	io.ReadCloser
	t     *storeTimer
	start time.Time
	once  sync.Once
}

func (b *timedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.t.spent.Add(int64(time.Since(b.start))) })
	return err
}

// median is the middle of ds, which it sorts.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
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
