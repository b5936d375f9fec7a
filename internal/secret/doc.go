// Package secret resolves secret references: the only form in which a
// credential appears in the gateway's configuration. A reference names
// where a value is kept, never the value:
//
//	secretsmanager:<name-or-arn>[#<json-key>]   AWS Secrets Manager; with #key, one
//	                                            field of a secret holding a JSON object
//	ssm:<parameter-name>                        an SSM parameter (SecureString, decrypted)
//	env:<VAR>                                   an environment variable (local development)
//
// ParseRef checks a reference's syntax without reading anything; it never
// repeats its input in an error, since a value written where a reference
// belongs may itself be a secret.
//
// A Resolver reads values with the AWS SDK and keeps each one per process
// for a TTL (five minutes by default), in a cache.Loader: up to 4096 values,
// dropping the one used least recently. Concurrent reads of one reference
// share a single request. Refresh re-reads a reference whose value an
// upstream refused (rotation), at most once per RefreshFloor however many
// calls were refused. While a service fails to answer, the last value read
// is served for up to MaxStale. Values never appear in the Resolver's
// errors.
//
// Typical use, once per process:
//
//	res := secret.NewFromConfig(awsCfg, secret.Options{})
//	ref, err := secret.ParseRef("secretsmanager:mcpgate/hmac-key")
//	...
//	key, err := res.Resolve(ctx, ref)
package secret
