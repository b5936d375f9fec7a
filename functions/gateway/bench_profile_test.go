package main

// The uncontended path's own cost, counted inside a gateway process: the
// bench starts the test binary as a gateway (benchChild mode "profile"),
// which serves the same handler as the real one, plus two routes only it
// has, to count allocations and CPU time over a window of calls and, with
// BENCH_PROFILE=dir, to write a CPU and an allocation profile of that
// window.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// profileDirEnv names the directory the profile child writes its profiles
// to; unset, it only counts.
const profileDirEnv = "BENCH_PROFILE_DIR"

// Routes of the profile child: POST start opens a window, POST stop closes
// it and answers what it cost (a windowCost).
const (
	windowStart = "/bench/window/start"
	windowStop  = "/bench/window/stop"
)

// windowCost is what a profile child's process spent between start and
// stop.
type windowCost struct {
	Mallocs  uint64        `json:"mallocs"`
	Bytes    uint64        `json:"bytes"`
	CPU      time.Duration `json:"cpu_ns"`
	Profiles []string      `json:"profiles,omitempty"`
}

// processCost is the process's allocations and CPU time (user and system)
// so far.
func processCost() windowCost {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return windowCost{Mallocs: ms.Mallocs, Bytes: ms.TotalAlloc, CPU: cpu}
}

// profileGateway is the gateway with the window routes in front of it.
func profileGateway(ctx context.Context) error {
	dir := os.Getenv(profileDirEnv)
	var (
		mu    sync.Mutex
		start windowCost
		cpu   *os.File
	)
	writeAllocs := func(name string) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	fail := func(w http.ResponseWriter, err error) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
	window := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case windowStart:
			if dir != "" {
				// The allocation profile counts from the process's start:
				// this one is the base to subtract (pprof -base).
				if err := writeAllocs("allocs.base.pprof"); err != nil {
					fail(w, err)
					return
				}
				f, err := os.Create(filepath.Join(dir, "cpu.pprof"))
				if err != nil {
					fail(w, err)
					return
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					f.Close()
					fail(w, err)
					return
				}
				cpu = f
			}
			start = processCost()
		case windowStop:
			end := processCost()
			cost := windowCost{Mallocs: end.Mallocs - start.Mallocs, Bytes: end.Bytes - start.Bytes, CPU: end.CPU - start.CPU}
			if cpu != nil {
				pprof.StopCPUProfile()
				if err := cpu.Close(); err != nil {
					fail(w, err)
					return
				}
				cpu = nil
				if err := writeAllocs("allocs.pprof"); err != nil {
					fail(w, err)
					return
				}
				cost.Profiles = []string{filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "allocs.pprof"), filepath.Join(dir, "allocs.base.pprof")}
			}
			_ = json.NewEncoder(w).Encode(cost)
		}
	}
	return run(ctx, os.Getenv, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && (r.URL.Path == windowStart || r.URL.Path == windowStop) {
				window(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
}

// profileDir is where BENCH_PROFILE asks for the profiles, made absolute
// from the repository's root; "" when it is unset.
func profileDir() (string, error) {
	dir := os.Getenv("BENCH_PROFILE")
	if dir == "" {
		return "", nil
	}
	if !filepath.IsAbs(dir) {
		root, err := storetest.RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, dir)
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// uncontendedCost: the uncontended call of the uncontended scenario, n
// times through a profile child: the allocations, bytes and CPU time its
// process spends per call (its whole process: the handler, the HTTP server
// and client, the AWS and MCP SDKs, the garbage collector), and, with
// BENCH_PROFILE, its profiles. The child talks to the store directly, not
// through the meter, as a deployed gateway does: its overhead over the
// direct call (direct and directP99, measured just before) is a call's
// whole cost without the meter's hop and work, its store round trips
// included, as the meter cannot time them.
func (b *bench) uncontendedCost(n int, args map[string]any, direct, directP99 time.Duration) {
	t := b.t
	dir, err := profileDir()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	gw := b.rig.LaunchBinary(t, self, 1, append([]string{"AWS_ENDPOINT_URL_DYNAMODB=" + b.rig.Env.Endpoint, benchChildEnv + "=profile", profileDirEnv + "=" + dir}, strings.Fields(os.Getenv("BENCH_GATEWAY_ENV"))...)...)[0]
	defer gw.Stop()
	for range 20 {
		if c := b.call(gw.URL, "solo", "echo", args); c.status != http.StatusOK {
			t.Fatalf("warm-up call: %d %s", c.status, c.body)
		}
	}
	post := func(path string) []byte {
		resp, err := b.http.Post(gw.URL+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s %v", path, resp.StatusCode, body, err)
		}
		return body
	}
	post(windowStart)
	through := make([]time.Duration, 0, n)
	for range n {
		c := b.call(gw.URL, "solo", "echo", args)
		if c.status != http.StatusOK {
			t.Fatalf("call: %d %s", c.status, c.body)
		}
		through = append(through, c.done.Sub(c.sent))
	}
	var cost windowCost
	if err := json.Unmarshal(post(windowStop), &cost); err != nil {
		t.Fatal(err)
	}
	const sc = "uncontended capped call"
	b.add(sc, "overhead p50, unmetered (store round trips included)", ms(quantile(through, 0.5)-direct), "ms", 0, "", "")
	b.add(sc, "overhead p99, unmetered (store round trips included)", ms(quantile(through, 0.99)-directP99), "ms", 0, "", "")
	b.add(sc, "gateway process allocations per call", float64(cost.Mallocs)/float64(n), "allocs", 0, "", "")
	b.add(sc, "gateway process bytes allocated per call", float64(cost.Bytes)/float64(n)/1024, "KiB", 0, "", "")
	b.add(sc, "gateway process CPU time per call", ms(cost.CPU/time.Duration(n)), "ms", 0, "", "")
	for _, p := range cost.Profiles {
		fmt.Println("profile written to", p)
	}
}
