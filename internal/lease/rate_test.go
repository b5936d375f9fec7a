package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// A bucket of N a minute admits a burst of N, then refuses, saying when it
// will hold a token; calls refused by a bucket take no place and leave no
// ticket; the tokens are taken fleet-wide, by limiters standing for
// several instances at once.
func TestRateLimitAdmitsItsBurstExactly(t *testing.T) {
	env := storetest.NewEnv(t)
	const n = 12
	r := req("srv", 100, "p")
	r.Rates = []Rate{{Name: "server", PerMinute: n}}
	var mu sync.Mutex
	var admitted, limited int
	var held []*Lease
	var wg sync.WaitGroup
	for i := range 2 * n {
		l := New(env.Client, env.Tables.Leases, Options{InstanceID: "i" + string(rune('a'+i))})
		wg.Go(func() {
			ls, err := l.Acquire(context.Background(), r)
			mu.Lock()
			defer mu.Unlock()
			var rl *RateLimitedError
			switch {
			case err == nil:
				admitted++
				held = append(held, ls)
			case errors.As(err, &rl) && rl.Name == "server" && rl.RetryAfter > 0 && rl.RetryAfter <= 60*time.Second/n:
				limited++
			default:
				t.Errorf("acquire: %v", err)
			}
		})
	}
	wg.Wait()
	if admitted != n || limited != n {
		t.Errorf("%d admitted and %d rate limited of %d; want %d and %d", admitted, limited, 2*n, n, n)
	}
	if got := len(leaseIDs(t, env, "srv")); got != n {
		t.Errorf("%d leases; want only the %d admitted", got, n)
	}
	if v := parseItem(item(t, env, "srv")); len(v.queue) != 0 {
		t.Errorf("tickets left by refused calls: %d", len(v.queue))
	}
	for _, ls := range held {
		release(t, ls)
	}
}

// A call that waits takes its tokens when it joins the queue, once: its
// take, later, takes none. A call refused at a full cap, or past a full
// queue, takes none.
func TestWaiterPaysItsTokenOnce(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	r := req("srv", 1, "p")
	r.Rates = []Rate{{Name: "server", PerMinute: 3}}
	holder := acquire(t, l, r)
	shed := r
	if _, err := l.Acquire(context.Background(), shed); err == nil {
		t.Fatal("a second call got the only place")
	}
	w := r
	w.Wait = 20 * time.Second
	got := waitFor(t, New(env.Client, env.Tables.Leases, Options{}), w)
	queued(t, env, "srv", 1)
	release(t, holder)
	waiter := <-got
	// Tokens: 3; the holder took one, the waiter one, the refused call
	// none: one is left.
	v := parseItem(item(t, env, "srv"))
	rate := Rate{Name: "server", PerMinute: 3}
	if n := rate.Tokens(v.rates[RateAttr("server")], time.Now().UnixMilli()); n != 1 {
		t.Errorf("%d tokens left; want 1", n)
	}
	release(t, waiter)
}

// A call that takes no place but a token (a key's own rate limit) costs one
// write, and gets its token back when the call is not made.
func TestTokensWithoutAPlace(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	r := Request{Key: "key:abc", Hold: time.Minute, Holder: "k:abc", Rates: []Rate{{Name: "key", PerMinute: 2}}}
	first := acquire(t, l, r)
	before := l.Stats().Writes
	second := acquire(t, l, r)
	if w := l.Stats().Writes - before; w != 1 {
		t.Errorf("a token without a place cost %d writes; want 1", w)
	}
	var rl *RateLimitedError
	if _, err := l.Acquire(context.Background(), r); !errors.As(err, &rl) {
		t.Fatalf("a third call in the minute: %v; want rate limited", err)
	}
	if _, err := second.Finish(context.Background(), Unused); err != nil {
		t.Fatal(err)
	}
	third := acquire(t, l, r) // the token given back
	for _, ls := range []*Lease{first, third} {
		if _, err := ls.Finish(context.Background(), Success); err != nil {
			t.Fatal(err)
		}
	}
}

// Each principal's bucket is its own.
func TestPerPrincipalRates(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	mk := func(p string) Request {
		r := req("srv", 10, p)
		r.Rates = []Rate{{Name: "principal:" + p, PerMinute: 1}}
		return r
	}
	a := acquire(t, l, mk("A"))
	if _, err := l.Acquire(context.Background(), mk("A")); err == nil {
		t.Error("A's second call in the minute was admitted")
	}
	b := acquire(t, l, mk("B"))
	release(t, a)
	release(t, b)
}

// No limit the registry and the keys table accept (1 to 60,000 a minute)
// gets a bucket that refills faster than its limit: each token stands for
// at least 60 000/N ms, and the burst is N tokens.
func TestNoBucketRefillsFasterThanItsLimit(t *testing.T) {
	for n := 1; n <= 60_000; n++ {
		r := Rate{Name: "server", PerMinute: n}
		if r.interval()*int64(n) < 60_000 {
			t.Fatalf("a bucket of %d a minute refills one token every %d ms: %.2f a minute", n, r.interval(), 60_000/float64(r.interval()))
		}
		if burst := r.Tokens(0, 1); burst != n {
			t.Fatalf("a full bucket of %d a minute holds %d tokens", n, burst)
		}
		if drained := r.Tokens(1+r.tolerance()+r.interval(), 1); drained != 0 {
			t.Fatalf("a bucket of %d a minute holds %d tokens after its burst", n, drained)
		}
	}
}

// A bucket of 601 a minute, taken as fast as it lets through — on a clock
// that moves on by each refusal's advised wait — admits over 30 s its
// burst and 300 more (601 × 30/60), no more. A token every 99 ms, the
// nearest whole ms below 60 000/601, would admit 303.
func TestRateLimitHoldsOverTime(t *testing.T) {
	env := storetest.NewEnv(t)
	const n, window = 601, 30_000
	start := time.Now().UnixMilli()
	var now atomic.Int64
	now.Store(start)
	l := New(env.Client, env.Tables.Leases, Options{Clock: func() time.Time { return time.UnixMilli(now.Load()) }})
	r := Request{Key: "key:abc", Hold: time.Minute, Holder: "k:abc", Rates: []Rate{{Name: "key", PerMinute: n}}}
	admitted := 0
	for now.Load() <= start+window {
		_, err := l.Acquire(context.Background(), r)
		var rl *RateLimitedError
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &rl) && rl.RetryAfter > 0:
			now.Add(rl.RetryAfter.Milliseconds())
		default:
			t.Fatalf("acquire at +%d ms: %v", now.Load()-start, err)
		}
	}
	if want := n + n*window/60_000; admitted != want {
		t.Errorf("%d calls admitted in %d ms by a bucket of %d a minute; want its burst and %d more: %d", admitted, window, n, n*window/60_000, want)
	}
}

// An adaptive limit's move up says how many calls at the limit it took:
// twice the limit, or eight times back to the limit it was last brought
// down from. The reason is what mcpgate status shows beside the limit.
func TestAdaptiveRiseSaysTheCallsItTook(t *testing.T) {
	for _, c := range []struct {
		cut, ok int64
		want    string
	}{
		{cut: 0, ok: 7, want: "up 4→5: 8 calls at the limit"},
		{cut: 5, ok: 31, want: "up 4→5: 32 calls at the limit"},
	} {
		ls := &Lease{req: Request{Adaptive: &Adaptive{Min: 1}, Cap: 8, Tool: "t", Holder: "p"}, round: 3, InFlight: 4}
		v := parseItem(nil)
		v.limit, v.round, v.cut, v.ok = 4, 3, c.cut, c.ok
		v.bases["p/t"] = 100
		u := newUpdate()
		if !ls.adapt(u, v, Success, 100*time.Millisecond, 3_000) {
			t.Errorf("cut %d, %d calls at the limit before: the limit did not move", c.cut, c.ok)
			continue
		}
		why := ""
		for _, val := range u.values {
			if sv, ok := val.(*types.AttributeValueMemberS); ok && strings.HasPrefix(sv.Value, "up ") {
				why = sv.Value
			}
		}
		if !strings.HasPrefix(why, c.want) {
			t.Errorf("cut %d: the limit moved %q; want %q…", c.cut, why, c.want)
		}
	}
}

// Tokens counts whole tokens: a bucket short of one by less than an
// interval holds none (the count was truncated towards zero, and a walk
// of whose turn it is handed a token the bucket did not have).
func TestTokensOfAnEmptyBucket(t *testing.T) {
	r := Rate{Name: "server", PerMinute: 4} // interval 15 s, burst 4
	for _, c := range []struct {
		tat, now int64
		want     int
	}{
		{0, 1_000, 4},
		{1_000 + 60_000, 1_000, 0},          // drained at once: none
		{1_000 + 60_000, 1_000 + 14_999, 0}, // a ms short of the next
		{1_000 + 60_000, 1_000 + 15_000, 1},
		{1_000 + 45_000, 1_000, 1},
	} {
		if got := r.Tokens(c.tat, c.now); got != c.want {
			t.Errorf("Tokens(tat %d, now %d) = %d, want %d", c.tat, c.now, got, c.want)
		}
	}
}
