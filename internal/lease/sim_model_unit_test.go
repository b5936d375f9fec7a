package lease

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The model's own tests: hand-built items, read and judged as doc.go says.
// A model that misreads doc.go would pass a defective protocol or fail a
// sound one; these pin its reading down, case by case.

const mNow = int64(1_000_000_000) // ms, the time of every hand-built case

// mFix builds a raw item.
type mFix struct {
	raw map[string]types.AttributeValue
}

func mNum(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func mStr(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func mItemOf() *mFix {
	return &mFix{raw: map[string]types.AttributeValue{"limiter_key": mStr("k"), "ttl": mNum(mNow/1000 + modelTTL)}}
}

func (f *mFix) clone() *mFix { return &mFix{raw: cloneItem(f.raw)} }

func (f *mFix) set(name string, v types.AttributeValue) *mFix { f.raw[name] = v; return f }

func (f *mFix) del(name string) *mFix { delete(f.raw, name); return f }

func (f *mFix) num(name string, n int64) *mFix { return f.set(name, mNum(n)) }

// sub is the map attribute name, made if absent.
func (f *mFix) sub(name string) map[string]types.AttributeValue {
	m, ok := f.raw[name].(*types.AttributeValueMemberM)
	if !ok {
		m = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
		f.raw[name] = m
	}
	return m.Value
}

func (f *mFix) addTo(set, id string) {
	ss, _ := f.raw[set].(*types.AttributeValueMemberSS)
	if ss == nil {
		ss = &types.AttributeValueMemberSS{}
		f.raw[set] = ss
	}
	if !slices.Contains(ss.Value, id) {
		ss.Value = append(ss.Value, id)
	}
}

func (f *mFix) dropFrom(set, id string) {
	if ss, ok := f.raw[set].(*types.AttributeValueMemberSS); ok {
		ss.Value = slices.DeleteFunc(ss.Value, func(s string) bool { return s == id })
		if len(ss.Value) == 0 {
			delete(f.raw, set)
		}
	}
}

// lease adds a whole lease: its entry, its principal's set and, with a
// tool, the tool's set.
func (f *mFix) lease(id, p, tool string, exp int64) *mFix {
	f.sub("leases")[id] = mNum(exp)
	f.addTo("principal:"+p, id)
	if tool != "" {
		f.addTo("tool:"+tool, id)
	}
	return f
}

// ticket adds a whole ticket.
func (f *mFix) ticket(id string, n int64, p, tool string, d, c, r int64) *mFix {
	f.sub("queue")[id] = mNum(n)
	body := map[string]types.AttributeValue{"p": mStr(p), "d": mNum(d)}
	if tool != "" {
		body["t"] = mStr(tool)
	}
	if c > 0 {
		body["c"] = mNum(c)
	}
	if r > 0 {
		body["r"] = mNum(r)
	}
	f.sub("tickets")[id] = &types.AttributeValueMemberM{Value: body}
	f.addTo("waiting:"+p, id)
	return f
}

// taskTicket adds a whole task's ticket, its last start at s (0: none).
func (f *mFix) taskTicket(id string, n int64, p string, d, s int64) *mFix {
	f.sub("tasks")[id] = mNum(n)
	body := map[string]types.AttributeValue{"p": mStr(p), "d": mNum(d), "x": mStr("task-" + id)}
	if s != 0 {
		body["s"] = mNum(s)
	}
	f.sub("tickets")[id] = &types.AttributeValueMemberM{Value: body}
	f.addTo("waiting:"+p, id)
	return f
}

func (f *mFix) unticket(id string) *mFix {
	delete(f.sub("queue"), id)
	delete(f.sub("tasks"), id)
	if b, ok := f.sub("tickets")[id].(*types.AttributeValueMemberM); ok {
		f.dropFrom("waiting:"+b.Value["p"].(*types.AttributeValueMemberS).Value, id)
	}
	delete(f.sub("tickets"), id)
	return f
}

func (f *mFix) entry(attr, key string, e mEntry) *mFix {
	m := map[string]types.AttributeValue{}
	for name, v := range map[string]int64{"u": e.u, "e": e.e, "f": e.f, "t": e.t} {
		if v != 0 {
			m[name] = mNum(v)
		}
	}
	if e.p != "" {
		m["p"] = mStr(e.p)
	}
	f.sub(attr)[key] = &types.AttributeValueMemberM{Value: m}
	return f
}

func (f *mFix) item() *mItem { return mRead(f.raw) }

func TestModelQueueReserve(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 8: 2, 9: 2, 12: 3, 64: 16, 100: 25} {
		if got := modelQueueReserve(n); got != want {
			t.Errorf("modelQueueReserve(%d) = %d, want %d", n, got, want)
		}
		// The model and the code agree on what doc.go says.
		if got := QueueReserve(n); got != want {
			t.Errorf("QueueReserve(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestModelItemSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  map[string]types.AttributeValue
		want int
	}{
		{"string", map[string]types.AttributeValue{"ab": mStr("xyz")}, 5},
		{"number: a byte per two digits and one", map[string]types.AttributeValue{"n": mNum(123)}, 1 + 2 + 1},
		{"number: zeroes trimmed", map[string]types.AttributeValue{"n": mNum(1000)}, 1 + 1 + 1},
		{"set: its members", map[string]types.AttributeValue{"s": &types.AttributeValueMemberSS{Value: []string{"ab", "c"}}}, 1 + 3},
		{"map: 3, and a byte an element", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": mStr("vv")}}}, 1 + 3 + (1 + 2 + 1)},
		{"empty map", map[string]types.AttributeValue{"leases": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}}, 6 + 3},
	} {
		if got := mItemSize(tc.raw); got != tc.want {
			t.Errorf("%s: size %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestModelReadsTheItemTable(t *testing.T) {
	f := mItemOf().lease("i0.1", "p0", "a", mNow+5000).ticket("i1.1", 7, "p1", "b", mNow+9000, 2, 30).
		num("seq", 7).num("freed", 3).num("call_ms", 250).num("hold", mNow-1).num("rate:server", mNow+100).
		num("rate:principal:p1", mNow).num("limit", 3).num("limit_round", 2).num("limit_ok", 1).num("limit_cut", 4).
		set("limit_sig", mStr("p1")).num("base:a", 120).num("limit_at", mNow).
		entry("breaker:b", "*", mEntry{u: mNow + 10, p: "i0.1", e: mNow + 5000}).entry("breaker:b", "p1", mEntry{u: mNow, f: 3, t: mNow - 10}).
		entry("pause", "p0", mEntry{u: mNow + 700}).entry("pause:a", "*", mEntry{u: mNow + 1})
	it := f.item()
	if len(it.problems) > 0 {
		t.Fatalf("problems reading a well-formed item: %v", it.problems)
	}
	tk := it.tickets["i1.1"]
	switch {
	case it.leases["i0.1"] != mNow+5000 || !slices.Equal(it.principals["p0"], []string{"i0.1"}) || !slices.Equal(it.tools["a"], []string{"i0.1"}):
		t.Errorf("lease read as %v %v %v", it.leases, it.principals, it.tools)
	case tk == nil || !tk.hasN || !tk.hasBody || tk.n != 7 || tk.p != "p1" || tk.t != "b" || tk.d != mNow+9000 || tk.c != 2 || tk.r != 30:
		t.Errorf("ticket read as %+v", tk)
	case !slices.Equal(it.waiting["p1"], []string{"i1.1"}) || it.seq != 7 || it.freed != 3 || it.callMS != 250 || it.hold != mNow-1:
		t.Errorf("waiting, counters or hold read as %v %d %d %d %d", it.waiting, it.seq, it.freed, it.callMS, it.hold)
	case it.rates["server"] != mNow+100 || it.rates["principal:p1"] != mNow:
		t.Errorf("buckets read as %v", it.rates)
	case it.limit != 3 || it.round != 2 || it.limitOK != 1 || it.limitCut != 4 || it.limitSig != "p1":
		t.Errorf("limit read as %d %d %d %d %q", it.limit, it.round, it.limitOK, it.limitCut, it.limitSig)
	case it.gates["breaker:b"] == nil || !it.gates["breaker:b"].breaker || it.gates["breaker:b"].entries["p1"].f != 3 ||
		it.gates["breaker:b"].entries["*"].p != "i0.1" || it.gates["pause"] == nil || it.gates["pause"].breaker || it.gates["pause:a"].tool != "a":
		t.Errorf("gates read as %+v", it.gates)
	}
	for _, tc := range []struct {
		name string
		fix  *mFix
	}{
		{"an attribute the table does not name", mItemOf().num("paused_until", mNow)},
		{"a tombstone", mItemOf().set("tickets", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"i0.1": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": mNum(mNow)}}}})},
		{"leases not a map", mItemOf().num("leases", 1)},
		{"a principal's set not a set", mItemOf().set("principal:p0", mStr("i0.1"))},
		{"a pause with a probe", mItemOf().entry("pause", "*", mEntry{u: mNow, p: "i0.1"})},
		{"failures on the entry for everyone", mItemOf().entry("breaker:b", "*", mEntry{f: 1})},
		{"a gate entry's unknown field", mItemOf().set("breaker:b", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"p0": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"z": mNum(1)}}}})},
	} {
		if it := tc.fix.item(); len(it.problems) == 0 {
			t.Errorf("%s: read without a problem", tc.name)
		}
	}
}

func TestModelBucket(t *testing.T) {
	b := mBucket{4} // one token every 15 s
	if b.interval() != 15000 || (mBucket{7}).interval() != 8572 {
		t.Fatalf("intervals %d, %d; want 15000 and 8572 (rounded up)", b.interval(), (mBucket{7}).interval())
	}
	tat := int64(0)
	for i := range 4 {
		if b.tokens(tat, mNow) < 1 {
			t.Fatalf("token %d: the bucket is empty", i)
		}
		tat = b.charged(tat, mNow)
	}
	for _, tc := range []struct {
		at   int64
		want int64
	}{{mNow, 0}, {mNow + 14999, 0}, {mNow + 15000, 1}, {mNow + 45000, 3}, {mNow + 60000, 4}, {mNow + 90000, 4}} {
		if got := b.tokens(tat, tc.at); got != tc.want {
			t.Errorf("tokens at %+d: %d, want %d", tc.at-mNow, got, tc.want)
		}
	}
	if got := b.charged(mNow+30000, mNow); got != mNow+45000 {
		t.Errorf("charging a drained bucket: %d, want its arrival time one interval later", got)
	}
}

func mIDs(cs []mCaller) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.id)
	}
	return out
}

func TestModelHandout(t *testing.T) {
	far := mNow + 60000
	newcomer := func(id, p, tool string, toolCap int64) mCaller {
		return mCaller{id: id, p: p, tool: tool, toolCap: toolCap, n: math.MaxInt64}
	}
	for _, tc := range []struct {
		name  string
		k     mKey
		fix   *mFix
		extra []mCaller
		skip  []string
		want  []string
	}{
		{"places free go by ticket number", mKey{Cap: 2}, mItemOf().ticket("x", 2, "p0", "", far, 0, 0).ticket("y", 1, "p1", "", far, 0, 0).ticket("z", 3, "p2", "", far, 0, 0),
			nil, nil, []string{"y", "x"}},
		{"fewest places held first", mKey{Cap: 3}, mItemOf().lease("l1", "p0", "", far).ticket("x", 1, "p0", "", far, 0, 0).ticket("y", 2, "p1", "", far, 0, 0),
			nil, nil, []string{"y", "x"}},
		{"places handed out count", mKey{Cap: 3}, mItemOf().ticket("x1", 1, "p0", "", far, 0, 0).ticket("x2", 2, "p0", "", far, 0, 0).ticket("y", 3, "p1", "", far, 0, 0),
			nil, nil, []string{"x1", "y", "x2"}},
		{"expired leases free their places", mKey{Cap: 1}, mItemOf().lease("l1", "p0", "", mNow-1).ticket("x", 1, "p0", "", far, 0, 0),
			nil, nil, []string{"x"}},
		{"live leases fill the cap", mKey{Cap: 1}, mItemOf().lease("l1", "p0", "", mNow+1).ticket("x", 1, "p0", "", far, 0, 0),
			nil, nil, nil},
		{"a lease is live through its expiry's millisecond", mKey{Cap: 1}, mItemOf().lease("l1", "p0", "", mNow).ticket("x", 1, "p0", "", far, 0, 0),
			nil, nil, nil},
		{"lapsed tickets wait no more", mKey{Cap: 1}, mItemOf().ticket("x", 1, "p0", "", mNow-1, 0, 0).ticket("y", 2, "p0", "", far, 0, 0),
			nil, nil, []string{"y"}},
		{"a ticket waits through its deadline's millisecond", mKey{Cap: 1}, mItemOf().ticket("x", 1, "p0", "", mNow, 0, 0).ticket("y", 2, "p0", "", far, 0, 0),
			nil, nil, []string{"x"}},
		{"a full tool is passed over", mKey{Cap: 2}, mItemOf().lease("l1", "p0", "a", far).ticket("x", 1, "p1", "a", far, 1, 0).ticket("y", 2, "p1", "", far, 0, 0),
			nil, nil, []string{"y"}},
		{"a principal at its cap is passed over", mKey{Cap: 3, PrincipalCap: 1}, mItemOf().lease("l1", "p0", "", far).ticket("x", 1, "p0", "", far, 0, 0).ticket("y", 2, "p1", "", far, 0, 0),
			nil, nil, []string{"y"}},
		{"an empty bucket is passed over", mKey{Cap: 2, PrincipalRPM: 2}, mItemOf().num("rate:principal:p0", mNow+60000).ticket("x", 1, "p0", "", far, 0, 0).ticket("y", 2, "p1", "", far, 0, 0),
			nil, nil, []string{"y"}},
		{"a bucket's last token goes once", mKey{Cap: 3, ServerRPM: 2}, mItemOf().num("rate:server", mNow+30000).ticket("x", 1, "p0", "", far, 0, 0).ticket("y", 2, "p1", "", far, 0, 0),
			nil, nil, []string{"x"}},
		{"a ticket's tool bucket", mKey{Cap: 2}, mItemOf().num("rate:tool:b", mNow+60000).ticket("x", 1, "p0", "b", far, 0, 2).ticket("y", 2, "p1", "", far, 0, 0),
			nil, nil, []string{"y"}},
		{"a gate closed for one principal passes over its callers alone", mKey{Cap: 2}, mItemOf().entry("breaker:b", "p0", mEntry{u: mNow + 1}).
			ticket("x", 1, "p0", "b", far, 0, 0).ticket("y", 2, "p0", "", far, 0, 0).ticket("z", 3, "p1", "b", far, 0, 0),
			nil, nil, []string{"y", "z"}},
		{"a half-open gate lets its first caller through as its probe", mKey{Cap: 3}, mItemOf().entry("breaker:b", "*", mEntry{u: mNow}).
			ticket("x", 1, "p0", "b", far, 0, 0).ticket("y", 2, "p1", "b", far, 0, 0).ticket("z", 3, "p2", "", far, 0, 0),
			nil, nil, []string{"x", "z"}},
		{"a half-open gate with a live probe passes over all its callers", mKey{Cap: 3}, mItemOf().entry("breaker:b", "p0", mEntry{u: mNow - 5, p: "l9", e: mNow + 1}).
			ticket("x", 1, "p0", "b", far, 0, 0).ticket("y", 2, "p1", "b", far, 0, 0),
			nil, nil, []string{"y"}},
		{"a lapsed probe leaves the gate half-open", mKey{Cap: 3}, mItemOf().entry("breaker:b", "p0", mEntry{u: mNow - 5, p: "l9", e: mNow - 1}).
			ticket("x", 1, "p0", "b", far, 0, 0).ticket("x2", 2, "p0", "b", far, 0, 0),
			nil, nil, []string{"x"}},
		{"a pause has no probe", mKey{Cap: 3}, mItemOf().entry("pause", "p0", mEntry{u: mNow}).ticket("x", 1, "p0", "", far, 0, 0).ticket("x2", 2, "p0", "", far, 0, 0),
			nil, nil, []string{"x", "x2"}},
		{"a principal's pause", mKey{Cap: 3}, mItemOf().entry("pause", "p0", mEntry{u: mNow + 1}).ticket("x", 1, "p0", "", far, 0, 0).ticket("y", 2, "p1", "", far, 0, 0),
			nil, nil, []string{"y"}},
		{"a tool's pause", mKey{Cap: 3}, mItemOf().entry("pause:a", "*", mEntry{u: mNow + 1}).ticket("x", 1, "p0", "a", far, 0, 0).ticket("y", 2, "p1", "b", far, 0, 0),
			nil, nil, []string{"y"}},
		{"the server's pause frees no place", mKey{Cap: 3}, mItemOf().entry("pause", "*", mEntry{u: mNow + 1}).ticket("x", 1, "p0", "", far, 0, 0),
			nil, nil, nil},
		{"the hold frees no place", mKey{Cap: 3}, mItemOf().num("hold", mNow+1).ticket("x", 1, "p0", "", far, 0, 0),
			nil, nil, nil},
		{"a hold passed", mKey{Cap: 3}, mItemOf().num("hold", mNow).ticket("x", 1, "p0", "", far, 0, 0),
			nil, nil, []string{"x"}},
		{"no cap: every caller that can", mKey{}, mItemOf().lease("l", "p0", "a", far).ticket("x", 1, "p0", "a", far, 1, 0).ticket("y", 2, "p1", "", far, 0, 0).ticket("z", 3, "p1", "", far, 0, 0),
			nil, nil, []string{"y", "z"}},
		{"the adaptive limit is the cap", mKey{Cap: 4, AdaptiveMin: 1}, mItemOf().num("limit", 2).lease("l", "p0", "", far).ticket("x", 1, "p1", "", far, 0, 0).ticket("y", 2, "p1", "", far, 0, 0),
			nil, nil, []string{"x"}},
		{"an absent limit is Min", mKey{Cap: 4, AdaptiveMin: 1}, mItemOf().ticket("x", 1, "p1", "", far, 0, 0).ticket("y", 2, "p1", "", far, 0, 0),
			nil, nil, []string{"x"}},
		{"a newcomer is the newest ticket", mKey{Cap: 1}, mItemOf().ticket("x", 1, "p0", "", far, 0, 0),
			[]mCaller{newcomer("me", "p1", "", 0)}, nil, []string{"x"}},
		{"a newcomer of a principal holding fewer goes first", mKey{Cap: 2}, mItemOf().lease("l", "p0", "", far).ticket("x", 1, "p0", "", far, 0, 0),
			[]mCaller{newcomer("me", "p1", "", 0)}, nil, []string{"me"}},
		{"skipped tickets are passed", mKey{Cap: 1}, mItemOf().ticket("x", 1, "p0", "", far, 0, 0).ticket("y", 2, "p0", "", far, 0, 0),
			nil, []string{"x"}, []string{"y"}},
	} {
		skip := map[string]bool{}
		for _, id := range tc.skip {
			skip[id] = true
		}
		got := mIDs(tc.fix.item().handout(tc.k, mNow, tc.extra, skip))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: places go to %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestModelNoteTurns(t *testing.T) {
	far := mNow + 60000
	now := time.UnixMilli(mNow)
	skew := 400 * time.Millisecond
	t.Run("dead waiters come into their turn a ClaimWindow apart", func(t *testing.T) {
		it := mItemOf().ticket("x", 1, "p0", "", far, 0, 0).ticket("y", 2, "p1", "", far, 0, 0).ticket("w", 3, "p2", "", far, 0, 0).item()
		came := map[string]time.Time{}
		it.noteTurns(mKey{Cap: 1}, now, skew, came)
		for id, want := range map[string]time.Time{"x#1": now, "y#2": now.Add(ClaimWindow), "w#3": now.Add(2 * ClaimWindow)} {
			if !came[id].Equal(want) {
				t.Errorf("%s's turn came at %v, want %v", id, came[id].Sub(now), want.Sub(now))
			}
		}
	})
	t.Run("a place that frees later, as the fastest clock sees it", func(t *testing.T) {
		it := mItemOf().lease("l", "p9", "", mNow+5000).ticket("x", 1, "p0", "", far, 0, 0).item()
		came := map[string]time.Time{}
		it.noteTurns(mKey{Cap: 1}, now, skew, came)
		// The lease lapses a millisecond past its expiry.
		if want := now.Add(5*time.Second + time.Millisecond - skew); !came["x#1"].Equal(want) {
			t.Errorf("x's turn came at %v, want %v", came["x#1"].Sub(now), want.Sub(now))
		}
	})
	t.Run("a turn that comes on a slow clock only comes now", func(t *testing.T) {
		// x's gate passes 200 ms from now: a fast clock finds it
		// half-open and x its probe; a slow one finds x held back, and
		// the place y's.
		it := mItemOf().entry("breaker:b", "p0", mEntry{u: mNow + 200, t: mNow - 100}).
			ticket("x", 1, "p0", "b", far, 0, 0).ticket("y", 2, "p0", "", far, 0, 0).item()
		k := mKey{Cap: 1, Breakers: map[string]mBreaker{"b": {Threshold: 1, Recovery: 500 * time.Millisecond}}}
		came := map[string]time.Time{}
		it.noteTurns(k, now, skew, came)
		if !came["y#2"].Equal(now) {
			t.Errorf("y's turn came at %v (noted %v), want now", came["y#2"].Sub(now), came)
		}
		if !came["x#1"].Equal(now) {
			t.Errorf("x's turn came at %v, want now (a fast clock's)", came["x#1"].Sub(now))
		}
	})
	t.Run("an earlier note stands", func(t *testing.T) {
		it := mItemOf().ticket("x", 1, "p0", "", far, 0, 0).item()
		came := map[string]time.Time{"x#1": now.Add(-time.Second)}
		it.noteTurns(mKey{Cap: 1}, now, skew, came)
		if !came["x#1"].Equal(now.Add(-time.Second)) {
			t.Errorf("x's turn moved to %v", came["x#1"].Sub(now))
		}
	})
}

// judgeCase is one write for the model to judge: the item before and
// after (ttl refreshed unless the case sets it), its writer, and the kinds
// of finding expected (none: a legal write).
type judgeCase struct {
	name          string
	k             mKey
	before, after *mFix
	me            mCaller
	mine          []string
	outcome       Outcome
	pause         time.Duration
	grant         int64
	judged        int64
	came          map[string]time.Duration // ticket → its turn came this long before the write
	task          bool                     // the writer acts for a task
	claims        []string                 // what its takes named in the task's ticket
	superseded    bool                     // another worker's take of the task's lease landed after the writer's
	called        bool                     // the writer, a task's worker, made its call
	tasks         *mTasks                  // what earlier writes did to tasks' tickets
	landed        time.Duration            // how long after it was sent the write landed
	holdsNothing  bool                     // the writer's request holds nothing: its admission is a charge
	charges       int                      // its charges that landed before
	refunds       int                      // its refunds that landed before
	tats, shift   map[string]int64         // what its charge left its buckets at; refunds since moved that
	finishAt      int64                    // when it began to finish (0: unknown)
	want          []string
}

func (tc judgeCase) run(t *testing.T) {
	t.Helper()
	after := tc.after.item()
	if after.ttl == mNow/1000+modelTTL {
		// Refreshed as a write does: a day after the latest expiry or
		// deadline in the item.
		for _, exp := range after.leases {
			after.ttl = max(after.ttl, exp/1000+modelTTL)
		}
		for _, tk := range after.tickets {
			after.ttl = max(after.ttl, tk.d/1000+modelTTL)
		}
	}
	w := &mWrite{k: tc.k, before: tc.before.item(), after: after, now: mNow, skew: 400, sent: time.UnixMilli(mNow), landed: time.UnixMilli(mNow).Add(tc.landed),
		judged: tc.judged, turnCame: map[string]time.Time{}, tasks: tc.tasks,
		w: mWriter{me: tc.me, owns: func(id string) bool { return slices.Contains(tc.mine, id) }, outcome: tc.outcome, pause: tc.pause, grant: tc.grant,
			deadline: mNow + 10000, task: tc.task, claims: tc.claims, called: tc.called, superseded: func(string) bool { return tc.superseded },
			holdsNothing: tc.holdsNothing, charges: tc.charges, refunds: tc.refunds, tats: tc.tats, shift: tc.shift, finishAt: tc.finishAt}}
	if tc.pause > 0 {
		w.w.pausedAt = mNow // the upstream asked as the release was sent
	}
	for id, d := range tc.came {
		if tk := w.before.tickets[id]; tk != nil {
			w.turnCame[mTurnOf(id, tk.n)] = w.sent.Add(-d)
		}
	}
	v := mJudgeWrite(w)
	kinds := map[string]bool{}
	for _, f := range v.findings {
		kinds[f.kind] = true
	}
	got := slices.Sorted(maps.Keys(kinds))
	want := slices.Sorted(slices.Values(tc.want))
	if !slices.Equal(got, slices.Compact(want)) {
		t.Errorf("%s: findings %v, want kinds %v", tc.name, v.findings, want)
	}
}

func TestModelJudgesTakes(t *testing.T) {
	far, exp := mNow+60000, mNow+3000
	k := mKey{Cap: 1, MaxQueued: 8, Hold: 2 * time.Second, Margin: time.Second, Breakers: map[string]mBreaker{"b": {2, time.Second}}, MaxPause: time.Minute}
	me := mCaller{p: "pa"}
	take := func(f *mFix, id string) *mFix { return f.clone().lease(id, "pa", "", exp) }
	empty := mItemOf()
	queued := mItemOf().ticket("x", 1, "pb", "", far, 0, 0).num("seq", 1)
	for _, tc := range []judgeCase{
		{name: "a newcomer takes a free place", k: k, before: empty, after: take(empty, "me"), me: me, mine: []string{"me"}, judged: -1},
		{name: "a take longer than hold + margin", k: k, before: empty, after: empty.clone().lease("me", "pa", "", mNow+3001), me: me, mine: []string{"me"}, judged: -1, want: []string{"expiry"}},
		{name: "a take for another caller", k: k, before: empty, after: take(empty, "me"), me: me, judged: -1, want: []string{"take"}},
		{name: "a take with no view on a queue", k: mKey{Cap: 2, MaxQueued: 8, Hold: 2 * time.Second, Margin: time.Second}, before: queued, after: take(queued, "me"), me: me, mine: []string{"me"}, judged: -1, want: []string{"order"}},
		{name: "a newcomer before a waiter", k: k, before: queued, after: take(queued, "me"), me: me, mine: []string{"me"}, judged: 1, want: []string{"order"}},
		{name: "a newcomer of a principal holding fewer", k: mKey{Cap: 2, MaxQueued: 8, Hold: 2 * time.Second, Margin: time.Second},
			before: queued.clone().lease("l", "pb", "", far), after: take(queued.clone().lease("l", "pb", "", far), "me"), me: me, mine: []string{"me"}, judged: 1},
		{name: "a waiter in turn", k: k, before: queued.clone().ticket("me", 0, "pa", "", far, 0, 0), after: take(queued, "me"), me: me, mine: []string{"me"}, judged: 1},
		{name: "a waiter before one who joined after its look", k: k, before: mItemOf().lease("l", "pa", "", mNow-1).ticket("me", 2, "pa", "", far, 0, 0).ticket("y", 3, "pb", "", far, 0, 0),
			after: mItemOf().lease("me", "pa", "", exp).ticket("y", 3, "pb", "", far, 0, 0), me: me, mine: []string{"me"}, judged: 2},
		{name: "a waiter that saw the later one", k: k, before: mItemOf().lease("l", "pa", "", mNow+5).ticket("me", 2, "pa", "", far, 0, 0).ticket("y", 3, "pb", "", far, 0, 0),
			after: mItemOf().lease("l", "pa", "", mNow+5).lease("me", "pa", "", exp).ticket("y", 3, "pb", "", far, 0, 0), me: me, mine: []string{"me"}, judged: 3,
			want: []string{"order", "cap"}},
		{name: "a waiter judged from a view before its join", k: k, before: queued.clone().ticket("me", 2, "pa", "", far, 0, 0), after: take(queued, "me"), me: me, mine: []string{"me"}, judged: 1,
			want: []string{"order"}},
		{name: "a waiter with no view", k: k, before: queued.clone().ticket("me", 0, "pa", "", far, 0, 0), after: take(queued, "me"), me: me, mine: []string{"me"}, judged: -1, want: []string{"order"}},
		{name: "past a tool that is full", k: mKey{Cap: 2, MaxQueued: 8, Hold: 2 * time.Second, Margin: time.Second},
			before: mItemOf().lease("l", "pb", "a", far).ticket("x", 1, "pb", "a", far, 1, 0).ticket("me", 2, "pa", "", far, 0, 0),
			after:  mItemOf().lease("l", "pb", "a", far).ticket("x", 1, "pb", "a", far, 1, 0).lease("me", "pa", "", exp), me: me, mine: []string{"me"}, judged: 2},
		{name: "over the principal's cap", k: mKey{PrincipalCap: 1, MaxQueued: 8, Hold: 2 * time.Second, Margin: time.Second},
			before: mItemOf().lease("l", "pa", "", far), after: take(mItemOf().lease("l", "pa", "", far), "me"), me: me, mine: []string{"me"}, judged: -1, want: []string{"order", "cap"}},
		{name: "during the hold", k: k, before: mItemOf().num("hold", mNow+1), after: take(mItemOf().num("hold", mNow+1), "me"), me: me, mine: []string{"me"}, judged: -1, want: []string{"order", "hold"}},
		{name: "a caller moving the hold", k: k, before: empty, after: empty.clone().num("hold", mNow+9), me: me, judged: -1, want: []string{"hold"}},
		{name: "a caller removing a standing hold", k: k, before: mItemOf().num("hold", mNow+1), after: empty, me: me, judged: -1, want: []string{"hold"}},
		{name: "a caller removing a passed hold", k: k, before: mItemOf().num("hold", mNow), after: empty, me: me, judged: -1},
		{name: "during the server's pause", k: k, before: mItemOf().entry("pause", "*", mEntry{u: mNow + 1}), after: take(mItemOf().entry("pause", "*", mEntry{u: mNow + 1}), "me"),
			me: me, mine: []string{"me"}, judged: -1, want: []string{"order", "pause"}},
		{name: "through a gate closed for its principal", k: k, before: mItemOf().entry("breaker:b", "pa", mEntry{u: mNow + 1, f: 2}),
			after: mItemOf().entry("breaker:b", "pa", mEntry{u: mNow + 1, f: 2}).lease("me", "pa", "b", exp), me: mCaller{p: "pa", tool: "b"}, mine: []string{"me"}, judged: -1,
			want: []string{"order", "gate"}},
		{name: "past a gate closed for another principal", k: k, before: mItemOf().entry("breaker:b", "pb", mEntry{u: mNow + 1, f: 2}),
			after: mItemOf().entry("breaker:b", "pb", mEntry{u: mNow + 1, f: 2}).lease("me", "pa", "b", exp), me: mCaller{p: "pa", tool: "b"}, mine: []string{"me"}, judged: -1},
		{name: "through a half-open gate as its probe", k: k, before: mItemOf().entry("breaker:b", "*", mEntry{u: mNow}),
			after: mItemOf().entry("breaker:b", "*", mEntry{u: mNow, p: "me", e: exp}).lease("me", "pa", "b", exp), me: mCaller{p: "pa", tool: "b"}, mine: []string{"me"}, judged: -1},
		{name: "through a half-open gate, not its probe", k: k, before: mItemOf().entry("breaker:b", "*", mEntry{u: mNow}),
			after: mItemOf().entry("breaker:b", "*", mEntry{u: mNow}).lease("me", "pa", "b", exp), me: mCaller{p: "pa", tool: "b"}, mine: []string{"me"}, judged: -1,
			want: []string{"probe"}},
		{name: "a second probe", k: mKey{Cap: 2, MaxQueued: 8, Hold: 2 * time.Second, Margin: time.Second, Breakers: map[string]mBreaker{"b": {2, time.Second}}},
			before: mItemOf().lease("o", "pb", "b", exp).entry("breaker:b", "*", mEntry{u: mNow, p: "o", e: exp}),
			after:  mItemOf().lease("o", "pb", "b", exp).entry("breaker:b", "*", mEntry{u: mNow, p: "me", e: exp}).lease("me", "pa", "b", exp), me: mCaller{p: "pa", tool: "b"}, mine: []string{"me"}, judged: -1,
			want: []string{"order", "probe"}},
		{name: "a bucket's token", k: mKey{Cap: 1, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second}, before: mItemOf().num("rate:server", mNow+30000),
			after: take(mItemOf().num("rate:server", mNow+60000), "me"), me: me, mine: []string{"me"}, judged: -1},
		{name: "a full bucket's token", k: mKey{Cap: 1, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second}, before: empty,
			after: take(mItemOf().num("rate:server", mNow+30000), "me"), me: me, mine: []string{"me"}, judged: -1},
		{name: "an empty bucket", k: mKey{Cap: 1, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second}, before: mItemOf().num("rate:server", mNow+60000),
			after: take(mItemOf().num("rate:server", mNow+90000), "me"), me: me, mine: []string{"me"}, judged: -1, want: []string{"order", "rate"}},
		{name: "a take that takes no token", k: mKey{Cap: 1, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second}, before: empty,
			after: take(empty, "me"), me: me, mine: []string{"me"}, judged: -1, want: []string{"rate"}},
		{name: "a bucket charged with no take", k: mKey{Cap: 1, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second}, before: empty,
			after: mItemOf().num("rate:server", mNow+30000), me: me, judged: -1, want: []string{"rate"}},
		{name: "past a waiter presumed gone", k: k, before: queued, after: take(mItemOf().num("seq", 1).num("freed", 1), "me"), me: me, mine: []string{"me"}, judged: 1,
			came: map[string]time.Duration{"x": ClaimWindow}},
		{name: "past a waiter presumed gone too soon", k: k, before: queued, after: take(mItemOf().num("seq", 1).num("freed", 1), "me"), me: me, mine: []string{"me"}, judged: 1,
			came: map[string]time.Duration{"x": ClaimWindow - time.Millisecond}, want: []string{"bypass"}},
		{name: "past a waiter whose turn never came", k: k, before: queued, after: take(mItemOf().num("seq", 1).num("freed", 1), "me"), me: me, mine: []string{"me"}, judged: 1,
			want: []string{"bypass"}},
		{name: "past a waiter, freed unchanged", k: k, before: queued, after: take(mItemOf().num("seq", 1), "me"), me: me, mine: []string{"me"}, judged: 1,
			came: map[string]time.Duration{"x": ClaimWindow}, want: []string{"freed"}},
	} {
		tc.run(t)
	}
}

func TestModelJudgesJoinsReleasesPurges(t *testing.T) {
	far := mNow + 60000
	k := mKey{Cap: 1, MaxQueued: 4, Hold: 2 * time.Second, Margin: time.Second}
	me := mCaller{p: "pa"}
	three := mItemOf().ticket("x", 1, "pb", "", far, 0, 0).ticket("y", 2, "pc", "", far, 0, 0).ticket("z", 3, "pa", "", far, 0, 0).num("seq", 3)
	for _, tc := range []judgeCase{
		{name: "a join", k: k, before: mItemOf().num("seq", 3), after: mItemOf().ticket("me", 4, "pa", "", mNow+11000, 0, 0).num("seq", 4), me: me, mine: []string{"me"}},
		{name: "a join numbered wrong", k: k, before: mItemOf().num("seq", 3), after: mItemOf().ticket("me", 3, "pa", "", mNow+11000, 0, 0).num("seq", 4), me: me, mine: []string{"me"}, want: []string{"seq"}},
		{name: "a ticket that outlives its caller", k: k, before: mEmpty(), after: mItemOf().ticket("me", 1, "pa", "", mNow+11002, 0, 0).num("seq", 1), me: me, mine: []string{"me"}, want: []string{"join"}},
		{name: "a ticket without its tool's cap", k: k, before: mEmpty(), after: mItemOf().ticket("me", 1, "pa", "a", far-50000, 0, 0).num("seq", 1), me: mCaller{p: "pa", tool: "a", toolCap: 2}, mine: []string{"me"}, want: []string{"join"}},
		{name: "a lone principal's join takes the last place", k: k, before: three.clone().unticket("z").ticket("w", 3, "pd", "", far, 0, 0),
			after: three.clone().unticket("z").ticket("w", 3, "pd", "", far, 0, 0).ticket("me", 4, "pa", "", far-50000, 0, 0).num("seq", 4), me: me, mine: []string{"me"}},
		{name: "a principal with callers waiting takes a reserved place", k: k, before: three,
			after: three.clone().ticket("me", 4, "pa", "", far-50000, 0, 0).num("seq", 4), me: me, mine: []string{"me"}, want: []string{"reserve"}},
		{name: "a principal's lapsed ticket is no caller waiting", k: k, before: three.clone().unticket("z").ticket("z", 3, "pa", "", mNow-1, 0, 0),
			after: three.clone().unticket("z").ticket("z", 3, "pa", "", mNow-1, 0, 0).ticket("me", 4, "pa", "", far-50000, 0, 0).num("seq", 4), me: me, mine: []string{"me"}},
		{name: "a join purging a lapsed ticket has room", k: k, before: three.clone().unticket("z").ticket("w", 3, "pd", "", mNow-1, 0, 0).ticket("v", 4, "pe", "", far, 0, 0).num("seq", 4),
			after: three.clone().unticket("z").ticket("v", 4, "pe", "", far, 0, 0).ticket("me", 5, "pa", "", far-50000, 0, 0).num("seq", 5).num("freed", 1), me: me, mine: []string{"me"}},
		{name: "a join on a full queue", k: k, before: three.clone().ticket("v", 4, "pe", "", far, 0, 0).num("seq", 4),
			after: three.clone().ticket("v", 4, "pe", "", far, 0, 0).ticket("me", 5, "pd", "", far-50000, 0, 0).num("seq", 5), me: mCaller{p: "pd"}, mine: []string{"me"}, want: []string{"queue"}},
		{name: "a leave", k: k, before: mItemOf().ticket("me", 1, "pa", "", far, 0, 0), after: mItemOf().num("freed", 1), me: me, mine: []string{"me"}},
		{name: "a leave that frees nothing", k: k, before: mItemOf().ticket("me", 1, "pa", "", far, 0, 0), after: mItemOf(), me: me, mine: []string{"me"}, want: []string{"freed"}},
		{name: "freed moved with nothing gone", k: k, before: mEmpty(), after: mItemOf().num("freed", 1), me: me, mine: []string{"me"}, want: []string{"freed"}},
		{name: "a release", k: k, before: mItemOf().lease("me", "pa", "", far), after: mItemOf().num("freed", 1), me: me, mine: []string{"me"}, outcome: Success},
		{name: "a renewal", k: k, before: mItemOf().lease("me", "pa", "", mNow+10), after: mItemOf().lease("me", "pa", "", mNow+3000), me: me, mine: []string{"me"}},
		{name: "a renewal that shortens", k: k, before: mItemOf().lease("me", "pa", "", mNow+2000), after: mItemOf().lease("me", "pa", "", mNow+10), me: me, mine: []string{"me"}, want: []string{"renew"}},
		{name: "a renewal of another's lease", k: k, before: mItemOf().lease("o", "pb", "", mNow+10), after: mItemOf().lease("o", "pb", "", mNow+3000), me: me, want: []string{"renew"}},
		{name: "a purge of a lapsed lease", k: k, before: mItemOf().lease("o", "pb", "", mNow-1), after: mItemOf(), me: me},
		{name: "a purge of a lease at its expiry's millisecond", k: k, before: mItemOf().lease("o", "pb", "", mNow), after: mItemOf(), me: me, want: []string{"purge"}},
		{name: "a purge of a live lease", k: k, before: mItemOf().lease("o", "pb", "", mNow+1), after: mItemOf().num("freed", 1), me: me, want: []string{"purge"}},
		{name: "a purge of a lapsed ticket", k: k, before: mItemOf().ticket("x", 1, "pb", "", mNow-1, 0, 0), after: mItemOf().num("freed", 1), me: me},
		{name: "a live ticket removed by a write that takes nothing", k: k, before: mItemOf().ticket("x", 1, "pb", "", far, 0, 0), after: mItemOf().num("freed", 1), me: me, want: []string{"bypass"}},
		{name: "a write that leaves ttl short", k: k, before: mEmpty(), after: mItemOf().num("ttl", mNow/1000+modelTTL-3), me: me, want: []string{"ttl"}},
		{name: "an unused call's refund", k: mKey{Cap: 1, ServerRPM: 2}, before: mItemOf().lease("me", "pa", "", far).num("rate:server", mNow+50000),
			after: mItemOf().num("rate:server", mNow+20000).num("freed", 1).num("refunds", 1), me: me, mine: []string{"me"}, outcome: Unused},
		{name: "a leave giving back the tokens of a take it never learnt of", k: mKey{Cap: 1, ServerRPM: 2}, before: mItemOf().lease("me", "pa", "", far).ticket("me", 1, "pa", "", far, 0, 0).num("rate:server", mNow+50000),
			after: mItemOf().num("rate:server", mNow+20000).num("freed", 1).num("refunds", 1), me: me, mine: []string{"me"}, outcome: mNoOutcome},
		{name: "a refund of two tokens", k: mKey{Cap: 1, ServerRPM: 2}, before: mItemOf().lease("me", "pa", "", far).num("rate:server", mNow+50000),
			after: mItemOf().num("rate:server", mNow+19999).num("freed", 1).num("refunds", 1), me: me, mine: []string{"me"}, outcome: Unused, want: []string{"rate"}},
		{name: "a refund for a call that was made", k: mKey{Cap: 1, ServerRPM: 2}, before: mItemOf().lease("me", "pa", "", far).num("rate:server", mNow+50000),
			after: mItemOf().num("rate:server", mNow+20000).num("freed", 1).num("refunds", 1), me: me, mine: []string{"me"}, outcome: Success, want: []string{"rate"}},
		{name: "a full bucket purged", k: mKey{Cap: 1, PrincipalRPM: 2}, before: mItemOf().num("rate:principal:pb", mNow), after: mItemOf(), me: me},
		{name: "a bucket purged while not full", k: mKey{Cap: 1, PrincipalRPM: 2}, before: mItemOf().num("rate:principal:pb", mNow+1), after: mItemOf(), me: me, want: []string{"rate"}},
	} {
		tc.run(t)
	}
}

func mEmpty() *mFix { return mItemOf() }

func TestModelJudgesGates(t *testing.T) {
	far := mNow + 60000
	k := mKey{Cap: 3, MaxQueued: 4, Hold: 2 * time.Second, Margin: time.Second, Breakers: map[string]mBreaker{"b": {2, time.Second}}, MaxPause: 5 * time.Second}
	me := mCaller{p: "pa", tool: "b"}
	held := func() *mFix { return mItemOf().lease("me", "pa", "b", far) }
	released := func() *mFix { return mItemOf().num("freed", 1) }
	for _, tc := range []judgeCase{
		{name: "a failure counted", k: k, before: held(), after: released().entry("breaker:b", "pa", mEntry{f: 1, t: mNow}), me: me, mine: []string{"me"}, outcome: Failure},
		{name: "a failure not counted", k: k, before: held(), after: released(), me: me, mine: []string{"me"}, outcome: Failure, want: []string{"gate"}},
		{name: "a failure counted twice", k: k, before: held(), after: released().entry("breaker:b", "pa", mEntry{f: 2, t: mNow}), me: me, mine: []string{"me"}, outcome: Failure, want: []string{"gate"}},
		{name: "an abandoned call counted", k: k, before: held(), after: released().entry("breaker:b", "pa", mEntry{f: 1, t: mNow}), me: me, mine: []string{"me"}, outcome: Abandoned, want: []string{"gate"}},
		{name: "another principal's failure counted", k: k, before: held(), after: released().entry("breaker:b", "pb", mEntry{f: 1, t: mNow}), me: me, mine: []string{"me"}, outcome: Failure, want: []string{"gate"}},
		{name: "a success resets", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 1, t: mNow - 5}), after: released(), me: me, mine: []string{"me"}, outcome: Success},
		{name: "a success that does not reset", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 1, t: mNow - 5}), after: released().entry("breaker:b", "pa", mEntry{f: 1, t: mNow - 5}), me: me, mine: []string{"me"}, outcome: Success, want: []string{"gate"}},
		{name: "closing at the threshold for one principal", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 1, t: mNow - 5}),
			after: released().entry("breaker:b", "pa", mEntry{f: 2, t: mNow, u: mNow + 1000}), me: me, mine: []string{"me"}, outcome: Failure},
		{name: "staying open at the threshold", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 1, t: mNow - 5}),
			after: released().entry("breaker:b", "pa", mEntry{f: 2, t: mNow}), me: me, mine: []string{"me"}, outcome: Failure, want: []string{"gate"}},
		{name: "closing for longer than Recovery", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 1, t: mNow - 5}),
			after: released().entry("breaker:b", "pa", mEntry{f: 2, t: mNow, u: mNow + 1001}), me: me, mine: []string{"me"}, outcome: Failure, want: []string{"gate"}},
		{name: "closing before the threshold", k: k, before: held(), after: released().entry("breaker:b", "pa", mEntry{f: 1, t: mNow, u: mNow + 1000}), me: me, mine: []string{"me"}, outcome: Failure, want: []string{"gate"}},
		{name: "one principal closing it for everyone", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 1, t: mNow - 5}),
			after: released().entry("breaker:b", "pa", mEntry{f: 2, t: mNow, u: mNow + 1000}).entry("breaker:b", "*", mEntry{u: mNow + 1000}), me: me, mine: []string{"me"}, outcome: Failure,
			want: []string{"gate"}},
		{name: "two principals closing it for everyone", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 1, t: mNow - 5}).entry("breaker:b", "pb", mEntry{f: 2, t: mNow - 5, u: mNow + 500}),
			after: released().entry("breaker:b", "pa", mEntry{f: 2, t: mNow, u: mNow + 1000}).entry("breaker:b", "pb", mEntry{f: 2, t: mNow - 5, u: mNow + 500}).entry("breaker:b", "*", mEntry{u: mNow + 1000}),
			me:    me, mine: []string{"me"}, outcome: Failure},
		{name: "two principals' entries closed, everyone's left open", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 1, t: mNow - 5}).entry("breaker:b", "pb", mEntry{f: 2, t: mNow - 5, u: mNow + 500}),
			after: released().entry("breaker:b", "pa", mEntry{f: 2, t: mNow, u: mNow + 1000}).entry("breaker:b", "pb", mEntry{f: 2, t: mNow - 5, u: mNow + 500}),
			me:    me, mine: []string{"me"}, outcome: Failure, want: []string{"gate"}},
		{name: "a probe's success opens what it probed", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 2, t: mNow - 5, u: mNow - 1, p: "me", e: far}),
			after: released(), me: me, mine: []string{"me"}, outcome: Success},
		{name: "a probe's success that leaves it half-open", k: k, before: held().entry("breaker:b", "*", mEntry{u: mNow - 1, p: "me", e: far}),
			after: released().entry("breaker:b", "*", mEntry{u: mNow - 1}), me: me, mine: []string{"me"}, outcome: Success, want: []string{"gate"}},
		{name: "a probe's failure closes its principal's entry again", k: k, before: held().entry("breaker:b", "pa", mEntry{f: 2, t: mNow - 5, u: mNow - 1, p: "me", e: far}),
			after: released().entry("breaker:b", "pa", mEntry{f: 3, t: mNow, u: mNow + 1000}), me: me, mine: []string{"me"}, outcome: Failure},
		{name: "an abandoned probe gives up being the probe", k: k, before: held().entry("breaker:b", "*", mEntry{u: mNow - 1, p: "me", e: far}),
			after: released().entry("breaker:b", "*", mEntry{u: mNow - 1}), me: me, mine: []string{"me"}, outcome: Abandoned},
		{name: "another's live probe cleared", k: k, before: held().lease("o", "pb", "b", far).entry("breaker:b", "*", mEntry{u: mNow - 1, p: "o", e: far}),
			after: released().lease("o", "pb", "b", far).entry("breaker:b", "*", mEntry{u: mNow - 1}), me: me, mine: []string{"me"}, outcome: Success, want: []string{"probe"}},
		{name: "a gate opened by another's success", k: k, before: held().entry("breaker:b", "pb", mEntry{f: 2, u: mNow + 500, t: mNow - 5}),
			after: released().entry("breaker:b", "pb", mEntry{f: 2, t: mNow - 5}), me: me, mine: []string{"me"}, outcome: Success, want: []string{"gate"}},
		{name: "a pause for one principal", k: k, before: held(), after: released().entry("pause", "pa", mEntry{u: mNow + 1500}), me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond},
		{name: "a pause not written", k: k, before: held(), after: released(), me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond, want: []string{"pause"}},
		{name: "a pause not written by a release landing before it ends on every clock", k: k, before: held(), after: released(), me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond,
			landed: 1800 * time.Millisecond, want: []string{"pause"}},
		{name: "no pause left by a release landing once it ended on every clock", k: k, before: held(), after: released(), me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond,
			landed: 1901 * time.Millisecond},
		{name: "a pause past what was asked", k: k, before: held(), after: released().entry("pause", "pa", mEntry{u: mNow + 1501}), me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond, want: []string{"pause"}},
		{name: "a pause past MaxPause", k: k, before: held(), after: released().entry("pause", "pa", mEntry{u: mNow + 6000}), me: me, mine: []string{"me"}, outcome: Overloaded, pause: 9 * time.Second, want: []string{"pause"}},
		{name: "a pause shortened", k: k, before: held().entry("pause", "pa", mEntry{u: mNow + 4000}), after: released().entry("pause", "pa", mEntry{u: mNow + 1500}),
			me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond, want: []string{"pause"}},
		{name: "a shorter pause leaves the longer", k: k, before: held().entry("pause", "pa", mEntry{u: mNow + 4000}), after: released().entry("pause", "pa", mEntry{u: mNow + 4000}),
			me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond},
		{name: "a tool's pause", k: mKey{Cap: 3, PauseTool: true, MaxPause: 5 * time.Second}, before: held(), after: released().entry("pause:b", "pa", mEntry{u: mNow + 1500}),
			me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond},
		{name: "the server paused for a tool's pause", k: mKey{Cap: 3, PauseTool: true, MaxPause: 5 * time.Second}, before: held(), after: released().entry("pause", "pa", mEntry{u: mNow + 1500}),
			me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond, want: []string{"pause"}},
		{name: "a pause for everyone on one principal's say", k: k, before: held(), after: released().entry("pause", "pa", mEntry{u: mNow + 1500}).entry("pause", "*", mEntry{u: mNow + 1500}),
			me: me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond, want: []string{"gate"}},
		{name: "a pause for everyone on two principals' say", k: k, before: held().entry("pause", "pb", mEntry{u: mNow + 300}),
			after: released().entry("pause", "pb", mEntry{u: mNow + 300}).entry("pause", "pa", mEntry{u: mNow + 1500}).entry("pause", "*", mEntry{u: mNow + 1500}),
			me:    me, mine: []string{"me"}, outcome: Overloaded, pause: 1500 * time.Millisecond},
		{name: "an idle entry purged", k: k, before: mItemOf().entry("breaker:b", "pb", mEntry{f: 1, t: mNow - modelIdleGate.Milliseconds()}), after: mItemOf(), me: me},
		{name: "an entry purged with a recent failure", k: k, before: mItemOf().entry("breaker:b", "pb", mEntry{f: 1, t: mNow - 1}), after: mItemOf(), me: me, want: []string{"gate"}},
		{name: "a half-open entry purged", k: k, before: mItemOf().entry("breaker:b", "pb", mEntry{u: mNow - modelIdleGate.Milliseconds() + 1}), after: mItemOf(), me: me, want: []string{"gate"}},
		{name: "a principal's entry half-open and idle purged", k: k, before: mItemOf().entry("breaker:b", "pb", mEntry{u: mNow - modelIdleGate.Milliseconds()}), after: mItemOf(), me: me},
		{name: "everyone's entry half-open and idle purged", k: k, before: mItemOf().entry("breaker:b", "*", mEntry{u: mNow - modelIdleGate.Milliseconds()}), after: mItemOf(), me: me, want: []string{"gate"}},
		{name: "a pause that passed purged", k: k, before: mItemOf().entry("pause", "pb", mEntry{u: mNow}), after: mItemOf(), me: me},
		{name: "a pause that stands purged", k: k, before: mItemOf().entry("pause", "pb", mEntry{u: mNow + 1}), after: mItemOf(), me: me, want: []string{"gate"}},
	} {
		tc.run(t)
	}
}

func TestModelJudgesTheLimit(t *testing.T) {
	far := mNow + 60000
	k := mKey{Cap: 8, AdaptiveMin: 1, MaxQueued: 4, Hold: 2 * time.Second, Margin: time.Second}
	me := mCaller{p: "pa"}
	at := func(limit, round, ok int64) *mFix {
		return mItemOf().num("limit", limit).num("limit_round", round).num("limit_ok", ok)
	}
	for _, tc := range []judgeCase{
		{name: "down on a lone principal's evidence", k: k, before: at(4, 2, 0).lease("me", "pa", "", far), after: at(2, 3, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2},
		{name: "down on one principal's evidence while another holds", k: k, before: at(4, 2, 0).lease("me", "pa", "", far).lease("o", "pb", "", far),
			after: at(2, 3, 0).lease("o", "pb", "", far).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2, want: []string{"limit"}},
		{name: "down on one principal's evidence while another waits", k: k, before: at(4, 2, 0).lease("me", "pa", "", far).ticket("x", 1, "pb", "", far, 0, 0),
			after: at(2, 3, 0).ticket("x", 1, "pb", "", far, 0, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2, want: []string{"limit"}},
		{name: "down on two principals' evidence", k: k, before: at(4, 2, 0).set("limit_sig", mStr("pb")).lease("me", "pa", "", far).lease("o", "pb", "", far),
			after: at(2, 3, 0).lease("o", "pb", "", far).num("freed", 1), me: me, mine: []string{"me"}, outcome: Overloaded, grant: 2},
		{name: "down on the same principal's evidence twice while another holds", k: k, before: at(4, 2, 0).set("limit_sig", mStr("pa")).lease("me", "pa", "", far).lease("o", "pb", "", far),
			after: at(2, 3, 0).lease("o", "pb", "", far).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2, want: []string{"limit"}},
		{name: "one principal's evidence recorded", k: k, before: at(4, 2, 0).lease("me", "pa", "", far).lease("o", "pb", "", far),
			after: at(4, 2, 0).set("limit_sig", mStr("pa")).lease("o", "pb", "", far).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2},
		{name: "evidence recorded for another principal", k: k, before: at(4, 2, 0).lease("me", "pa", "", far),
			after: at(4, 2, 0).set("limit_sig", mStr("pb")).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2, want: []string{"limit"}},
		{name: "down by more than half", k: k, before: at(5, 2, 0).lease("me", "pa", "", far), after: at(1, 3, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2, want: []string{"limit"}},
		{name: "down from 2 by one", k: k, before: at(2, 2, 0).lease("me", "pa", "", far), after: at(1, 3, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2},
		{name: "down below Min", k: mKey{Cap: 8, AdaptiveMin: 2}, before: at(2, 2, 0).lease("me", "pa", "", far), after: at(1, 3, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2, want: []string{"limit"}},
		{name: "a move without a round", k: k, before: at(4, 2, 0).lease("me", "pa", "", far), after: at(2, 2, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 2, want: []string{"limit"}},
		{name: "a move by a lease of an earlier round", k: k, before: at(4, 2, 0).lease("me", "pa", "", far), after: at(2, 3, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Failure, grant: 1, want: []string{"limit"}},
		{name: "a move by a write that releases nothing", k: k, before: at(4, 2, 0), after: at(2, 3, 0), me: me, outcome: Failure, grant: 2, want: []string{"limit"}},
		{name: "down on an abandoned call", k: k, before: at(4, 2, 0).lease("me", "pa", "", far), after: at(2, 3, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Abandoned, grant: 2, want: []string{"limit"}},
		{name: "up after 2 × limit evidences", k: k, before: at(2, 1, 3).lease("me", "pa", "", far), after: at(3, 2, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Success, grant: 1},
		{name: "up too soon", k: k, before: at(2, 1, 2).lease("me", "pa", "", far), after: at(3, 2, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Success, grant: 1, want: []string{"limit"}},
		{name: "back up to where it was cut needs 8 ×", k: k, before: at(2, 1, 3).num("limit_cut", 3).lease("me", "pa", "", far), after: at(3, 2, 0).num("limit_cut", 3).num("freed", 1), me: me, mine: []string{"me"}, outcome: Success, grant: 1, want: []string{"limit"}},
		{name: "up by two", k: k, before: at(2, 1, 30).lease("me", "pa", "", far), after: at(4, 2, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Success, grant: 1, want: []string{"limit"}},
		{name: "up past the ceiling", k: mKey{Cap: 2, AdaptiveMin: 1}, before: at(2, 1, 30).lease("me", "pa", "", far), after: at(3, 2, 0).num("freed", 1), me: me, mine: []string{"me"}, outcome: Success, grant: 1, want: []string{"limit"}},
		{name: "an up evidence", k: k, before: at(2, 1, 1).lease("me", "pa", "", far), after: at(2, 1, 2).num("freed", 1), me: me, mine: []string{"me"}, outcome: Success, grant: 1},
		{name: "an up evidence of an earlier round", k: k, before: at(2, 1, 1).lease("me", "pa", "", far), after: at(2, 1, 2).num("freed", 1), me: me, mine: []string{"me"}, outcome: Success, grant: 0, want: []string{"limit"}},
		{name: "a take over the limit", k: k, before: at(1, 1, 0).lease("o", "pb", "", far), after: at(1, 1, 0).lease("o", "pb", "", far).lease("me", "pa", "", mNow+3000), me: me, mine: []string{"me"}, judged: -1,
			want: []string{"cap", "order"}},
	} {
		if tc.judged == 0 {
			tc.judged = -1
		}
		tc.run(t)
	}
}

func TestModelChecksTheState(t *testing.T) {
	far := mNow + 60000
	k := mKey{Cap: 2, PrincipalCap: 1, MaxQueued: 2}
	for _, tc := range []struct {
		name string
		k    mKey
		fix  *mFix
		want []string
	}{
		{"a sound item", k, mItemOf().lease("l", "pa", "a", far).ticket("x", 1, "pb", "", far, 0, 0), nil},
		{"half a lease", k, mItemOf().lease("l", "pa", "", far).del("leases"), []string{"whole"}},
		{"a lease in no principal's set", k, mItemOf().lease("l", "pa", "", far).del("principal:pa"), []string{"whole"}},
		{"a lease in two principals' sets", k, func() *mFix { f := mItemOf().lease("l", "pa", "", far); f.addTo("principal:pb", "l"); return f }(), []string{"whole"}},
		{"half a ticket", k, mItemOf().ticket("x", 1, "pb", "", far, 0, 0).del("queue"), []string{"whole"}},
		{"a ticket outside its principal's waiting set", k, mItemOf().ticket("x", 1, "pb", "", far, 0, 0).del("waiting:pb"), []string{"whole"}},
		{"over the cap", k, mItemOf().lease("l1", "pa", "", far).lease("l2", "pb", "", far).lease("l3", "pc", "", far), []string{"cap"}},
		{"lapsed leases under the cap", k, mItemOf().lease("l1", "pa", "", far).lease("l2", "pb", "", far).lease("l3", "pc", "", mNow+399), nil},
		{"over a principal's cap", k, mItemOf().lease("l1", "pa", "", far).lease("l2", "pa", "", far), []string{"cap"}},
		{"over a tool's cap", k, mItemOf().lease("l1", "pa", "a", far).lease("l2", "pb", "a", far), []string{"cap"}},
		{"over MaxQueued", k, mItemOf().ticket("x", 1, "pb", "", far, 0, 0).ticket("y", 2, "pc", "", far, 0, 0).ticket("z", 3, "pd", "", mNow, 0, 0), []string{"queue"}},
		{"a limit past its ceiling", mKey{Cap: 2, AdaptiveMin: 1, MaxQueued: 2}, mItemOf().num("limit", 3), []string{"limit"}},
		{"an unknown attribute", k, mItemOf().num("breaker_failed:b", 1), []string{"schema"}},
	} {
		kinds := map[string]bool{}
		for _, f := range mCheckState(tc.k, map[string]int{"a": 1}, tc.fix.item(), mNow, 400) {
			kinds[f.kind] = true
		}
		if got := slices.Sorted(maps.Keys(kinds)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: findings %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Invariant 16 as the model reads it: a task's ticket leaves only by its
// claim, its withdrawal or its deadline; a place goes to it once, from its
// live ticket, never after it was withdrawn; callers pass it only once its
// start has gone unclaimed StartTimeout; a start is made again only after
// StartTimeout, and given back only by its task's own worker; tasks have
// MaxQueued places of their own.
func TestModelJudgesTasks(t *testing.T) {
	far, exp, st := mNow+60000, mNow+3000, StartTimeout.Milliseconds()
	k := mKey{Cap: 1, MaxQueued: 2, Hold: 2 * time.Second, Margin: time.Second}
	k2 := k
	k2.Cap = 2
	task := mItemOf().taskTicket("i0.T1", 1, "pa", far, mNow-1000).num("seq", 1)
	// A claim takes the start it claimed away; keptMark leaves it.
	keptMark := func(f *mFix) *mFix { return f.clone().lease("i0.T1", "pa", "", exp) }
	claim := func(f *mFix) *mFix {
		g := keptMark(f)
		delete(g.sub("tickets")["i0.T1"].(*types.AttributeValueMemberM).Value, "s")
		return g
	}
	taken := func(f *mFix) *mFix { return f.clone().unticket("i0.T1").lease("i0.T1", "pa", "", exp) }
	withdrawn, claimed := newMTasks(), newMTasks()
	withdrawn.gone("i0.T1")
	claimed.taken["i0.T1"] = 1
	worker := mCaller{p: "pa"}
	mine := []string{"i0.T1"}
	behind := func(s int64) *mFix {
		return mItemOf().taskTicket("i0.T1", 1, "pa", far, s).ticket("c2", 2, "pb", "", far, 0, 0).num("seq", 2)
	}
	passed := func(f *mFix) *mFix { return f.clone().unticket("c2").lease("c2", "pb", "", exp) }
	marked := func(f *mFix, s int64) *mFix {
		g := f.clone()
		g.sub("tickets")["i0.T1"].(*types.AttributeValueMemberM).Value["s"] = mNum(s)
		return g
	}
	// firstAt sets when the task's starts first went out unclaimed.
	firstAt := func(f *mFix, first int64) *mFix {
		g := f.clone()
		g.sub("tickets")["i0.T1"].(*types.AttributeValueMemberM).Value["f"] = mNum(first)
		return g
	}
	named := func(f *mFix, w string) *mFix {
		g := f.clone()
		g.sub("tickets")["i0.T1"].(*types.AttributeValueMemberM).Value["w"] = mStr(w)
		return g
	}
	unmarked := task.clone()
	delete(unmarked.sub("tickets")["i0.T1"].(*types.AttributeValueMemberM).Value, "s")
	full := mItemOf().ticket("c1", 1, "pb", "", far, 0, 0).ticket("c2", 2, "pc", "", far, 0, 0).num("seq", 2)
	join := func(f *mFix, n int64) *mFix {
		return f.clone().taskTicket("i0.T9", n, "pa", mNow+10000, 0).num("seq", n)
	}
	for _, tc := range []judgeCase{
		{name: "a worker claims its task's place at its turn", k: k, before: task, after: claim(task), me: worker, mine: mine, judged: 1, task: true, tasks: newMTasks()},
		{name: "a claim of a task withdrawn before", k: k, before: task, after: claim(task), me: worker, mine: mine, judged: 1, task: true, tasks: withdrawn, want: []string{"task-withdrawn"}},
		{name: "a task claimed again once its lapsed lease went", k: k, before: task, after: claim(task), me: worker, mine: mine, judged: 1, task: true, tasks: claimed},
		{name: "a claim that leaves its start mark", k: k, before: task, after: keptMark(task), me: worker, mine: mine, judged: 1, task: true, tasks: newMTasks(), want: []string{"task-claim"}},
		{name: "a claim that takes its ticket out", k: k, before: task, after: taken(task), me: worker, mine: mine, judged: 1, task: true, tasks: newMTasks(), want: []string{"task-claim"}},
		{name: "a claim past the ticket's deadline", k: k, before: mItemOf().taskTicket("i0.T1", 1, "pa", mNow-1, 0).num("seq", 1),
			after: mItemOf().taskTicket("i0.T1", 1, "pa", mNow-1, 0).num("seq", 1).lease("i0.T1", "pa", "", exp), me: worker, mine: mine, judged: 1, task: true, want: []string{"task-deadline"}},
		{name: "a claim with no ticket", k: k, before: mItemOf(), after: mItemOf().lease("i0.T1", "pa", "", exp), me: worker, mine: mine, judged: -1, task: true, want: []string{"task-claim"}},
		{name: "a task's release takes its claimed ticket out", k: k, before: claim(task), after: task.clone().unticket("i0.T1").num("freed", 1), me: worker, mine: mine, judged: -1, task: true, outcome: Success},
		{name: "a task's release that leaves its ticket", k: k, before: claim(task), after: unmarked.clone().num("freed", 1), me: worker, mine: mine, judged: -1, task: true, outcome: Success, want: []string{"task-release"}},
		{name: "a task's place given back before its call, its ticket waiting again", k: k, before: named(claim(task), "w1"), after: unmarked.clone().num("freed", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, outcome: Unused},
		{name: "a task's place given back before its claim was made", k: k, before: named(claim(task), "w1"), after: unmarked.clone().num("freed", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, outcome: mNoOutcome},
		{name: "a task's place given back after its call, its ticket kept", k: k, before: named(claim(task), "w1"), after: unmarked.clone().num("freed", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, outcome: Unused, called: true, want: []string{"task-release"}},
		{name: "a task's place given back, its ticket still naming the claim", k: k, before: named(claim(task), "w1"), after: named(unmarked, "w1").num("freed", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, outcome: Unused, want: []string{"task-release"}},
		{name: "a task's place given back, its ticket numbered anew", k: k, before: named(claim(task), "w1"), after: mItemOf().taskTicket("i0.T1", 2, "pa", far, 0).num("seq", 2).num("freed", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, outcome: Unused, want: []string{"task-release", "join"}},
		{name: "a task's place given back, its ticket kept, freed as it was", k: k, before: named(claim(task), "w1"), after: unmarked, me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, outcome: Unused, want: []string{"freed"}},
		{name: "a task's release, its ticket naming its claim", k: k, before: named(claim(task), "w1"), after: task.clone().unticket("i0.T1").num("freed", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, outcome: Success},
		{name: "a task's release, its ticket naming a later claim", k: k, before: named(claim(task), "w2"), after: task.clone().unticket("i0.T1").num("freed", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, outcome: Success, want: []string{"task-release"}},
		{name: "a task's renewal, its ticket naming its claim", k: k, before: named(task.clone().lease("i0.T1", "pa", "", exp-1000), "w1"), after: named(claim(task), "w1"), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}},
		{name: "a task's renewal, its ticket naming a later claim", k: k, before: named(task.clone().lease("i0.T1", "pa", "", exp-1000), "w2"), after: named(claim(task), "w2"), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, want: []string{"renew"}},
		{name: "a task's release, its ticket purged under a later claim", k: k, before: mItemOf().lease("i0.T1", "pa", "", exp).num("seq", 1), after: mItemOf().num("seq", 1).num("freed", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, superseded: true, outcome: Success, want: []string{"task-release"}},
		{name: "a task's release, its ticket purged under its own claim", k: k, before: mItemOf().lease("i0.T1", "pa", "", exp).num("seq", 1), after: mItemOf().num("seq", 1).num("freed", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, outcome: Success},
		{name: "a task's renewal, its ticket purged under a later claim", k: k, before: mItemOf().lease("i0.T1", "pa", "", exp-1000).num("seq", 1), after: mItemOf().lease("i0.T1", "pa", "", exp).num("seq", 1), me: worker, mine: mine, judged: -1, task: true, claims: []string{"w1"}, superseded: true, want: []string{"renew"}},
		{name: "a lapsed claim's lease purged, its ticket left waiting", k: k, before: task.clone().lease("i0.T1", "pa", "", mNow-1), after: task.clone().num("freed", 1), me: worker, mine: mine, judged: -1, task: true},
		{name: "a caller takes a place beside a claimed task", k: k2, before: claim(behind(0)), after: passed(claim(behind(0))), me: mCaller{p: "pb"}, mine: []string{"c2"}, judged: 2},
		{name: "a caller waits behind a task whose claim lapsed", k: k, before: behind(0).lease("i0.T1", "pa", "", mNow-1), after: passed(behind(0).lease("i0.T1", "pa", "", mNow-1)), me: mCaller{p: "pb"}, mine: []string{"c2"}, judged: 2, want: []string{"order"}},
		{name: "a start marked on a claimed task", k: k, before: claim(unmarked), after: marked(claim(unmarked), mNow), me: mCaller{p: "pb"}, judged: -1, want: []string{"task-mark"}},
		{name: "a start marked on a task whose claim lapsed", k: k, before: unmarked.clone().lease("i0.T1", "pa", "", mNow-1), after: marked(unmarked.clone().lease("i0.T1", "pa", "", mNow-1), mNow), me: mCaller{p: "pb"}, judged: -1},
		{name: "a task joins beside MaxQueued tickets, one claimed", k: k, before: full.clone().taskTicket("i0.T7", 3, "pb", far, 0).lease("i0.T7", "pb", "", exp).taskTicket("i0.T8", 4, "pc", far, 0).num("seq", 4),
			after: join(full.clone().taskTicket("i0.T7", 3, "pb", far, 0).lease("i0.T7", "pb", "", exp).taskTicket("i0.T8", 4, "pc", far, 0), 5), me: worker, mine: []string{"i0.T9"}, judged: -1, task: true},
		{name: "a caller's take removes a live task's ticket", k: k2, before: behind(0), after: passed(behind(0)).unticket("i0.T1"), me: mCaller{p: "pb"}, mine: []string{"c2"}, judged: 2, want: []string{"task-gone", "freed"}},
		{name: "a caller passes a task whose start went unclaimed StartTimeout", k: k, before: behind(mNow - st), after: passed(behind(mNow - st)), me: mCaller{p: "pb"}, mine: []string{"c2"}, judged: 2},
		{name: "a caller passes a task whose start is younger", k: k, before: behind(mNow - st + 1), after: passed(behind(mNow - st + 1)), me: mCaller{p: "pb"}, mine: []string{"c2"}, judged: 2, want: []string{"order"}},
		{name: "a caller passes a task never started", k: k, before: behind(0), after: passed(behind(0)), me: mCaller{p: "pb"}, mine: []string{"c2"}, judged: 2, want: []string{"order"}},
		{name: "a start marked", k: k, before: unmarked, after: marked(unmarked, mNow), me: mCaller{p: "pb"}, judged: -1},
		{name: "a start made again after StartTimeout", k: k, before: task, after: firstAt(marked(task, mNow-1000+st), mNow-1000), me: mCaller{p: "pb"}, judged: -1},
		{name: "a start made again that reads as the first", k: k, before: task, after: marked(task, mNow-1000+st), me: mCaller{p: "pb"}, judged: -1, want: []string{"task-mark"}},
		{name: "a start made again keeping the first", k: k, before: firstAt(task, mNow-20000), after: firstAt(marked(task, mNow-1000+st), mNow-20000), me: mCaller{p: "pb"}, judged: -1},
		{name: "a start made again moving the first", k: k, before: firstAt(task, mNow-20000), after: firstAt(marked(task, mNow-1000+st), mNow-1000), me: mCaller{p: "pb"}, judged: -1, want: []string{"task-mark"}},
		{name: "a first start reading as unclaimed since before it", k: k, before: unmarked, after: firstAt(marked(unmarked, mNow), mNow-st), me: mCaller{p: "pb"}, judged: -1, want: []string{"task-mark"}},
		{name: "the first start moved with no start made", k: k, before: firstAt(task, mNow-1000), after: firstAt(task, mNow-st-1000), me: mCaller{p: "pb"}, judged: -1, want: []string{"task-mark"}},
		{name: "a caller passes a task started again, its first start StartTimeout old", k: k, before: firstAt(behind(mNow-1000), mNow-st), after: passed(firstAt(behind(mNow-1000), mNow-st)), me: mCaller{p: "pb"}, mine: []string{"c2"}, judged: 2},
		{name: "a caller passes a task whose first start is younger", k: k, before: firstAt(behind(mNow-1000), mNow-st+1), after: passed(firstAt(behind(mNow-1000), mNow-st+1)), me: mCaller{p: "pb"}, mine: []string{"c2"}, judged: 2, want: []string{"order"}},
		{name: "a start made again before StartTimeout", k: k, before: task, after: marked(task, mNow), me: mCaller{p: "pb"}, judged: -1, want: []string{"task-mark"}},
		{name: "a start given back by its worker", k: k, before: task, after: unmarked, me: worker, mine: mine, judged: -1, task: true},
		{name: "a start taken back by another", k: k, before: task, after: unmarked, me: mCaller{p: "pb"}, judged: -1, want: []string{"task-mark"}},
		{name: "a start marked on a caller's ticket", k: k, before: full, after: func() *mFix {
			g := full.clone()
			g.sub("tickets")["c1"].(*types.AttributeValueMemberM).Value["s"] = mNum(mNow)
			return g
		}(), me: mCaller{p: "pa"}, judged: -1, want: []string{"task-mark"}},
		{name: "a task joins a queue its callers fill", k: k, before: full, after: join(full, 3), me: worker, mine: []string{"i0.T9"}, judged: -1, task: true},
		{name: "a task joins past MaxQueued tasks", k: k, before: full.clone().taskTicket("i0.T7", 3, "pb", far, 0).taskTicket("i0.T8", 4, "pc", far, 0).num("seq", 4),
			after: join(full.clone().taskTicket("i0.T7", 3, "pb", far, 0).taskTicket("i0.T8", 4, "pc", far, 0), 5), me: worker, mine: []string{"i0.T9"}, judged: -1, task: true, want: []string{"queue"}},
		{name: "a withdrawal moves freed", k: k, before: task, after: task.clone().unticket("i0.T1").num("freed", 1), me: worker, mine: mine, judged: -1, task: true},
		{name: "a withdrawal that leaves freed", k: k, before: task, after: task.clone().unticket("i0.T1"), me: worker, mine: mine, judged: -1, task: true, want: []string{"freed"}},
	} {
		tc.run(t)
	}
}

func TestModelJudgesCharges(t *testing.T) {
	far := mNow + 60000
	// An uncapped key with a server bucket of 2 a minute (a token every
	// 30 s), tool a capped at 1 beside it.
	k := mKey{MaxQueued: 8, ServerRPM: 2, Hold: 2 * time.Second, Margin: time.Second, MaxPause: 5 * time.Second}
	me := mCaller{p: "pa"}
	charge := func(tc judgeCase) judgeCase {
		tc.k, tc.me, tc.holdsNothing, tc.outcome = k, me, true, mNoOutcome
		if tc.judged == 0 {
			tc.judged = -1
		}
		return tc
	}
	refund := func(tc judgeCase) judgeCase {
		tc.k, tc.me, tc.holdsNothing, tc.judged = k, me, true, -1
		return tc
	}
	oneLeft := func() *mFix { return mItemOf().num("rate:server", mNow+30000) } // one token left
	drained := func() *mFix { return mItemOf().num("rate:server", mNow+60000) }
	// x waits for tool a, which has room: its turn has come, and it needs
	// the server's token.
	waiter := func(f *mFix) *mFix { return f.ticket("x", 1, "pb", "a", far, 1, 0).num("seq", 1) }
	// y waits for tool a, full: its turn has not come.
	blocked := func(f *mFix) *mFix {
		return f.lease("l", "pb", "a", far).ticket("y", 1, "pb", "a", far, 1, 0).num("seq", 1)
	}
	for _, tc := range []judgeCase{
		charge(judgeCase{name: "a charge of a full bucket", before: mItemOf(), after: mItemOf().num("rate:server", mNow+30000)}),
		charge(judgeCase{name: "a charge of its last token", before: oneLeft(), after: drained()}),
		charge(judgeCase{name: "a charge of an empty bucket", before: drained(), after: mItemOf().num("rate:server", mNow+90000), want: []string{"rate"}}),
		charge(judgeCase{name: "a charge that takes two tokens", before: mItemOf(), after: mItemOf().num("rate:server", mNow+60000), want: []string{"rate"}}),
		charge(judgeCase{name: "a charge past a waiter whose turn has not come", before: blocked(oneLeft()), after: blocked(drained())}),
		charge(judgeCase{name: "a charge that takes a waiter's token", before: waiter(oneLeft()), after: waiter(drained()), want: []string{"rate"}}),
		charge(judgeCase{name: "a charge past a waiter presumed gone, removing its ticket", before: waiter(oneLeft()), after: drained().num("seq", 1).num("freed", 1),
			came: map[string]time.Duration{"x": ClaimWindow}}),
		charge(judgeCase{name: "a charge past a waiter presumed gone too soon", before: waiter(oneLeft()), after: drained().num("seq", 1).num("freed", 1),
			came: map[string]time.Duration{"x": ClaimWindow - time.Millisecond}, want: []string{"bypass"}}),
		charge(judgeCase{name: "a charge removing a waiter's ticket without moving freed", before: waiter(oneLeft()), after: drained().num("seq", 1),
			came: map[string]time.Duration{"x": ClaimWindow}, want: []string{"freed"}}),
		charge(judgeCase{name: "a charge leaving a waiter its token", before: waiter(mItemOf()), after: waiter(mItemOf().num("rate:server", mNow+30000))}),
		charge(judgeCase{name: "a charge before a waiter that joined after its view (its seq condition refuses it)", before: waiter(oneLeft()), after: waiter(drained()), want: []string{"rate"}}).withJudged(0),
		charge(judgeCase{name: "a charge before a waiter of a principal holding more", before: waiter(oneLeft()).lease("l", "pb", "", far), after: waiter(drained()).lease("l", "pb", "", far)}),
		charge(judgeCase{name: "a charge through the hold", before: mItemOf().num("hold", mNow+1), after: mItemOf().num("hold", mNow+1).num("rate:server", mNow+30000), want: []string{"hold"}}),
		charge(judgeCase{name: "a charge through its principal's pause", before: mItemOf().entry("pause", "pa", mEntry{u: mNow + 1}),
			after: mItemOf().entry("pause", "pa", mEntry{u: mNow + 1}).num("rate:server", mNow+30000), want: []string{"pause"}}),
		charge(judgeCase{name: "a charge through the server's pause", before: mItemOf().entry("pause", "*", mEntry{u: mNow + 1}),
			after: mItemOf().entry("pause", "*", mEntry{u: mNow + 1}).num("rate:server", mNow+30000), want: []string{"pause"}}),
		charge(judgeCase{name: "a charge past another principal's pause", before: mItemOf().entry("pause", "pb", mEntry{u: mNow + 1}),
			after: mItemOf().entry("pause", "pb", mEntry{u: mNow + 1}).num("rate:server", mNow+30000)}),
		charge(judgeCase{name: "a charge once its pause passed", before: mItemOf().entry("pause", "pa", mEntry{u: mNow}),
			after: mItemOf().entry("pause", "pa", mEntry{u: mNow}).num("rate:server", mNow+30000)}),
		charge(judgeCase{name: "a charge resent after an unknown outcome", before: oneLeft(), after: drained(), charges: 1, want: []string{"charge"}}),
		charge(judgeCase{name: "a charge that moves freed", before: mItemOf(), after: mItemOf().num("rate:server", mNow+30000).num("freed", 1), want: []string{"freed"}}),
		charge(judgeCase{name: "a charge that adds a lease", before: mItemOf(), after: mItemOf().num("rate:server", mNow+30000).lease("me", "pa", "", mNow+3000), mine: []string{"me"}, want: []string{"charge", "rate"}}),
		charge(judgeCase{name: "a charge of another's bucket", before: mItemOf(), after: mItemOf().num("rate:server", mNow+30000).num("rate:principal:pb", mNow+30000), want: []string{"rate"}}),
		refund(judgeCase{name: "a refund", before: drained(), after: oneLeft().num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1}),
		refund(judgeCase{name: "a refund of a bucket purged since", before: mItemOf(), after: mItemOf().num("rate:server", -30000).num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1}),
		refund(judgeCase{name: "a refund of more than was taken", before: drained(), after: mItemOf().num("rate:server", mNow+29999).num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1, want: []string{"rate"}}),
		refund(judgeCase{name: "a refund of two tokens", before: drained(), after: mItemOf().num("rate:server", mNow).num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1, want: []string{"rate"}}),
		refund(judgeCase{name: "a refund after a call made", before: drained(), after: oneLeft().num("freed", 1).num("refunds", 1), outcome: Success, charges: 1, want: []string{"refund"}}),
		refund(judgeCase{name: "a refund with no charge landed", before: drained(), after: oneLeft().num("freed", 1).num("refunds", 1), outcome: Unused, want: []string{"refund"}}),
		refund(judgeCase{name: "a refund sent twice", before: drained(), after: oneLeft().num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1, refunds: 1, want: []string{"refund"}}),
		refund(judgeCase{name: "a refund that leaves freed", before: drained(), after: oneLeft().num("refunds", 1), outcome: Unused, charges: 1, want: []string{"freed"}}),
		refund(judgeCase{name: "a refund that changes the queue", before: waiter(drained()), after: oneLeft().num("seq", 1).num("freed", 2).num("refunds", 1), outcome: Unused, charges: 1, want: []string{"bypass", "freed", "refund"}}),
		refund(judgeCase{name: "a refund that leaves refunds as it was", before: drained(), after: oneLeft().num("freed", 1), outcome: Unused, charges: 1, want: []string{"refunds"}}),
		refund(judgeCase{name: "a refund of what is still to come of its token", before: drained(), after: mItemOf().num("rate:server", mNow+50000).num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1,
			tats: map[string]int64{"server": mNow + 10000}, finishAt: mNow}),
		refund(judgeCase{name: "a refund of more than is still to come of its token", before: drained(), after: mItemOf().num("rate:server", mNow+49999).num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1,
			tats: map[string]int64{"server": mNow + 10000}, finishAt: mNow, want: []string{"rate"}}),
		refund(judgeCase{name: "a refund of a token another's refund moved to the past", before: drained(), after: oneLeft().num("freed", 1).num("refunds", 1), outcome: Unused, charges: 1,
			tats: map[string]int64{"server": mNow + 30000}, shift: map[string]int64{"server": 30000}, finishAt: mNow + 1000, want: []string{"rate"}}),
		refund(judgeCase{name: "a pause of a call holding nothing", before: mItemOf(), after: mItemOf().entry("pause", "pa", mEntry{u: mNow + 1500}), outcome: Overloaded, pause: 1500 * time.Millisecond, charges: 1}),
		refund(judgeCase{name: "a pause of a call holding nothing, past what was asked", before: mItemOf(), after: mItemOf().entry("pause", "pa", mEntry{u: mNow + 1501}), outcome: Overloaded, pause: 1500 * time.Millisecond, charges: 1, want: []string{"pause"}}),
		refund(judgeCase{name: "a pause of a call not asking for one", before: mItemOf(), after: mItemOf().entry("pause", "pa", mEntry{u: mNow + 1500}), outcome: Success, charges: 1, want: []string{"pause"}}),
	} {
		tc.run(t)
	}
}

// withJudged sets the seq of the view a write was judged from.
func (tc judgeCase) withJudged(seq int64) judgeCase { tc.judged = seq; return tc }
