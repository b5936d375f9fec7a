package auth

import (
	"context"
	"errors"
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

func TestBearer(t *testing.T) {
	good := NewKey()
	tests := []struct {
		header string
		want   error
	}{
		{"", ErrNoKey},
		{"Bearer " + good, nil},
		{"bearer " + good, nil},
		{"Basic " + good, ErrBadKey},
		{"Bearer", ErrBadKey},
		{"Bearer short", ErrBadKey},
		{"Bearer " + strings.Repeat("x", 600), ErrBadKey},
		{"Bearer has\x00control_characters", ErrBadKey},
	}
	for _, tt := range tests {
		_, err := Bearer(tt.header)
		if !errors.Is(err, tt.want) && !(err == nil && tt.want == nil) {
			t.Errorf("Bearer(%.20q) err = %v, want %v", tt.header, err, tt.want)
		}
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

func TestAuthenticate(t *testing.T) {
	env := storetest.NewEnv(t)
	a := New(env.Client, env.Tables.Keys, Options{})
	one, all := NewKey(), NewKey()
	putKey(t, env, one, "demo")
	putKey(t, env, all, "*")
	ctx := context.Background()

	k, err := a.Authenticate(ctx, "Bearer "+one)
	if err != nil {
		t.Fatal(err)
	}
	if !k.Allows("demo") || k.Allows("other") || k.AllowsAll() {
		t.Errorf("key for demo: got servers %v", k.Servers)
	}
	k, err = a.Authenticate(ctx, "Bearer "+all)
	if err != nil {
		t.Fatal(err)
	}
	if !k.Allows("anything") {
		t.Errorf("key for *: got servers %v", k.Servers)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+NewKey()); !errors.Is(err, ErrBadKey) {
		t.Errorf("unknown key: err = %v, want ErrBadKey", err)
	}
	if _, err := a.Authenticate(ctx, ""); !errors.Is(err, ErrNoKey) {
		t.Errorf("no key: err = %v, want ErrNoKey", err)
	}
}

func TestStoreErrorIsNotAuthFailure(t *testing.T) {
	env := storetest.NewEnv(t)
	a := New(env.Client, "missing-table", Options{})
	_, err := a.Authenticate(context.Background(), "Bearer "+NewKey())
	if err == nil || errors.Is(err, ErrBadKey) || errors.Is(err, ErrNoKey) {
		t.Fatalf("err = %v, want a store error", err)
	}
	if strings.Contains(err.Error(), "mcpg_") {
		t.Errorf("error text carries the key: %v", err)
	}
}

func TestToolGrants(t *testing.T) {
	ss := func(v ...string) types.AttributeValue { return &types.AttributeValueMemberSS{Value: v} }
	all := ParseItem(map[string]types.AttributeValue{AttrServers: ss("*")})
	if !all.AllowsTool("any", "tool") {
		t.Error("a key without tools grants is refused a tool")
	}
	k := ParseItem(map[string]types.AttributeValue{
		AttrServers: ss("*"),
		AttrTools:   ss("wiki/read_*", "*/search", "malformed", "wiki/"),
	})
	for _, c := range []struct {
		server, tool string
		want         bool
	}{
		{"wiki", "read_page", true}, {"wiki", "write_page", false}, {"other", "read_page", false},
		{"other", "search", true}, {"wiki", "search", true}, {"malformed", "x", false},
	} {
		if got := k.AllowsTool(c.server, c.tool); got != c.want {
			t.Errorf("AllowsTool(%q, %q) = %v, want %v", c.server, c.tool, got, c.want)
		}
	}
	// A tools attribute that grants nothing usable grants no tool.
	none := ParseItem(map[string]types.AttributeValue{AttrServers: ss("*"), AttrTools: &types.AttributeValueMemberL{}})
	if none.AllowsTool("wiki", "read_page") {
		t.Error("an empty tools list grants a tool")
	}
	for g, ok := range map[string]bool{"wiki/read_*": true, "*/x": true, "wiki": false, "bad-id/x": false, "wiki/": false} {
		if err := ValidToolGrant(g); (err == nil) != ok {
			t.Errorf("ValidToolGrant(%q) = %v, want ok=%v", g, err, ok)
		}
	}
}
