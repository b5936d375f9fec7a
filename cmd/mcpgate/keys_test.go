package main

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// createKey runs keys create and returns the printed key.
func createKey(t *testing.T, env *storetest.Env, args ...string) (string, result) {
	t.Helper()
	r := mcpgate(t, env, append([]string{"keys", "create"}, args...)...).ok(t)
	key := strings.TrimSuffix(r.stdout, "\n")
	if key == "" || strings.ContainsAny(key, " \n") {
		t.Fatalf("keys create printed %q on stdout, want the key alone on one line", r.stdout)
	}
	return key, r
}

func TestKeysRoundTrip(t *testing.T) {
	env := storetest.NewEnv(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "github", "url": "https://example.com/mcp"})
	key, r := createKey(t, env, "--servers", "search, github", "--name", "ci-agent")
	if !strings.Contains(r.stderr, "cannot be shown again") {
		t.Errorf("keys create does not warn the key is shown once:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, `server "search" is not in the servers table`) || strings.Contains(r.stderr, `server "github" is not`) {
		t.Errorf("warnings about unknown servers:\n%s", r.stderr)
	}
	if strings.Contains(r.stderr, key) {
		t.Error("the key is printed twice")
	}

	authn := auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1})
	p, err := authn.Authenticate(context.Background(), auth.Request{Header: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatalf("the printed key does not authenticate: %v", err)
	}
	if !p.Allows("github") || !p.Allows("search") || p.Allows("other") {
		t.Errorf("authenticated as %+v, want servers github and search", p)
	}

	items := scanAll(t, env, env.Tables.Keys)
	if len(items) != 1 {
		t.Fatalf("keys table has %d items, want 1", len(items))
	}
	item := items[0]
	if strings.Contains(compactJSON(registry.ItemToJSON(item)), key) {
		t.Errorf("the stored item contains the key: %v", registry.ItemToJSON(item))
	}
	hash := auth.HashKey(key)
	if got := item[store.KeyHashAttr]; !reflect.DeepEqual(got, &types.AttributeValueMemberS{Value: hash}) {
		t.Errorf("key_hash stored as %#v, want S %s", got, hash)
	}
	if got, want := item[auth.AttrServers], (&types.AttributeValueMemberSS{Value: []string{"github", "search"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("servers stored as %#v, want SS %v", got, want.Value)
	}
	if k, _ := auth.ParseItem(item); k.Name != "ci-agent" {
		t.Errorf("name stored as %q, want ci-agent", k.Name)
	}
	created := rawAttr(item, auth.AttrCreated)
	if ts, err := time.Parse(time.RFC3339, created); err != nil || !strings.HasSuffix(created, "Z") || ts.IsZero() {
		t.Errorf("created_at %q is not RFC 3339 UTC (%v)", created, err)
	}

	r = mcpgate(t, env, "keys", "list").ok(t)
	if strings.Contains(r.stdout, key) || strings.Contains(r.stdout, hash) {
		t.Errorf("keys list shows the key or its full hash:\n%s", r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if got, want := strings.Fields(lines[len(lines)-1]), []string{hash[:12], "ci-agent", "-", "github,search", "*", "-", "-", created}; !reflect.DeepEqual(got, want) {
		t.Errorf("keys list row %q, want %q", got, want)
	}

	r = mcpgate(t, env, "keys", "revoke", strings.ToUpper(hash[:8])).ok(t)
	if !strings.Contains(r.stdout, "revoked key "+hash[:12]) {
		t.Errorf("revoke said %q", r.stdout)
	}
	if _, err := authn.Authenticate(context.Background(), auth.Request{Header: http.Header{"Authorization": {"Bearer " + key}}}); !errors.Is(err, auth.ErrBadKey) {
		t.Errorf("after revoke, Authenticate = %v, want ErrBadKey", err)
	}
	if r := mcpgate(t, env, "keys", "list").ok(t); !strings.Contains(r.stdout, "no keys") {
		t.Errorf("keys list after revoke:\n%s", r.stdout)
	}
	mcpgate(t, env, "keys", "revoke", hash).fails(t, 1, "no key hash starts with "+hash)
}

func TestKeysAllServers(t *testing.T) {
	env := storetest.NewEnv(t)
	key, r := createKey(t, env, "--servers=*")
	if strings.Contains(r.stderr, "warning") {
		t.Errorf("warned for *:\n%s", r.stderr)
	}
	k, err := auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1}).Authenticate(context.Background(), auth.Request{Header: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil || !k.AllowsAll() {
		t.Errorf("key for * authenticated as %+v, %v; want all servers", k, err)
	}
	r = mcpgate(t, env, "keys", "list").ok(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if got := strings.Fields(lines[len(lines)-1]); len(got) != 8 || got[0] != auth.HashKey(key)[:12] || got[1] != "-" || got[3] != "*" || got[4] != "*" {
		t.Errorf("keys list shows a nameless key for * as %q", got)
	}
}

func TestKeysTools(t *testing.T) {
	env := storetest.NewEnv(t)
	key, r := createKey(t, env, "--servers", "github,search", "--tools", "github/get_*, search/*,github/get_*")
	if !strings.Contains(r.stderr, "only tools: github/get_*, search/*") {
		t.Errorf("keys create does not say the tools:\n%s", r.stderr)
	}
	p, err := auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1}).Authenticate(context.Background(), auth.Request{Header: http.Header{"X-Api-Key": {key}}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.AllowsTool("github", "get_issue") || p.AllowsTool("github", "delete_repo") || !p.AllowsTool("search", "anything") {
		t.Errorf("tool grants %q", p.Tools)
	}
	r = mcpgate(t, env, "keys", "list").ok(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if got := strings.Fields(lines[len(lines)-1]); len(got) != 8 || got[4] != "github/get_*,search/*" {
		t.Errorf("keys list row %q", got)
	}
	mcpgate(t, env, "keys", "create", "--servers", "github", "--tools", "search/*").fails(t, 2, `names server "search", which --servers does not grant`)
	mcpgate(t, env, "keys", "create", "--servers", "github", "--tools", "github").fails(t, 2, "not <server_id>/<tool-glob>")
	mcpgate(t, env, "keys", "create", "--servers", "github", "--tools", "github/a\x01").fails(t, 2, "is not a tool pattern")
}

func TestKeysRevokePrefix(t *testing.T) {
	env := storetest.NewEnv(t)
	// Two hashes sharing their first 10 characters, written directly.
	h1 := "abcdef0123" + strings.Repeat("0", 53) + "1"
	h2 := "abcdef0123" + strings.Repeat("0", 53) + "2"
	for _, h := range []string{h1, h2} {
		_, err := env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{
			TableName: aws.String(env.Tables.Keys),
			Item: map[string]types.AttributeValue{
				store.KeyHashAttr: &types.AttributeValueMemberS{Value: h},
				auth.AttrServers:  &types.AttributeValueMemberSS{Value: []string{"*"}},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	mcpgate(t, env, "keys", "revoke", "abcdef0123").fails(t, 1, "prefix abcdef0123 is ambiguous: it matches 2 keys", "give more characters")
	mcpgate(t, env, "keys", "revoke", "12345678").fails(t, 1, "no key hash starts with 12345678")
	if n := len(scanAll(t, env, env.Tables.Keys)); n != 2 {
		t.Fatalf("a refused revoke deleted keys: %d left", n)
	}
	mcpgate(t, env, "keys", "revoke", h2).ok(t)
	items := scanAll(t, env, env.Tables.Keys)
	if len(items) != 1 || rawAttr(items[0], store.KeyHashAttr) != h1 {
		t.Errorf("after revoking %s, the table holds %v", h2, items)
	}
}

// keys create --max-parallel and --rpm-limit store max_parallel_requests
// and rpm_limit, which the key's principal carries; a key item with an attribute the gateway does not
// know is refused (never a limit silently missing), and keys list says so.
func TestKeysLimitsAndUnknownAttributes(t *testing.T) {
	env := storetest.NewEnv(t)
	key, _ := createKey(t, env, "--servers", "github", "--max-parallel", "3", "--rpm-limit", "30")
	authn := auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1})
	p, err := authn.Authenticate(context.Background(), auth.Request{Header: http.Header{"X-Api-Key": {key}}})
	if err != nil || p.MaxParallel != 3 || p.RPMLimit != 30 {
		t.Fatalf("key with --max-parallel 3 --rpm-limit 30 authenticated as %+v, %v", p, err)
	}
	r := mcpgate(t, env, "keys", "list").ok(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if got := strings.Fields(lines[len(lines)-1]); len(got) != 8 || got[5] != "3" || got[6] != "30" {
		t.Errorf("keys list row %q, want max parallel 3, rpm 30", got)
	}
	mcpgate(t, env, "keys", "create", "--servers", "github", "--rpm-limit", "-2").fails(t, 2, "--rpm-limit")
	mcpgate(t, env, "keys", "create", "--servers", "github", "--max-parallel", "-1").fails(t, 2, "--max-parallel")

	// A misspelt limit, written by hand.
	hash := auth.HashKey(key)
	_, err = env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(env.Tables.Keys), Key: map[string]types.AttributeValue{store.KeyHashAttr: &types.AttributeValueMemberS{Value: hash}},
		UpdateExpression:          aws.String("SET max_paralel_requests = :n"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = authn.Authenticate(context.Background(), auth.Request{Header: http.Header{"X-Api-Key": {key}}})
	var rej *auth.RejectedError
	if !errors.As(err, &rej) || !strings.Contains(err.Error(), "max_paralel_requests: unknown attribute") {
		t.Errorf("a key with an unknown attribute: %v; want refused, naming it", err)
	}
	if r := mcpgate(t, env, "keys", "list").ok(t); !strings.Contains(r.stdout, "refused until fixed: "+hash[:12]+": the key's item is invalid: max_paralel_requests: unknown attribute") {
		t.Errorf("keys list does not say the key is refused:\n%s", r.stdout)
	}
}

// TestKeysTeam: keys create --team stores team, which the key's principal
// carries and keys list shows; a team name the gateway would refuse is
// refused before anything is written.
func TestKeysTeam(t *testing.T) {
	env := storetest.NewEnv(t)
	key, r := createKey(t, env, "--servers", "github", "--team", "platform", "--name", "ci")
	if !strings.Contains(r.stderr, `team: "platform"`) {
		t.Errorf("keys create does not say the team:\n%s", r.stderr)
	}
	p, err := auth.New(env.Client, env.Tables.Keys, auth.Options{CacheTTL: -1}).Authenticate(context.Background(), auth.Request{Header: http.Header{"X-Api-Key": {key}}})
	if err != nil || p.Team != "platform" {
		t.Fatalf("key with --team platform authenticated as %+v, %v", p, err)
	}
	r = mcpgate(t, env, "keys", "list").ok(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if got := strings.Fields(lines[len(lines)-1]); len(got) != 8 || got[1] != "ci" || got[2] != `"platform"` {
		t.Errorf("keys list row %q, want team \"platform\"", got)
	}
	mcpgate(t, env, "keys", "create", "--servers", "github", "--team", "a\x01b").fails(t, 2, "--team")
	mcpgate(t, env, "keys", "create", "--servers", "github", "--team", strings.Repeat("t", auth.MaxTeamLen+1)).fails(t, 2, "--team")
	if n := len(scanAll(t, env, env.Tables.Keys)); n != 1 {
		t.Errorf("refused keys were written: %d items", n)
	}
}
