package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// meddler lands a write of its own (before) ahead of each write it passes
// to the store, and logs "w" for each write and "p" for each pause drawn
// (randN, which every back-off draws its jitter from), in order.
type meddler struct {
	API
	before func()
	mu     sync.Mutex
	log    []string
}

func (m *meddler) note(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = append(m.log, s)
}

func (m *meddler) events() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.log, "")
}

func (m *meddler) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if m.before != nil {
		m.before()
	}
	m.note("w")
	return m.API.UpdateItem(ctx, in, opts...)
}

// logPauses makes randN log a "p" in m for each draw, until the test ends.
func logPauses(t *testing.T, m *meddler) {
	old := randN
	randN = func(n time.Duration) time.Duration { m.note("p"); return old(n) }
	t.Cleanup(func() { randN = old })
}

// Invariant 4 and Release (doc.go): a release whose condition fails on
// others' writes is made again from the answer, the first eagerRetries
// times at once and each later one after a back-off, never giving up while
// its lease is there. Another principal pauses the server again between
// every two of its tries, so that its pause's condition always fails:
// after maxEager tries it is made without its pause, and lands.
func TestAReleaseOthersKeepWritingOverPausesBetweenItsTries(t *testing.T) {
	onBothStores(t, func(t *testing.T, db API, table string) {
		ctx := context.Background()
		m := &meddler{API: db}
		l := New(m, table, Options{InstanceID: "a"})
		r := Request{Key: "srv", Cap: 2, Hold: time.Second, Holder: "p"}
		ls, err := l.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		ls.PauseFor(time.Minute)
		m.log = nil // the acquire's writes
		var meddled int
		until := time.Now().Add(time.Hour).UnixMilli()
		m.before = func() {
			// Principal q's pause, one entry more each time.
			meddled++
			entries := map[string]types.AttributeValue{}
			for i := range meddled {
				entries[fmt.Sprintf("q%d", i)] = entryValue(map[string]int64{gateUntil: until})
			}
			handEditIn(t, db, table, &types.AttributeValueMemberM{Value: entries}, PauseAttr)
		}
		logPauses(t, m)
		if _, err := ls.Finish(ctx, Overloaded); err != nil {
			t.Fatal(err)
		}
		got := m.events()
		// eagerRetries+1 tries at once, then each after a pause, the last
		// (maxEager+1st) without its pause.
		want := strings.Repeat("w", eagerRetries+1) + strings.Repeat("pw", maxEager-eagerRetries)
		t.Logf("the release: %s (w: a write, p: a pause)", got)
		if got != want {
			t.Errorf("the release's writes and pauses: %s, want %s", got, want)
		}
		if v := parseItem(rgItem(t, db, table, "srv")); v.leases[ls.ID()] != 0 {
			t.Errorf("the lease is still there after %d tries", strings.Count(got, "w"))
		}
	})
}

// Invariant 4 (doc.go): a repair that puts nothing right is sent again
// only after a back-off, and at most maxEager times. Each write meets a
// hold written by hand as a string anew (another value each time), so that
// every repair's condition on the value as stored fails: the operator's
// pause repairs, pauses, reads and repairs again, and gives up after
// maxEager+1 repairs; once the edits stop, it is made.
func TestARepairFailingItsConditionAgainAndAgainPauses(t *testing.T) {
	onBothStores(t, func(t *testing.T, db API, table string) {
		ctx := context.Background()
		m := &meddler{API: db}
		a := &Admin{l: New(m, table, Options{InstanceID: "admin"})}
		edits := 0
		m.before = func() {
			edits++
			handEditIn(t, db, table, &types.AttributeValueMemberS{Value: fmt.Sprintf("soon %d", edits)}, HoldAttr)
		}
		logPauses(t, m)
		until := time.Now().Add(time.Hour)
		err := a.Pause(ctx, "srv", until)
		got := m.events()
		t.Logf("the pause: %v; %s (w: a write, p: a pause)", err, got)
		// The pause, a repair, then maxEager repairs each after a pause.
		if want := "ww" + strings.Repeat("pw", maxEager); err == nil || got != want {
			t.Errorf("the pause over a hold rewritten by hand before each write: %v; %s, want an error after %s", err, got, want)
		}
		m.before = nil
		if err := a.Pause(ctx, "srv", until); err != nil {
			t.Fatalf("once the edits stop: %v", err)
		}
		if v := parseItem(rgItem(t, db, table, "srv")); v.hold != until.UnixMilli() || slices.ContainsFunc(v.fixes, func(f fix) bool { return f.path[0] == HoldAttr }) {
			t.Errorf("the hold is %d, want %d (fixes %v)", v.hold, until.UnixMilli(), v.fixes)
		}
	})
}

// Charge (doc.go Release): a call that only pays its buckets, whose
// condition fails on others' writes each time, is made again from the
// answer the first eagerRetries times at once and each later one after a
// back-off, and stops after maxEager tries. Another writer moves the
// bucket before each of its writes, across now and back, so that the
// form each try is built in (a bucket full, or one with tokens taken)
// never holds when it lands, while a token is always left.
func TestAChargeOthersKeepWritingOverPauses(t *testing.T) {
	onBothStores(t, func(t *testing.T, db API, table string) {
		ctx := context.Background()
		m := &meddler{API: db}
		l := New(m, table, Options{InstanceID: "a"})
		r := Request{Key: "srv", Holder: "p", Hold: time.Second, Rates: []Rate{{Name: "server", PerMinute: 60}}}
		// A capped call first makes the item's maps.
		release(t, acquire(t, New(db, table, Options{InstanceID: "b"}), Request{Key: "srv", Cap: 1, Hold: time.Second, Holder: "q"}))
		writes := 0
		m.before = func() {
			writes++
			tat := time.Now().Add(30 * time.Second) // tokens taken, one left
			if writes%2 == 0 {
				tat = time.Now().Add(-100 * time.Second) // full
			}
			handEditIn(t, db, table, number(tat.UnixMilli()), RateAttr("server"))
		}
		logPauses(t, m)
		_, err := l.Acquire(ctx, r)
		got := m.events()
		t.Logf("the charge: %s (w: a write, p: a pause); %v", got, err)
		if err == nil {
			t.Fatalf("a charge landed over a bucket moved before each of its writes")
		}
		want := strings.Repeat("w", eagerRetries+1) + strings.Repeat("pw", maxEager-eagerRetries-1)
		if got != want {
			t.Errorf("the charge's writes and pauses: %s, want %s", got, want)
		}
	})
}
