package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// coldFleet: a burst of calls over fresh gateway processes, as when a
// spike starts many Lambda instances at once. Before a call each process
// needs the upstream's tool list; what matters to the upstream the cap
// protects is how many requests other than tools/call reach it, outside
// the cap. Measured with the tool catalog off (each process lists the
// upstream itself) and on (one list for the fleet per CATALOG_TTL).
func (b *bench) coldFleet() {
	procs, calls := 4, 20
	if b.cfg.full {
		procs, calls = 20, 100
	}
	up := newMethodCounter(b.t, b.rig.Demo.URL)
	sc := fmt.Sprintf("cold fleet: %d calls over %d fresh processes", calls, procs)
	per100 := func(n int) float64 { return float64(n) * 100 / float64(calls) }
	var before float64
	for _, mode := range []string{"off", "on"} {
		// A capped server (the catalog serves limited servers only), its
		// cap never reached.
		id := "cold_" + mode
		b.rig.PutServer(map[string]any{"server_id": id, "url": up.URL, "max_concurrent_requests": 1000})
		up.reset()
		b.meter.reset()
		burst(b.t, b.rig, b.rig.Key, id, procs, calls, append(b.gatewayEnv(), "TOOL_CATALOG="+mode)...)
		got := up.reset()
		store := b.meter.reset()
		other := 0
		for m, n := range got {
			if m != "tools/call" {
				other += n
			}
		}
		if got["tools/call"] != calls {
			b.t.Errorf("%s, catalog %s: upstream saw %d tools/call, want %d", sc, mode, got["tools/call"], calls)
		}
		b.t.Logf("%s, catalog %s: upstream requests %s", sc, mode, methodList(got))
		if mode == "off" {
			before = per100(other)
			b.add(sc, "upstream requests other than tools/call per 100 calls, catalog off", before, "reqs", 0, "", "")
			b.add(sc, "upstream tools/list, catalog off", float64(got["tools/list"]), "reqs", 0, "", "")
			continue
		}
		b.add(sc, "upstream requests other than tools/call per 100 calls, catalog on", per100(other), "reqs", before, "catalog off", "")
		b.add(sc, "upstream tools/list, catalog on", float64(got["tools/list"]), "reqs", 0, "", "≤ 1 per CATALOG_TTL")
		b.add(sc, "catalog store requests per process", float64(store.ops["catalog GetItem"]+store.ops["catalog UpdateItem"])/float64(procs), "ops", 0, "", "")
		if got["tools/list"] > 1 {
			b.t.Errorf("%s: %d tools/list with the catalog, want at most 1", sc, got["tools/list"])
		}
	}
}

// methodList prints counts by method, sorted.
func methodList(n map[string]int) string {
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s %d", m, n[m]))
	}
	return strings.Join(parts, ", ")
}
