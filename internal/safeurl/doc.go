// Package safeurl keeps the secrets that URLs carry out of logs and away
// from other hosts.
//
// Upstream URLs often hold credentials: a token in the query
// (?api_key=…), a user and password before the host. Redact renders a URL
// with every query value, the fragment and the userinfo replaced, and
// RedactText does the same to every URL inside a text (an error message
// that quotes the URL it failed on). They are the one redaction of URLs:
// every log record goes through RedactText (the gateway's log handler,
// clip.NewLogHandler), as does every error the CLI prints and every
// message the gateway answers with, and an error that names a URL names
// it through Redact, never url.URL.Redacted (which masks only a
// password).
//
// SameOrigin tells whether two URLs share scheme, host and port, the rule
// for where a request made on behalf of an upstream may go (redirects, the
// HTTP+SSE transport's endpoint event). LocalAddr, LocalHost and the dial
// check RefuseLocal keep upstream requests off the gateway's own host and
// link: loopback (the Lambda runtime API), link-local and instance
// metadata addresses.
package safeurl
