package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// Kind classifies an upstream failure.
type Kind int

const (
	// KindUnavailable: the upstream could not be reached, or its transport
	// failed (connection refused or reset, HTTP 5xx, a malformed response).
	KindUnavailable Kind = iota
	// KindTimeout: the call's deadline passed before the upstream answered.
	KindTimeout
	// KindCanceled: the caller went away.
	KindCanceled
	// KindRPC: the upstream answered with a JSON-RPC error.
	KindRPC
	// KindRejected: the upstream refused the request with an HTTP 4xx
	// other than 408 and 429 (Status says which), without a JSON-RPC
	// error: it could not take this request (its arguments, its size) or
	// the gateway's credentials for it.
	KindRejected
	// KindTooLarge: the upstream's answer went past one of the pool's
	// bounds (Err is a *LimitError) and was dropped.
	KindTooLarge
	// KindCredential: the gateway could not produce the server's
	// credential (see CredentialError); nothing was sent.
	KindCredential
)

func (k Kind) String() string {
	switch k {
	case KindTimeout:
		return "timeout"
	case KindCanceled:
		return "canceled"
	case KindRPC:
		return "rpc error"
	case KindRejected:
		return "rejected"
	case KindTooLarge:
		return "too large"
	case KindCredential:
		return "no credential"
	default:
		return "unavailable"
	}
}

// Error is a failed upstream call.
type Error struct {
	Kind     Kind
	ServerID string
	// RPC is the upstream's JSON-RPC error, for KindRPC.
	RPC *jsonrpc.Error
	// Status is the HTTP status of the upstream's answer, if one came and
	// was not a success (0 otherwise).
	Status int
	// RetryAfter is the wait a 429 or 503 answer asked for (its
	// Retry-After, at most retryafter.Max); 0 if none.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	return fmt.Sprintf("upstream %s: %s: %v", e.ServerID, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// CodeRateLimited is the JSON-RPC error of an upstream refusing a call
// for its rate (as SEP-3304 proposes).
const CodeRateLimited = -32023

// Overloaded reports whether the upstream pushed back rather than failed:
// an HTTP 429, a 503 with a Retry-After (a 503 without one is a failure),
// or a JSON-RPC rate-limit error. It is alive and asks for fewer calls.
func (e *Error) Overloaded() bool {
	switch {
	case e.Status == http.StatusTooManyRequests:
		return true
	case e.Status == http.StatusServiceUnavailable && e.RetryAfter > 0:
		return true
	}
	return e.Kind == KindRPC && e.RPC != nil && e.RPC.Code == CodeRateLimited
}

// Infrastructure reports whether the failure says the upstream is unwell
// (timeout, unreachable, broken transport, HTTP 5xx, 408 or 429, or its
// own internal error), as opposed to an answer about the request.
func (e *Error) Infrastructure() bool {
	switch e.Kind {
	case KindTimeout, KindUnavailable:
		return true
	case KindRPC:
		return e.RPC != nil && e.RPC.Code == jsonrpc.CodeInternalError
	}
	return false
}

// AboutRequest reports whether the failure came from this request rather
// than from the upstream's health: its caller went away, the upstream
// refused it (HTTP 4xx other than 408 and 429, or JSON-RPC invalid
// params), or its answer was too large to take. Such a failure must not
// count against the upstream, or one caller could cut it off for all.
func (e *Error) AboutRequest() bool {
	switch e.Kind {
	case KindCanceled, KindRejected, KindTooLarge:
		return true
	case KindRPC:
		return e.RPC != nil && e.RPC.Code == jsonrpc.CodeInvalidParams
	}
	return false
}

// localCode reports JSON-RPC codes that the SDK itself produces for a
// failed transport (the request was rejected before or while being sent,
// or the client is closing), not answers from the upstream.
func localCode(code int64) bool {
	return code == codeRejectedByTransport || code == codeClientClosing
}

const (
	codeRejectedByTransport = -32005
	codeClientClosing       = -32003
)

// classify wraps a failed call's err in an *Error. What the HTTP transport
// saw of the call's requests (ctx's traffic) tells a refused or
// oversized answer apart from a broken upstream, which the SDK's errors do
// not.
func (p *Pool) classify(ctx context.Context, srv *registry.Server, err error) error {
	e := &Error{ServerID: srv.ID, Err: err}
	var rpcErr *jsonrpc.Error
	var limit *LimitError
	ex := trafficFrom(ctx)
	if ex != nil {
		if st := int(ex.status.Load()); st < 200 || st > 299 {
			e.Status = st
			e.RetryAfter = time.Duration(ex.retryAfter.Load())
		}
	}
	var credErr *CredentialError
	switch {
	case errors.As(err, &credErr) && ctx.Err() == nil:
		e.Kind = KindCredential
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		e.Kind = KindTimeout
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		e.Kind = KindCanceled
	case errors.As(err, &limit):
		e.Kind = KindTooLarge
	case ex != nil && ex.overBudget.Load():
		e.Kind = KindTooLarge
		e.Err = fmt.Errorf("%w (%v)", &LimitError{What: "tool list", Limit: ex.budget}, err)
	case ex != nil && ex.tooLarge.Load() || errors.Is(err, ErrResponseTooLarge):
		e.Kind = KindTooLarge
		e.Err = fmt.Errorf("%w (%v)", &LimitError{What: "answer", Limit: p.maxResp}, err)
	case errors.As(err, &rpcErr) && !localCode(rpcErr.Code):
		e.Kind = KindRPC
		e.RPC = rpcErr
	case rejected(e.Status):
		e.Kind = KindRejected
	default:
		e.Kind = KindUnavailable
	}
	return e
}
