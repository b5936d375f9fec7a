// Package extension runs an internal AWS Lambda extension inside the
// gateway's own process, so that work an invocation leaves running after its
// response (a cut-off call's exchange with its upstream, which keeps its slot
// until the upstream stops) finishes before Lambda freezes the execution
// environment.
//
// Lambda returns the function's response to the caller as soon as the
// runtime has sent it, but the invocation (its billed duration, and the
// function timeout) lasts until the runtime and every registered extension
// have asked for the next event (Lambda Extensions API, "Invoke phase").
// The extension registers for INVOKE events during init; for each, it waits
// for the invocation's handler to return, runs the caller's after function
// (bounded by the invocation's deadline), and only then asks for the next
// event. An internal extension may not register for SHUTDOWN events.
package extension
