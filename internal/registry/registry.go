// Package registry reads upstream server definitions from the servers table
// and caches them per process for a short time, so an admin's edit (for
// example of max_concurrent_requests) reaches every gateway instance within
// the cache TTL, with no restart.
package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/singleflight"
)

// DefaultCacheTTL is how long a server item is served from memory.
const DefaultCacheTTL = 2 * time.Second

// maxEntries bounds the cache; past it, expired entries are dropped first.
const maxEntries = 4096

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
	ttl   time.Duration
	stale time.Duration
	now   func() time.Time

	group singleflight.Group
	mu    sync.Mutex
	cache map[string]entry
	all   *allEntry
}

type allEntry struct {
	servers []*Server
	invalid []error
	fetched time.Time
}

type entry struct {
	server  *Server
	err     error // ErrNotFound or *InvalidError; store errors are not cached
	fetched time.Time
}

// New returns a Registry reading table through db.
func New(db API, table string, opts Options) *Registry {
	ttl := opts.CacheTTL
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	stale := opts.MaxStale
	if stale == 0 {
		stale = DefaultMaxStale
	}
	return &Registry{db: db, table: table, ttl: ttl, stale: stale, now: now, cache: make(map[string]entry)}
}

// Get returns the server with that id: ErrNotFound when there is none, an
// *InvalidError when its item is invalid, or a wrapped store error.
// Concurrent misses for one id share a single read.
func (r *Registry) Get(ctx context.Context, id string) (*Server, error) {
	if err := ValidateID(id); err != nil {
		return nil, ErrNotFound
	}
	var cached entry
	var have bool
	if r.ttl > 0 {
		r.mu.Lock()
		cached, have = r.cache[id]
		r.mu.Unlock()
		if have && r.now().Sub(cached.fetched) < r.ttl {
			return cached.server, cached.err
		}
	}
	v, err, _ := r.group.Do(id, func() (any, error) {
		// The read is shared by every waiter: it must not die with the
		// first caller's context.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		e, err := r.fetch(rctx, id)
		if err != nil {
			return nil, err
		}
		r.store(id, e)
		return e, nil
	})
	if err != nil {
		if have && r.stale > 0 && r.now().Sub(cached.fetched) < r.stale {
			// The store is failing: the last known definition beats none.
			return cached.server, cached.err
		}
		return nil, err
	}
	e := v.(entry)
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
	e := entry{fetched: r.now()}
	if len(out.Item) == 0 {
		e.err = ErrNotFound
		return e, nil
	}
	s, perr := Parse(out.Item)
	if perr != nil {
		e.err = &InvalidError{ID: id, Err: perr}
		return e, nil
	}
	e.server = s
	return e, nil
}

func (r *Registry) store(id string, e entry) {
	if r.ttl <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= maxEntries {
		now := r.now()
		for k, old := range r.cache {
			if now.Sub(old.fetched) >= r.ttl {
				delete(r.cache, k)
			}
		}
		if len(r.cache) >= maxEntries {
			clear(r.cache)
		}
	}
	r.cache[id] = e
}

// All returns every valid server, and the invalid items as errors, from a
// scan shared by concurrent callers and cached for the cache TTL.
func (r *Registry) All(ctx context.Context) ([]*Server, []error, error) {
	r.mu.Lock()
	cached := r.all
	r.mu.Unlock()
	if r.ttl > 0 && cached != nil && r.now().Sub(cached.fetched) < r.ttl {
		return cached.servers, cached.invalid, nil
	}
	v, err, _ := r.group.Do("\x00all", func() (any, error) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		servers, invalid, err := r.List(sctx)
		if err != nil {
			return nil, err
		}
		a := &allEntry{servers: servers, invalid: invalid, fetched: r.now()}
		if r.ttl > 0 {
			r.mu.Lock()
			r.all = a
			r.mu.Unlock()
		}
		return a, nil
	})
	if err != nil {
		if cached != nil && r.stale > 0 && r.now().Sub(cached.fetched) < r.stale {
			return cached.servers, cached.invalid, nil
		}
		return nil, nil, err
	}
	a := v.(*allEntry)
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
			servers = append(servers, s)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return servers, invalid, nil
		}
		start = out.LastEvaluatedKey
	}
}
