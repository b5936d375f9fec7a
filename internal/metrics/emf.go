package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"
)

// DefaultNamespace is the CloudWatch namespace when Options.Namespace is "".
const DefaultNamespace = "mcpgate"

// ErrInvalid is returned for a record without the server it is about: it
// is not written (CloudWatch refuses an empty dimension value).
var ErrInvalid = errors.New("metrics: invalid record")

// Unit is a CloudWatch metric unit.
type Unit string

// The units the gateway's records use.
const (
	Milliseconds Unit = "Milliseconds"
	Count        Unit = "Count"
	None         Unit = "None"
)

// Options configures an Emitter. The zero value means defaults.
type Options struct {
	// Namespace is the CloudWatch namespace; "" means DefaultNamespace.
	Namespace string
	// Clock gives each record's timestamp; nil means time.Now.
	Clock func() time.Time
	// Disabled makes New return nil: an Emitter that writes nothing.
	Disabled bool
}

// Emitter writes EMF records to an io.Writer, each in one Write call. Its
// methods are safe for concurrent use. A nil *Emitter does nothing.
type Emitter struct {
	mu    sync.Mutex
	w     io.Writer
	ns    string
	clock func() time.Time
	buf   bytes.Buffer
	enc   *json.Encoder
}

// New returns an Emitter writing to w; nil when opts.Disabled or w is nil.
func New(w io.Writer, opts Options) *Emitter {
	if opts.Disabled || w == nil {
		return nil
	}
	e := &Emitter{w: w, ns: opts.Namespace, clock: opts.Clock}
	if e.ns == "" {
		e.ns = DefaultNamespace
	}
	if e.clock == nil {
		e.clock = time.Now
	}
	e.enc = json.NewEncoder(&e.buf)
	// Tool names may hold <, > or &: JSON, never HTML.
	e.enc.SetEscapeHTML(false)
	return e
}

// meta is a record's _aws member: one directive in the namespace.
type meta struct {
	Timestamp         int64
	CloudWatchMetrics [1]directive
}

type directive struct {
	Namespace  string
	Dimensions [][]string
	Metrics    []metricDef
}

type metricDef struct {
	Name string
	Unit Unit
}

// meta returns the _aws member of a record with the dimension sets and
// metrics given, stamped now.
func (e *Emitter) meta(sets [][]string, defs []metricDef) meta {
	return meta{Timestamp: e.clock().UnixMilli(), CloudWatchMetrics: [1]directive{{Namespace: e.ns, Dimensions: sets, Metrics: defs}}}
}

// write marshals line (a record struct whose first member is _aws) and
// writes it, newline-terminated, in one call.
func (e *Emitter) write(line any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buf.Reset()
	if err := e.enc.Encode(line); err != nil {
		return err
	}
	_, err := e.w.Write(e.buf.Bytes())
	return err
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
