package upstream

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
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
	sent := req
	var held *heldRequest
	if x := exchangeFrom(req.Context()); x != nil {
		if err := x.sendingHTTP(req); err != nil {
			return nil, err
		}
		if req.Method == http.MethodPost {
			held = x.hold(req)
			sent = req.WithContext(held.ctx)
		}
	}
	resp, err := t.base.RoundTrip(sent)
	if err != nil {
		if held != nil {
			held.end()
		}
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
	if held != nil {
		held.ReadCloser = resp.Body
		resp.Body = held
	}
	captureAnswer(req, resp)
	tapEvents(req, resp)
	return resp, nil
}

// streamEndGrace is how long the end of a call's answer stream is waited
// for once the upstream has answered: a well-behaved upstream ends the
// stream right after the answer, and a stream read to its end leaves its
// connection to the next call instead of a new one dialed.
const streamEndGrace = time.Second

// A heldRequest is a request of an exchange's call sent with a context of
// its own (ctx), which ends when the call's ends, unless the upstream's
// answer to the call has arrived by then (StopAnswered): all that is left
// of the response is, normally, the end of its stream, which the SDK reads
// on after handing the answer over. Then the request is left
// streamEndGrace to end by itself before it is cut. Cutting it at once
// would close its connection whenever the end of the stream had not
// arrived yet, for the next call to dial another. ctx keeps the call's
// values and ends, with the call's cause, only after the call's context
// has (its deadline included), so the SDK sees its call's context end
// before any error of the request's.
//
// Once the response comes, the heldRequest is its body: closing it ends
// the request's context.
type heldRequest struct {
	io.ReadCloser
	x      *Exchange
	parent context.Context
	ctx    context.Context
	cut    context.CancelCauseFunc
	stop   func() bool

	mu    sync.Mutex
	ended bool
	timer *time.Timer
}

// hold makes req's heldRequest; end (which may be called again) must be
// called once its response body is closed, or when no response came.
func (x *Exchange) hold(req *http.Request) *heldRequest {
	h := &heldRequest{x: x, parent: req.Context()}
	h.ctx, h.cut = context.WithCancelCause(context.WithoutCancel(h.parent))
	h.stop = context.AfterFunc(h.parent, h.parentEnded)
	return h
}

func (h *heldRequest) parentEnded() {
	cause := context.Cause(h.parent)
	if h.x.StoppedBy() != StopAnswered {
		h.cut(cause)
		return
	}
	h.mu.Lock()
	if !h.ended {
		h.timer = time.AfterFunc(streamEndGrace, func() { h.cut(cause) })
	}
	h.mu.Unlock()
}

func (h *heldRequest) end() {
	h.stop()
	h.mu.Lock()
	h.ended = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	h.cut(context.Canceled)
}

func (h *heldRequest) Close() error {
	err := h.ReadCloser.Close()
	h.end()
	return err
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
