package testkit

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Batch is an upstream that processes calls in batches, as many backends
// do: it serves Knee calls at once in Base time; past the knee every call
// is slower with the square of the overload (n calls at once take
// Base × (n/Knee)²), and past twice the knee it answers 503 with
// Retry-After: 1 at once. Nobody tells the gateway where its knee is. It
// is an MCP server (the Go SDK, stateless, JSON answers) on loopback, with
// one tool, "work".
type Batch struct {
	URL  string // its MCP endpoint
	Base time.Duration

	mu       sync.Mutex
	knee     int
	inFlight int
	peak     int
	served   int
	refused  int
	arrivals []time.Time // every tools/call that reached it, refused or not
	samples  []BatchSample
	// next answers queued by RefuseNext, each for one call.
	next []refusal
}

type refusal struct {
	status     int
	retryAfter string
}

// BatchSample is the calls in flight at one instant.
type BatchSample struct {
	At       time.Time
	InFlight int
}

// StartBatch starts a batch upstream with the given knee; it is stopped
// when the test ends.
func StartBatch(t testing.TB, knee int, base time.Duration) *Batch {
	t.Helper()
	b := &Batch{knee: knee, Base: base}
	srv := mcp.NewServer(&mcp.Implementation{Name: "batch", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "work", Description: "Does one unit of batched work."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, struct{}, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, struct{}{}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method != http.MethodPost || !bytes.Contains(body, []byte(`"tools/call"`)) {
			h.ServeHTTP(w, r)
			return
		}
		wait, ref, ok := b.enter()
		if !ok {
			if ref.retryAfter != "" {
				w.Header().Set("Retry-After", ref.retryAfter)
			}
			http.Error(w, "busy", ref.status)
			return
		}
		defer b.leave()
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	b.URL = ts.URL + "/mcp"
	return b
}

// enter admits one call: how long it takes, or the refusal it gets.
func (b *Batch) enter() (time.Duration, refusal, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.arrivals = append(b.arrivals, now)
	if len(b.next) > 0 {
		r := b.next[0]
		b.next = b.next[1:]
		b.refused++
		return 0, r, false
	}
	if b.inFlight >= 2*b.knee {
		b.refused++
		return 0, refusal{status: http.StatusServiceUnavailable, retryAfter: "1"}, false
	}
	b.inFlight++
	b.peak = max(b.peak, b.inFlight)
	b.samples = append(b.samples, BatchSample{now, b.inFlight})
	d := b.Base
	if n := b.inFlight; n > b.knee {
		d = time.Duration(float64(d) * float64(n*n) / float64(b.knee*b.knee))
	}
	return d, refusal{}, true
}

func (b *Batch) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight--
	b.served++
	b.samples = append(b.samples, BatchSample{time.Now(), b.inFlight})
}

// SetKnee moves the knee.
func (b *Batch) SetKnee(k int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.knee = k
}

// RefuseNext answers the next call with status and a Retry-After of
// retryAfter (none when zero).
func (b *Batch) RefuseNext(status int, retryAfter time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := refusal{status: status}
	if retryAfter > 0 {
		r.retryAfter = strconv.Itoa(int(retryAfter / time.Second))
	}
	b.next = append(b.next, r)
}

// BatchStats is what the upstream saw.
type BatchStats struct {
	Served, Refused, Peak int
	Arrivals              []time.Time
	Samples               []BatchSample
}

// Stats returns what the upstream saw so far.
func (b *Batch) Stats() BatchStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BatchStats{Served: b.served, Refused: b.refused, Peak: b.peak,
		Arrivals: append([]time.Time(nil), b.arrivals...), Samples: append([]BatchSample(nil), b.samples...)}
}

// Reset forgets the counts (not the calls in flight).
func (b *Batch) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.served, b.refused, b.peak = 0, 0, b.inFlight
	b.arrivals, b.samples = nil, nil
}
