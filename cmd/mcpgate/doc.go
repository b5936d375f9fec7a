// Command mcpgate administers the MCP gateway's DynamoDB tables: it creates
// them, edits upstream server definitions, issues and revokes API keys, shows
// the live leases of the fleet-wide concurrency limiter, lists the calls the
// gateway refused and why (from its log), and imports the mcp_servers of a
// LiteLLM config.
//
// It reads the same environment as the gateway: SERVERS_TABLE, LEASES_TABLE,
// KEYS_TABLE and (optional) TASKS_TABLE name the tables; AWS_REGION (or the
// profile's region), AWS_ENDPOINT_URL_DYNAMODB (for a local endpoint) and the
// standard AWS credentials reach them. With --stack NAME (before or after the command)
// it reads the table names and the log group from the outputs of the
// CloudFormation stack NAME instead; mcpgate env --stack NAME prints them as
// shell exports.
//
// Usage:
//
//	mcpgate tables create
//	mcpgate servers put FILE [--if-absent]      FILE is a JSON object, or - for stdin
//	mcpgate servers get ID [--reveal]
//	mcpgate servers list
//	mcpgate servers delete ID
//	mcpgate servers set ID name=value [name=value...]
//	mcpgate servers check ID [--timeout SECONDS]
//	mcpgate keys create --servers ID[,ID...|*] [--tools ID/GLOB,...] [--name LABEL] [--team TEAM]
//	                    [--max-parallel N] [--rpm-limit N]
//	mcpgate keys list
//	mcpgate keys revoke HASH_OR_PREFIX
//	mcpgate status [SERVER_ID] [--json] [--watch [--interval D] [--count N]]
//	mcpgate refusals [--since D] [--server ID] [--principal P] [--code CODE,...] [--limit N] [--json]
//	                 [--log FILE | --log-group NAME]
//	mcpgate console [--addr HOST:PORT] [--log FILE | --log-group NAME] [--audit-log FILE]
//	mcpgate env --stack NAME
//	mcpgate import litellm FILE [--dry-run] [--rename] [--overwrite]
//	mcpgate help [COMMAND]
//
// Every server definition is checked with the same code the gateway uses
// when it reads the item (registry.Parse) before it is written, and errors
// name the attribute at fault; 'mcpgate help servers put' lists every
// attribute from the same table (registry.Attributes). servers set types
// its values by attribute: numbers for the N ones (max_concurrent_requests,
// timeout, queue_timeout, cancel_grace), true or false for the BOOL ones
// (stops_on_close), JSON for a value starting with '{' or '[', strings
// otherwise; "name=" removes the attribute. servers put and set make the
// fleet's shared tool list of the server stale. servers check reads the
// server's credential and calls its upstream, printing no secret value.
//
// keys create prints the new key once, alone on standard output; only its
// SHA-256 is stored.
//
// refusals reads the gateway's request records (msg "request") from a file
// (--log, MCPGATE_LOG: make dev's .dev/logs/gateway.log) or a CloudWatch
// Logs group (--log-group, MCPGATE_LOG_GROUP, or the stack's LogGroupName
// output) with FilterLogEvents, and shows those with an error code grouped
// by code, server and principal, with request ids, then the latest one by
// one and what each code means.
//
// console serves a live web console of the fleet on a loopback address
// (internal/console) and prints its URL, which carries the run's token.
//
// Exit status: 0 on success, 1 on failure (one line on standard error), 2
// for an unknown command or bad flags or arguments (with usage).
package main
