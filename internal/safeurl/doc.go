// Package safeurl keeps the secrets that URLs carry out of logs and away
// from other hosts.
//
// Upstream URLs often hold credentials: a token in the query
// (?api_key=…), a user and password before the host. Redact renders a URL
// with every query value and the userinfo replaced, RedactText does the
// same to every URL inside a text (an error message that quotes the URL it
// failed on), and NewLogHandler applies RedactText to every record a
// slog.Logger writes, so no log line can carry them whatever produced it.
//
// SameOrigin tells whether two URLs share scheme, host and port, the rule
// for where a request made on behalf of an upstream may go (redirects, the
// HTTP+SSE transport's endpoint event). LocalAddr, LocalHost and the dial
// check RefuseLocal keep upstream requests off the gateway's own host and
// link: loopback (the Lambda runtime API), link-local and instance
// metadata addresses.
package safeurl
