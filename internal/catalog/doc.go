// Package catalog keeps one copy of each upstream's tool list for the whole
// fleet, in the leases table, so that a cold instance reads an item instead
// of asking the upstream (outside the cap) for its tools.
//
// Items. For a server id S (which never contains "/", so no item here can
// collide with a limiter key):
//
//	catalog/S            the head: list_endpoint, list_version, list_chunks,
//	                     list_scope, list_expires, list_gen, gen, claim_by,
//	                     claim_until, ttl
//	catalog/S/V/N        chunk N of version V: list_data (gzip), ttl
//
// The list is gzip-compressed and split into chunks of at most ChunkBytes,
// so no item nears DynamoDB's 400 KB limit; the head stays small, and an
// instance that already holds version V re-reads only the head.
//
// Private lists. A list the upstream marks cacheScope "private" (SEP-2549:
// never shared across authorization contexts) is never written: its head
// has list_scope "private" and no chunks, which tells every instance to list
// the upstream per caller instead.
//
// Freshness. The head is fresh while list_expires is ahead, its endpoint
// is the server's current one and list_gen equals gen. Invalidate adds one to
// gen (servers set, notifications/tools/list_changed), which makes every
// copy stale at once.
//
// Refresh. An instance that finds the head stale claims the refresh with
// one conditional write (no live claim, and no version written since it
// read the head), as the breaker's half-open probe is elected: one
// instance of the fleet lists the upstream, writes the chunks, then the
// head (conditioned on still holding the claim). The others serve the
// stale list meanwhile when there is one for the same endpoint, or poll
// the head until the new version appears or the claim lapses. So a burst
// of cold instances costs the upstream at most one tools/list per TTL.
package catalog
