package upstream

import (
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// NewHTTPClient returns an HTTP client for upstream calls: keep-alive
// connections pooled per host, and every response body cut off after limit
// bytes. It has no overall timeout: each call's context bounds it. Unless
// allowLocal, it refuses to connect to loopback and link-local addresses,
// checked on the address dialed, after DNS.
func NewHTTPClient(limit int64, allowLocal bool) *http.Client {
	return &http.Client{Transport: &limitTransport{base: newTransport(allowLocal), limit: limit}}
}

// newTransport returns a transport pooling keep-alive connections per
// host, refusing local addresses unless allowLocal.
func newTransport(allowLocal bool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 90 * time.Second
	t.ResponseHeaderTimeout = 0
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if !allowLocal {
		d.Control = safeurl.RefuseLocal
	}
	t.DialContext = d.DialContext
	return t
}

// clientFor is the HTTP client of srv's requests: one that may reach local
// addresses only if srv may.
func (p *Pool) clientFor(srv *registry.Server) *http.Client {
	if srv.AllowLocal {
		return p.local
	}
	return p.http
}

// limitTransport caps response bodies.
type limitTransport struct {
	base  http.RoundTripper
	limit int64
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = addTaskName(addParamHeaders(req))
	if x := exchangeFrom(req.Context()); x != nil {
		if err := x.sendingHTTP(req); err != nil {
			return nil, err
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	ex := trafficFrom(req.Context())
	ex.seen(req, resp)
	if ex != nil && ex.stream && req.Method == http.MethodGet {
		// An HTTP+SSE session's stream: bounded per request it serves.
		resp.Body = &limitedBody{rc: resp.Body, left: math.MaxInt64, ex: ex, stream: true}
	} else {
		resp.Body = &limitedBody{rc: resp.Body, left: t.limit, ex: ex}
	}
	captureAnswer(req, resp)
	tapEvents(req, resp)
	return resp, nil
}

// ErrResponseTooLarge is returned when an upstream response exceeds the
// configured limit.
var ErrResponseTooLarge = errors.New("upstream response too large")

type limitedBody struct {
	rc   io.ReadCloser
	left int64
	ex   *traffic // told when the limit is passed
	// stream: an HTTP+SSE session's stream, whose bytes ex counts per
	// request (traffic.spendStream).
	stream bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// Exactly at the limit: fine if the body ends here.
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		if b.ex != nil {
			b.ex.tooLarge.Store(true)
		}
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.stream {
		if !b.ex.spendStream(n) {
			return n, ErrResponseTooLarge
		}
		return n, err
	}
	if !b.ex.spend(n) {
		return n, ErrResponseTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
