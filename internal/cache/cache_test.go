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
