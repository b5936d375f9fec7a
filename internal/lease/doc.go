// Package lease is the gateway's admission control, kept in one DynamoDB
// item per limiter key (a server, or an API key limiting its own calls):
// a fleet-wide counting semaphore with per-tool and per-principal caps, a
// bounded queue served fairly between principals, request-rate buckets,
// an adaptive limit, and gates — circuit breakers, upstream pauses, an
// operator's hold — that one principal's calls close for it alone. Every
// step is one conditional UpdateItem on the item; a dead instance's place
// comes back when its lease expires.
//
// # Item
//
//	limiter_key        S   partition key
//	leases             M   lease id → expiry (Unix ms); the key's count is its size
//	principal:<label>  SS  one principal's leases
//	tool:<name>        SS  the leases in a place of a capped tool
//	queue              M   ticket id → its number, issued by seq: the callers waiting
//	tasks              M   the same for the tasks waiting, and running (claimed: see Tasks)
//	tickets            M   ticket id → {d: deadline (Unix ms), t: tool, c: tool cap,
//	                       r: the tool's rpm limit, l: a caller's look period (ms; read as 2 s
//	                       when absent, as tickets written before it, and as MaxLookFar at
//	                       most); a task's also x: its task, s: its last start, f: the first
//	                       of its starts since its turn came (absent: s), w: the claim that
//	                       last took its place, which that claim's release and renewals are
//	                       conditioned on; h: 0, a call holding nothing (see Buckets)}
//	waiting:<label>    SS  one principal's tickets: a ticket's principal is the one whose set holds
//	                       it (its body may name it again, as p, as joins still write it for
//	                       older instances: then the same)
//	seq                N   tickets issued
//	freed              N   places freed, tickets gone other than by their take, gate entries and
//	                       buckets purged, tokens given back, places taken that rank waiters anew
//	                       (see Whose turn)
//	call_ms            N   how long calls on the key last (a running mean of answered calls)
//	breaker:<tool>     M   a tool's circuit breaker: a gate (below)
//	pause, pause:<tool> M  the upstream's pauses (its Retry-After), for the server or one tool: gates
//	hold               N   an operator's hold: no place is taken before it (Unix ms)
//	rate:<name>        N   a request-rate bucket's theoretical arrival time (see Rate)
//	limit, limit_*     an adaptive limit, its round and its evidence; latency_ratio,
//	                       base:<label>/<tool> a principal's calls' latency (see Adaptive)
//	ttl                N   Unix seconds: a day after the latest expiry or deadline a write sets
//	                       (never before its writer's now), or after the hold or a task's deadline
//	                       its process last saw, if later; lets DynamoDB delete an abandoned item
//
// A lease id is "<instance>.<sequence>" (InstanceOf), "<instance>.T<sequence>"
// for a task's (IsTaskID); a waiting caller's ticket has its lease's id. A
// principal label is 1 to MaxHolder bytes of printable ASCII but "/" and
// "*", made by the gateway from at least 64 bits of the principal's (or
// its team's) identity, so principals share one only by choice.
//
// # Leases and tickets
//
// A lease is an entry of leases and a member of its principal's set and,
// for a capped tool, the tool's; a ticket is an entry of queue (a task's:
// of tasks, see Tasks) and of tickets, and a member of its principal's
// waiting set. Each is added and removed whole, in one write; a removal
// by anyone but its owner is conditioned on the value seen (a lease's
// expiry, a ticket's number). A count is the size of a map or set, never
// a number stored apart from what it counts. A lease (or a probe) is live
// through the millisecond of its expiry and a ticket through its
// deadline's: each has lapsed only once now is past it, for whose turn it
// is as for purges.
//
//   - Take: SET leases.<id> to now + hold + Margin, ADD the id to its sets,
//     take a token from each of the call's buckets and, for a waiter,
//     remove its ticket whole (a task's claim keeps it, conditioned on its
//     number: see Tasks), and ADD 1 to freed when it may rank waiters
//     anew: a waiter's take of a place always, a newcomer's while another
//     principal's callers wait (see Whose turn) — on condition that the id
//     holds no lease,
//     every cap keeps room for the callers whose turn comes first, every
//     bucket holds a token (and theirs, one for each: see Buckets), no gate refuses the caller, and nothing that
//     could change whose turn it is changed since the view it was judged
//     from (below). With no view it also requires an empty queue: an
//     uncontended call reads nothing and costs two writes, take and
//     release. A take is judged for its moment, so it is sent once: after
//     a store error its caller reads the item and judges again (finding
//     its lease if the take landed).
//   - Join: a caller that will wait ADDs 1 to seq and sets queue.<id> to
//     the new value in one write (both operands read the item as it was;
//     a seq a hand edit left below a ticket's number is repaired first,
//     below, TestASeqLoweredByHandNumbersNoTicketBeforeOthers), on
//     condition that seq is not below the value it judged from (one
//     lowered by hand meanwhile would number it before callers waiting:
//     TestAJoinAfterSeqLoweredByHandIsNumberedLast) nor 2^62 − 1 or more
//     (one raised by hand meanwhile would number a half), size(queue) <
//     MaxQueued and, when its principal has callers waiting already,
//     size(queue) < MaxQueued − QueueReserve
//     (the last quarter, rounded down): no principal fills the queue, so
//     another's lone caller finds a place. Its principal has none waiting
//     when its waiting set is absent, or holds only the tickets the view
//     shows waiting no more — claimed (see Tasks) or lapsed — at most
//     maxNamed (8), each named in the condition as still so: a claimed
//     one's lease live at the writer's now, a lapsed one's deadline past.
//     A join charges nothing; one refused for room is one failed write
//     that changes nothing.
//   - Leave: a waiter that gives up removes its ticket whole and ADDs 1 to
//     freed, conditioned on its number, and the lease a take of it of
//     unknown outcome may have set, whole, on condition that it exists
//     (its id is the waiter's own: nobody else writes it).
//   - Release: REMOVE the lease whole (a task's with its ticket, and on
//     condition that it holds an expiry this holder wrote and that the
//     ticket names its claim: see Tasks); ADD 1 to freed; the outcome to its
//     gates and the adaptive limit; for a call answered or failed, its
//     length moved into call_ms (a quarter of the way from the latest
//     value its process saw); for a call never made, its tokens back — on
//     condition that the lease is there. The rest (a gate's change, a
//     move of the limit) has conditions of its own; when one fails while
//     the lease is there, the release is made again from the answer
//     (after maxEager tries with its outcome and probe verdicts alone):
//     eagerRetries (3) times at once, then each time after backoff, never
//     given up while the lease is there but with its context, a store
//     error, or a repair it needs that fails (see Repair: maxEager in a
//     row that put nothing right)
//     (TestAReleaseOthersKeepWritingOverPausesBetweenItsTries). A task's
//     enqueue is paced alike and, as its join is conditioned on freed,
//     which every release moves, tries again until its context ends
//     (TestAnotherPrincipalsCallsDoNotFailATasksEnqueue) or its task's
//     deadline passes (TestAnEnqueueStopsAtItsTasksDeadline); a claim
//     likewise while the turn is its task's, each try past the eager ones
//     from a new read, until StartTimeout after its start (see Tasks;
//     TestAClaimOverOthersReleasesKeepsItsTurn); a charge is paced alike,
//     each try past the eager ones from a new read
//     (TestAChargeUnderSteadyReleasesLands), and stops after maxEager tries
//     (TestAChargeOthersKeepWritingOverPauses);
//     a withdrawal and Admin's Release stop after maxAdminTries (4), and
//     Admin's Pause and ResetBreaker after one.
//   - Renew: SET leases.<id> to a later expiry (never one before the
//     expiry its holder knows it wrote), on condition that it holds
//     an expiry this holder wrote (a task's: and that its ticket names its
//     claim).
//   - Purge: any write removes up to maxPurge stale entries — expired
//     leases, tickets past their deadline, set members with no lease,
//     principals' full buckets, idle gate entries — whole, each
//     conditioned on the value seen; a ticket's, a gate entry's or a
//     bucket's purge ADDs 1 to freed. When a write's view shows more stale
//     entries than it can remove that its own conditions would count (the
//     key's leases, its tool's or principal's set, the queue), it sends
//     purges first, so lapsed entries never wedge a key whatever its caps
//     are lowered to.
//   - Repair: the item is anyone's to write. A value of a type or shape
//     the protocol never writes reads as none, and a caller whose view
//     shows one first puts it right, in one write with the purges its
//     view shows, conditioned on each value as stored (a map, list or set
//     on its type alone, attribute_type, as the store compares those by
//     reference), so every other write judges only values of the
//     protocol's shapes: a map (leases, queue, tasks, tickets) not one is
//     made empty; seq not a whole number, below 0, below a ticket's
//     number or 2^62 − 1 or more (a join would number a half), one past
//     every ticket (a ticket numbered 2^62 or more is a half,
//     TestAHandEditDoesNotWedgeTheCallersAfterIt, "seq at maxNumber
//     numbers no half"), and when that is 2^62 − 1 or more (a ticket
//     numbered so by hand, or joined from a seq written so) the fewest
//     top tickets it does not purge, at most maxRenumber (16, within
//     DynamoDB's expression limits), numbered on from the ticket below
//     them in their order (number, then id), each on condition of its
//     number as seen, and seq one past them; when no 16 will do, seq is
//     left so until tickets lapse
//     (TestATicketNumberedAtTheTopByHandDoesNotWedgeTheCallersAfterIt,
//     TestARenumberingRepairStaysWithinDynamoDBsExpressionLimits,
//     TestARenumberingKeepsTheTurnsOfTicketsNumberedAlike);
//     freed, refunds or the limit's
//     round not
//     whole, now, a number no count reaches, so no write judged from a
//     view before the edit lands; the rest is removed — a set or a gate
//     not one, the hold or the limit's numbers not whole, its limit_sig
//     not a string (TestAHandEditDoesNotFailAnOperation,
//     "a failing release records its failure and pause"), a bucket's time
//     not whole (it reads as full), a gate entry not a map, with a field
//     of another type, or with a probe or a bar and no time to it (whole),
//     each part of a half ticket (its queue or tasks entry any value, its
//     tickets entry, its waiting members — a ticket in two principals'
//     waiting sets is a half too, as is one whose p names another
//     principal than its set; conditioned too on the parts it
//     lacks still lacking, so a join of its id since is left whole,
//     TestARepairJudgedBeforeAWaitersJoinLeavesItsTicket), a task's start
//     mark not whole, a ticket's p not a string (the ticket kept).
//     A repair puts right up to maxRepair (16) values, freed first if it
//     is one, and ADDs 1 to freed; the next puts right the rest. Every
//     writer repairs one way (mend): on while each repair leaves fewer
//     values to put right; after one that does not (its condition failed,
//     or the item needs as much), backoff(n) and a read before the next,
//     and an error past maxEager of them
//     (TestARepairFailingItsConditionAgainAndAgainPauses). An acquire, a
//     task's enqueue or withdrawal and whoever starts a task whose turn
//     came (its mark's condition fails over a mark written by hand) mend
//     what they read; a
//     release, a pause or give-back of a call holding nothing, a call that
//     only pays its buckets and Admin's Pause, Release and ResetBreaker
//     (send) are built from the item mended when their view shows a
//     malformed value, and made again from the item mended when the store
//     refuses one as invalid (its ADD to freed, its DELETE from a set) or
//     its failed condition's answer needs repair
//     (TestAHandEditDoesNotFailAnOperation, "a probe's release over more
//     values than maxEager repairs", "a pause of a call holding nothing
//     lands", "a give-back lands"). A lease whose expiry is not a whole
//     number never expires, and Admin's Release removes it on its value
//     as stored.
//
// No write removes what it did not see or relies on another having
// landed: a write whose outcome is unknown (a timeout, a reset connection,
// a server error: the store may still apply it) is safe to land late. A
// take or join landing after its caller gave up leaves a lease that lapses
// like a dead holder's, or a ticket passed over like a dead waiter's.
//
// # Whose turn
//
// Waiters pull: nobody hands a place to a waiter. A waiter reads the item
// when its place is expected to free and takes a place when the item shows
// it is its turn. Whose turn it is follows from the item alone: the places
// free — the cap (with Adaptive, the item's limit) less the live leases —
// go, one by one, to the waiting principal that holds the fewest places on
// the key (the places handed out counting, a call holding nothing's
// none), the lower ticket number first
// among equals — so within a principal, first come, first served —
// passing over callers that cannot use a place now: their tool full,
// their principal at its cap, a bucket of theirs empty, or a gate closed
// to them (a half-open gate lets the first of its callers through as its
// probe, and passes over the rest). No place is idle while a caller that
// can use it waits. While the hold or the server's pause stands, no place
// is free. A newcomer counts as the newest ticket.
//
// A waiter's turn is judged at its look, which comes after its own join: a
// caller that joins after that look comes after it, as it would had the
// take landed at once. So a take judged from a view is conditioned on what
// could change whose turn it is among the callers the view shows: freed as
// seen (no place was freed, no ticket left, no gate entry or bucket was
// purged — a pause passed or a bucket full on the purger's clock may not
// be on the taker's — and no token given back, any of which could unblock
// or promote someone) while callers of other principals or of capped
// tools wait, a task's claimed ticket is numbered before it or is of
// another principal (its claim lapsing and purged, moving freed, makes it
// a waiter again, and one of another principal may rank first by the
// places held; a claim lapsing unpurged changes nothing the take was
// judged from, at its look the ticket was claimed), or one numbered
// before it was passed over; its own
// principal's set as seen while callers of other principals wait (how
// many places the principal holds ranks it); and in every cap, room left
// for each caller whose turn comes before it. Another principal's count
// ranks its callers waiting too: a take raising it may put them after a
// caller it had come before, whose turn, and what that caller's place
// uses (a tool's place, its principal's, a token), may then be what the
// take judged before needs. So a waiter's take of a place ADDs 1 to
// freed, as a place freed does, whatever its view shows: it is not
// conditioned on seq, and callers of its principal and of others may have
// joined since its look. A newcomer's (conditioned on seq: its view shows
// every caller waiting) does while another principal's callers wait as
// its view shows, whether or not it shows others of its own principal:
// one it shows may have been served since by a take holding nothing (see
// Buckets), which moves nothing the take reads. One ADD, whatever the
// queue holds, and none for a newcomer while one principal alone waits or
// nobody does, so an uncontended take stays as it was.
// A newcomer, having no ticket, is the newest caller: its take is also
// conditioned on seq as seen (nobody joined since it looked).
//
// A waiter looks when its place is expected to free (from the leases'
// expiries, each as it first saw it, so that a renewal since leaves its
// place late rather than about to free again — when its tool is full,
// only that tool's leases, and its rank among that tool's callers, no
// sooner than the server's place when that is full too — call_ms and its
// rank; a caller before it whose turn
// came, a task's too, is expected to hold a place a call's length from
// when its turn came, so one that never takes it makes the place late, not ever about
// to free), at least every MaxLook while fewer than Places (the cap)
// callers come before it, and every rank/Places ×
// MaxLook, at most MaxLookFar, behind more; a look that finds its place
// late waits half as long again as the last (up to that period, jittered
// upwards), the first 5 ms after its join; neither a move up the queue
// (every caller leaving before it would have each waiter behind start
// again from 5 ms, reads growing with the waiters times the departures)
// nor a new estimate of the same place (call_ms moved, a holder renewing
// past its expected end) nor the end of a stretch in which the hold, a
// pause or an empty bucket of its own held every place back (it looks
// when that ends) starts that back-off again. Its ticket announces its look period (l) at the rank it
// joined at, and it never waits longer than that between looks, whatever
// its rank later; the item a refused write of its returns is a look,
// judged at once (a purge sent again after a refused one waits a
// back-off first, 12–25 ms). A waiter's reads per second are so bounded by its rank:
// the queue's sum grows with the logarithm of its length over its first
// MaxLookFar/MaxLook × Places, and by one read every MaxLookFar per
// waiter behind them.
//
// A waiter whose turn has come, at every look of another caller for its
// claim window — ClaimWindow past the look period its ticket announces —
// without taking the place is presumed gone: that caller takes the place
// and removes the ticket in the same write, ADDing 1 to freed; a waiter
// that was only slow finds its ticket gone and joins again, at the back.
// A live waiter looks within its period of its turn coming, however far
// back it joined, and has ClaimWindow more to take its place: it is never
// presumed gone. A caller presumes gone only tickets whose turn came
// before its own in its looks, the turn of a ticket as numbered (one that
// joined again under its id waits a new turn:
// TestAWaiterDoesNotPresumeGoneOnItsOldTurnACallerThatJoinedAgain), and
// looks again a ticket's claim window
// after it first saw such a turn come: so D dead waiters before a live one
// delay it by at most the sum of their claim windows, D × (ClaimWindow +
// MaxLookFar) at most, past the look that first found a place free, plus
// that look's wait. Only a caller whose turn they hold back passes them
// (TestACallerNotServedPassesNoLiveWaiterWhoseTurnWentBetweenItsLooks),
// or, for tasks, which pass nobody, a caller behind tasks whose turn
// they hold back: tasks that the walk hands a place only past them (see
// Tasks). One write passes over at most maxPurge of them, within
// DynamoDB's expression limits: behind more, or for tasks, it first
// removes maxPurge of them (tasks keep their tickets) in a write that
// takes nothing, ADDing 1 to freed for each, as a take passing them over
// does, and judges again on its answer
// (TestACallerBehindManyGoneStaysWithinDynamoDBsExpressionLimits).
//
// # Buckets
//
// A Rate is a bucket of PerMinute tokens refilled at PerMinute a minute,
// kept as its GCRA theoretical arrival time, named for whose it is:
// "server", "principal:<label>", "tool:<name>", "key" (an API key's own
// item). Every caller of a key gives the same server and principal
// limits, and a ticket carries its tool's (r), so anyone can tell which
// buckets a waiter needs a token from. A call takes one token from each
// of its buckets in its take, the write that admits it to the upstream,
// so the upstream sees at most a bucket's burst at once and its rate
// after, however long callers waited. The charge's condition compares the
// bucket with now, never with what another write just changed, so
// callers of a partly drained bucket do not fail each other (a bucket
// seen full is charged conditioned on the time alone only while the
// callers before it leave it a token). A lease released Unused gives back
// what of each token may still be to come: min(interval, the time its
// charge left the bucket at, as its own answer showed, less an interval
// for each refund landed since (refunds counts them; the refund is
// conditioned on it as seen, and ADDs 1 to it), less now): nothing once
// the bucket may have regained it with time, nor when that answer was
// lost (TestARefundAfterItsTokenCameBackGivesNoExtraToken,
// TestARefundAfterAnEarlierRefundGivesNoRegainedToken). A release's
// refund is among what it drops after maxEager tries.
//
// A call with no cap and no gate needs no place and holds nothing in the
// item. While no ticket waiting needs a token of its buckets (a waiter or
// a task whose turn has come or not; a task running needs none, on
// condition that its claim stands past Margin), it is admitted by a
// charge: one write that takes a token from each of its buckets,
// conditioned on seq as seen, so nobody joined since (not merely as many
// waiting: one may have left as another joined), and judged on the item
// (a refusal, or a waiter, on its process's view is read and judged
// again: TestAChargeIsNotTurnedIntoATakeByAnOldViewOfAWaiterGone). A
// charge is sent once, never again after an unknown outcome, as nothing
// would tell its resend from another call's (a token may be lost to a
// store error, never counted twice); its refund likewise, which ADDs 1 to
// freed (a token back can make it a waiter's turn that its bucket held
// back), and is not sent when it would give nothing back. Its pause ADDs 1
// to freed too: its principal's waiters held back, it may be another's
// turn, as when a place frees (fault simulation seed 12006764). Beside a
// ticket waiting for its tokens, a charge still lands while each of its
// buckets holds a token for every ticket and task the item may hold when
// it lands, and one more: it leaves them those tokens and is conditioned
// on size(queue) and size(tasks), together at most as seen plus half the
// tokens to spare, not on seq, so joins meanwhile do not refuse it
// (TestAChargeWithTokensToSpareLandsOverJoins); the other half is left to
// others' tokens taken meanwhile, so their charges do not refuse it either
// once it has seen the bucket below full
// (TestAChargeBesideAWaiterLandsOnABusyKey). It is judged on the item, not
// on its process's view (TestAChargeBesideAWaiterInAnOldViewIsJudgedAgainOnTheItem).
// Refused all the same, or without tokens to spare, the call waits its
// turn as any caller does: served in the order of Whose turn, it joins the queue when its
// turn has not come (within MaxQueued; one that may not wait is refused as
// its buckets say, on the item), passes over callers presumed gone, and
// its take, in its turn, holds nothing: it takes its tokens and removes
// its ticket, sets no lease and joins no set, is sent once (an unknown
// outcome ends the call), and its end writes only what a charge's does.
// Its take moves no freed (moving it would let steady calls with no cap
// refuse a capped waiter's take for its whole wait:
// TestCallsWithNoCapServedInTheirTurnDoNotRefuseARerankingTake); so a
// take judged before it, which counted on the callers handed a place
// before it taking their tokens, is conditioned on each bucket of theirs
// (its own are charged keeping them) holding a token for each of them
// still: the token taken can leave one unable to use its place, which
// would go to a caller after it
// (TestATakeHoldingNothingDoesNotPassOverACallerAheadOfATakeJudgedBefore,
// TestAChargeWithTokensToSpareFailsATakeJudgedBeforeIt). A bucket that
// one waiter alone ahead of it needs holds its token or that waiter's
// ticket is gone (taken with its token, or gone otherwise, moving freed),
// so calls with no cap ranked before it, each taking its own token in its
// turn, do not refuse its take
// (TestCallsWithNoCapRankedFirstDoNotRefuseACappedWaitersTake); behind two
// or more such callers of one bucket, each taken between its look and its
// take still refuses it, and it is judged again.
// It names at most maxAheadBuckets (16) such buckets, those with the
// fewest tokens to spare, within DynamoDB's expression limits
// (TestATakeBehindManyPrincipalsStaysWithinDynamoDBsExpressionLimits):
// behind callers of more buckets, a token taken from one with more to
// spare than the 16th is not seen.
// Its calls rank its principal's waiters by the
// places it holds under caps alone. Its
// ticket says it holds nothing (h), so that Whose turn, handing it its
// turn, counts no place of its principal's, as its take holds none: a
// take judged before it then ranks that principal's next waiter as the
// item will (TestAWaitersTakeHoldingNothingLeavesAnotherPrincipalsTakeInTurn;
// a ticket without h, written by an instance built before it, counts as a
// place)
// (TestChargesThatWaitAreBoundedByMaxQueued,
// TestADeadWaitersTicketDoesNotHoldItsTokenFromChargesPastItsClaimWindow,
// TestCallsWithNoCapDoNotRefuseAWaitersTake,
// TestACallWithNoCapDoesNotRankItsPrincipalsWaitersLast,
// TestAChargeBesideARunningTaskIsOneWrite).
//
// # Gates
//
// A gate closes a scope — a tool (breaker:<tool>), the upstream's server
// or one tool (pause, pause:<tool>) — for one principal or for everyone.
// It is a map: "*" → {u: closed until, p: probe lease, e: probe expiry, a:
// the principal whose probe ended without a verdict, w: until when it may
// not probe} for everyone, and <label> → {u, p, e, a, w, f: consecutive
// failures, t: last failure} for one principal. A caller passes when
// neither entry that applies to it is closed (u ahead) or half-open with a
// live probe, and its take is conditioned on that as it reads it (a
// breaker's entry with no u, or one of 0 or less, which the protocol
// never writes, is not closed:
// TestAClaimOverABreakerEntryItsWalkPassesLands); when one is half-open
// (a breaker's, u passed, no live probe), its take names it the probe (p, e: its lease's expiry), on
// condition that the entry is as seen. A dead probe lapses with its lease.
// One principal's signal closes a gate for it alone; two principals'
// close it for everyone:
//
//   - Breaker: a failure (timeout, unreachable, 5xx) ADDs to its
//     principal's f; a success resets it; an abandoned, unused or
//     pushed-back call tells nothing. At Threshold the entry closes for
//     Recovery, and "*" with it while another principal's is closed, and
//     no longer, as a pause's below
//     (TestABreakerFailureLandingLateDoesNotCloseEveryonesEntry). A
//     probe's success opens the entries it probed; its failure closes its
//     principal's entry again, and "*" only while another principal's is
//     closed — so one tenant whose calls fail cannot hold the breaker
//     closed for the others, and a key alone on a server still has one
//     probe at a time. A probe that ends without a verdict leaves its
//     entry half-open, and its principal may not probe it again for
//     Recovery (a, w): one principal's abandoned probes cannot keep the
//     others out. A task's worker that gives its place back before its
//     call keeping its ticket (Unclaim: see Tasks) gives the probe up
//     with no bar, for its task's next worker to probe
//     (TestAnUnclaimedProbeLeavesTheTaskItsProbe).
//   - Pause: a release whose upstream asked for a pause (a 429 or 503 with
//     Retry-After, at most the request's MaxPause) closes its principal's
//     entry until then, never shortening a later one (it leaves a later
//     one on condition that it stands as seen: a call holding nothing
//     writes that condition alone, in at most maxEager tries paced as a
//     release's, each try judged at its own moment); "*" closes while
//     another principal's is closed, and no longer: until the earlier of
//     its end and the latest of theirs as seen (pinned), so a write that
//     lands late, or is sent again as built after an unknown outcome,
//     closes it no later than a pause that stood when it was built
//     (TestAPauseJudgedBeforeItLandsLateDoesNotCloseEveryonesEntry,
//     TestALateTryOfAPauseOfACallHoldingNothingJudgesEveryoneAtItsOwnNow).
//     A pause has no probe.
//   - Hold: an operator's hold (Admin) stops every take until lifted or
//     passed; calls in flight go on, and waiters wait.
//
// An entry open again with no failure for IdleGate is stale, and so is a
// principal's entry half-open for IdleGate with no probe (its principal
// stopped calling): its next call counts failures from none.
//
// # Adaptive limit
//
// With Adaptive, the key's cap is the item's limit, within [Min, Cap]
// (absent: Min). It moves in rounds: limit_round counts its moves, a lease
// knows the round it was granted in (from its take's answer), and only a
// lease of the current round moves it, conditioned on the round — so a
// burst of failures of calls already in flight moves it once, whatever the
// clocks say. A release is evidence:
//
//   - Down: a failure, a push-back, or a success slower than Tolerance ×
//     its principal's baseline of its tool while latency_ratio (the
//     running mean, over about 8 calls, of how much slower than their
//     baselines calls are) is too. The round's first is recorded
//     (limit_sig); the limit comes down on the next of another principal,
//     or of the same when every lease and ticket of the item is its
//     principal's (a move conditioned on the counts that show it): to half
//     for failures and push-back, to limit × max(½, Tolerance / ratio) for
//     latency, at least by one, never below Min.
//   - Up: a success within Tolerance of its baseline of a call granted
//     while the limit was binding (the calls in flight had reached it).
//     After 2 × limit in a round the limit goes up by one; back to the
//     limit it was last brought down from (limit_cut) after 8 × limit. A
//     limit never filled never grows.
//   - Baselines (base:<label>/<tool>): a principal's mean latency of a
//     tool's calls while few were in flight (at most half the limit, when
//     granted and as it ended), moved by an eighth; its first is the
//     median of the tool's others (else its own first call's); at most
//     MaxBaselines, a new one taking the place of one of a principal with
//     no lease and no ticket, or not kept. So one principal's quick calls
//     make nobody else's look slow.
//
// A take with a view is conditioned on the limit it saw; one without, on
// the stored limit itself.
//
// # Tasks
//
// A task (Enqueue) waits with no caller behind it: its ticket, numbered
// from seq and kept in tasks, is served in the callers' turn order, passed
// over for the same reasons (it waits out a shut gate rather than being
// refused), and never presumed gone before its deadline, its task's. Tasks
// have MaxQueued places of their own, with the same reserve. A task's join
// is also conditioned on freed as seen: landing late, after its ticket was
// claimed and released, withdrawn or lapsed (each moves freed), it would
// run the task again; so after a join of unknown outcome Enqueue succeeds
// when it finds the ticket or a lease of its id, joins again only while
// freed is as that join saw it, and otherwise fails. Its first join is
// judged from a view this process saw within a second, when that view
// shows nothing else to do (no ticket or lease of its id, nothing to mend
// or purge, no gate or bucket refusing it), and otherwise from a read
// (TestAnEnqueueJoinsFromARecentView). A join from a view behind the item
// is refused on freed or its room, and its answer is the next look; one
// refused as invalid (a value written by hand since) reads, mends and
// judges again, once (TestAHandEditSinceTheRecentViewDoesNotFailAnEnqueue).
// The store numbers it, so joins since the view cost it nothing, but a seq
// lowered by hand since, not below the view's, is not seen (as for a
// waiter's join from its recent view): the task may be numbered with or
// before tasks that joined since, an order only. A join is not
// conditioned on the gates and buckets it judged, so a task joining as
// one comes to refuse waits it out, as a task that joined just before. A
// join whose outcome is unknown fails its enqueue when freed has moved
// since its view, whether or not it landed; from a view behind the item
// freed is likelier to have moved (internal/gateway refuses the create,
// which the agent may retry, and fails a task's requeue or its input's).
//
// Whoever sees a task's turn come — a release, a waiter behind it, a take
// (a caller's or a claim's: its answer shows the tasks served in the same
// look, which places freed by leases lapsing may have shown nobody else;
// they are started before its lease is judged, so a place the starts left
// no time for is given back, with a context of their own bounded by
// withdrawBudget, and by the give-back when the take landed past its
// CallBy; TestATaskServedInTheSameLookAsATakeIsStartedByIt,
// TestATakesStartsDoNotKeepItsCallerPastCallBy,
// TestATakesStartIsNotCutByItsCallersCallBy), a worker whose turn it was
// not, StartDue —
// marks its ticket (s: now, and f: the first start's s, kept by a start
// made again; on condition of its number, of its last mark as seen, none
// or one StartTimeout old, and of its lease as seen: none, or a lapsed
// one) and,
// having won the mark, starts a worker (Options.OnTaskStart, with a context
// that does not end with the caller's; a seer whose context ended makes no
// more marks, leaving those turns to the next to see them). A mark whose
// answer was lost, retried and refused, or left out when its context
// ended (the item then read within withdrawBudget), is won when the
// answer shows it (the ticket's number and s as it wrote them; another
// process's mark made in the same millisecond reads alike, and two
// workers are started, of which one claims). A lost start is made again by the first
// to see the turn StartTimeout after it; while its starts have gone
// unclaimed that long since the first (f), however often made again,
// callers behind pass the ticket (it keeps its number), each such take
// conditioned on that first start as seen and on a start still out, and
// the tasks whose turn that passing brings are started beside it
// (TestTasksBehindATaskWhoseWorkersNeverClaimAreServed): a task no
// worker comes for holds back no task behind it. A take passes at most
// maxPurge such tasks, and the start of due tasks walks alike: a task
// behind more is not started until one of them is claimed, given back or
// lapses (TestATaskBehindTasksPassedIsStartedWithinTheBound). A worker
// that came ends the run: it gives its start back when still the
// ticket's (below), or a start made since in the run that is, on
// condition of its mark as seen, so that the next start is a first
// (TestAClaimRefusedUntilAnotherStartsItsTaskEndsItsUnclaimedStarts,
// TestAWorkerThatCameEndsARunWhoseLastStartIsOld); a start made from a
// view before is refused on that mark
// (TestAStartFromAViewBeforeARunEndedDoesNotBringItsFirstBack). A
// first after the last start, or either before 1970 (written by hand),
// reads as none (TestAWholeStartMarkWrittenByHandDoesNotKeepATaskFromBeingPassed).
// An instance built before f writes and removes s alone: during a
// rolling deploy, its give-back after a newer instance's start, then its
// own start, leave that start's f behind, and the task may be passed up
// to StartTimeout early, its worker then losing the turn to a caller
// behind (TestAStaleFirstLeftByAnOlderInstancesGiveBackDoesNotPassAFreshStart,
// run with LEASE_OPEN_DEFECTS=1). A caller presumed gone ahead of a task
// holds back the task's turn, and the start of due tasks presumes no
// caller gone (it has seen no turn come): a caller behind the task, not
// served, that would see the task handed a place only past such callers
// removes them, in a write that takes nothing, and starts the task on its
// answer (TestATaskBehindADeadWaiterIsStarted,
// TestATaskBehindADeadWaiterIsStartedThoughTheCallerBehindItDiedToo).
// Presumed gone, they are passed only after a claim window more of steady
// looks, each judged within steadyGap (3 × MaxLook) of the one before (a
// read answered up to twice MaxLook late among them), for which it looks every
// MaxLook however far back it waits, whatever else holds it back: a turn
// that went and came back between its looks then reads as one that went,
// unless it did so within one gap, which may leave the waiter less than
// ClaimWindow to take its place (open:
// TestALiveWaiterWhoseTurnWentAndCameBackWithinASteadyGapIsNotPassedForATask),
// and each dead caller costs the task up to two claim windows
// (TestATaskBehindADeadWaiterIsStartedThoughTheCallerBehindItReadsSlowly,
// TestACallerPausedLooksSteadilyForATaskBehindADeadWaiter,
// TestACallerActingForATaskPassesNoLiveWaiterWhoseTurnWentDuringASlowAnswer). A caller
// counts the turns it sees for itself: callers behind the task that each
// wait less than that never pass the dead one (as synchronous callers
// that each wait less than its claim window never do;
// TestATaskBehindADeadWaiterIsStartedWhileCallersWaitBehindItInTurn, run
// with LEASE_OPEN_DEFECTS=1)
// (TestACallerActingForATaskPassesNoLiveWaiterWhoseTurnWentBetweenItsLooks,
// TestACallerFarBehindATaskLooksSteadilyToPassADeadWaiterForIt). One whose
// walk hands the task a place with them passes nobody
// (TestACallerNotServedPassesNoDeadWaiterForATaskThatHasItsPlace). With no
// caller behind, the task waits for the dead caller's ticket to lapse.
// StartDue fails when the item
// it read cannot be mended first (nothing started;
// TestAStartDueThatCannotMendItsItemReportsIt).
//
// The worker claims the place (Claim): a take of its own ticket, judged
// from a fresh read (or its last refused take's answer; or, for its first
// take only, a view this process saw within a second that shows its
// ticket carrying its start's mark, so seen since that mark: a take is
// conditioned on all it judged from, buckets and gates included, so a
// view behind the item costs a refused take whose answer is the next
// look; whatever else such a view shows — the ticket claimed or gone, a
// purge due, not its turn — is judged again from a read; a task's join
// is not so conditioned: see above) and
// conditioned on its number and, as any take, on the marks of the tasks
// it passes, that sets the lease, keeps the ticket, names the claim in it
// (w: 60 random bits) and takes its start mark away, so that a claim
// lapsing leaves a ticket with no start, started at once by the next to
// see its turn. A task past its deadline (on the worker's clock: its
// ticket lives Margin longer) gets no claim. Two workers of one start
// share the id and may set the same expiry: one
// whose takes' outcomes were unknown takes the lease it finds for its own
// only if the ticket names its claim. When its turn has passed, it takes
// its mark back (on condition it is still its own) and fails. While the
// turn is its own, a take refused on others' writes is made again:
// eagerRetries times from the refusal's answer, then after each back-off
// from a new read (an answer older than the back-off would be refused
// again while releases come faster:
// TestAClaimUnderSteadyReleasesLandsBeforeASecondStart), while the
// ticket carries its start's mark and until StartTimeout after it, when
// it leaves the turn to the next start, making it when nobody has; its
// start, still the ticket's, was not lost, so it gives its mark back
// first and the next start reads as the first (ErrStartLapsed; its own
// process's note of the start forgotten:
// TestAClaimThatLeavesItsTurnStartsTheNextWorker,
// TestAClaimLeavingItsTurnBehindASlowStartHookStartsTheNext), so
// that no two workers of live starts claim at once but within one back-off
// (TestAClaimOverEndlessReleasesStopsAtItsStartsTimeout,
// TestWorkersDoNotPileUpOverAClaimThatCannotLand,
// TestAClaimStopsOnceItsStartIsNoLongerTheTicketsMark,
// TestAClaimWhoseMarkWasGivenBackStopsBesideTheNextStart).
//
// A claimed ticket — its lease, of the same id, live — is no waiter: it
// takes no turn, no start and no queue place (a join's room is
// size(tasks) < MaxQueued + purged + claimed, claimed counting the claims
// with Margin left, as its failure reads the queue full, freed as seen
// keeping each claimed ticket there; a claim lapsing afterwards waits
// again past the bound, at most the cap's claims more), and Withdraw
// cannot take it back
// (ErrClaimed). Nor does it hold its principal to the reserve: a join's
// condition names its claimed tickets, maxNamed at most (more: held to
// the reserve), and requires each one's lease live at the writer's now,
// so a lapsed claim waits again with no write; a join landing late, or
// from a clock behind, may so take one reserve place it would not have,
// the queue's bound holding whatever.
//
// The lease's release (which removes the ticket in its one write) and
// renewal are conditioned on an expiry its holder wrote and on the ticket
// naming its claim, or on the ticket gone (lapsed and purged while the
// call ran on) and the lease holding the expiry its holder knows it wrote
// (a later claim sets one past a lapse of it). A later claim's lease has
// the same id and may hold the expiry of a renewal of the earlier one
// whose outcome was unknown (a renewal bounded by the call's end, a
// claim's hold by its deadline: the same millisecond): the ticket naming
// the later claim tells them apart, and a claim outliving its ticket
// after such a renewal is refused its next one (its call cut off, its
// place back when the lease lapses). The expiry stays in the condition
// for claims of instances built before claims named themselves. A holder
// judging from an answer whether the lease is still its own asks the same
// of the view. A lease that lapses unreleased leaves the ticket waiting
// again, at its number, with no write: a worker is started as for a lost
// start, and its claim purges the lapsed lease. Whether the task's call
// was made is its record's to say (internal/gateway marks it running,
// conditionally, before the call, never over an earlier claim's mark).
//
// A worker that holds the place and makes no call may give it back keeping
// the ticket (Unclaim): the release's one write, conditioned as it is and
// on the ticket there, removes the lease and the claim named in the ticket
// but not the ticket, which waits again at its number as the claim found
// it, and the next worker is started as after any release (a ticket gone
// meanwhile leaves a plain release). A claim whose take lands past its
// worker's CallBy, no time left for the call, gives its place back so and
// fails with ErrStartLapsed, as does one whose worker's CallBy passes
// before its take is made, giving its start's mark back and starting the
// next worker (TestAClaimOutOfItsWorkersTimeKeepsTheTasksTicket,
// TestAClaimOutOfTimeBeforeItsTakeKeepsTheTasksTurn,
// TestAClaimRunningOutOfTimeBetweenTakesKeepsTheTasksTurn,
// TestUnclaimLeavesTheTicketWaitingAtItsNumber); both are made with a
// context of their own bounded by withdrawBudget, the worker's having
// often ended with its CallBy
// (TestAClaimLandingPastCallByWithItsContextEndedGivesItsPlaceBack,
// TestAClaimOutOfTimeBeforeItsTakeWithItsContextEndedPassesTheTurn). An
// Unclaim retried after an unknown outcome that finds the lease gone, or
// its ticket claimed again, before Margin from its expiry has landed
// (TestAnUnclaimWhoseAnswerIsLostIsDoneThoughTheNextClaimHolds); one that
// finds the ticket gone leaves the lease, which may be a later claim's of
// the same expiry (TestALostUnclaimsPlainRetryDoesNotReleaseTheNextClaim).
// A release or Unclaim refused as not its own starts the tasks whose turn
// its answer shows come: its write may have landed unseen
// (TestAGiveBackOfALateTakeWhoseAnswerIsLostStartsTheNextWorker). A claim
// failing after a take of unknown outcome, unless on finding the place
// another claim's (ErrClaimed), reads the item once, with a context of its
// own bounded as a waiter's leave is, and gives back so the place that
// take holds when the item shows it (one of its expiries, the ticket
// naming its claim), whether it landed before or after what the claim last
// read, rather than leave the ticket claimed until the lease lapses
// (TestAClaimEndingOnATakeOfUnknownOutcomeGivesItsPlaceBack,
// TestAClaimOutOfTimeAfterALateLandingTakeGivesItsPlaceBack,
// TestAClaimEndingOnALostTakeLeavesAnothersClaim). One whose context ended
// before a take could be made gives its start's mark back and starts the
// next worker, as for a take refused for want of time
// (TestAClaimOutOfTimeInABackOffPassesTheTurn); a store error leaves the
// mark, the next start StartTimeout on being its pause.
//
// Withdraw removes a task's ticket while it is not claimed (ADD 1 to
// freed, conditioned on its number and on no lease of its id, or on the
// lapsed one, which goes with it), and only for the task it was joined
// for (x: the ticket keeps its task's id). A task costs no write more
// than a call: its claim and its release.
//
// # Answers and views
//
// Every write asks for the item back (ReturnValues ALL_NEW, and
// ReturnValuesOnConditionCheckFailure ALL_OLD; neither costs capacity);
// where the store does not return a failed write's item, one consistent
// read stands in. Every answer goes on the process's board, waking its
// waiters on that key; a waiter takes it for news only when its request
// was sent after the waiter's own last answer came (so executed after),
// never an older item in place of its own read. No loop sends a write again without a pause unless
// the answer showed progress.
//
// # Invariants
//
// Each is a test, named after it. The fault simulation
// (TestFaultSimulation; its faults in docs/tests.md) judges every store
// answer of its seeded schedules, and every QueueFull refusal by the item
// that refused its join, against a model of the protocol written apart
// from its code (sim_model_test.go), with its own reading of the item.
//
//  1. No cap is exceeded: leases holds at most Cap (or the limit) live
//     entries, each tool set at most its ToolCap, each principal set at
//     most PrincipalCap (TestCapsHoldAcrossGoroutines,
//     TestCapHoldsAcrossProcesses).
//  2. An uncontended call costs one write to acquire and one to release,
//     and no read (TestUncontendedCostsTwoWrites).
//  3. A lease and a ticket are whole: every set member is one, and each
//     leaves every map and set with it (TestPurgeRemovesWholeLeases,
//     TestRenewalCannotRestoreAPurgedLease).
//  4. An entry is purged only if it still holds the value seen, which had
//     lapsed (TestRenewedLeaseIsNotPurged); lapsed entries never wedge a
//     key (TestLapsedLeasesDoNotWedgeALoweredCap,
//     TestLapsedTicketsDoNotWedgeALoweredQueue,
//     TestAHandEditDoesNotWedgeTheCallersAfterIt, "half ticket entry"), nor do malformed
//     ones, each put right by one repair, conditioned on it as stored,
//     before a write is judged from it, a repair that puts nothing right
//     sent again only after a back-off, at most maxEager times
//     (TestARepairFailingItsConditionAgainAndAgainPauses,
//     TestAHandEditDoesNotWedgeTheCallersAfterIt: each row a value
//     written by hand and the callers after it;
//     TestAHandEditDoesNotFailAnOperation: each row a release, a
//     give-back, a pause, an operator's write or a withdrawal over one;
//     TestASeqLoweredByHandNumbersNoTicketBeforeOthers).
//  5. No place goes to a caller that gave up, other than by its own write
//     landing late, which holds the place no longer than its lease
//     (TestGaveUpCallerNeverGetsAPlace, TestLateTakeLapsesLikeADeadHolder).
//  6. Places go in turn: a take lands only for a caller whose turn it is in
//     the item as the write finds it, at the moment the take was made,
//     among the callers that had joined when a waiter looked
//     (TestNewcomerDoesNotPassAQueuedCaller, TestFairBetweenPrincipals,
//     TestBlockedTicketDoesNotHoldUpAFreePlace,
//     TestLeavingTicketFailsATakeJudgedBefore,
//     TestTakeThatReranksWaitersFailsATakeJudgedBefore).
//  7. At most MaxQueued callers wait, and as many tasks (a claimed one not
//     waiting, one whose claim lapsed waiting again past it), and a principal
//     with callers or tasks waiting cannot take the last QueueReserve
//     places of either, while one whose tickets, maxNamed at most, are
//     all claimed (its tasks running) or lapsed may (TestQueueIsBounded,
//     TestOneTenantCannotFillTheQueue, TestTasksHaveQueuePlacesOfTheirOwn,
//     TestARunningTaskDoesNotHoldItsPrincipalToTheReserve,
//     TestALapsedClaimHoldsItsPrincipalToTheReserveAgain,
//     TestAReserveJoinFromAStaleViewOfRunningTasks,
//     TestAPrincipalWithMoreRunningTasksThanNamedIsHeldToTheReserve,
//     TestAJoinBesideAClaimInItsLastMarginIsAnsweredAtOnce).
//  8. A free place goes to a live waiter within the claim windows of the
//     D dead waiters before it — ClaimWindow past the look period each
//     one's ticket announces, D × (ClaimWindow + MaxLookFar) at most — of
//     the look that found it free (a look every MaxLook at rank under
//     Places, at most MaxLookFar behind); a live waiter is never presumed
//     gone, however far back it joined
//     (TestDeadWaitersDelayALiveOneByAClaimWindowEach,
//     TestFarWaiterIsNotPresumedGoneByALaterCaller).
//  9. A release is idempotent and knows its own retry: a second or copied
//     release frees nothing and counts its outcome once; a retried release
//     whose earlier attempt landed reports success only while no other
//     caller could have removed the lease (its expiry more than Margin
//     away) (TestDoubleReleaseIsHarmless, TestRetriedReleaseCountsOnce).
//  10. Gates: one principal's signals close a gate for that principal
//     alone, two principals' for everyone; one probe at a time per entry;
//     an abandoned call leaves a gate as it was
//     (TestOnePrincipalCannotOpenTheBreakerForOthers,
//     TestOneTenantsProbeCannotHoldTheBreakerOpen,
//     TestAbandonedProbesDoNotHoldTheBreakerForOthers,
//     TestBreakerOpenForOnePrincipalHasAProbe,
//     TestOnePrincipalsRetryAfterPausesItAlone).
//  11. A bucket admits no more than it gives, at the moment of admission
//     to the upstream: in any stretch of time, at most PerMinute calls plus
//     one an interval, less the tokens given back, give or take one token
//     for clocks skewed by less than an interval
//     (TestRateLimitAdmitsItsBurstExactly, TestWaitersPayWhenAdmitted);
//     a call with no cap is charged only while no ticket waiting needs a
//     token of its buckets, or its buckets hold one for every ticket the
//     item may hold when it lands and one more, and otherwise waits its
//     turn for one as every caller does
//     (TestChargeOnlyCallsDoNotStarveAWaiterOfTheirBucket,
//     TestAChargeWithTokensToSpareIsRefusedByJoinsBeyondItsRoom); a
//     token given back is never one the bucket has regained with time.
//  12. An adaptive limit stays within [Min, Cap], a take leaves at most the
//     limit it was conditioned on, it moves at most once a round, and one
//     principal's evidence alone moves it down only while no other
//     principal holds or waits, and one principal's latencies never make
//     another's calls slow (TestABurstOfFailuresHalvesTheLimitOnce,
//     TestOnePrincipalsFailuresDoNotLowerTheLimitForOthers,
//     TestOneTenantsQuickCallsDoNotMakeOthersSlow).
//  13. No place is taken while a gate refuses the caller or the hold
//     stands, and a pause is never shortened (TestPauseHoldsEveryCaller,
//     TestShorterPauseDoesNotShortenALongerOne,
//     TestAShorterPauseOfACallHoldingNothingOutlivesAPurgeOfTheLongerOne).
//  14. Cost: every write refreshes the item's ttl; waiting costs no write
//     while nothing changes; a waiter's reads per second fall with its
//     rank, to one every MaxLookFar far back, and not with the callers
//     before it that leave, so the queue's grow with the logarithm of its
//     length up to MaxLookFar/MaxLook × Places waiters and by
//     1/MaxLookFar a waiter past them; the item's size grows with the
//     callers holding and waiting only (TestEveryWriteRefreshesTTL,
//     TestWaitersCostNoRenewals, TestLateWaitersBackOff,
//     TestFarWaitersReadByTheirRank, TestAWaiterBehindAnUnclaimedTaskBacksOff,
//     TestAWaiterMovingUpKeepsItsBackOff,
//     TestBreakerEntriesOfPrincipalsGoneDoNotPileUp).
//  15. A long exchange keeps its lease, renewing it at a steady pace, and is
//     stopped before the lease lapses if it cannot
//     (TestKeepAliveRenewsALongExchange, TestKeepAliveRetriesAtAFixedPace).
//  16. Tasks: a task's ticket is never removed before its deadline but by
//     its withdrawal or its claim's release; no place goes to a task
//     withdrawn, released or past its deadline, and at most one at a time
//     to a task, however many workers were started for it and whatever
//     became of its writes; a claimed ticket takes no turn, no start and no
//     queue place while its lease is live, and a claim whose lease lapsed
//     unreleased, or that gave its place back before its call (Unclaim),
//     leaves its ticket waiting again at its number with no start, so that
//     its task gets a worker at once
//     (TestACallerBehindALapsedClaimWaitsForItsNewStart,
//     TestUnclaimLeavesTheTicketWaitingAtItsNumber), while a release after
//     its call takes the ticket with the lease; tasks are
//     served in the callers' turn order, callers passing one only once its
//     starts have gone unclaimed StartTimeout since the first; a start is made again only
//     StartTimeout after the last; a task whose turn has come gets a
//     worker within StartTimeout of the first request that sees it after a
//     start was lost (TestTaskRunsWhenItsTurnComes,
//     TestLostTaskStartIsMadeAgain, TestWithdrawnTaskGetsNoPlace,
//     TestAWithdrawalNamingAnotherTaskTakesNothing,
//     TestTaskWorkerClaimsOnce, TestLateTaskJoinDoesNotBringBackItsTicket,
//     TestTwoWorkersOfOneStartClaimOnceThoughATakeIsLost,
//     TestALapsedClaimLeavesItsTaskWaitingAgain,
//     TestALateWorkersReleaseLeavesTheNewClaim, TestAClaimedTaskIsNoWaiter).
//     The fault simulation judges all of it: a task whose turn has come
//     (for a claim that lapsed unreleased: once every clock within the
//     skew sees the lapse; while a live caller waits, past the callers
//     dead ahead of it, adding their claim windows, the live callers'
//     look periods and what the faults cost them) must be started within
//     StartTimeout of its
//     last start plus StartDue's period (1.5 s), twice the skew and
//     MaxLook, and what the faults cost StartDue's requests; its call is
//     made at most once; a claim leaves no start mark on its ticket; a
//     place given back keeping its ticket leaves it as before its claim,
//     and only by a worker that made no call.
//
// # Guarantee
//
// A lease expires at now + Hold + Margin, and its CallDeadline is at most
// now + Hold on the holder's monotonic clock, so it lapses only after its
// call was cancelled. The caps on unexpired leases are exact; the cap on
// calls running upstream holds while any two instances' clocks differ by
// less than Margin. A ticket lives Margin past its caller's deadline, so
// no clock within the margin takes it for gone early. DynamoDB TTL never
// expires a lease; it only removes items nobody wrote for a day.
//
// The gateway releases a lease only once its upstream is known to have
// stopped working on the call (it answered, or provably stops when told),
// keeping it alive meanwhile (KeepAlive) for at most the server's
// cancel_grace, and counts a release at the end of the grace as the cap
// possibly exceeded.
package lease
