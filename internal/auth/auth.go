// Package auth checks bearer API keys against the keys table.
//
// A key is never stored: its item is keyed by the lowercase hex SHA-256 of
// the key (key_hash) and lists the server ids it may call (servers, a string
// set; "*" means all) and, optionally, the only tools it may see and call
// (tools, "<server_id>/<tool-glob>" grants). Lookups are cached per process by hash for a short
// time, misses included, so a flood of bad keys costs few reads.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/cache"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Attribute names of a keys-table item.
const (
	AttrServers = "servers"
	AttrName    = "name"
	AttrCreated = "created_at"
	// AttrTools, when present, narrows the key to the tools matching one
	// of its "<server_id>/<tool-glob>" grants ("*" as server_id: any).
	AttrTools = "tools"
	// AllServers in servers grants every server.
	AllServers = "*"
)

// DefaultCacheTTL is how long a key lookup (or its miss) is reused.
const DefaultCacheTTL = 5 * time.Second

const (
	minKeyLen  = 16
	maxKeyLen  = 512
	maxEntries = 8192
	keyPrefix  = "mcpg_"
)

var (
	// ErrNoKey means the request carried no bearer key.
	ErrNoKey = errors.New("auth: no bearer key")
	// ErrBadKey means the key is malformed or unknown.
	ErrBadKey = errors.New("auth: unknown or malformed key")
)

// Key is an authenticated API key.
type Key struct {
	// Hash is the key's SHA-256, lowercase hex.
	Hash string
	// Name is the admin's label for the key, if any.
	Name string
	// Servers are the server ids it may call; "*" means all.
	Servers []string
	// Tools, when not nil, are the only tools the key may see and call,
	// as "<server_id>/<tool-glob>" grants, within the servers' own
	// allowed and disallowed tools. Nil means every tool of its servers.
	Tools []string
}

// Allows reports whether the key may call serverID.
func (k *Key) Allows(serverID string) bool {
	return slices.Contains(k.Servers, AllServers) || slices.Contains(k.Servers, serverID)
}

// AllowsTool reports whether the key's tool grants let it see and call
// tool of serverID (access to the server itself is Allows).
func (k *Key) AllowsTool(serverID, tool string) bool {
	if k.Tools == nil {
		return true
	}
	for _, g := range k.Tools {
		id, pattern, ok := strings.Cut(g, "/")
		if ok && (id == serverID || id == AllServers) && registry.MatchGlob(pattern, tool) {
			return true
		}
	}
	return false
}

// ValidToolGrant checks one "<server_id>/<tool-glob>" grant.
func ValidToolGrant(g string) error {
	id, pattern, ok := strings.Cut(g, "/")
	if !ok {
		return fmt.Errorf("tool grant %q is not <server_id>/<tool-glob>", truncate(g, 80))
	}
	if id != AllServers {
		if err := registry.ValidateID(id); err != nil {
			return fmt.Errorf("tool grant %q: %w", truncate(g, 80), err)
		}
	}
	if err := registry.ValidPattern(pattern); err != nil {
		return fmt.Errorf("tool grant %q: the part after / %w", truncate(g, 80), err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// AllowsAll reports whether the key may call every server.
func (k *Key) AllowsAll() bool { return slices.Contains(k.Servers, AllServers) }

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

// Bearer extracts the key from an Authorization header value.
func Bearer(header string) (string, error) {
	if header == "" {
		return "", ErrNoKey
	}
	scheme, key, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrBadKey
	}
	key = strings.TrimSpace(key)
	if len(key) < minKeyLen || len(key) > maxKeyLen {
		return "", ErrBadKey
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' {
			return "", ErrBadKey
		}
	}
	return key, nil
}

// API is the part of the DynamoDB client the authenticator uses.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Options configures an Authenticator. The zero value means defaults.
type Options struct {
	// CacheTTL is how long a lookup is reused; zero means DefaultCacheTTL,
	// negative disables the cache. A revoked key stops working within it.
	CacheTTL time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Authenticator checks keys against the keys table.
type Authenticator struct {
	db    API
	table string
	keys  cache.Loader[*Key] // by hash; nil: unknown key
}

// New returns an Authenticator reading table through db.
func New(db API, table string, opts Options) *Authenticator {
	ttl := opts.CacheTTL
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	a := &Authenticator{db: db, table: table}
	a.keys = cache.Loader[*Key]{Load: a.fetch, TTL: ttl, Max: maxEntries, Now: opts.Now}
	return a
}

// Authenticate checks the Authorization header value. It returns ErrNoKey,
// ErrBadKey, or a wrapped store error.
func (a *Authenticator) Authenticate(ctx context.Context, header string) (*Key, error) {
	raw, err := Bearer(header)
	if err != nil {
		return nil, err
	}
	k, err := a.keys.Get(ctx, HashKey(raw))
	if err != nil {
		return nil, err
	}
	return found(k)
}

func found(k *Key) (*Key, error) {
	if k == nil {
		return nil, ErrBadKey
	}
	return k, nil
}

func (a *Authenticator) fetch(ctx context.Context, hash string) (*Key, error) {
	out, err := a.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(a.table),
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
	return ParseItem(out.Item), nil
}

// ParseItem reads a keys-table item. servers and tools may be string sets
// or lists of strings; anything else in servers grants nothing, and in
// tools, no tool (a malformed grant never widens access).
func ParseItem(item map[string]types.AttributeValue) *Key {
	k := &Key{}
	if v, ok := item[store.KeyHashAttr].(*types.AttributeValueMemberS); ok {
		k.Hash = v.Value
	}
	if v, ok := item[AttrName].(*types.AttributeValueMemberS); ok {
		k.Name = v.Value
	}
	switch v := item[AttrServers].(type) {
	case *types.AttributeValueMemberSS:
		k.Servers = slices.Clone(v.Value)
	case *types.AttributeValueMemberL:
		for _, e := range v.Value {
			if s, ok := e.(*types.AttributeValueMemberS); ok {
				k.Servers = append(k.Servers, s.Value)
			}
		}
	}
	slices.Sort(k.Servers)
	if v, ok := item[AttrTools]; ok {
		k.Tools = []string{}
		switch v := v.(type) {
		case *types.AttributeValueMemberSS:
			k.Tools = append(k.Tools, v.Value...)
		case *types.AttributeValueMemberL:
			for _, e := range v.Value {
				if s, ok := e.(*types.AttributeValueMemberS); ok {
					k.Tools = append(k.Tools, s.Value)
				}
			}
		}
		slices.Sort(k.Tools)
	}
	return k
}
