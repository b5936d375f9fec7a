package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
)

// ParseServers reads a key's servers: comma-separated server ids, or "*"
// for all; sorted, without repeats.
func ParseServers(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no servers: give the server ids the key may call, comma-separated, or * for all")
	}
	var ids []string
	for _, id := range strings.Split(s, ",") {
		id = strings.TrimSpace(id)
		if id != auth.AllServers {
			if err := registry.ValidateID(id); err != nil {
				return nil, err
			}
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// ParseTools reads a key's tool grants: comma-separated
// "<server_id>/<glob>", each naming a server of servers (or "*"); nil
// when s is empty (every tool).
func ParseTools(s string, servers []string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for _, g := range strings.Split(s, ",") {
		g = strings.TrimSpace(g)
		if err := auth.ValidToolGrant(g); err != nil {
			return nil, err
		}
		if id, _, _ := strings.Cut(g, "/"); id != auth.AllServers {
			if !slices.Contains(servers, id) && !slices.Contains(servers, auth.AllServers) {
				return nil, fmt.Errorf("%q names server %q, which --servers does not grant", g, id)
			}
		}
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out, nil
}

// CheckLimits checks a key's max_parallel_requests and rpm_limit (0: none).
func CheckLimits(maxParallel, rpmLimit int) error {
	if maxParallel < 0 || maxParallel > auth.MaxParallelLimit {
		return fmt.Errorf("max parallel %d: use 1 to %d (or none)", maxParallel, auth.MaxParallelLimit)
	}
	if rpmLimit < 0 || rpmLimit > auth.MaxRPMLimit {
		return fmt.Errorf("rpm limit %d: use 1 to %d (or none)", rpmLimit, auth.MaxRPMLimit)
	}
	return nil
}

// CreateKey stores a new random key with k's grants and limits (its Hash
// is set) and returns the key: the only time it exists outside its
// holder's hands, as only its SHA-256 is stored.
func (s *Store) CreateKey(ctx context.Context, k *auth.Key, now time.Time) (string, error) {
	key := auth.NewKey()
	k.Hash = auth.HashKey(key)
	_, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(s.Tables.Keys),
		Item:                auth.KeyItem(k, now),
		ConditionExpression: aws.String("attribute_not_exists(" + store.KeyHashAttr + ")"),
	})
	if err != nil {
		return "", err
	}
	return key, nil
}

// Key prefixes RevokeKey takes: at least MinPrefixLen hex characters of a
// hash of FullHashLen.
const (
	MinPrefixLen = 8
	FullHashLen  = 64
)

// Errors of RevokeKey: no key's hash starts with the prefix given, or
// several do.
var (
	ErrNoKey     = errors.New("no such key")
	ErrAmbiguous = errors.New("ambiguous key prefix")
)

// RevokeKey deletes the one key whose hash starts with prefix (at least
// MinPrefixLen hex characters) and returns it. A prefix matching several
// keys is refused.
func (s *Store) RevokeKey(ctx context.Context, prefix string) (*auth.Key, error) {
	prefix = strings.ToLower(prefix)
	if len(prefix) < MinPrefixLen || len(prefix) > FullHashLen || strings.Trim(prefix, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("%q is not a key hash: give at least %d hex characters of it", prefix, MinPrefixLen)
	}
	items, err := s.Scan(ctx, s.Tables.Keys)
	if err != nil {
		return nil, err
	}
	var matches []*auth.Key
	for _, item := range items {
		if k, _ := auth.ParseItem(item); strings.HasPrefix(k.Hash, prefix) {
			matches = append(matches, k)
		}
	}
	switch len(matches) {
	case 0:
		return nil, fmt.Errorf("%w: no key hash starts with %s", ErrNoKey, prefix)
	case 1:
	default:
		var shown []string
		for _, k := range matches {
			shown = append(shown, ShortHash(k.Hash))
		}
		return nil, fmt.Errorf("%w: prefix %s is ambiguous: it matches %d keys (%s); give more characters", ErrAmbiguous, prefix, len(matches), strings.Join(shown, ", "))
	}
	k := matches[0]
	_, err = s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:           aws.String(s.Tables.Keys),
		Key:                 map[string]types.AttributeValue{store.KeyHashAttr: &types.AttributeValueMemberS{Value: k.Hash}},
		ConditionExpression: aws.String("attribute_exists(" + store.KeyHashAttr + ")"),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil, fmt.Errorf("%w: key %s was revoked meanwhile", ErrNoKey, ShortHash(k.Hash))
	}
	if err != nil {
		return nil, err
	}
	return k, nil
}

// ShownHashLen is how much of a key's hash people see.
const ShownHashLen = 12

// ShortHash is the start of a key's hash that people see.
func ShortHash(h string) string { return h[:min(len(h), ShownHashLen)] }
