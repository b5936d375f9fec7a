package cache

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestLoaderCachesRefreshesAndServesStale(t *testing.T) {
	var loads atomic.Int64
	var failing atomic.Bool
	c := &clock{t: time.Unix(0, 0)}
	l := &Loader[string]{
		TTL: time.Second, MaxStale: time.Minute, Now: c.Now,
		Load: func(_ context.Context, key string) (string, error) {
			if failing.Load() {
				return "", errors.New("down")
			}
			return key + strconv.FormatInt(loads.Add(1), 10), nil
		},
	}
	get := func() string {
		v, err := l.Get(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := get(); v != "k1" {
		t.Fatalf("first get %q", v)
	}
	if v := get(); v != "k1" {
		t.Fatalf("within TTL: %q, want the cached k1", v)
	}
	c.Add(time.Second)
	if v := get(); v != "k2" {
		t.Fatalf("after TTL: %q, want a new load", v)
	}
	failing.Store(true)
	c.Add(30 * time.Second)
	if v := get(); v != "k2" {
		t.Fatalf("while loads fail: %q, want the stale k2", v)
	}
	c.Add(time.Minute)
	if _, err := l.Get(context.Background(), "k"); err == nil {
		t.Fatal("a value older than MaxStale was served")
	}
}

func TestLoaderSharesConcurrentMisses(t *testing.T) {
	var loads atomic.Int64
	release := make(chan struct{})
	l := &Loader[int]{TTL: time.Minute, Load: func(context.Context, string) (int, error) {
		loads.Add(1)
		<-release
		return 1, nil
	}}
	var wg sync.WaitGroup
	started := make(chan struct{}, 20)
	for range 20 {
		wg.Go(func() {
			started <- struct{}{}
			if _, err := l.Get(context.Background(), "k"); err != nil {
				t.Error(err)
			}
		})
	}
	for range 20 {
		<-started
	}
	close(release)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Errorf("%d loads for 20 concurrent gets, want 1", n)
	}
}

func TestLoaderBounded(t *testing.T) {
	l := &Loader[int]{TTL: time.Minute, Max: 3, Load: func(_ context.Context, k string) (int, error) { return len(k), nil }}
	for i := range 10 {
		if _, err := l.Get(context.Background(), strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	l.mu.Lock()
	n := len(l.m)
	l.mu.Unlock()
	if n > 3 {
		t.Errorf("%d entries held, max 3", n)
	}
}

// Past its bound the cache drops the key used least recently, not every
// key: a flood of new keys does not evict a key in use, nor make it cost a
// load again.
func TestLoaderEvictsLeastRecentlyUsed(t *testing.T) {
	loads := map[string]int{}
	l := &Loader[int]{TTL: time.Minute, Max: 4, Load: func(_ context.Context, k string) (int, error) {
		loads[k]++
		return len(k), nil
	}}
	get := func(k string) {
		t.Helper()
		if _, err := l.Get(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	get("in-use")
	for i := range 100 {
		get("flood-" + strconv.Itoa(i))
		get("in-use") // used between every two new keys
	}
	if loads["in-use"] != 1 {
		t.Errorf("the key in use was loaded %d times during the flood, want 1", loads["in-use"])
	}
	l.mu.Lock()
	n := len(l.m)
	l.mu.Unlock()
	if n != 4 {
		t.Errorf("%d entries held, want the bound, 4", n)
	}
	get("flood-99") // among the last used: still held
	if loads["flood-99"] != 1 {
		t.Errorf("a recent key was loaded %d times, want 1", loads["flood-99"])
	}
}

// A caller whose ctx ends while a load is under way returns at once, with
// a value younger than MaxStale if there is one, else ctx's error; the
// load goes on, and its value serves the callers that waited and the ones
// after.
func TestLoaderGetReturnsWhenCallerGivesUp(t *testing.T) {
	var loads atomic.Int64
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	c := &clock{t: time.Unix(0, 0)}
	l := &Loader[string]{TTL: time.Second, MaxStale: time.Minute, Now: c.Now, Load: func(ctx context.Context, key string) (string, error) {
		n := loads.Add(1)
		if n > 1 {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return key + strconv.FormatInt(n, 10), nil
	}}
	get := func(ctx context.Context) (string, error) { return l.Get(ctx, "k") }

	if v, err := get(context.Background()); err != nil || v != "k1" {
		t.Fatalf("first get = %q, %v", v, err)
	}
	c.Add(time.Second)
	waited := make(chan string)
	go func() {
		v, err := get(context.Background())
		if err != nil {
			t.Error(err)
		}
		waited <- v
	}()
	<-started

	// Given up while the load is under way: the stale value, at once.
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	if v, err := get(ctx); err != nil || v != "k1" {
		t.Fatalf("given up with a stale value held = %q, %v; want k1", v, err)
	}
	// Nothing held: ctx's error, at once.
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := l.Get(ctx, "other")
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("given up with nothing held: %v, want context.Canceled", err)
	}

	close(release)
	if v := <-waited; v != "k2" {
		t.Fatalf("the caller that waited got %q, want k2", v)
	}
	if v, err := get(context.Background()); err != nil || v != "k2" || loads.Load() != 3 {
		t.Fatalf("after the load = %q, %v, %d loads; want k2 from memory", v, err, loads.Load())
	}
	if v, err := l.Get(context.Background(), "other"); err != nil || v != "other3" || loads.Load() != 3 {
		t.Fatalf("the load given up on went on: Get = %q, %v, %d loads; want other3 from memory", v, err, loads.Load())
	}
}

// Reload loads again unless keep accepts what is held, sharing one load
// with concurrent Reloads and Gets; keep sees when the value was loaded,
// and when a Reload last loaded it. Here keep is a rule of the kind a
// credential refused as stale calls for: keep a value other than the
// stale one, or one reloaded within a floor.
func TestLoaderReload(t *testing.T) {
	var loads atomic.Int64
	var failing atomic.Bool
	c := &clock{t: time.Unix(0, 0)}
	l := &Loader[string]{TTL: time.Minute, MaxStale: time.Hour, Now: c.Now, Load: func(_ context.Context, key string) (string, error) {
		if failing.Load() {
			return "", errors.New("down")
		}
		return key + strconv.FormatInt(loads.Add(1), 10), nil
	}}
	const floor = time.Second
	unless := func(stale string) func(Held[string]) bool {
		return func(h Held[string]) bool { return h.Value != stale || c.Now().Sub(h.Reloaded) < floor }
	}
	ctx := context.Background()
	if v, _ := l.Get(ctx, "k"); v != "k1" {
		t.Fatalf("first get %q", v)
	}
	// Ten Reloads and ten Gets at once, right after the Get's load: one
	// load between them.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if v, err := l.Reload(ctx, "k", unless("k1")); err != nil || v != "k2" {
				t.Errorf("Reload = %q, %v; want k2", v, err)
			}
		})
		wg.Go(func() {
			if _, err := l.Get(ctx, "k"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := loads.Load(); n != 2 {
		t.Fatalf("%d loads in all, want 2", n)
	}
	// The new value refused too, within the floor: nothing loaded.
	if v, _ := l.Reload(ctx, "k", unless("k2")); v != "k2" || loads.Load() != 2 {
		t.Fatalf("Reload within the floor = %q, %d loads", v, loads.Load())
	}
	c.Add(floor)
	if v, _ := l.Reload(ctx, "k", unless("k2")); v != "k3" || loads.Load() != 3 {
		t.Fatalf("Reload after the floor = %q, %d loads; want k3 from one load", v, loads.Load())
	}
	if v, _ := l.Get(ctx, "k"); v != "k3" || loads.Load() != 3 {
		t.Fatalf("Get after Reload = %q, %d loads; want k3 from memory", v, loads.Load())
	}

	// What keep sees: a Get's load leaves Reloaded as it was.
	reloadedAt := c.Now()
	c.Add(time.Minute)
	if v, _ := l.Get(ctx, "k"); v != "k4" {
		t.Fatalf("Get after the TTL = %q, want k4", v)
	}
	var seen Held[string]
	if v, _ := l.Reload(ctx, "k", func(h Held[string]) bool { seen = h; return true }); v != "k4" || loads.Load() != 4 {
		t.Fatalf("Reload kept = %q, %d loads; want k4 as held", v, loads.Load())
	}
	if want := (Held[string]{Value: "k4", Loaded: c.Now(), Reloaded: reloadedAt}); seen != want {
		t.Fatalf("keep saw %+v, want %+v", seen, want)
	}

	// A failed reload returns its error; Get still serves the stale value.
	failing.Store(true)
	if _, err := l.Reload(ctx, "k", func(Held[string]) bool { return false }); err == nil {
		t.Fatal("a failed Reload served a value")
	}
	c.Add(time.Minute)
	if v, err := l.Get(ctx, "k"); err != nil || v != "k4" {
		t.Fatalf("Get while loads fail = %q, %v; want the stale k4", v, err)
	}
}
