package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit/chart"
)

// drawCap draws the picture of the cap: the upstream's calls in flight over
// time during the C = 2 saturation burst, through the in-process design and
// through mcpgate, from the upstream's own entry and exit times. The full
// bench writes results/cap.svg (docs/cap.svg is a copy of one); the smoke
// run draws it in a temporary directory and checks what it shows.
func (b *bench) drawCap(ours, base satResult) {
	t := b.t
	steps := func(r satResult) []chart.Step { return chart.Steps(r.start, chartEvents(r.events)) }
	mine, theirs := steps(ours), steps(base)
	perCaller := b.cfg.rounds
	c := chart.Chart{
		Title: fmt.Sprintf("Calls in flight at the upstream, cap %d, %d gateway processes", ours.cap, b.cfg.procs),
		Caption: fmt.Sprintf("%d callers × %d calls of a %v tool, the same burst both ways; counted by the upstream itself (%s)",
			5*ours.cap, perCaller, b.cfg.toolDuration, time.Now().UTC().Format("2006-01-02")),
		Panels: []chart.Panel{
			{Title: fmt.Sprintf("in-process design: a semaphore of %d in each process", base.cap), Steps: theirs, Cap: base.cap, Color: "#b35c1e"},
			{Title: fmt.Sprintf("mcpgate: max_concurrent_requests %d across the fleet", ours.cap), Steps: mine, Cap: ours.cap},
		},
	}
	var buf bytes.Buffer
	if err := chart.WriteSVG(&buf, c); err != nil {
		t.Fatal(err)
	}
	if p := chart.Peak(mine); p > ours.cap || p == 0 {
		t.Errorf("the picture shows mcpgate's upstream at %d calls in flight, cap %d", p, ours.cap)
	}
	if chart.Peak(theirs) == 0 {
		t.Error("the picture shows no call of the in-process design")
	}
	dir := t.TempDir()
	if b.cfg.full {
		root, err := storetest.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "results")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "cap.svg")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if b.cfg.full {
		fmt.Println("picture of the cap written to", path)
	}
}

func chartEvents(evs []demoupstream.Event) []chart.Event {
	out := make([]chart.Event, len(evs))
	for i, e := range evs {
		out[i] = chart.Event{At: e.At, Enter: e.Enter}
	}
	return out
}
