package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/store"
)

// API is the part of the DynamoDB client the fleet's readers and editors
// use.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Item is one DynamoDB item.
type Item = map[string]types.AttributeValue

// Store reads and writes the gateway's three tables.
type Store struct {
	DB     API
	Tables store.Tables
}

// Scan reads every item of table, consistently.
func (s *Store) Scan(ctx context.Context, table string) ([]Item, error) {
	p := dynamodb.NewScanPaginator(s.DB, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	var items []Item
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		items = append(items, out.Items...)
	}
	return items, nil
}

// Server reads a server's item (consistently); nil when there is none.
func (s *Store) Server(ctx context.Context, id string) (Item, error) {
	return s.get(ctx, s.Tables.Servers, ServerKey(id))
}

// Lease reads a limiter item (consistently); nil when there is none.
func (s *Store) Lease(ctx context.Context, key string) (Item, error) {
	return s.get(ctx, s.Tables.Leases, map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}})
}

func (s *Store) get(ctx context.Context, table string, key Item) (Item, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// batchKeys is the most keys one BatchGetItem takes.
const batchKeys = 100

// Leases reads the limiter items of keys (consistently), one request per
// 100 keys (and one more for any the store left unprocessed); keys without
// an item are left out.
func (s *Store) Leases(ctx context.Context, keys []string) ([]Item, error) {
	var out []Item
	for chunk := range slices.Chunk(keys, batchKeys) {
		want := make([]Item, 0, len(chunk))
		for _, k := range chunk {
			want = append(want, Item{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: k}})
		}
		req := map[string]types.KeysAndAttributes{s.Tables.Leases: {Keys: want, ConsistentRead: aws.Bool(true)}}
		for tries := 0; len(req) > 0; tries++ {
			if tries == 4 {
				return nil, fmt.Errorf("read lease items: the store left %d keys unread", len(req[s.Tables.Leases].Keys))
			}
			res, err := s.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, err
			}
			out = append(out, res.Responses[s.Tables.Leases]...)
			req = res.UnprocessedKeys
		}
	}
	return out, nil
}

// KeyLimits maps each key whose own limiter item is among items, by its
// principal ID (key:1a2b3c4d5e6f, the item's limiter key), to its
// rpm_limit as the gateway reads it (0: none, or an item the gateway
// refuses). It reads the keys table only when there is such an item.
func (s *Store) KeyLimits(ctx context.Context, items []Item) (map[string]int, error) {
	if !slices.ContainsFunc(items, func(item Item) bool {
		return strings.HasPrefix(RawAttr(item, store.LimiterKeyAttr), string(auth.KindKey)+":")
	}) {
		return nil, nil
	}
	keys, err := s.Scan(ctx, s.Tables.Keys)
	if err != nil {
		return nil, err
	}
	return KeyRPM(keys), nil
}

// KeyRPM maps each key item's principal ID to its rpm_limit.
func KeyRPM(keys []Item) map[string]int {
	out := map[string]int{}
	for _, item := range keys {
		if k, err := auth.ParseItem(item); err == nil && k.Hash != "" {
			out[k.Principal().ID] = k.RPMLimit
		}
	}
	return out
}

// ServerKey is the key of server id's item.
func ServerKey(id string) Item {
	return Item{store.ServerIDAttr: &types.AttributeValueMemberS{Value: id}}
}

// RawAttr renders a string or number attribute as stored, "-" when it is
// absent and "?" when it is of another type.
func RawAttr(item Item, name string) string {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case nil:
		return "-"
	default:
		return "?"
	}
}
