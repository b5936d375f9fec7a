// Package taskserver is an MCP server (protocol 2026-07-28, stateless
// streamable HTTP) with the tools the conformance suite's tasks scenarios
// call: greet, slow_compute, failing_job, protocol_error_job,
// confirm_delete, multi_input and test_tool_with_task. It runs in one of
// two modes:
//
//   - Tasks: it implements the tasks extension (io.modelcontextprotocol/tasks,
//     SEP-2663) itself, keeping its tasks in memory: it declares the
//     extension, lists each tool's execution.taskSupport, answers a
//     tools/call of a task-supporting tool from a caller that declared the
//     extension with a CreateTaskResult, and serves tasks/get, tasks/update
//     and tasks/cancel (checking Mcp-Name against the task id, and the
//     caller's declaration). It stands for a task-capable upstream whose
//     tasks the gateway relays.
//   - Synchronous: the same tools answer within the call; a tool that needs
//     input asks for it with an input_required result (SEP-2322), as a plain
//     upstream does. It stands for the upstream of gateway tasks, whose item
//     makes its tools task-supporting.
//
// Each tool's work is written once (a job) and asks for input through one
// function: in a task it parks the task in input_required until tasks/update
// brings the answers; in a synchronous call it answers input_required with
// what is still missing, and the client's retry runs the job again with
// every answer so far (carried in requestState).
//
// Stats counts what it was asked, so that tests can check what reached it.
package taskserver
