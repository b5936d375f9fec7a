package metrics

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

var fixed = time.UnixMilli(1_767_225_600_123)

func fixedClock() time.Time { return fixed }

// newTest returns an emitter writing to a buffer; lines flushes it and
// returns the lines written so far.
func newTest(t *testing.T, opts Options) (*Emitter, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var buf bytes.Buffer
	if opts.Clock == nil {
		opts.Clock = fixedClock
	}
	e := New(lockedWriter{&mu, &buf}, opts)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e, func() []string {
		t.Helper()
		if err := e.Flush(context.Background()); err != nil {
			t.Fatalf("Flush: %v", err)
		}
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

func mustParse(t *testing.T, line string) *Record {
	t.Helper()
	r, err := Parse([]byte(line))
	if err != nil {
		t.Fatalf("Parse(%s): %v", line, err)
	}
	return r
}

func TestEmitRoundTrip(t *testing.T) {
	e, lines := newTest(t, Options{Namespace: "test/ns"})
	err := e.Emit(Entry{
		Dimensions: []Dimension{{"Svc", "a\"b\\c\n\x01\u2028é\xff"}},
		Metrics: []Metric{
			{"Int", Count, 42},
			{"Frac", Milliseconds, 1.5},
			{"Tiny", "", 1e-7},
			{"Big", None, 1e20},
			{"Neg", None, -3},
		},
		Properties: []Property{{"Note", "x"}},
	})
	if err != nil {
		t.Fatalf("Emit: %v", err)
	}
	got := lines()
	if len(got) != 1 {
		t.Fatalf("got %d lines, want 1: %q", len(got), got)
	}
	r := mustParse(t, got[0])
	if !r.Timestamp.Equal(fixed) {
		t.Errorf("Timestamp = %v, want %v", r.Timestamp, fixed)
	}
	if len(r.Directives) != 1 || r.Directives[0].Namespace != "test/ns" {
		t.Fatalf("directives = %+v, want one in test/ns", r.Directives)
	}
	if got, want := fmt.Sprint(r.Directives[0].Dimensions), "[[Svc]]"; got != want {
		t.Errorf("Dimensions = %s, want %s", got, want)
	}
	if v, _ := r.String("Svc"); v != "a\"b\\c\n\x01\u2028é\ufffd" {
		t.Errorf("Svc = %q, want the value back with U+FFFD for the bad byte", v)
	}
	for _, want := range []struct {
		name  string
		unit  Unit
		value float64
	}{{"Int", Count, 42}, {"Frac", Milliseconds, 1.5}, {"Tiny", None, 1e-7}, {"Big", None, 1e20}, {"Neg", None, -3}} {
		def, vs, ok := r.Metric(want.name)
		if !ok || def.Unit != want.unit || len(vs) != 1 || vs[0] != want.value {
			t.Errorf("metric %s = %+v %v %v, want unit %s value %v", want.name, def, vs, ok, want.unit, want.value)
		}
	}
	if v, _ := r.String("Note"); v != "x" {
		t.Errorf("Note = %q, want x", v)
	}
	if s := e.Stats(); s != (Stats{Written: 1}) {
		t.Errorf("Stats = %+v, want 1 written", s)
	}
}

func TestEmitNoDimensions(t *testing.T) {
	e, lines := newTest(t, Options{})
	if err := e.Emit(Entry{Metrics: []Metric{{"M", Count, 1}}}); err != nil {
		t.Fatal(err)
	}
	line := lines()[0]
	if !strings.Contains(line, `"Dimensions":[[]]`) {
		t.Errorf("line %s: want an empty dimension set", line)
	}
	if r := mustParse(t, line); r.Directives[0].Namespace != DefaultNamespace {
		t.Errorf("namespace = %q, want %q", r.Directives[0].Namespace, DefaultNamespace)
	}
}

func TestEmitInvalid(t *testing.T) {
	many := func(n int) []Metric {
		ms := make([]Metric, n)
		for i := range ms {
			ms[i] = Metric{Name: fmt.Sprintf("m%d", i), Value: 1}
		}
		return ms
	}
	manyDims := func(n int) []Dimension {
		ds := make([]Dimension, n)
		for i := range ds {
			ds[i] = Dimension{fmt.Sprintf("d%d", i), "v"}
		}
		return ds
	}
	one := []Metric{{"M", Count, 1}}
	long := strings.Repeat("é", MaxNameLen+1)
	for _, tc := range []struct {
		name string
		en   Entry
	}{
		{"no metrics", Entry{}},
		{"101 metrics", Entry{Metrics: many(MaxMetrics + 1)}},
		{"empty metric name", Entry{Metrics: []Metric{{"", Count, 1}}}},
		{"long metric name", Entry{Metrics: []Metric{{long, Count, 1}}}},
		{"NaN", Entry{Metrics: []Metric{{"M", Count, math.NaN()}}}},
		{"+Inf", Entry{Metrics: []Metric{{"M", Count, math.Inf(1)}}}},
		{"-Inf", Entry{Metrics: []Metric{{"M", Count, math.Inf(-1)}}}},
		{"beyond 2^360", Entry{Metrics: []Metric{{"M", Count, math.Ldexp(1, 361)}}}},
		{"unknown unit", Entry{Metrics: []Metric{{"M", "Furlongs", 1}}}},
		{"unit in wrong case", Entry{Metrics: []Metric{{"M", "count", 1}}}},
		{"31 dimensions", Entry{Dimensions: manyDims(MaxDimensions + 1), Metrics: one}},
		{"31 in a set", Entry{Dimensions: manyDims(MaxDimensions + 1), Sets: [][]string{{"d0"}, func() []string {
			s := make([]string, MaxDimensions+1)
			for i := range s {
				s[i] = fmt.Sprintf("d%d", i)
			}
			return s
		}()}, Metrics: one}},
		{"empty dimension name", Entry{Dimensions: []Dimension{{"", "v"}}, Metrics: one}},
		{"empty dimension value", Entry{Dimensions: []Dimension{{"D", ""}}, Metrics: one}},
		{"long dimension value", Entry{Dimensions: []Dimension{{"D", long}}, Metrics: one}},
		{"set names unknown dimension", Entry{Dimensions: []Dimension{{"D", "v"}}, Sets: [][]string{{"E"}}, Metrics: one}},
		{"empty property name", Entry{Metrics: one, Properties: []Property{{"", "v"}}}},
		{"metric twice", Entry{Metrics: []Metric{{"M", Count, 1}, {"M", Count, 2}}}},
		{"metric named like dimension", Entry{Dimensions: []Dimension{{"M", "v"}}, Metrics: one}},
		{"property named like metric", Entry{Metrics: one, Properties: []Property{{"M", "v"}}}},
		{"property named _aws", Entry{Metrics: one, Properties: []Property{{"_aws", "v"}}}},
		{"too big", Entry{Metrics: one, Properties: []Property{{"P", strings.Repeat("x", MaxRecordBytes)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, lines := newTest(t, Options{})
			err := e.Emit(tc.en)
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Emit: got %v, want ErrInvalid", err)
			}
			if got := lines(); len(got) != 0 {
				t.Errorf("wrote %q, want nothing", got)
			}
			if s := e.Stats(); s != (Stats{Invalid: 1}) {
				t.Errorf("Stats = %+v, want 1 invalid", s)
			}
		})
	}
}

func TestEmitLimitsAccepted(t *testing.T) {
	e, lines := newTest(t, Options{})
	ms := make([]Metric, MaxMetrics)
	for i := range ms {
		ms[i] = Metric{Name: fmt.Sprintf("m%d", i), Unit: Count, Value: float64(i)}
	}
	ds := make([]Dimension, MaxDimensions)
	for i := range ds {
		ds[i] = Dimension{fmt.Sprintf("d%d", i), strings.Repeat("v", MaxNameLen)}
	}
	ms[0].Name = strings.Repeat("n", MaxNameLen)
	if err := e.Emit(Entry{Dimensions: ds, Metrics: ms}); err != nil {
		t.Fatalf("Emit at the limits: %v", err)
	}
	r := mustParse(t, lines()[0])
	if got := len(r.Directives[0].Metrics); got != MaxMetrics {
		t.Errorf("got %d metrics, want %d", got, MaxMetrics)
	}
	if got := len(r.Directives[0].Dimensions[0]); got != MaxDimensions {
		t.Errorf("got %d dimensions, want %d", got, MaxDimensions)
	}
}

func TestNamespaceTooLong(t *testing.T) {
	e, _ := newTest(t, Options{Namespace: strings.Repeat("n", MaxNamespaceLen+1)})
	if err := e.Emit(Entry{Metrics: []Metric{{"M", Count, 1}}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Emit: got %v, want ErrInvalid", err)
	}
}

func TestConcurrentLinesDoNotInterleave(t *testing.T) {
	const goroutines, each = 32, 50
	e, lines := newTest(t, Options{QueueSize: goroutines * each})
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
	if s := e.Stats(); s != (Stats{Written: goroutines * each}) {
		t.Errorf("Stats = %+v, want %d written", s, goroutines*each)
	}
}

// failingWriter fails every other write, and panics on the third.
type failingWriter struct {
	mu    sync.Mutex
	n     int
	lines []string
}

func (f *failingWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	switch {
	case f.n == 3:
		panic("writer exploded")
	case f.n%2 == 0:
		return 0, errors.New("disk full")
	case f.n == 5:
		return len(p) - 1, nil // short write without an error
	}
	f.lines = append(f.lines, string(p))
	return len(p), nil
}

func TestWriteErrorsAreCounted(t *testing.T) {
	fw := &failingWriter{}
	e := New(fw, Options{Clock: fixedClock})
	for i := range 7 {
		if err := e.Emit(Entry{Metrics: []Metric{{"M", Count, float64(i)}}}); err != nil {
			t.Fatalf("Emit %d: %v", i, err)
		}
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Writes 1 and 7 succeed; 2, 4, 6 fail, 3 panics, 5 is short.
	if s := e.Stats(); s != (Stats{Written: 2, WriteErrors: 5}) {
		t.Errorf("Stats = %+v, want 2 written, 5 write errors", s)
	}
	for _, l := range fw.lines {
		mustParse(t, l)
	}
}

// blockingWriter blocks each Write until release is closed, telling
// entered when the first Write starts.
type blockingWriter struct {
	entered chan struct{}
	once    sync.Once
	release chan struct{}
	n       int
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	b.n++
	return len(p), nil
}

func TestStuckWriterDoesNotBlock(t *testing.T) {
	const size = 4
	bw := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	e := New(bw, Options{QueueSize: size, Clock: fixedClock})
	one := Entry{Metrics: []Metric{{"M", Count, 1}}}
	if err := e.Emit(one); err != nil {
		t.Fatal(err)
	}
	<-bw.entered // the writer holds the first record, the queue is empty
	for i := range size {
		if err := e.Emit(one); err != nil {
			t.Fatalf("Emit %d: %v", i, err)
		}
	}
	for range 3 {
		if err := e.Emit(one); !errors.Is(err, ErrDropped) {
			t.Fatalf("Emit on a full queue: got %v, want ErrDropped", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Flush with a stuck writer: got %v, want context.Canceled", err)
	}
	close(bw.release)
	if err := e.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if s := e.Stats(); s != (Stats{Written: size + 1, Dropped: 3}) {
		t.Errorf("Stats = %+v, want %d written, 3 dropped", s, size+1)
	}
	if err := e.Emit(one); !errors.Is(err, ErrClosed) {
		t.Errorf("Emit after Close: got %v, want ErrClosed", err)
	}
	if err := e.Flush(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close: got %v, want ErrClosed", err)
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
		if err := em.Emit(Entry{}); err != nil {
			t.Errorf("Emit: %v", err)
		}
		if err := em.BreakerTransition("s", "t", "closed", "open"); err != nil {
			t.Errorf("BreakerTransition: %v", err)
		}
		if err := em.StoreStats(StoreStats{}); err != nil {
			t.Errorf("StoreStats: %v", err)
		}
		if err := em.Flush(context.Background()); err != nil {
			t.Errorf("Flush: %v", err)
		}
		if err := em.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		if s := em.Stats(); s != (Stats{}) {
			t.Errorf("Stats = %+v, want zero", s)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("disabled emitter wrote %q", buf.String())
	}
}

func TestAppendNumberIsJSON(t *testing.T) {
	for _, v := range []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-300, 1e15, 1e21, 123456.789, math.MaxFloat64, math.SmallestNonzeroFloat64} {
		line := string(append(appendNumber([]byte(`{"_aws":{"Timestamp":0,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M"}]}]},"M":`), v), '}'))
		r := mustParse(t, line)
		if _, vs, _ := r.Metric("M"); len(vs) != 1 || vs[0] != v {
			t.Errorf("%v came back as %v", v, vs)
		}
	}
}

func BenchmarkCall(b *testing.B) {
	e := New(io.Discard, Options{QueueSize: 1 << 16})
	defer func() { _ = e.Close(context.Background()) }()
	c := Call{
		ServerID: "github", Tool: "search_issues", Outcome: "ok",
		Latency: 123456 * time.Microsecond, QueueWait: 2 * time.Millisecond,
		InFlightAfterAcquire: 3, InFlightKnown: true,
		RequestID: "5f0c6a8e-9d3b-4c1e-a2f7-0b8e1d2c3a4f", LeaseID: "i-0abc.42",
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Call(c); err != nil && !errors.Is(err, ErrDropped) {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	_ = e.Flush(context.Background())
	s := e.Stats()
	b.ReportMetric(float64(s.Dropped)/float64(s.Written+s.Dropped), "dropped/op")
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
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
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
