package catalog

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// counter is a fetch that counts its calls.
type counter struct {
	n    atomic.Int64
	data []byte
	ttl  time.Duration
	err  error
	// gate, if not nil, holds every fetch until closed.
	gate chan struct{}
	// calls receives one value per fetch started.
	calls chan struct{}
}

func (c *counter) fetch(ctx context.Context) (Fetched, error) {
	c.n.Add(1)
	if c.calls != nil {
		c.calls <- struct{}{}
	}
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return Fetched{}, ctx.Err()
		}
	}
	if c.err != nil {
		return Fetched{}, c.err
	}
	return Fetched{Data: c.data, Scope: "public", TTL: c.ttl}, nil
}

func TestColdBurstListsOnce(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &counter{data: []byte(`[{"name":"a"}]`), ttl: time.Minute, gate: make(chan struct{}), calls: make(chan struct{}, 100)}
	const n = 12
	var wg sync.WaitGroup
	got := make([]Entry, n)
	errs := make([]error, n)
	for i := range n {
		// One Catalog per "instance", each its own owner.
		c := New(env.Client, env.Tables.Leases, Options{Owner: fmt.Sprint("i", i)})
		wg.Go(func() { got[i], errs[i] = c.Load(t.Context(), "quotes", "http u1", "", f.fetch) })
	}
	// One instance is listing, the others wait; let it finish.
	<-f.calls
	close(f.gate)
	wg.Wait()
	if f.n.Load() != 1 {
		t.Errorf("upstream listed %d times by %d cold instances, want 1", f.n.Load(), n)
	}
	for i := range n {
		if errs[i] != nil || !bytes.Equal(got[i].Data, f.data) || got[i].Version != got[0].Version {
			t.Errorf("instance %d: %+v, %v; want the shared list", i, got[i], errs[i])
		}
	}

	// Fresh: a new instance reads it; one that holds it reads only the head.
	c := New(env.Client, env.Tables.Leases, Options{})
	e, err := c.Load(t.Context(), "quotes", "http u1", "", f.fetch)
	if err != nil || !bytes.Equal(e.Data, f.data) || f.n.Load() != 1 {
		t.Fatalf("fresh read: %+v, %v, fetches %d", e, err, f.n.Load())
	}
	e, err = c.Load(t.Context(), "quotes", "http u1", e.Version, f.fetch)
	if err != nil || e.Data != nil || e.Version == "" {
		t.Fatalf("held version: %+v, %v; want no data", e, err)
	}

	// A changed endpoint, and an invalidation, each cost one new list.
	if _, err := c.Load(t.Context(), "quotes", "http u2", "", f.fetch); err != nil || f.n.Load() != 2 {
		t.Fatalf("new endpoint: %v, fetches %d, want 2", err, f.n.Load())
	}
	if _, err := c.Load(t.Context(), "quotes", "http u2", "", f.fetch); err != nil || f.n.Load() != 2 {
		t.Fatalf("after the new endpoint's list: %v, fetches %d, want 2", err, f.n.Load())
	}
	if err := c.Invalidate(t.Context(), "quotes"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Load(t.Context(), "quotes", "http u2", "", f.fetch); err != nil || f.n.Load() != 3 {
		t.Fatalf("after Invalidate: %v, fetches %d, want 3", err, f.n.Load())
	}
}

func TestExpiryAndStale(t *testing.T) {
	env := storetest.NewEnv(t)
	now := time.Now()
	clock := func() time.Time { return now }
	f := &counter{data: []byte(`[1]`), ttl: 10 * time.Second}
	a := New(env.Client, env.Tables.Leases, Options{Owner: "a", Now: clock})
	b := New(env.Client, env.Tables.Leases, Options{Owner: "b", Now: clock})
	first, err := a.Load(t.Context(), "s", "e", "", f.fetch)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(9 * time.Second)
	if _, err := b.Load(t.Context(), "s", "e", "", f.fetch); err != nil || f.n.Load() != 1 {
		t.Fatalf("within the TTL: %v, fetches %d", err, f.n.Load())
	}
	// Past the TTL, b is elected; while it lists, a serves the stale copy.
	now = now.Add(2 * time.Second)
	f.gate, f.calls = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan error)
	go func() { _, err := b.Load(t.Context(), "s", "e", "", f.fetch); done <- err }()
	<-f.calls
	e, err := a.Load(t.Context(), "s", "e", "", f.fetch)
	if err != nil || !e.Stale || e.Version != first.Version || !bytes.Equal(e.Data, f.data) {
		t.Fatalf("during the refresh: %+v, %v; want the stale list", e, err)
	}
	close(f.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f.n.Load() != 2 {
		t.Errorf("fetches %d, want 2 (one per TTL)", f.n.Load())
	}
}

func TestClaimOfADeadInstanceLapses(t *testing.T) {
	env := storetest.NewEnv(t)
	now := time.Now()
	clock := func() time.Time { return now }
	dead := New(env.Client, env.Tables.Leases, Options{Owner: "dead", Now: clock})
	// The dead instance won the claim and never wrote.
	if _, won, err := dead.claim(t.Context(), "s", head{}, now); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	f := &counter{data: []byte(`[]`), ttl: time.Minute}
	alive := New(env.Client, env.Tables.Leases, Options{Owner: "alive", Now: clock})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err := alive.Load(ctx, "s", "e", "", f.fetch)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || f.n.Load() != 0 {
		t.Fatalf("while the claim is live: %v, fetches %d; want a wait", err, f.n.Load())
	}
	now = now.Add(DefaultClaim + time.Millisecond)
	if _, err := alive.Load(t.Context(), "s", "e", "", f.fetch); err != nil || f.n.Load() != 1 {
		t.Fatalf("after the claim lapsed: %v, fetches %d; want one list", err, f.n.Load())
	}
}

func TestFailedListFreesTheClaim(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &counter{err: errors.New("upstream down")}
	c := New(env.Client, env.Tables.Leases, Options{})
	if _, err := c.Load(t.Context(), "s", "e", "", f.fetch); err == nil {
		t.Fatal("a failed list returned no error")
	}
	other := New(env.Client, env.Tables.Leases, Options{})
	f.err, f.data, f.ttl = nil, []byte(`[]`), time.Minute
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := other.Load(ctx, "s", "e", "", f.fetch); err != nil || f.n.Load() != 2 {
		t.Fatalf("next instance: %v, fetches %d; want it to list at once", err, f.n.Load())
	}
}

func TestLargeListIsSplit(t *testing.T) {
	env := storetest.NewEnv(t)
	// Random hex compresses to about half: several chunks.
	raw := make([]byte, 400<<10)
	_, _ = rand.Read(raw)
	data := []byte(hex.EncodeToString(raw))
	f := &counter{data: data, ttl: time.Minute}
	c := New(env.Client, env.Tables.Leases, Options{})
	if _, err := c.Load(t.Context(), "big", "e", "", f.fetch); err != nil {
		t.Fatal(err)
	}
	h, err := c.readHead(t.Context(), "big")
	if err != nil || h.chunks < 2 {
		t.Fatalf("head %+v, %v; want the list in several chunks", h, err)
	}
	for n := range h.chunks {
		out, err := env.Client.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(env.Tables.Leases),
			Key: map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: chunkKey("big", h.version, n)}}})
		if err != nil {
			t.Fatal(err)
		}
		if size := store.ItemSize(out.Item); size > 400_000 {
			t.Errorf("chunk %d is %d bytes, over DynamoDB's item limit", n, size)
		}
	}
	e, err := New(env.Client, env.Tables.Leases, Options{}).Load(t.Context(), "big", "e", "", f.fetch)
	if err != nil || !bytes.Equal(e.Data, data) || f.n.Load() != 1 {
		t.Fatalf("read back: %d bytes, %v, fetches %d", len(e.Data), err, f.n.Load())
	}

	// Past MaxChunks the list is not shared: the caller keeps its own.
	huge := make([]byte, (MaxChunks+1)*ChunkBytes)
	_, _ = rand.Read(huge)
	f2 := &counter{data: huge, ttl: time.Minute}
	e, err = c.Load(t.Context(), "huge", "e", "", f2.fetch)
	if !errors.Is(err, ErrTooLarge) || !bytes.Equal(e.Data, huge) {
		t.Fatalf("too large: %v; want ErrTooLarge with the list", err)
	}
}

// Invalidating a server that has no list writes nothing: an unlimited
// server keeps causing no store traffic.
func TestInvalidateWithoutAList(t *testing.T) {
	env := storetest.NewEnv(t)
	c := New(env.Client, env.Tables.Leases, Options{})
	if err := c.Invalidate(t.Context(), "nothing"); err != nil {
		t.Fatal(err)
	}
	out, err := env.Client.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(env.Tables.Leases)})
	if err != nil || len(out.Items) != 0 {
		t.Fatalf("%d items, %v; want none", len(out.Items), err)
	}
}

// A head whose chunks are gone (deleted by hand, say) is refreshed, not
// read forever.
func TestLostChunksAreRefreshed(t *testing.T) {
	env := storetest.NewEnv(t)
	f := &counter{data: []byte(`[1]`), ttl: time.Minute}
	c := New(env.Client, env.Tables.Leases, Options{})
	e, err := c.Load(t.Context(), "s", "e", "", f.fetch)
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.Client.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: aws.String(env.Tables.Leases),
		Key: map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: chunkKey("s", e.Version, 0)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := New(env.Client, env.Tables.Leases, Options{}).Load(ctx, "s", "e", "", f.fetch)
	if err != nil || !bytes.Equal(got.Data, f.data) || f.n.Load() != 2 {
		t.Fatalf("%+v, %v, fetches %d; want the list fetched again", got, err, f.n.Load())
	}
}

// A private list (cacheScope private) never enters the catalog: the head
// says only that it is private, with no chunks, and every instance learns
// that from it without listing the upstream again.
func TestPrivateListIsNeverShared(t *testing.T) {
	env := storetest.NewEnv(t)
	const secret = "session-of-one-caller"
	var lists atomic.Int64
	fetch := func(context.Context) (Fetched, error) {
		lists.Add(1)
		return Fetched{Data: []byte(`[{"name":"notes","description":"` + secret + `"}]`), Scope: ScopePrivate, TTL: time.Minute}, nil
	}
	first := New(env.Client, env.Tables.Leases, Options{Owner: "a"})
	e, err := first.Load(t.Context(), "notes", "http u1", "", fetch)
	if err != nil || e.Scope != ScopePrivate || e.Data != nil {
		t.Fatalf("first load: %+v, %v; want private, without data", e, err)
	}
	second := New(env.Client, env.Tables.Leases, Options{Owner: "b"})
	e, err = second.Load(t.Context(), "notes", "http u1", "", fetch)
	if err != nil || e.Scope != ScopePrivate || e.Data != nil || lists.Load() != 1 {
		t.Fatalf("second load: %+v, %v after %d lists; want private, without data, listed once", e, err, lists.Load())
	}
	out, err := env.Client.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(env.Tables.Leases)})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range out.Items {
		if k, _ := item[store.LimiterKeyAttr].(*types.AttributeValueMemberS); k != nil && k.Value != KeyPrefix+"notes" {
			t.Errorf("item %s written for a private list", k.Value)
		}
		if _, ok := item["list_data"]; ok {
			t.Error("list data written for a private list")
		}
	}
}
