package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Status is where a task stands, as the wire says it.
type Status string

// The statuses of a task (the extension's).
const (
	StatusWorking       Status = "working"
	StatusInputRequired Status = "input_required"
	StatusCompleted     Status = "completed"
	StatusFailed        Status = "failed"
	StatusCancelled     Status = "cancelled"
)

// Terminal reports whether a task in status s has ended: completed, failed
// or cancelled. A terminal record's status and outcome never change.
func Terminal(s Status) bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

func (s Status) known() bool {
	return s == StatusWorking || s == StatusInputRequired || Terminal(s)
}

// Kind says who runs a task.
type Kind string

// The kinds of task.
const (
	// KindGateway is a call the gateway queued and a worker runs.
	KindGateway Kind = "gateway"
	// KindRelay is an upstream's own task, relayed under a gateway handle.
	KindRelay Kind = "relay"
)

func (k Kind) known() bool { return k == KindGateway || k == KindRelay }

// Bounds of a record's fields. Those that come from the network are
// refused beyond them (ErrTooLarge, or ErrInvalid for a name or id), never
// cut. At the default MaxResultBytes a record within every bound fits one
// DynamoDB item with room to spare, as long as it carries one outcome
// (Result, Error or InputRequests) at a time.
const (
	// MaxParamsBytes bounds Params: a task's call, arguments included.
	MaxParamsBytes = 64 << 10
	// MaxInputResponsesBytes bounds InputResponses.
	MaxInputResponsesBytes = 32 << 10
	// MaxRequestStateBytes bounds RequestState.
	MaxRequestStateBytes = 16 << 10
	// MaxPrincipalBytes bounds Principal.
	MaxPrincipalBytes = 32 << 10
	// MaxStatusMessageBytes bounds StatusMessage; callers that pass on a
	// message from elsewhere clip it to this first.
	MaxStatusMessageBytes = 1 << 10
	// MaxToolBytes bounds Tool.
	MaxToolBytes = 256
	// MaxServerIDBytes bounds ServerID.
	MaxServerIDBytes = 64
	// MaxOwnerBytes bounds Owner; MaxOwnerIDBytes bounds OwnerID.
	MaxOwnerBytes   = 256
	MaxOwnerIDBytes = 64
	// MaxProtocolBytes bounds Protocol; MaxTraceparentBytes bounds
	// Traceparent (55 in the W3C's version 00); MaxTracestateBytes bounds
	// Tracestate (the W3C's 32 members of a few bytes each: 512 is what
	// vendors are asked to keep).
	MaxProtocolBytes    = 32
	MaxTraceparentBytes = 128
	MaxTracestateBytes  = 512
	// MaxLeaseIDBytes bounds LeaseID; MaxUpstreamIDBytes bounds UpstreamID.
	MaxLeaseIDBytes    = 128
	MaxUpstreamIDBytes = 512

	// DefaultMaxResultBytes is Store.MaxResultBytes when zero
	// (MAX_TASK_RESULT_BYTES's default): 256 KiB.
	DefaultMaxResultBytes = 256 << 10
	// MaxResultBytesLimit is the largest Store.MaxResultBytes: 350 KiB,
	// which leaves the rest of a record room under MaxItemBytes.
	MaxResultBytesLimit = 350 << 10
	// MaxItemBytes is DynamoDB's limit on one item: 400 KB, names and
	// values together.
	MaxItemBytes = 400 << 10

	// MinTTL and MaxTTL bound a task's lifetime.
	MinTTL = time.Second
	MaxTTL = 24 * time.Hour
)

// Record is one task.
type Record struct {
	// ID is the handle given to the agent: NewID().
	ID   string
	Kind Kind
	// ServerID is the server the task belongs to.
	ServerID string
	// Tool is the upstream tool's name, as the server knows it.
	Tool string
	// Owner is the principal's auth.Principal.StateKey (a full-strength
	// hash, never a credential); OwnerID its auth.Principal.ID (short,
	// safe to log).
	Owner   string
	OwnerID string
	// Principal is engine-owned: what the worker runs the call as (no
	// credential).
	Principal     json.RawMessage
	Status        Status
	StatusMessage string
	// CreatedAt is set by Create (when zero) and UpdatedAt by every write,
	// both to the millisecond.
	CreatedAt, UpdatedAt time.Time
	// TTL is the task's lifetime from CreatedAt (ttlMs on the wire): past
	// it the task is gone.
	TTL          time.Duration
	PollInterval time.Duration
	// Params are the tools/call params as the agent sent them; Protocol is
	// the protocol version it spoke; Traceparent and Tracestate the W3C
	// trace context of the span of the request that created the task (the
	// worker's span links to it), empty when tracing is off.
	Params      json.RawMessage
	Protocol    string
	Traceparent string
	Tracestate  string
	// Result is the CallToolResult when completed; Error a JSON-RPC error
	// object {code,message,data} when failed; InputRequests (with
	// RequestState) the upstream's requests when input_required.
	Result, Error, InputRequests json.RawMessage
	RequestState                 string
	// InputResponses are those tasks/update brought, for the next round.
	InputResponses json.RawMessage
	// LeaseID is the task's ticket or lease in its server's lease item;
	// CancelRequested is set by tasks/cancel while it runs; Attempt counts
	// worker starts.
	LeaseID         string
	CancelRequested bool
	Attempt         int
	// RunUntil is when a running task's worker must have written its
	// outcome: its call's timeout, its server's cancel grace and the lease
	// margin after it started. A task still working past it lost its
	// worker (Stopped).
	RunUntil time.Time
	// UpstreamID is a relayed task's own id at its upstream.
	UpstreamID string
	// Version is the record's version: 1 when created, one more on every
	// Update, which is conditioned on it.
	Version int64
}

// Stopped reports whether a working task's worker stopped without writing
// its outcome (its instance died): RunUntil has passed at now.
func (r *Record) Stopped(now time.Time) bool {
	return r.Status == StatusWorking && !r.RunUntil.IsZero() && now.After(r.RunUntil)
}

// ExpiresAt is when the task is gone: CreatedAt + TTL.
func (r *Record) ExpiresAt() time.Time { return r.CreatedAt.Add(r.TTL) }

// Expired reports whether the task is gone at now.
func (r *Record) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt()) }

// Clone returns a deep copy of r.
func (r *Record) Clone() *Record {
	c := *r
	for _, p := range []*json.RawMessage{&c.Principal, &c.Params, &c.Result, &c.Error, &c.InputRequests, &c.InputResponses} {
		*p = bytes.Clone(*p)
	}
	return &c
}

// ErrInvalid means a record cannot be written as it is: a field missing,
// unknown, malformed or too long to be a name or id. The message names the
// field.
var ErrInvalid = errors.New("tasks: invalid record")

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

// SizeError is a field, or the whole item, over its bound. It is
// ErrTooLarge (errors.Is).
type SizeError struct {
	// Field is the item attribute ("result", "params", …), or "item" for
	// the whole item.
	Field string
	// Size and Limit are in bytes.
	Size, Limit int
}

func (e *SizeError) Error() string {
	what := e.Field
	switch e.Field {
	case attrResult, attrError, attrInputRequests:
		what += fmt.Sprintf(" is %d bytes, over the gateway's limit of %d (MAX_TASK_RESULT_BYTES)", e.Size, e.Limit)
	case "item":
		what = fmt.Sprintf("the task's record would be %d bytes, over DynamoDB's item limit of %d", e.Size, e.Limit)
	default:
		what += fmt.Sprintf(" is %d bytes, over the limit of %d", e.Size, e.Limit)
	}
	return "tasks: " + what
}

// Is makes a SizeError ErrTooLarge.
func (e *SizeError) Is(target error) bool { return target == ErrTooLarge }

// validate checks every field of r against its bounds; maxResult bounds
// each outcome.
func (r *Record) validate(maxResult int) error {
	if !ValidID(r.ID) {
		return invalid(attrID, "not a task handle")
	}
	if !r.Kind.known() {
		return invalid(attrKind, "%q is not %s or %s", r.Kind, KindGateway, KindRelay)
	}
	if !r.Status.known() {
		return invalid(attrStatus, "%q is not a task status", r.Status)
	}
	for _, f := range []struct {
		name     string
		v        string
		max      int
		required bool
	}{
		{attrServerID, r.ServerID, MaxServerIDBytes, true},
		{attrTool, r.Tool, MaxToolBytes, true},
		{attrOwner, r.Owner, MaxOwnerBytes, true},
		{attrOwnerID, r.OwnerID, MaxOwnerIDBytes, true},
		{attrProtocol, r.Protocol, MaxProtocolBytes, false},
		{attrTraceparent, r.Traceparent, MaxTraceparentBytes, false},
		{attrTracestate, r.Tracestate, MaxTracestateBytes, false},
		{attrLeaseID, r.LeaseID, MaxLeaseIDBytes, false},
		{attrUpstreamID, r.UpstreamID, MaxUpstreamIDBytes, false},
	} {
		switch {
		case f.v == "" && f.required:
			return invalid(f.name, "missing")
		case len(f.v) > f.max:
			return invalid(f.name, "%d bytes, more than %d", len(f.v), f.max)
		case !utf8.ValidString(f.v):
			return invalid(f.name, "not valid UTF-8")
		}
	}
	for _, f := range []struct {
		name string
		v    string
		max  int
	}{
		{attrStatusMessage, r.StatusMessage, MaxStatusMessageBytes},
		{attrRequestState, r.RequestState, MaxRequestStateBytes},
	} {
		if len(f.v) > f.max {
			return &SizeError{Field: f.name, Size: len(f.v), Limit: f.max}
		}
		if !utf8.ValidString(f.v) {
			return invalid(f.name, "not valid UTF-8")
		}
	}
	for _, f := range []struct {
		name string
		v    json.RawMessage
		max  int
	}{
		{attrPrincipal, r.Principal, MaxPrincipalBytes},
		{attrParams, r.Params, MaxParamsBytes},
		{attrInputResponses, r.InputResponses, MaxInputResponsesBytes},
		{attrResult, r.Result, maxResult},
		{attrError, r.Error, maxResult},
		{attrInputRequests, r.InputRequests, maxResult},
	} {
		if len(f.v) > f.max {
			return &SizeError{Field: f.name, Size: len(f.v), Limit: f.max}
		}
		// JSON is UTF-8 (RFC 8259), and DynamoDB strings must be.
		if len(f.v) > 0 && (!utf8.Valid(f.v) || !json.Valid(f.v)) {
			return invalid(f.name, "not valid JSON")
		}
	}
	if len(r.Result) > 0 && len(r.Error) > 0 {
		return invalid(attrError, "a task has a result or an error, not both")
	}
	switch {
	case r.CreatedAt.IsZero():
		return invalid(attrCreatedAt, "missing")
	case r.TTL < MinTTL || r.TTL > MaxTTL:
		return invalid(attrTTLMs, "%v is not within %v..%v", r.TTL, MinTTL, MaxTTL)
	case r.PollInterval < 0 || r.PollInterval > r.TTL:
		return invalid(attrPollMs, "%v is not within 0..ttl", r.PollInterval)
	case r.Attempt < 0:
		return invalid(attrAttempt, "negative")
	}
	return nil
}

// immutable are the fields only Create writes: the handle and its binding.
func (r *Record) immutableChange(old *Record) error {
	for _, f := range []struct {
		name     string
		new, old string
	}{
		{attrID, r.ID, old.ID},
		{attrKind, string(r.Kind), string(old.Kind)},
		{attrServerID, r.ServerID, old.ServerID},
		{attrTool, r.Tool, old.Tool},
		{attrOwner, r.Owner, old.Owner},
		{attrOwnerID, r.OwnerID, old.OwnerID},
	} {
		if f.new != f.old {
			return invalid(f.name, "cannot change once created")
		}
	}
	if !r.CreatedAt.Equal(old.CreatedAt) {
		return invalid(attrCreatedAt, "cannot change once created")
	}
	if r.TTL != old.TTL {
		return invalid(attrTTLMs, "cannot change once created")
	}
	return nil
}
