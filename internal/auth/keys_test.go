package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func TestHashKey(t *testing.T) {
	// sha256("abc")
	if got, want := HashKey("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Errorf("HashKey = %s, want %s", got, want)
	}
	k := NewKey()
	if !strings.HasPrefix(k, "mcpg_") || len(k) != 48 {
		t.Errorf("NewKey = %q, want mcpg_ and 43 characters", k)
	}
	if NewKey() == k {
		t.Error("NewKey repeated itself")
	}
}

func putKey(t *testing.T, env *storetest.Env, key string, servers ...string) {
	t.Helper()
	_, err := env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(env.Tables.Keys),
		Item: map[string]types.AttributeValue{
			store.KeyHashAttr: &types.AttributeValueMemberS{Value: HashKey(key)},
			AttrServers:       &types.AttributeValueMemberSS{Value: servers},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// bearer is a request carrying key as "Authorization: Bearer".
func bearer(key string) Request {
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	return Request{Header: h}
}

func TestAuthenticate(t *testing.T) {
	env := storetest.NewEnv(t)
	a := New(env.Client, env.Tables.Keys, Options{})
	one, all := NewKey(), NewKey()
	putKey(t, env, one, "demo")
	putKey(t, env, all, "*")
	ctx := context.Background()

	p, err := a.Authenticate(ctx, bearer(one))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Allows("demo") || p.Allows("other") || p.AllowsAll() {
		t.Errorf("key for demo: got servers %v", p.Servers)
	}
	if p.Kind != KindKey || p.ID != "key:"+HashKey(one)[:12] {
		t.Errorf("principal %s %s, want key:<hash prefix>", p.Kind, p.ID)
	}
	p, err = a.Authenticate(ctx, bearer(all))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Allows("anything") {
		t.Errorf("key for *: got servers %v", p.Servers)
	}
	var rej *RejectedError
	if _, err := a.Authenticate(ctx, bearer(NewKey())); !errors.Is(err, ErrBadKey) || !errors.As(err, &rej) || rej.Token {
		t.Errorf("unknown key: err = %v, want a rejection matching ErrBadKey", err)
	}
	if _, err := a.Authenticate(ctx, bearer("short")); !errors.Is(err, ErrBadKey) {
		t.Errorf("short key: err = %v, want ErrBadKey", err)
	}
	if _, err := a.Authenticate(ctx, bearer("")); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("no key: err = %v, want ErrNoCredentials", err)
	}
}

func TestToolGrants(t *testing.T) {
	item := func(tools types.AttributeValue) *Principal {
		it := map[string]types.AttributeValue{
			store.KeyHashAttr: &types.AttributeValueMemberS{Value: HashKey(NewKey())},
			AttrServers:       &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		}
		if tools != nil {
			it[AttrTools] = tools
		}
		k, _ := ParseItem(it)
		return k.Principal()
	}
	tests := []struct {
		name  string
		tools types.AttributeValue
		calls map[[2]string]bool
	}{
		{"no tools attribute: every tool of its servers", nil, map[[2]string]bool{
			{"a", "x"}: true, {"b", "y"}: true, {"c", "x"}: false,
		}},
		{"globs per server", &types.AttributeValueMemberSS{Value: []string{"a/read_*", "b/status"}}, map[[2]string]bool{
			{"a", "read_file"}: true, {"a", "write_file"}: false, {"b", "status"}: true, {"b", "statuses"}: false,
		}},
		{"any server", &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "*/echo"}}}, map[[2]string]bool{
			{"a", "echo"}: true, {"b", "echo"}: true, {"c", "echo"}: false, {"a", "other"}: false,
		}},
		{"only malformed entries: no tool", &types.AttributeValueMemberSS{Value: []string{"echo", "a/"}}, map[[2]string]bool{
			{"a", "echo"}: false, {"a", ""}: false,
		}},
		{"wrong type: no tool", &types.AttributeValueMemberS{Value: "a/*"}, map[[2]string]bool{
			{"a", "echo"}: false,
		}},
	}
	for _, tt := range tests {
		p := item(tt.tools)
		for call, want := range tt.calls {
			if got := p.AllowsTool(call[0], call[1]); got != want {
				t.Errorf("%s: AllowsTool(%q, %q) = %v, want %v (tools %q)", tt.name, call[0], call[1], got, want, p.Tools)
			}
		}
	}
}

func TestStoreErrorIsNotAuthFailure(t *testing.T) {
	env := storetest.NewEnv(t)
	a := New(env.Client, "missing-table", Options{})
	_, err := a.Authenticate(context.Background(), bearer(NewKey()))
	if err == nil || errors.Is(err, ErrBadKey) || errors.Is(err, ErrNoCredentials) {
		t.Fatalf("err = %v, want a store error", err)
	}
	if strings.Contains(err.Error(), "mcpg_") {
		t.Errorf("error text carries the key: %v", err)
	}
}

func TestValidToolGrant(t *testing.T) {
	for g, ok := range map[string]bool{"wiki/read_*": true, "*/x": true, "wiki": false, "bad-id/x": false, "wiki/": false} {
		if err := ValidToolGrant(g); (err == nil) != ok {
			t.Errorf("ValidToolGrant(%q) = %v, want ok=%v", g, err, ok)
		}
	}
}
