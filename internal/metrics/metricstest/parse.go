// Package metricstest parses and checks EMF lines against the format, for
// tests of what the gateway emits.
package metricstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/metrics"
)

// Limits of the format, checked by Parse.
const (
	// MaxMetrics is the most metrics in one directive.
	MaxMetrics = 100
	// MaxDimensions is the most dimensions in one dimension set.
	MaxDimensions = 30
	// MaxValues is the most values in one metric's array.
	MaxValues = 100
	// MaxNameLen is the longest metric name, in characters.
	MaxNameLen = 1024
	// MaxNamespaceLen is the longest namespace, in characters.
	MaxNamespaceLen = 255
)

// units are the units CloudWatch accepts.
var units = map[metrics.Unit]bool{}

func init() {
	for _, u := range strings.Fields("Seconds Microseconds Milliseconds Bytes Kilobytes Megabytes Gigabytes Terabytes " +
		"Bits Kilobits Megabits Gigabits Terabits Percent Count Bytes/Second Kilobytes/Second Megabytes/Second " +
		"Gigabytes/Second Terabytes/Second Bits/Second Kilobits/Second Megabits/Second Gigabits/Second " +
		"Terabits/Second Count/Second None") {
		units[metrics.Unit(u)] = true
	}
}

// checkName refuses an empty or too long name.
func checkName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("empty %s name", kind)
	}
	if n := utf8.RuneCountInString(name); n > MaxNameLen {
		return fmt.Errorf("%s name of %d characters exceeds %d", kind, n, MaxNameLen)
	}
	return nil
}

// Record is a parsed and validated EMF line.
type Record struct {
	// Timestamp is the record's _aws.Timestamp.
	Timestamp time.Time
	// Directives are its _aws.CloudWatchMetrics.
	Directives []Directive
	// Members are the root members other than _aws: strings, float64s
	// (metric values and other numbers), []float64 (metric value arrays),
	// or other values as encoding/json decodes them.
	Members map[string]any
}

// Directive is one entry of _aws.CloudWatchMetrics.
type Directive struct {
	Namespace  string
	Dimensions [][]string
	Metrics    []MetricDefinition
}

// MetricDefinition declares one metric of a Directive.
type MetricDefinition struct {
	Name string
	// Unit is "" when the line gives none (CloudWatch takes None).
	Unit metrics.Unit
	// StorageResolution is 0 when the line gives none, else 1 or 60.
	StorageResolution int
}

// Metric returns the definition and values of the metric name, from the
// first directive that declares it.
func (r *Record) Metric(name string) (MetricDefinition, []float64, bool) {
	for _, d := range r.Directives {
		for _, m := range d.Metrics {
			if m.Name == name {
				switch v := r.Members[name].(type) {
				case float64:
					return m, []float64{v}, true
				case []float64:
					return m, v, true
				}
			}
		}
	}
	return MetricDefinition{}, nil, false
}

// String returns the string member name (a dimension value or a property).
func (r *Record) String(name string) (string, bool) {
	s, ok := r.Members[name].(string)
	return s, ok
}

type rawRecord struct {
	AWS *struct {
		Timestamp         json.RawMessage
		CloudWatchMetrics *[]struct {
			Namespace  *string
			Dimensions *[][]string
			Metrics    *[]struct {
				Name              *string
				Unit              *string
				StorageResolution json.RawMessage
			}
		}
	} `json:"_aws"`
}

func parseErr(format string, args ...any) error {
	return fmt.Errorf("metrics: not an EMF record: "+format, args...)
}

// Parse decodes one line (a trailing newline is allowed) and checks it
// against the format: a single JSON object with an _aws member holding an
// integer Timestamp and a CloudWatchMetrics array whose directives each have
// a Namespace, at most MaxDimensions names in each dimension set, each name
// a string root member, and at most MaxMetrics metrics with non-empty names
// of at most MaxNameLen characters, allowed units, and a root member that is
// a number or an array of 1 to MaxValues numbers.
func Parse(line []byte) (*Record, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	if bytes.ContainsAny(line, "\n") {
		return nil, parseErr("more than one line")
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(line, &root); err != nil {
		return nil, parseErr("%v", err)
	}
	var raw rawRecord
	if err := json.Unmarshal(line, &raw); err != nil {
		return nil, parseErr("_aws: %v", err)
	}
	aws := raw.AWS
	if aws == nil {
		return nil, parseErr("no _aws member")
	}
	if aws.Timestamp == nil {
		return nil, parseErr("no _aws.Timestamp")
	}
	ms, ok := integer(aws.Timestamp)
	if !ok || ms < 0 {
		return nil, parseErr("_aws.Timestamp %s is not epoch milliseconds", aws.Timestamp)
	}
	if aws.CloudWatchMetrics == nil {
		return nil, parseErr("no _aws.CloudWatchMetrics")
	}
	rec := &Record{Timestamp: time.UnixMilli(ms), Members: make(map[string]any, len(root))}
	for k, v := range root {
		if k == "_aws" {
			continue
		}
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return nil, parseErr("member %q: %v", k, err)
		}
		rec.Members[k] = x
	}
	for i, d := range *aws.CloudWatchMetrics {
		var dir Directive
		if d.Namespace == nil || *d.Namespace == "" {
			return nil, parseErr("directive %d: no Namespace", i)
		}
		if n := utf8.RuneCountInString(*d.Namespace); n > MaxNamespaceLen {
			return nil, parseErr("directive %d: namespace of %d characters", i, n)
		}
		dir.Namespace = *d.Namespace
		if d.Dimensions == nil {
			return nil, parseErr("directive %d: no Dimensions", i)
		}
		for _, set := range *d.Dimensions {
			if len(set) > MaxDimensions {
				return nil, parseErr("directive %d: %d dimensions in a set", i, len(set))
			}
			for _, name := range set {
				if _, ok := rec.Members[name].(string); !ok {
					return nil, parseErr("dimension %q has no string value", name)
				}
			}
		}
		dir.Dimensions = *d.Dimensions
		if d.Metrics == nil {
			return nil, parseErr("directive %d: no Metrics", i)
		}
		if len(*d.Metrics) > MaxMetrics {
			return nil, parseErr("directive %d: %d metrics", i, len(*d.Metrics))
		}
		for _, m := range *d.Metrics {
			if m.Name == nil {
				return nil, parseErr("directive %d: metric without Name", i)
			}
			if err := checkName("metric", *m.Name); err != nil {
				return nil, parseErr("directive %d: %v", i, err)
			}
			def := MetricDefinition{Name: *m.Name}
			if m.Unit != nil {
				def.Unit = metrics.Unit(*m.Unit)
				if !units[def.Unit] {
					return nil, parseErr("metric %q: unknown unit %q", def.Name, def.Unit)
				}
			}
			if m.StorageResolution != nil {
				sr, ok := integer(m.StorageResolution)
				if !ok || (sr != 1 && sr != 60) {
					return nil, parseErr("metric %q: StorageResolution %s is not 1 or 60", def.Name, m.StorageResolution)
				}
				def.StorageResolution = int(sr)
			}
			v, err := metricValue(rec.Members[def.Name])
			if err != nil {
				return nil, parseErr("metric %q: %v", def.Name, err)
			}
			rec.Members[def.Name] = v
			dir.Metrics = append(dir.Metrics, def)
		}
		rec.Directives = append(rec.Directives, dir)
	}
	return rec, nil
}

// integer reads a JSON number that is an integer (not a string holding
// one).
func integer(raw json.RawMessage) (int64, bool) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// metricValue converts a decoded member to float64 or []float64.
func metricValue(x any) (any, error) {
	switch v := x.(type) {
	case float64:
		return v, nil
	case []float64:
		return v, nil // already converted by an earlier directive
	case []any:
		if len(v) == 0 || len(v) > MaxValues {
			return nil, fmt.Errorf("%d values, want 1 to %d", len(v), MaxValues)
		}
		out := make([]float64, len(v))
		for i, e := range v {
			f, ok := e.(float64)
			if !ok {
				return nil, fmt.Errorf("value %d is %T, not a number", i, e)
			}
			out[i] = f
		}
		return out, nil
	case nil:
		return nil, errors.New("no numeric member")
	default:
		return nil, fmt.Errorf("member is %T, not a number", x)
	}
}

// MustParse is Parse for tests: it fails t on an invalid line.
func MustParse(t testing.TB, line string) *Record {
	t.Helper()
	r, err := Parse([]byte(line))
	if err != nil {
		t.Fatalf("Parse(%s): %v", line, err)
	}
	return r
}
