package lease

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestMain(m *testing.M) {
	if isWorker() {
		runWorker()
		return
	}
	storetest.Main(m)
}

// item reads the raw lease item.
func item(t *testing.T, env *storetest.Env, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// leaseIDs lists the leases of the item.
func leaseIDs(t *testing.T, env *storetest.Env, key string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for id := range parseItem(item(t, env, key)).leases {
		ids[id] = true
	}
	return ids
}

func acquire(t *testing.T, l *Limiter, req Request) *Lease {
	t.Helper()
	ls, err := l.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("acquire %s: %v", req.Key, err)
	}
	return ls
}

func release(t *testing.T, ls *Lease) {
	t.Helper()
	if _, err := ls.Finish(context.Background(), Success); err != nil {
		t.Fatalf("release %s: %v", ls.ID(), err)
	}
}

// req is a request for a server cap of n, held up to 30 s, by principal p.
func req(key string, n int, p string) Request {
	return Request{Key: key, Cap: n, Hold: 30 * time.Second, Holder: p, MaxQueued: 16}
}

// peak counts holders, keeping the most at once.
type peak struct {
	mu        sync.Mutex
	now, most map[string]int
}

func (p *peak) enter(keys ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.now[k]++
		p.most[k] = max(p.most[k], p.now[k])
	}
}

func (p *peak) exit(keys ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.now[k]--
	}
}

// Invariant 1: the key's cap, a tool's cap and a principal's cap hold
// together, across limiters (instances) and goroutines.
func TestCapsHoldAcrossGoroutines(t *testing.T) {
	env := storetest.NewEnv(t)
	const cap, toolCap, principalCap, workers, rounds = 3, 2, 2, 12, 4
	p := &peak{now: map[string]int{}, most: map[string]int{}}
	var wg sync.WaitGroup
	for w := range workers {
		// Separate limiters stand for separate instances.
		l := New(env.Client, env.Tables.Leases, Options{InstanceID: "w" + strconv.Itoa(w)})
		principal, tool := "p"+strconv.Itoa(w%3), []string{"a", "b"}[w%2]
		wg.Go(func() {
			for range rounds {
				// Room in the queue for every worker, whatever the
				// principals' shares of it (QueueReserve).
				r := Request{Key: "srv", Cap: cap, Tool: tool, PrincipalCap: principalCap, Hold: 5 * time.Second, Wait: time.Minute,
					MaxQueued: 2 * workers, Holder: principal}
				if tool == "a" {
					r.ToolCap = toolCap
				}
				ls, err := l.Acquire(context.Background(), r)
				if err != nil {
					t.Error(err)
					return
				}
				keys := []string{"server", "principal " + principal, "tool " + tool}
				p.enter(keys...)
				time.Sleep(time.Duration(1+mrand.IntN(5)) * time.Millisecond)
				p.exit(keys...)
				release(t, ls)
			}
		})
	}
	wg.Wait()
	for k, most := range p.most {
		want := map[bool]int{true: principalCap, false: cap}[strings.HasPrefix(k, "principal")]
		if k == "tool a" {
			want = toolCap
		}
		if most > want {
			t.Errorf("%s: %d held at once; cap %d", k, most, want)
		}
	}
	if left := leaseIDs(t, env, "srv"); len(left) != 0 {
		t.Errorf("leases left after all released: %v", left)
	}
	if v := parseItem(item(t, env, "srv")); len(v.sets) != 0 || len(v.queue) != 0 {
		t.Errorf("sets or tickets left after all released: %v, %d", v.sets, len(v.queue))
	}
}

// Invariant 2.
func TestUncontendedCostsTwoWrites(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	r := req("srv", 2, "p")
	r.Tool, r.ToolCap, r.PrincipalCap = "t", 1, 1
	// The first acquire on a new key creates the item.
	release(t, acquire(t, l, r))
	before := l.Stats()
	for range 5 {
		release(t, acquire(t, l, r))
	}
	after := l.Stats()
	if w, rd := after.Writes-before.Writes, after.Reads-before.Reads; w != 10 || rd != 0 {
		t.Errorf("5 uncontended acquire+release pairs: %d writes, %d reads; want 10 and 0", w, rd)
	}
}

// expire rewrites the expiry of lease id to have passed, as if its holder
// died long ago.
func expire(t *testing.T, env *storetest.Env, key, id string) {
	t.Helper()
	u := newUpdate()
	u.set(u.path(LeasesAttr, id), u.num(1))
	l := New(env.Client, env.Tables.Leases, Options{})
	if _, err := l.write(context.Background(), key, u, nil); err != nil {
		t.Fatal(err)
	}
}

// Invariant 3: a lease leaves every set with it when it is purged.
func TestPurgeRemovesWholeLeases(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	r := req("srv", 5, "dead")
	r.Tool, r.ToolCap = "t", 5
	dead := acquire(t, l, r)
	expire(t, env, "srv", dead.ID())
	// Another caller's write sees it stale and purges it, whole.
	other := acquire(t, l, req("srv", 5, "alive"))
	release(t, acquire(t, l, req("srv", 5, "alive")))
	v := parseItem(item(t, env, "srv"))
	if _, ok := v.leases[dead.ID()]; ok {
		t.Fatalf("the expired lease is still there")
	}
	for attr, members := range v.sets {
		if slices.Contains(members, dead.ID()) {
			t.Errorf("%s still holds the purged lease", attr)
		}
	}
	release(t, other)
}

// Invariant 3 (the first defect of the earlier design): a renewal whose
// write lands late, after its lease expired, was purged and its place
// taken, cannot bring the lease back into any set.
func TestRenewalCannotRestoreAPurgedLease(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &faultAPI{API: env.Client}
	slow := New(f, env.Tables.Leases, Options{InstanceID: "slow"})
	l := New(env.Client, env.Tables.Leases, Options{InstanceID: "other"})
	r := req("srv", 5, "p")
	r.Tool, r.ToolCap = "t", 1
	ls := acquire(t, slow, r)
	for range writeAttempts {
		f.arm(rule{fate: hold})
	}
	if err := ls.Renew(context.Background(), time.Minute); err == nil {
		t.Fatal("a renewal held in flight succeeded")
	}
	expire(t, env, "srv", ls.ID())
	// Another caller purges the lapsed lease and takes the tool's place.
	taker := acquire(t, l, r)
	for i, landed := range f.release() {
		if landed {
			t.Errorf("attempt %d of the late renewal landed", i)
		}
	}
	v := parseItem(item(t, env, "srv"))
	if got := v.liveIn(time.Now().UnixMilli(), v.sets[ToolAttr("t")]); got != 1 {
		t.Errorf("tool t holds %d live leases; cap 1", got)
	}
	release(t, taker)
}

// Invariant 4.
func TestRenewedLeaseIsNotPurged(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	ls := acquire(t, l, req("srv", 2, "p"))
	// Another instance saw it expired (its view is old)…
	stale := parseItem(item(t, env, "srv"))
	stale.leases[ls.ID()] = 1
	// …but it was renewed since: the purge's condition keeps it.
	if err := ls.Renew(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	u := newUpdate()
	u.purge(stale, time.Now().UnixMilli(), "", "")
	if _, err := l.write(context.Background(), "srv", u, nil); !errors.Is(err, errCondition) {
		t.Fatalf("a purge of a renewed lease: %v; want its condition to fail", err)
	}
	if !leaseIDs(t, env, "srv")[ls.ID()] {
		t.Error("the renewed lease was purged")
	}
	release(t, ls)
}

// Invariant 5 (the second and third defects of the earlier design): a
// waiter that gave up, whose withdrawal did not even reach the store, is
// never handed a place: nobody hands places out; a place goes only to a
// caller that takes it.
func TestGaveUpCallerNeverGetsAPlace(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &faultAPI{API: env.Client}
	l := New(env.Client, env.Tables.Leases, Options{Margin: 200 * time.Millisecond})
	waiting := New(f, env.Tables.Leases, Options{InstanceID: "gone", Margin: 200 * time.Millisecond})
	holder := acquire(t, l, req("srv", 1, "a"))
	r := req("srv", 1, "b")
	r.Wait = 300 * time.Millisecond
	f.arm(rule{match: writes("SET", SeqAttr), fate: lose}) // joins; learns of it at the next look
	for range writeAttempts {
		f.arm(rule{match: writes("REMOVE", QueueAttr), fate: hold}) // its withdrawal never arrives
	}
	if _, err := waiting.Acquire(context.Background(), r); err == nil {
		t.Fatal("a waiter got a place that was never freed")
	}
	release(t, holder)
	// Its ticket is left, and passed over once it lapses: the next caller
	// gets the place.
	r = req("srv", 1, "c")
	r.Wait = 10 * time.Second
	next := acquire(t, l, r)
	for id := range leaseIDs(t, env, "srv") {
		if InstanceOf(id) == "gone" {
			t.Errorf("the caller that gave up holds %s", id)
		}
	}
	release(t, next)
}

// Invariant 5: a take whose write lands late, after its caller gave up,
// holds the place no longer than its own lease, like a dead holder's: it
// lapses at the expiry the take set, and the next caller then takes it.
func TestLateTakeLapsesLikeADeadHolder(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &faultAPI{API: env.Client}
	l := New(f, env.Tables.Leases, Options{Margin: 200 * time.Millisecond})
	other := New(env.Client, env.Tables.Leases, Options{Margin: 200 * time.Millisecond})
	release(t, acquire(t, other, req("srv", 1, "b"))) // the item exists
	r := req("srv", 1, "a")
	r.Hold = 300 * time.Millisecond
	// Its take is held in flight (the caller is told it failed, and reads
	// the item each time to judge again): it gives up.
	for range writeAttempts {
		f.arm(rule{match: writes("SET", LeasesAttr), fate: hold})
	}
	sent := time.Now()
	if _, err := l.Acquire(context.Background(), r); err == nil {
		t.Fatal("acquire succeeded with every take lost")
	}
	f.release() // the first lands now; the others find its lease there
	ids := leaseIDs(t, env, "srv")
	if len(ids) > 1 {
		t.Fatalf("leases held for nobody: %v", ids)
	}
	v := parseItem(item(t, env, "srv"))
	for id, exp := range v.leases {
		if limit := sent.Add(r.Hold + 200*time.Millisecond).UnixMilli(); exp > limit+50 {
			t.Errorf("the late take's lease %s lasts %v past its caller's hold and margin", id, time.UnixMilli(exp).Sub(time.UnixMilli(limit)))
		}
	}
	// Once it has lapsed, the next caller takes the place.
	next := r
	next.Holder, next.Wait = "c", 5*time.Second
	release(t, acquire(t, other, next))
}
