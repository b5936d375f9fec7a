package upstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	Err error
}

func (e *Error) Error() string {
	return fmt.Sprintf("upstream %s: %s: %v", e.ServerID, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Infrastructure reports whether the failure says the upstream is unwell
// (timeout, unreachable, broken transport, or its own internal error), as
// opposed to an answer about the request.
func (e *Error) Infrastructure() bool {
	switch e.Kind {
	case KindTimeout, KindUnavailable:
		return true
	case KindRPC:
		return e.RPC != nil && e.RPC.Code == jsonrpc.CodeInternalError
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

func classify(ctx context.Context, srv *registry.Server, err error) error {
	e := &Error{ServerID: srv.ID, Err: err}
	var rpcErr *jsonrpc.Error
	var credErr *CredentialError
	switch {
	case errors.As(err, &credErr) && ctx.Err() == nil:
		e.Kind = KindCredential
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		e.Kind = KindTimeout
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		e.Kind = KindCanceled
	case errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, ErrResponseTooLarge):
		e.Kind = KindUnavailable
	case errors.As(err, &rpcErr) && !localCode(rpcErr.Code):
		e.Kind = KindRPC
		e.RPC = rpcErr
	default:
		e.Kind = KindUnavailable
	}
	return e
}
