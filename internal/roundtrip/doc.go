// Package roundtrip seals the state of a multi-round-trip request (MCP
// 2026-07-28, SEP-2322) while a client answers the upstream's input
// requests.
//
// An upstream tool may answer resultType "input_required" with input
// requests (elicitation, sampling, roots) and an opaque requestState; the
// client answers them and calls again with inputResponses and that state.
// The gateway keeps nothing between the two requests, and the second may
// reach another instance, so the state travels with the client: the
// gateway wraps the upstream's state in an envelope of its own, encrypted
// and authenticated with AES-256-GCM under a key the whole fleet shares.
// The envelope binds who asked (the principal), which server and which
// tool, a digest of the arguments, the upstream it is for, and an expiry.
// A client can neither read the upstream's state nor change it, and a state
// replayed by another principal, against another server, tool or upstream,
// with other arguments or after its expiry is refused before any upstream
// call.
//
// A Sealer also remembers the states it opened, until they expire: a state
// is good for one use per Sealer (per instance). Remembering uses across
// the fleet would need a store write per use, which the gateway does not
// make on the call path.
package roundtrip
