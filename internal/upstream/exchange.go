package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// An Exchange is one tool call and its answer, kept apart from whoever asked
// for it: the caller may stop waiting (and answer its own client) while the
// exchange goes on, so the gateway learns when the upstream stops working on
// the call instead of guessing.
//
// The upstream is known to have stopped when its answer (a result or an
// error) arrived, when a stateful session acknowledged the call's
// cancellation (HTTP 2xx to notifications/cancelled), when the request was
// closed and the server is declared to stop on a closed request
// (stops_on_close), or when the call was never sent. Stopped reports it;
// nothing else does, and no timer closes it. A connection that broke after
// the call was sent is not an answer: the upstream may still be working on
// the call (Broken), as on a call cut off.
type Exchange struct {
	p      *Pool
	srv    *registry.Server
	caller Caller          // whom the call is made for
	ctx    context.Context // ends with Close, or at the exchange's deadline
	cancel context.CancelCauseFunc

	done chan struct{} // closed once the call has returned
	res  *mcp.CallToolResult
	err  error
	// task is the upstream's CreateTaskResult, when the call declared the
	// tasks extension and the upstream answered with a task.
	task *Task
	// broken: the call returned because its connection broke after it was
	// sent, without an answer.
	broken bool

	stopped  chan struct{}
	stopOnce sync.Once
	stopHow  Stop

	detached atomic.Bool // Stop or Close: notifications are no longer relayed

	mu       sync.Mutex
	stopping bool      // Stop or Close was called: the call is not sent any more
	sent     *sentCall // how the call was sent, once it was
	discard  bool      // close the session when the call returns
}

// Stop says how the gateway learnt that an upstream stopped working on a
// call.
type Stop string

// How an exchange is known to have stopped.
const (
	// StopAnswered: the upstream's answer to the call (a result, a JSON-RPC
	// error, an HTTP error) arrived, or its transport failed.
	StopAnswered Stop = "answered"
	// StopAcknowledged: a stateful session (streamable HTTP with a session
	// id, or the SSE transport) accepted notifications/cancelled for the
	// call.
	StopAcknowledged Stop = "acknowledged"
	// StopClosed: the call's request was closed and the server is declared
	// to stop on a closed request (stops_on_close).
	StopClosed Stop = "closed"
	// StopUnsent: the call was never sent to the upstream.
	StopUnsent Stop = "unsent"
)

// sentCall is how a call was sent: enough to send its cancellation on the
// same session.
type sentCall struct {
	url    string
	header http.Header
	id     json.RawMessage // the JSON-RPC id; nil for an OpenAPI request
}

// stateful reports whether a session exists on which the upstream can
// receive the call's cancellation: a streamable-HTTP session id, or the SSE
// transport (always a session).
func (s *sentCall) stateful(t registry.Transport) bool {
	if s.id == nil {
		return false
	}
	return t == registry.TransportSSE || s.header.Get("Mcp-Session-Id") != ""
}

// Causes with which an exchange's context is cancelled.
var (
	errUnsent = errors.New("the call was stopped before it was sent")
	errClose  = errors.New("the call's request was closed on stop")
	errClosed = errors.New("the exchange was closed")
)

// notifyTimeout bounds the cancellation notification's request.
const notifyTimeout = 5 * time.Second

// Start sends a tool call to srv and returns at once. A tool's own failure
// is a result with IsError set, not an error.
//
// ctx bounds the whole exchange: cancelling it, or its deadline, aborts the
// call (and the SDK tells the upstream, where it can). A caller that wants
// to stop waiting without losing the late answer keeps ctx alive, calls
// Stop, and waits for Stopped; Close ends the exchange.
func (p *Pool) Start(ctx context.Context, srv *registry.Server, c Caller, params *mcp.CallToolParams, l *Listener) *Exchange {
	xctx, cancel := context.WithCancelCause(ctx)
	x := &Exchange{p: p, srv: srv, caller: c, ctx: xctx, cancel: cancel, done: make(chan struct{}), stopped: make(chan struct{})}
	go x.run(params, x.relay(l))
	return x
}

// CallTool calls a tool on srv and waits for its answer. A tool's own
// failure is a result with IsError set, not an error. When ctx ends first
// the call is aborted: the SDK sends notifications/cancelled, and the
// request is closed.
func (p *Pool) CallTool(ctx context.Context, srv *registry.Server, c Caller, params *mcp.CallToolParams, l *Listener) (*mcp.CallToolResult, error) {
	x := p.Start(ctx, srv, c, params, l)
	<-x.Done()
	return x.Result()
}

func (x *Exchange) run(params *mcp.CallToolParams, l *Listener) {
	defer close(x.done)
	var res *mcp.CallToolResult
	var err error
	if x.srv.Transport == registry.TransportOpenAPI {
		res, err = x.p.callOpenAPI(x.ctx, x.srv, x.caller, params, x)
	} else {
		// The tool's own schema says which arguments go in Mcp-Param-*
		// headers (SEP-2243), from this instance's list when it holds one.
		ctx := withParamHeaders(x.ctx, x.p.cachedHeaders(x.srv, x.caller, params.Name), params.Arguments)
		// A call that declares the tasks extension may be answered with a
		// task, which the SDK cannot read: its answer is read here too.
		var answer *capture
		if declaresTasksMeta(params.Meta) {
			ctx, answer = withCapture(ctx, "tools/call", maxTaskAnswer)
		}
		err = x.p.do(ctx, x.srv, x.caller, l, x, func(ctx context.Context, cs *mcp.ClientSession) error {
			var err error
			res, err = cs.CallTool(ctx, params)
			if err == nil && answer != nil {
				x.task, err = taskAnswer(res, answer)
			}
			return err
		})
	}
	x.res, x.err = res, err
	switch cause := context.Cause(x.ctx); {
	case err == nil || x.ctx.Err() == nil && x.answered(err):
		// The upstream answered (or was never reached): this call is over
		// for it.
		x.markStopped(StopAnswered)
	case x.ctx.Err() == nil && x.srv.StopsOnClose:
		// The call's request is closed, and the server stops on that.
		x.markStopped(StopClosed)
	case x.ctx.Err() == nil:
		x.broken = true
	case errors.Is(cause, errClose):
		x.markStopped(StopClosed)
	}
}

// answered reports whether a failed call's error is the upstream's answer
// (an HTTP status, a JSON-RPC error, an answer too large to take), or the
// call never reached it (not sent, no connection made, no credential) —
// rather than a connection that broke after the call was sent, which leaves
// the upstream free to go on with it.
func (x *Exchange) answered(err error) bool {
	x.mu.Lock()
	sent := x.sent != nil
	x.mu.Unlock()
	var ue *Error
	var op *net.OpError
	switch {
	case !sent:
		return true
	case errors.As(err, &op) && op.Op == "dial":
		return true // no connection was made: nothing was sent
	case !errors.As(err, &ue):
		return false
	case ue.Kind == KindUnavailable:
		return ue.Status != 0 && (ue.Status < 200 || ue.Status > 299)
	}
	return true
}

// Broken reports, once Done is closed, whether the call's connection broke
// after it was sent and before an answer: the upstream may go on with it,
// so the exchange is kept until Stopped, as a call cut off is.
func (x *Exchange) Broken() bool {
	<-x.done
	return x.broken
}

// Done is closed once the call has returned: its answer arrived, or the
// exchange was aborted.
func (x *Exchange) Done() <-chan struct{} { return x.done }

// Result is the call's result or error, once Done is closed.
func (x *Exchange) Result() (*mcp.CallToolResult, error) {
	<-x.done
	return x.res, x.err
}

// Stopped is closed once the upstream is known to be no longer working on
// the call; StoppedBy then says how it is known.
func (x *Exchange) Stopped() <-chan struct{} { return x.stopped }

// StoppedBy says how the upstream is known to have stopped working on the
// call, or "" while it is not known.
func (x *Exchange) StoppedBy() Stop {
	select {
	case <-x.stopped:
		return x.stopHow
	default:
		return ""
	}
}

func (x *Exchange) markStopped(how Stop) {
	x.stopOnce.Do(func() {
		x.stopHow = how
		close(x.stopped)
	})
}

// Stop tells the upstream to stop working on the call, in every way its
// protocol allows without losing the call's late answer, and returns at
// once; Stopped reports when it is known to have stopped. A call not sent
// yet is never sent. A server declared stops_on_close has its request
// closed. A stateful session is sent notifications/cancelled, and the
// upstream's acknowledgement counts as stopping. Otherwise (a stateless
// server that was not declared to stop on a closed request, an OpenAPI
// request) nothing can be sent without losing the answer, which is
// awaited. Notifications stop being relayed.
func (x *Exchange) Stop() {
	x.detached.Store(true)
	x.mu.Lock()
	if x.stopping {
		x.mu.Unlock()
		return
	}
	x.stopping = true
	sent := x.sent
	if sent != nil && x.srv.StopsOnClose && x.srv.Transport == registry.TransportSSE {
		// The SSE transport's only stream is its session's.
		x.discard = true
	}
	x.mu.Unlock()
	switch {
	case sent == nil:
		x.markStopped(StopUnsent)
		x.cancel(errUnsent)
	case x.srv.StopsOnClose:
		x.cancel(errClose)
	case sent.stateful(x.srv.Transport):
		go x.notifyCancelled(sent)
	}
}

// Close ends the exchange at once and waits for the call to return: the
// request is aborted if still open, and the SDK sends
// notifications/cancelled on the call's session. The session is kept: an
// upstream that goes on with the call does so whether or not it is closed.
func (x *Exchange) Close() {
	x.detached.Store(true)
	x.mu.Lock()
	x.stopping = true
	x.mu.Unlock()
	x.cancel(errClosed)
	<-x.done
}

// notifyCancelled sends notifications/cancelled for the call on its session,
// as the SDK would, and notes the upstream's acknowledgement.
func (x *Exchange) notifyCancelled(s *sentCall) {
	ctx, cancel := context.WithTimeout(x.ctx, notifyTimeout)
	defer cancel()
	body, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"method":  "notifications/cancelled",
		"params":  map[string]any{"requestId": s.id, "reason": "the gateway stopped waiting for this call"},
	})
	if err != nil {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header = s.header.Clone()
	for _, h := range []string{"Content-Length", "Mcp-Method", "Mcp-Name"} {
		req.Header.Del(h)
	}
	for h := range req.Header {
		if strings.HasPrefix(h, "Mcp-Param-") {
			req.Header.Del(h)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	// Through the session's own client: held to the server's origin, with
	// its credential made for this request (a signature covers the body).
	hc, err := x.p.sessionClient(x.srv)
	if err != nil {
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		x.p.log.Debug("cancellation not delivered", "server_id", x.srv.ID, "error", err.Error())
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		x.markStopped(StopAcknowledged)
		return
	}
	x.p.log.Debug("cancellation refused", "server_id", x.srv.ID, "status", resp.StatusCode)
}

// relay returns l's notifications, until Stop or Close.
func (x *Exchange) relay(l *Listener) *Listener {
	if l == nil {
		return nil
	}
	return &Listener{
		Progress: func(ctx context.Context, p *mcp.ProgressNotificationParams) {
			if l.Progress != nil && !x.detached.Load() {
				l.Progress(ctx, p)
			}
		},
		Log: func(ctx context.Context, p *mcp.LoggingMessageParams) {
			if l.Log != nil && !x.detached.Load() {
				l.Log(ctx, p)
			}
		},
	}
}

// discarding reports whether the session the call used is to be closed.
func (x *Exchange) discarding() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.discard
}

// errStopping refuses to send a call that was stopped before it was sent.
// It carries the SDK's "rejected by transport" code, so the session is not
// taken for broken.
var errStopping = fmt.Errorf("call stopped before it was sent: %w", &jsonrpc.Error{Code: codeRejectedByTransport, Message: "rejected by transport"})

// sending notes that the call is about to be sent as s, unless it was
// stopped: then it must not be sent.
func (x *Exchange) sending(s *sentCall) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stopping {
		return errStopping
	}
	x.sent = s
	return nil
}

// sendingHTTP is sending for an MCP request about to go out: only the
// exchange's tools/call request counts.
func (x *Exchange) sendingHTTP(req *http.Request) error {
	if req.Method != http.MethodPost {
		return nil
	}
	if m := req.Header.Get("Mcp-Method"); m != "" && m != "tools/call" {
		return nil
	}
	msg, ok := peekRequest(req)
	if !ok || msg.Method != "tools/call" {
		return nil
	}
	return x.sending(&sentCall{url: req.URL.String(), header: req.Header.Clone(), id: msg.ID})
}

// peekRequest reads the method and id of the JSON-RPC request in req's body
// without consuming it. It reads only as far as both: the SDK writes them
// before the params, which hold the arguments, of any size, and which the
// SDK has just encoded and read again itself.
func peekRequest(req *http.Request) (msg struct {
	ID     json.RawMessage
	Method string
}, ok bool) {
	if req.GetBody == nil {
		return msg, false
	}
	body, err := req.GetBody()
	if err != nil {
		return msg, false
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return msg, false
	}
	var haveMethod bool
	for len(msg.ID) == 0 || !haveMethod {
		if !dec.More() {
			return msg, false
		}
		t, err := dec.Token()
		key, isKey := t.(string)
		if err != nil || !isKey {
			return msg, false
		}
		// Names match as encoding/json matches them to struct fields.
		switch {
		case strings.EqualFold(key, "id"):
			err = dec.Decode(&msg.ID)
		case strings.EqualFold(key, "method"):
			err, haveMethod = dec.Decode(&msg.Method), true
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return msg, false
		}
	}
	return msg, true
}

type exchangeKey struct{}

// withExchange marks the HTTP requests of an exchange's call. It is set
// after a session is checked out, never on the context a session is
// connected with, which outlives the call.
func withExchange(ctx context.Context, x *Exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, x)
}

func exchangeFrom(ctx context.Context) *Exchange {
	x, _ := ctx.Value(exchangeKey{}).(*Exchange)
	return x
}
