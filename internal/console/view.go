package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/gatewaylog"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// pageTemplate is one screen: the layout, the screen's "content" and its
// "live" fragment.
type pageTemplate struct{ t *template.Template }

var funcs = template.FuncMap{
	"ago": func(now, t time.Time) string { return roundDur(now.Sub(t)) },
	"in": func(now, t time.Time) string {
		if d := t.Sub(now); d > 0 {
			return "in " + roundDur(d)
		}
		return "passed"
	},
	"dur":            roundDur,
	"clock":          func(t time.Time) string { return t.Local().Format("15:04:05") },
	"join":           func(s []string) string { return strings.Join(s, ", ") },
	"add":            func(a, b int) int { return a + b },
	"releaseWarning": func() string { return ReleaseWarning },
}

func roundDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

func parsePages() (map[string]*pageTemplate, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	pages := map[string]*pageTemplate{}
	for _, name := range []string{"fleet", "server", "keys", "calls", "denied"} {
		t, err := template.Must(base.Clone()).ParseFS(templateFiles, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: templates: %w", err)
		}
		pages[name] = &pageTemplate{t: t}
	}
	return pages, nil
}

// pageData is what every screen's templates get.
type pageData struct {
	Title, Page string
	NoNav       bool
	Where       string
	Operator    string
	ReadOnly    bool
	Dashboard   string
	Now         time.Time
	// Store is the state of the store's readings.
	Store storeState
	// LivePath is the fragment's address.
	LivePath string
	// One of these, by screen.
	Fleet  *fleetView
	Server *serverView
	Keys   *keysView
	Calls  *callsView
}

type storeState struct {
	Err      string
	OK       time.Time
	Never    bool
	StaleFor string
}

// render writes template name of screen page with d.
func (c *Console) render(w http.ResponseWriter, page, name string, d *pageData) {
	var b bytes.Buffer
	if err := c.pages[page].t.ExecuteTemplate(&b, name, d); err != nil {
		c.o.Log.Error("console: render", "page", page, "error", err)
		http.Error(w, "console: could not render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// base is the pageData every screen starts from.
func (c *Console) base(page, title string, snap *snapshot) *pageData {
	now := c.o.Now()
	d := &pageData{Title: title, Page: page, Where: c.o.Where, Operator: c.o.Operator, ReadOnly: c.o.Audit == nil || c.o.Operator == "",
		Dashboard: c.o.DashboardURL, Now: now}
	d.Store = storeState{Err: snap.Err, OK: snap.OK, Never: snap.OK.IsZero()}
	if snap.Err != "" && !snap.OK.IsZero() {
		d.Store.StaleFor = roundDur(now.Sub(snap.OK))
	}
	return d
}

// serverRow is one server on the Fleet screen.
type serverRow struct {
	ID       string
	Found    bool
	Invalid  string
	KeyItem  bool
	Capped   bool
	Limit    int // the limit in force: the cap, or the adaptive limit
	Ceiling  int // the cap, when adaptive
	Adaptive bool
	InFlight int
	// Waiting counts the callers queued, Tasks the tasks (each a ticket
	// with no caller behind it, waiting for its worker to start).
	Waiting, Tasks int
	// Oldest is how long the longest waiting caller has been seen waiting.
	Oldest  time.Duration
	Full    bool
	Breaker string // "", or open, open for N principals, half-open, probing
	// BreakerAlarm: open for everyone, half-open or probing.
	BreakerAlarm bool
	// PausedUntil is when admission resumes, and PausedBy who paused it:
	// "operator" (a hold) or "upstream" (its Retry-After, for everyone).
	PausedUntil *time.Time
	PausedBy    string
	Buckets     []fleet.Bucket
	Refusals    []codeCount
	CallMS      int64
}

type codeCount struct {
	Code  string
	Count int
}

// rowOf summarises a limiter (its first-seen times from p, if given).
func rowOf(l *fleet.Limiter, p *poller, now time.Time) serverRow {
	r := serverRow{ID: l.Key, Found: l.Server.Found, Invalid: l.Server.Invalid, KeyItem: l.Server.Key, Limit: l.Server.Cap,
		Buckets: l.Buckets, CallMS: l.CallMS}
	switch {
	case l.HeldUntil != nil:
		r.PausedUntil, r.PausedBy = l.HeldUntil, "operator"
	case l.PausedUntil != nil:
		r.PausedUntil, r.PausedBy = l.PausedUntil, "upstream"
	}
	r.Capped = r.Limit > 0
	if lim := l.Limit; lim != nil {
		r.Adaptive, r.Limit, r.Ceiling = true, lim.Current, lim.Ceiling
	}
	if len(l.Slots) > 0 {
		r.InFlight = l.Slots[0].Live()
	}
	r.Full = r.Capped && r.InFlight >= r.Limit
	for _, t := range l.Waiting {
		if t.Lapsed {
			continue
		}
		if t.Task {
			r.Tasks++
		} else {
			r.Waiting++
		}
		if p != nil {
			if at := p.since("t:" + t.ID); !at.IsZero() {
				r.Oldest = max(r.Oldest, now.Sub(at))
			}
		}
	}
	open, own, half := 0, 0, 0
	for _, b := range l.Breakers {
		switch b.State {
		case "open":
			open++
		case "half-open", "probing":
			half++
		}
		own += len(b.OpenFor)
	}
	switch {
	case open > 0:
		r.Breaker, r.BreakerAlarm = "open", true
	case half > 0:
		r.Breaker, r.BreakerAlarm = "half-open", true
	case own > 0:
		r.Breaker = fmt.Sprintf("open for %d principal(s)", own)
	}
	return r
}

// fleetView is the Fleet screen.
type fleetView struct {
	Rows []serverRow
	// Keys are the keys' own limiter items (max_parallel_requests).
	LogSource, LogErr string
}

func (c *Console) fleetView(snap *snapshot) *fleetView {
	v := &fleetView{}
	v.LogSource, v.LogErr = c.poll.calls.status()
	now := c.o.Now()
	refusals := c.poll.calls.refusals(now.Add(-5 * time.Minute))
	if snap.Report == nil {
		return v
	}
	for i := range snap.Report.Limiters {
		l := &snap.Report.Limiters[i]
		if l.Server.Key || !l.Server.Found {
			continue
		}
		r := rowOf(l, c.poll, now)
		for _, code := range slices.Sorted(maps.Keys(refusals[l.Key])) {
			r.Refusals = append(r.Refusals, codeCount{code, refusals[l.Key][code]})
		}
		v.Rows = append(v.Rows, r)
	}
	return v
}

// attrRow is one attribute of a server item, as the Server screen shows
// and edits it.
type attrRow struct {
	Name, Type, Default, Doc string
	// Value is the attribute as servers set takes it (name=Value), with
	// URLs redacted; "" when absent.
	Value   string
	Present bool
	// Secret says the value holds a reference to a secret (shown as the
	// reference).
	Secret bool
}

// leaseRow is one held place.
type leaseRow struct {
	ID, Instance, Principal, Tool string
	Since                         time.Duration // held at least this long (seen since)
	Expiry                        time.Time
	Lapsed                        bool
}

type principalRow struct {
	Principal        string
	Holding, Waiting int
	Tickets          []lease.TicketStatus
}

// serverView is the Server screen.
type serverView struct {
	ID      string
	Found   bool
	Invalid string
	Row     serverRow
	Attrs   []attrRow
	// Digest identifies the item as read: an edit is made only to it.
	Digest     string
	Leases     []leaseRow
	Principals []principalRow
	Breakers   []lease.BreakerStatus
	// BreakerNames are the tools a breaker may be reset for.
	Chart template.HTML
	Tools []toolStats
}

func (c *Console) serverView(snap *snapshot, id string) *serverView {
	now := c.o.Now()
	srv, invalid, item, found := snap.server(id)
	v := &serverView{ID: id, Found: found, Invalid: invalid}
	if found {
		v.Attrs = attrRows(item)
		v.Digest = digest(item)
	}
	_ = srv
	if l := snap.limiter(id); l != nil {
		v.Row = rowOf(l, c.poll, now)
		st := describe(l)
		for _, ls := range st {
			row := leaseRow{ID: ls.ID, Instance: lease.InstanceOf(ls.ID), Principal: ls.Caller, Lapsed: ls.Expired}
			if ls.ExpiresAt != nil {
				row.Expiry = *ls.ExpiresAt
			}
			if at := c.poll.since(ls.ID); !at.IsZero() {
				row.Since = now.Sub(at)
			}
			row.Tool = toolOf(l, ls.ID)
			v.Leases = append(v.Leases, row)
		}
		byP := map[string]*principalRow{}
		var order []string
		for _, p := range l.Principals {
			byP[p.Principal] = &principalRow{Principal: p.Principal, Holding: p.Holding, Waiting: p.Waiting}
			order = append(order, p.Principal)
		}
		for _, t := range l.Waiting {
			if byP[t.Principal] == nil {
				byP[t.Principal] = &principalRow{Principal: t.Principal}
				order = append(order, t.Principal)
			}
			byP[t.Principal].Tickets = append(byP[t.Principal].Tickets, t)
		}
		for _, p := range order {
			v.Principals = append(v.Principals, *byP[p])
		}
		v.Breakers = l.Breakers
	}
	v.Chart = chartSVG(c.poll.chart(id), now, c.o.History)
	v.Tools = c.poll.calls.stats(gatewaylog.Filter{Server: id})
	return v
}

// describe lists the leases of every slot of l, each once.
func describe(l *fleet.Limiter) []fleet.Lease {
	seen := map[string]bool{}
	var out []fleet.Lease
	for _, s := range l.Slots {
		for _, ls := range s.Leases {
			if !seen[ls.ID] {
				seen[ls.ID] = true
				out = append(out, ls)
			}
		}
	}
	return out
}

// toolOf is the capped tool whose slot holds lease id, "" for none.
func toolOf(l *fleet.Limiter, id string) string {
	for _, s := range l.Slots[1:] {
		for _, ls := range s.Leases {
			if ls.ID == id {
				return strings.TrimPrefix(s.Attr, lease.ToolAttrPrefix)
			}
		}
	}
	return ""
}

// attrRows lists every attribute a server item may have, with the
// item's value where it has one, then its x_ notes.
func attrRows(item fleet.Item) []attrRow {
	var rows []attrRow
	doc := registry.ItemToJSON(item)
	for _, a := range registry.Attributes() {
		if a.Name == "server_id" {
			continue
		}
		r := attrRow{Name: a.Name, Type: a.Type, Default: a.Default, Doc: a.Doc}
		if v, ok := doc[a.Name]; ok {
			r.Present, r.Value = true, setValue(a.Name, v)
		}
		r.Secret = a.Name == "auth"
		rows = append(rows, r)
	}
	for _, name := range slices.Sorted(maps.Keys(doc)) {
		if strings.HasPrefix(name, "x_") {
			rows = append(rows, attrRow{Name: name, Type: "any", Doc: "your own note, ignored by the gateway", Present: true, Value: setValue(name, doc[name])})
		}
	}
	return rows
}

// urlAttrs hold URLs, whose query and user information may carry secrets:
// shown redacted, as the CLI prints them.
var urlAttrs = []string{"url", "spec_url"}

// setValue renders v as servers set takes it: a string as is, anything
// else as JSON; URLs (also inside maps: auth.token_url) redacted.
func setValue(name string, v any) string {
	if s, ok := v.(string); ok {
		if slices.Contains(urlAttrs, name) {
			return safeurl.Redact(s)
		}
		return s
	}
	b, _ := json.Marshal(v)
	return safeurl.RedactText(string(b))
}

// digest identifies an item's content.
func digest(item fleet.Item) string {
	b, _ := json.Marshal(registry.ItemToJSON(item))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// keyRow is one key on the Keys screen.
type keyRow struct {
	Hash, Name, Created string
	Servers, Tools      string
	MaxParallel, RPM    int
	Invalid             string
	InFlight            int
	Tokens, TokensOf    int
	BucketFullIn        string
}

type keysView struct {
	Rows   []keyRow
	Loaded bool
}

func (c *Console) keysView(snap *snapshot) *keysView {
	v := &keysView{Loaded: !snap.KeysAt.IsZero()}
	for _, item := range snap.Keys {
		k, err := auth.ParseItem(item)
		r := keyRow{Hash: fleet.ShortHash(k.Hash), Name: k.Name, Created: fleet.RawAttr(item, auth.AttrCreated),
			Servers: strings.Join(k.Servers, ", "), MaxParallel: k.MaxParallel, RPM: k.RPMLimit}
		switch {
		case k.Tools == nil:
			r.Tools = "every tool"
		case len(k.Tools) == 0:
			r.Tools = "none"
		default:
			r.Tools = strings.Join(k.Tools, ", ")
		}
		if err != nil {
			r.Invalid = strings.TrimPrefix(err.Error(), "auth: ")
		}
		if k.Hash != "" {
			if l := snap.limiter(k.Principal().ID); l != nil {
				r.InFlight = rowOf(l, nil, c.o.Now()).InFlight
				for _, b := range l.Buckets {
					if b.Name == "key" {
						r.Tokens, r.TokensOf = b.Tokens, b.Limit
						if left := b.FullAt.Sub(c.o.Now()); left > 0 {
							r.BucketFullIn = roundDur(left)
						}
					}
				}
			} else if k.RPMLimit > 0 {
				r.Tokens, r.TokensOf = k.RPMLimit, k.RPMLimit
			}
		}
		v.Rows = append(v.Rows, r)
	}
	slices.SortFunc(v.Rows, func(a, b keyRow) int { return strings.Compare(a.Created+a.Hash, b.Created+b.Hash) })
	return v
}

// callsView is the Calls screen.
type callsView struct {
	Filter               gatewaylog.Filter
	Outcome, Code, Tool  string
	Records              []callRow
	Matched              int
	Tools                []toolStats
	LogSource, LogErr    string
	Audit                []AuditRecord
	AuditWhere, AuditErr string
	Window               string
	Query                string
}

type callRow struct {
	gatewaylog.Record
	Upstream time.Duration
	Hint     string
}

// maxShown bounds the records the Calls screen lists.
const maxShown = 200

func (c *Console) callsView(r *http.Request) *callsView {
	q := r.URL.Query()
	v := &callsView{Outcome: q.Get("outcome"), Code: strings.ToUpper(q.Get("code")), Window: roundDur(c.o.CallsWindow)}
	v.Filter = gatewaylog.Filter{Server: clipQ(q.Get("server")), Principal: clipQ(q.Get("principal"))}
	if v.Code != "" {
		v.Filter.Codes = []string{clipQ(v.Code)}
	}
	tool := clipQ(q.Get("tool"))
	v.Tool = tool
	v.LogSource, v.LogErr = c.poll.calls.status()
	recs, n := c.poll.calls.pick(v.Filter, v.Outcome, 10*maxShown)
	for _, rec := range recs {
		if tool != "" && rec.Tool != tool {
			n--
			continue
		}
		if len(v.Records) == maxShown {
			continue
		}
		row := callRow{Record: rec, Upstream: time.Duration(max(rec.DurationMS-rec.WaitMS, 0)) * time.Millisecond}
		row.Error = clipText(safeurl.RedactText(rec.Error))
		row.Hint = codeHint(rec.Code)
		v.Records = append(v.Records, row)
	}
	v.Matched = n
	for _, s := range c.poll.calls.stats(v.Filter) {
		if tool == "" || s.Tool == tool {
			v.Tools = append(v.Tools, s)
		}
	}
	v.Query = r.URL.RawQuery
	if a := c.o.AuditLog; a != nil {
		v.AuditWhere = a.Where()
		recs, err := a.Recent(r.Context(), 20)
		if err != nil {
			v.AuditErr = clipText(err.Error())
		}
		v.Audit = recs
	}
	return v
}

func clipQ(s string) string { return strings.TrimSpace(clipText(s)) }

func clipText(s string) string {
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// codeHint says what a code means, in a few words.
func codeHint(code string) string {
	switch fault.Code(code) {
	case fault.AtCapacity:
		return "a cap was full or the queue was"
	case fault.QueueTimeout:
		return "no place came free in time"
	case fault.CircuitOpen:
		return "the breaker refused it"
	case fault.RateLimited:
		return "a rate limit refused it"
	case fault.StoreUnavailable:
		return "the store failed"
	case fault.UpstreamTimeout:
		return "the upstream did not answer in time"
	case fault.UpstreamError:
		return "the upstream failed"
	}
	return ""
}
