package lease

// Invariant 4 (doc.go) for the operations other than a take: a value
// written by hand never fails a release, a give-back, a pause, an
// operator's write or a withdrawal, nor loses what it was to write. Each
// write there ADDs to freed, a bucket or a set, or is conditioned on a
// value as seen, which a value of another type fails (the store refuses
// it as invalid, or its condition fails at every try).

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// opRun is key srv as an operation meets it: instance a's limiter writes
// through wc, which counts its writes.
type opRun struct {
	ctx   context.Context
	db    API
	table string
	wc    *writeCounter
	l     *Limiter
	st    starts
	r     Request
	// held is the lease the operation finishes, ticket a task's ticket.
	held   *Lease
	ticket string
	// asked is the pause the operation asked for, until; tr its release's
	// breaker transition.
	asked int64
	tr    Transition
}

// opCase is one row: a key brought to a state, written by hand, and an
// operation that must succeed, then checks of what follows.
type opCase struct {
	name string
	// both: on dynalite and on the simulation's store, on the wall clock;
	// else on the simulation's store in a synctest bubble.
	both bool
	r    Request
	// setup brings the key to what the edit meets; nothing when nil.
	setup func(t *testing.T, k *opRun)
	edits func(k *opRun) []edit
	// op is the operation over the edit; it must not fail.
	op     func(t *testing.T, k *opRun) error
	checks []func(t *testing.T, k *opRun)
}

func (c opCase) run(t *testing.T, db API, table string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := &opRun{ctx: ctx, db: db, table: table, wc: &writeCounter{API: db}, r: c.r}
	k.l = New(k.wc, table, Options{InstanceID: "a", OnTaskStart: k.st.hook})
	if c.setup != nil {
		c.setup(t, k)
	}
	if c.edits != nil {
		applyEdits(t, db, table, c.edits(k))
	}
	_, total0 := k.wc.burst()
	err := c.op(t, k)
	_, total := k.wc.burst()
	t.Logf("operation: %v; %d writes", err, total-total0)
	if err != nil {
		item := rgItem(t, db, table, "srv")
		t.Errorf("the operation over the hand edit: %v after %d writes (%d fixes left)", err, total-total0, len(parseItem(item).fixes))
	}
	for _, check := range c.checks {
		check(t, k)
	}
}

// Setups.

// holds: instance a holds r's place.
func holds(t *testing.T, k *opRun) {
	t.Helper()
	var err error
	if k.held, err = k.l.Acquire(k.ctx, k.r); err != nil {
		t.Fatal(err)
	}
}

// gaveBack: instance a took r's place and gave it back.
func gaveBack(t *testing.T, k *opRun) {
	t.Helper()
	holds(t, k)
	if _, err := k.held.Finish(k.ctx, Success); err != nil {
		t.Fatal(err)
	}
}

// Operations.

func finish(o Outcome) func(t *testing.T, k *opRun) error {
	return func(t *testing.T, k *opRun) error {
		var err error
		k.tr, err = k.held.Finish(k.ctx, o)
		return err
	}
}

// pauseAndFinish: the held call's upstream asks for a pause of a minute,
// its view read after the edit, and the call finishes with o.
func pauseAndFinish(o Outcome) func(t *testing.T, k *opRun) error {
	return func(t *testing.T, k *opRun) error {
		if _, err := k.l.read(k.ctx, "srv"); err != nil {
			t.Fatal(err)
		}
		k.held.PauseFor(time.Minute)
		k.asked = k.held.pauseUntil
		return finish(o)(t, k)
	}
}

// Checks.

// nextCallerTakes: a caller after (instance b, not waiting) takes r's
// place and gives it back.
func nextCallerTakes(t *testing.T, k *opRun) {
	t.Helper()
	ls, err := New(k.db, k.table, Options{InstanceID: "b"}).Acquire(k.ctx, k.r)
	if err != nil {
		t.Errorf("the next caller: %v", err)
		return
	}
	if _, err := ls.Finish(k.ctx, Success); err != nil {
		t.Errorf("the next caller gives its place back: %v", err)
	}
}

// leaseGone: the held lease is no longer in the item.
func leaseGone(t *testing.T, k *opRun) {
	t.Helper()
	if v := parseItem(rgItem(t, k.db, k.table, "srv")); v.leases[k.held.ID()] != 0 {
		t.Errorf("the lease is still in the item after its release (its term: %v)", k.r.Hold)
	}
}

// noLeases: the item holds no lease.
func noLeases(t *testing.T, k *opRun) {
	t.Helper()
	if leases, _ := rgItem(t, k.db, k.table, "srv")[LeasesAttr].(*types.AttributeValueMemberM); leases != nil && len(leases.Value) > 0 {
		t.Errorf("after the release the item still holds %d leases (the holder's term: %v)", len(leases.Value), k.r.Hold)
	}
}

// pauseLanded: the item's pause of the holder's principal is at least the
// one asked.
func pauseLanded(t *testing.T, k *opRun) {
	t.Helper()
	if got := parseItem(rgItem(t, k.db, k.table, "srv")).gates[PauseAttr].entry(k.r.Holder).until; got < k.asked {
		t.Errorf("the pause asked (until %d) was lost: the item's is %d", k.asked, got)
	}
}

// transition: the release's breaker transition is want.
func transition(want Transition) func(t *testing.T, k *opRun) {
	return func(t *testing.T, k *opRun) {
		t.Helper()
		if k.tr != want {
			t.Errorf("the release's failure made %v; want %v", k.tr, want)
		}
	}
}

func opCases() []opCase {
	var cases []opCase
	add := func(c ...opCase) { cases = append(cases, c...) }
	fixed := func(es ...edit) func(*opRun) []edit { return func(*opRun) []edit { return es } }
	rated := func(perMinute int) Request {
		return Request{Key: "srv", Holder: "p", Hold: time.Second, Rates: []Rate{{Name: "server", PerMinute: perMinute}}}
	}

	// A release ADDs 1 to freed and DELETEs its id from its sets: over a
	// value of another type the store refuses it as invalid, with no
	// caller reading the item to repair it, and the place would stay
	// taken for the holder's whole term.
	released := Request{Key: "srv", Cap: 1, Hold: time.Minute, MaxQueued: 8, Holder: "p", Tool: "t", ToolCap: 1}
	for name, e := range map[string]edit{
		"freed S":         at(sv("3"), FreedAttr),
		"freed M":         at(anEmptyMap(), FreedAttr),
		"principal set S": at(sv("x"), PrincipalAttr("p")),
		"tool set L":      at(aList(), ToolAttr("t")),
		"waiting set NS":  at(aNumberSet(), WaitingAttr("p")),
	} {
		add(opCase{name: "a release gives the place back/" + name, both: true, r: released,
			setup: holds, edits: fixed(e), op: finish(Success), checks: []func(*testing.T, *opRun){noLeases, nextCallerTakes}})
	}
	// A probe's failure is conditioned on its breaker's gate as seen, which
	// a malformed entry of that gate fails; with more malformed values
	// sorting before it than maxEager repairs put right, the release must
	// still land, not write again and again at one instant.
	probe := Request{Key: "srv", Cap: 2, Hold: time.Second, Holder: "p", Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}}
	add(opCase{name: "a probe's release over more values than maxEager repairs", r: probe,
		setup: func(t *testing.T, k *opRun) {
			holds(t, k)
			if _, err := k.held.Finish(k.ctx, Failure); err != nil {
				t.Fatal(err)
			}
			time.Sleep(k.r.Breaker.Recovery + time.Second) // half-open: the next call is its probe
			holds(t, k)
			if len(k.held.probes) == 0 {
				t.Fatal("the call after Recovery is no probe")
			}
		},
		edits: func(*opRun) []edit {
			return append([]edit{at(number(1), BreakerAttr("t"), "q")}, gatesNotMaps("a", maxEager*maxRepair)...)
		},
		op: finish(Failure), checks: []func(*testing.T, *opRun){leaseGone}})

	// A call never made gives its token back: the give-back ADDs to its
	// bucket and to freed, refused as invalid over a string, and the key
	// allowed one call a minute would refuse the next caller.
	for name, path := range map[string][]string{"its bucket a string": {RateAttr("server")}, "freed a string": {FreedAttr}} {
		add(opCase{name: "a give-back lands/" + name, both: true, r: rated(1),
			setup: holds, edits: fixed(at(sv("soon"), path...)), op: finish(Unused), checks: []func(*testing.T, *opRun){nextCallerTakes}})
	}
	// Over a count of refunds written by hand it lands too, once the repair
	// has set the count past any seen (now): what it gives back is then
	// bounded by refunds it cannot count, so nothing (a token may be lost,
	// never given twice).
	add(opCase{name: "a give-back lands/refunds a string", both: true, r: rated(1),
		setup: holds, edits: fixed(at(sv("soon"), RefundsAttr)), op: finish(Unused)})
	// Its give-back refused over its bucket, it repairs and gives back once
	// more, on while each repair lands: more malformed values than one
	// repair puts right sort before its bucket.
	add(opCase{name: "a give-back lands/over more values than one repair puts right", r: rated(1),
		setup: holds, edits: fixed(append(gatesNotMaps("a", maxRepair), at(sv("soon"), RateAttr("server")))...),
		op: finish(Unused)})

	// Invariant 13: a call that holds nothing in the item (a bucket alone)
	// writes its upstream's pause on its own at its finish, conditioned on
	// its principal's entry as seen: over an entry not a whole pause, and
	// over more values than maxEager repairs put right, it must still land.
	for name, bad := range malformed() {
		add(opCase{name: "a pause of a call holding nothing lands/its entry " + name, both: true, r: rated(600),
			setup: holds,
			edits: fixed(at(mv(map[string]types.AttributeValue{"p": mv(map[string]types.AttributeValue{gateUntil: bad})}), PauseAttr)),
			op:    pauseAndFinish(Overloaded), checks: []func(*testing.T, *opRun){pauseLanded}})
	}
	add(opCase{name: "a pause of a call holding nothing lands/over more values than maxEager repairs", r: rated(600),
		setup: holds, edits: fixed(gatesNotMaps("a", maxEager*maxRepair)...),
		op: pauseAndFinish(Overloaded), checks: []func(*testing.T, *opRun){pauseLanded}})
	// The adaptive limit's limit_sig is a principal's label; of another
	// type it reads as none, and a release with down evidence records its
	// own on condition that there is none: the failure's breaker
	// transition and the upstream's pause must still land.
	for name, bad := range map[string]types.AttributeValue{"N": number(7), "M": aMap(), "L": aList()} {
		add(opCase{name: "a failing release records its failure and pause/limit_sig " + name, both: true,
			r: Request{Key: "srv", Cap: 4, Adaptive: &Adaptive{Min: 1}, Hold: time.Second, Holder: "p", Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}},
			// A key in use: another principal's call made its maps, so
			// the take lands blind and the release meets the edit.
			setup: func(t *testing.T, k *opRun) {
				q := k.r
				q.Holder, q.Tool, q.Breaker = "q", "", nil
				release(t, acquire(t, New(k.db, k.table, Options{InstanceID: "o"}), q))
			},
			edits: fixed(at(anEmptyMap(), PauseAttr), at(number(4), LimitAttr), at(bad, LimitSigAttr)),
			op: func(t *testing.T, k *opRun) error {
				holds(t, k)
				k.held.PauseFor(time.Minute)
				k.asked = k.held.pauseUntil
				return finish(Failure)(t, k)
			},
			checks: []func(*testing.T, *opRun){transition(OpenedForPrincipal), pauseLanded}})
	}

	// An operator's Release removes a lease conditioned on its expiry as
	// read: a lease whose expiry is not a whole number reads as never
	// expiring, and no stored value equals what it was read as.
	for name, exp := range map[string]types.AttributeValue{"S": sv("soon"), "N 1.5": nv("1.5")} {
		add(opCase{name: "an operator's Release frees a lease/its expiry " + name, both: true,
			r:     Request{Key: "srv", Cap: 1, Hold: time.Second, MaxQueued: 8, Holder: "p"},
			setup: gaveBack, edits: fixed(at(exp, LeasesAttr, "x")),
			op:     func(t *testing.T, k *opRun) error { return NewAdmin(k.wc, k.table).Release(k.ctx, "srv", "x") },
			checks: []func(*testing.T, *opRun){nextCallerTakes}})
	}
	// An operator's Release and ResetBreaker ADD 1 to freed; over freed of
	// another type they must repair and land, as a lease's own release.
	add(opCase{name: "an operator's Release and ResetBreaker over freed S", both: true,
		r: Request{Key: "srv", Cap: 2, Hold: 30 * time.Second, MaxQueued: 8, Holder: "p", Tool: "t", Breaker: &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}},
		setup: func(t *testing.T, k *opRun) {
			holds(t, k)
			if _, err := k.held.Finish(k.ctx, Failure); err != nil { // opens the principal's entry
				t.Fatal(err)
			}
			var err error
			if k.held, err = k.l.Acquire(k.ctx, Request{Key: "srv", Cap: 2, Hold: 30 * time.Second, MaxQueued: 8, Holder: "q"}); err != nil {
				t.Fatal(err)
			}
		},
		edits: fixed(at(sv("x"), FreedAttr)),
		op: func(t *testing.T, k *opRun) error {
			a := NewAdmin(k.wc, k.table)
			return errors.Join(a.Release(k.ctx, "srv", k.held.ID()), a.ResetBreaker(k.ctx, "srv", "t"))
		}})
	// An operator's Pause over a hold not a whole number (read as none)
	// sets the hold, rather than failing its condition that no hold stands.
	for name, v := range map[string]types.AttributeValue{"S": sv("soon"), "M": anEmptyMap()} {
		var until time.Time
		add(opCase{name: "an operator's Pause sets the hold/over hold " + name,
			edits: fixed(at(v, HoldAttr)),
			op: func(t *testing.T, k *opRun) error {
				until = time.Now().Add(time.Minute)
				return NewAdmin(k.wc, k.table).Pause(k.ctx, "srv", until)
			},
			checks: []func(*testing.T, *opRun){func(t *testing.T, k *opRun) {
				if got := numberOr(rgItem(t, k.db, k.table, "srv")[HoldAttr], 0); got != until.UnixMilli() {
					t.Errorf("hold %d after the pause; want %d", got, until.UnixMilli())
				}
			}}})
	}

	// A withdrawal ADDs 1 to freed: over freed of another type it must
	// still take the ticket, not leave it until its deadline.
	add(opCase{name: "a withdrawal takes the ticket/over freed S", r: taskReq("p"),
		setup: func(t *testing.T, k *opRun) {
			holds(t, k)
			k.ticket = enqueue(t, k.l, taskReq("q"), "task-1")
		},
		edits: fixed(at(sv("3"), FreedAttr)),
		op:    func(t *testing.T, k *opRun) error { return k.l.Withdraw(k.ctx, "srv", k.ticket, "task-1") },
		checks: []func(*testing.T, *opRun){func(t *testing.T, k *opRun) {
			if s := Describe(rawItem(t, k.db, "srv"), time.Now(), 1, 0, nil); len(s.Queue) != 0 {
				t.Errorf("after the withdrawal: %d tickets; want none", len(s.Queue))
			}
			release(t, k.held)
		}}})
	// A task's start mark not a whole number reads as none and is
	// repaired away, so its start is due when its turn comes: a mark
	// conditioned on it comparing with now would never land, the task
	// never start and the caller behind it never get the free place.
	for name, v := range map[string]types.AttributeValue{"S": sv("x"), "N 1.5": nv("1.5")} {
		r := Request{Key: "srv", Cap: 1, Hold: 30 * time.Second, Holder: "p", MaxQueued: 4}
		queued := func(t *testing.T, k *opRun) {
			k.l = New(k.wc, k.table, Options{InstanceID: "a", MaxLook: time.Second, OnTaskStart: k.st.hook})
			holds(t, k)
			q := r
			q.Holder = "q"
			k.ticket = enqueue(t, k.l, q, "task-1")
		}
		marked := func(k *opRun) []edit { return []edit{at(v, TicketsAttr, k.ticket, ticketStarted)} }
		add(opCase{name: "a task's start is made when its turn comes/its mark " + name, r: r,
			setup: queued, edits: marked,
			op: func(t *testing.T, k *opRun) error {
				got := make(chan *Lease, 1)
				go func() {
					w := r
					w.Holder, w.Wait = "r", time.Minute
					ls, err := New(k.db, k.table, Options{InstanceID: "w", MaxLook: time.Second}).Acquire(k.ctx, w)
					if err != nil {
						t.Errorf("the caller behind the task: %v", err)
					}
					got <- ls
				}()
				synctest.Wait()
				time.Sleep(200 * time.Millisecond)
				release(t, k.held)
				synctest.Wait()
				if n := len(k.st.list()); n != 1 {
					t.Errorf("starts of the task: %d; want 1 (its turn came)", n)
				}
				if ls := <-got; ls != nil {
					release(t, ls)
				}
				return nil
			}})
		// With nobody else to look, the release that frees its place
		// starts it.
		add(opCase{name: "a task's start is made by the release freeing its place/its mark " + name, r: r,
			setup: queued, edits: marked,
			op: func(t *testing.T, k *opRun) error {
				release(t, k.held)
				synctest.Wait()
				if n := len(k.st.list()); n != 1 {
					t.Errorf("starts of the task after the release: %d; want 1 (its turn came)", n)
				}
				return nil
			}})
	}

	// Everyone's breaker entry written as something other than a map reads
	// as no entry and is repaired before a write is judged over it; a
	// second principal's entry closing closes everyone's as ever.
	br := &Breaker{Name: "t", Threshold: 2, Recovery: time.Minute}
	add(opCase{name: "a breaker opens for everyone over everyone's entry a string", both: true,
		setup: func(t *testing.T, k *opRun) {
			for i := range 2 {
				tr, err := call(t, k.l, br, 2, "A", Failure)
				if err != nil {
					t.Fatalf("A's call %d: %v", i, err)
				}
				if i == 1 && tr != OpenedForPrincipal {
					t.Errorf("A's second failure made %v; want it open for A", tr)
				}
			}
		},
		edits: fixed(at(sv("open"), BreakerAttr("t"), gateAll)),
		op: func(t *testing.T, k *opRun) error {
			var errs []error
			for range 2 {
				tr, err := call(t, k.l, br, 2, "B", Failure)
				k.tr, errs = tr, append(errs, err)
			}
			return errors.Join(errs...)
		},
		checks: []func(*testing.T, *opRun){transition(Opened), func(t *testing.T, k *opRun) {
			_, err := call(t, k.l, br, 2, "C", Success)
			var open *CircuitOpenError
			if !errors.As(err, &open) || open.Principal {
				t.Errorf("C's call: %v; want refused, open for everyone", err)
			}
		}}})
	return cases
}

// An operation over a hand edit succeeds, and what it was to write lands.
func TestAHandEditDoesNotFailAnOperation(t *testing.T) {
	for _, c := range opCases() {
		runRow(t, c.name, c.both, c.run)
	}
}
