package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// marks returns the waiting marks the item of key holds for attr.
func marks(t *testing.T, env *storetest.Env, key, attr string) map[string]bool {
	return leaseIDs(t, env, key, WaitingAttr(attr))
}

func TestLongWaiterGoesBeforeNewcomersOnOtherInstances(t *testing.T) {
	env := storetest.NewEnv(t)
	a := New(env.Client, env.Tables.Leases, Options{InstanceID: "a"})
	b := New(env.Client, env.Tables.Leases, Options{InstanceID: "b", PriorityAfter: time.Millisecond})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, a, req)
	got := acquireAsync(t, b, req)
	for len(marks(t, env, "srv", ServerAttr)) == 0 { // until b's waiter has marked itself
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A newcomer on a finds the place free but a marked waiter ahead.
	_, err := a.Acquire(context.Background(), Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second})
	var full *FullError
	if !errors.As(err, &full) {
		t.Fatalf("newcomer past a marked waiter: %v, want *FullError", err)
	}
	ls := <-got
	if ls == nil {
		t.FailNow()
	}
	if m := marks(t, env, "srv", ServerAttr); len(m) != 0 {
		t.Errorf("marks left once the waiter got its place: %v", m)
	}
	if err := ls.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Nobody marked: a newcomer writes straight in again.
	if err := acquire(t, a, req).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestLapsedMarkIsPurgedNotObeyed(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second}
	if err := acquire(t, l, req).Release(context.Background()); err != nil { // creates the item
		t.Fatal(err)
	}
	// A waiter that died: its mark lapsed a second ago.
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(env.Tables.Leases),
		Key:                       map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: "srv"}},
		UpdateExpression:          aws.String("SET #w = :m"),
		ExpressionAttributeNames:  map[string]string{"#w": WaitingAttr(ServerAttr)},
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"dead.1": number(time.Now().Add(-time.Second).UnixMilli())}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := l.Acquire(context.Background(), Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute})
	if err != nil {
		t.Fatalf("a lapsed mark held a newcomer back: %v", err)
	}
	if m := marks(t, env, "srv", ServerAttr); len(m) != 0 {
		t.Errorf("lapsed mark not purged: %v", m)
	}
	if err := ls.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWaiterThatGivesUpRemovesItsMark(t *testing.T) {
	env := storetest.NewEnv(t)
	l := New(env.Client, env.Tables.Leases, Options{PriorityAfter: time.Millisecond})
	req := Request{Key: "srv", Slots: serverSlot(1), Hold: 10 * time.Second, Wait: time.Minute}
	held := acquire(t, l, req)
	other := New(env.Client, env.Tables.Leases, Options{PriorityAfter: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := other.Acquire(ctx, req)
		done <- err
	}()
	for len(marks(t, env, "srv", ServerAttr)) == 0 {
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if m := marks(t, env, "srv", ServerAttr); len(m) != 0 {
		t.Errorf("mark left by a waiter that gave up: %v", m)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
