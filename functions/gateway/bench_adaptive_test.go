package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
	"github.com/mcpgate/mcpgate/internal/testkit/chart"
)

// adaptiveRun is one server setting's run against the batch upstream.
type adaptiveRun struct {
	served, failed int
	peak           int
	start          time.Time
	samples        []testkit.BatchSample
	// limits are the adaptive limit's samples over the run.
	limits []chart.Step
	// settle is, per knee move, how long the limit took to come within
	// one of the new knee and stay there for a second.
	settle []time.Duration
}

// adaptive: 16 agents through the bench's processes call a batch upstream
// (3 calls at once in 200 ms, slower with the square of the overload, 503
// with Retry-After past twice its knee) whose knee moves 3 → 6 → 2: through
// an adaptive server with a ceiling of 12, through a fixed cap of 12 (an
// admin's guess), and through the best fixed cap for each phase (the knee
// itself, set as it moves: what nobody can know). Goodput is calls served
// a second; the limit's settling time is from a knee's move until it stays
// within one of the new knee.
func (b *bench) adaptive() {
	phase, agents := 20*time.Second, 16
	if !b.cfg.full {
		phase, agents = time.Second, 4
	}
	knees := []int{3, 6, 2}
	up := testkit.StartBatch(b.t, knees[0], 200*time.Millisecond)
	run := func(id string, item map[string]any, perPhase func(knee int)) adaptiveRun {
		b.rig.PutServer(item)
		for _, g := range b.rig.Gateways() {
			if c := b.call(g.URL, id, "work", nil); c.status != http.StatusOK {
				b.t.Fatalf("adaptive: warm-up of %s: %d %s", id, c.status, c.body)
			}
		}
		up.SetKnee(knees[0])
		up.Reset()
		r := adaptiveRun{start: time.Now()}
		var mu sync.Mutex
		for _, knee := range knees {
			up.SetKnee(knee)
			if perPhase != nil {
				perPhase(knee)
			}
			end := time.Now().Add(phase)
			var wg sync.WaitGroup
			for i := range agents {
				wg.Go(func() {
					g := b.rig.Gateway(i)
					for time.Now().Before(end) {
						c := b.callCtx(context.Background(), g.URL, id, "work", nil)
						mu.Lock()
						if c.status == http.StatusOK {
							r.served++
						} else {
							r.failed++
						}
						mu.Unlock()
						if c.status != http.StatusOK {
							time.Sleep(time.Second) // the agent honours the Retry-After
						}
					}
				})
			}
			if item["adaptive"] == true {
				wg.Go(func() {
					moved, within := time.Now(), time.Time{}
					settled := false
					for time.Now().Before(end) {
						l := max(limitOf(b.t, b.rig.Env, id), 1)
						mu.Lock()
						r.limits = append(r.limits, chart.Step{At: time.Since(r.start), Value: l})
						mu.Unlock()
						switch {
						case l < knee-1 || l > knee+1:
							within = time.Time{}
						case within.IsZero():
							within = time.Now()
						case !settled && time.Since(within) >= time.Second:
							settled = true
							mu.Lock()
							r.settle = append(r.settle, within.Sub(moved))
							mu.Unlock()
						}
						time.Sleep(100 * time.Millisecond)
					}
					if !settled {
						mu.Lock()
						r.settle = append(r.settle, -1)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
		}
		st := up.Stats()
		r.peak, r.samples = st.Peak, st.Samples
		return r
	}
	base := func(id string, capacity int) map[string]any {
		return map[string]any{"server_id": id, "url": up.URL, "max_concurrent_requests": capacity, "on_limit": "queue", "queue_timeout": 30, "timeout": 10}
	}
	adaptiveItem := base("adapts", 12)
	adaptiveItem["adaptive"] = true
	ours := run("adapts", adaptiveItem, nil)
	total := phase.Seconds() * float64(len(knees))
	sc := fmt.Sprintf("adaptive: batch upstream, knee 3 → 6 → 2 every %v, %d agents, %d procs", phase, agents, len(b.rig.Gateways()))
	goodput := func(r adaptiveRun) float64 { return float64(r.served) / total }
	failRate := func(r adaptiveRun) float64 { return float64(r.failed) / float64(max(r.served+r.failed, 1)) }
	guess := ours
	if b.cfg.full {
		guess = run("guess", base("guess", 12), nil)
		best := run("best", base("best", knees[0]), func(knee int) {
			b.rig.PutServer(base("best", knee))
			time.Sleep(registry.DefaultCacheTTL + 100*time.Millisecond) // every process's registry cache sees it
		})
		b.add(sc, "goodput, best fixed cap per phase (unknowable)", goodput(best), "calls/s", 0, "", "")
		b.add(sc, "goodput, adaptive (ceiling 12)", goodput(ours), "calls/s", goodput(best), "best fixed", "≥ 0.85")
		b.add(sc, "goodput, fixed cap 12 (a guess)", goodput(guess), "calls/s", goodput(best), "best fixed", "")
		b.add(sc, "calls failed, fixed cap 12", 100*failRate(guess), "%", 0, "", "")
	} else {
		b.add(sc, "goodput, adaptive (ceiling 12)", goodput(ours), "calls/s", 0, "", "")
	}
	b.add(sc, "calls failed, adaptive", 100*failRate(ours), "%", 0, "", "≤ 5")
	for i, s := range ours.settle {
		from := "start"
		if i > 0 {
			from = fmt.Sprintf("knee %d → %d", knees[i-1], knees[i])
		}
		if s < 0 {
			b.add(sc, "limit settled within one of the knee, after "+from, -1, "s (never)", 0, "", "")
			continue
		}
		b.add(sc, "limit settled within one of the knee, after "+from, s.Seconds(), "s", 0, "", "")
	}
	b.add(sc, "upstream peak in flight, adaptive", float64(ours.peak), "calls", 12, "ceiling", "≤ ceiling")
	if ours.peak > 12 {
		b.t.Errorf("%s: the upstream saw %d calls at once; ceiling 12", sc, ours.peak)
	}
	if ours.served == 0 {
		b.t.Errorf("%s: no call served", sc)
	}
	b.drawAdaptive(ours, guess, knees, phase)
}

// drawAdaptive writes results/adaptive.svg: the adaptive limit and the
// upstream's calls in flight over time, beside the guess's.
func (b *bench) drawAdaptive(ours, guess adaptiveRun, knees []int, phase time.Duration) {
	inFlight := func(r adaptiveRun) []chart.Step {
		steps := []chart.Step{{At: 0, Value: 0}}
		for _, s := range r.samples {
			steps = append(steps, chart.Step{At: max(s.At.Sub(r.start), 0), Value: s.InFlight})
		}
		return steps
	}
	var knee []chart.Step
	for i, k := range knees {
		knee = append(knee, chart.Step{At: time.Duration(i) * phase, Value: k})
	}
	c := chart.Chart{
		Title:   "An adaptive limit against a batch upstream whose knee moves 3 → 6 → 2",
		Caption: fmt.Sprintf("%d gateway processes; the upstream's own count of calls in flight (%s)", len(b.rig.Gateways()), time.Now().UTC().Format("2006-01-02")),
		Panels: []chart.Panel{
			{Title: "the upstream's knee (unknown to the gateway)", Steps: knee, Color: "#777777"},
			{Title: "mcpgate's adaptive limit (ceiling 12), fleet-wide", Steps: ours.limits, Cap: 12},
			{Title: "calls in flight at the upstream, adaptive", Steps: inFlight(ours), Cap: 12},
			{Title: "calls in flight at the upstream, a fixed cap of 12", Steps: inFlight(guess), Cap: 12, Color: "#b35c1e"},
		},
	}
	var buf bytes.Buffer
	if err := chart.WriteSVG(&buf, c); err != nil {
		b.t.Fatal(err)
	}
	dir := b.t.TempDir()
	if b.cfg.full {
		root, err := storetest.RepoRoot()
		if err != nil {
			b.t.Fatal(err)
		}
		dir = filepath.Join(root, "results")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "adaptive.svg")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.t.Fatal(err)
	}
	if b.cfg.full {
		fmt.Println("picture of the adaptive limit written to", path)
	}
}
