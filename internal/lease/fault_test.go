package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// Each test here reproduces one way a store request can end — landed, not
// landed, or landed with its answer lost — with faultAPI in front of the
// real store, and checks the states and counts that follow.

// fate is what faultAPI does with one request.
type fate int

const (
	pass   fate = iota
	replay      // sent twice, the second answer returned: an SDK retry of a write whose first attempt landed
	lose        // sent, then an error returned: it landed, its answer was lost
	refuse      // not sent, an error returned
	hold        // not sent now; answered with the item as it is (a failed condition), sent on release()
)

var errInjected = errors.New("injected: connection reset")

// faultAPI passes requests to the store unless its armed rules say
// otherwise. Rules are used once, in order, for the requests they match.
type faultAPI struct {
	API
	mu     sync.Mutex
	rules  []rule
	held   []*dynamodb.UpdateItemInput
	writes int
}

type rule struct {
	match func(*dynamodb.UpdateItemInput) bool // nil matches any write
	get   bool                                 // the rule is for a GetItem
	fate  fate
}

func (f *faultAPI) arm(r rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, r)
}

func (f *faultAPI) take(in *dynamodb.UpdateItemInput, get bool) fate {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.rules {
		if r.get == get && (get || r.match == nil || r.match(in)) {
			f.rules = append(f.rules[:i], f.rules[i+1:]...)
			return r.fate
		}
	}
	return pass
}

func (f *faultAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	f.writes++
	f.mu.Unlock()
	switch f.take(in, false) {
	case replay:
		if _, err := f.API.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	case lose:
		if _, err := f.API.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
		return nil, errInjected
	case refuse:
		return nil, errInjected
	case hold:
		f.mu.Lock()
		f.held = append(f.held, in)
		f.mu.Unlock()
		out, err := f.API.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, err
		}
		return nil, &types.ConditionalCheckFailedException{Message: aws.String("held"), Item: out.Item}
	}
	return f.API.UpdateItem(ctx, in, opts...)
}

func (f *faultAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.take(nil, true) == refuse {
		return nil, errInjected
	}
	return f.API.GetItem(ctx, in, opts...)
}

// release sends the writes held so far, as delayed first attempts landing
// late.
func (f *faultAPI) release(t *testing.T) {
	f.mu.Lock()
	held := f.held
	f.held = nil
	f.mu.Unlock()
	for _, in := range held {
		_, _ = f.API.UpdateItem(context.Background(), in)
	}
}

// noItemAPI answers failed conditions without the item, as some
// DynamoDB-compatible stores do: the limiter must read it instead.
type noItemAPI struct{ API }

func (n noItemAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := n.API.UpdateItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		ccf.Item = nil
	}
	return out, err
}

// An SDK retry of a renewal whose first attempt landed finds the new expiry
// in place: the renewal succeeded, and later ones go on.
func TestRetriedRenewThatLandedIsKept(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &faultAPI{API: env.Client}
	l := New(f, env.Tables.Leases, Options{})
	ls := acquire(t, l, Request{Key: "srv", Slots: serverSlot(1), Hold: time.Second})
	f.arm(rule{fate: replay})
	if err := ls.Renew(context.Background(), time.Minute); err != nil {
		t.Fatalf("renew whose first attempt landed: %v", err)
	}
	if err := ls.Renew(context.Background(), time.Minute); err != nil {
		t.Fatalf("the next renewal: %v", err)
	}
	if err := ls.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// An SDK retry of a failing release whose first attempt landed still opens
// the breaker when that failure reached the threshold.
func TestRetriedFailingReleaseOpensTheBreaker(t *testing.T) {
	for _, capped := range []bool{true, false} {
		env := storetest.NewEnv(t)
		f := &faultAPI{API: env.Client}
		l := New(f, env.Tables.Leases, Options{})
		req := Request{Key: "srv", Hold: time.Second, Breaker: &Breaker{Name: "t", Threshold: 1, Recovery: time.Minute}}
		if capped {
			req.Slots = serverSlot(5)
		}
		ls := acquire(t, l, req)
		f.arm(rule{fate: replay})
		if tr, err := ls.Finish(context.Background(), Failure); err != nil || tr != Opened {
			t.Fatalf("capped %v: failing release whose first attempt landed: %q %v, want opened", capped, tr, err)
		}
		var open *CircuitOpenError
		if _, err := l.Acquire(context.Background(), req); !errors.As(err, &open) {
			t.Fatalf("capped %v: acquire after the breaker opened: %v", capped, err)
		}
		if n := item(t, env, "srv")[(&Breaker{Name: "t"}).attrs().fails].(*types.AttributeValueMemberN).Value; n != "1" {
			t.Errorf("capped %v: failure count %s after one failure sent twice, want 1", capped, n)
		}
	}
}

// On a store that does not return the item with a failed condition: the
// acquire write landed, its retry failed the condition, and the read that
// stands in for the item failed. The acquire fails and takes its place
// back, rather than leave it taken until it expires.
func TestAcquireThatLandedUnseenIsTakenBack(t *testing.T) {
	env := storetest.NewEnv(t)
	warm := New(env.Client, env.Tables.Leases, Options{})
	if err := acquire(t, warm, Request{Key: "srv", Slots: serverSlot(1), Hold: time.Second}).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &faultAPI{API: noItemAPI{env.Client}}
	l := New(f, env.Tables.Leases, Options{})
	f.arm(rule{fate: replay})
	f.arm(rule{get: true, fate: refuse})
	if _, err := l.Acquire(context.Background(), Request{Key: "srv", Slots: serverSlot(1), Hold: time.Minute}); err == nil {
		t.Fatal("acquire succeeded although its read failed")
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 0 {
		t.Errorf("leases = %v after the failed acquire, want none", ids)
	}
}

// The first attempt of an acquire write is delayed; its retry fails (no
// room) and the caller waits; the delayed attempt lands once a place frees.
// The caller must end with that one lease, not a second one under a new id.
func TestLateLandingAcquireIsAdopted(t *testing.T) {
	env := storetest.NewEnv(t)
	other := New(env.Client, env.Tables.Leases, Options{InstanceID: "other"})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, other, req)
	f := &faultAPI{API: env.Client}
	l := New(f, env.Tables.Leases, Options{InstanceID: "late"})
	f.arm(rule{fate: hold})
	got := acquireAsync(t, l, req)
	for len(leaseIDs(t, env, "srv", TicketsAttr)) == 0 { // until it queues
	}
	// The holder's lease goes without passing the place on (as when it
	// expires and is purged), then the delayed write lands.
	rawRemove(t, env, "srv", ServerAttr, held.ID())
	f.release(t)
	ls := <-got
	if ls == nil {
		t.FailNow()
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 || !ids[ls.ID()] {
		t.Fatalf("leases = %v, want only the caller's %s", ids, ls.ID())
	}
	if err := ls.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// rawRemove deletes one entry of a map, as another instance's purge would.
func rawRemove(t *testing.T, env *storetest.Env, key, attr, id string) {
	t.Helper()
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                aws.String(env.Tables.Leases),
		Key:                      map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}},
		UpdateExpression:         aws.String("REMOVE #m.#id"),
		ExpressionAttributeNames: map[string]string{"#m": attr, "#id": id},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A release that passes its place to a waiter, sent twice: the release
// happened, so it reports no error, and the waiter gets the place.
func TestRetriedHandOverIsDone(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &faultAPI{API: env.Client}
	l := New(f, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, l, req)
	got := acquireAsync(t, l, req)
	for len(leaseIDs(t, env, "srv", TicketsAttr)) == 0 {
	}
	f.arm(rule{fate: replay})
	if err := held.Release(context.Background()); err != nil {
		t.Fatalf("release whose first attempt landed: %v", err)
	}
	ls := <-got
	if ls == nil {
		t.FailNow()
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 || !ids[ls.ID()] {
		t.Errorf("leases = %v, want only the waiter's %s", ids, ls.ID())
	}
}

// A renewal or a release whose answer is lost, and not retried, is an
// error the caller sees; the state is still one the next request reads
// right.
func TestLostAnswers(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &faultAPI{API: env.Client}
	l := New(f, env.Tables.Leases, Options{})
	ls := acquire(t, l, Request{Key: "srv", Slots: serverSlot(1), Hold: time.Second})
	f.arm(rule{fate: lose})
	if err := ls.Renew(context.Background(), time.Minute); !errors.Is(err, errInjected) {
		t.Fatalf("renew with its answer lost: %v", err)
	}
	// Its expiry moved on unseen: the next renewal finds the lease still
	// there with another expiry, which only this holder writes, and goes on.
	if err := ls.Renew(context.Background(), time.Minute); err != nil {
		t.Fatalf("renew after a lost one: %v", err)
	}
	f.arm(rule{fate: refuse})
	if err := ls.Release(context.Background()); !errors.Is(err, errInjected) {
		t.Fatalf("release refused: %v", err)
	}
	if ids := leaseIDs(t, env, "srv", ServerAttr); len(ids) != 1 {
		t.Errorf("leases = %v: a release that was not sent freed the place", ids)
	}
}
