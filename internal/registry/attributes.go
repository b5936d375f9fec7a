package registry

import (
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"slices"
	"strings"
	"time"
)

// Attribute is one attribute of a server item as admins write it: its
// name, DynamoDB type, default and meaning. The table of them (see
// Attributes) is the one place an attribute is declared: Parse accepts
// exactly these names (and x_ ones) and reads each with its row's reader,
// and the CLI's help lists them from the same table, so the two cannot
// drift. Adding an attribute is adding a row.
type Attribute struct {
	// Name is the item attribute's name.
	Name string
	// Type is its DynamoDB type: S, N, BOOL, M or L.
	Type string
	// Default is what an absent attribute means, for people; "required"
	// when it may not be absent, "" when absence needs no words.
	Default string
	// Doc says in one line what it does.
	Doc string
	// Example is a valid use of it, as a JSON object merged into a
	// minimal server definition (with any attribute it needs).
	Example string
	// Fields are the keys of a map attribute (for tools, of each tool's
	// map).
	Fields []Attribute
	// read reads and checks the attribute into s.
	read func(p *parser, s *Server)
}

// Item attribute names that Parse's cross-attribute checks refer to.
const (
	attrID       = "server_id"
	attrURL      = "url"
	attrSpecURL  = "spec_url"
	attrSpecPath = "spec_path"
)

// toolFields are the keys of one tool's map in "tools".
var toolFields = []Attribute{
	{Name: "max_concurrent", Type: "N", Default: "none", Doc: "the tool's own fleet-wide cap, within the server's"},
	{Name: "timeout", Type: "N", Default: "the server's", Doc: "seconds one call of the tool may take"},
	{Name: "rpm_limit", Type: "N", Default: "none", Doc: "calls of the tool a minute, fleet-wide (a burst of N, then N/60 a second)"},
	{Name: "task_support", Type: "S", Default: "the upstream's", Doc: `"forbidden", "optional" or "required": whether the gateway runs a call of the tool as an MCP task ` +
		`(io.modelcontextprotocol/tasks) for a caller that declares the extension; unset: the upstream tool's own execution.taskSupport (relayed), else forbidden`},
}

// breakerFields are the keys of "breaker".
var breakerFields = []Attribute{
	{Name: "failure_threshold", Type: "N", Default: "required", Doc: "consecutive infrastructure failures of a tool that open its breaker (1–1000)"},
	{Name: "recovery_timeout", Type: "N", Default: "30", Doc: "seconds it stays open before one probe call is let through"},
	{Name: "excluded_tools", Type: "L", Default: "none", Doc: "tools without a breaker"},
}

// authDocFields are the keys of "auth", for help; which of them a type
// takes is checked by the parser (authFields).
var authDocFields = []Attribute{
	{Name: "type", Type: "S", Default: "required", Doc: "bearer, api_key, basic, header, aws_sigv4 or oauth2_client_credentials"},
	{Name: "secret", Type: "S", Doc: "a reference: secretsmanager:<name-or-arn>[#<json-key>], ssm:<parameter-name> or env:<VAR> (bearer token, API key, user:password, header value, or OAuth client secret)"},
	{Name: "header", Type: "S", Default: DefaultAPIKeyHeader, Doc: "api_key and header: the header the secret is sent in"},
	{Name: "service", Type: "S", Doc: "aws_sigv4: the service signed for (lambda, execute-api, …)"},
	{Name: "region", Type: "S", Default: "the gateway's", Doc: "aws_sigv4: the region signed for"},
	{Name: "token_url", Type: "S", Doc: "oauth2_client_credentials: the token endpoint"},
	{Name: "client_id", Type: "S", Doc: "oauth2_client_credentials: the client id"},
	{Name: "scope", Type: "S", Doc: "oauth2_client_credentials: scopes asked for, space-separated"},
	{Name: "audience", Type: "S", Doc: "oauth2_client_credentials: the audience asked for"},
}

// attributes is the table of server item attributes, in the order help
// shows them.
var attributes = []Attribute{
	{
		Name: attrID, Type: "S", Default: "required",
		Doc:     "1–64 of A–Z a–z 0–9 _ . ('-' separates server and tool in tool names on /mcp)",
		Example: `{"server_id": "quotes"}`,
		read: func(p *parser, s *Server) {
			s.ID = p.str(attrID, true)
			if s.ID != "" {
				if err := ValidateID(s.ID); err != nil {
					p.fail(attrID, strings.TrimPrefix(err.Error(), "server_id "))
				}
			}
		},
	},
	{
		Name: attrURL, Type: "S", Default: "required",
		Doc:     "the upstream's MCP endpoint, http(s)://… (openapi: optional base URL replacing the document's servers)",
		Example: `{"url": "https://quotes.example.com/mcp"}`,
		read: func(p *parser, s *Server) {
			s.URL = p.str(attrURL, false)
			if s.URL != "" {
				if err := validateURL(s.URL); err != nil {
					p.fail(attrURL, err.Error())
				}
			}
		},
	},
	{
		Name: "transport", Type: "S", Default: "http",
		Doc:     `"http" (MCP streamable HTTP), "sse" (MCP HTTP+SSE) or "openapi" (a plain HTTP API)`,
		Example: `{"transport": "sse"}`,
		read: func(p *parser, s *Server) {
			s.Transport = oneOf(p, "transport", "transport", TransportHTTP, TransportSSE, TransportOpenAPI)
		},
	},
	{
		Name: attrSpecURL, Type: "S",
		Doc:     "openapi only, or spec_path: the URL of the OpenAPI 3 document",
		Example: `{"transport": "openapi", "spec_url": "https://quotes.example.com/openapi.json"}`,
		read:    func(p *parser, s *Server) { s.SpecURL = p.str(attrSpecURL, false) },
	},
	{
		Name: attrSpecPath, Type: "S",
		Doc:     "openapi only, or spec_url: the document's path in the function's package (relative)",
		Example: `{"transport": "openapi", "spec_path": "openapi/quotes.json"}`,
		read:    func(p *parser, s *Server) { s.SpecPath = p.str(attrSpecPath, false) },
	},
	{
		Name: "max_concurrent_requests", Type: "N", Default: "unlimited",
		Doc:     fmt.Sprintf("fleet-wide cap on calls in flight; absent, 0 or negative = unlimited; at most %d", MaxConcurrentLimit),
		Example: `{"max_concurrent_requests": 4}`,
		read:    func(p *parser, s *Server) { s.MaxConcurrent = p.cap("max_concurrent_requests") },
	},
	{
		Name: "timeout", Type: "N", Default: seconds(DefaultTimeout),
		Doc:     fmt.Sprintf("seconds one upstream call may take (fractions allowed; at most %s)", seconds(MaxTimeout)),
		Example: `{"timeout": 2.5}`,
		read:    func(p *parser, s *Server) { s.Timeout = p.seconds("timeout", DefaultTimeout, MaxTimeout) },
	},
	{
		Name: "on_limit", Type: "S", Default: string(PolicyQueue),
		Doc:     `at a cap: "queue" (wait) or "shed" (answer AT_CAPACITY at once)`,
		Example: `{"on_limit": "shed"}`,
		read: func(p *parser, s *Server) {
			s.OnLimit = oneOf(p, "on_limit", "policy", PolicyQueue, PolicyShed)
		},
	},
	{
		Name: "queue_timeout", Type: "N", Default: seconds(DefaultQueueTimeout),
		Doc:     "seconds a queued call waits for a slot",
		Example: `{"queue_timeout": 20}`,
		read: func(p *parser, s *Server) {
			s.QueueTimeout = p.seconds("queue_timeout", DefaultQueueTimeout, MaxTimeout)
		},
	},
	{
		Name: "max_queued", Type: "N", Default: "see Queue",
		Doc: fmt.Sprintf("callers that may wait at once for a place, fleet-wide (1–%d); past it a caller gets AT_CAPACITY (queue_full) at once. "+
			"Default: what the server's share of FUNCTION_CONCURRENCY leaves beside its cap, else %d", MaxQueuedLimit, DefaultMaxQueued),
		Example: `{"max_queued": 20}`,
		read:    func(p *parser, s *Server) { s.MaxQueued = p.whole("max_queued", 1, MaxQueuedLimit) },
	},
	{
		Name: "max_concurrent_per_principal", Type: "N", Default: "none",
		Doc:     fmt.Sprintf("fleet-wide cap on one caller's (key's, token subject's, IAM caller's) calls in flight on the server; absent, 0 or negative = none; at most %d", MaxConcurrentLimit),
		Example: `{"max_concurrent_per_principal": 2}`,
		read:    func(p *parser, s *Server) { s.MaxPerPrincipal = p.cap("max_concurrent_per_principal") },
	},
	{
		Name: "rpm_limit", Type: "N", Default: "none",
		Doc:     fmt.Sprintf("calls a minute to the server from all callers, fleet-wide: a bucket of N refilled at N a minute (1–%d); past it RATE_LIMITED", MaxRPMLimit),
		Example: `{"rpm_limit": 60}`,
		read:    func(p *parser, s *Server) { s.RPMLimit = p.whole("rpm_limit", 1, MaxRPMLimit) },
	},
	{
		Name: "rpm_limit_per_principal", Type: "N", Default: "none",
		Doc:     fmt.Sprintf("calls a minute to the server from one caller (a key, a token subject, an IAM caller), fleet-wide (1–%d)", MaxRPMLimit),
		Example: `{"rpm_limit_per_principal": 20}`,
		read:    func(p *parser, s *Server) { s.RPMPerPrincipal = p.whole("rpm_limit_per_principal", 1, MaxRPMLimit) },
	},
	{
		Name: "adaptive", Type: "BOOL", Default: "false",
		Doc: "true: the fleet keeps its own limit for the server between adaptive_min and max_concurrent_requests (its ceiling, then required), " +
			"moved by the upstream's back-pressure (429, 503, rate-limit errors, timeouts) and its calls' latency",
		Example: `{"adaptive": true, "max_concurrent_requests": 12}`,
		read:    func(p *parser, s *Server) { s.Adaptive = p.boolean("adaptive") },
	},
	{
		Name: "adaptive_min", Type: "N", Default: "1",
		Doc:     "the lowest an adaptive limit goes (1 to max_concurrent_requests); only with adaptive",
		Example: `{"adaptive": true, "adaptive_min": 2, "max_concurrent_requests": 12}`,
		read:    func(p *parser, s *Server) { s.AdaptiveMin = p.whole("adaptive_min", 1, MaxConcurrentLimit) },
	},
	{
		Name: "max_pause", Type: "N", Default: seconds(DefaultMaxPause),
		Doc: fmt.Sprintf("the longest pause (seconds, at most %s) an upstream's 429 or 503 with Retry-After imposes on the caller whose call got it "+
			"(on every caller once two callers' calls got one); an OpenAPI server pauses the operation alone", seconds(MaxPauseLimit)),
		Example: `{"max_pause": 30}`,
		read:    func(p *parser, s *Server) { s.MaxPause = p.seconds("max_pause", DefaultMaxPause, MaxPauseLimit) },
	},
	{
		Name: "cancel_grace", Type: "N", Default: seconds(DefaultCancelGrace),
		Doc:     "seconds a call cut off before its upstream answered keeps its slot, waiting for the upstream to stop (at most what the invocation has left)",
		Example: `{"cancel_grace": 30}`,
		read: func(p *parser, s *Server) {
			s.CancelGrace = p.seconds("cancel_grace", DefaultCancelGrace, MaxTimeout)
		},
	},
	{
		Name: "allow_local", Type: "BOOL", Default: "false",
		Doc:     "true lets the upstream's url, spec_url and token_url reach loopback and link-local addresses (this host, instance metadata), which are refused otherwise",
		Example: `{"allow_local": true}`,
		read:    func(p *parser, s *Server) { s.AllowLocal = p.boolean("allow_local") },
	},
	{
		Name: "stops_on_close", Type: "BOOL", Default: "false",
		Doc:     "true declares that the upstream stops a call when its request is closed, so a cut-off call's slot is freed at once",
		Example: `{"stops_on_close": true}`,
		read:    func(p *parser, s *Server) { s.StopsOnClose = p.boolean("stops_on_close") },
	},
	{
		Name: "tools", Type: "M", Default: "none",
		Doc:     `per tool: {"<tool>": {"max_concurrent": N, "timeout": S, "rpm_limit": N, "task_support": "optional"}}, within the server's cap and timeout`,
		Example: `{"tools": {"fetch_quote": {"max_concurrent": 2, "timeout": 1, "rpm_limit": 30, "task_support": "optional"}}}`,
		Fields:  toolFields,
		read:    func(p *parser, s *Server) { s.Tools = p.tools("tools") },
	},
	{
		Name: "task_ttl", Type: "N", Default: seconds(DefaultTaskTTL),
		Doc: fmt.Sprintf("seconds a task of the server's tools lives, from its creation (whole, 1–%s): its wait for a place, its run, "+
			"and its outcome kept for tasks/get; ttlMs on the wire", seconds(MaxTaskTTL)),
		Example: `{"task_ttl": 600}`,
		read:    func(p *parser, s *Server) { s.TaskTTL = p.taskTTL("task_ttl") },
	},
	{
		Name: "breaker", Type: "M", Default: "none",
		Doc:     `a circuit breaker per tool, shared by the fleet: {"failure_threshold": N, "recovery_timeout": S, "excluded_tools": [...]}`,
		Example: `{"breaker": {"failure_threshold": 3, "recovery_timeout": 30, "excluded_tools": ["health"]}}`,
		Fields:  breakerFields,
		read:    func(p *parser, s *Server) { s.Breaker = p.breaker("breaker") },
	},
	{
		Name: "on_store_error", Type: "S", Default: string(StoreReject),
		Doc:     `when DynamoDB fails: "reject" (STORE_UNAVAILABLE) or "allow" (call without a slot, logged uncapped)`,
		Example: `{"on_store_error": "allow"}`,
		read: func(p *parser, s *Server) {
			s.OnStoreError = oneOf(p, "on_store_error", "policy", StoreReject, StoreAllow)
		},
	},
	{
		Name: attrAuth, Type: "M", Default: "none",
		Doc:     `the gateway's credential for the upstream: {"type": "bearer"|"api_key"|"basic"|"header"|"aws_sigv4"|"oauth2_client_credentials", ...}; secrets are references, never values`,
		Example: `{"auth": {"type": "bearer", "secret": "secretsmanager:mcpgate/quotes#token"}}`,
		Fields:  authDocFields,
		read:    func(p *parser, s *Server) { s.Auth = p.auth(attrAuth) },
	},
	{
		Name: attrStaticHeaders, Type: "M", Default: "none",
		Doc:     "literal, non-secret headers sent to the upstream: {\"<Header>\": \"<value>\"}",
		Example: `{"static_headers": {"X-Tenant": "acme"}}`,
		read:    func(p *parser, s *Server) { s.StaticHeaders = p.staticHeaders(attrStaticHeaders, s.Auth) },
	},
	{
		Name: attrForwardHeaders, Type: "L", Default: "none",
		Doc:     "agent request headers copied to the upstream; credentials (Authorization, Cookie, X-Api-Key, …) and hop-by-hop headers never are",
		Example: `{"forward_headers": ["X-Request-Tag"]}`,
		read: func(p *parser, s *Server) {
			s.ForwardHeaders = p.forwardHeaders(attrForwardHeaders, s.Auth, s.StaticHeaders)
		},
	},
	{
		Name: attrAllowedTools, Type: "L", Default: "all",
		Doc:     "globs (* and ?) a tool must match to be listed or called; others are unknown tools",
		Example: `{"allowed_tools": ["read_*", "search"]}`,
		read:    func(p *parser, s *Server) { s.AllowedTools = p.patterns(attrAllowedTools) },
	},
	{
		Name: attrDisallowedTools, Type: "L", Default: "none",
		Doc:     "globs of tools hidden from every list and refused as unknown tools",
		Example: `{"disallowed_tools": ["delete_*"]}`,
		read:    func(p *parser, s *Server) { s.DisallowedTools = p.patterns(attrDisallowedTools) },
	},
	{
		Name: "description", Type: "S",
		Doc:     "free text, at most 1024 bytes",
		Example: `{"description": "Stock quotes"}`,
		read: func(p *parser, s *Server) {
			s.Description = p.str("description", false)
			if len(s.Description) > 1024 {
				p.fail("description", "longer than 1024 bytes")
			}
		},
	},
}

// Attributes returns the table of server item attributes, in the order help
// shows them. Names starting with "x_" are also accepted, and ignored.
func Attributes() []Attribute { return slices.Clone(attributes) }

// KnownAttributes lists the names of the attributes a server item may
// carry. Any other attribute is rejected (a misspelt max_concurrent_requests
// must not silently mean "unlimited"), except names starting with "x_",
// which are kept for admins' own notes and ignored.
func KnownAttributes() []string { return fieldNames(attributes) }

// AttributeType returns the DynamoDB type of the named attribute, "" when
// there is no such attribute.
func AttributeType(name string) string {
	for _, a := range attributes {
		if a.Name == name {
			return a.Type
		}
	}
	return ""
}

func fieldNames(as []Attribute) []string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.Name
	}
	return names
}

// seconds renders a duration as a number of seconds, as items hold them.
func seconds(d time.Duration) string {
	return fmt.Sprint(d.Seconds())
}

// oneOf reads an optional string attribute that must be one of values (a
// noun for them names the kind); an absent one means the first.
func oneOf[T ~string](p *parser, name, noun string, values ...T) T {
	v := p.str(name, false)
	if v == "" {
		return values[0]
	}
	if slices.Contains(values, T(v)) {
		return T(v)
	}
	quoted := make([]string, len(values))
	for i, x := range values {
		quoted[i] = fmt.Sprintf("%q", string(x))
	}
	use := strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
	p.fail(name, fmt.Sprintf("%q is not a %s: use %s", clip.String(v, 40), noun, use))
	return values[0]
}
