package metrics_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/metrics/metricstest"
)

var fixed = time.UnixMilli(1_767_225_600_123)

func fixedClock() time.Time { return fixed }

// newTest returns an emitter writing to a buffer; lines returns the lines
// written so far.
func newTest(t *testing.T, opts Options) (*Emitter, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var buf bytes.Buffer
	if opts.Clock == nil {
		opts.Clock = fixedClock
	}
	e := New(lockedWriter{&mu, &buf}, opts)
	return e, func() []string {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		s := strings.TrimSuffix(buf.String(), "\n")
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func mustParse(t *testing.T, line string) *metricstest.Record {
	t.Helper()
	return metricstest.MustParse(t, line)
}

func TestConcurrentLinesDoNotInterleave(t *testing.T) {
	const goroutines, each = 32, 50
	e, lines := newTest(t, Options{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				c := Call{
					ServerID:  fmt.Sprintf("srv-%d", g),
					Tool:      strings.Repeat("t", 1+i*7), // lines of different lengths
					Outcome:   "ok",
					Latency:   time.Duration(i) * time.Millisecond,
					RequestID: fmt.Sprintf("%d-%d", g, i),
				}
				if err := e.Call(c); err != nil {
					t.Errorf("Call: %v", err)
				}
			}
		})
	}
	wg.Wait()
	got := lines()
	if len(got) != goroutines*each {
		t.Fatalf("got %d lines, want %d", len(got), goroutines*each)
	}
	seen := map[string]bool{}
	for _, l := range got {
		r := mustParse(t, l)
		id, _ := r.String(PropRequestID)
		if seen[id] {
			t.Errorf("request %s written twice", id)
		}
		seen[id] = true
	}
}

func TestWriteErrorIsReturned(t *testing.T) {
	boom := errors.New("boom")
	e := New(writerFunc(func([]byte) (int, error) { return 0, boom }), Options{})
	if err := e.Call(Call{ServerID: "s"}); !errors.Is(err, boom) {
		t.Errorf("Call: got %v, want the writer's error", err)
	}
}

func TestDisabledAndNil(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, Options{Disabled: true})
	var n *Emitter
	for _, em := range []*Emitter{e, n} {
		if err := em.Call(Call{ServerID: "s"}); err != nil {
			t.Errorf("Call: %v", err)
		}
		if err := em.BreakerTransition("s", "t", "closed", "open"); err != nil {
			t.Errorf("BreakerTransition: %v", err)
		}
		if err := em.Exchange(Exchange{ServerID: "s"}); err != nil {
			t.Errorf("Exchange: %v", err)
		}
		if err := em.StoreStats(StoreStats{}); err != nil {
			t.Errorf("StoreStats: %v", err)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("disabled emitter wrote %q", buf.String())
	}
}

func BenchmarkCall(b *testing.B) {
	e := New(io.Discard, Options{})
	c := Call{
		ServerID: "github", Tool: "search_issues", Outcome: "ok",
		Latency: 123456 * time.Microsecond, QueueWait: 2 * time.Millisecond,
		InFlightAfterAcquire: 3, InFlightKnown: true,
		RequestID: "5f0c6a8e-9d3b-4c1e-a2f7-0b8e1d2c3a4f", LeaseID: "i-0abc.42",
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Call(c); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOneWritePerLine checks that every Write call gets exactly one
// complete line.
func TestOneWritePerLine(t *testing.T) {
	var mu sync.Mutex
	var writes [][]byte
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		writes = append(writes, bytes.Clone(p))
		return len(p), nil
	})
	e := New(w, Options{})
	for i := range 20 {
		_ = e.Call(Call{ServerID: "s", Tool: "t", RequestID: fmt.Sprint(i)})
	}
	if len(writes) != 20 {
		t.Fatalf("got %d writes, want 20", len(writes))
	}
	for _, p := range writes {
		sc := bufio.NewScanner(bytes.NewReader(p))
		n := 0
		for sc.Scan() {
			n++
		}
		if n != 1 || p[len(p)-1] != '\n' {
			t.Errorf("write %q: want one newline-terminated line", p)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
