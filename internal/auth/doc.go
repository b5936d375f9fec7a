// Package auth finds who a request comes from: its Principal, with the
// servers (and tools) it may call.
//
// Three kinds of caller are recognised, each mapped to one Principal:
//
//   - an API key, sent as "Authorization: Bearer <key>", "X-Api-Key: <key>"
//     or "x-litellm-api-key: [Bearer ]<key>". A key is never stored: its
//     item in the keys table is keyed by the lowercase hex SHA-256 of the key
//     (key_hash) and lists the server ids it may call (servers, a string set;
//     "*" means all) and, optionally, the tools (tools, a string set of
//     "<server_id>/<glob>"). Lookups are cached per process by hash for a
//     short time, misses included, so a flood of bad keys costs few reads.
//   - an OAuth 2.1 access token (a JWT) from the configured issuer, sent as
//     "Authorization: Bearer <token>" (or in either key header): the
//     gateway is a resource server. It checks the signature against the
//     issuer's published keys (RS256 or ES256 only), the issuer, the
//     audience and the token's lifetime, and grants the servers its scopes
//     name ("mcp:<server_id>", "mcp:*"; the prefix is configurable).
//   - the IAM caller of a Function URL whose auth type is AWS_IAM, whose
//     SigV4 signature Lambda has checked: it carries a key or token like any
//     caller, or, when it has none, is granted servers by IAMGrants.
//
// When a request carries the same credential in several headers, they must
// agree; two different credentials are refused rather than guessed between.
// Credentials are never logged: a Principal's ID is a short hash.
package auth
