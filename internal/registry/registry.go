// Package registry reads upstream server definitions from the servers table
// and caches them per process for a short time, so an admin's edit (for
// example of max_concurrent_requests) reaches every gateway instance within
// the cache TTL, with no restart.
//
// Parse checks an item against the table of attributes (Attributes), the
// one place an attribute is declared: the gateway, the CLI's checks and
// its help all read it, and any other attribute (but x_ ones) makes the
// item invalid.
package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/cache"
)

// DefaultCacheTTL is how long a server item is served from memory.
const DefaultCacheTTL = 2 * time.Second

// ErrNotFound means the servers table has no item with that server_id.
var ErrNotFound = errors.New("server not found")

// InvalidError means the item exists but is not a valid server definition.
type InvalidError struct {
	ID  string
	Err error
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("server %q is misconfigured: %v", e.ID, e.Err)
}

func (e *InvalidError) Unwrap() error { return e.Err }

// API is the part of the DynamoDB client the registry uses.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Options configures a Registry. The zero value means defaults.
type Options struct {
	// CacheTTL is how long an item (or its absence) is served from memory.
	// Zero means DefaultCacheTTL; negative disables caching.
	CacheTTL time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// MaxStale is how old a cached item may be and still be served when
	// the store fails to answer; zero means DefaultMaxStale, negative never.
	MaxStale time.Duration
}

// DefaultMaxStale is the default for Options.MaxStale: a store outage of a
// few minutes does not make every server unknown.
const DefaultMaxStale = 5 * time.Minute

// Registry looks up servers by id.
type Registry struct {
	db    API
	table string
	byID  cache.Loader[entry]
	all   cache.Loader[allEntry]
}

type allEntry struct {
	servers []*Server
	invalid []error
}

type entry struct {
	server *Server
	err    error // ErrNotFound or *InvalidError; store errors are not cached
}

// New returns a Registry reading table through db.
func New(db API, table string, opts Options) *Registry {
	ttl := opts.CacheTTL
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	stale := opts.MaxStale
	if stale == 0 {
		stale = DefaultMaxStale
	}
	if ttl < 0 || stale < 0 {
		// No cache means nothing to fall back on either.
		stale = 0
	}
	r := &Registry{db: db, table: table}
	// A stale definition beats none while the store fails to answer.
	r.byID = cache.Loader[entry]{Load: r.fetch, TTL: ttl, MaxStale: stale, Now: opts.Now}
	r.all = cache.Loader[allEntry]{
		Load: func(ctx context.Context, _ string) (allEntry, error) {
			servers, invalid, err := r.List(ctx)
			return allEntry{servers, invalid}, err
		},
		TTL: ttl, MaxStale: stale, Now: opts.Now, LoadTimeout: 10 * time.Second,
	}
	return r
}

// Get returns the server with that id: ErrNotFound when there is none, an
// *InvalidError when its item is invalid, or a wrapped store error.
// Concurrent misses for one id share a single read.
func (r *Registry) Get(ctx context.Context, id string) (*Server, error) {
	if err := ValidateID(id); err != nil {
		return nil, ErrNotFound
	}
	e, err := r.byID.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.server, e.err
}

func (r *Registry) fetch(ctx context.Context, id string) (entry, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(r.table),
		Key:       map[string]types.AttributeValue{attrID: &types.AttributeValueMemberS{Value: id}},
	})
	if err != nil {
		return entry{}, fmt.Errorf("read server %q: %w", id, err)
	}
	if len(out.Item) == 0 {
		return entry{err: ErrNotFound}, nil
	}
	s, perr := Parse(out.Item)
	if perr != nil {
		return entry{err: &InvalidError{ID: id, Err: perr}}, nil
	}
	s.identity = hashIdentity(s.IdentityKey())
	return entry{server: s}, nil
}

// All returns every valid server, and the invalid items as errors, from a
// scan shared by concurrent callers and cached for the cache TTL.
func (r *Registry) All(ctx context.Context) ([]*Server, []error, error) {
	a, err := r.all.Get(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	return a.servers, a.invalid, nil
}

// List reads every server item. Invalid items are returned as errors beside
// the valid servers, never dropped silently. It bypasses the cache.
func (r *Registry) List(ctx context.Context) ([]*Server, []error, error) {
	var (
		servers []*Server
		invalid []error
		start   map[string]types.AttributeValue
	)
	for {
		out, err := r.db.Scan(ctx, &dynamodb.ScanInput{
			TableName:         aws.String(r.table),
			ExclusiveStartKey: start,
			ConsistentRead:    aws.Bool(true),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("scan servers: %w", err)
		}
		for _, item := range out.Items {
			s, err := Parse(item)
			if err != nil {
				id := ""
				if v, ok := item[attrID].(*types.AttributeValueMemberS); ok {
					id = v.Value
				}
				invalid = append(invalid, &InvalidError{ID: id, Err: err})
				continue
			}
			s.identity = hashIdentity(s.IdentityKey())
			servers = append(servers, s)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return servers, invalid, nil
		}
		start = out.LastEvaluatedKey
	}
}
