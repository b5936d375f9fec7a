package registry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// countingAPI counts the reads the registry makes.
type countingAPI struct {
	API
	gets atomic.Int64
}

func (c *countingAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	return c.API.GetItem(ctx, in, opts...)
}

func put(t *testing.T, env *storetest.Env, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := env.Client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(env.Tables.Servers), Item: item}); err != nil {
		t.Fatal(err)
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestGetCachesAndSeesEdits(t *testing.T) {
	env := storetest.NewEnv(t)
	ctx := context.Background()
	put(t, env, with("max_concurrent_requests", n("1")))
	api := &countingAPI{API: env.Client}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := New(api, env.Tables.Servers, Options{CacheTTL: 2 * time.Second, Now: clock.Now})

	srv, err := r.Get(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if srv.MaxConcurrent != 1 {
		t.Fatalf("cap = %d, want 1", srv.MaxConcurrent)
	}
	// An admin raises the cap.
	put(t, env, with("max_concurrent_requests", n("3")))
	srv, _ = r.Get(ctx, "demo")
	if srv.MaxConcurrent != 1 || api.gets.Load() != 1 {
		t.Fatalf("within TTL: cap = %d, reads = %d; want cached 1 and 1 read", srv.MaxConcurrent, api.gets.Load())
	}
	clock.Advance(2 * time.Second)
	srv, _ = r.Get(ctx, "demo")
	if srv.MaxConcurrent != 3 {
		t.Fatalf("after TTL: cap = %d, want 3", srv.MaxConcurrent)
	}
	if api.gets.Load() != 2 {
		t.Errorf("reads = %d, want 2", api.gets.Load())
	}
}

func TestGetNotFoundAndInvalid(t *testing.T) {
	env := storetest.NewEnv(t)
	ctx := context.Background()
	put(t, env, with("server_id", s("broken"), "timeout", s("soon")))
	r := New(env.Client, env.Tables.Servers, Options{})
	if _, err := r.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown id: err = %v, want ErrNotFound", err)
	}
	if _, err := r.Get(ctx, "bad id with spaces"); !errors.Is(err, ErrNotFound) {
		t.Errorf("invalid id: err = %v, want ErrNotFound", err)
	}
	_, err := r.Get(ctx, "broken")
	var inv *InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("invalid item: err = %v, want *InvalidError", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "timeout" {
		t.Errorf("invalid item: err = %v, want a FieldError for timeout", err)
	}
}

func TestGetSharesConcurrentMisses(t *testing.T) {
	env := storetest.NewEnv(t)
	put(t, env, base())
	api := &countingAPI{API: env.Client}
	r := New(api, env.Tables.Servers, Options{CacheTTL: time.Minute})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if _, err := r.Get(context.Background(), "demo"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Misses that overlap share one read and later ones hit the cache. A
	// goroutine that saw the empty cache but reached the shared read only
	// after it finished starts one more, hence the small allowance.
	if got := api.gets.Load(); got < 1 || got > 3 {
		t.Errorf("reads = %d for 50 concurrent gets, want 1 (at most 3)", got)
	}
}

func TestStoreErrorIsNotCached(t *testing.T) {
	env := storetest.NewEnv(t)
	r := New(env.Client, "no-such-table", Options{})
	if _, err := r.Get(context.Background(), "demo"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want a store error", err)
	}
}

func TestList(t *testing.T) {
	env := storetest.NewEnv(t)
	put(t, env, base())
	put(t, env, with("server_id", s("two"), "max_concurrent_requests", n("2")))
	put(t, env, with("server_id", s("bad"), "transport", s("carrier-pigeon")))
	r := New(env.Client, env.Tables.Servers, Options{})
	servers, invalid, err := r.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 2 || len(invalid) != 1 {
		t.Fatalf("got %d servers and %d invalid, want 2 and 1", len(servers), len(invalid))
	}
}

// failingAPI fails every call once failing is set.
type failingAPI struct {
	API
	failing atomic.Bool
}

func (f *failingAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.failing.Load() {
		return nil, errors.New("store down")
	}
	return f.API.GetItem(ctx, in, opts...)
}

func TestStaleServedWhileStoreFails(t *testing.T) {
	env := storetest.NewEnv(t)
	put(t, env, with("max_concurrent_requests", n("2")))
	api := &failingAPI{API: env.Client}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := New(api, env.Tables.Servers, Options{CacheTTL: time.Second, MaxStale: time.Minute, Now: clock.Now})
	if _, err := r.Get(context.Background(), "demo"); err != nil {
		t.Fatal(err)
	}
	api.failing.Store(true)
	clock.Advance(30 * time.Second)
	srv, err := r.Get(context.Background(), "demo")
	if err != nil || srv.MaxConcurrent != 2 {
		t.Fatalf("during the outage: %v %v, want the cached item", srv, err)
	}
	clock.Advance(time.Minute)
	if _, err := r.Get(context.Background(), "demo"); err == nil {
		t.Fatal("an item older than MaxStale was served")
	}
}

// A server the registry returns carries its identity hash, computed from
// its own item: the same as a Server with the same fields computes, and
// another for another upstream, through Get and All alike.
func TestRegistryServersCarryTheirIdentityHash(t *testing.T) {
	env := storetest.NewEnv(t)
	put(t, env, base())
	put(t, env, with("server_id", s("other"), "url", s("http://127.0.0.1:9001/mcp")))
	r := New(env.Client, env.Tables.Servers, Options{})
	ctx := context.Background()
	demo, err := r.Get(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	other, err := r.Get(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	all, _, err := r.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if demo.identity == "" || len(all) != 2 || all[0].identity == "" || all[1].identity == "" {
		t.Fatal("a server read by the registry carries no identity hash")
	}
	for _, srv := range append(all, demo, other) {
		made := *srv
		made.identity = ""
		if srv.IdentityHash() != made.IdentityHash() {
			t.Errorf("server %s: identity hash %s, computed %s", srv.ID, srv.IdentityHash(), made.IdentityHash())
		}
	}
	if demo.IdentityHash() == other.IdentityHash() {
		t.Error("two upstreams share an identity hash")
	}
}
