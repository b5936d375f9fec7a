// Package console is the operator's web console of mcpgate (mcpgate
// console): the fleet's caps, queues, breakers and calls, live, and the
// operator's actions on them, served on a loopback address with the
// operator's own AWS credentials. Nothing of it runs in the gateway.
//
// # Live
//
// One poller reads the store every Options.Interval (1 s) — one Scan of the
// servers table and one BatchGetItem of their lease items per 100 servers,
// and, while the Keys screen is watched, one Scan of the keys table and
// the keys' own lease items — and the gateway's log (a file it follows, or
// a CloudWatch Logs group every few seconds). Pages are html/template,
// their live parts fragments that htmx (vendored in static/htmx with its
// licence, embedded) fetches every second from the latest reading: however
// many pages are open, the store is read once per interval. A reading that
// fails or takes longer than Options.ReadTimeout leaves the last one on
// the page, which says the store is not answering and since when.
//
// # Actions
//
// Pause and resume admission, reset a breaker and release a lease go
// through lease.Admin; a cap or any attribute through fleet.Store's
// UpdateServer, checked as mcpgate servers set checks it and conditioned on
// the item as the operator saw it (its digest travels with the form); keys
// are created (the key shown once, in the answer to that request alone) and
// revoked through fleet.Store. Every action, done or refused, is one audit
// record (Auditor) naming the operator.
//
// # Security
//
// The console listens on loopback only and answers only requests whose Host
// is its own address (no DNS rebinding). Every request needs the per-run
// token: the URL the console prints carries it once, and the console trades
// it for an HttpOnly, SameSite=Strict cookie; a state-changing request also
// needs an Origin equal to the console's own. Pages carry a strict
// Content-Security-Policy (scripts from the console's own files only, no
// eval). Secrets appear as their references (secretsmanager:, ssm:, env:)
// and URLs redacted as the CLI redacts them; no page or API answer carries
// a key (beyond the answer that creates it), a token or an upstream
// credential.
package console
