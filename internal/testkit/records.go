package testkit

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Match selects log records by field: a record matches when every key's
// value, printed with fmt.Sprint, is the given string (so a status of 400
// matches "400", and a missing field matches nothing but "<nil>").
type Match map[string]string

// Records parses logs, one JSON object a line as the gateway writes them
// to stderr, and returns the records that match every one of matches.
// Lines that are not JSON objects (a panic's trace, a child's chatter)
// are skipped.
func Records(logs string, matches ...Match) []map[string]any {
	var out []map[string]any
	for line := range strings.SplitSeq(logs, "\n") {
		rec, ok := parseRecord(line)
		if !ok || !matchAll(rec, matches) {
			continue
		}
		out = append(out, rec)
	}
	return out
}

// Record returns the first record of logs that matches every one of
// matches.
func Record(logs string, matches ...Match) (map[string]any, bool) {
	for line := range strings.SplitSeq(logs, "\n") {
		if rec, ok := parseRecord(line); ok && matchAll(rec, matches) {
			return rec, true
		}
	}
	return nil, false
}

// Records returns the records the process has logged so far that match
// every one of matches.
func (g *Gateway) Records(matches ...Match) []map[string]any { return Records(g.Logs(), matches...) }

// Str is rec's field k if it is a string, else "" (what decoding the
// record into a struct with a string field gives for an absent field).
func Str(rec map[string]any, k string) string {
	s, _ := rec[k].(string)
	return s
}

func parseRecord(line string) (map[string]any, bool) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "{") {
		return nil, false
	}
	var rec map[string]any
	if json.Unmarshal([]byte(line), &rec) != nil {
		return nil, false
	}
	return rec, true
}

func matchAll(rec map[string]any, matches []Match) bool {
	for _, m := range matches {
		for k, v := range m {
			if fmt.Sprint(rec[k]) != v {
				return false
			}
		}
	}
	return true
}
