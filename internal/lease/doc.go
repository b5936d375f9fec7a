// Package lease is a distributed counting semaphore on DynamoDB: it caps how
// many calls to one upstream are in flight across every gateway instance,
// serves callers that wait in the order they came, fleet-wide, and gives
// back the place of an instance that died once its lease expires.
//
// # Item
//
// One item per limiter key (the server id) in the leases table:
//
//	limiter_key   S  partition key
//	leases        M  lease id → expiry (Unix ms); the server's count is its size
//	tool:<name>   M  the same, for a tool that declares its own cap
//	tickets       M  lease id → {a: arrival, e: expiry, h: hold ms, s: {slot: cap}, b: breaker}
//	last_release  S  the lease whose release wrote last
//	breaker_*     the circuit breakers (see Breaker)
//	ttl           N  Unix seconds; lets DynamoDB delete an abandoned item
//
// A lease id is "<instance>.<sequence>[.<caller>]": the gateway instance
// and the caller's label (ParseLeaseID).
//
// # Protocol
//
// Acquire is one conditional UpdateItem that adds the lease to every slot
// map only while each map's size is below its cap and, for a caller that is
// not queued, only while the tickets map is as it last saw it (empty, at
// first): no read on the uncontended path, so a call costs two writes.
// Every write asks for the item back (ReturnValues ALL_NEW, and
// ReturnValuesOnConditionCheckFailure ALL_OLD when its condition fails;
// neither costs capacity); where the store does not return the item of a
// failed write, one consistent read stands in.
//
// When the item shows no place for the caller — every place taken, or the
// free ones due to callers queued before it — it fails with *FullError, or
// it queues: it writes a ticket (its arrival, the slots and caps it wants,
// its hold, its breaker), which lapses TicketTTL after it was last renewed.
// The queue is the live tickets by arrival. Walking it oldest first, each
// ticket gets a place in every slot it wants if all of them have room after
// the places given before it; a ticket one of whose slots is full is
// passed over, and does not hold up those behind it.
//
// A release removes its lease and, in the same write, passes the place to
// the first ticket the queue gives it to, as far as this process knows the
// queue: the ticket's lease goes into its slots, with the expiry its hold
// gives, and its ticket out, only while the ticket is live, its breaker
// closed and the slots have room. A release that did not know, or finds
// more places free in the item it gets back, passes them on with one more
// write each. A queued caller learns that it holds its place by looking at
// the item: at once when the release was made in its own process (every
// answer about the item goes on the process's board, which wakes its
// waiters), otherwise when it next looks: when its place is expected to
// free, from the holders' grant times and how long calls here last. A
// queued caller that finds a place free for it takes it itself.
//
// Leases whose expiry has passed and tickets that lapsed are removed by any
// write, at most 25 per write, each removal conditioned on the value seen;
// a writer that sees more first clears them with writes of their own.
//
// # Invariants
//
// Each is a test, named after it.
//
//  1. No slot map holds more than its cap of live leases: every write that
//     adds a lease conditions on size(map) < cap + the entries it removes
//     (TestCapHoldsAcrossGoroutines, TestCapHoldsAcrossProcesses,
//     TestToolSlotSharesTheWrite).
//  2. An uncontended call costs one write to acquire and one to release,
//     and no read (TestUncontendedCostsTwoWrites).
//  3. An entry is purged only if it still holds the expiry seen, which had
//     passed: a lease or ticket renewed meanwhile stays
//     (TestRenewedLeaseIsNotPurged, TestRenewedTicketIsNotPurged,
//     TestExpiredLeaseIsPurged).
//  4. A release is idempotent: a second, late or copied release never
//     frees another holder's place, and a count, being a map's size, never
//     goes below zero. A retry of a release write whose first attempt
//     landed finds last_release naming it and counts as done
//     (TestDoubleReleaseIsHarmless, TestRetriedFailingReleaseOpensTheBreaker,
//     TestRetriedHandOverIsDone).
//  5. Callers are served first come, first served, across instances: a
//     place goes to the oldest live ticket that can use it, and nobody
//     takes a place that, in the item it last saw, an older live ticket
//     could use (TestQueueIsFirstComeFirstServedAcrossInstances,
//     TestNewcomerDoesNotPassAQueuedCaller).
//  6. A ticket that cannot use the free places (another of its slots is
//     full, its breaker is open) does not keep them from those behind it
//     (TestCallerBlockedOnAnotherSlotDoesNotHoldUpAFreePlace,
//     TestNoPlacePassedOnWhileTheBreakerIsOpen).
//  7. A lapsed ticket is never served and never keeps a place from anyone,
//     however many there are; a waiter renews its ticket while it waits
//     (TestLapsedTicketsDoNotWedge, TestLongWaiterRenewsItsTicket).
//  8. An acquire writes one lease id, whichever of its writes land, late or
//     unseen: the lease it returns, or one it takes back (passing the place
//     on) when it fails or gives up, leaving no ticket
//     (TestRetriedAcquireThatLandedIsKept, TestLateLandingAcquireIsAdopted,
//     TestAcquireThatLandedUnseenIsTakenBack,
//     TestFailedAcquireThatLandedIsRemoved, TestWaiterThatGivesUpLeavesNoTicket).
//     A place is passed only to a caller that holds none, and a process's
//     view of the item is never replaced by an answer to an earlier request,
//     so a caller never queues twice for one call
//     (TestNoPlacePassedToACallerThatHoldsOne,
//     TestOvertakenAnswerDoesNotReplaceANewerView).
//  9. A renewal extends only a lease still held. Only its holder writes a
//     lease's expiry after the grant, so a lease found with an expiry other
//     than the one its holder knows was renewed by an attempt whose answer
//     was lost (TestRetriedRenewThatLandedIsKept, TestLostAnswers).
//  10. A call's outcome reaches its breaker in the release write; an
//     abandoned call leaves the breaker as it was, and a probe that lost its
//     lease changes nothing (TestBreakerIgnoresAbandonedCalls,
//     TestBreakerAbandonedProbeStaysHalfOpen,
//     TestLostProbeLeavesTheBreakerHalfOpen, TestBreakerElectsExactlyOneProbe).
//  11. The item holds one entry per live lease and per waiting caller: a
//     call with a breaker and no cap takes no place
//     (TestBreakerOnlyCallsTakeNoPlace, TestBacklogOfExpiredLeases).
//  12. A place given back in a process reaches a waiter there with no
//     store request of the waiter's (TestLocalReleaseReachesTheWaiter).
//
// # Guarantee
//
// A lease expires at now + Hold + Margin, and its CallDeadline is at most
// now + Hold on the holder's monotonic clock, so a lease can only lapse
// after its call was cancelled. The cap on unexpired leases is exact. The
// cap on calls actually running upstream holds as long as the clocks of any
// two instances differ by less than Margin. Queue order is by arrival on
// each waiter's clock, so skew between instances reorders callers who came
// within that skew of each other. A waiter that dies holds its place in the
// queue for at most TicketTTL; a place passed to it in that time comes back
// when that lease expires, as a dead holder's does. DynamoDB TTL never
// expires a lease; it only removes items nobody has used for a day.
//
// The gateway releases a lease only once its upstream is known to have
// stopped working on the call (its answer arrived, or it provably stops when
// told), renewing it meanwhile for at most the server's cancel_grace, and
// counts a release at the end of the grace as the cap possibly exceeded.
package lease
