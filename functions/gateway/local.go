package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/gateway"
)

// serve runs the local HTTP server on ln until ctx ends, then drains in-flight
// requests and the exchanges they left open (so their slots are released)
// before returning. Under Lambda
// the Function URL bounds clients; here lim does: a client must send its
// request within lim.ReadTimeout (its headers within
// config.MaxReadHeaderTimeout), an idle connection closes after lim.IdleTimeout,
// and at most lim.MaxConns connections are served at once.
func serve(ctx context.Context, log *slog.Logger, ln net.Listener, h http.Handler, lim config.LocalLimits, gw *gateway.Gateway) error {
	srv := &http.Server{
		Handler:           answerUnread(h),
		ReadHeaderTimeout: min(config.MaxReadHeaderTimeout, lim.ReadTimeout),
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	log.Info("listening", "addr", ln.Addr().String(), "read_timeout", lim.ReadTimeout.String(),
		"idle_timeout", lim.IdleTimeout.String(), "max_conns", lim.MaxConns)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(newLimitListener(ln, lim.MaxConns, log)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	herr := srv.Shutdown(sctx)
	// Calls still waiting for their upstreams are cut off; every exchange
	// left open gets until its upstream stops (or its grace ends), within
	// the bound, and is then closed, its slot given back.
	dctx, dcancel := context.WithTimeout(context.Background(), shutdownWait)
	defer dcancel()
	if n := gw.Shutdown(dctx); n > 0 {
		log.Warn("exchanges still open at shutdown were closed", "closed", n)
	}
	if herr != nil && !errors.Is(herr, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", herr)
	}
	return nil
}

// shutdownWait bounds, on shutdown, the wait for requests in flight, and
// then again the wait for the exchanges they left open.
const shutdownWait = 30 * time.Second

// limitListener serves at most max connections at once: a connection
// accepted beyond that waits, unserved, until another closes (and the ones
// behind it wait in the kernel's backlog).
type limitListener struct {
	net.Listener
	max       int
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	log       *slog.Logger
	// full is set while the limit holds a connection back, so it is
	// logged once per episode.
	full atomic.Bool
}

func newLimitListener(ln net.Listener, max int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: max, slots: make(chan struct{}, max), done: make(chan struct{}), log: log}
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.slots <- struct{}{}:
		l.full.Store(false)
	default:
		if !l.full.Swap(true) {
			l.log.Warn("connection limit reached; new connections wait for one to close", "max_conns", l.max)
		}
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back when closed, once.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// answerUnread lets an answer given before the request body was read (a
// 401 for a missing key, say) go out at once, and closes the connection
// after it. Otherwise net/http first reads what is left of the body, so a
// client dripping its body would get no answer until the read timeout.
func answerUnread(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		body := &trackedBody{ReadCloser: r.Body, want: r.ContentLength}
		r.Body = body
		uw := &unreadWriter{ResponseWriter: w, body: body}
		h.ServeHTTP(uw, r)
		if uw.closing {
			// net/http would still read the rest of the body before
			// closing; the answer is out, so stop reading now.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		}
	})
}

// trackedBody notes whether the whole body has been read.
type trackedBody struct {
	io.ReadCloser
	want int64 // Content-Length, or -1 if unknown
	read int64
	done atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if err == io.EOF || (b.want >= 0 && b.read >= b.want) {
		b.done.Store(true)
	}
	return n, err
}

// unreadWriter asks for the connection to close if the answer starts
// before the body was read.
type unreadWriter struct {
	http.ResponseWriter
	body    *trackedBody
	started bool
	closing bool
}

func (w *unreadWriter) start() {
	if w.started {
		return
	}
	w.started = true
	if !w.body.done.Load() {
		w.closing = true
		w.ResponseWriter.Header().Set("Connection", "close")
	}
}

func (w *unreadWriter) WriteHeader(code int) {
	w.start()
	w.ResponseWriter.WriteHeader(code)
}

func (w *unreadWriter) Write(p []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(p)
}

// Flush passes flushes through, for streamed responses.
func (w *unreadWriter) Flush() {
	w.start()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *unreadWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
