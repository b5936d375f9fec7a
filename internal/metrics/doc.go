// Package metrics writes CloudWatch Embedded Metric Format (EMF) records:
// one JSON object per line, which CloudWatch Logs turns into metrics, so the
// hot path makes no network call of its own.
//
// An Emitter validates each record against the format's rules (at most 100
// metrics, at most 30 dimensions in a set, non-empty names of at most 1024
// characters, string dimension values, finite numeric metric values, allowed
// units) and refuses invalid ones with an error wrapping ErrInvalid rather
// than writing a line CloudWatch would reject. Valid records are queued and
// written by one goroutine, one Write call per newline-terminated line, so
// records never interleave and a slow or failing io.Writer never blocks the
// caller: when the queue is full the record is dropped and counted.
//
// Call, BreakerTransition, Exchange and StoreStats build the gateway's
// records; Emit writes any Entry. Parse checks a line against the format,
// for tests.
//
// Records carry server ids, tool names, outcomes, request and lease ids,
// and the caller's principal ID (a short hash, as the gateway's log has
// it). There is no field for keys, tokens, call arguments or results, and
// none should be added: log lines are readable by everyone with access to
// the log group.
//
// The format is described at
// https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
package metrics
