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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
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

// statusReport is what status shows; --json prints it as is.
type statusReport struct {
	Now      time.Time      `json:"now"`
	Limiters []limiterState `json:"limiters"`
}

type limiterState struct {
	Key    string      `json:"limiter_key"`
	Server serverState `json:"server"`
	// Slots holds the server's leases ("leases") first, then those of each
	// capped tool ("tool:<name>").
	Slots []slotState `json:"slots"`
	// Principals says, per principal, how many places it holds and how
	// many of its callers wait.
	Principals []lease.PrincipalStatus `json:"principals,omitempty"`
	// Waiting are the callers queued for a place, in the order they will
	// be served if nothing changes.
	Waiting []lease.TicketStatus `json:"waiting,omitempty"`
	// Breakers are the circuit breakers of the server's tools.
	Breakers []lease.BreakerStatus `json:"breakers,omitempty"`
	// CallMS is how long calls on the server last (the fleet's running
	// mean), 0 if unknown.
	CallMS int64 `json:"call_ms,omitempty"`
	// Buckets are the request-rate buckets: tokens left of the limit
	// (limit 0: not known, as for a bucket whose server or key no longer
	// sets that limit).
	Buckets []bucketState `json:"buckets,omitempty"`
	// Limit is an adaptive server's limit: where it is, its bounds, and
	// why it last moved.
	Limit *lease.LimitStatus `json:"limit,omitempty"`
	// PausedUntil is when calls may start again after the upstream asked
	// for a pause (its Retry-After).
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// Other is every attribute status does not read, rendered as JSON
	// values.
	Other map[string]any `json:"other,omitempty"`
}

type serverState struct {
	// Found says whether the servers table has this id.
	Found bool `json:"found"`
	// Cap is max_concurrent_requests as the gateway reads it; 0 = unlimited.
	Cap int `json:"cap"`
	// PerPrincipal is max_concurrent_per_principal; 0 = none.
	PerPrincipal int `json:"per_principal,omitempty"`
	// Invalid is why the gateway refuses the server's item, if it does.
	Invalid string `json:"invalid,omitempty"`
	// Key says the item is a key's own (max_parallel_requests, rpm_limit).
	Key bool `json:"key,omitempty"`
}

type bucketState struct {
	Name   string    `json:"name"`
	Limit  int       `json:"rpm_limit,omitempty"`
	Tokens int       `json:"tokens"`
	FullAt time.Time `json:"full_at"`
}

type slotState struct {
	Attr string `json:"attr"`
	// Cap is the limit the server item sets on it: the server's
	// max_concurrent_requests or the tool's max_concurrent; 0 = none.
	Cap    int          `json:"cap"`
	Leases []leaseState `json:"leases"`
}

type leaseState struct {
	ID string `json:"id"`
	// Holder is the gateway instance; Caller the label of the principal
	// whose call it is.
	Holder string `json:"holder"`
	Caller string `json:"caller,omitempty"`
	// ExpiresAt and TimeLeftMS are null when the stored expiry is not a
	// number (a hand edit): the limiter counts such a lease as never
	// expiring.
	ExpiresAt  *time.Time `json:"expires_at"`
	TimeLeftMS *int64     `json:"time_left_ms"`
	Expired    bool       `json:"expired"`
}

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
		return buildStatus(items, servers, keys, time.Now(), true), nil
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
	return buildStatus(items, servers, keys, time.Now(), false), nil
}

// keyLimits maps each key whose own item is among items, by its principal
// ID (key:1a2b3c4d5e6f, the item's limiter key), to its rpm_limit as the
// gateway reads it (0: none, or an item the gateway refuses). It reads
// the keys table only when there is such an item.
func (c *cli) keyLimits(items []map[string]types.AttributeValue) (map[string]int, error) {
	if !slices.ContainsFunc(items, func(item map[string]types.AttributeValue) bool {
		return strings.HasPrefix(rawAttr(item, store.LimiterKeyAttr), string(auth.KindKey)+":")
	}) {
		return nil, nil
	}
	keys, err := c.scan(c.tables.Keys)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, item := range keys {
		if k, err := auth.ParseItem(item); err == nil && k.Hash != "" {
			out[k.Principal().ID] = k.RPMLimit
		}
	}
	return out, nil
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

// buildStatus reads the lease items against the server items and the
// keys' rpm limits (by principal ID), at now. Every capped server is
// shown, with a limiter item or not; all shows uncapped servers too
// (status of one server shows it whatever it is).
func buildStatus(items, servers []map[string]types.AttributeValue, keyRPM map[string]int, now time.Time, all bool) *statusReport {
	type server struct {
		item map[string]types.AttributeValue
		srv  *registry.Server // nil when the item is invalid
		err  error
	}
	byID := map[string]*server{}
	for _, item := range servers {
		s := &server{item: item}
		s.srv, s.err = registry.Parse(item)
		byID[rawAttr(item, store.ServerIDAttr)] = s
	}
	seen := map[string]bool{}
	for _, item := range items {
		seen[rawAttr(item, store.LimiterKeyAttr)] = true
	}
	for id, s := range byID {
		capped := s.srv != nil && (s.srv.Capped() || slices.ContainsFunc(slices.Collect(maps.Values(s.srv.Tools)), func(t registry.ToolLimits) bool { return t.MaxConcurrent > 0 }))
		if !seen[id] && (all || capped) {
			items = append(items, map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: id}})
		}
	}
	r := &statusReport{Now: now.UTC(), Limiters: []limiterState{}}
	for _, item := range items {
		key := rawAttr(item, store.LimiterKeyAttr)
		if catalog.IsKey(key) {
			continue // the fleet's tool lists share the table
		}
		l := limiterState{Key: key}
		var srv *registry.Server
		capacity, perPrincipal := 0, 0
		if s, ok := byID[key]; ok {
			l.Server.Found = true
			if s.err != nil {
				l.Server.Invalid = oneLine(s.err.Error())
			} else {
				srv = s.srv
				l.Server.Cap, l.Server.PerPrincipal = srv.MaxConcurrent, srv.MaxPerPrincipal
				capacity, perPrincipal = srv.MaxConcurrent, srv.MaxPerPrincipal
			}
		} else if strings.Contains(key, ":") {
			l.Server.Key = true // a key's own item: no server id has a ':'
		}
		var ad *lease.Adaptive
		if srv != nil && srv.Adaptive {
			ad = &lease.Adaptive{Min: srv.AdaptiveMin}
		}
		st := lease.Describe(item, now, capacity, perPrincipal, ad)
		l.Limit, l.PausedUntil = st.Limit, st.PausedUntil
		l.Slots = []slotState{{Attr: lease.LeasesAttr, Cap: capacity, Leases: leasesOf(st.Leases, "", now)}}
		tools := slices.Sorted(maps.Keys(st.Tools))
		if srv != nil {
			// Every tool cap, with leases or not.
			for tool, t := range srv.Tools {
				if t.MaxConcurrent > 0 && !slices.Contains(tools, tool) {
					tools = append(tools, tool)
				}
			}
			slices.Sort(tools)
		}
		for _, tool := range tools {
			cap := 0
			if srv != nil {
				cap = srv.ToolCap(tool)
			}
			l.Slots = append(l.Slots, slotState{Attr: lease.ToolAttr(tool), Cap: cap, Leases: leasesOf(st.Leases, tool, now)})
		}
		l.Principals, l.Breakers, l.CallMS = st.Principals, st.Breakers, st.CallLength.Milliseconds()
		for _, name := range slices.Sorted(maps.Keys(st.Buckets)) {
			b := bucketState{Name: name, Limit: rpmOf(srv, name), FullAt: st.Buckets[name].UTC()}
			if l.Server.Key && name == "key" {
				b.Limit = keyRPM[key]
			}
			if b.Limit > 0 {
				b.Tokens = lease.Rate{Name: name, PerMinute: b.Limit}.Tokens(st.Buckets[name].UnixMilli(), now.UnixMilli())
			}
			l.Buckets = append(l.Buckets, b)
		}
		if len(st.Queue) > 0 {
			l.Waiting = st.Queue
		}
		other := map[string]types.AttributeValue{}
		for name, v := range item {
			if !lease.IsItemAttr(name) && name != store.LimiterKeyAttr && name != store.TTLAttr {
				other[name] = v
			}
		}
		if len(other) > 0 {
			l.Other = registry.ItemToJSON(other)
		}
		r.Limiters = append(r.Limiters, l)
	}
	slices.SortFunc(r.Limiters, func(a, b limiterState) int { return strings.Compare(a.Key, b.Key) })
	return r
}

// rpmOf is the limit of the bucket named name on srv (nil: unknown), 0 when
// not known (a key's own bucket is the key's: see keyLimits).
func rpmOf(srv *registry.Server, name string) int {
	switch {
	case srv == nil:
		return 0
	case name == "server":
		return srv.RPMLimit
	case strings.HasPrefix(name, "principal:"):
		return srv.RPMPerPrincipal
	case strings.HasPrefix(name, "tool:"):
		return srv.Tools[strings.TrimPrefix(name, "tool:")].RPMLimit
	}
	return 0
}

// leasesOf lists the leases of a slot (all of them, or those of one tool),
// soonest expiry first.
func leasesOf(all []lease.LeaseStatus, tool string, now time.Time) []leaseState {
	out := []leaseState{}
	for _, l := range all {
		if tool != "" && l.Tool != tool {
			continue
		}
		ls := leaseState{ID: l.ID, Holder: l.Instance, Caller: l.Principal, Expired: l.Lapsed}
		if l.Expiry.Year() < 9999 {
			exp := l.Expiry.UTC()
			left := exp.Sub(now).Milliseconds()
			ls.ExpiresAt, ls.TimeLeftMS = &exp, &left
		}
		out = append(out, ls)
	}
	return out
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
		fmt.Fprintf(w, "%s: %s\n", orDash(l.Key), l.Server.describe())
		for _, s := range l.Slots {
			expired := 0
			for _, ls := range s.Leases {
				if ls.Expired {
					expired++
				}
			}
			line := fmt.Sprintf("  %s: %d live", orDash(s.Attr), len(s.Leases)-expired)
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
				fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\n", orDash(ls.ID), orDash(ls.Holder), orDash(ls.Caller), exp, left)
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
			line += fmt.Sprintf("; %d consecutive failures", b.Failures)
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
		if l.PausedUntil != nil {
			fmt.Fprintf(w, "  paused at the upstream's request (Retry-After) for %v more\n", l.PausedUntil.Sub(r.Now).Round(100*time.Millisecond))
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
		if l.refusing() {
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

// refusing reports whether the limiter is in a state that refuses or
// delays calls: a cap full, callers waiting, a breaker not closed (for
// everyone, or for a principal).
func (l limiterState) refusing() bool {
	for _, s := range l.Slots {
		live := 0
		for _, ls := range s.Leases {
			if !ls.Expired {
				live++
			}
		}
		if s.Cap > 0 && live >= s.Cap {
			return true
		}
	}
	return len(l.Waiting) > 0 || slices.ContainsFunc(l.Breakers, func(b lease.BreakerStatus) bool { return b.State != "closed" || len(b.OpenFor) > 0 })
}

// printWaiting lists the queue in the order it will be served, and what
// looks wedged.
func printWaiting(w io.Writer, ts []lease.TicketStatus, now time.Time) error {
	if len(ts) == 0 {
		return nil
	}
	lapsed, turn := 0, 0
	for _, t := range ts {
		if t.Lapsed {
			lapsed++
		} else if t.Turn {
			turn++
		}
	}
	line := fmt.Sprintf("  waiting: %d caller(s), in the order they will be served (fewest places held first)", len(ts)-lapsed)
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
		switch {
		case t.Lapsed:
			state = "gone"
		case t.Turn:
			state += ", its turn"
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t#%d\t%s\n", orDash(t.Principal), orDash(t.Instance), orDash(t.Tool), t.Number, state)
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

func (s serverState) describe() string {
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
	out, err := c.db.GetItem(c.ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(c.tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, dbErr("read leases of "+key, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}
