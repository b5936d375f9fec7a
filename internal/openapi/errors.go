package openapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrUnsupportedVersion means the document is not OpenAPI 3.x: Swagger 2.0,
// or an openapi version kin-openapi does not know.
var ErrUnsupportedVersion = errors.New("unsupported OpenAPI version")

// ErrOriginChanged means the document sends calls to another origin than
// Options.Origin, the one an earlier load pinned: the API's credential
// must not follow it there.
var ErrOriginChanged = errors.New("the document moved the API to another origin")

// ErrUnknownTool means the API has no tool of that name.
var ErrUnknownTool = errors.New("unknown tool")

// ArgsError means a call's arguments do not fit the tool's input schema as
// far as Call checks it: not a JSON object, an unknown argument, a required
// one missing, or a value that cannot be sent in its parameter's place. The
// request was not sent. It is the caller's mistake ("invalid params"), and
// its message is safe to show: it names arguments, never their values.
type ArgsError struct {
	// Tool is the tool called.
	Tool string
	// Problems lists every problem found, in a stable order.
	Problems []ArgProblem
}

// ArgProblem is one problem with a call's arguments.
type ArgProblem struct {
	// Arg is the argument's name, or "" for the arguments as a whole.
	Arg string
	// Reason says what is wrong, without the argument's value.
	Reason string
}

func (e *ArgsError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		if p.Arg == "" {
			parts[i] = p.Reason
		} else {
			parts[i] = fmt.Sprintf("argument %q: %s", p.Arg, p.Reason)
		}
	}
	return fmt.Sprintf("tool %q: invalid arguments: %s", e.Tool, strings.Join(parts, "; "))
}

// StatusError means the API answered with a status that is neither 2xx
// nor 4xx: a 5xx (or an unexpected 1xx/3xx). It counts as an
// infrastructure failure of the upstream.
type StatusError struct {
	// Tool is the tool called.
	Tool string
	// Method and Path are the operation's method and path template (not
	// the request URL, which may carry credentials in its query).
	Method, Path string
	// StatusCode is the response's HTTP status.
	StatusCode int
	// RetryAfter is the wait a 429 or 503 asked for (its Retry-After).
	RetryAfter time.Duration
	// Body is the start of the response body (at most 1 KiB), for logs.
	// It is the API's text: do not relay it to clients unfiltered.
	Body []byte
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("tool %q: %s %s: API answered HTTP %d", e.Tool, e.Method, e.Path, e.StatusCode)
}

// Infrastructure reports true: the upstream is unwell.
func (e *StatusError) Infrastructure() bool { return true }

// TransportError means the request could not be sent or its response not
// read: connection refused or reset, TLS failure, a refused redirect, the
// context's end. Err is the cause, without the request URL or headers;
// errors.Is(err, context.DeadlineExceeded) and context.Canceled work
// through it.
type TransportError struct {
	// Tool is the tool called.
	Tool string
	// Method and Path are the operation's method and path template.
	Method, Path string
	// Err is the cause.
	Err error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("tool %q: %s %s: %v", e.Tool, e.Method, e.Path, e.Err)
}

func (e *TransportError) Unwrap() error { return e.Err }

// Infrastructure reports whether the failure says the upstream is unwell
// (unreachable, broken, too slow), as opposed to the caller going away.
func (e *TransportError) Infrastructure() bool { return !errors.Is(e.Err, context.Canceled) }
