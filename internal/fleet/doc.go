// Package fleet is the gateway's fleet as its tables show it, for the
// people who run it: the servers, keys and lease items read (Store), each
// limiter described with its server's caps (Build, the report of mcpgate
// status and the console), and the operator's edits checked as the gateway
// checks them (a server's attributes changed by Change, keys created and
// revoked). The admin CLI (cmd/mcpgate) and the console (internal/console)
// both use it, so what one shows and writes the other does too.
//
// Lease items are read only through the lease package's Describe; their
// changes go through lease.Admin.
package fleet
