package testkit

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// Front stands where Lambda stands before the function: it admits at most
// N requests at once, each to one of the gateway processes in turn, and
// answers any request beyond with 429 at once, as a function at its
// reserved concurrency is throttled.
type Front struct {
	// URL is the front's base URL.
	URL string
	sem chan struct{}
	gws []*Gateway
	n   atomic.Uint64
	// Throttled counts the requests answered 429 by the front itself.
	Throttled atomic.Int64
	// Admitted counts the requests the front let through, and Held sums
	// (in nanoseconds) each one's time from its admission until its
	// answer was passed on: what Lambda bills for them.
	Admitted, Held atomic.Int64
}

// frontClient forwards requests; its connections are reused.
var frontClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// StartFront starts a front of concurrency n before gws, until the test
// ends.
func StartFront(t testing.TB, n int, gws []*Gateway) *Front {
	t.Helper()
	f := &Front{sem: make(chan struct{}, n), gws: gws}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *Front) serve(w http.ResponseWriter, r *http.Request) {
	select {
	case f.sem <- struct{}{}:
	default:
		f.Throttled.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"message":"Rate Exceeded."}`)
		return
	}
	admitted := time.Now()
	defer func() {
		f.Admitted.Add(1)
		f.Held.Add(int64(time.Since(admitted)))
		<-f.sem
	}()
	// The whole body first: forwarding it while the answer comes back
	// races the client's side of net/http.
	body, err := io.ReadAll(io.LimitReader(r.Body, 2<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	gw := f.gws[f.n.Add(1)%uint64(len(f.gws))]
	req, err := http.NewRequestWithContext(r.Context(), r.Method, gw.URL+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := frontClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
