package lease

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// tokenHook runs before() ahead of each write made through it that names
// every attribute of names (a take of one caller), once armed.
type tokenHook struct {
	API
	armed  *atomic.Bool
	names  []string
	before func()
}

func (h tokenHook) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	got := slices.Collect(maps.Values(in.ExpressionAttributeNames))
	if h.armed.Load() && !slices.ContainsFunc(h.names, func(n string) bool { return !slices.Contains(got, n) }) {
		h.before()
	}
	return h.API.UpdateItem(ctx, in, opts...)
}

// Whose turn (doc.go): places go "to the waiting principal that holds
// the fewest places on the key (the places handed out counting, a call
// holding nothing's none)"; Buckets: a take holding nothing moves no
// freed, so a take is conditioned on the buckets of the callers handed a
// place before it holding their tokens still, and the bucket of one
// waiter alone on its token or its ticket gone. Calls with no cap ranked
// before a capped waiter, each served in its turn between the waiter's
// look and its take, leave the bucket one token short, at the waiter's
// now, of the callers ahead its take keeps tokens for, though the one
// gone took its own: counted still, each take of the waiter was refused,
// although it needs no token of that bucket and, with no cap on the key,
// its place does not depend on theirs at all.
//
// No cap on the key. P holds tool x (cap 1), so P's callers rank after
// R's, who hold none. E holds tool other (cap 1); T (P) waits for it.
// Tool light has a bucket of 600 a minute, holding one token when E
// finishes; R's calls of light (no cap, holding nothing) wait for its
// tokens, eight of them at all times. E finishes (news on T's own board:
// T looks at once): it is T's turn behind R's first call of light, which
// has the token. Each of T's writes takes an interval (100 ms) to land,
// in which one more token comes and the first of R's calls of light takes
// one in its turn (one a token: R's calls are served at the bucket's
// rate, no faster). At T's now the bucket then holds one token fewer
// than the callers of light it handed a place before T. Counting that
// caller still, T's take was refused 96 times, till its Wait (10 s)
// ended; T's first take must land.
func TestCallsWithNoCapRankedFirstDoNotRefuseACappedWaitersTake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		lightRate := Rate{Name: "tool:light", PerMinute: 600}
		capped := func(holder, tool string) Request {
			return Request{Key: "srv", Tool: tool, ToolCap: 1, MaxQueued: 32, Wait: 10 * time.Second, Hold: time.Hour, Holder: holder}
		}
		light := Request{Key: "srv", Tool: "light", MaxQueued: 32, Wait: time.Hour, Hold: time.Minute, Holder: "R", Rates: []Rate{lightRate}}
		acquire(t, New(db, rgTable, Options{InstanceID: "p"}), capped("P", "x"))
		var armed atomic.Bool
		var tWrites atomic.Int64
		lights := New(db, rgTable, Options{InstanceID: "w"})
		var waiting []*attempt
		join := func() {
			a := lights.newAttempt(light, lights.newLeaseID(), false)
			v, err := lights.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.join(ctx, v); err != nil || !a.joined {
				t.Fatalf("a call of light did not join: %v", err)
			}
			waiting = append(waiting, a)
		}
		served := 0
		serveFirst := func() {
			a := waiting[0]
			v, err := lights.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			a.n = v.ticketFor(a.me.id).n
			now := a.now()
			ok, ahead, bypass := a.decide3(v, now)
			if !ok {
				return // no token yet
			}
			ls, _, err := a.take3(ctx, v, ahead, bypass, now)
			if err != nil || ls == nil || ls.TakesPlace() {
				t.Fatalf("the first of R's calls of light, in its turn: lease %v, error %v", ls, err)
			}
			waiting = waiting[1:]
			served++
		}
		lt := New(tokenHook{db, &armed, []string{WaitingAttr("P"), ToolAttr("other")}, func() {
			tWrites.Add(1)
			time.Sleep(time.Duration(lightRate.interval()) * time.Millisecond)
			serveFirst()
			for len(waiting) < 8 {
				join()
			}
		}}, rgTable, Options{InstanceID: "t"})
		e := acquire(t, lt, capped("E", "other"))
		type result struct {
			ls  *Lease
			err error
		}
		gotT := make(chan result, 1)
		go func() {
			ls, err := lt.Acquire(ctx, capped("P", "other"))
			gotT <- result{ls, err}
		}()
		synctest.Wait()
		// Empty: its next token an interval away.
		handSet(t, db, RateAttr("tool:light"), num(time.Now().UnixMilli()+lightRate.tolerance()+lightRate.interval()))
		for len(waiting) < 8 {
			join()
		}
		if q := itemView(t, db, "srv").queue; len(q) != 9 {
			t.Fatalf("T and R's eight calls of light are not waiting: %v", ids(q))
		}
		time.Sleep(time.Duration(lightRate.interval()) * time.Millisecond) // one token
		armed.Store(true)
		release(t, e) // T's turn, behind R's first call of light
		r := <-gotT
		armed.Store(false)
		t.Logf("T: %v after %d takes; R's calls of light served meanwhile: %d", r.err, tWrites.Load(), served)
		if r.err != nil {
			t.Errorf("T, whose turn came at once (no cap on the key, tool other free), got no place in its 10 s: each of its %d takes was refused because a call of light (holding nothing, ranked before T) took a token in its turn during it (%d served)", tWrites.Load(), served)
		} else {
			release(t, r.ls)
		}
	})
}

// Invariant 6 and Whose turn (doc.go): "a take lands only for a caller
// whose turn it is in the item as the write finds it, at the moment the
// take was made"; freed counts "places freed": a lapsed lease's purge
// moves it (expr.go removeLease), so a take judged the millisecond a lease
// is live still, and made for that moment, does not land after another's
// write purged it, on the turn of a caller that lease held back: the
// one test landing a lease's purge between a look and its take.
//
// PrincipalCap 1. O holds tool a (cap 1), its holder dead. Z (p, #1)
// waits for tool a, W (p, #2, no tool) behind it. W looks at the
// millisecond of O's expiry: tool a is full, Z passed over, W is served to
// p's one place (its take conditioned on freed and p's set). A
// millisecond later another write purges O's lapsed lease (here purgeAll,
// the write a caller of tool a sends first when its view shows a stale
// lease in its own set): at W's moment, in the item as its take finds it,
// tool a is free and Z (#1) is first for p's one place. W's take must be
// refused (freed 0 at W's look, 1 after the purge).
func TestALeasePurgedAfterATakesLookFailsTheTake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		mk := func(id string) *Limiter { return New(db, rgTable, Options{InstanceID: id}) }
		r := func(holder, tool string, toolCap int, hold time.Duration) Request {
			return Request{Key: "srv", Hold: hold, Holder: holder, PrincipalCap: 1, MaxQueued: 8, Wait: 20 * time.Second, Tool: tool, ToolCap: toolCap}
		}
		o := acquire(t, mk("o"), r("o", "a", 1, time.Second)) // its holder dies: it lapses
		joined := func(inst string, req Request) *attempt {
			l := mk(inst)
			a := l.newAttempt(req, l.newLeaseID(), false)
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			if v, err = a.join(ctx, v); err != nil || v.ticketFor(a.me.id) == nil {
				t.Fatalf("%s's join: %v", inst, err)
			}
			a.n = v.ticketFor(a.me.id).n
			return a
		}
		z := joined("z", r("p", "a", 1, 30*time.Second))
		w := joined("w", r("p", "", 0, 30*time.Second))
		time.Sleep(time.Until(o.Expiry))
		wv, served, ahead, bypass, judged := look(t, w)
		if !served || len(ahead) != 0 {
			t.Fatalf("W's look: served %v, ahead %v; want served, Z passed over (tool a full)", served, ids(ahead))
		}
		time.Sleep(time.Millisecond)
		pl := mk("x")
		pv, err := pl.read(ctx, "srv")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, err := pl.purgeAll(ctx, "srv", pv); !ok || err != nil {
			t.Fatalf("the purge of O's lapsed lease: landed %v, %v", ok, err)
		}
		before := itemView(t, db, "srv")
		if _, held := before.leases[o.ID()]; held {
			t.Fatalf("after the purge O's lease is there; the schedule does not test anything")
		}
		if ok, turnOf := before.turn3(judged, &w.me, w.req.rules(before), nil); ok || len(turnOf) != 1 || turnOf[0].id != z.me.id {
			t.Fatalf("at W's moment, in the item as its take finds it: W served %v, turn of %v; want Z's turn", ok, ids(turnOf))
		}
		wn := w.n
		ls, _, err := w.take3(ctx, wv, ahead, bypass, judged)
		if err != nil {
			t.Fatal(err)
		}
		if ls != nil {
			t.Errorf("W (#%d) took p's one place with a take made for %d, after a purge of O's lease (expiry %d); at that moment, in the item as the take found it, tool a was free and the place Z's (#%d)",
				wn, judged, o.Expiry.UnixMilli(), z.n)
		}
	})
}

// Invariant 6 and Buckets (doc.go): "Beside a ticket waiting for its
// tokens, a charge still lands while each of its buckets holds a token
// for every ticket and task the item may hold when it lands, and one
// more", judged at its own now and moving no freed. A take judged
// earlier, made for its earlier moment, may find that bucket emptier at
// that moment than its look did: a charge too, not only a take holding
// nothing, can leave a caller handed a place before it unable to use it.
// A take's condition on the buckets of the callers ahead of it catches
// this as well (it names the bucket, whoever took the token); without it
// T's take landed. The one test landing a charge between a look and a
// take judged before it.
//
// No cap on the key; tool x has cap 1, tool y cap 1; a bucket of 600 a
// minute a principal (one token every 100 ms). A (pa, x, #1) and Q (pq,
// x, #2) wait, their callers slow; T (pq, y, #3) looks at t with one
// token in pa's bucket and one in pq's: x is A's with pa's token, Q
// cannot use a place (x taken), T is served with pq's token. T's take is
// in flight 400 ms; meanwhile a call of pa with no cap finds pa's bucket
// holding 5 tokens, spare beside 3 tickets, and is charged (one write).
// At T's moment t, in the item as its take finds it, pa's bucket is
// empty: A cannot use x, which is Q's, and with it pq's one token, so it
// is not T's turn. T's take must be refused.
func TestAChargeWithTokensToSpareFailsATakeJudgedBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		ctx := context.Background()
		bucket := func(who string) Rate { return Rate{Name: "principal:" + who, PerMinute: 600} }
		r := func(holder, tool string, toolCap int) Request {
			return Request{Key: "srv", Tool: tool, ToolCap: toolCap, MaxQueued: 16, Wait: time.Minute, Hold: time.Minute, Holder: holder, Rates: []Rate{bucket(holder)}}
		}
		release(t, acquire(t, New(db, rgTable, Options{InstanceID: "o"}), r("po", "z", 1))) // the item as a call leaves it
		join := func(inst string, req Request) *attempt {
			l := New(db, rgTable, Options{InstanceID: inst})
			a := l.newAttempt(req, l.newLeaseID(), false)
			v, err := l.read(ctx, "srv")
			if err != nil {
				t.Fatal(err)
			}
			nv, err := a.join(ctx, v)
			if err != nil || nv == nil || nv.ticketFor(a.me.id) == nil {
				t.Fatalf("%s's join: %v", inst, err)
			}
			a.n = nv.ticketFor(a.me.id).n
			return a
		}
		// Empty while they join, so that they wait.
		empty := func(who string, from int64) {
			handSet(t, db, RateAttr(bucket(who).Name), num(from+bucket(who).tolerance()+bucket(who).interval()))
		}
		empty("pa", time.Now().UnixMilli())
		empty("pq", time.Now().UnixMilli())
		a := join("a", r("pa", "x", 1))
		q := join("q", r("pq", "x", 1))
		tt := join("t", r("pq", "y", 1))
		// One token each at T's look.
		judged := tt.now()
		handSet(t, db, RateAttr(bucket("pa").Name), num(judged+bucket("pa").tolerance()))
		handSet(t, db, RateAttr(bucket("pq").Name), num(judged+bucket("pq").tolerance()))
		tv, err := tt.l.read(ctx, "srv")
		if err != nil {
			t.Fatal(err)
		}
		served, ahead, bypass := tt.decide3(tv, judged)
		if !served || len(ahead) != 1 || ahead[0].id != a.me.id {
			t.Fatalf("T's look: served %v, ahead %v; want served behind A", served, ids(ahead))
		}
		time.Sleep(400 * time.Millisecond) // T's take in flight
		before := itemView(t, db, "srv")
		ls, err := New(db, rgTable, Options{InstanceID: "c"}).Acquire(ctx, Request{Key: "srv", Tool: "light", MaxQueued: 16, Wait: time.Minute, Hold: time.Minute, Holder: "pa", Rates: []Rate{bucket("pa")}})
		if err != nil {
			t.Fatal(err)
		}
		after := itemView(t, db, "srv")
		if len(after.queue) != 3 || after.freed != before.freed || after.rates[RateAttr("principal:pa")] == before.rates[RateAttr("principal:pa")] {
			t.Fatalf("pa's call with no cap was not charged beside the three waiters: queue %v, freed %d→%d", ids(after.queue), before.freed, after.freed)
		}
		if ok, turnOf := after.turn3(judged, &tt.me, tt.req.rules(after), nil); ok || len(turnOf) != 1 || turnOf[0].id != q.me.id {
			t.Fatalf("at T's moment, in the item as its take finds it: T served %v, turn of %v; want Q's turn", ok, ids(turnOf))
		}
		tn := tt.n
		tls, _, err := tt.take3(ctx, tv, ahead, bypass, judged)
		if err != nil {
			t.Fatal(err)
		}
		if tls != nil {
			t.Errorf("T (#%d) took a place with pq's one token by a take made for %d, after a charge of pa with tokens to spare (at its now) left pa's bucket empty at that moment: A (#%d) cannot use x, which is Q's (#%d), and with it pq's token",
				tn, judged, a.n, q.n)
		}
		_, _ = ls.Finish(ctx, Success)
	})
}

// Buckets (doc.go): update.holds(r, now, k, "") "conditions the write on
// bucket r holding k tokens or more at now", the
// count a walk reads as Rate.Tokens. The condition, as the store
// evaluates it, must agree with Tokens for every arrival time, k from 1
// to PerMinute (a walk never keeps more: each caller it hands a token to
// needs one left), and an absent bucket (full); also for a PerMinute that
// does not divide 60,000 (interval rounded up) and one past 60,000
// (interval 1 ms).
func TestHoldsAgreesWithTokens(t *testing.T) {
	db := newMemStore()
	ctx := context.Background()
	l := New(db, rgTable, Options{InstanceID: "h"})
	const now = int64(1_000_000_000)
	checked := 0
	for _, pm := range []int{1, 2, 3, 7, 60, 599, 600, 7000, 60001} {
		r := Rate{Name: "b", PerMinute: pm}
		iv, tol := r.interval(), r.tolerance()
		tats := []int64{-1, 0, now - 1, now, now + 1}
		for _, d := range []int64{0, 1, 2, 3} {
			for _, edge := range []int64{-1, 0, 1} {
				tats = append(tats, now+tol-d*iv+edge, now+tol+iv+edge)
			}
		}
		ks := []int{1, 2, 3, pm - 1, pm}
		for _, tat := range tats {
			for _, k := range ks {
				if k < 1 || k > pm {
					continue
				}
				key := "holds"
				db.items = map[string]map[string]types.AttributeValue{}
				if tat >= 0 {
					if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(rgTable), Key: itemKey(key),
						UpdateExpression: aws.String("SET #a = :v"), ExpressionAttributeNames: map[string]string{"#a": RateAttr("b")},
						ExpressionAttributeValues: map[string]types.AttributeValue{":v": num(tat)}}); err != nil {
						t.Fatal(err)
					}
				}
				u := newUpdate()
				u.holds(r, now, k, "")
				u.set(u.path(SeqAttr), u.num(1))
				_, err := l.write(ctx, key, u, nil)
				landed := err == nil
				if err != nil && !errors.Is(err, errCondition) {
					t.Fatal(err)
				}
				want := pm
				if tat >= 0 {
					want = r.Tokens(tat, now)
				}
				if landed != (want >= k) {
					t.Errorf("PerMinute %d, arrival time now%+d, k %d: the condition %s; Tokens %d", pm, tat-now, k, map[bool]string{true: "held", false: "failed"}[landed], want)
				}
				checked++
			}
		}
	}
	t.Logf("%d cases", checked)
}
