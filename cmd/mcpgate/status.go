package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/lease"
)

var statusCmd = &command{
	name:    "status",
	args:    "[SERVER_ID] [--json] [--watch [--interval D] [--count N]]",
	summary: "show every cap with its limit, the live leases and breakers",
	help: `
Shows the leases table as it is now, for every capped server (or one):
the server's cap from the servers table and, per tool with a cap of its
own, the tool's cap, each as "N live of CAP"; then every lease in the
server's map and in each per-tool map: lease id, holder (the gateway
instance, the part of the id before the first '.'), caller (the principal:
its kind's first letter and the first 8 characters of the ID the gateway
logs, k:1a2b3c4d for key:1a2b3c4d5e6f), expiry and time left. A negative time
left means the lease expired and is waiting to be purged by the next
write. Callers waiting for a place are listed oldest first, as they will be
served: caller, instance, the slots they wait for, how long they have
waited, and whether their ticket lapsed (its waiter died or stalled; the
next write purges it) or a place is free for them (the next look of the
waiter or the next release hands it over; a place that stays free while
someone waits is worth a look). Each tool's circuit breaker is shown with
its state (closed, open for how long, half-open, or probing with the
probe's lease) and its count of consecutive failures. An adaptive server's
limit is shown with its bounds, adaptive_min and max_concurrent_requests
(the gateway's ceiling is lower where the server's bulkhead is: its share
of FUNCTION_CONCURRENCY, which status does not see), and why it last
moved. Each request-rate bucket (the server's, a principal's on it, a
tool's, and a key's own in the key's item) is shown with the tokens it
holds of its limit and how long until it is full. Any other attribute of
the item is shown as "other state".

A server whose cap is full, with callers waiting or a breaker not closed
gets a line pointing to mcpgate refusals, which lists the calls refused
(AT_CAPACITY, QUEUE_TIMEOUT, CIRCUIT_OPEN, ...) by server and caller, with
request ids.

With --watch it refreshes every --interval until Ctrl-C (or --count
refreshes): in place on a terminal, as one report after another, each
headed by the time, when the output is a file or a pipe (one line of JSON
per refresh with --json).

Flags:
  --json         print the same data as JSON, for scripts
  --watch        refresh until interrupted
  --interval D   time between refreshes with --watch (default 2s, at least 100ms)
  --count N      with --watch, stop after N refreshes (default 0: until Ctrl-C)
`,
	run: runStatus,
}

// The report status prints is the fleet's (see fleet.Report).
type (
	statusReport = fleet.Report
	leaseState   = fleet.Lease
)

func runStatus(c *cli, args []string) error {
	fs := c.newFlags()
	asJSON := fs.Bool("json", false, "")
	watch := fs.Bool("watch", false, "")
	interval := fs.Duration("interval", 2*time.Second, "")
	count := fs.Int("count", 0, "")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("want at most one SERVER_ID, got %d arguments", len(pos))
	}
	if *interval < 100*time.Millisecond {
		return usagef("--interval %v is too short: at least 100ms", *interval)
	}
	if *count < 0 {
		return usagef("--count must not be negative")
	}
	if err := c.open(); err != nil {
		return err
	}
	if !*watch {
		r, err := c.readStatus(pos)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(c.stdout, r)
		}
		return printStatus(c.stdout, r)
	}
	return c.watchStatus(pos, *asJSON, *interval, *count)
}

// readStatus reads the limiter items and server items status shows: of
// the one server in pos, or of every server.
func (c *cli) readStatus(pos []string) (*statusReport, error) {
	var items, servers []map[string]types.AttributeValue
	if len(pos) == 1 {
		id := pos[0]
		item, err := c.leaseItem(id)
		if err != nil {
			return nil, err
		}
		srv, err := c.serverItem(id)
		if err != nil {
			return nil, err
		}
		if item == nil && srv == nil {
			return nil, fmt.Errorf("no server %q and no leases for it", id)
		}
		if item != nil {
			items = append(items, item)
		}
		if srv != nil {
			servers = append(servers, srv)
		}
		keys, err := c.keyLimits(items)
		if err != nil {
			return nil, err
		}
		return fleet.Build(items, servers, keys, time.Now(), true), nil
	}
	items, err := c.scan(c.tables.Leases)
	if err != nil {
		return nil, err
	}
	if servers, err = c.scan(c.tables.Servers); err != nil {
		return nil, err
	}
	keys, err := c.keyLimits(items)
	if err != nil {
		return nil, err
	}
	return fleet.Build(items, servers, keys, time.Now(), false), nil
}

// keyLimits maps each key whose own item is among items to its rpm_limit
// (fleet.Store.KeyLimits).
func (c *cli) keyLimits(items []map[string]types.AttributeValue) (map[string]int, error) {
	m, err := c.fleet().KeyLimits(c.ctx, items)
	if err != nil {
		return nil, dbErr("scan "+c.tables.Keys, err)
	}
	return m, nil
}

// watchStatus prints the status every interval until the command's
// context ends (Ctrl-C) or count reports were printed (0 = no limit). On
// a terminal each report replaces the last; elsewhere they follow one
// another, each headed by its time. A failed read is reported and retried
// at the next refresh.
func (c *cli) watchStatus(pos []string, asJSON bool, interval time.Duration, count int) error {
	tty := isTerminal(c.stdout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 1; ; n++ {
		r, err := c.readStatus(pos)
		var frame bytes.Buffer
		switch {
		case err != nil && c.ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintf(&frame, "mcpgate status: %s (retrying in %v)\n", oneLine(err.Error()), interval)
		case asJSON:
			frame.WriteString(compactJSON(r) + "\n")
		default:
			fmt.Fprintf(&frame, "mcpgate status at %s, every %v (Ctrl-C to stop)\n\n", time.Now().Format("15:04:05"), interval)
			if err := printStatus(&frame, r); err != nil {
				return err
			}
		}
		switch {
		case tty && !asJSON:
			c.stdout.Write(redraw(frame.Bytes()))
		case !asJSON && n > 1:
			fmt.Fprintln(c.stdout)
			c.stdout.Write(frame.Bytes())
		default:
			c.stdout.Write(frame.Bytes())
		}
		if count > 0 && n >= count {
			return nil
		}
		select {
		case <-c.ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// redraw turns a frame into terminal output that replaces the previous
// one: cursor home, each line cleared to its end, the rest of the screen
// cleared below.
func redraw(frame []byte) []byte {
	var b bytes.Buffer
	b.WriteString("\x1b[H")
	for line := range strings.Lines(string(frame)) {
		b.WriteString(strings.TrimSuffix(line, "\n"))
		b.WriteString("\x1b[K\n")
	}
	b.WriteString("\x1b[J")
	return b.Bytes()
}

// isTerminal reports whether w is a terminal: a character device, or a
// writer that says it is one.
func isTerminal(w io.Writer) bool {
	if t, ok := w.(interface{ IsTerminal() bool }); ok {
		return t.IsTerminal()
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func printStatus(w io.Writer, r *statusReport) error {
	if len(r.Limiters) == 0 {
		fmt.Fprintln(w, "no capped servers and no limiter items")
		return nil
	}
	for i, l := range r.Limiters {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: %s\n", orDash(l.Key), clip.Escape(describeServer(l.Server)))
		for _, s := range l.Slots {
			expired, tasks := 0, 0
			for _, ls := range s.Leases {
				switch {
				case ls.Expired:
					expired++
				case lease.IsTaskID(ls.ID):
					tasks++
				}
			}
			line := fmt.Sprintf("  %s: %d live", orDash(s.Attr), len(s.Leases)-expired)
			if tasks > 0 {
				line += fmt.Sprintf(" (%d of them tasks running)", tasks)
			}
			switch {
			case s.Cap > 0:
				line += fmt.Sprintf(" of %d", s.Cap)
			case l.Server.Found && l.Server.Invalid == "":
				line += " (no cap)"
			}
			if expired > 0 {
				line += fmt.Sprintf(", %d expired (waiting to be purged)", expired)
			}
			fmt.Fprintln(w, line)
			if len(s.Leases) == 0 {
				continue
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "    LEASE\tHOLDER\tCALLER\tEXPIRES\tTIME LEFT")
			for _, ls := range s.Leases {
				exp, left := "never (expiry is not a number)", "-"
				if ls.ExpiresAt != nil {
					exp = ls.ExpiresAt.Format("2006-01-02T15:04:05.000Z07:00")
					left = (time.Duration(*ls.TimeLeftMS) * time.Millisecond).Round(100 * time.Millisecond).String()
				}
				caller := orDash(ls.Caller)
				if lease.IsTaskID(ls.ID) {
					caller += " (task)"
				}
				fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\n", orDash(ls.ID), orDash(ls.Holder), caller, exp, left)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		for _, b := range l.Breakers {
			line := fmt.Sprintf("  breaker %s: %s", orDash(b.Name), orDash(b.State))
			for _, p := range slices.Sorted(maps.Keys(b.OpenFor)) {
				line += fmt.Sprintf(", open for %s alone for %v more", orDash(p), b.OpenFor[p].Sub(r.Now).Round(100*time.Millisecond))
			}
			switch b.State {
			case "open":
				line += fmt.Sprintf(" for %v more", b.OpenUntil.Sub(r.Now).Round(100*time.Millisecond))
			case "probing":
				line += fmt.Sprintf(" (probe %s, its lease ends in %v)", orDash(b.Probe), b.ProbeExpiry.Sub(r.Now).Round(100*time.Millisecond))
			case "half-open":
				line += " (the next call is the probe)"
			}
			for _, p := range slices.Sorted(maps.Keys(b.Failures)) {
				line += fmt.Sprintf("; %s: %d consecutive failures", p, b.Failures[p])
			}
			fmt.Fprintln(w, line)
		}
		if len(l.Principals) > 0 {
			var parts []string
			for _, p := range l.Principals {
				part := fmt.Sprintf("%s holds %d", orDash(p.Principal), p.Holding)
				if p.Waiting > 0 {
					part += fmt.Sprintf(", %d waiting", p.Waiting)
				}
				parts = append(parts, part)
			}
			fmt.Fprintf(w, "  principals: %s\n", strings.Join(parts, "; "))
		}
		if l.CallMS > 0 {
			fmt.Fprintf(w, "  calls last about %v\n", time.Duration(l.CallMS)*time.Millisecond)
		}
		if lim := l.Limit; lim != nil {
			line := fmt.Sprintf("  adaptive limit: %d (between %d and %d, or its bulkhead if lower)", lim.Current, lim.Min, lim.Ceiling)
			if lim.Why != "" {
				line += fmt.Sprintf("; last moved %v ago, %s", r.Now.Sub(lim.At).Round(100*time.Millisecond), orDash(lim.Why))
			}
			fmt.Fprintln(w, line)
		}
		if l.HeldUntil != nil {
			fmt.Fprintf(w, "  held by an operator for %v more\n", l.HeldUntil.Sub(r.Now).Round(100*time.Millisecond))
		}
		for _, p := range l.Pauses {
			what := "the server"
			if p.Tool != "" {
				what = "tool " + p.Tool
			}
			if !p.Until.IsZero() {
				fmt.Fprintf(w, "  %s paused at the upstream's request (Retry-After) for %v more\n", what, p.Until.Sub(r.Now).Round(100*time.Millisecond))
			}
			for _, who := range slices.Sorted(maps.Keys(p.For)) {
				fmt.Fprintf(w, "  %s paused for %s alone (its calls' Retry-After) for %v more\n", what, who, p.For[who].Sub(r.Now).Round(100*time.Millisecond))
			}
		}
		for _, b := range l.Buckets {
			full := "full"
			if left := b.FullAt.Sub(r.Now); left > 0 {
				full = "full in " + left.Round(100*time.Millisecond).String()
			}
			if b.Limit > 0 {
				fmt.Fprintf(w, "  rate %s: %d of %d tokens (%s)\n", orDash(b.Name), b.Tokens, b.Limit, full)
			} else {
				fmt.Fprintf(w, "  rate %s: %s\n", orDash(b.Name), full)
			}
		}
		if err := printWaiting(w, l.Waiting, r.Now); err != nil {
			return err
		}
		if l.Refusing() {
			fmt.Fprintf(w, "  calls refused lately, and why: mcpgate refusals --server %s\n", orDash(l.Key))
		}
		if len(l.Other) > 0 {
			fmt.Fprintln(w, "  other state:")
			for _, name := range slices.Sorted(maps.Keys(l.Other)) {
				fmt.Fprintf(w, "    %s = %s\n", orDash(name), compactJSON(l.Other[name]))
			}
		}
	}
	return nil
}

// printWaiting lists the queue in the order it will be served, and what
// looks wedged.
func printWaiting(w io.Writer, ts []lease.TicketStatus, now time.Time) error {
	if len(ts) == 0 {
		return nil
	}
	lapsed, turn, tasks := 0, 0, 0
	for _, t := range ts {
		switch {
		case t.Lapsed:
			lapsed++
		case t.Task:
			tasks++
		}
		if !t.Lapsed && t.Turn {
			turn++
		}
	}
	line := fmt.Sprintf("  waiting: %d caller(s) and %d task(s), in the order they will be served (fewest places held first)", len(ts)-lapsed-tasks, tasks)
	if lapsed > 0 {
		line += fmt.Sprintf("; %d gone (its caller gave up or died; the next write purges it)", lapsed)
	}
	if turn > 0 {
		line += fmt.Sprintf("; a place is free for %d of them (each takes it at its next look)", turn)
	}
	fmt.Fprintln(w, line)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    CALLER\tINSTANCE\tTOOL\tTICKET\tGIVES UP")
	for _, t := range ts {
		state := "in " + t.Deadline.Sub(now).Round(100*time.Millisecond).String()
		who := orDash(t.Principal)
		if t.Task {
			who += " (task)"
		}
		switch {
		case t.Lapsed:
			state = "gone"
		case t.Turn:
			state += ", its turn"
		case t.Passed:
			state += ", passed: no worker has claimed it in " + lease.StartTimeout.String() + " since its first start"
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t#%d\t%s\n", who, orDash(t.Instance), orDash(t.Tool), t.Number, state)
	}
	return tw.Flush()
}

// orDash is a value read from a log or an item as a text view prints it:
// escaped (clip.Escape), so that no value can drive the terminal, forge a
// line or reorder the text around it; "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return clip.Escape(s)
}

func describeServer(s fleet.ServerState) string {
	switch {
	case s.Key:
		return "a key's own limits (max_parallel_requests, rpm_limit)"
	case !s.Found:
		return "not in the servers table"
	case s.Invalid != "":
		return "server item invalid: " + s.Invalid
	case s.Cap <= 0:
		return "cap unlimited (calls take no lease)"
	case s.PerPrincipal > 0:
		return "cap " + strconv.Itoa(s.Cap) + ", " + strconv.Itoa(s.PerPrincipal) + " per principal"
	default:
		return "cap " + strconv.Itoa(s.Cap)
	}
}

// leaseItem reads a limiter item (consistently); nil when there is none.
func (c *cli) leaseItem(key string) (map[string]types.AttributeValue, error) {
	item, err := c.fleet().Lease(c.ctx, key)
	if err != nil {
		return nil, dbErr("read leases of "+key, err)
	}
	return item, nil
}
