// Package tasks keeps the records of MCP tasks (the
// io.modelcontextprotocol/tasks extension) in the tasks table
// (TASKS_TABLE): one item per task, keyed by the handle the agent holds.
//
// A Record is what every instance knows of a task: who may see it (Owner,
// ServerID), the call it runs (Params), where it stands (Status) and its
// outcome (Result, Error, InputRequests). The gateway answers tasks/get
// from one consistent read of it; the engine that queues and runs gateway
// tasks, and the relay of an upstream's own tasks, change it only through
// Update, which is optimistic: every write is conditioned on the Version it
// read, so two instances never overwrite each other's change unseen.
//
// Invariants, each tested against dynalite:
//   - Create never overwrites: a handle is written once (attribute_not_exists).
//   - Get is one consistent GetItem. A record past CreatedAt+TTL is
//     ErrNotFound, whether or not DynamoDB's TTL has deleted it yet (that
//     deletion is cleanup only, lazy, and may take days).
//   - Update writes exactly one new version: conditioned on the version
//     read, with the version one higher. A write that lost the race is
//     ErrConflict; a write whose first attempt landed but whose answer was
//     lost (the SDK retried it, and the retry found its own write) is a
//     success, not a conflict. A record whose status is terminal keeps its
//     status, result and error for ever.
//   - The binding of a handle cannot change: ID, Kind, ServerID, Tool,
//     Owner, OwnerID, CreatedAt and TTL are written by Create alone.
//   - Nothing is truncated. Every field that comes from the network has a
//     bound (the Max* constants); an outcome (Result, Error, InputRequests)
//     over Store.MaxResultBytes (MAX_TASK_RESULT_BYTES), or a whole item
//     over DynamoDB's 400 KB, is refused with ErrTooLarge, and the caller
//     fails the task with a clear error instead.
//   - Decoding is strict: an item with an attribute this package does not
//     write, a value of the wrong type, or a required attribute missing is
//     refused with an *ItemError naming each one.
//
// Binding is checked by the callers, not here: a record whose Owner or
// ServerID differs from the asker's is answered exactly as an unknown
// handle.
//
// The item's attributes (DynamoDB types in brackets; absent = zero):
//
//	task_id           S     the handle (NewID), partition key
//	kind              S     gateway | relay
//	server_id         S     the server the task belongs to
//	tool              S     the upstream tool's name
//	owner             S     the principal's full-strength state key (never a credential)
//	owner_id          S     the principal's short id, safe to log
//	principal         S     JSON, engine-owned: what the worker runs the call as
//	status            S     working | input_required | completed | failed | cancelled
//	status_message    S     a message for people
//	created_at        N     Unix milliseconds
//	updated_at        N     Unix milliseconds
//	ttl_ms            N     the task's lifetime from created_at (ttlMs on the wire)
//	poll_interval_ms  N     the poll interval suggested to the agent
//	params            S     JSON: the tools/call params as the agent sent them
//	protocol          S     the MCP protocol version the agent spoke
//	traceparent       S     the W3C traceparent of the span of the request that created it
//	tracestate        S     that span's W3C tracestate
//	result            S     JSON: the CallToolResult, when completed
//	error             S     JSON: a JSON-RPC error object, when failed
//	input_requests    S     JSON: the inputRequests, when input_required
//	request_state     S     the requestState of the current input round
//	input_responses   S     JSON: the inputResponses tasks/update brought
//	lease_id          S     the lease (or ticket) of the task in its server's lease item
//	cancel_requested  BOOL  tasks/cancel came while it ran
//	attempt           N     worker starts so far
//	run_until         N     Unix ms: a running task's outcome is written by then, or its worker stopped
//	upstream_id       S     relay: the upstream's own task id
//	version           N     1 on create, one more on every update
//	ttl               N     Unix seconds: DynamoDB's TTL, an hour after the task expires
package tasks
