// Package lease is the gateway's admission control, kept in one DynamoDB
// item per limiter key (a server, or an API key that limits its own
// calls): a fleet-wide counting semaphore with per-tool and per-principal
// caps, a bounded queue served fairly between principals, request-rate
// buckets, and a circuit breaker no single principal can open for the
// others. Every step is one
// conditional UpdateItem on that item; a place held by an instance that
// died comes back when its lease expires.
//
// # Item
//
//	limiter_key        S   partition key
//	leases             M   lease id → expiry (Unix ms); the key's count is its size
//	principal:<label>  SS  one principal's leases
//	tool:<name>        SS  the leases in a place of a capped tool
//	queue              M   ticket id → its number, issued by seq
//	tickets            M   ticket id → {p: principal, d: deadline, t: tool, c: tool cap},
//	                       or a tombstone {x: until}
//	seq                N   tickets issued
//	freed              N   places freed and tickets gone without one
//	call_ms            N   how long calls on the key last (a running mean of answered calls)
//	breaker_*:<tool>   the circuit breakers (see Breaker)
//	rate:<name>        N   a request-rate bucket's theoretical arrival time (see Rate)
//	limit, limit_*     an adaptive limit and how it last moved; base:<tool>,
//	latency_ratio      its latency baselines and signal (see Adaptive)
//	paused_until       N   no place is taken before it: the upstream asked (Retry-After)
//	ttl                N   Unix seconds; lets DynamoDB delete an item nobody writes
//
// A lease id is "<instance>.<sequence>", short because it is written twice
// per lease (InstanceOf); a waiting caller's ticket has its lease's id.
//
// # Protocol
//
// A lease is one entry of leases and a member of its principal's set and,
// for a capped tool, of the tool's set. Every write that adds or removes a
// lease does so whole, in that one write; a removal by anyone other than
// the holder is conditioned on the expiry it saw. A cap's count is the
// size of a map or set, never a number stored apart from what it counts.
//
//   - Take: SET leases.<id>, ADD the id to its sets, on condition that the
//     id holds no lease and that every cap keeps room for the callers whose
//     turn comes before this one. With no view of the item it also requires
//     the queue to be empty: an uncontended call reads nothing and costs
//     two writes, take and release. A take is judged for the moment it is
//     made, so it is sent once: after a store error its caller reads the
//     item and judges again (finding its lease if the take landed).
//   - Join: when the caller may not take a place and will wait, it adds its
//     ticket: ADD 1 to seq and set queue.<id> to the new value in one write
//     (both operands read the item as it was), on condition that fewer than
//     MaxQueued tickets wait. The queue's order comes from the store.
//   - Release: REMOVE the lease and its set members, and the holder's
//     ticket if one was left; ADD 1 to freed; the call's outcome to the
//     breaker; for a call the upstream answered or failed, its length moved
//     into call_ms (a quarter of the way from the latest value its process
//     saw, however old; the call's own length where that process saw none);
//     on condition that the lease is there. What else it carries
//     (a probe's verdict, purges, a pause, a move of the limit) has
//     conditions of its own; when one fails while the lease is there, the
//     release is made again from the item that answer shows, which drops
//     what no longer holds, without its purge (the write that raced it
//     purged), and after maxEager tries with its outcome and probe verdict
//     alone, conditioned on the lease and the probe: the loop ends. It
//     never purges the buckets it gives tokens back to.
//   - Renew: SET leases.<id> to a later expiry, on condition that it holds
//     an expiry this holder wrote.
//   - Purge: any write removes up to maxPurge stale entries it saw —
//     expired leases (whole), tickets past their deadline, lapsed
//     tombstones — each conditioned on the value seen. A write that
//     removes a ticket other than by its take (a caller giving up, a purge,
//     a bypass), or ends a probe that took no place, ADDs 1 to freed: the
//     tickets behind it may rank otherwise.
//
// Waiters pull: nobody hands a place to a waiter, so no place can go to a
// caller that is not there. A waiter reads the item when its place is
// expected to free (from the leases' expiries and call_ms), at least every
// MaxLook, and takes a place when the item shows it is its turn. Whose turn
// it is follows from the item alone: the places free go, one by one, to the
// waiting principal that holds the fewest places on the key (the places
// handed out counting), the lower ticket number first among equals — so
// within a principal, first come, first served — passing over callers that
// cannot use a place (their tool full, their principal at its cap, their
// breaker open for them), so that no place is idle while a caller that can
// use it waits. A newcomer counts as the newest ticket.
//
// A waiter's turn is judged at its look, which comes after its own join: a
// caller that joins after that look comes after it, as it would had the
// take landed at once. So a take judged from a view is conditioned on what
// could change whose turn it is among the callers the view shows: freed as
// seen (no place was freed and no ticket left, either of which could
// unblock or promote someone) while callers of other principals or of
// capped tools wait, or one numbered before it was passed over; its own
// principal's set as seen while callers of other principals wait (how many
// places the principal holds ranks it); and in every cap, room left for
// each caller whose turn comes before it — so two callers who each see
// themselves next behind the same waiter never take its place between
// them. A newcomer, having no ticket, is the newest caller: its take is
// also conditioned on seq as seen (nobody joined since it looked). Under
// churn most takes are waiters', and a join lands with nearly every call:
// conditioned on seq, most of them failed.
//
// A waiter whose turn has come at every look for ClaimWindow without its
// taking the place is presumed gone: the next caller takes the place and
// removes that ticket in the same write; a waiter that was only slow joins
// again, at the back.
//
// A caller that gives up removes its ticket. The limiter retries its own
// writes, so it knows when an attempt's outcome is unknown (a timeout, a
// reset connection, a server error: the store may have applied it) and
// could still land later. Such a caller ends — gives up, or releases its
// lease — with a tombstone where its ticket was, which every write that
// could add a lease or ticket for it is conditioned against, lasting until
// whatever that write could create would have lapsed on its own on any
// clock within Margin of its caller's (so it is written even when that has
// lapsed on the caller's clock alone); a renewal whose outcome was unknown
// lengthens it to the expiry that renewal may have set. A waiter that
// meets a store error keeps its ticket and looks again, until its
// deadline. A retried release that finds its lease gone counts as landed
// only while the lease's earliest possible expiry is more than Margin away.
//
// A request's rate buckets are charged in the write that admits it (its
// take, or its join when it waits), one token each, on condition that the
// bucket holds one; a waiter that never gets a place has paid once, and a
// lease released as Unused (the call was never made) gives its tokens
// back. A bucket is one number, its GCRA arrival time; the charge's
// condition compares it with now, never with a value another write just
// changed, so concurrent callers do not fail each other. A waiter whose
// ticket the item shows has paid in its join. Writes that nothing in the
// item could tell from their own resend — the charge of a call that takes
// no place, a refund of one, which have no lease to condition on — are
// not sent again after an attempt whose outcome is unknown (refused
// unapplied, as when throttled, they are): a token may be lost to a store
// error, never counted twice.
// A call with a breaker and no place reports success by deleting exactly
// the failures it saw, so a copy landing late leaves newer ones.
//
// With Adaptive, the key's cap is the item's limit, within [Min, Cap]. A
// take with a view is conditioned on the limit it saw; one without, on
// the stored limit itself (size(leases) < limit). The releases move it,
// each move conditioned on the limit its releaser saw; a release whose
// move lost a race gives its place back without it. A release may also
// set paused_until (its upstream's Retry-After), on condition that no
// later pause stands, so a pause is never shortened: every take is
// conditioned on it having passed, waiters look again when it does, and
// callers that do not wait are refused (Paused).
//
// Every write asks for the item back (ReturnValues ALL_NEW, and
// ReturnValuesOnConditionCheckFailure ALL_OLD when its condition fails;
// neither costs capacity); where the store does not return the item of a
// failed write, one consistent read stands in. Every answer goes on the
// process's board, which wakes the process's waiters on that key.
//
// # Invariants
//
// Each is a test, named after it. The fault simulation
// (TestFaultSimulation) checks 1, 3, 5, 6, 7, 9, 13, 14 and 15 after every store answer
// of hundreds of seeded schedules (thousands in make soak) with lost,
// delayed, duplicated and late-landing writes, callers and instances
// dying, clocks skewed within the margin and purges cut short; its store
// is checked against dynalite by TestMemStoreMatchesDynalite. For 6 it
// also checks that a waiter's take was judged from a view its instance
// was given, and that no waiter is presumed gone before ClaimWindow has
// passed since its turn could first have been seen to come.
//
//  1. No cap is exceeded: leases holds at most Cap live entries, each tool
//     set at most its ToolCap, each principal set at most PrincipalCap
//     (TestCapsHoldAcrossGoroutines, TestCapHoldsAcrossProcesses).
//  2. An uncontended call costs one write to acquire and one to release,
//     and no read (TestUncontendedCostsTwoWrites).
//  3. A lease is whole: every set member is a lease, and a lease leaves
//     every set with it, by release or purge; a late renewal cannot bring
//     it back (TestPurgeRemovesWholeLeases,
//     TestRenewalCannotRestoreAPurgedLease,
//     TestLateRenewalCannotReviveAFinishedLease).
//  4. An entry is purged only if it still holds the value seen, which had
//     lapsed: a lease renewed meanwhile stays (TestRenewedLeaseIsNotPurged).
//  5. No place goes to a caller that is not there: a caller that gave up,
//     a write of it landing late, or a holder's stray ticket never gets one
//     (TestGaveUpCallerNeverGetsAPlace,
//     TestGivingUpAfterAnUnknownTakeLeavesATombstone,
//     TestLateLandingTakeAfterGivingUpFails,
//     TestReleaseRemovesItsHoldersTicket,
//     TestTombstoneOutlivesALateTakeOnSlowerClocks).
//  6. Places go in turn: a take lands only for a caller whose turn it is in
//     the item as the write finds it, at the moment the take was made,
//     among the callers that had joined when a waiter looked
//     (TestNewcomerDoesNotPassAQueuedCaller,
//     TestLaterJoinerDoesNotFailAWaitersTake,
//     TestFairBetweenPrincipals, TestBlockedTicketDoesNotHoldUpAFreePlace,
//     TestOpenBreakerDoesNotHoldUpTheQueue,
//     TestProbeVerdictFailsATakeThatPassedOverItsCaller,
//     TestTakeIsMadeForTheInstantItWasJudged,
//     TestLeavingTicketFailsATakeJudgedBefore, TestTakeIsJudgedWhenSent).
//  7. At most MaxQueued callers wait (TestQueueIsBounded).
//  8. A release is idempotent and knows its own retry: a second or copied
//     release frees nothing, and a retried release whose earlier attempt
//     landed reports success with its outcome counted once
//     (TestDoubleReleaseIsHarmless, TestRetriedReleaseCountsOnce,
//     TestRetriedReleaseAfterUnknownRenewal); a release is not lost
//     to the other writes it carries, nor loses them
//     (TestReleaseSurvivesARacingPurge, TestProbeVerdictSurvivesARacingPurge,
//     TestLimitMoveSurvivesARacingPurge, TestPauseSurvivesARacingPurge,
//     TestNoPlaceProbeVerdictSurvivesALostPauseAnswer,
//     TestProbeVerdictSurvivesALongRace,
//     TestProbeVerdictSurvivesTheFleetsPurges,
//     TestUnusedReleaseAfterAWaitGivesThePlaceBack), and costs few writes
//     when it keeps losing races (TestReleaseLosingPurgeRacesCostsFewWrites).
//  9. The breaker counts each finished call once and consecutive failures
//     only; an abandoned call leaves it as it was; one principal's failures
//     open it for that principal alone, two principals' for everyone; one
//     probe at a time (TestOnePrincipalCannotOpenTheBreakerForOthers,
//     TestBreakerOpensWhenTwoPrincipalsFail,
//     TestBreakerCountsConsecutiveFailures, TestBreakerElectsExactlyOneProbe,
//     TestLateSuccessDoesNotWipeNewerFailures,
//     TestLostProbeElectionAnswerStillProbes).
//  10. Waiting costs no write while nothing changes: the item's write units
//     per second grow with the calls made, and its size with the callers
//     holding and waiting, not with waiters times time
//     (TestWaitersCostNoRenewals).
//  11. Every write refreshes the item's ttl (TestEveryWriteRefreshesTTL,
//     TestNoPlacePauseRefreshesTTL).
//  12. A long exchange keeps its lease, renewing it at a steady pace, and is
//     stopped before the lease lapses if it cannot
//     (TestKeepAliveRenewsALongExchange, TestKeepAliveRetriesAtAFixedPace,
//     TestRenewalAfterTwoUnknownRenewalsKeepsTheLease); a waiter outlasts
//     store errors that are not in a row (TestWaiterOutlastsScatteredTakeErrors).
//  13. A bucket admits no more than it gives: in any stretch of time, at
//     most PerMinute calls plus one an interval, less the tokens given
//     back, give or take one token for clocks skewed by less than an
//     interval; a waiter pays once (TestRateLimitAdmitsItsBurstExactly,
//     TestWaiterPaysItsTokenOnce, TestPerPrincipalRates,
//     TestWaiterWhoseJoinWasUnknownPaysOnce, TestTokenOnlyCallPaysOnce,
//     TestRefundWithoutAPlaceCountsOnce, TestThrottledChargeIsSentAgain).
//  14. An adaptive limit stays within [Min, Cap], and a take leaves at most
//     the limit it was conditioned on; it moves once per round of calls
//     down, and up only with calls that filled it
//     (TestABurstOfFailuresHalvesTheLimitOnce,
//     TestAdaptiveLimitDoesNotInflateWhenIdle,
//     TestSteadyFailuresKeepTheLimitAtItsFloor,
//     TestBaselineDoesNotDriftUnderLoad, TestAdaptiveLimitFindsTheKnee).
//  15. No place is taken while the key is paused, and a pause is never
//     shortened (TestPauseHoldsEveryCaller,
//     TestShorterPauseDoesNotShortenALongerOne).
//
// # Guarantee
//
// A lease expires at now + Hold + Margin, and its CallDeadline is at most
// now + Hold on the holder's monotonic clock, so a lease can only lapse
// after its call was cancelled. The caps on unexpired leases are exact. The
// cap on calls actually running upstream holds as long as the clocks of any
// two instances differ by less than Margin. A ticket lives Margin past its
// caller's deadline, so no clock within the margin takes it for gone early.
// A waiter that dies keeps its ticket until then, but holds up the queue for
// at most ClaimWindow. DynamoDB TTL never expires a lease; it only removes
// items nobody has written for a day.
//
// The gateway releases a lease only once its upstream is known to have
// stopped working on the call (its answer arrived, or it provably stops when
// told), keeping it alive meanwhile (KeepAlive) for at most the server's
// cancel_grace, and counts a release at the end of the grace as the cap
// possibly exceeded.
package lease
