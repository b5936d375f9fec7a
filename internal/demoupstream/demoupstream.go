// Package demoupstream is a small MCP server that stands for a batch backend
// behind the gateway. Its slow_tool reports how many calls were in flight
// when it was entered and the highest number it has seen: the instrument for
// checking that the gateway's fleet-wide cap holds. Its resource template
// demo://slow/{ms}, its prompt slow_prompt and its completions hold and count
// the same way, for the requests the gateway relays; asked over HTTP with a
// retry_after argument, slow_tool (and slow_api) answers 429 with that
// Retry-After instead, as an upstream asking for a pause does, and with a
// fail_status argument that 5xx status, as an unwell one does.
//
// It serves MCP streamable HTTP at /mcp (stateful or stateless, event-stream
// or JSON answers: HandlerOptions), the older HTTP+SSE transport at /sse,
// the same instrument as a plain HTTP API at /api/ described by an OpenAPI
// document at /openapi.json, and its counters as JSON at GET /stats (GET
// /stats/idle waits until no call is in flight, POST /stats/reset zeroes
// them, POST /gates/{name} opens a gate). Tests run it in-process on
// loopback or as its own process (infra/demo-upstream, which also serves
// `make dev`).
package demoupstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxSleep bounds slow_tool's ms argument.
const MaxSleep = 10 * time.Minute

// Demo is the server and its instruments. Its methods are safe for
// concurrent use.
type Demo struct {
	server *mcp.Server

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever a counter moves
	inFlight int
	peak     int
	calls    int
	// completed and cancelled count the calls that ran to their end and
	// those that ended because their context was cancelled.
	completed, cancelled int
	gates                map[string]chan struct{}
	barriers             map[chan struct{}]int // waiting calls → in-flight count they wait for
	// hang makes slow_tool calls that start while it is set hold until
	// cancelled or the hang is lifted (fault injection); lifted is closed
	// when it is.
	hang   bool
	lifted chan struct{}
	// events, while recording, logs every slow_tool entry and exit.
	recording bool
	events    []Event
}

// Event is a slow_tool call entering or leaving, as RecordEvents logs it.
type Event struct {
	At    time.Time
	Enter bool
}

// maxEvents bounds the event log; past it, events are not recorded.
const maxEvents = 1 << 20

// RecordEvents clears the event log and starts (on) or stops logging every
// slow_tool entry and exit, for measuring how fast a freed slot is reused.
func (d *Demo) RecordEvents(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.recording = on
	if on {
		d.events = nil
	}
}

// Events returns the entries and exits logged since RecordEvents(true), in
// the order they happened.
func (d *Demo) Events() []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.events)
}

func (d *Demo) eventLocked(enter bool) {
	if d.recording && len(d.events) < maxEvents {
		d.events = append(d.events, Event{At: time.Now(), Enter: enter})
	}
}

// SlowArgs are slow_tool's arguments.
type SlowArgs struct {
	// MS is how long to sleep, in milliseconds (default 1000).
	MS *int `json:"ms,omitempty" jsonschema:"sleep time in milliseconds (default 1000)"`
	// UntilInFlight, if positive, ends the sleep early once that many calls
	// are in flight at the same time.
	UntilInFlight int `json:"until_in_flight,omitempty" jsonschema:"end early once this many calls are in flight together"`
	// Gate, if set, holds the call until the gate of that name is opened
	// (by the process running the server), or ms passes.
	Gate string `json:"gate,omitempty" jsonschema:"hold until this gate is opened"`
	// RetryAfter, if positive, makes the server answer the call's HTTP
	// request 429 with a Retry-After of that many seconds, before the
	// call runs (MCP over HTTP only: in memory the call fails as a tool).
	RetryAfter int `json:"retry_after,omitempty" jsonschema:"answer HTTP 429 with this Retry-After (seconds) instead"`
	// FailStatus, from 500 to 599, makes the server answer the call's
	// HTTP request with that status, before the call runs: an unwell
	// backend, for this call alone (MCP over HTTP only, as RetryAfter).
	FailStatus int `json:"fail_status,omitempty" jsonschema:"answer HTTP with this 5xx status instead"`
}

// maxRetryAfter bounds retry_after, in seconds.
const maxRetryAfter = 3600

// slowSchema is slow_tool's input schema: SlowArgs's, with ms an integer.
// Inferred from its pointer type (absent means the default), ms would be
// ["null","integer"], which clients that map schemas onto a one-type
// dialect reject or flag (the MCP Inspector's --strict does).
func slowSchema() *jsonschema.Schema {
	s, err := jsonschema.For[SlowArgs](nil)
	if err != nil {
		panic("slow_tool schema: " + err.Error()) // a fixed Go type: cannot fail
	}
	ms := s.Properties["ms"]
	ms.Types, ms.Type = nil, "integer"
	return s
}

// SlowResult is slow_tool's structured result.
type SlowResult struct {
	// InFlightAtEntry is how many calls were in flight, this one included,
	// when it started.
	InFlightAtEntry int `json:"in_flight_at_entry"`
	// Peak is the highest InFlightAtEntry seen since the last reset.
	Peak int `json:"peak"`
	// SleptMS is how long the call held.
	SleptMS int64 `json:"slept_ms"`
	// EnteredAtMS is when the call started, in Unix milliseconds.
	EnteredAtMS int64 `json:"entered_at_ms"`
}

// Stats is the JSON served at /stats.
type Stats struct {
	InFlight int `json:"in_flight"`
	Peak     int `json:"peak"`
	Calls    int `json:"calls"`
	// Completed is the calls that ran to their end; Cancelled those that
	// ended early because their context was cancelled.
	Completed int `json:"completed"`
	Cancelled int `json:"cancelled"`
}

// New returns a demo server.
func New() *Demo {
	d := &Demo{changed: make(chan struct{}), gates: map[string]chan struct{}{}, barriers: map[chan struct{}]int{}, lifted: make(chan struct{})}
	d.server = mcp.NewServer(&mcp.Implementation{Name: "demo-upstream", Version: "1.0.0"}, &mcp.ServerOptions{CompletionHandler: d.complete})
	mcp.AddTool(d.server, &mcp.Tool{
		Name:        "slow_tool",
		Description: "Sleeps, then reports how many calls were in flight when it started and the peak seen so far. Sends progress when asked.",
		InputSchema: slowSchema(),
	}, d.slow)
	d.server.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "slow", URITemplate: "demo://slow/{ms}", MIMEType: "application/json",
		Description: "Held ms milliseconds and counted as slow_tool's calls; reads as their counters.",
	}, d.readSlow)
	d.server.AddPrompt(&mcp.Prompt{
		Name: "slow_prompt", Description: "Held ms milliseconds and counted as slow_tool's calls.",
		Arguments: []*mcp.PromptArgument{{Name: "ms", Description: "how long to hold, in milliseconds (default 1000)"}},
	}, d.getSlowPrompt)
	mcp.AddTool(d.server, &mcp.Tool{Name: "echo", Description: "Returns its text."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	mcp.AddTool(d.server, &mcp.Tool{Name: "fail_tool", Description: "Always fails as a tool (isError), never as a protocol error."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the tool failed on purpose"}}}, nil, nil
		})
	return d
}

// Server is the MCP server, for in-memory transports.
func (d *Demo) Server() *mcp.Server { return d.server }

// HandlerOptions says how Handler serves MCP streamable HTTP. The zero value
// is the SDK's default: stateful sessions, answers as event streams.
type HandlerOptions struct {
	// Stateless serves every request on its own, without sessions: then
	// notifications/cancelled cannot reach a running call (it arrives as an
	// unrelated request), and, without PropagateCancellation, neither does
	// the request being closed.
	Stateless bool
	// JSONResponse answers calls with application/json instead of an event
	// stream.
	JSONResponse bool
	// PropagateCancellation cancels a 2026-07-28 call when its request is
	// closed (the SDK's PropagateRequestCancellation).
	PropagateCancellation bool
}

// Handler serves /mcp (streamable HTTP), /sse (HTTP+SSE), the OpenAPI API
// and the counters, with the SDK's default streamable-HTTP options.
func (d *Demo) Handler() http.Handler { return d.HandlerWith(HandlerOptions{}) }

// HandlerWith is Handler with /mcp served as opts say.
func (d *Demo) HandlerWith(opts HandlerOptions) http.Handler {
	mux := http.NewServeMux()
	get := func(*http.Request) *mcp.Server { return d.server }
	mux.Handle("/mcp", refuseRetryAfter(mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{
		Stateless:                    opts.Stateless,
		JSONResponse:                 opts.JSONResponse,
		PropagateRequestCancellation: opts.PropagateCancellation,
	})))
	mux.Handle("/sse", mcp.NewSSEHandler(get, nil))
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, d.Stats())
	})
	mux.HandleFunc("GET /stats/idle", func(w http.ResponseWriter, r *http.Request) {
		// Long poll: answers once no call is in flight, or when the
		// client gives up.
		if err := d.WaitIdle(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, d.Stats())
	})
	mux.HandleFunc("POST /stats/reset", func(w http.ResponseWriter, r *http.Request) {
		d.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /gates/{name}", func(w http.ResponseWriter, r *http.Request) {
		d.OpenGate(r.PathValue("name"))
		w.WriteHeader(http.StatusNoContent)
	})
	d.apiRoutes(mux)
	return mux
}

func (d *Demo) slow(ctx context.Context, req *mcp.CallToolRequest, in SlowArgs) (*mcp.CallToolResult, SlowResult, error) {
	if in.RetryAfter != 0 || in.FailStatus != 0 {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "retry_after and fail_status are answered over HTTP only"}}}, SlowResult{}, nil
	}
	progress := func(done float64, msg string) {
		if token := req.Params.GetProgressToken(); token != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: done, Total: 1, Message: msg})
		}
	}
	res, err := d.hold(ctx, in, progress)
	if err != nil {
		return nil, SlowResult{}, err
	}
	text := fmt.Sprintf("slept %d ms; in flight at entry %d; peak %d", res.SleptMS, res.InFlightAtEntry, res.Peak)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, res, nil
}

// hold is slow_tool (and the HTTP API's /api/slow): it counts the call in
// flight and holds it as in asks.
func (d *Demo) hold(ctx context.Context, in SlowArgs, progress func(done float64, msg string)) (SlowResult, error) {
	ms := 1000
	if in.MS != nil {
		ms = *in.MS
	}
	sleep := time.Duration(ms) * time.Millisecond
	if ms < 0 || sleep > MaxSleep {
		return SlowResult{}, fmt.Errorf("ms must be between 0 and %d", MaxSleep.Milliseconds())
	}
	start := time.Now()
	d.mu.Lock()
	d.inFlight++
	d.calls++
	entry := d.inFlight
	d.peak = max(d.peak, entry)
	d.eventLocked(true)
	// Release every call waiting for the in-flight count just reached.
	for ch, n := range d.barriers {
		if d.inFlight >= n {
			close(ch)
			delete(d.barriers, ch)
		}
	}
	var gate, barrier chan struct{}
	hung := d.hang
	if hung {
		// A stalled backend: the call holds until it is cancelled or
		// the stall ends.
		in.UntilInFlight, in.Gate = 0, ""
		sleep = MaxSleep
		gate = d.lifted
	} else if in.Gate != "" {
		gate = d.gateLocked(in.Gate)
	}
	if in.UntilInFlight > 0 {
		barrier = make(chan struct{})
		if d.inFlight >= in.UntilInFlight {
			close(barrier)
		} else {
			d.barriers[barrier] = in.UntilInFlight
		}
	}
	d.notifyLocked()
	d.mu.Unlock()
	var err error
	defer func() {
		d.mu.Lock()
		d.inFlight--
		if err != nil {
			d.cancelled++
		} else {
			d.completed++
		}
		d.eventLocked(false)
		delete(d.barriers, barrier)
		d.notifyLocked()
		d.mu.Unlock()
	}()

	progress(0, "started")

	// The call ends when ms passes, or when its gate (if any) is open and
	// its barrier (if any) was reached, whichever comes first.
	timer := time.NewTimer(sleep)
	defer timer.Stop()
	for gate != nil || barrier != nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
			return SlowResult{}, err
		case <-timer.C:
			gate, barrier = nil, nil
		case <-gate:
			gate = nil
		case <-barrier:
			barrier = nil
		}
	}
	if in.Gate == "" && in.UntilInFlight <= 0 && !hung {
		select {
		case <-ctx.Done():
			err = ctx.Err()
			return SlowResult{}, err
		case <-timer.C:
		}
	}
	d.mu.Lock()
	res := SlowResult{InFlightAtEntry: entry, Peak: d.peak, SleptMS: time.Since(start).Milliseconds(), EnteredAtMS: start.UnixMilli()}
	d.mu.Unlock()
	progress(1, "done")
	return res, nil
}

// refuseRetryAfter answers 429 with Retry-After for a slow_tool call that
// asks for it (retry_after), or the 5xx status one asks for (fail_status),
// and passes every other request to next.
func refuseRetryAfter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "cannot read the request", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Name      string   `json:"name"`
				Arguments SlowArgs `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" && msg.Params.Name == "slow_tool" {
			if n := msg.Params.Arguments.RetryAfter; n > 0 && n <= maxRetryAfter {
				w.Header().Set("Retry-After", strconv.Itoa(n))
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return
			}
			if s := msg.Params.Arguments.FailStatus; s >= 500 && s <= 599 {
				http.Error(w, "failed on purpose", s)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readSlow reads demo://slow/{ms}: held as slow_tool is, then its
// counters as JSON.
func (d *Demo) readSlow(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	ms, err := strconv.Atoi(strings.TrimPrefix(uri, "demo://slow/"))
	if err != nil || !strings.HasPrefix(uri, "demo://slow/") {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	res, err := d.hold(ctx, SlowArgs{MS: &ms}, func(float64, string) {})
	if err != nil {
		return nil, err
	}
	text, _ := json.Marshal(res)
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(text)}}}, nil
}

// getSlowPrompt gets slow_prompt: held as slow_tool is for its ms.
func (d *Demo) getSlowPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	var in SlowArgs
	if v, ok := req.Params.Arguments["ms"]; ok {
		ms, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("ms must be an integer")
		}
		in.MS = &ms
	}
	res, err := d.hold(ctx, in, func(float64, string) {})
	if err != nil {
		return nil, err
	}
	text := fmt.Sprintf("slept %d ms; in flight at entry %d; peak %d", res.SleptMS, res.InFlightAtEntry, res.Peak)
	return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}}}, nil
}

// complete completes slow_prompt's ms: held as slow_tool is for the ms
// typed so far (none when it is not a number), then offers the round
// numbers that start with it.
func (d *Demo) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	typed := req.Params.Argument.Value
	if ms, err := strconv.Atoi(typed); err == nil {
		if _, err := d.hold(ctx, SlowArgs{MS: &ms}, func(float64, string) {}); err != nil {
			return nil, err
		}
	}
	var values []string
	for _, v := range []string{"0", "10", "100", "1000", "10000"} {
		if strings.HasPrefix(v, typed) {
			values = append(values, v)
		}
	}
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}, nil
}

func (d *Demo) notifyLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *Demo) gateLocked(name string) chan struct{} {
	g, ok := d.gates[name]
	if !ok {
		g = make(chan struct{})
		d.gates[name] = g
	}
	return g
}

// OpenGate releases every call held on the named gate, now and later.
func (d *Demo) OpenGate(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gateLocked(name)
	select {
	case <-g:
	default:
		close(g)
	}
}

// SetHang makes slow_tool calls that start from now on hold until they are
// cancelled (or MaxSleep, or the hang is lifted), whatever their arguments:
// a stalled backend.
//
// Lifting the hang (false) lets the calls held by it answer, as a stalled
// backend that recovers does.
func (d *Demo) SetHang(hang bool) {
	d.mu.Lock()
	switch {
	case hang && !d.hang:
		d.lifted = make(chan struct{})
	case !hang && d.hang:
		close(d.lifted)
	}
	d.hang = hang
	d.notifyLocked()
	d.mu.Unlock()
}

// Stats returns the counters.
func (d *Demo) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.statsLocked()
}

func (d *Demo) statsLocked() Stats {
	return Stats{InFlight: d.inFlight, Peak: d.peak, Calls: d.calls, Completed: d.completed, Cancelled: d.cancelled}
}

// Reset zeroes the peak and call counts (in-flight calls keep counting).
func (d *Demo) Reset() {
	d.mu.Lock()
	d.peak = d.inFlight
	d.calls, d.completed, d.cancelled = 0, 0, 0
	d.gates = map[string]chan struct{}{}
	d.notifyLocked()
	d.mu.Unlock()
}

// WaitInFlight blocks until at least n slow_tool calls are in flight, or ctx
// ends.
func (d *Demo) WaitInFlight(ctx context.Context, n int) error {
	return d.wait(ctx, func(s Stats) bool { return s.InFlight >= n })
}

// WaitIdle blocks until no slow_tool call is in flight, or ctx ends.
func (d *Demo) WaitIdle(ctx context.Context) error {
	return d.wait(ctx, func(s Stats) bool { return s.InFlight == 0 })
}

// WaitCalls blocks until at least n slow_tool calls have started since the
// last reset, or ctx ends.
func (d *Demo) WaitCalls(ctx context.Context, n int) error {
	return d.wait(ctx, func(s Stats) bool { return s.Calls >= n })
}

func (d *Demo) wait(ctx context.Context, ok func(Stats) bool) error {
	for {
		d.mu.Lock()
		s := d.statsLocked()
		changed := d.changed
		d.mu.Unlock()
		if ok(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo upstream: %w (now %+v)", ctx.Err(), s)
		case <-changed:
		}
	}
}
