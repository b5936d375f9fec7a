// Package fault defines the gateway's client-facing errors: a stable
// machine-readable code, the HTTP status it maps to, whether a retry may
// succeed, and an optional retry-after hint.
//
// Internal failures are wrapped with %w and short context where they happen;
// at the edge they become a *fault.Error whose Message is safe to show to a
// client. The underlying cause is kept for logs only and never serialised.
package fault

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// Code is a stable, machine-readable error code. Clients match on it; its
// spelling never changes.
type Code string

// The codes the gateway answers with, REST and MCP alike.
const (
	// AtCapacity: the server's concurrency cap is reached and its policy is to
	// shed. Retry after RetryAfter.
	AtCapacity Code = "AT_CAPACITY"
	// QueueTimeout: the call waited for a slot for its whole queue budget.
	QueueTimeout Code = "QUEUE_TIMEOUT"
	// RateLimited: a request-rate limit (the key's, the server's, the
	// principal's on the server, the tool's), or the upstream's own, was
	// reached; Retry-After says when a call may pass.
	RateLimited Code = "RATE_LIMITED"
	// CircuitOpen: the circuit breaker of the tool is open (or its probe is
	// running).
	CircuitOpen Code = "CIRCUIT_OPEN"
	// UpstreamTimeout: the upstream did not answer within the call timeout.
	UpstreamTimeout Code = "UPSTREAM_TIMEOUT"
	// UpstreamError: the upstream could not be reached or answered with a
	// transport or protocol failure.
	UpstreamError Code = "UPSTREAM_ERROR"
	// Unauthorized: no credentials, an unknown or malformed key, a refused
	// token, or different credentials in several headers.
	Unauthorized Code = "UNAUTHORIZED"
	// Forbidden: the caller may not call this server, or its Origin is
	// refused. A tool the caller may not see is NotFound, as an unknown
	// tool.
	Forbidden Code = "FORBIDDEN"
	// NotFound: unknown server, tool or route.
	NotFound Code = "NOT_FOUND"
	// BadRequest: the request is malformed or fails validation.
	BadRequest Code = "BAD_REQUEST"
	// StoreUnavailable: the gateway's DynamoDB store failed or is throttled.
	StoreUnavailable Code = "STORE_UNAVAILABLE"
	// AuthUnavailable: an access token cannot be checked right now: the
	// issuer's signing keys cannot be fetched and none cached verifies it.
	AuthUnavailable Code = "AUTH_UNAVAILABLE"
	// PayloadTooLarge: the request body exceeds the gateway's limit.
	PayloadTooLarge Code = "PAYLOAD_TOO_LARGE"
	// MethodNotAllowed: the route exists but not for this HTTP method.
	MethodNotAllowed Code = "METHOD_NOT_ALLOWED"
	// Misconfigured: the server item in the servers table (or its OpenAPI
	// document) is invalid, or its calls cannot fit the request time.
	Misconfigured Code = "SERVER_MISCONFIGURED"
	// Internal: an unexpected failure inside the gateway.
	Internal Code = "INTERNAL"
)

type codeInfo struct {
	status    int
	retryable bool
}

var codes = map[Code]codeInfo{
	AtCapacity:       {http.StatusTooManyRequests, true},
	QueueTimeout:     {http.StatusTooManyRequests, true},
	RateLimited:      {http.StatusTooManyRequests, true},
	CircuitOpen:      {http.StatusServiceUnavailable, true},
	UpstreamTimeout:  {http.StatusGatewayTimeout, true},
	UpstreamError:    {http.StatusBadGateway, true},
	Unauthorized:     {http.StatusUnauthorized, false},
	Forbidden:        {http.StatusForbidden, false},
	NotFound:         {http.StatusNotFound, false},
	BadRequest:       {http.StatusBadRequest, false},
	StoreUnavailable: {http.StatusServiceUnavailable, true},
	AuthUnavailable:  {http.StatusServiceUnavailable, true},
	PayloadTooLarge:  {http.StatusRequestEntityTooLarge, false},
	MethodNotAllowed: {http.StatusMethodNotAllowed, false},
	Misconfigured:    {http.StatusBadGateway, false},
	Internal:         {http.StatusInternalServerError, false},
}

// Codes returns every code the gateway may answer with.
func Codes() []Code {
	out := make([]Code, 0, len(codes))
	for c := range codes {
		out = append(out, c)
	}
	return out
}

// Status is the HTTP status for the code; unknown codes map to 500.
func (c Code) Status() int {
	if info, ok := codes[c]; ok {
		return info.status
	}
	return http.StatusInternalServerError
}

// Retryable reports whether the same request may succeed if sent again later.
func (c Code) Retryable() bool { return codes[c].retryable }

// Error is a client-facing error. Message is safe to send to a client; Cause
// is for logs only.
type Error struct {
	// Code is the stable machine-readable code.
	Code Code
	// Message is a short human-readable explanation, safe to show a client.
	Message string
	// RetryAfter, when positive, hints how long to wait before retrying.
	RetryAfter time.Duration
	// Cause is the internal error, logged but never sent to a client.
	Cause error
	// Challenge, when set, is sent as the WWW-Authenticate header: how to
	// authenticate (401), or which scope is missing (403).
	Challenge string
	// Reason, when set, tells refusals of one code apart for machines:
	// for AT_CAPACITY, "at_capacity" (a cap is full), "queued_ahead"
	// (callers waiting come first), "queue_full" (as many wait as may),
	// "key_parallel" (the key's max_parallel_requests).
	Reason string
}

// New returns an Error with a formatted, client-safe message: any URL in
// it (an upstream's own error text may quote one) is redacted
// (safeurl.RedactText).
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: safeurl.RedactText(fmt.Sprintf(format, args...))}
}

// Wrap returns an Error carrying cause for the logs and a client-safe
// message, as New makes it.
func Wrap(cause error, code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: safeurl.RedactText(fmt.Sprintf(format, args...)), Cause: cause}
}

// WithChallenge sets the WWW-Authenticate challenge and returns e.
func (e *Error) WithChallenge(c string) *Error {
	e.Challenge = c
	return e
}

// WithReason sets the reason and returns e.
func (e *Error) WithReason(r string) *Error {
	e.Reason = r
	return e
}

// WithRetryAfter sets the retry hint and returns e.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	e.RetryAfter = d
	return e
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return string(e.Code) + ": " + e.Message + ": " + e.Cause.Error()
	}
	return string(e.Code) + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

// As returns err as a client-facing *Error. An error that is not one becomes
// Internal with a generic message, so internal text never reaches a client.
func As(err error) *Error {
	var fe *Error
	if errors.As(err, &fe) {
		return fe
	}
	return &Error{Code: Internal, Message: "internal error", Cause: err}
}

// Body is the JSON shape of an error response: {"error": {...}}.
type Body struct {
	Error Detail `json:"error"`
}

// Detail is the error object inside Body, and the structured content of an
// MCP tool result that reports a gateway error.
type Detail struct {
	Code         Code   `json:"code"`
	Message      string `json:"message"`
	Reason       string `json:"reason,omitempty"`
	Retryable    bool   `json:"retryable"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// Detail returns the serialisable form of e.
func (e *Error) Detail() Detail {
	d := Detail{Code: e.Code, Message: e.Message, Reason: e.Reason, Retryable: e.Code.Retryable()}
	if e.RetryAfter > 0 {
		d.RetryAfterMS = e.RetryAfter.Milliseconds()
		if d.RetryAfterMS == 0 {
			d.RetryAfterMS = 1
		}
	}
	return d
}

// RetryAfterHeader is the Retry-After header value (whole seconds, rounded
// up), or "" when e carries no hint.
func (e *Error) RetryAfterHeader() string {
	if e.RetryAfter <= 0 {
		return ""
	}
	secs := (e.RetryAfter + time.Second - 1) / time.Second
	return strconv.FormatInt(int64(secs), 10)
}

// WriteHTTP writes e as a JSON error response with the code's status and,
// when e has them, Retry-After and WWW-Authenticate headers.
func WriteHTTP(w http.ResponseWriter, e *Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if ra := e.RetryAfterHeader(); ra != "" {
		h.Set("Retry-After", ra)
	}
	if e.Challenge != "" {
		h.Set("WWW-Authenticate", e.Challenge)
	}
	w.WriteHeader(e.Code.Status())
	_ = JSONEncoder(w).Encode(Body{Error: e.Detail()})
}

// JSONEncoder returns an encoder for a JSON answer: without the HTML
// escaping Go does by default, which would send "<key>" as "\u003ckey\u003e"
// to a client that reads JSON, never HTML.
func JSONEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// MarshalJSON is json.Marshal without HTML escaping (see JSONEncoder),
// without the encoder's trailing newline.
func MarshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := JSONEncoder(&b).Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
