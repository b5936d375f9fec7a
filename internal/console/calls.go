package console

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/gatewaylog"
)

// maxCalls bounds the request records kept in memory.
const maxCalls = 20000

// callLog is the gateway's recent request records, followed from its log.
type callLog struct {
	o    *Options
	tail *gatewaylog.Tail

	mu      sync.Mutex
	records []gatewaylog.Record // oldest first
	err     string
	source  string
	// groupAt is when the log group was last read, and up to when.
	groupAt, groupUntil time.Time
}

func newCallLog(o *Options) *callLog {
	l := &callLog{o: o}
	switch {
	case o.LogFile != "":
		l.tail, l.source = &gatewaylog.Tail{Path: o.LogFile}, o.LogFile
	case o.LogGroup != "" && o.Logs != nil:
		l.source = "log group " + o.LogGroup
	}
	return l
}

// refresh reads what the log gained since the last refresh.
func (l *callLog) refresh(ctx context.Context, now time.Time) {
	var got []gatewaylog.Record
	var err error
	switch {
	case l.tail != nil:
		err = l.tail.Read(func(line string) {
			if rec, ok := gatewaylog.Parse(line, time.Time{}); ok {
				got = append(got, rec)
			}
		})
	case l.source != "":
		if now.Sub(l.groupAt) < l.o.LogGroupEvery {
			return
		}
		l.groupAt = now
		since := l.groupUntil
		if since.IsZero() {
			since = now.Add(-l.o.CallsWindow)
		}
		latest := since
		gctx, cancel := context.WithTimeout(ctx, l.o.ReadTimeout)
		err = gatewaylog.Events(gctx, l.o.Logs, l.o.LogGroup, (gatewaylog.Filter{}).Pattern(false), since, maxCalls, func(msg string, at time.Time) {
			if rec, ok := gatewaylog.Parse(msg, at); ok && rec.Time.After(l.groupUntil) {
				got = append(got, rec)
				if rec.Time.After(latest) {
					latest = rec.Time
				}
			}
		})
		cancel()
		if errors.Is(err, gatewaylog.ErrTruncated) {
			err = nil
		}
		if err == nil {
			l.groupUntil = latest
		}
	default:
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = ""
	if err != nil {
		l.err = clip.String(fleet.OneLine(err.Error()), 200)
	}
	l.records = append(l.records, got...)
	cut := 0
	for cut < len(l.records) && now.Sub(l.records[cut].Time) > l.o.CallsWindow {
		cut++
	}
	if n := len(l.records) - cut; n > maxCalls {
		cut += n - maxCalls
	}
	l.records = slices.Delete(l.records, 0, cut)
}

// select returns the records f selects (codes included), newest first,
// at most limit of them, and how many there were.
func (l *callLog) pick(f gatewaylog.Filter, outcome string, limit int) ([]gatewaylog.Record, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []gatewaylog.Record
	n := 0
	for i := len(l.records) - 1; i >= 0; i-- {
		rec := l.records[i]
		if rec.Tool == "" && rec.ServerID == "" || !f.Selects(&rec) || !f.Coded(&rec) || !outcomeMatches(&rec, outcome) {
			continue
		}
		n++
		if len(out) < limit {
			out = append(out, rec)
		}
	}
	return out, n
}

// outcomeMatches: "" any, "ok" answered, "refused" refused or failed.
func outcomeMatches(rec *gatewaylog.Record, outcome string) bool {
	switch outcome {
	case "ok":
		return !rec.Refused()
	case "refused":
		return rec.Refused()
	}
	return true
}

// refusals counts each server's refusals by code since since.
func (l *callLog) refusals(since time.Time) map[string]map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]map[string]int{}
	for i := len(l.records) - 1; i >= 0 && !l.records[i].Time.Before(since); i-- {
		rec := &l.records[i]
		if rec.ServerID == "" || !rec.Refused() {
			continue
		}
		if out[rec.ServerID] == nil {
			out[rec.ServerID] = map[string]int{}
		}
		out[rec.ServerID][cmp.Or(rec.Code, "HTTP_ERROR")]++
	}
	return out
}

// toolStats is one tool's calls over the window.
type toolStats struct {
	ServerID, Tool string
	Calls, Errors  int
	P50, P99       time.Duration
}

// stats sums the tool calls f selects per server and tool.
func (l *callLog) stats(f gatewaylog.Filter) []toolStats {
	l.mu.Lock()
	type key struct{ s, t string }
	lat := map[key][]int64{}
	errs := map[key]int{}
	for i := range l.records {
		rec := &l.records[i]
		if rec.Tool == "" || !f.Selects(rec) {
			continue
		}
		k := key{rec.ServerID, rec.Tool}
		lat[k] = append(lat[k], rec.DurationMS)
		if rec.Refused() || rec.Outcome != "" && rec.Outcome != "ok" {
			errs[k]++
		}
	}
	l.mu.Unlock()
	var out []toolStats
	for _, k := range slices.SortedFunc(maps.Keys(lat), func(a, b key) int { return cmp.Or(cmp.Compare(a.s, b.s), cmp.Compare(a.t, b.t)) }) {
		ms := lat[k]
		sort.Slice(ms, func(i, j int) bool { return ms[i] < ms[j] })
		out = append(out, toolStats{ServerID: k.s, Tool: k.t, Calls: len(ms), Errors: errs[k],
			P50: time.Duration(quantile(ms, 0.50)) * time.Millisecond, P99: time.Duration(quantile(ms, 0.99)) * time.Millisecond})
	}
	return out
}

// quantile is the q-quantile of sorted values (nearest rank).
func quantile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// status says where the records come from and whether reading fails.
func (l *callLog) status() (source, err string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.source, l.err
}
