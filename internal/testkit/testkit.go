// Package testkit holds helpers shared by the gateway's tests: the Rig that
// the tests of the real binary run on (a store, gateway processes sharing
// it, upstreams, a key); seeding the servers and keys tables; running the
// demo upstream on loopback, in process or as its own process; a proxy
// that can take the store away; hostile upstreams; and guards that check
// what reaches an upstream (credentials, SigV4 signatures, OAuth token
// requests).
package testkit

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// PutServer writes a server item given as a JSON object, as an admin would,
// without validating it (tests also write invalid items).
func PutServer(t testing.TB, env *storetest.Env, doc map[string]any) {
	t.Helper()
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	item, err := registry.JSONToItem(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(env.Tables.Servers), Item: item}); err != nil {
		t.Fatal(err)
	}
}

// UpdateServer sets attributes on an existing server item.
func UpdateServer(t testing.TB, env *storetest.Env, id string, attr string, value types.AttributeValue) {
	t.Helper()
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(env.Tables.Servers),
		Key:                       map[string]types.AttributeValue{store.ServerIDAttr: &types.AttributeValueMemberS{Value: id}},
		UpdateExpression:          aws.String("SET #a = :v"),
		ExpressionAttributeNames:  map[string]string{"#a": attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": value},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// PutKey stores key's hash with access to servers ("*" for all) and
// returns the key.
func PutKey(t testing.TB, env *storetest.Env, servers ...string) string {
	t.Helper()
	return PutKeyWithTools(t, env, servers, nil)
}

// PutKeyWithTools stores a key with access to servers and, if tools is
// not nil, only to the tools its "<server_id>/<glob>" grants match.
func PutKeyWithTools(t testing.TB, env *storetest.Env, servers, tools []string) string {
	t.Helper()
	return PutKeyAs(t, env, auth.Key{Servers: servers, Tools: tools})
}

// PutKeyAs stores a new key whose item says what k does (its servers,
// tools, limits, team; its hash is the new key's) and returns the key.
func PutKeyAs(t testing.TB, env *storetest.Env, k auth.Key) string {
	t.Helper()
	key := auth.NewKey()
	k.Hash = auth.HashKey(key)
	item := auth.KeyItem(&k, time.Time{})
	_, err := env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(env.Tables.Keys),
		Item:      item,
	})
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// UpdateKey sets a number attribute (a limit) of key's item.
func UpdateKey(t testing.TB, env *storetest.Env, key, attr string, n int) {
	t.Helper()
	_, err := env.Client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(env.Tables.Keys),
		Key:                       map[string]types.AttributeValue{store.KeyHashAttr: &types.AttributeValueMemberS{Value: auth.HashKey(key)}},
		UpdateExpression:          aws.String("SET #a = :n"),
		ExpressionAttributeNames:  map[string]string{"#a": attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: strconv.Itoa(n)}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Demo runs a demo upstream on loopback until the test ends.
type Demo struct {
	*demoupstream.Demo
	// URL is the streamable-HTTP endpoint; SSEURL the HTTP+SSE one;
	// SpecURL the OpenAPI document of its plain HTTP API.
	URL, SSEURL, SpecURL string
}

// StartDemo starts a demo upstream server on 127.0.0.1.
func StartDemo(t testing.TB) *Demo {
	t.Helper()
	return StartDemoWith(t, demoupstream.HandlerOptions{})
}

// StartDemoWith starts a demo upstream server on 127.0.0.1, serving MCP
// streamable HTTP as opts say.
func StartDemoWith(t testing.TB, opts demoupstream.HandlerOptions) *Demo {
	t.Helper()
	d := demoupstream.New()
	srv := httptest.NewServer(d.HandlerWith(opts))
	t.Cleanup(srv.Close)
	return &Demo{Demo: d, URL: srv.URL + "/mcp", SSEURL: srv.URL + "/sse", SpecURL: srv.URL + "/openapi.json"}
}

// LeaseCount returns how many leases the item of key holds in attr.
func LeaseCount(t testing.TB, env *storetest.Env, key, attr string) int {
	t.Helper()
	out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	switch v := out.Item[attr].(type) {
	case *types.AttributeValueMemberM:
		return len(v.Value)
	case *types.AttributeValueMemberSS:
		return len(v.Value)
	}
	return 0
}

// CatalogHead reads the catalog head of server id from the leases table
// (empty if there is none).
func CatalogHead(t testing.TB, env *storetest.Env, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: catalog.KeyPrefix + id}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}
