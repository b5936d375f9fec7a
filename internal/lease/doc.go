// Package lease is a distributed counting semaphore on DynamoDB: it caps how
// many calls to one upstream are in flight across every gateway instance,
// and gives back the place of an instance that died once its lease expires.
//
// # Item
//
// One item per limiter key (the server id) in the leases table:
//
//	limiter_key  S   partition key
//	leases       M   lease id → expiry (Unix ms); the server's count is its size
//	tool:<name>  M   the same, for a tool that declares its own cap
//	ttl          N   Unix seconds; lets DynamoDB delete an abandoned item
//
// # Protocol
//
// Acquire is one conditional UpdateItem that adds the lease to every slot
// map only if each map's size is below its cap: no read on the uncontended
// path, so a call costs two writes (acquire and release). When the condition
// fails, the limiter looks at the item, from the failure itself where
// DynamoDB returns it (ReturnValuesOnConditionCheckFailure) or else from one
// consistent read. Leases whose expiry has passed are removed in the next
// acquire write, each removal conditioned on the expiry it saw, so a lease
// renewed meanwhile is never removed; the size condition is raised by the
// number removed. A full item of live leases means: shed (FullError), or
// wait with jittered backoff, reading (cheap) before writing (billed even
// when it fails), until a place frees or the wait budget ends.
//
// Release removes the lease id from the maps, conditioned on it being there:
// a double or late release never frees another holder's place, and the
// count, being the size of a map, can never go below zero.
//
// # Guarantee
//
// A lease expires at now + Hold + Margin, and its CallDeadline is now +
// Hold on the holder's monotonic clock, so a lease can only lapse after its
// call was cancelled. The cap on unexpired leases is exact. The cap on calls
// actually running upstream holds as long as the clocks of any two
// instances differ by less than Margin. DynamoDB TTL never expires a lease;
// it only removes items nobody has used for a day.
//
// A holder releases its lease only once its upstream is known to have
// stopped working on the call: its answer arrived, or it provably stops when
// told. A call cut off before that (timeout, caller gone, shutdown) keeps
// its lease, renewing it, until then, bounded by its server's cancel_grace;
// a timer alone never releases it early. If the grace ends first, the lease
// is released anyway and the holder counts that the cap may have been
// exceeded. (The gateway's call path does this; the limiter only renews and
// releases.)
package lease
