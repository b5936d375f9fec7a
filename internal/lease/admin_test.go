package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// racer is the store with one hook: before the first UpdateItem sent
// through it, between an admin's read and its write, another writer's
// change lands.
type racer struct {
	API
	before func()
}

func (r *racer) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f := r.before; f != nil {
		r.before = nil
		f()
	}
	return r.API.UpdateItem(ctx, in, opts...)
}

func TestAdminPauseHoldsEveryCallerAndNeverShortens(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	ad := NewAdmin(env.Client, env.Tables.Leases)
	ctx := context.Background()
	held := acquire(t, l, req("srv", 2, "A"))

	later := time.Now().Add(time.Minute)
	if err := ad.Pause(ctx, "srv", later); err != nil {
		t.Fatal(err)
	}
	_, err := l.Acquire(ctx, req("srv", 2, "B"))
	var full *FullError
	if !errors.As(err, &full) || full.Reason != Held {
		t.Fatalf("acquire while held: %v; want refused, %s", err, Held)
	}
	// A call in flight goes on and gives its place back.
	release(t, held)

	// A shorter pause leaves the longer one standing.
	if err := ad.Pause(ctx, "srv", time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if st := Describe(item(t, env, "srv"), time.Now(), 2, 0, nil); st.HeldUntil == nil || st.HeldUntil.UnixMilli() != later.UnixMilli() {
		t.Fatalf("held until %v after a shorter pause; want %v", st.HeldUntil, later)
	}
	if err := ad.Pause(ctx, "srv", time.Now().Add(-time.Second)); err == nil {
		t.Error("a pause until a past time was taken")
	}

	if err := ad.Resume(ctx, "srv"); err != nil {
		t.Fatal(err)
	}
	if st := Describe(item(t, env, "srv"), time.Now(), 2, 0, nil); st.HeldUntil != nil {
		t.Fatalf("held until %v after resume", st.HeldUntil)
	}
	release(t, acquire(t, l, req("srv", 2, "B")))
	// Resuming a key that is not paused changes nothing.
	if err := ad.Resume(ctx, "srv"); err != nil {
		t.Fatal(err)
	}
}

func TestAdminResumeLosesToALongerPause(t *testing.T) {
	env := storetest.NewEnv(t)
	ad := NewAdmin(env.Client, env.Tables.Leases)
	ctx := context.Background()
	if err := ad.Pause(ctx, "srv", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Between Resume's read and its write, an upstream's Retry-After (here
	// another admin) lengthens the pause: Resume must not remove it.
	longer := time.Now().Add(2 * time.Minute)
	r := &racer{API: env.Client}
	r.before = func() {
		if err := ad.Pause(ctx, "srv", longer); err != nil {
			t.Error(err)
		}
	}
	if err := NewAdmin(r, env.Tables.Leases).Resume(ctx, "srv"); err == nil {
		t.Fatal("resume removed a pause it had not read")
	}
	if st := Describe(item(t, env, "srv"), time.Now(), 1, 0, nil); st.HeldUntil == nil || st.HeldUntil.UnixMilli() != longer.UnixMilli() {
		t.Fatalf("held until %v; want the longer hold %v", st.HeldUntil, longer)
	}
}

// openBreaker fails threshold calls of each of two principals on tool t of
// srv: their own entries shut, and with them the entry for everyone.
func openBreaker(t *testing.T, l *Limiter, br *Breaker) {
	t.Helper()
	for _, p := range []string{"A", "B"} {
		for range br.Threshold {
			if _, err := call(t, l, br, 2, p, Failure); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestAdminResetBreakerClosesItForEveryone(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	ad := NewAdmin(env.Client, env.Tables.Leases)
	br := &Breaker{Name: "t", Threshold: 2, Recovery: time.Minute}
	openBreaker(t, l, br)
	if b := breakerOf(t, env, "t"); b.State != "open" {
		t.Fatalf("breaker %s after two principals' failures; want open", b.State)
	}
	// One principal's breaker of its own, on another tool.
	own := &Breaker{Name: "u", Threshold: 1, Recovery: time.Minute}
	if _, err := call(t, l, own, 2, "A", Failure); err != nil {
		t.Fatal(err)
	}
	if b := breakerOf(t, env, "u"); len(b.OpenFor) != 1 {
		t.Fatalf("breaker u open for %v; want A alone", b.OpenFor)
	}

	for _, name := range []string{"t", "u"} {
		if err := ad.ResetBreaker(context.Background(), "srv", name); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"t", "u"} {
		if b := breakerOf(t, env, name); b.State != "closed" || len(b.Failures) != 0 || len(b.OpenFor) != 0 {
			t.Errorf("breaker %s after reset: %+v; want closed, no failures, open for nobody", name, b)
		}
	}
	if _, err := call(t, l, br, 2, "C", Success); err != nil {
		t.Errorf("a call after the reset: %v", err)
	}
	if _, err := call(t, l, own, 2, "A", Success); err != nil {
		t.Errorf("A's call after the reset: %v", err)
	}
	// Resetting a closed breaker, or one the item does not have, writes
	// nothing and is no error.
	if err := ad.ResetBreaker(context.Background(), "srv", "nope"); err != nil {
		t.Error(err)
	}
}

func TestAdminResetBreakerIsConditionedOnWhatItRead(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	br := &Breaker{Name: "t", Threshold: 3, Recovery: time.Minute}
	if _, err := call(t, l, br, 2, "A", Failure); err != nil {
		t.Fatal(err)
	}
	// Between the reset's read and its write, another principal's call
	// fails.
	r := &racer{API: env.Client}
	r.before = func() {
		if _, err := call(t, l, br, 2, "B", Failure); err != nil {
			t.Error(err)
		}
	}
	if err := NewAdmin(r, env.Tables.Leases).ResetBreaker(context.Background(), "srv", "t"); err == nil {
		t.Fatal("reset overwrote a breaker state it had not read")
	}
	if b := breakerOf(t, env, "t"); b.Failures["A"] != 1 || b.Failures["B"] != 1 {
		t.Fatalf("breaker failures %v; want A's and B's kept, as the store had them after the read", b.Failures)
	}
}

func TestAdminReleaseRemovesALeaseWhole(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	ad := NewAdmin(env.Client, env.Tables.Leases)
	ctx := context.Background()
	r := req("srv", 1, "A")
	r.Tool, r.ToolCap = "slow", 1
	ls := acquire(t, l, r)

	// Renewed between the release's read and its write: removed all the
	// same, from the answer that showed the renewal.
	rc := &racer{API: env.Client}
	rc.before = func() {
		if err := ls.Renew(ctx, time.Minute); err != nil {
			t.Error(err)
		}
	}
	if err := NewAdmin(rc, env.Tables.Leases).Release(ctx, "srv", ls.ID()); err != nil {
		t.Fatal(err)
	}
	it := item(t, env, "srv")
	if st := Describe(it, time.Now(), 1, 0, nil); len(st.Leases) != 0 {
		t.Fatalf("leases after release: %+v", st.Leases)
	}
	for _, attr := range []string{ToolAttr("slow"), PrincipalAttr("A")} {
		if _, ok := it[attr]; ok {
			t.Errorf("%s still holds the lease: %v", attr, it[attr])
		}
	}
	// Its place is free for the next caller; its holder learns it is gone.
	release(t, acquire(t, l, r))
	if _, err := ls.Finish(ctx, Success); !errors.Is(err, ErrNotHeld) {
		t.Errorf("the holder's own release: %v; want ErrNotHeld", err)
	}
	if err := ad.Release(ctx, "srv", ls.ID()); !errors.Is(err, ErrNotHeld) {
		t.Errorf("a second release: %v; want ErrNotHeld", err)
	}
	if err := ad.Release(ctx, "srv", "nobody.1"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("release of a lease never held: %v; want ErrNotHeld", err)
	}
}
