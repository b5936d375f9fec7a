package fleet

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func newStore(t *testing.T) (*Store, *storetest.Env) {
	t.Helper()
	env := storetest.NewEnv(t)
	return &Store{DB: env.Client, Tables: env.Tables}, env
}

// TestUpdateServerIsConditionedOnTheItemAsRead: an edit judged from one
// version of the item never lands on another — a change of another
// attribute, an attribute added, or the item deleted since the read each
// refuse it, and leave the item as the other writer left it.
func TestUpdateServerIsConditionedOnTheItemAsRead(t *testing.T) {
	s, env := newStore(t)
	ctx := context.Background()
	put := func() Item {
		testkit.PutServer(t, env, map[string]any{"server_id": "s", "url": "https://example.com/mcp", "max_concurrent_requests": 2,
			"tools": map[string]any{"a": map[string]any{"max_concurrent": 1}}, "x_tags": []any{"one"}})
		item, err := s.Server(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		return item
	}
	capTo := func(n string) []Change {
		return []Change{{Name: "max_concurrent_requests", Value: &types.AttributeValueMemberN{Value: n}}}
	}

	read := put()
	srv, err := s.UpdateServer(ctx, "s", read, capTo("5"))
	if err != nil || srv.MaxConcurrent != 5 {
		t.Fatalf("update as read: %v, %v; want cap 5", srv, err)
	}
	if got := RawAttr(mustServer(t, s, "s"), "max_concurrent_requests"); got != "5" {
		t.Fatalf("cap stored %s; want 5", got)
	}

	for _, tc := range []struct {
		name    string
		between func()
		want    error
	}{
		{"another attribute changed", func() {
			testkit.UpdateServer(t, env, "s", "timeout", &types.AttributeValueMemberN{Value: "7"})
		}, ErrServerChanged},
		{"a map changed", func() {
			testkit.UpdateServer(t, env, "s", "tools", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}})
		}, ErrServerChanged},
		{"deleted", func() {
			if _, err := s.DB.DeleteItem(ctx, deleteInput(s, "s")); err != nil {
				t.Fatal(err)
			}
		}, ErrServerGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := put()
			tc.between()
			after, _ := s.Server(ctx, "s")
			if _, err := s.UpdateServer(ctx, "s", read, capTo("9")); !errors.Is(err, tc.want) {
				t.Fatalf("update after the item changed: %v; want %v", err, tc.want)
			}
			if got, _ := s.Server(ctx, "s"); RawAttr(got, "max_concurrent_requests") != RawAttr(after, "max_concurrent_requests") || (got == nil) != (after == nil) {
				t.Errorf("item after the refused update: %v; want as the other writer left it: %v", got, after)
			}
		})
	}

	// The same validation as servers set: nothing written.
	read = put()
	if _, err := s.UpdateServer(ctx, "s", read, capTo("abc")); err == nil {
		t.Error("a cap of abc was written")
	}
	if _, err := s.UpdateServer(ctx, "s", read, []Change{{Name: "max_concurent_requests", Value: &types.AttributeValueMemberN{Value: "3"}}}); err == nil {
		t.Error("a misspelt attribute was written")
	}
}

func mustServer(t *testing.T, s *Store, id string) Item {
	t.Helper()
	item, err := s.Server(context.Background(), id)
	if err != nil || item == nil {
		t.Fatalf("read server %s: %v, %v", id, item, err)
	}
	return item
}

func deleteInput(s *Store, id string) *dynamodb.DeleteItemInput {
	return &dynamodb.DeleteItemInput{TableName: aws.String(s.Tables.Servers), Key: ServerKey(id)}
}
