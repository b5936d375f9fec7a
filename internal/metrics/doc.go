// Package metrics writes the gateway's four CloudWatch Embedded Metric
// Format (EMF) records: one JSON object per line, which CloudWatch Logs
// turns into metrics, so the hot path makes no network call of its own.
//
// Call, BreakerTransition, Exchange and StoreStats each marshal one fixed
// record with encoding/json and write it at once, in one Write call, so
// records never interleave. Under Lambda the line is on stdout before the
// invocation answers; there is nothing to flush. Package metricstest parses
// and checks lines against the format, for tests.
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
