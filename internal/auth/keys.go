package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/cache"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Attribute names of a keys-table item.
const (
	AttrServers = "servers"
	AttrTools   = "tools"
	AttrName    = "name"
	AttrCreated = "created_at"
	// AttrMaxParallel caps the key's calls in flight across every server,
	// fleet-wide (LiteLLM's name).
	AttrMaxParallel = "max_parallel_requests"
	// AttrRPMLimit is the key's calls a minute (tool calls, and requests
	// relayed for it) across every server, fleet-wide (LiteLLM's name).
	AttrRPMLimit = "rpm_limit"
	// AttrTeam names the team the key belongs to (LiteLLM's team_id): the
	// keys of one team count as one principal on every server's limits.
	AttrTeam = "team"
	// AllServers in servers grants every server.
	AllServers = "*"
)

// KeyAttributes lists the attributes a keys-table item may carry, besides
// names starting with "x_" (admins' own notes, ignored). Any other makes
// the key refused: a misspelt or unsupported limit must never mean none.
func KeyAttributes() []string {
	return []string{store.KeyHashAttr, AttrServers, AttrTools, AttrName, AttrCreated, AttrMaxParallel, AttrRPMLimit, AttrTeam}
}

// Bounds of the key's limits.
const (
	MaxParallelLimit = 1000
	MaxRPMLimit      = 60000
)

// DefaultCacheTTL is how long a key lookup (or its miss) is reused.
const DefaultCacheTTL = 5 * time.Second

const (
	minKeyLen  = 16
	maxKeyLen  = 512
	maxEntries = 8192
	keyPrefix  = "mcpg_"
)

// Key is an authenticated API key.
type Key struct {
	// Hash is the key's SHA-256, lowercase hex.
	Hash string
	// Name is the admin's label for the key, if any.
	Name string
	// Servers are the server ids it may call; "*" means all.
	Servers []string
	// Tools, when not nil, are the only tools it may call, as
	// "<server_id>/<glob>" (see Principal.Tools).
	Tools []string
	// MaxParallel caps its calls in flight across every server,
	// fleet-wide; 0 = none.
	MaxParallel int
	// RPMLimit is its calls a minute across every server, fleet-wide;
	// 0 = none.
	RPMLimit int
	// Team is the team it belongs to (see ValidateTeam); "" = none.
	Team string
	// Invalid, when set, says why the key's item cannot be used: the key
	// is refused.
	Invalid error
}

// Principal is the caller this key stands for.
func (k *Key) Principal() *Principal {
	return &Principal{
		Kind:        KindKey,
		ID:          string(KindKey) + ":" + k.Hash[:min(len(k.Hash), idHashLen)],
		StateKey:    string(KindKey) + ":" + k.Hash,
		Servers:     k.Servers,
		Tools:       k.Tools,
		MaxParallel: k.MaxParallel,
		RPMLimit:    k.RPMLimit,
		Team:        k.Team,
	}
}

// HashKey returns the lowercase hex SHA-256 of key: its key_hash.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewKey returns a new random key ("mcpg_" and 43 base64url characters).
func NewKey() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// API is the part of the DynamoDB client the key lookups use.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// keyStore reads keys from the keys table, through a cache by hash.
type keyStore struct {
	db    API
	table string
	keys  cache.Loader[*Key] // by hash; nil: unknown key
}

func newKeyStore(db API, table string, ttl time.Duration, now func() time.Time) *keyStore {
	ks := &keyStore{db: db, table: table}
	ks.keys = cache.Loader[*Key]{Load: ks.fetch, TTL: ttl, Max: maxEntries, Now: now}
	return ks
}

// lookup returns the key, ErrBadKey if it is malformed or unknown, or a
// wrapped store error.
func (ks *keyStore) lookup(ctx context.Context, raw string) (*Key, error) {
	if len(raw) < minKeyLen || len(raw) > maxKeyLen {
		return nil, ErrBadKey
	}
	k, err := ks.keys.Get(ctx, HashKey(raw))
	if err != nil {
		return nil, err
	}
	if k == nil {
		return nil, ErrBadKey
	}
	if k.Invalid != nil {
		return nil, k.Invalid
	}
	return k, nil
}

func (ks *keyStore) fetch(ctx context.Context, hash string) (*Key, error) {
	out, err := ks.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(ks.table),
		Key:       map[string]types.AttributeValue{store.KeyHashAttr: &types.AttributeValueMemberS{Value: hash}},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: read key: %w", err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	stored, _ := out.Item[store.KeyHashAttr].(*types.AttributeValueMemberS)
	if stored == nil || subtle.ConstantTimeCompare([]byte(stored.Value), []byte(hash)) != 1 {
		return nil, nil
	}
	k, err := ParseItem(out.Item)
	if err != nil {
		// Cached like any key: refused until an admin fixes the item.
		return &Key{Hash: hash, Invalid: err}, nil
	}
	return k, nil
}

// KeyItemError means a keys-table item cannot be used: it carries an
// attribute the table does not know, or a limit that is not a whole
// number in range. Its message names each attribute.
type KeyItemError struct {
	Problems []string
}

func (e *KeyItemError) Error() string {
	return "auth: the key's item is invalid: " + strings.Join(e.Problems, "; ")
}

// ParseItem reads a keys-table item, and refuses it (*KeyItemError, with
// the key as far as it was read) when it has an attribute KeyAttributes
// does not list (other than x_…) or a limit out of range. servers and
// tools may be string sets or lists of strings; anything else grants
// nothing. A tools entry that is not "<server_id>/<glob>" grants nothing
// either, so a tools attribute of only such entries (or of another type)
// lets the key call no tool: a mistyped restriction never widens access.
func ParseItem(item map[string]types.AttributeValue) (*Key, error) {
	k := &Key{}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(item)) {
		if !slices.Contains(KeyAttributes(), name) && !strings.HasPrefix(name, "x_") {
			problems = append(problems, fmt.Sprintf("%s: unknown attribute (known: %s; prefix your own with x_)",
				clip.String(name, clip.Short), strings.Join(KeyAttributes(), ", ")))
		}
	}
	k.MaxParallel = limit(item, AttrMaxParallel, MaxParallelLimit, &problems)
	k.RPMLimit = limit(item, AttrRPMLimit, MaxRPMLimit, &problems)
	if v, ok := item[store.KeyHashAttr].(*types.AttributeValueMemberS); ok {
		k.Hash = v.Value
	}
	if v, ok := item[AttrName].(*types.AttributeValueMemberS); ok {
		k.Name = v.Value
	}
	if v, ok := item[AttrTeam]; ok {
		s, isS := v.(*types.AttributeValueMemberS)
		switch {
		case !isS:
			problems = append(problems, AttrTeam+": must be a string (type S)")
		case ValidateTeam(s.Value) != nil:
			problems = append(problems, AttrTeam+": "+ValidateTeam(s.Value).Error())
		default:
			k.Team = s.Value
		}
	}
	k.Servers = stringsOf(item[AttrServers])
	if _, set := item[AttrTools]; set {
		k.Tools = []string{}
		for _, t := range stringsOf(item[AttrTools]) {
			if srv, glob, ok := strings.Cut(t, "/"); ok && srv != "" && glob != "" {
				k.Tools = append(k.Tools, t)
			}
		}
	}
	if len(problems) > 0 {
		return k, &KeyItemError{Problems: problems}
	}
	return k, nil
}

// CreatedLayout is how created_at is written: RFC 3339, in UTC.
const CreatedLayout = time.RFC3339

// KeyItem is the keys-table item that ParseItem reads back as k, created
// at created: the one place that writes each attribute's DynamoDB type.
// Hash and Servers (a string set) are always written; Name when not empty;
// Tools when not nil (an empty list when empty, which grants no tool);
// each limit when above 0; Team when not empty; created_at unless created
// is zero.
func KeyItem(k *Key, created time.Time) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		store.KeyHashAttr: &types.AttributeValueMemberS{Value: k.Hash},
		AttrServers:       &types.AttributeValueMemberSS{Value: k.Servers},
	}
	if !created.IsZero() {
		item[AttrCreated] = &types.AttributeValueMemberS{Value: created.UTC().Format(CreatedLayout)}
	}
	if k.Name != "" {
		item[AttrName] = &types.AttributeValueMemberS{Value: k.Name}
	}
	switch {
	case len(k.Tools) > 0:
		item[AttrTools] = &types.AttributeValueMemberSS{Value: k.Tools}
	case k.Tools != nil:
		// DynamoDB has no empty set.
		item[AttrTools] = &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
	}
	if k.MaxParallel > 0 {
		item[AttrMaxParallel] = &types.AttributeValueMemberN{Value: strconv.Itoa(k.MaxParallel)}
	}
	if k.RPMLimit > 0 {
		item[AttrRPMLimit] = &types.AttributeValueMemberN{Value: strconv.Itoa(k.RPMLimit)}
	}
	if k.Team != "" {
		item[AttrTeam] = &types.AttributeValueMemberS{Value: k.Team}
	}
	return item
}

// limit reads an optional limit of a key item: a whole number up to most;
// absent, 0 or negative means none (0). A problem is added to problems.
func limit(item map[string]types.AttributeValue, name string, most int, problems *[]string) int {
	v, ok := item[name]
	if !ok {
		return 0
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		*problems = append(*problems, name+": must be a number (type N)")
		return 0
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	switch {
	case err != nil:
		*problems = append(*problems, name+": must be a number (type N)")
	case f != math.Trunc(f) || f > float64(most):
		*problems = append(*problems, fmt.Sprintf("%s: must be a whole number up to %d, got %v", name, most, f))
	case f > 0:
		return int(f)
	}
	return 0
}

// stringsOf reads a string set or a list of strings, sorted.
func stringsOf(v types.AttributeValue) []string {
	var out []string
	switch v := v.(type) {
	case *types.AttributeValueMemberSS:
		out = slices.Clone(v.Value)
	case *types.AttributeValueMemberL:
		for _, e := range v.Value {
			if s, ok := e.(*types.AttributeValueMemberS); ok {
				out = append(out, s.Value)
			}
		}
	}
	slices.Sort(out)
	return out
}
