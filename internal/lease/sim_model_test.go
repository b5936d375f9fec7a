package lease

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The model is the protocol of doc.go written apart from its code, for the
// fault simulation to judge the code by: its own reading of a raw item
// (mRead), its own hand-out of free places (mItem.handout), buckets
// (mBucket), gates (mGate) and adaptive limit, and its own rules for what a
// write may change (mJudgeWrite) and what every state must hold
// (mCheckState). It
// names the item's attributes as doc.go's table does and uses none of the
// limiter's functions: a defect in the code cannot hide in the judge.
//
// Its shape is deliberately plain: the item becomes explicit structs; the
// turn is found by handing the free places out one at a time, recounting
// what every candidate holds after each; a write is judged from the item
// before it and after it (what it did, whatever expression it used) and
// what the harness knows of its sender.

// Parameters doc.go names without a value: the model's reading.
const (
	// modelIdleGate is how long an open gate entry must have seen no
	// failure before a purge may remove it (doc.go names IdleGate, not its
	// value).
	modelIdleGate = time.Minute
	// modelTTL is how far past its writer's now every write sets ttl.
	modelTTL = 86400 // seconds
)

// modelQueueReserve is QueueReserve(n): the last places of a queue of n
// that a principal with callers waiting may not take — the last quarter,
// rounded down, as doc.go says.
func modelQueueReserve(n int) int {
	if n < 4 {
		return 0
	}
	return n / 4
}

// ---------------------------------------------------------------------
// Reading an item.

// mTicket is one waiting caller: its queue number and its body.
type mTicket struct {
	id      string
	n       int64
	p       string // principal
	d       int64  // deadline, Unix ms
	t       string // tool
	c, r    int64  // the tool's cap and rpm limit (0: none)
	l       int64  // the look period its caller announces, ms (0: none)
	h       bool   // h: its call holds nothing
	hasBody bool   // tickets.<id> is there
	hasN    bool   // queue.<id> (tasks.<id>: task) is there
	// A task's: in tasks, not queue; x its task, s its last start (Unix
	// ms; 0: none), f the first of its starts since its turn came (0:
	// s), w the claim that last took its place ("": none).
	task bool
	x    string
	s, f int64
	w    string
}

// unclaimedSince is when task ticket tk's starts first went out
// unclaimed (0: no start out; a first after the last start, or before
// 1970, is none).
func (tk *mTicket) unclaimedSince() int64 {
	switch {
	case tk.s <= 0:
		return 0
	case tk.f > 0 && tk.f <= tk.s:
		return tk.f
	}
	return tk.s
}

// claimName is the claim t names ("": none, or no ticket).
func (t *mTicket) claimName() string {
	if t == nil {
		return ""
	}
	return t.w
}

// mEntry is one entry of a gate: "*" or a principal's.
type mEntry struct {
	u, e, f, t int64 // closed until; probe expiry; failures; last failure (0: absent)
	p          string
	a          string // the principal whose probe ended without a verdict
	w          int64  // until when it may not be the probe
}

// barred: principal p may not be the entry's probe at now.
func (e mEntry) barred(p string, now int64) bool { return e.a == p && e.w > now }

// mGate is one gate attribute: breaker:<tool>, pause or pause:<tool>.
type mGate struct {
	attr    string
	breaker bool // a breaker has probes; a pause has none
	tool    string
	entries map[string]mEntry
}

// mItem is a lease item as doc.go's table describes it.
type mItem struct {
	exists     bool
	leases     map[string]int64    // id → expiry
	principals map[string][]string // label → its leases
	tools      map[string][]string // tool → the leases in its places
	tickets    map[string]*mTicket // id → ticket (queue and tickets joined)
	waiting    map[string][]string // label → its tickets
	seq, freed int64
	refunds    int64
	callMS     int64
	gates      map[string]*mGate
	hold       int64
	rates      map[string]int64 // bucket name → theoretical arrival time
	limit      int64            // 0: absent
	round      int64            // limit_round
	limitOK    int64
	limitCut   int64
	limitSig   string
	ttl        int64
	bases      int // tools with a latency baseline
	size       int // bytes, as DynamoDB counts them
	// problems are attributes the table does not name, and values not of
	// the shape it gives.
	problems []string
}

func (it *mItem) problem(format string, args ...any) {
	it.problems = append(it.problems, fmt.Sprintf(format, args...))
}

func mInt(v types.AttributeValue) (int64, bool) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	if i, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
		return i, true
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil {
		return 0, false
	}
	return int64(math.Floor(f)), true
}

// readItem reads a raw item; nil reads as an item that does not exist.
func mRead(raw map[string]types.AttributeValue) *mItem {
	it := &mItem{leases: map[string]int64{}, principals: map[string][]string{}, tools: map[string][]string{},
		tickets: map[string]*mTicket{}, waiting: map[string][]string{}, gates: map[string]*mGate{}, rates: map[string]int64{}}
	if raw == nil {
		return it
	}
	it.exists = true
	it.size = mItemSize(raw)
	ticket := func(id string) *mTicket {
		if it.tickets[id] == nil {
			it.tickets[id] = &mTicket{id: id}
		}
		return it.tickets[id]
	}
	num := func(name string, v types.AttributeValue) int64 {
		n, ok := mInt(v)
		if !ok {
			it.problem("%s is not a number", name)
		}
		return n
	}
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		v := raw[name]
		switch {
		case name == "limiter_key":
		case name == "leases":
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				it.problem("leases is not a map")
				continue
			}
			for id, e := range m.Value {
				it.leases[id] = num("leases."+id, e)
			}
		case strings.HasPrefix(name, "principal:"), strings.HasPrefix(name, "tool:"), strings.HasPrefix(name, "waiting:"):
			ss, ok := v.(*types.AttributeValueMemberSS)
			if !ok {
				it.problem("%s is not a string set", name)
				continue
			}
			kind, label, _ := strings.Cut(name, ":")
			switch kind {
			case "principal":
				it.principals[label] = slices.Clone(ss.Value)
			case "tool":
				it.tools[label] = slices.Clone(ss.Value)
			default:
				it.waiting[label] = slices.Clone(ss.Value)
			}
		case name == "queue", name == "tasks":
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				it.problem("%s is not a map", name)
				continue
			}
			for id, n := range m.Value {
				tk := ticket(id)
				if tk.hasN {
					it.problem("ticket %s is numbered in both queue and tasks", id)
				}
				tk.n, tk.hasN, tk.task = num(name+"."+id, n), true, name == "tasks"
			}
		case name == "tickets":
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				it.problem("tickets is not a map")
				continue
			}
			for id, b := range m.Value {
				body, ok := b.(*types.AttributeValueMemberM)
				if !ok {
					it.problem("tickets.%s is not a map", id)
					continue
				}
				tk := ticket(id)
				tk.hasBody = true
				for f, fv := range body.Value {
					switch f {
					case "p", "t", "x", "w":
						s, ok := fv.(*types.AttributeValueMemberS)
						if !ok {
							it.problem("tickets.%s.%s is not a string", id, f)
							continue
						}
						switch f {
						case "p":
							tk.p = s.Value
						case "t":
							tk.t = s.Value
						case "w":
							tk.w = s.Value
						default:
							tk.x = s.Value
						}
					case "s":
						tk.s = num("tickets."+id+".s", fv)
					case "f":
						tk.f = num("tickets."+id+".f", fv)
					case "d":
						tk.d = num("tickets."+id+".d", fv)
					case "c":
						tk.c = num("tickets."+id+".c", fv)
					case "r":
						tk.r = num("tickets."+id+".r", fv)
					case "l":
						tk.l = num("tickets."+id+".l", fv)
					case "h":
						if num("tickets."+id+".h", fv) != 0 {
							it.problem("tickets.%s marks a call holding nothing with %v; doc.go writes 0", id, fv)
						}
						tk.h = true
					default:
						it.problem("tickets.%s has a field %q the table does not name", id, f)
					}
				}
				if tk.d == 0 {
					it.problem("tickets.%s lacks its deadline", id)
				}
				if tk.l < 0 || tk.l > MaxLookFar.Milliseconds() {
					it.problem("tickets.%s announces a look period of %d ms; doc.go allows up to MaxLookFar", id, tk.l)
				}
			}
		case name == "seq":
			it.seq = num(name, v)
		case name == "freed":
			it.freed = num(name, v)
		case name == "refunds":
			it.refunds = num(name, v)
		case name == "call_ms":
			it.callMS = num(name, v)
		case name == "hold":
			it.hold = num(name, v)
		case name == "ttl":
			it.ttl = num(name, v)
		case name == "pause", strings.HasPrefix(name, "pause:"), strings.HasPrefix(name, "breaker:"):
			it.readGate(name, v)
		case strings.HasPrefix(name, "rate:"):
			it.rates[strings.TrimPrefix(name, "rate:")] = num(name, v)
		case name == "limit":
			it.limit = num(name, v)
		case name == "limit_round":
			it.round = num(name, v)
		case name == "limit_ok":
			it.limitOK = num(name, v)
		case name == "limit_cut":
			it.limitCut = num(name, v)
		case name == "limit_sig":
			if s, ok := v.(*types.AttributeValueMemberS); ok {
				it.limitSig = s.Value
			} else {
				it.problem("limit_sig is not a principal's label")
			}
		case name == "latency_ratio":
			num(name, v) // the running mean of calls' latency ratio
		case strings.HasPrefix(name, "limit_"):
			// The limit's other evidence: its shape is the code's.
		case strings.HasPrefix(name, "base:"):
			num(name, v)
			it.bases++
		default:
			it.problem("attribute %s is not in doc.go's item table", name)
		}
	}
	// A ticket's principal is the one whose waiting set holds it (doc.go);
	// one that carries its own (p, as tickets once did) must agree. One
	// in no set, or in two, has none: the item is not whole.
	for id, tk := range it.tickets {
		var in []string
		for label, ids := range it.waiting {
			if slices.Contains(ids, id) {
				in = append(in, label)
			}
		}
		switch {
		case len(in) != 1:
			tk.p = ""
		case tk.p != "" && tk.p != in[0]:
			it.problem("tickets.%s names principal %s; waiting:%s holds it", id, tk.p, in[0])
		default:
			tk.p = in[0]
		}
	}
	return it
}

func (it *mItem) readGate(name string, v types.AttributeValue) {
	m, ok := v.(*types.AttributeValueMemberM)
	if !ok {
		it.problem("%s is not a map", name)
		return
	}
	g := &mGate{attr: name, entries: map[string]mEntry{}}
	kind, tool, _ := strings.Cut(name, ":")
	g.breaker, g.tool = kind == "breaker", tool
	for key, ev := range m.Value {
		em, ok := ev.(*types.AttributeValueMemberM)
		if !ok {
			it.problem("%s.%s is not a map", name, key)
			continue
		}
		var e mEntry
		for f, fv := range em.Value {
			switch f {
			case "u", "e", "f", "t", "w":
				n, ok := mInt(fv)
				if !ok {
					it.problem("%s.%s.%s is not a number", name, key, f)
				}
				switch f {
				case "u":
					e.u = n
				case "e":
					e.e = n
				case "f":
					e.f = n
				case "w":
					e.w = n
				default:
					e.t = n
				}
			case "p", "a":
				s, ok := fv.(*types.AttributeValueMemberS)
				switch {
				case !ok:
					it.problem("%s.%s.%s is not a string", name, key, f)
				case f == "p":
					e.p = s.Value
				default:
					e.a = s.Value
				}
			default:
				it.problem("%s.%s has a field %q the table does not name", name, key, f)
			}
			if key == "*" && (f == "f" || f == "t") {
				it.problem("%s.* has a field %q only a principal's entry has", name, f)
			}
		}
		if !g.breaker && (e.p != "" || e.e != 0) {
			it.problem("%s.%s names a probe; a pause has none", name, key)
		}
		g.entries[key] = e
	}
	it.gates[name] = g
}

// mItemSize is the item's size as DynamoDB counts it: every attribute's
// name plus its value; a number is 1 byte per two significant digits plus
// one; a map 3 bytes plus, per element, its key, its value and 1 byte; a
// set the sum of its members.
func mItemSize(raw map[string]types.AttributeValue) int {
	n := 0
	for name, v := range raw {
		n += len(name) + mValueSize(v)
	}
	return n
}

var mSignAndPoint = strings.NewReplacer("-", "", ".", "")

func mValueSize(v types.AttributeValue) int {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return len(x.Value)
	case *types.AttributeValueMemberN:
		digits := strings.Trim(mSignAndPoint.Replace(x.Value), "0")
		return (len(digits)+1)/2 + 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range x.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range x.Value {
			n += len(k) + mValueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range x.Value {
			n += mValueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberB:
		return len(x.Value)
	}
	return 0
}

// ---------------------------------------------------------------------
// Facts of a key and of a caller.

// mKey is what every caller of a key gives (doc.go: "every caller of a
// key gives the same server and per-principal limits").
type mKey struct {
	Cap          int // 0: none
	AdaptiveMin  int // 0: no adaptive limit
	PrincipalCap int
	MaxQueued    int
	ServerRPM    int // the "server" bucket (0: none)
	PrincipalRPM int // each "principal:<label>" bucket (0: none)
	// Breakers are the tools with a breaker: threshold and recovery.
	Breakers map[string]mBreaker
	// PauseTool: the upstream's pauses close a tool (pause:<tool>), not
	// the server (pause).
	PauseTool bool
	MaxPause  time.Duration
	Hold      time.Duration // the requests' hold
	Margin    time.Duration
}

type mBreaker struct {
	Threshold int
	Recovery  time.Duration
}

// mCaller is a caller as the turn sees it: a ticket, or a newcomer (n =
// math.MaxInt64, the newest).
type mCaller struct {
	id, p, tool  string
	toolCap, rpm int64
	n            int64
	// nothing: its call holds nothing; its place, handed out, is no
	// place of its principal's.
	nothing bool
}

func (tk *mTicket) caller() mCaller {
	return mCaller{id: tk.id, p: tk.p, tool: tk.t, toolCap: tk.c, rpm: tk.r, n: tk.n, nothing: tk.h}
}

// limitOf is the key's cap as the item sets it: the limit with Adaptive
// (absent: Min), else Cap; 0 means none.
func (it *mItem) limitOf(k mKey) int64 {
	if k.AdaptiveMin > 0 {
		if it.limit == 0 {
			return int64(k.AdaptiveMin)
		}
		return it.limit
	}
	return int64(k.Cap)
}

// mLive: an expiry or deadline holds through its own millisecond; what
// it bounds has lapsed only once now is past it (doc.go: "past their
// deadline").
func mLive(exp, now int64) bool { return exp >= now }

// claimed reports whether task ticket tk is claimed at now (doc.go,
// Tasks): a live lease of its id holds its place. A claim keeps the
// ticket, which is then no waiter and takes no turn; the lease's release
// removes both; a lease that lapses leaves the ticket waiting again.
func (it *mItem) claimed(tk *mTicket, now int64) bool {
	exp, ok := it.leases[tk.id]
	return tk.task && ok && mLive(exp, now) && mLive(tk.d, now)
}

// liveIn counts the live leases among ids.
func (it *mItem) liveIn(ids []string, now int64) int {
	n := 0
	for _, id := range ids {
		if exp, ok := it.leases[id]; ok && mLive(exp, now) {
			n++
		}
	}
	return n
}

func (it *mItem) liveLeases(now int64) int {
	n := 0
	for _, exp := range it.leases {
		if mLive(exp, now) {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------------
// Buckets.

// mBucket is a GCRA bucket of perMinute tokens refilled at perMinute a
// minute: one token an interval, the interval rounded up to a whole ms.
type mBucket struct{ perMinute int64 }

func (b mBucket) interval() int64 { return (60000 + b.perMinute - 1) / b.perMinute }

// tokens is how many tokens a bucket whose theoretical arrival time (the
// instant it is full again) is tat holds at now: every whole interval
// still to run before tat is a token missing.
func (b mBucket) tokens(tat, now int64) int64 {
	if tat <= now {
		return b.perMinute
	}
	missing := (tat - now + b.interval() - 1) / b.interval()
	return max(0, b.perMinute-missing)
}

// charged is the arrival time after one token is taken at now.
func (b mBucket) charged(tat, now int64) int64 { return max(tat, now) + b.interval() }

// buckets are the buckets a caller takes a token from, by name.
func (k mKey) buckets(c mCaller) map[string]mBucket {
	out := map[string]mBucket{}
	if k.ServerRPM > 0 {
		out["server"] = mBucket{int64(k.ServerRPM)}
	}
	if k.PrincipalRPM > 0 {
		out["principal:"+c.p] = mBucket{int64(k.PrincipalRPM)}
	}
	if c.rpm > 0 && c.tool != "" {
		out["tool:"+c.tool] = mBucket{c.rpm}
	}
	return out
}

// ---------------------------------------------------------------------
// Gates.

// gatesOf are the gate attributes that apply to a caller: its tool's
// breaker, the server's pause and its tool's pause.
func mGatesOf(c mCaller) []string {
	g := []string{"pause"}
	if c.tool != "" {
		g = append(g, "breaker:"+c.tool, "pause:"+c.tool)
	}
	return g
}

func (e mEntry) closed(now int64) bool { return e.u > now }

// halfOpen: a breaker entry whose closing has passed and that no probe has
// opened yet.
func (g *mGate) halfOpen(e mEntry, now int64) bool { return g.breaker && e.u != 0 && e.u <= now }

func (e mEntry) liveProbe(now int64) bool { return e.p != "" && mLive(e.e, now) }

// standing reports whether the hold or the server's pause ("*" of pause)
// stands: then no place is free.
func (it *mItem) standing(now int64) bool {
	if it.hold > now {
		return true
	}
	if g := it.gates["pause"]; g != nil {
		if e, ok := g.entries["*"]; ok && e.closed(now) {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------
// Whose turn.

// mHandout is the state of handing out free places one at a time.
type mHandout struct {
	free    int64 // -1: no cap on the key
	held    map[string]int64
	used    map[string]int64 // tool → live leases in its set, handed out counting
	taken   map[string]int64 // bucket → tokens handed out
	probing map[string]bool  // "<gate>/<entry>" with a live probe, or one handed out
}

func (it *mItem) startHandout(k mKey, now int64) *mHandout {
	h := &mHandout{free: -1, held: map[string]int64{}, used: map[string]int64{}, taken: map[string]int64{}, probing: map[string]bool{}}
	if c := it.limitOf(k); c > 0 {
		h.free = max(0, c-int64(it.liveLeases(now)))
	}
	if it.standing(now) {
		h.free = 0
	}
	for p, ids := range it.principals {
		h.held[p] = int64(it.liveIn(ids, now))
	}
	for t, ids := range it.tools {
		h.used[t] = int64(it.liveIn(ids, now))
	}
	for _, g := range it.gates {
		for key, e := range g.entries {
			if e.liveProbe(now) {
				h.probing[g.attr+"/"+key] = true
			}
		}
	}
	return h
}

// usable reports whether c can use a place now, and if not, why.
func (it *mItem) usable(k mKey, h *mHandout, c mCaller, now int64) (bool, string) {
	if k.PrincipalCap > 0 && h.held[c.p] >= int64(k.PrincipalCap) {
		return false, "principal at its cap"
	}
	if c.toolCap > 0 && h.used[c.tool] >= c.toolCap {
		return false, "tool full"
	}
	for name, b := range k.buckets(c) {
		tat, ok := it.rates[name]
		if ok && b.tokens(tat, now)-h.taken[name] < 1 || !ok && b.perMinute-h.taken[name] < 1 {
			return false, "bucket " + name + " empty"
		}
	}
	for _, attr := range mGatesOf(c) {
		g := it.gates[attr]
		if g == nil {
			continue
		}
		for _, key := range []string{"*", c.p} {
			e, ok := g.entries[key]
			if !ok {
				continue
			}
			if e.closed(now) {
				return false, attr + "." + key + " closed"
			}
			if g.halfOpen(e, now) && h.probing[attr+"/"+key] {
				return false, attr + "." + key + " half-open with its probe out"
			}
			if g.halfOpen(e, now) && !e.liveProbe(now) && e.barred(c.p, now) {
				return false, attr + "." + key + " half-open, its probe not " + c.p + "'s for now"
			}
		}
	}
	return true, ""
}

// give hands c a place.
func (it *mItem) give(k mKey, h *mHandout, c mCaller, now int64) {
	if h.free > 0 {
		h.free--
	}
	if !c.nothing {
		h.held[c.p]++
	}
	if c.toolCap > 0 {
		h.used[c.tool]++
	}
	for name := range k.buckets(c) {
		h.taken[name]++
	}
	for _, attr := range mGatesOf(c) {
		if g := it.gates[attr]; g != nil {
			for _, key := range []string{"*", c.p} {
				if e, ok := g.entries[key]; ok && g.halfOpen(e, now) {
					h.probing[attr+"/"+key] = true
				}
			}
		}
	}
}

// handout hands the places free at now out, one by one, to the callers
// waiting — the live tickets not in skip, and extra (a newcomer, or a
// taker's own ticket) — and returns whom, in order: each to the caller of
// the principal holding fewest places (those handed out counting), the
// lower number first, passing over callers that cannot use one.
func (it *mItem) handout(k mKey, now int64, extra []mCaller, skip map[string]bool) []mCaller {
	var cands []mCaller
	for id, tk := range it.tickets {
		if skip[id] || !tk.hasN || !tk.hasBody || !mLive(tk.d, now) || slices.ContainsFunc(extra, func(c mCaller) bool { return c.id == id }) {
			continue
		}
		if mStale(tk, now) {
			continue // a task whose start went unclaimed: passed
		}
		if it.claimed(tk, now) {
			continue // a task running: its lease holds its place
		}
		cands = append(cands, tk.caller())
	}
	cands = append(cands, extra...)
	h := it.startHandout(k, now)
	served := make([]bool, len(cands))
	var out []mCaller
	for h.free != 0 {
		best := -1
		for i, c := range cands {
			if served[i] {
				continue
			}
			if ok, _ := it.usable(k, h, c, now); !ok {
				continue
			}
			if best < 0 || mBefore(h, c, cands[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		served[best] = true
		it.give(k, h, cands[best], now)
		out = append(out, cands[best])
	}
	return out
}

// mBefore orders two callers: fewer places held by the principal first,
// then the lower ticket number.
func mBefore(h *mHandout, a, b mCaller) bool {
	if h.held[a.p] != h.held[b.p] {
		return h.held[a.p] < h.held[b.p]
	}
	if a.n != b.n {
		return a.n < b.n
	}
	return a.id < b.id
}

// served reports whether id is among cs.
func mServed(cs []mCaller, id string) bool {
	return slices.ContainsFunc(cs, func(c mCaller) bool { return c.id == id })
}

// instants are the moments from from on at which whose turn it is may
// change with time alone: leases expiring, tickets lapsing, gates and the
// hold passing, probes lapsing, buckets gaining a token.
func (it *mItem) instants(k mKey, from int64) []int64 {
	at := []int64{from}
	add := func(t int64) {
		if t >= from {
			at = append(at, t)
		}
	}
	// A lease, a ticket and a probe lapse a millisecond past their expiry
	// or deadline (mLive).
	for _, exp := range it.leases {
		add(exp + 1)
	}
	for _, tk := range it.tickets {
		add(tk.d + 1)
		if tk.task && tk.s > 0 {
			add(tk.unclaimedSince() + StartTimeout.Milliseconds())
		}
	}
	add(it.hold)
	for _, g := range it.gates {
		for _, e := range g.entries {
			add(e.u)
			add(e.e + 1)
		}
	}
	for name, tat := range it.rates {
		var b mBucket
		switch {
		case name == "server" && k.ServerRPM > 0:
			b = mBucket{int64(k.ServerRPM)}
		case strings.HasPrefix(name, "principal:") && k.PrincipalRPM > 0:
			b = mBucket{int64(k.PrincipalRPM)}
		case strings.HasPrefix(name, "tool:"):
			for _, tk := range it.tickets {
				if "tool:"+tk.t == name && tk.r > 0 {
					b = mBucket{tk.r}
				}
			}
			if b.perMinute == 0 {
				continue
			}
		default:
			continue
		}
		for j := range b.perMinute {
			add(tat - j*b.interval())
		}
	}
	slices.Sort(at)
	return slices.Compact(at)
}

// ---------------------------------------------------------------------
// Presumed gone.

// noteTurns records in came, for every ticket whose turn comes in it from
// now on, the earliest true time at which a clock within skew of the true
// one could judge so: a waiter's turn having come at every look for
// ClaimWindow, it may be presumed gone, and the tickets after it come into
// their turn in its place. (The item is the one an instance was just
// shown: its callers may judge from it now or later.) A clock reading ms
// does so at true time ms-skew at the earliest, and not before now: so a
// turn that comes at any reading from now-skew to now+skew came now (a
// turn may come on a slow clock and not on a fast one: a caller ahead held
// back by a gate that a fast clock finds passed).
func (it *mItem) noteTurns(k mKey, now time.Time, skew time.Duration, came map[string]time.Time) {
	if len(it.tickets) == 0 {
		return
	}
	first := now.Add(-skew).UnixMilli()
	at := it.instants(k, first)
	for id, tk := range it.tickets {
		if c, ok := came[mTurnOf(id, tk.n)]; ok {
			if ms := c.Add(ClaimWindow + skew).UnixMilli(); ms > first {
				at = append(at, ms)
			}
		}
	}
	slices.Sort(at)
	at = slices.Compact(at)
	for i := 0; i < len(at); i++ {
		ms := at[i]
		t := time.UnixMilli(ms).Add(-skew)
		if t.Before(now) {
			t = now
		}
		skip := map[string]bool{}
		for id, tk := range it.tickets {
			if c, ok := came[mTurnOf(id, tk.n)]; ok && !t.Before(c.Add(ClaimWindow)) {
				skip[id] = true
			}
		}
		// A caller that has not looked for a claim window (a newcomer)
		// passes nobody over; passing one over can hand its place to
		// another that takes what a third needs: a turn comes in either
		// walk.
		walks := []map[string]bool{skip}
		if len(skip) > 0 {
			walks = append(walks, nil)
		}
		for _, sk := range walks {
			for _, c := range it.handout(k, ms, nil, sk) {
				if old, ok := came[mTurnOf(c.id, c.n)]; !ok || t.Before(old) {
					came[mTurnOf(c.id, c.n)] = t
					next := t.Add(ClaimWindow + skew).UnixMilli()
					j, _ := slices.BinarySearch(at[i+1:], next)
					at = slices.Insert(at, i+1+j, next)
				}
			}
		}
	}
}

// mTurnOf names the turn of a ticket (or a caller waiting at one): its id
// and number. A caller presumed gone that joins again under its id waits
// a new turn.
func mTurnOf(id string, n int64) string { return id + "#" + strconv.FormatInt(n, 10) }

// ---------------------------------------------------------------------
// Judging a write.

// mFinding is one violation of the protocol: its kind, what it is about
// (one finding per kind and subject is reported), and what happened.
type mFinding struct{ kind, subject, msg string }

// mNoOutcome marks a write that is not part of a release.
const mNoOutcome Outcome = -1

// mWriter is what the harness knows of a write's sender.
type mWriter struct {
	operator bool
	me       mCaller              // its id (its lease and ticket), principal, tool, tool cap and rpm
	owns     func(id string) bool // ids its own writes named first
	outcome  Outcome              // what its release says (mNoOutcome: not a release)
	pause    time.Duration        // the pause its upstream asked for
	pausedAt int64                // when it asked, on the writer's clock (Unix ms; 0: unknown)
	// grant is limit_round as its take's answer showed it (-1: unknown).
	grant int64
	// deadline is when its caller stops waiting, on its clock (Unix ms).
	deadline int64
	// task: it writes for a task (its Enqueue, a worker's Claim and
	// release, its Withdraw): the ids it owns are the task's.
	task bool
	// claims are what its takes of a task's place named in the ticket
	// (w), as the items they landed in show.
	claims []string
	// called: a task's worker that made its call (whatever its release
	// says).
	called bool
	// superseded reports whether another worker's take of task lease id
	// landed after the writer's own last one (the harness's record of
	// landed takes, whatever the item shows; nil: nothing known).
	superseded func(id string) bool
	// holdsNothing: its request holds nothing in the item — no Cap,
	// ToolCap or PrincipalCap, no Breaker — so its admission is a charge
	// of its buckets alone (doc.go, Buckets); charges and refunds count
	// its charges and refunds that landed before this write.
	holdsNothing     bool
	charges, refunds int
	// tats: the arrival times its latest landed take or charge left its
	// buckets at; shift: how far refunds of charges landed before it, and
	// landed since, moved that back; finishAt: when it began to finish, on
	// its clock (Unix ms; 0: unknown). A token given back is no more than
	// what of it was then still to come (doc.go, Buckets).
	tats, shift map[string]int64
	finishAt    int64
}

// mRefundBound is the most a refund of w may give bucket name back: what
// of the token its charge took was still to come when it began to finish
// (-1: unknown, not judged).
func (w *mWrite) mRefundBound(name string, bk mBucket) int64 {
	tat, ok := w.w.tats[name]
	if !ok || w.w.finishAt == 0 {
		return -1
	}
	return min(bk.interval(), max(tat-w.w.shift[name]-w.w.finishAt, 0))
}

// mWrite is one landed write: the item before and after it, when it was
// made on its writer's clock (now) and in true time (sent), when it landed
// in true time (landed; zero: unknown, taken as sent), and the seq of the
// view a take was judged from (-1: none).
type mWrite struct {
	k             mKey
	before, after *mItem
	now           int64
	skew          int64 // how far clocks may be apart, ms
	sent, landed  time.Time
	judged        int64
	w             mWriter
	// turnCame: see noteTurns.
	turnCame map[string]time.Time
	// tasks is what earlier writes did to tasks' tickets (nil: none).
	tasks *mTasks
	// left is every ticket earlier writes removed, by id, with the seq
	// of the item that removed it (nil: not kept).
	left map[string]mLeft
}

// mLeft is a ticket some write removed: its principal and number, and the
// seq of the item after that write.
type mLeft struct {
	p      string
	n, seq int64
}

// mTasks is what the writes so far did to tasks' tickets: those gone
// other than by their claim (withdrawn, or lapsed at their deadline), and
// the places each task was granted.
type mTasks struct {
	goneIDs map[string]bool
	taken   map[string]int
}

func newMTasks() *mTasks { return &mTasks{goneIDs: map[string]bool{}, taken: map[string]int{}} }

func (t *mTasks) gone(id string) {
	if t != nil {
		t.goneIDs[id] = true
	}
}

// mVerdict is what the model makes of a write.
type mVerdict struct {
	findings []mFinding
	events   []string
	takes    []string // lease ids it gave a place
	released []string // its writer's own leases it removed
	bypassed []string // live tickets of others its take presumed gone
	joined   []string
	probes   []string // "<gate>/<entry>" it named its writer the probe of
	charged  []string // buckets it took a token from
	refunded []string // buckets it gave one back to
	// charge: it is the charge of a call holding nothing; refund: that
	// call's tokens given back.
	charge, refund bool
}

func (v *mVerdict) fail(kind, subject, format string, args ...any) {
	v.findings = append(v.findings, mFinding{kind, subject, fmt.Sprintf(format, args...)})
}

// landedOnWritersClock is when the write landed, read on its writer's
// clock (ms).
func (w *mWrite) landedOnWritersClock() int64 {
	if w.landed.IsZero() {
		return w.now
	}
	return w.now + w.landed.Sub(w.sent).Milliseconds()
}

func (w *mWrite) owns(id string) bool { return !w.w.operator && w.w.owns(id) }

// ownEntries reports whether the write adds, changes or removes a lease
// or a ticket its writer owns: a call holding nothing that takes a place,
// waits, renews or leaves, not its charge or its refund. A ticket of its
// that the write leaves as it was — one a join landing late brought back
// after its take (doc.go: a ticket passed over like a dead waiter's) —
// makes no write of its other than a charge or a refund.
func (w *mWrite) ownEntries() bool {
	b, a := w.before, w.after
	for _, it := range []*mItem{b, a} {
		for id := range it.leases {
			if w.owns(id) {
				return true
			}
		}
		for id := range it.tickets {
			tb, ta := b.tickets[id], a.tickets[id]
			if w.owns(id) && (tb == nil || ta == nil || *tb != *ta) {
				return true
			}
		}
	}
	return false
}

// otherClaim reports whether the ticket of task lease id names, in b, a
// claim none of the writer's takes named (doc.go, Tasks: a task's lease
// is its claim's, whose release and renewals are conditioned on the
// ticket naming it). A ticket that names no claim tells nothing.
func (w *mWrite) otherClaim(b *mItem, id string) bool {
	tk := b.tickets[id]
	return w.w.task && tk != nil && tk.task && tk.w != "" && !slices.Contains(w.w.claims, tk.w)
}

// laterClaim reports whether task lease id is, as the harness saw the
// takes land, another worker's claim of the task (a later one): its
// ticket names another claim, or the harness saw a later take land
// whatever the ticket shows (a ticket lapsed and purged names none).
func (w *mWrite) laterClaim(b *mItem, id string) bool {
	return w.otherClaim(b, id) || w.w.task && w.w.superseded != nil && w.w.superseded(id)
}

// judgeWrite judges one landed write against doc.go.
func mJudgeWrite(w *mWrite) *mVerdict {
	v := &mVerdict{}
	b, a, now, k := w.before, w.after, w.now, w.k
	// ttl: a day after the latest expiry or deadline the write sets for
	// its writer, and at least a day after its writer's now (less the
	// skew, and a second for the resends of a write made before).
	if least := (now-w.skew-1000)/1000 + modelTTL; a.ttl < least {
		v.fail("ttl", "", "a write left ttl %d; its writer's now is %d s, so at least %d (a day, less the skew)", a.ttl, now/1000, least)
	}
	written := int64(0)
	for id, exp := range a.leases {
		if old, had := b.leases[id]; w.owns(id) && (!had || old != exp) {
			written = max(written, exp)
		}
	}
	for id, tk := range a.tickets {
		if _, had := b.tickets[id]; w.owns(id) && !had && tk.hasBody {
			written = max(written, tk.d)
		}
	}
	if least := written/1000 + modelTTL; written > 0 && a.ttl < least {
		v.fail("ttl", "", "a write set an expiry or deadline of %d s and left ttl %d; at least %d (a day after it)", written/1000, a.ttl, least)
	}
	longest := now + (k.Hold + k.Margin).Milliseconds()
	// Leases.
	for _, id := range slices.Sorted(maps.Keys(a.leases)) {
		exp := a.leases[id]
		old, had := b.leases[id]
		switch {
		case !had && !w.owns(id):
			v.fail("take", id, "a write added lease %s, which its writer does not own", id)
		case !had && w.w.holdsNothing:
			v.fail("charge", id, "a call holding nothing took lease %s: a call with no cap and no gate holds nothing in the item", id)
		case !had:
			v.takes = append(v.takes, id)
			if exp > longest {
				v.fail("expiry", id, "take of %s set its expiry %d ms past now + hold + margin", id, exp-longest)
			}
		case exp == old:
		case !w.owns(id):
			v.fail("renew", id, "a write changed the expiry of %s, which its writer does not own", id)
		case w.laterClaim(b, id):
			v.fail("renew", id, "a worker's renewal of task lease %s landed while it was a later claim's place (its ticket naming %q)", id, b.tickets[id].claimName())
		case exp < old:
			v.fail("renew", id, "a renewal of %s brought its expiry %d ms earlier", id, old-exp)
		case exp > longest:
			v.fail("expiry", id, "renewal of %s set its expiry %d ms past now + hold + margin", id, exp-longest)
		default:
			v.events = append(v.events, "renewal landed")
		}
	}
	purgedLeases := 0
	for _, id := range slices.Sorted(maps.Keys(b.leases)) {
		if _, ok := a.leases[id]; ok {
			continue
		}
		if w.owns(id) {
			v.released = append(v.released, id)
			if w.w.outcome != mNoOutcome && w.laterClaim(b, id) {
				v.fail("task-release", id, "a worker's release removed task lease %s while it was a later claim's place (its ticket naming %q): it gave back a later claim's place", id, b.tickets[id].claimName())
			}
			if tk := b.tickets[id]; tk != nil && tk.task && tk.hasN && mLive(b.leases[id], now) {
				// A task's release: its call ended, and its claimed ticket
				// goes with its lease, in one write; or its call was never
				// made, and it goes, or waits again at its number as it was
				// before its claim.
				switch ta := a.tickets[id]; {
				case ta == nil || !ta.hasN && !ta.hasBody:
				case w.w.called || w.w.outcome != Unused && w.w.outcome != mNoOutcome:
					v.fail("task-release", id, "a release of task lease %s after its call left its ticket in the item", id)
				case !ta.hasN || !ta.hasBody || ta.n != tk.n || ta.w != "":
					v.fail("task-release", id, "a task's place given back before its call left ticket %s changed: %+v, was %+v", id, *ta, *tk)
				default:
					v.events = append(v.events, "task place given back, its ticket waiting again")
				}
			}
			continue
		}
		if exp := b.leases[id]; mLive(exp, now) {
			v.fail("purge", id, "a write removed lease %s of another caller, live for %d ms more on its writer's clock", id, exp-now)
		}
		purgedLeases++
		v.events = append(v.events, "lapsed lease purged")
	}
	if len(v.takes) > 1 {
		v.fail("take", "", "one write took %d places", len(v.takes))
	}
	// A waiter holding nothing takes its turn as a take does, its ticket
	// removed and its buckets charged, with no lease (doc.go, Buckets).
	if w.w.holdsNothing && !w.w.operator && len(v.takes) == 0 {
		for _, id := range slices.Sorted(maps.Keys(b.tickets)) {
			tb, ta := b.tickets[id], a.tickets[id]
			if w.owns(id) && tb.hasN && (ta == nil || !ta.hasN) && slices.ContainsFunc(slices.Collect(maps.Keys(k.buckets(w.w.me))), func(n string) bool { return a.rates[n] > b.rates[n] }) {
				v.takes, v.charge = append(v.takes, id), true
				v.events = append(v.events, "take of a waiter holding nothing")
			}
		}
	}
	// Tickets.
	gone := 0 // tickets gone other than by their take
	for _, id := range slices.Sorted(maps.Keys(b.tickets)) {
		tb := b.tickets[id]
		if !tb.hasN {
			continue
		}
		if ta := a.tickets[id]; ta != nil && ta.hasN && (ta.n == tb.n || w.owns(id)) {
			continue // there still, or numbered again by its own join
		}
		if tb.task && !slices.Contains(v.takes, id) {
			w.tasks.gone(id) // withdrawn or lapsed: no place for it after
		}
		if w.left != nil {
			w.left[id] = mLeft{p: tb.p, n: tb.n, seq: a.seq}
		}
		switch {
		case w.owns(id) && slices.Contains(v.takes, id):
		case w.owns(id):
			gone++ // its caller leaving, or releasing with its stray ticket
		case tb.task && mLive(tb.d, now):
			gone++
			v.fail("task-gone", id, "a write of another removed task ticket %s, live for %d ms more on its writer's clock: a task's ticket is never presumed gone before its deadline", id, tb.d-now)
		case !mLive(tb.d, now):
			gone++
			v.events = append(v.events, "lapsed ticket purged")
		default:
			gone++
			v.bypassed = append(v.bypassed, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(a.tickets)) {
		ta := a.tickets[id]
		if !ta.hasN {
			continue
		}
		tb := b.tickets[id]
		if tb != nil && tb.hasN && tb.n == ta.n {
			if tb.hasBody && ta.hasBody {
				ub, ua := *tb, *ta
				ub.s, ua.s, ub.f, ua.f = 0, 0, 0, 0
				if ua.task && (slices.Contains(v.takes, id) || slices.Contains(v.released, id) && ua.w == "") {
					// A claim names itself in its ticket; a place given
					// back before its call, the ticket kept, no more.
					ub.w, ua.w = "", ""
				}
				if ub != ua {
					v.fail("join", id, "a write changed ticket %s", id)
				}
				if tb.s != ta.s || tb.f != ta.f && ta.s != 0 {
					w.judgeMark(v, tb, ta)
				}
			}
			continue
		}
		v.joined = append(v.joined, id)
		w.judgeJoin(v, ta, tb != nil && tb.hasN)
	}
	if a.seq != b.seq+int64(len(v.joined)) {
		v.fail("seq", "", "seq went from %d to %d in a write that added %d tickets", b.seq, a.seq, len(v.joined))
	}
	// A gate entry removed can let a caller through too (a pause passed
	// on the remover's clock and not yet on a slower one's).
	entriesGone := 0
	for attr, gb := range b.gates {
		for key := range gb.entries {
			if ga := a.gates[attr]; ga == nil {
				entriesGone++
			} else if _, ok := ga.entries[key]; !ok {
				entriesGone++
			}
		}
	}
	// So can a bucket removed (absent is full: it was full on the
	// remover's clock, maybe not yet on a slower one's) or given a token
	// back.
	bucketsBack := 0
	for name, tb := range b.rates {
		if ta, ok := a.rates[name]; !ok || ta < tb {
			bucketsBack++
		}
	}
	// So can a take of a place while another principal's callers wait:
	// the place ranks its principal's others, whether its view showed them
	// or they joined since, after those. A waiter's take may land after
	// callers of any principal joined since its look: it may always. A
	// newcomer's view holds every caller waiting; the others' are as it
	// showed them: numbered no later than the view's seq, and there
	// before the write or removed by one that left seq there or later (a
	// view has that seq, not the moment it was read: a ticket removed at
	// that seq may have gone before it).
	reranked := 0
	if len(v.takes) == 1 && !v.charge && w.judged >= 0 {
		if tk := b.tickets[v.takes[0]]; tk != nil && tk.hasN {
			reranked = 1 // a waiter's
		}
		inView := func(p string, n int64) bool { return p != w.w.me.p && n <= w.judged }
		for _, tk := range b.tickets {
			if tk.hasN && inView(tk.p, tk.n) {
				reranked = 1
			}
		}
		for _, l := range w.left {
			if l.seq >= w.judged && inView(l.p, l.n) {
				reranked = 1
			}
		}
	}
	// A call holding nothing: its charge, or its refund, which ADDs 1 to
	// freed whether or not its buckets were purged meanwhile.
	var judged map[string]bool
	if w.w.holdsNothing && !w.w.operator && len(v.takes) == 0 && !w.ownEntries() {
		judged = w.judgeCharge(v)
	}
	if v.refund {
		bucketsBack = max(bucketsBack, 1)
	}
	// So can a gate entry closed: its principal's waiters held back, the
	// places may go to others.
	if mEntriesSet(b, a) {
		entriesGone++
	}
	if df := a.freed - b.freed; df < 0 || df > int64(len(v.released)+purgedLeases+gone+entriesGone+bucketsBack+reranked) {
		v.fail("freed", "", "freed moved by %d in a write that removed %d leases, %d tickets other than by their take, removed or set %d gate entries, removed or refilled %d buckets and reranked %d principals' tickets", df, len(v.released)+purgedLeases, gone, entriesGone, bucketsBack, reranked)
	} else if df == 0 && (len(v.released) > 0 || gone > 0) {
		v.fail("freed", "", "a write that freed %d places and removed %d tickets other than by their take left freed as it was", len(v.released), gone)
	}
	if len(v.bypassed) > 0 && len(v.takes) == 0 && !v.charge {
		// A write passing over more callers presumed gone than one take
		// may: each as a take would (doc.go, Whose turn), and nothing else.
		for _, x := range v.bypassed {
			if came, ok := w.turnCame[mTurnOf(x, b.tickets[x].n)]; !ok || w.sent.Sub(came) < ClaimWindow {
				v.fail("bypass", x, "a write that takes no place presumed %s gone %v after its turn first came; ClaimWindow %v", x, w.sent.Sub(came), ClaimWindow)
			}
		}
		v.events = append(v.events, "waiters presumed gone passed by a write that takes no place")
	}
	for _, id := range v.takes {
		w.judgeTake(v, id)
	}
	w.judgeBuckets(v, judged)
	// refunds counts the writes that give tokens back (doc.go, Buckets).
	back := v.refund || len(v.refunded) > 0
	for name, tb := range b.rates {
		if ta, ok := a.rates[name]; ok && ta < tb {
			back = true
		}
	}
	switch {
	case back && a.refunds != b.refunds+1:
		v.fail("refunds", "", "a write that gave tokens back moved refunds %d → %d; by one", b.refunds, a.refunds)
	case !back && a.refunds != b.refunds:
		v.fail("refunds", "", "a write that gave no token back moved refunds %d → %d", b.refunds, a.refunds)
	}
	w.judgeGates(v)
	w.judgeLimit(v)
	if a.hold != b.hold && !w.w.operator && !(a.hold == 0 && b.hold <= now) { // a passed hold may go
		v.fail("hold", "", "a caller's write moved the hold from %d to %d", b.hold, a.hold)
	}
	return v
}

// waitingOf counts the tickets of principal p other than id that wait at
// now: live, and not claimed — a task running waits no more (doc.go,
// Tasks), and a claim whose lease lapsed waits again (by each ticket's
// principal, the one whose waiting set holds it).
func (it *mItem) waitingOf(p, id string, now int64) int {
	n := 0
	for x, tk := range it.tickets {
		if x != id && tk.hasN && tk.p == p && mLive(tk.d, now) && !it.claimed(tk, now) {
			n++
		}
	}
	return n
}

// modelMaxNamed is how many tickets a principal may have in its waiting
// set, all claimed (tasks running) or lapsed, while the reserve still
// counts it as having nothing waiting (doc.go: a join's condition names
// them, up to 8; past them, the principal is held to the reserve as if
// one waited).
const modelMaxNamed = 8

// refusesJoin reports whether the item refuses, at now, principal p's
// join to the callers' queue (task false) or the tasks' for room: as many
// tickets of that kind wait (live, and not claimed with Margin left: a
// claim that may lapse before the join lands waits again, doc.go) as
// MaxQueued, or p has a ticket waiting (or more than modelMaxNamed in its
// waiting set) and the last reserve places are taken. A caller told
// QueueFull from it was refused rightly only then.
func (it *mItem) refusesJoin(k mKey, p string, task bool, now int64) bool {
	w := 0
	for _, tk := range it.tickets {
		if tk.hasN && tk.task == task && mLive(tk.d, now) && !it.claimed(tk, now+k.Margin.Milliseconds()) {
			w++
		}
	}
	if w >= k.MaxQueued {
		return true
	}
	r := modelQueueReserve(k.MaxQueued)
	return r > 0 && w >= k.MaxQueued-r && (it.waitingOf(p, "", now) > 0 || len(it.waiting[p]) > modelMaxNamed)
}

// queued is the number of tickets stored, live or not.
func (it *mItem) queued() int {
	n := 0
	for _, tk := range it.tickets {
		if tk.hasN {
			n++
		}
	}
	return n
}

// queuedKind is the number of tickets stored, live or not, of callers
// (task false: in queue) or of tasks (in tasks): each has MaxQueued
// places of its own.
func (it *mItem) queuedKind(task bool) int {
	n := 0
	for _, tk := range it.tickets {
		if tk.hasN && tk.task == task {
			n++
		}
	}
	return n
}

// queuedAt is queuedKind but for the task tickets claimed at now, which
// wait no more: a task running takes no place in the queue.
func (it *mItem) queuedAt(task bool, now int64) int {
	n := 0
	for _, tk := range it.tickets {
		if tk.hasN && tk.task == task && !it.claimed(tk, now) {
			n++
		}
	}
	return n
}

// judgeJoin judges a ticket added, or (again) numbered anew: a join resent
// after an unknown outcome moves its ticket to the back.
func (w *mWrite) judgeJoin(v *mVerdict, tk *mTicket, again bool) {
	a, me, k := w.after, w.w.me, w.k
	id := tk.id
	if !w.owns(id) {
		v.fail("join", id, "a write added ticket %s, which its writer does not own", id)
		return
	}
	if tk.n != a.seq {
		v.fail("seq", id, "ticket %s has number %d; the join left seq at %d", id, tk.n, a.seq)
	}
	if tk.p != me.p || tk.t != me.tool || tk.c != me.toolCap || tk.r != me.rpm {
		v.fail("join", id, "ticket %s says {p:%s t:%s c:%d r:%d}; its caller is {%s %s %d %d}", id, tk.p, tk.t, tk.c, tk.r, me.p, me.tool, me.toolCap, me.rpm)
	}
	if limit := w.w.deadline + k.Margin.Milliseconds() + 1; tk.d > limit { // 1: the deadline's ms rounded up
		v.fail("join", id, "ticket %s lives %d ms past its caller's deadline + margin", id, tk.d-limit)
	}
	// Its place is the queue's size after the join (a join may purge
	// lapsed tickets in the same write); its principal's callers waiting
	// are its other live tickets not claimed.
	others := a.waitingOf(me.p, id, w.now)
	if q := a.queuedAt(tk.task, w.now); again {
		v.events = append(v.events, "ticket numbered again")
	} else if q > k.MaxQueued {
		v.fail("queue", id, "a join left %d tickets; MaxQueued %d", q, k.MaxQueued)
	} else if r := modelQueueReserve(k.MaxQueued); others > 0 && q > k.MaxQueued-r {
		v.fail("reserve", id, "a join of %s, whose principal has %d other tickets, took place %d of %d (the last %d are reserved)", id, others, q, k.MaxQueued, r)
	} else if r > 0 && q > k.MaxQueued-r && slices.ContainsFunc(slices.Collect(maps.Values(a.tickets)), func(x *mTicket) bool { return x.p == me.p && a.claimed(x, w.now) }) {
		v.events = append(v.events, "reserve place taken by a principal whose task runs")
	}
	v.events = append(v.events, "joined")
}

// judgeTake judges a take: whose turn, caps, hold, gates.
func (w *mWrite) judgeTake(v *mVerdict, id string) {
	b, a, now, k := w.before, w.after, w.now, w.k
	me := w.w.me
	me.id, me.n = id, math.MaxInt64 // a newcomer: the newest
	waiter := false
	if tk := b.tickets[id]; tk != nil && tk.hasN {
		me.n, waiter = tk.n, true
	}
	skip := map[string]bool{}
	for _, x := range v.bypassed {
		skip[x] = true
		came, ok := w.turnCame[mTurnOf(x, b.tickets[x].n)]
		if !ok || w.sent.Sub(came) < ClaimWindow {
			v.fail("bypass", x, "the take of %s presumed %s gone %v after its turn first came; ClaimWindow %v", id, x, w.sent.Sub(came), ClaimWindow)
		}
	}
	switch {
	case waiter && w.judged < 0:
		v.fail("order", id, "waiter %s took a place with no view to judge from", id)
	case waiter && w.judged < me.n:
		v.fail("order", id, "waiter %s (number %d) took a place judged from a view before its join (seq %d)", id, me.n, w.judged)
	case waiter:
		for x, tk := range b.tickets {
			if tk.hasN && tk.n > w.judged {
				skip[x] = true // joined after its look: comes after it
			}
		}
	case w.judged < 0 && b.queued() > 0:
		v.fail("order", id, "a take of %s with no view landed on a queue of %d", id, b.queued())
	}
	if waiter {
		v.events = append(v.events, "take by a waiter landed")
	}
	if tk := b.tickets[id]; w.w.task || tk != nil && tk.task {
		w.judgeClaim(v, id)
	} else {
		for _, x := range b.tickets {
			if x.task && x.hasN && x.n < me.n && mLive(x.d, now) && mStale(x, now) {
				v.events = append(v.events, "take past a task whose start went unclaimed")
				break
			}
		}
	}
	if len(v.bypassed) > 0 {
		v.events = append(v.events, "take past a waiter presumed gone")
		if len(v.bypassed) > 1 {
			v.events = append(v.events, "take past 2+ waiters presumed gone")
		}
	}
	out := b.handout(k, now, []mCaller{me}, skip)
	if !mServed(out, id) {
		v.fail("order", id, "%s took a place that was not its turn: %s", id, b.explain(k, now, me, skip))
	}
	for x, tk := range b.tickets {
		if !skip[x] && x != id && tk.hasN && tk.hasBody && tk.n < me.n && mLive(tk.d, now) && !mServed(out, x) {
			v.events = append(v.events, "take past a held-back waiter")
			break
		}
	}
	// Caps, on the writer's clock, in the item the take left.
	if c := b.limitOf(k); c > 0 && int64(a.liveLeases(now)) > c {
		v.fail("cap", id, "the take of %s left %d live leases; the limit it was conditioned on is %d", id, a.liveLeases(now), c)
	}
	if me.toolCap > 0 && int64(a.liveIn(a.tools[me.tool], now)) > me.toolCap {
		v.fail("cap", id, "the take of %s left %d live leases in tool %s; cap %d", id, a.liveIn(a.tools[me.tool], now), me.tool, me.toolCap)
	}
	if k.PrincipalCap > 0 && a.liveIn(a.principals[me.p], now) > k.PrincipalCap {
		v.fail("cap", id, "the take of %s left %d live leases of %s; cap %d", id, a.liveIn(a.principals[me.p], now), me.p, k.PrincipalCap)
	}
	if b.hold > now {
		v.fail("hold", id, "%s took a place %d ms before the hold ends", id, b.hold-now)
	}
	for _, attr := range mGatesOf(me) {
		g := b.gates[attr]
		if g == nil {
			continue
		}
		for _, key := range []string{"*", me.p} {
			e, ok := g.entries[key]
			if !ok {
				continue
			}
			switch {
			case e.closed(now):
				kind := "gate"
				if !g.breaker {
					kind = "pause"
				}
				v.fail(kind, attr+"."+key, "%s took a place through %s.%s, closed for %d ms more", id, attr, key, e.u-now)
			case g.halfOpen(e, now) && e.liveProbe(now):
				v.fail("probe", attr+"."+key, "%s took a place through half-open %s.%s while %s probes it", id, attr, key, e.p)
			case g.halfOpen(e, now):
				ea := mEntry{}
				if ga := a.gates[attr]; ga != nil {
					ea = ga.entries[key]
				}
				if ea.p != id || ea.e != a.leases[id] {
					v.fail("probe", attr+"."+key, "%s passed half-open %s.%s without becoming its probe (p %q, e %d; its lease %d)", id, attr, key, ea.p, ea.e, a.leases[id])
				}
			}
		}
	}
}

// mStale reports whether task ticket tk's starts have gone unclaimed for
// StartTimeout since the first at now, however often it was started
// again: the callers behind it pass it.
func mStale(tk *mTicket, now int64) bool {
	return tk.task && tk.s > 0 && now-tk.unclaimedSince() >= StartTimeout.Milliseconds()
}

// judgeClaim judges a place granted to a task: only from its ticket in
// tasks, live, never withdrawn, released or lapsed before; a claim keeps
// the ticket. A task is claimed again only once its last claim's lease
// has gone (lapsed, and purged): the worker that made that claim died or
// is late, and the task's record tells the new one whether its call was
// made (at most one mark: see the simulation's workers).
func (w *mWrite) judgeClaim(v *mVerdict, id string) {
	b, now := w.before, w.now
	v.events = append(v.events, "task claimed")
	switch tk := b.tickets[id]; {
	case tk == nil || !tk.hasN || !tk.task:
		v.fail("task-claim", id, "a place went to task %s, which has no ticket in tasks (withdrawn, claimed or lapsed)", id)
	case !mLive(tk.d, now):
		v.fail("task-deadline", id, "a place went to task %s %d ms past its ticket's deadline on its writer's clock", id, now-tk.d)
	}
	if w.tasks == nil {
		return
	}
	if w.tasks.goneIDs[id] {
		v.fail("task-withdrawn", id, "a place went to task %s, whose ticket was withdrawn or lapsed before", id)
	}
	if ta := w.after.tickets[id]; ta == nil || !ta.hasN || !ta.hasBody {
		v.fail("task-claim", id, "the claim of task %s took its ticket out of the item: the claim keeps it", id)
	} else if ta.s != 0 {
		// Should the claim lapse, its ticket waits again: a start left
		// on it would read as one gone unclaimed, and callers behind
		// would pass the task with no start made.
		v.fail("task-claim", id, "the claim of task %s left a start mark (%d) on its ticket: the claim takes the start it claimed away", id, ta.s)
	}
	if w.tasks.taken[id]++; w.tasks.taken[id] > 1 {
		v.events = append(v.events, "task claimed again after its lease lapsed")
	}
}

// judgeMark judges a change of a task ticket's start mark: a start is
// marked (s: its writer's now) only on a task's ticket, never while the
// last is younger than StartTimeout, and keeps when the starts first went
// out unclaimed (f: the first start's s; a start made again keeps it, so
// that the callers behind pass a task no worker comes for); it is taken
// back (s removed) only by the task's own worker.
func (w *mWrite) judgeMark(v *mVerdict, tb, ta *mTicket) {
	id := tb.id
	switch {
	case ta.s != 0 && ta.s == tb.s:
		v.fail("task-mark", id, "a write moved the first unclaimed start of task %s (%d → %d) and made no start", id, tb.unclaimedSince(), ta.unclaimedSince())
		return
	case ta.s != 0 && tb.s == 0 && ta.unclaimedSince() != ta.s:
		v.fail("task-mark", id, "the first start of task %s (%d) reads as unclaimed since %d", id, ta.s, ta.unclaimedSince())
	case ta.s != 0 && tb.s != 0 && ta.unclaimedSince() != tb.unclaimedSince():
		v.fail("task-mark", id, "task %s started again reads as unclaimed since %d, not since its first start %d: callers behind would stop passing it", id, ta.unclaimedSince(), tb.unclaimedSince())
	}
	switch {
	case !tb.task:
		v.fail("task-mark", id, "a write marked a start on caller's ticket %s", id)
	case ta.s != 0 && ta.s != tb.s && w.before.claimed(tb, w.now):
		v.fail("task-mark", id, "a write marked a start of task %s, claimed by its live lease: a claimed ticket takes no turn", id)
	case ta.s == 0:
		v.events = append(v.events, "task start given back")
		if !w.owns(id) {
			v.fail("task-mark", id, "a write took back the start of task %s, which its writer does not own", id)
		}
	case tb.s != 0 && ta.s-tb.s < StartTimeout.Milliseconds():
		v.fail("task-mark", id, "task %s started again %d ms after its last start; StartTimeout %v", id, ta.s-tb.s, StartTimeout)
	case tb.s != 0:
		v.events = append(v.events, "task started again after StartTimeout")
	default:
		v.events = append(v.events, "task start marked")
	}
}

// explain says whose turn it was, for a finding.
func (it *mItem) explain(k mKey, now int64, me mCaller, skip map[string]bool) string {
	var turn, lease, queue []string
	for _, c := range it.handout(k, now, []mCaller{me}, skip) {
		turn = append(turn, c.id)
	}
	h := it.startHandout(k, now)
	_, why := it.usable(k, h, me, now)
	for _, id := range slices.Sorted(maps.Keys(it.leases)) {
		lease = append(lease, fmt.Sprintf("%s@%+d", id, it.leases[id]-now))
	}
	for _, id := range slices.Sorted(maps.Keys(it.tickets)) {
		tk := it.tickets[id]
		s := ""
		if skip[id] {
			s = " (skipped)"
		}
		queue = append(queue, fmt.Sprintf("%s#%d/%s/%s@%+d%s", id, tk.n, tk.p, tk.t, tk.d-now, s))
	}
	switch {
	case why != "":
	case it.standing(now):
		why = "no place is free while the hold or the server's pause stands"
	default:
		why = "others first"
	}
	return fmt.Sprintf("the places free (%d) go to %v; it: %s (leases %v; queue %v)", h.free, turn, why, lease, queue)
}

// judgeBuckets: a take takes one token from each of its caller's buckets,
// which must have held one on its writer's clock; only an unused call's
// release gives tokens back, no more than it took; a purge removes only a
// full bucket.
func (w *mWrite) judgeBuckets(v *mVerdict, judged map[string]bool) {
	b, a, now, k := w.before, w.after, w.now, w.k
	charged := map[string]bool{}
	for name := range judged {
		charged[name] = true // a charge's or a refund's: judgeCharge's
	}
	for _, id := range v.takes {
		me := w.w.me
		for name, bk := range k.buckets(me) {
			charged[name] = true
			tat, had := b.rates[name]
			if had && bk.tokens(tat, now) < 1 {
				v.fail("rate", name, "the take of %s found bucket %s empty on its writer's clock", id, name)
			}
			if want := bk.charged(tat, now); a.rates[name] != want {
				v.fail("rate", name, "the take of %s left bucket %s at %d; one token taken at %d makes it %d", id, name, a.rates[name], now, want)
			}
			v.charged = append(v.charged, name)
		}
	}
	names := map[string]bool{}
	for n := range b.rates {
		names[n] = true
	}
	for n := range a.rates {
		names[n] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if charged[name] {
			continue
		}
		tb, hadB := b.rates[name]
		ta, hasA := a.rates[name]
		switch {
		case hadB && !hasA:
			if tb > now {
				v.fail("rate", name, "bucket %s was removed while %d ms from full", name, tb-now)
			}
		case hasA && (!hadB || ta > tb):
			v.fail("rate", name, "bucket %s moved from %d to %d in a write that admits nobody", name, tb, ta)
		case hasA && ta < tb:
			bk, mine := k.buckets(w.w.me)[name]
			switch {
			case w.w.outcome != Unused && w.w.outcome != mNoOutcome || len(v.released) == 0 || !mine:
				v.fail("rate", name, "bucket %s gave back %d ms in a write that is not an unused call's release (or a leave removing a take it never learnt of)", name, tb-ta)
			case ta < tb-bk.interval():
				v.fail("rate", name, "an unused call's release gave bucket %s back %d ms, more than one token (%d)", name, tb-ta, bk.interval())
			case w.mRefundBound(name, bk) >= 0 && tb-ta > w.mRefundBound(name, bk):
				v.fail("rate", name, "an unused call's release gave bucket %s back %d ms; of its token only %d ms were still to come (its charge left it at %d, its finish began at %d)", name, tb-ta, w.mRefundBound(name, bk), w.w.tats[name], w.w.finishAt)
			default:
				v.refunded = append(v.refunded, name)
			}
		}
	}
}

// judgeCharge judges the writes of a call that holds nothing in the item
// (doc.go, Buckets: no cap and no gate) that move its buckets, and
// returns the buckets it judged. Its charge is one write that takes a
// token from each of its buckets and nothing else (ttl aside): each held
// one on its writer's clock beyond those the callers whose turn comes
// before a newcomer's need (the hand-out of whose turn, with it the
// newest caller: tickets numbered past the latest view its instance was
// shown, judged, joined after it looked and come after it), no gate
// refused it (the hold, a closed entry of its gates), and it lands at most
// once (sent once, never again after an unknown outcome). Its refund, only
// after an Unused outcome of a charge that landed, and once, gives back
// exactly the token it took from each bucket and ADDs 1 to freed, and
// nothing else.
func (w *mWrite) judgeCharge(v *mVerdict) map[string]bool {
	b, a, now, k, me := w.before, w.after, w.now, w.k, w.w.me
	mine := k.buckets(me)
	up, down := false, false
	for name := range mine {
		tb, hadB := b.rates[name]
		ta, hasA := a.rates[name]
		switch {
		case hasA && (hadB && ta > tb || !hadB && ta > now):
			up = true
		case hasA && (hadB && ta < tb || !hadB && ta <= now):
			down = true // a refund of a bucket purged since (full): if_not_exists(0) less a token
		}
	}
	judged := map[string]bool{}
	switch {
	case up:
		v.charge = true
		v.events = append(v.events, "charge landed")
		for _, name := range slices.Sorted(maps.Keys(mine)) {
			bk := mine[name]
			judged[name] = true
			tat := b.rates[name] // absent: full
			if want := bk.charged(tat, now); a.rates[name] != want {
				v.fail("rate", name, "the charge of a call holding nothing left bucket %s at %d; one token taken at %d makes it %d", name, a.rates[name], now, want)
			}
			v.charged = append(v.charged, name)
		}
		if w.w.outcome != mNoOutcome {
			v.fail("charge", "finish", "a call holding nothing charged its buckets in its finish (%v)", w.w.outcome)
		}
		if w.w.charges > 0 {
			v.fail("charge", "twice", "a call holding nothing charged its buckets again, %d charges of it having landed: a charge is sent once, never again after an unknown outcome", w.w.charges)
		}
		refused := false
		if b.hold > now {
			v.fail("hold", "charge", "a charge landed %d ms before the hold ends", b.hold-now)
			refused = true
		}
		for _, attr := range mGatesOf(me) {
			g := b.gates[attr]
			if g == nil {
				continue
			}
			for _, key := range []string{"*", me.p} {
				if e, ok := g.entries[key]; ok && e.closed(now) {
					kind := "gate"
					if !g.breaker {
						kind = "pause"
					}
					v.fail(kind, attr+"."+key, "a charge of %s passed %s.%s, closed for %d ms more", me.p, attr, key, e.u-now)
					refused = true
				}
			}
		}
		c := me
		c.id, c.n = "(charge)", math.MaxInt64 // a newcomer: the newest
		skip, alive := map[string]bool{}, map[string]bool{}
		// It may pass, removing their tickets, the callers it presumes
		// gone as a take does: their turn came ClaimWindow before.
		for _, x := range v.bypassed {
			skip[x] = true
			if came, ok := w.turnCame[mTurnOf(x, b.tickets[x].n)]; !ok || w.sent.Sub(came) < ClaimWindow {
				v.fail("bypass", x, "a charge of %s presumed %s gone %v after its turn first came; ClaimWindow %v", me.p, x, w.sent.Sub(came), ClaimWindow)
			}
		}
		for id, tk := range b.tickets {
			if w.judged >= 0 && tk.hasN && tk.n > w.judged {
				alive[id] = true // joined after any view it could have judged from: not presumed gone by it
			}
			if came, ok := w.turnCame[mTurnOf(id, tk.n)]; ok && !tk.task && w.sent.Sub(came) >= ClaimWindow {
				skip[id] = true // its turn came a claim window ago: presumed gone, as by a take
			}
		}
		out := b.handout(k, now, []mCaller{c}, skip)
		if mServed(out, c.id) && !mServed(b.handout(k, now, []mCaller{c}, alive), c.id) {
			v.events = append(v.events, "charge past a waiter presumed gone")
		}
		if !mServed(out, c.id) {
			// Passing over a caller presumed gone can hand its place (a
			// tool's) to one that needs more of the charge's tokens: a
			// charge judged with every ticket it did not remove still
			// waiting — a newcomer has no looks of its own to presume one
			// gone by — takes no token of the callers whose turn comes
			// first either.
			removed := map[string]bool{}
			for _, x := range v.bypassed {
				removed[x] = true
			}
			if kept := b.handout(k, now, []mCaller{c}, removed); mServed(kept, c.id) {
				out = kept
			}
		}
		if !refused && !mServed(out, c.id) {
			v.fail("rate", "turn", "a charge of %s took a token its buckets did not hold beyond what the callers whose turn comes first need: %s", me.p, b.explain(k, now, c, skip))
		}
		// Beside a waiter needing a token of its buckets, it is a
		// newcomer's take holding nothing, not a charge (doc.go, Buckets).
		for _, id := range slices.Sorted(maps.Keys(b.tickets)) {
			if tk := b.tickets[id]; !w.owns(id) && tk.hasN && mLive(tk.d, now) && !b.claimed(tk, now) &&
				slices.ContainsFunc(slices.Collect(maps.Keys(k.buckets(tk.caller()))), func(n string) bool { _, ok := mine[n]; return ok }) {
				v.events = append(v.events, "charge landed beside a waiter needing its buckets")
				break
			}
		}
		for _, x := range out {
			if x.id == c.id {
				break
			}
			if slices.ContainsFunc(slices.Collect(maps.Keys(k.buckets(x))), func(n string) bool { _, ok := mine[n]; return ok }) {
				v.events = append(v.events, "charge leaving a token to a waiter whose turn came")
				break
			}
		}
		// Beside the tickets it passed and the stale entries it purged
		// (which the write's removals and freed are judged for as any
		// write's), it adds and changes nothing.
		for _, what := range mAdded(b, a) {
			v.fail("charge", what, "a charge of %s changed %s: it takes tokens, removes the tickets of callers it presumed gone and stale entries, and changes nothing else", me.p, what)
		}
	case down:
		v.refund = true
		v.events = append(v.events, "refund landed")
		for _, name := range slices.Sorted(maps.Keys(mine)) {
			bk := mine[name]
			judged[name] = true
			tb := b.rates[name] // absent: read as 0 by the refund
			ta, hasA := a.rates[name]
			switch bound := w.mRefundBound(name, bk); {
			case !hasA || ta > tb || ta < tb-bk.interval():
				v.fail("rate", name, "a refund left bucket %s at %d (was %d); at most one token back makes it no less than %d", name, ta, tb, tb-bk.interval())
			case bound >= 0 && tb-ta > bound:
				v.fail("rate", name, "a refund gave bucket %s back %d ms; of its token only %d ms were still to come (its charge left it at %d, its finish began at %d)", name, tb-ta, bound, w.w.tats[name], w.w.finishAt)
			case tb-ta < bk.interval():
				v.events = append(v.events, "refund of part of a token")
			}
			v.refunded = append(v.refunded, name)
		}
		switch {
		case w.w.outcome != Unused && w.w.outcome != mNoOutcome: // (within its Acquire: its place came too late)
			v.fail("refund", "", "a call holding nothing gave its tokens back after a %v call; only one never made (Unused) does", w.w.outcome)
		case w.w.charges == 0:
			v.fail("refund", "", "a call holding nothing gave back tokens no charge of it took (none landed)")
		case w.w.refunds > 0:
			v.fail("refund", "", "a call holding nothing gave its tokens back again, %d refunds of it having landed", w.w.refunds)
		}
		if a.freed != b.freed+1 {
			v.fail("freed", "refund", "a refund moved freed %d → %d; by one", b.freed, a.freed)
		}
		for _, what := range mChanged(b, a, true) {
			v.fail("refund", what, "a refund changed %s: it gives tokens back, ADDs 1 to freed and changes nothing else", what)
		}
	}
	return judged
}

// mChanged lists what a write changed of the item besides its buckets and
// ttl and, with freed, freed.
func mChanged(b, a *mItem, freed bool) []string {
	var out []string
	sameSets := func(x, y map[string][]string) bool {
		return maps.EqualFunc(x, y, func(p, q []string) bool {
			return slices.Equal(slices.Sorted(slices.Values(p)), slices.Sorted(slices.Values(q)))
		})
	}
	for what, same := range map[string]bool{
		"leases":     maps.Equal(b.leases, a.leases),
		"principals": sameSets(b.principals, a.principals),
		"tools":      sameSets(b.tools, a.tools),
		"waiting":    sameSets(b.waiting, a.waiting),
		"tickets":    maps.EqualFunc(b.tickets, a.tickets, func(p, q *mTicket) bool { return *p == *q }),
		"gates":      maps.EqualFunc(b.gates, a.gates, func(p, q *mGate) bool { return maps.Equal(p.entries, q.entries) }),
		"seq":        b.seq == a.seq,
		"freed":      freed || b.freed == a.freed,
		"refunds":    freed || b.refunds == a.refunds,
		"call_ms":    b.callMS == a.callMS,
		"hold":       b.hold == a.hold,
		"limit":      b.limit == a.limit && b.round == a.round && b.limitOK == a.limitOK && b.limitCut == a.limitCut && b.limitSig == a.limitSig,
		"baselines":  b.bases == a.bases,
	} {
		if !same {
			out = append(out, what)
		}
	}
	slices.Sort(out)
	return out
}

// mAdded lists what a write added to or changed in the item, removals
// aside, besides its buckets, ttl and freed.
func mAdded(b, a *mItem) []string {
	subset := func(x, y map[string][]string) bool { // x's members all in y
		for k, ms := range x {
			for _, m := range ms {
				if !slices.Contains(y[k], m) {
					return false
				}
			}
		}
		return true
	}
	within := func(x, y map[string]int64) bool {
		for k, n := range x {
			if m, ok := y[k]; !ok || m != n {
				return false
			}
		}
		return true
	}
	tickets, gates := true, true
	for id, t := range a.tickets {
		if bt := b.tickets[id]; bt == nil || *bt != *t {
			tickets = false
		}
	}
	for attr, ga := range a.gates {
		for key, e := range ga.entries {
			if gb := b.gates[attr]; gb == nil || gb.entries[key] != e {
				gates = false
			}
		}
	}
	// What mChanged finds changed of the rest.
	out := slices.DeleteFunc(mChanged(b, a, false), func(what string) bool {
		return slices.Contains([]string{"leases", "principals", "tools", "waiting", "tickets", "gates", "freed"}, what)
	})
	for what, same := range map[string]bool{
		"leases":     within(a.leases, b.leases),
		"principals": subset(a.principals, b.principals),
		"tools":      subset(a.tools, b.tools),
		"waiting":    subset(a.waiting, b.waiting),
		"tickets":    tickets,
		"gates":      gates,
	} {
		if !same {
			out = append(out, what)
		}
	}
	slices.Sort(out)
	return out
}

// mEntriesSet reports whether a write from b to a set a gate entry: one
// added or changed, not only removed (a purge).
func mEntriesSet(b, a *mItem) bool {
	for attr, ga := range a.gates {
		for key, e := range ga.entries {
			if gb := b.gates[attr]; gb == nil || gb.entries[key] != e {
				return true
			}
		}
	}
	return false
}

// mTokensBack reports whether a write from b to a gave a bucket a token
// back: its time earlier than it was, or made where it was absent (a
// charge moves it later; a purge removes it).
func mTokensBack(b, a *mItem) bool {
	for name, ta := range a.rates {
		if tb, had := b.rates[name]; !had || ta < tb {
			return true
		}
	}
	return false
}

// judgeGates: what may close, open, probe, count or purge a gate entry.
func (w *mWrite) judgeGates(v *mVerdict) {
	b, a, now, k, me := w.before, w.after, w.now, w.k, w.w.me
	// A call holding nothing ends with no release: its finish writes
	// (a pause its upstream asked for, its refund) stand for one. A write
	// of its that adds or moves no gate entry and gives no token back (a
	// repair made before its pause, the item's maps made where only
	// charges had written, and what that repair purges) is none of them.
	finishing := w.w.holdsNothing && !w.w.operator && (mEntriesSet(b, a) || mTokensBack(b, a))
	releasing := (len(v.released) > 0 || finishing) && w.w.outcome != mNoOutcome
	outcome := w.w.outcome
	myBreaker := ""
	var br mBreaker
	if x, ok := k.Breakers[me.tool]; ok && me.tool != "" {
		myBreaker, br = "breaker:"+me.tool, x
	}
	myPause := "pause"
	if k.PauseTool && me.tool != "" {
		myPause = "pause:" + me.tool
	}
	// The pause runs from when the upstream asked for it (its answer),
	// not from when the release is sent.
	asked := now
	if w.w.pausedAt > 0 {
		asked = w.w.pausedAt
	}
	pauseUntil := asked + min(w.w.pause, k.MaxPause).Milliseconds()
	attrs := map[string]bool{}
	for n := range b.gates {
		attrs[n] = true
	}
	for n := range a.gates {
		attrs[n] = true
	}
	if releasing && myBreaker != "" {
		attrs[myBreaker] = true // what its release must write there
	}
	if releasing && w.w.pausedAt > 0 {
		attrs[myPause] = true
	}
	for _, attr := range slices.Sorted(maps.Keys(attrs)) {
		gb, ga := b.gates[attr], a.gates[attr]
		if gb == nil {
			gb = &mGate{attr: attr, entries: map[string]mEntry{}}
		}
		if ga == nil {
			ga = &mGate{attr: attr, entries: map[string]mEntry{}}
		}
		breaker := strings.HasPrefix(attr, "breaker:")
		gb.breaker, ga.breaker = breaker, breaker
		// wasProbe: the write releases a probe of this gate.
		wasProbe := false
		for _, e := range gb.entries {
			wasProbe = wasProbe || e.p != "" && slices.Contains(v.released, e.p)
		}
		// closedLabels counts the principals' entries closed at now;
		// closedLately those closed within the second before, as the
		// writer may have seen them building a write it sent again
		// (the "*" entry closes on the evidence it saw).
		closedLabels, closedLately := 0, 0
		for key, e := range ga.entries {
			if key != "*" && e.closed(now) {
				closedLabels++
			}
			if key != "*" && e.closed(now-1000) {
				closedLately++
			}
		}
		keys := map[string]bool{}
		for n := range gb.entries {
			keys[n] = true
		}
		for n := range ga.entries {
			keys[n] = true
		}
		for _, key := range slices.Sorted(maps.Keys(keys)) {
			eb, hadB := gb.entries[key]
			ea, hasA := ga.entries[key]
			subj := attr + "." + key
			if hadB && !hasA {
				idle := modelIdleGate.Milliseconds()
				stale := !eb.liveProbe(now) && (eb.t == 0 || eb.t+idle <= now) &&
					(breaker && (eb.u == 0 || key != "*" && eb.u+idle <= now) || !breaker && !eb.closed(now))
				probeOpened := releasing && outcome == Success && eb.p != "" && slices.Contains(v.released, eb.p)
				reset := releasing && outcome == Success && attr == myBreaker && key == me.p && !eb.closed(now) && !eb.liveProbe(now) && eb.u == 0
				if !stale && !probeOpened && !reset {
					v.fail("gate", subj, "%s was removed while not stale (u %+d, p %q, t %+d)", subj, eb.u-now, eb.p, eb.t-now)
				}
				continue
			}
			// Closing, or closing for longer. (A pause entry written with a
			// time already passed on every clock closes nothing: a finish
			// of a call holding nothing may write its pause late, judged
			// at its first try's now.)
			if ea.u > eb.u && (breaker || ea.u > now-2*w.skew) {
				switch {
				case breaker && (!releasing || outcome != Failure || attr != myBreaker):
					v.fail("gate", subj, "%s closed by a write that is no failed call's release of that tool (outcome %v)", subj, outcome)
				case !breaker && (!releasing || w.w.pausedAt <= 0 || attr != myPause):
					v.fail("pause", subj, "%s closed by a write that is no release asking for that pause", subj)
				case key == "*" && closedLately < 2:
					v.fail("gate", subj, "%s closed for everyone with %d principal's entry closed", subj, closedLately)
				case key != "*" && key != me.p:
					v.fail("gate", subj, "%s closed by a call of %s", subj, me.p)
				case breaker && key != "*" && eb.f+1 < int64(br.Threshold) && !wasProbe:
					v.fail("gate", subj, "%s closed after %d failures; threshold %d", subj, eb.f+1, br.Threshold)
				case breaker && ea.u > now+br.Recovery.Milliseconds():
					v.fail("gate", subj, "%s closed for %d ms; recovery %v", subj, ea.u-now, br.Recovery)
				case !breaker && ea.u > pauseUntil:
					v.fail("pause", subj, "%s closed for %d ms; the pause asked (at most MaxPause) ends at %+d", subj, ea.u-now, pauseUntil-now)
				}
				if key == "*" {
					v.events = append(v.events, "gate closed for everyone")
				} else {
					v.events = append(v.events, "gate closed for one principal")
					if !breaker {
						v.events = append(v.events, "pause for one principal")
					}
				}
			}
			if ea.u < eb.u {
				switch {
				case !breaker:
					v.fail("pause", subj, "%s was shortened by %d ms", subj, eb.u-ea.u)
				case !releasing || outcome != Success || eb.p == "" || !slices.Contains(v.released, eb.p):
					v.fail("gate", subj, "%s opened by a write that is not its probe's success", subj)
				}
			}
			// Probes.
			if ea.p != eb.p && ea.p != "" {
				switch {
				case !slices.Contains(v.takes, ea.p):
					v.fail("probe", subj, "%s named %s its probe in a write that is not that caller's take", subj, ea.p)
				case !gb.halfOpen(eb, now) || eb.liveProbe(now):
					v.fail("probe", subj, "%s named %s its probe while not half-open with no live probe (u %+d, p %q, e %+d)", subj, ea.p, eb.u-now, eb.p, eb.e-now)
				case eb.barred(me.p, now):
					v.fail("probe", subj, "%s named %s of %s its probe, whose probe of it ended without a verdict %d ms ago", subj, ea.p, me.p, eb.w-now)
				case ea.e != a.leases[ea.p]:
					v.fail("probe", subj, "%s's probe expiry %d is not its lease's %d", subj, ea.e, a.leases[ea.p])
				}
				v.probes = append(v.probes, attr+"/"+key)
				v.events = append(v.events, "probe elected")
				if key != "*" {
					v.events = append(v.events, "probe for one principal")
				}
			}
			// A bar set only by the release of a probe of the entry that
			// ended without a verdict, on its own principal, for at most
			// Recovery.
			if ea.a != "" && (ea.a != eb.a || ea.w != eb.w) {
				switch {
				case !breaker || eb.p == "" || !slices.Contains(v.released, eb.p) || releasing && (outcome == Success || outcome == Failure):
					// (a leave removing its own probe lease, landed late, ends it without a verdict too)
					v.fail("probe", subj, "%s barred %s in a write that is no release of its probe without a verdict", subj, ea.a)
				case ea.a != me.p:
					v.fail("probe", subj, "%s barred %s in a release of %s's probe", subj, ea.a, me.p)
				case ea.w > now+br.Recovery.Milliseconds():
					v.fail("probe", subj, "%s barred %s for %d ms; recovery %v", subj, ea.a, ea.w-now, br.Recovery)
				}
			}
			if ea.p == "" && eb.p != "" {
				mine := slices.Contains(v.released, eb.p)
				if !mine && eb.liveProbe(now) && ea.u <= eb.u {
					v.fail("probe", subj, "%s's live probe %s was cleared by another's write", subj, eb.p)
				}
			}
			if ea.p == eb.p && ea.p != "" && ea.e != eb.e && (!w.owns(ea.p) || ea.e != a.leases[ea.p]) {
				v.fail("probe", subj, "%s's probe expiry moved to %d, not its lease's expiry", subj, ea.e)
			}
			// Failures.
			if ea.f > eb.f && (ea.f != eb.f+1 || !releasing || outcome != Failure || key != me.p || attr != myBreaker) {
				v.fail("gate", subj, "%s counted failures %d → %d in a write that is not one failed call's release of %s", subj, eb.f, ea.f, key)
			}
			if ea.f < eb.f && ea.u <= eb.u && !(releasing && outcome == Success && (key == me.p && attr == myBreaker || slices.Contains(v.released, eb.p))) {
				v.fail("gate", subj, "%s's failures reset %d → %d by a write that is no success of %s", subj, eb.f, ea.f, key)
			}
		}
		// What a release must do to its own gates.
		if !releasing {
			continue
		}
		eb, ea := gb.entries[me.p], ga.entries[me.p]
		if attr == myBreaker {
			switch outcome {
			case Failure:
				// Counted only while the entry is open (never shut since
				// it last opened): a shut or half-open entry counts none.
				if eb.u == 0 && ea.f != eb.f+1 && ea.u <= eb.u {
					v.fail("gate", attr+"."+me.p, "a failed call's release left %s.%s's failures at %d (were %d)", attr, me.p, ea.f, eb.f)
				}
				if (ea.f >= int64(br.Threshold) || wasProbe) && !ea.closed(now) {
					v.fail("gate", attr+"."+me.p, "%s.%s has %d failures (threshold %d, probe %v) and is not closed", attr, me.p, ea.f, br.Threshold, wasProbe)
				}
			case Success:
				if ea.f != 0 {
					v.fail("gate", attr+"."+me.p, "a success left %s.%s's failures at %d", attr, me.p, ea.f)
				}
			}
		}
		if outcome == Success {
			for key, e := range gb.entries {
				if e.p != "" && slices.Contains(v.released, e.p) && ga.entries[key].u != 0 {
					v.fail("gate", attr+"."+key, "its probe's success left %s.%s closed or half-open", attr, key)
				}
			}
		}
		// A release landing once the pause it asks has ended on every
		// clock (a later pause stood when it was sent, since purged) need
		// not leave one.
		if attr == myPause && w.w.pausedAt > 0 && pauseUntil > now && pauseUntil+w.skew > w.landedOnWritersClock() && ea.u < min(pauseUntil, max(eb.u, pauseUntil)) {
			v.fail("pause", attr+"."+me.p, "a release asking for a pause until %+d left %s.%s at %+d", pauseUntil-now, attr, me.p, ea.u-now)
		}
		// When its own entry closes while another principal's is closed,
		// "*" closes too.
		if ea.u > eb.u && ea.closed(now) && closedLabels >= 2 && !ga.entries["*"].closed(now) {
			v.fail("gate", attr+".*", "%s.%s closed while another principal's entry is closed, and %s.* stayed open", attr, me.p, attr)
		}
	}
}

// judgeLimit: the adaptive limit moves once a round, by a release of a
// lease granted in it, down by half on two principals' evidence (or a
// lone one's), up by one after enough evidence.
func (w *mWrite) judgeLimit(v *mVerdict) {
	b, a, now, k, me := w.before, w.after, w.now, w.k, w.w.me
	if k.AdaptiveMin == 0 {
		if a.limit != b.limit || a.round != b.round {
			v.fail("limit", "", "the limit moved on a key without Adaptive")
		}
		return
	}
	releasing := len(v.released) > 0 && w.w.outcome != mNoOutcome
	lb, la := b.limitOf(k), a.limitOf(k)
	switch {
	case la == lb:
		if a.round != b.round {
			v.fail("limit", "", "limit_round went %d → %d with no move of the limit", b.round, a.round)
		}
	case a.round != b.round+1:
		v.fail("limit", "", "the limit moved %d → %d with limit_round %d → %d", lb, la, b.round, a.round)
	case !releasing:
		v.fail("limit", "", "the limit moved %d → %d in a write that releases nothing", lb, la)
	case w.w.grant != b.round:
		v.fail("limit", "", "the limit moved %d → %d by a lease granted in round %d; the round is %d", lb, la, w.w.grant, b.round)
	case la < lb:
		v.events = append(v.events, "limit moved down")
		lo, hi := max(int64(k.AdaptiveMin), lb/2), max(int64(k.AdaptiveMin), min(lb-1, (lb+1)/2))
		if la < lo || la > hi {
			v.fail("limit", "", "the limit came down %d → %d; by half, at least by one, at most to Min %d", lb, la, k.AdaptiveMin)
		}
		if w.w.outcome == Abandoned || w.w.outcome == Unused {
			v.fail("limit", "", "the limit came down on an %v call", w.w.outcome)
		}
		if other := b.limitSig != "" && b.limitSig != me.p; !other && b.othersThere(me, now) {
			v.fail("limit", "", "the limit came down on %s's evidence alone (recorded: %q) while another principal holds or waits", me.p, b.limitSig)
		}
	default:
		v.events = append(v.events, "limit moved up")
		need := 2 * lb
		if la == b.limitCut {
			need = 8 * lb
		}
		switch {
		case la != lb+1 || la > int64(k.Cap):
			v.fail("limit", "", "the limit went up %d → %d; by one, to at most %d", lb, la, k.Cap)
		case w.w.outcome != Success:
			v.fail("limit", "", "the limit went up on a %v call", w.w.outcome)
		case b.limitOK+1 < need:
			v.fail("limit", "", "the limit went up %d → %d after %d up evidences; it needs %d", lb, la, b.limitOK+1, need)
		}
	}
	if la == lb {
		if a.limitOK > b.limitOK && (a.limitOK != b.limitOK+1 || !releasing || w.w.outcome != Success || w.w.grant != b.round) {
			v.fail("limit", "", "limit_ok went %d → %d in a write that is not one success of a lease of round %d (%v, round %d)", b.limitOK, a.limitOK, b.round, w.w.outcome, w.w.grant)
		}
		if a.limitOK < b.limitOK {
			v.fail("limit", "", "limit_ok went %d → %d with no move of the limit", b.limitOK, a.limitOK)
		}
	}
	if a.limitSig != b.limitSig && a.limitSig != "" && (a.limitSig != me.p || !releasing) {
		v.fail("limit", "", "limit_sig became %q in a write that is no release of that principal", a.limitSig)
	}
}

// othersThere reports whether a principal other than me's holds a live
// lease or a live ticket.
func (it *mItem) othersThere(me mCaller, now int64) bool {
	for p, ids := range it.principals {
		if p != me.p && it.liveIn(ids, now) > 0 {
			return true
		}
	}
	for _, tk := range it.tickets {
		if tk.p != me.p && tk.hasN && mLive(tk.d, now) {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------
// Checking a state.

// checkState checks what every state of the item must hold at true time
// now, leases counted live when every clock within skew sees them so.
func mCheckState(k mKey, toolCaps map[string]int, it *mItem, now int64, skew int64) []mFinding {
	var out []mFinding
	fail := func(kind, subject, format string, args ...any) {
		out = append(out, mFinding{kind, subject, fmt.Sprintf(format, args...)})
	}
	for _, p := range it.problems {
		fail("schema", p, "%s", p)
	}
	// Whole leases and tickets.
	in := map[string]int{}
	for label, ids := range it.principals {
		for _, id := range ids {
			in[id]++
			if _, ok := it.leases[id]; !ok {
				fail("whole", id, "principal:%s holds %s, which is not a lease", label, id)
			}
		}
	}
	for tool, ids := range it.tools {
		for _, id := range ids {
			if _, ok := it.leases[id]; !ok {
				fail("whole", id, "tool:%s holds %s, which is not a lease", tool, id)
			}
		}
	}
	for id := range it.leases {
		if in[id] != 1 {
			fail("whole", id, "lease %s is in %d principals' sets", id, in[id])
		}
	}
	for id, tk := range it.tickets {
		switch {
		case !tk.hasN || !tk.hasBody:
			fail("whole", id, "ticket %s is half there (queue %v, tickets %v)", id, tk.hasN, tk.hasBody)
		case !slices.Contains(it.waiting[tk.p], id):
			fail("whole", id, "ticket %s of %s is not in waiting:%s", id, tk.p, tk.p)
		}
	}
	for label, ids := range it.waiting {
		for _, id := range ids {
			if tk := it.tickets[id]; tk == nil || tk.p != label {
				fail("whole", id, "waiting:%s holds %s, which is not a ticket of %s", label, id, label)
			}
		}
	}
	// Caps.
	sure := now + skew
	ceiling := k.Cap
	if c := it.limitOf(k); k.AdaptiveMin == 0 && c > 0 {
		ceiling = int(c)
	}
	if n := it.liveLeases(sure); ceiling > 0 && n > ceiling {
		fail("cap", "server", "leases holds %d live leases; cap %d", n, ceiling)
	}
	for tool, ids := range it.tools {
		if c := toolCaps[tool]; c > 0 && it.liveIn(ids, sure) > c {
			fail("cap", "tool:"+tool, "tool:%s holds %d live leases; cap %d", tool, it.liveIn(ids, sure), c)
		}
	}
	for p, ids := range it.principals {
		if c := k.PrincipalCap; c > 0 && it.liveIn(ids, sure) > c {
			fail("cap", "principal:"+p, "principal:%s holds %d live leases; cap %d", p, it.liveIn(ids, sure), c)
		}
	}
	if q := it.queuedKind(false); q > k.MaxQueued {
		fail("queue", "", "%d callers' tickets stored; MaxQueued %d", q, k.MaxQueued)
	}
	// A task's ticket stays, claimed, while its call runs, and a claim
	// whose lease lapsed waits again over the bound (it had its place):
	// a join lands only while fewer than MaxQueued wait unclaimed, so at
	// most MaxQueued + the cap's claims are stored.
	if q := it.queuedKind(true); k.Cap > 0 && q > k.MaxQueued+k.Cap {
		fail("queue", "tasks", "%d tasks' tickets stored; MaxQueued %d, cap %d", q, k.MaxQueued, k.Cap)
	}
	if k.AdaptiveMin > 0 && it.limit != 0 && (it.limit < int64(k.AdaptiveMin) || it.limit > int64(k.Cap)) {
		fail("limit", "", "the limit is %d; it lives in [%d, %d]", it.limit, k.AdaptiveMin, k.Cap)
	}
	return out
}

// announced is the look period ticket t announces (doc.go: a ticket
// without one announces 2 s), its caller's longest sleep between looks.
func (t *mTicket) announced() time.Duration {
	if t.l == 0 {
		return 2 * time.Second
	}
	return time.Duration(t.l) * time.Millisecond
}

// claimWindow is how long, by doc.go, t's turn may stand untaken at
// another caller's looks before t is presumed gone: ClaimWindow past the
// period it announces.
func (t *mTicket) claimWindow() time.Duration { return ClaimWindow + t.announced() }

// lookBound is the longest doc.go lets waiter id go without looking at the
// item, from the item as an answer showed it: MaxLook while fewer than
// Places live tickets come before it (fewest places held first, then the
// lower number), rank/Places × MaxLook, at most MaxLookFar, behind more,
// and never longer than the period its ticket announces.
func (it *mItem) lookBound(k mKey, now int64, id string) time.Duration {
	me := it.tickets[id]
	if me == nil {
		return DefaultMaxLook
	}
	held := map[string]int{}
	for p, ids := range it.principals {
		held[p] = it.liveIn(ids, now)
	}
	rank := 0
	for tid, t := range it.tickets {
		if tid != id && t.hasN && t.hasBody && mLive(t.d, now) && (held[t.p] < held[me.p] || held[t.p] == held[me.p] && t.n < me.n) {
			rank++
		}
	}
	places := max(int(it.limitOf(k)), 1)
	if rank < places {
		return min(DefaultMaxLook, me.announced())
	}
	return min(time.Duration(rank/places)*DefaultMaxLook, MaxLookFar, me.announced())
}
