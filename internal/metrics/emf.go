package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Limits of the format, checked by Emit and Parse.
const (
	// MaxMetrics is the most metrics in one directive.
	MaxMetrics = 100
	// MaxDimensions is the most dimensions in one dimension set.
	MaxDimensions = 30
	// MaxValues is the most values in one metric's array.
	MaxValues = 100
	// MaxNameLen is the longest metric, dimension or property name, and
	// the longest dimension value, in characters.
	MaxNameLen = 1024
	// MaxNamespaceLen is the longest namespace, in characters.
	MaxNamespaceLen = 255
	// MaxRecordBytes bounds one record, newline included (a CloudWatch
	// Logs event is at most 256 KiB).
	MaxRecordBytes = 256 << 10
)

// Defaults for Options.
const (
	DefaultNamespace = "mcpgate"
	DefaultQueueSize = 1024
)

// Errors returned by Emit and the methods built on it. Each is counted in
// Stats; none is fatal.
var (
	// ErrInvalid wraps every validation failure: the record was not
	// written.
	ErrInvalid = errors.New("metrics: invalid record")
	// ErrDropped means the queue was full (the writer is slow or stuck)
	// and the record was discarded.
	ErrDropped = errors.New("metrics: queue full, record dropped")
	// ErrClosed means Close was called; the record was discarded.
	ErrClosed = errors.New("metrics: emitter closed")
)

// Unit is a CloudWatch metric unit.
type Unit string

// The units CloudWatch accepts.
const (
	Seconds         Unit = "Seconds"
	Microseconds    Unit = "Microseconds"
	Milliseconds    Unit = "Milliseconds"
	Bytes           Unit = "Bytes"
	Kilobytes       Unit = "Kilobytes"
	Megabytes       Unit = "Megabytes"
	Gigabytes       Unit = "Gigabytes"
	Terabytes       Unit = "Terabytes"
	Bits            Unit = "Bits"
	Kilobits        Unit = "Kilobits"
	Megabits        Unit = "Megabits"
	Gigabits        Unit = "Gigabits"
	Terabits        Unit = "Terabits"
	Percent         Unit = "Percent"
	Count           Unit = "Count"
	BytesPerSecond  Unit = "Bytes/Second"
	KBytesPerSecond Unit = "Kilobytes/Second"
	MBytesPerSecond Unit = "Megabytes/Second"
	GBytesPerSecond Unit = "Gigabytes/Second"
	TBytesPerSecond Unit = "Terabytes/Second"
	BitsPerSecond   Unit = "Bits/Second"
	KBitsPerSecond  Unit = "Kilobits/Second"
	MBitsPerSecond  Unit = "Megabits/Second"
	GBitsPerSecond  Unit = "Gigabits/Second"
	TBitsPerSecond  Unit = "Terabits/Second"
	CountPerSecond  Unit = "Count/Second"
	None            Unit = "None"
)

// Valid reports whether u is one of the units CloudWatch accepts.
func (u Unit) Valid() bool {
	switch u {
	case Seconds, Microseconds, Milliseconds,
		Bytes, Kilobytes, Megabytes, Gigabytes, Terabytes,
		Bits, Kilobits, Megabits, Gigabits, Terabits,
		Percent, Count,
		BytesPerSecond, KBytesPerSecond, MBytesPerSecond, GBytesPerSecond, TBytesPerSecond,
		BitsPerSecond, KBitsPerSecond, MBitsPerSecond, GBitsPerSecond, TBitsPerSecond,
		CountPerSecond, None:
		return true
	}
	return false
}

// Metric is one metric of an Entry.
type Metric struct {
	// Name is the metric's name, also its member in the record.
	Name string
	// Unit is its unit; "" means None.
	Unit Unit
	// Value must be finite and within ±2^360 (CloudWatch's range).
	Value float64
}

// Dimension is one dimension's name and value.
type Dimension struct {
	Name, Value string
}

// Property is a member of the record that is not a metric: searchable in
// Logs Insights, not aggregated.
type Property struct {
	Name, Value string
}

// Entry is one record: a single directive in the Emitter's namespace.
type Entry struct {
	// Dimensions are the dimension values, written as string members.
	Dimensions []Dimension
	// Sets are the dimension sets, each a list of names from Dimensions;
	// none means one set of all Dimensions (an empty set when there are
	// no Dimensions: the metrics then have no dimension).
	Sets [][]string
	// Metrics are at least one and at most MaxMetrics.
	Metrics []Metric
	// Properties are written as string members.
	Properties []Property
}

// Options configures an Emitter. The zero value means defaults.
type Options struct {
	// Namespace is the CloudWatch namespace; "" means DefaultNamespace.
	Namespace string
	// Clock gives each record's timestamp; nil means time.Now.
	Clock func() time.Time
	// QueueSize is how many records may wait for the writer before new
	// ones are dropped; zero or less means DefaultQueueSize.
	QueueSize int
	// Disabled turns every method into a no-op that writes nothing and
	// starts no goroutine.
	Disabled bool
}

// Stats counts what an Emitter did with its records.
type Stats struct {
	// Written is the records written in full.
	Written int64
	// WriteErrors is the records whose Write failed or was short (or
	// panicked); each such record is lost, and the next one is tried.
	WriteErrors int64
	// Dropped is the records discarded because the queue was full or the
	// emitter was closed.
	Dropped int64
	// Invalid is the records refused by validation.
	Invalid int64
}

// Emitter writes EMF records to an io.Writer. Its methods are safe for
// concurrent use and never block on the writer: records are queued and
// written by one goroutine. A nil *Emitter, like a Disabled one, does
// nothing.
type Emitter struct {
	w       io.Writer
	ns      []byte // the namespace, JSON-encoded
	nsErr   error
	clock   func() time.Time
	queue   chan item
	stopped chan struct{}
	closed  atomic.Bool
	off     bool

	written, writeErrors, dropped, invalid atomic.Int64
}

// item is a queued record, or a marker: done is closed when the writer
// reaches it; stop ends the writer.
type item struct {
	buf  *[]byte
	done chan struct{}
	stop bool
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// New returns an Emitter writing to w and starts its writer goroutine,
// which runs until Close. An invalid Namespace makes every record fail
// with ErrInvalid.
func New(w io.Writer, opts Options) *Emitter {
	e := &Emitter{w: w, clock: opts.Clock, off: opts.Disabled || w == nil}
	if e.off {
		return e
	}
	if e.clock == nil {
		e.clock = time.Now
	}
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	if n := utf8.RuneCountInString(ns); n > MaxNamespaceLen {
		e.nsErr = fmt.Errorf("%w: namespace has %d characters, more than %d", ErrInvalid, n, MaxNamespaceLen)
	}
	e.ns = appendString(nil, ns)
	size := opts.QueueSize
	if size <= 0 {
		size = DefaultQueueSize
	}
	e.queue = make(chan item, size)
	e.stopped = make(chan struct{})
	go e.run()
	return e
}

// Stats returns the emitter's counters.
func (e *Emitter) Stats() Stats {
	if e == nil {
		return Stats{}
	}
	return Stats{
		Written:     e.written.Load(),
		WriteErrors: e.writeErrors.Load(),
		Dropped:     e.dropped.Load(),
		Invalid:     e.invalid.Load(),
	}
}

// Emit validates en, encodes it as one line and queues it. It returns an
// error wrapping ErrInvalid if en breaks a rule of the format, ErrDropped
// if the queue is full, ErrClosed after Close; every failure is counted,
// and the caller may ignore the error.
func (e *Emitter) Emit(en Entry) error {
	if e == nil || e.off {
		return nil
	}
	if e.closed.Load() {
		e.dropped.Add(1)
		return ErrClosed
	}
	if err := e.check(&en); err != nil {
		e.invalid.Add(1)
		return err
	}
	bp := bufPool.Get().(*[]byte)
	b := e.encode((*bp)[:0], &en)
	*bp = b
	if len(b) > MaxRecordBytes {
		putBuf(bp)
		e.invalid.Add(1)
		return fmt.Errorf("%w: record of %d bytes exceeds %d", ErrInvalid, len(b), MaxRecordBytes)
	}
	select {
	case e.queue <- item{buf: bp}:
		return nil
	default:
		putBuf(bp)
		e.dropped.Add(1)
		return ErrDropped
	}
}

// Flush waits until every record queued before it has been written (or
// failed), or ctx ends.
func (e *Emitter) Flush(ctx context.Context) error {
	if e == nil || e.off {
		return nil
	}
	if e.closed.Load() {
		return ErrClosed
	}
	done := make(chan struct{})
	select {
	case e.queue <- item{done: done}:
	case <-e.stopped:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("metrics: flush: %w", ctx.Err())
	}
	select {
	case <-done:
		return nil
	case <-e.stopped:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("metrics: flush: %w", ctx.Err())
	}
}

// Close writes the records already queued and stops the writer, or gives
// up when ctx ends (the writer then stops after its current Write).
// Records emitted after Close are dropped; one emitted while Close runs may
// be lost uncounted.
func (e *Emitter) Close(ctx context.Context) error {
	if e == nil || e.off {
		return nil
	}
	if e.closed.Swap(true) {
		return nil
	}
	select {
	case e.queue <- item{stop: true}:
	case <-ctx.Done():
		return fmt.Errorf("metrics: close: %w", ctx.Err())
	}
	select {
	case <-e.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("metrics: close: %w", ctx.Err())
	}
}

func (e *Emitter) run() {
	defer close(e.stopped)
	for it := range e.queue {
		switch {
		case it.buf != nil:
			if e.write(*it.buf) {
				e.written.Add(1)
			} else {
				e.writeErrors.Add(1)
			}
			putBuf(it.buf)
		case it.done != nil:
			close(it.done)
		case it.stop:
			return
		}
	}
}

// write writes one line in one call; a panicking writer counts as a
// failed write.
func (e *Emitter) write(b []byte) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	n, err := e.w.Write(b)
	return err == nil && n == len(b)
}

func putBuf(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		bufPool.Put(bp)
	}
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func checkName(kind, name string) error {
	if name == "" {
		return invalidf("empty %s name", kind)
	}
	if n := utf8.RuneCountInString(name); n > MaxNameLen {
		return invalidf("%s name of %d characters exceeds %d", kind, n, MaxNameLen)
	}
	return nil
}

// maxValue is CloudWatch's bound on the magnitude of a value.
var maxValue = math.Ldexp(1, 360)

func (e *Emitter) check(en *Entry) error {
	if e.nsErr != nil {
		return e.nsErr
	}
	if len(en.Metrics) == 0 {
		return invalidf("no metrics")
	}
	if len(en.Metrics) > MaxMetrics {
		return invalidf("%d metrics exceed %d", len(en.Metrics), MaxMetrics)
	}
	for _, m := range en.Metrics {
		if err := checkName("metric", m.Name); err != nil {
			return err
		}
		if m.Unit != "" && !m.Unit.Valid() {
			return invalidf("metric %q: unknown unit %q", m.Name, m.Unit)
		}
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) || math.Abs(m.Value) > maxValue {
			return invalidf("metric %q: value %v is not a finite number within ±2^360", m.Name, m.Value)
		}
	}
	for _, d := range en.Dimensions {
		if err := checkName("dimension", d.Name); err != nil {
			return err
		}
		if d.Value == "" {
			return invalidf("dimension %q: empty value", d.Name)
		}
		if n := utf8.RuneCountInString(d.Value); n > MaxNameLen {
			return invalidf("dimension %q: value of %d characters exceeds %d", d.Name, n, MaxNameLen)
		}
	}
	if len(en.Sets) == 0 && len(en.Dimensions) > MaxDimensions {
		return invalidf("%d dimensions in one set exceed %d", len(en.Dimensions), MaxDimensions)
	}
	for _, set := range en.Sets {
		if len(set) > MaxDimensions {
			return invalidf("%d dimensions in one set exceed %d", len(set), MaxDimensions)
		}
		for _, name := range set {
			if !hasDimension(en.Dimensions, name) {
				return invalidf("dimension set names %q, which has no value", name)
			}
		}
	}
	for _, p := range en.Properties {
		if err := checkName("property", p.Name); err != nil {
			return err
		}
	}
	if k, dup := duplicateKey(en); dup {
		return invalidf("member %q is defined twice or is reserved", k)
	}
	return nil
}

func hasDimension(ds []Dimension, name string) bool {
	for _, d := range ds {
		if d.Name == name {
			return true
		}
	}
	return false
}

// duplicateKey finds a root member named twice, or named _aws.
func duplicateKey(en *Entry) (string, bool) {
	nd, nm := len(en.Dimensions), len(en.Metrics)
	n := nd + nm + len(en.Properties)
	key := func(i int) string {
		switch {
		case i < nd:
			return en.Dimensions[i].Name
		case i < nd+nm:
			return en.Metrics[i-nd].Name
		default:
			return en.Properties[i-nd-nm].Name
		}
	}
	for i := 0; i < n; i++ {
		k := key(i)
		if k == "_aws" {
			return k, true
		}
		for j := i + 1; j < n; j++ {
			if key(j) == k {
				return k, true
			}
		}
	}
	return "", false
}

// encode appends en's line to b; en has been checked.
func (e *Emitter) encode(b []byte, en *Entry) []byte {
	b = append(b, `{"_aws":{"Timestamp":`...)
	b = appendInt(b, e.clock().UnixMilli())
	b = append(b, `,"CloudWatchMetrics":[{"Namespace":`...)
	b = append(b, e.ns...)
	b = append(b, `,"Dimensions":[`...)
	if len(en.Sets) == 0 {
		b = append(b, '[')
		for i, d := range en.Dimensions {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d.Name)
		}
		b = append(b, ']')
	}
	for i, set := range en.Sets {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for j, name := range set {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendString(b, name)
		}
		b = append(b, ']')
	}
	b = append(b, `],"Metrics":[`...)
	for i, m := range en.Metrics {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Name":`...)
		b = appendString(b, m.Name)
		b = append(b, `,"Unit":`...)
		u := m.Unit
		if u == "" {
			u = None
		}
		b = appendString(b, string(u))
		b = append(b, '}')
	}
	b = append(b, `]}]}`...)
	for _, d := range en.Dimensions {
		b = append(b, ',')
		b = appendString(b, d.Name)
		b = append(b, ':')
		b = appendString(b, d.Value)
	}
	for _, m := range en.Metrics {
		b = append(b, ',')
		b = appendString(b, m.Name)
		b = append(b, ':')
		b = appendNumber(b, m.Value)
	}
	for _, p := range en.Properties {
		b = append(b, ',')
		b = appendString(b, p.Name)
		b = append(b, ':')
		b = appendString(b, p.Value)
	}
	return append(b, '}', '\n')
}
