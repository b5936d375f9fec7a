package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK hands notifications to its handlers on a goroutine of their own,
// so one sent just before a result may be handled after the call returned
// and be lost to the agent. For streamable HTTP, the gateway instead reads
// the notifications of a call's event stream as the SDK reads that stream,
// in order: each one is relayed before the bytes that follow it reach the
// SDK, so before the result.

type listenerKey struct{}

// withListener marks a call's context so its HTTP responses are tapped.
func withListener(ctx context.Context, l *Listener) context.Context {
	return context.WithValue(ctx, listenerKey{}, l)
}

type listChangedKey struct{}

// listChanged is what a notifications/tools/list_changed in an event
// stream calls, and whether only the first one of each answer counts.
type listChanged struct {
	changed func()
	once    bool
}

// withListChanged marks a request's context so that a
// notifications/tools/list_changed in its event stream calls changed: only
// the first of each answer if once (a call's answer), every one otherwise
// (a session's stream, which carries many answers). (The SDK's own handler
// for it would make every 2026-07-28 session hold a subscriptions/listen
// stream open to the upstream.)
func withListChanged(ctx context.Context, changed func(), once bool) context.Context {
	return context.WithValue(ctx, listChangedKey{}, &listChanged{changed: changed, once: once})
}

// tapEvents wraps an event-stream response of a call that has a listener,
// or that watches for tool list changes.
func tapEvents(req *http.Request, resp *http.Response) {
	l, _ := req.Context().Value(listenerKey{}).(*Listener)
	changed, _ := req.Context().Value(listChangedKey{}).(*listChanged)
	if l == nil && changed == nil {
		return
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "text/event-stream" {
		return
	}
	if l == nil {
		l = &Listener{}
	}
	resp.Body = &eventTap{rc: resp.Body, l: l, changed: changed, ctx: req.Context()}
}

// maxTapEvent bounds the bytes kept for one event; a larger event is
// passed on to the SDK untouched, not relayed.
const maxTapEvent = 1 << 20

type eventTap struct {
	rc      io.ReadCloser
	l       *Listener
	changed *listChanged
	ctx     context.Context
	line    []byte // the current, incomplete line
	data    []byte // the data lines of the current event
	skip    bool   // the current event is too large to relay
	// listChanged: a notifications/tools/list_changed was seen; later
	// ones in the same answer are ignored.
	listChanged bool
}

func (t *eventTap) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	t.feed(p[:n])
	return n, err
}

func (t *eventTap) Close() error { return t.rc.Close() }

func (t *eventTap) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.append(b)
			return
		}
		t.append(b[:i])
		t.endLine()
		b = b[i+1:]
	}
}

func (t *eventTap) append(b []byte) {
	if t.skip {
		return
	}
	if len(t.line)+len(t.data)+len(b) > maxTapEvent {
		t.skip, t.line, t.data = true, nil, nil
		return
	}
	t.line = append(t.line, b...)
}

func (t *eventTap) endLine() {
	line := bytes.TrimSuffix(t.line, []byte("\r"))
	t.line = t.line[:0]
	if len(line) == 0 { // end of event
		if !t.skip && len(t.data) > 0 {
			t.dispatch(t.data)
		}
		t.data, t.skip = t.data[:0], false
		return
	}
	if t.skip {
		return
	}
	if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
		if len(t.data) > 0 {
			t.data = append(t.data, '\n')
		}
		t.data = append(t.data, bytes.TrimPrefix(v, []byte(" "))...)
	}
}

func (t *eventTap) dispatch(data []byte) {
	var msg struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(data, &msg) != nil {
		return
	}
	switch msg.Method {
	case "notifications/progress":
		var p mcp.ProgressNotificationParams
		if t.l.Progress != nil && json.Unmarshal(msg.Params, &p) == nil {
			t.l.Progress(t.ctx, &p)
		}
	case "notifications/tools/list_changed":
		// In a call's answer one counts: repeating it thousands of times
		// costs what one does.
		if t.changed != nil && !(t.changed.once && t.listChanged) {
			t.listChanged = true
			t.changed.changed()
		}
	case "notifications/message":
		var p mcp.LoggingMessageParams
		if t.l.Log != nil && json.Unmarshal(msg.Params, &p) == nil {
			t.l.Log(t.ctx, &p)
		}
	}
}
