package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
)

var statusCmd = &command{
	name:    "status",
	args:    "[SERVER_ID] [--json]",
	summary: "show the live leases of every capped server (or one)",
	help: `
Shows the leases table as it is now: for each limiter item (one per capped
server that has been called), the server's cap from the servers table, and
every lease in the server's map and in each per-tool map: lease id, holder
(the gateway instance, the part of the id before the first '.'), expiry and
time left. A negative time left means the lease expired and is waiting to be
purged by the next acquire. Each tool's circuit breaker is shown with its
state (closed, open for how long, half-open, or probing with the probe's
lease) and its count of consecutive failures. Any other attribute of the
item is shown as "other state".

Flags:
  --json   print the same data as JSON, for scripts
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
	// Slots holds the server's map ("leases") first, then each "tool:<name>".
	Slots []slotState `json:"slots"`
	// Breakers are the circuit breakers of the server's tools.
	Breakers []lease.BreakerStatus `json:"breakers,omitempty"`
	// Waiting counts, per slot map, the live marks of callers that have
	// waited long and go before newcomers.
	Waiting map[string]int `json:"waiting,omitempty"`
	// Other is every other attribute but ttl, rendered as JSON values.
	Other map[string]any `json:"other,omitempty"`
}

type serverState struct {
	// Found says whether the servers table has this id.
	Found bool `json:"found"`
	// Cap is max_concurrent_requests as the gateway reads it; 0 = unlimited.
	Cap int `json:"cap"`
	// Invalid is why the gateway refuses the server's item, if it does.
	Invalid string `json:"invalid,omitempty"`
}

type slotState struct {
	Attr   string       `json:"attr"`
	Leases []leaseState `json:"leases"`
}

type leaseState struct {
	ID     string `json:"id"`
	Holder string `json:"holder"`
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
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("want at most one SERVER_ID, got %d arguments", len(pos))
	}
	if err := c.open(); err != nil {
		return err
	}
	var items, servers []map[string]types.AttributeValue
	if len(pos) == 1 {
		id := pos[0]
		item, err := c.leaseItem(id)
		if err != nil {
			return err
		}
		srv, err := c.serverItem(id)
		if err != nil {
			return err
		}
		if item == nil && srv == nil {
			return fmt.Errorf("no server %q and no leases for it", id)
		}
		if item == nil {
			item = map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: id}}
		}
		items = append(items, item)
		if srv != nil {
			servers = append(servers, srv)
		}
	} else {
		if items, err = c.scan(c.tables.Leases); err != nil {
			return err
		}
		if servers, err = c.scan(c.tables.Servers); err != nil {
			return err
		}
	}
	r := buildStatus(items, servers, time.Now())
	if *asJSON {
		return printJSON(c.stdout, r)
	}
	return printStatus(c, r)
}

// buildStatus reads the lease items against the server items, at now.
func buildStatus(items, servers []map[string]types.AttributeValue, now time.Time) *statusReport {
	byID := map[string]map[string]types.AttributeValue{}
	for _, s := range servers {
		byID[rawAttr(s, store.ServerIDAttr)] = s
	}
	r := &statusReport{Now: now.UTC(), Limiters: []limiterState{}}
	for _, item := range items {
		if catalog.IsKey(rawAttr(item, store.LimiterKeyAttr)) {
			continue // the fleet's tool lists share the table
		}
		l := limiterState{Key: rawAttr(item, store.LimiterKeyAttr), Slots: []slotState{{Attr: lease.ServerAttr, Leases: []leaseState{}}}}
		if srv, ok := byID[l.Key]; ok {
			l.Server.Found = true
			if s, err := registry.Parse(srv); err != nil {
				l.Server.Invalid = oneLine(err.Error())
			} else {
				l.Server.Cap = s.MaxConcurrent
			}
		}
		other := map[string]types.AttributeValue{}
		for _, name := range slices.Sorted(maps.Keys(item)) {
			m, isMap := item[name].(*types.AttributeValueMemberM)
			switch {
			case name == store.LimiterKeyAttr || name == store.TTLAttr:
			case name == lease.ServerAttr && isMap:
				l.Slots[0].Leases = leasesOf(m, now)
			case strings.HasPrefix(name, lease.ToolAttrPrefix) && isMap:
				l.Slots = append(l.Slots, slotState{Attr: name, Leases: leasesOf(m, now)})
			case strings.HasPrefix(name, lease.WaitingAttrPrefix) && isMap:
				live := 0
				for _, ls := range leasesOf(m, now) {
					if !ls.Expired {
						live++
					}
				}
				if live > 0 {
					if l.Waiting == nil {
						l.Waiting = map[string]int{}
					}
					l.Waiting[strings.TrimPrefix(name, lease.WaitingAttrPrefix)] = live
				}
			case lease.IsBreakerAttr(name):
			default:
				other[name] = item[name]
			}
		}
		if len(other) > 0 {
			l.Other = registry.ItemToJSON(other)
		}
		l.Breakers = lease.Breakers(item, now)
		r.Limiters = append(r.Limiters, l)
	}
	slices.SortFunc(r.Limiters, func(a, b limiterState) int { return strings.Compare(a.Key, b.Key) })
	return r
}

// leasesOf lists a slot map's leases.
func leasesOf(m *types.AttributeValueMemberM, now time.Time) []leaseState {
	out := []leaseState{}
	for _, id := range slices.Sorted(maps.Keys(m.Value)) {
		holder, _, _ := strings.Cut(id, ".")
		ls := leaseState{ID: id, Holder: holder}
		if n, ok := m.Value[id].(*types.AttributeValueMemberN); ok {
			if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
				exp := time.UnixMilli(ms).UTC()
				left := ms - now.UnixMilli()
				ls.ExpiresAt, ls.TimeLeftMS, ls.Expired = &exp, &left, left < 0
			}
		}
		out = append(out, ls)
	}
	// Soonest expiry first; an expiry that is not a number counts as never.
	left := func(ls leaseState) int64 {
		if ls.TimeLeftMS == nil {
			return math.MaxInt64
		}
		return *ls.TimeLeftMS
	}
	slices.SortStableFunc(out, func(a, b leaseState) int { return cmp.Compare(left(a), left(b)) })
	return out
}

func printStatus(c *cli, r *statusReport) error {
	if len(r.Limiters) == 0 {
		fmt.Fprintln(c.stdout, "no limiter items: no capped server has taken a lease yet")
		return nil
	}
	for i, l := range r.Limiters {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		fmt.Fprintf(c.stdout, "%s: %s\n", l.Key, l.Server.describe())
		for _, s := range l.Slots {
			if len(s.Leases) == 0 {
				fmt.Fprintf(c.stdout, "  %s: no live leases\n", s.Attr)
				continue
			}
			expired := 0
			for _, ls := range s.Leases {
				if ls.Expired {
					expired++
				}
			}
			line := fmt.Sprintf("  %s: %d live", s.Attr, len(s.Leases)-expired)
			if s.Attr == lease.ServerAttr && l.Server.Cap > 0 {
				line += fmt.Sprintf(" of %d", l.Server.Cap)
			}
			if expired > 0 {
				line += fmt.Sprintf(", %d expired (waiting to be purged)", expired)
			}
			fmt.Fprintln(c.stdout, line)
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "    LEASE\tHOLDER\tEXPIRES\tTIME LEFT")
			for _, ls := range s.Leases {
				exp, left := "never (expiry is not a number)", "-"
				if ls.ExpiresAt != nil {
					exp = ls.ExpiresAt.Format("2006-01-02T15:04:05.000Z07:00")
					left = (time.Duration(*ls.TimeLeftMS) * time.Millisecond).Round(100 * time.Millisecond).String()
				}
				fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", ls.ID, ls.Holder, exp, left)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		for _, b := range l.Breakers {
			line := fmt.Sprintf("  breaker %s: %s", b.Name, b.State)
			switch b.State {
			case "open":
				line += fmt.Sprintf(" for %v more", b.OpenUntil.Sub(r.Now).Round(100*time.Millisecond))
			case "probing":
				line += fmt.Sprintf(" (probe %s, its lease ends in %v)", b.Probe, b.ProbeExpiry.Sub(r.Now).Round(100*time.Millisecond))
			case "half-open":
				line += " (the next call is the probe)"
			}
			line += fmt.Sprintf("; %d consecutive failures", b.Failures)
			fmt.Fprintln(c.stdout, line)
		}
		for _, attr := range slices.Sorted(maps.Keys(l.Waiting)) {
			fmt.Fprintf(c.stdout, "  %s: %d caller(s) waiting long, served before newcomers\n", attr, l.Waiting[attr])
		}
		if len(l.Other) > 0 {
			fmt.Fprintln(c.stdout, "  other state:")
			for _, name := range slices.Sorted(maps.Keys(l.Other)) {
				fmt.Fprintf(c.stdout, "    %s = %s\n", name, compactJSON(l.Other[name]))
			}
		}
	}
	return nil
}

func (s serverState) describe() string {
	switch {
	case !s.Found:
		return "not in the servers table"
	case s.Invalid != "":
		return "server item invalid: " + s.Invalid
	case s.Cap <= 0:
		return "cap unlimited (calls take no lease)"
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
