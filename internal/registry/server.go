package registry

import (
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Transport is how the gateway talks to an upstream MCP server.
type Transport string

const (
	// TransportHTTP is MCP streamable HTTP (the default).
	TransportHTTP Transport = "http"
	// TransportSSE is the older HTTP+SSE transport.
	TransportSSE Transport = "sse"
	// TransportOpenAPI is a plain HTTP API described by an OpenAPI 3
	// document (spec_url or spec_path); its operations are the tools.
	TransportOpenAPI Transport = "openapi"
)

// Policy is what happens to a call when the server's cap is reached.
type Policy string

const (
	// PolicyQueue waits for a slot, up to the queue timeout (the default).
	PolicyQueue Policy = "queue"
	// PolicyShed refuses the call at once with AT_CAPACITY.
	PolicyShed Policy = "shed"
)

// Defaults and bounds for server item attributes.
const (
	DefaultTimeout      = 30 * time.Second
	MaxTimeout          = 900 * time.Second
	DefaultQueueTimeout = 10 * time.Second
	// DefaultCancelGrace is how long, by default, a cut-off call keeps its
	// slot while the gateway waits for the upstream's late answer.
	DefaultCancelGrace = 60 * time.Second
	// DefaultMaxPause and MaxPauseLimit bound the pause an upstream's
	// Retry-After imposes (max_pause); the limit is the lease package's
	// and the longest Retry-After the gateway reads.
	DefaultMaxPause = 60 * time.Second
	MaxPauseLimit   = 5 * time.Minute
	// MaxConcurrentLimit bounds max_concurrent_requests: each live lease is
	// a map entry in one DynamoDB item, and every write is billed per KB of
	// that item.
	MaxConcurrentLimit = 1000
	// DefaultMaxQueued is how many callers may wait for a server at once
	// when neither its item nor the function's concurrency says.
	DefaultMaxQueued = 100
	// MaxQueuedLimit bounds max_queued, as each waiting caller is an entry
	// of the same item.
	MaxQueuedLimit = 1000
	// MaxRPMLimit bounds the rpm limits: one call a millisecond.
	MaxRPMLimit = 60000
	// DefaultTaskTTL and MaxTaskTTL bound task_ttl: how long a task of
	// the server's tools lives, from its creation.
	DefaultTaskTTL = time.Hour
	MaxTaskTTL     = 24 * time.Hour
	maxURLLen      = 2048
)

// Server is one upstream MCP server, as configured by an item of the servers
// table. The zero values of optional fields are already resolved to their
// defaults by Parse.
type Server struct {
	// ID is the item's server_id.
	ID string
	// URL is the upstream's MCP endpoint; for an OpenAPI server, an
	// optional base URL that replaces the document's servers.
	URL string
	// SpecURL or SpecPath locates an OpenAPI server's document.
	SpecURL, SpecPath string
	// Transport is http (streamable HTTP) or sse.
	Transport Transport
	// MaxConcurrent is the fleet-wide cap on calls in flight; 0 = unlimited.
	MaxConcurrent int
	// Timeout bounds one upstream call.
	Timeout time.Duration
	// OnLimit is the policy when the cap is reached.
	OnLimit Policy
	// QueueTimeout bounds the wait for a slot under PolicyQueue.
	QueueTimeout time.Duration
	// MaxQueued is how many callers may wait at once, fleet-wide; 0 means
	// the gateway's default.
	MaxQueued int
	// MaxPerPrincipal caps one principal's calls in flight on the server,
	// fleet-wide; 0 = none.
	MaxPerPrincipal int
	// RPMLimit and RPMPerPrincipal are request-rate limits, calls a minute
	// fleet-wide: the server's, and one principal's on it; 0 = none.
	RPMLimit, RPMPerPrincipal int
	// Adaptive lets the fleet find the server's limit itself, between
	// AdaptiveMin (at least 1) and MaxConcurrent (the ceiling).
	Adaptive    bool
	AdaptiveMin int
	// MaxPause bounds the pause an upstream's Retry-After imposes on
	// the callers whose calls got one.
	MaxPause time.Duration
	// Description is free text for people.
	Description string
	// Tools holds per-tool limits, by tool name.
	Tools map[string]ToolLimits
	// TaskTTL is how long a task of the server's tools lives, from its
	// creation (DefaultTaskTTL unless task_ttl says).
	TaskTTL time.Duration
	// Breaker configures the fleet-wide circuit breaker; nil means none.
	Breaker *Breaker
	// OnStoreError is what to do when the lease store fails.
	OnStoreError StorePolicy
	// CancelGrace bounds how long a call cut off before the upstream
	// answered (timeout, caller gone, lost slot, shutdown) keeps its slot
	// while the gateway waits to learn that the upstream stopped working on
	// it. When it ends without that, the slot is freed anyway and the cap
	// may be exceeded (logged and counted).
	CancelGrace time.Duration
	// StopsOnClose declares that the upstream stops working on a call when
	// its request is closed (the stream of a streamable-HTTP POST, an
	// OpenAPI request, the session of the SSE transport): a cut-off call
	// then closes it and frees its slot at once, without waiting for a late
	// answer.
	StopsOnClose bool
	// AllowLocal lets the server's requests (to its url, spec_url and
	// token_url, not to servers an OpenAPI document names) reach
	// loopback and link-local addresses, which are refused otherwise.
	AllowLocal bool
	// Auth is the gateway's credential for the upstream; nil means none.
	Auth *Auth
	// StaticHeaders are sent with every request to the upstream, by
	// canonical header name.
	StaticHeaders map[string]string
	// ForwardHeaders name the agent request headers copied to the
	// upstream (canonical names, sorted); never a credential or a
	// hop-by-hop header.
	ForwardHeaders []string
	// AllowedTools, if any, are the globs a tool must match to be seen or
	// called; DisallowedTools hide the tools they match.
	AllowedTools, DisallowedTools []string

	// identity is IdentityHash, computed once when the Registry read the
	// item; "" for a Server made any other way.
	identity string
}

// ToolLimits are one tool's own limits.
type ToolLimits struct {
	// MaxConcurrent caps the tool's calls in flight, fleet-wide, within
	// the server's cap; 0 = only the server's cap applies.
	MaxConcurrent int
	// Timeout bounds one call of the tool; 0 = the server's timeout.
	Timeout time.Duration
	// RPMLimit is the tool's calls a minute, fleet-wide; 0 = none.
	RPMLimit int
	// TaskSupport is TaskForbidden, TaskOptional or TaskRequired: whether
	// the gateway runs a call of the tool as an MCP task; "" = unset (the
	// upstream tool's own execution.taskSupport decides, relayed).
	TaskSupport string
}

// The values of tools.<tool>.task_support, as the tasks extension
// (io.modelcontextprotocol/tasks) names a tool's execution.taskSupport.
const (
	TaskForbidden = "forbidden"
	TaskOptional  = "optional"
	TaskRequired  = "required"
)

// TaskSupport is what the item says of tool's task support: TaskForbidden,
// TaskOptional, TaskRequired, or "" when it says nothing.
func (s *Server) TaskSupport(tool string) string { return s.Tools[tool].TaskSupport }

// Breaker configures a circuit breaker per (server, tool), shared by every
// instance of the gateway.
type Breaker struct {
	// FailureThreshold is how many consecutive infrastructure failures
	// (timeouts, unreachable upstream, broken transport) open it.
	FailureThreshold int
	// RecoveryTimeout is how long it stays open before one probe call is
	// let through.
	RecoveryTimeout time.Duration
	// ExcludedTools have no breaker.
	ExcludedTools []string
}

// Covers reports whether calls to tool are guarded by the breaker.
func (b *Breaker) Covers(tool string) bool {
	return b != nil && !slices.Contains(b.ExcludedTools, tool)
}

// StorePolicy is what happens to a capped call when the lease store fails.
type StorePolicy string

const (
	// StoreReject answers STORE_UNAVAILABLE (the default).
	StoreReject StorePolicy = "reject"
	// StoreAllow makes the call without a slot, logged and counted.
	StoreAllow StorePolicy = "allow"
)

// Capped reports whether calls to s take a slot of the distributed semaphore.
func (s *Server) Capped() bool { return s.MaxConcurrent > 0 }

// Limited reports whether the gateway limits calls to s at all: a cap on
// the server or one of its tools, or a breaker. Calls to an unlimited
// server cause no store traffic.
func (s *Server) Limited() bool {
	if s.Capped() || s.Breaker != nil || s.MaxPerPrincipal > 0 || s.RPMLimit > 0 || s.RPMPerPrincipal > 0 {
		return true
	}
	for _, t := range s.Tools {
		if t.MaxConcurrent > 0 || t.RPMLimit > 0 {
			return true
		}
	}
	return false
}

// ToolCap is the tool's own cap (0 = none).
func (s *Server) ToolCap(tool string) int { return s.Tools[tool].MaxConcurrent }

// TimeoutFor is the timeout of one call of tool: the tool's own if it has
// one, else the server's.
func (s *Server) TimeoutFor(tool string) time.Duration {
	if t := s.Tools[tool].Timeout; t > 0 {
		return t
	}
	return s.Timeout
}

// Limits on the nested attributes.
const (
	maxToolEntries  = 100
	maxToolName     = 128
	MaxRecovery     = time.Hour
	maxFailureLimit = 1000
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.]{0,63}$`)

// ValidateID checks a server_id: 1 to 64 letters, digits, '_' or '.', not
// starting with '.'. The '-' is excluded because the MCP front door names
// tools "<server_id>-<tool>" and splits at the first '-'.
func ValidateID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("server_id %q is invalid: use 1 to 64 letters, digits, '_' or '.' ('-' is reserved as the tool name separator)", clip.String(id, 80))
	}
	return nil
}

// FieldError is a problem with one attribute of a server item.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Parse validates a servers-table item and returns the Server it describes.
// Every problem is reported, each naming its attribute. Each attribute of
// the table (see Attributes) reads and checks itself; Parse then checks
// what depends on several of them, and refuses any attribute the table
// does not list.
func Parse(item map[string]types.AttributeValue) (*Server, error) {
	s, _, err := ParseWithWarnings(item)
	return s, err
}

// ParseWithWarnings is Parse, and also returns what is valid in the item
// but likely not what its author meant, one sentence each, naming the
// attribute: a cap of 0 or less, which means no cap at all. The CLI shows
// them when it writes an item; the gateway serves such an item as it is.
func ParseWithWarnings(item map[string]types.AttributeValue) (*Server, []string, error) {
	p := parser{item: item}
	s := &Server{}
	for _, a := range attributes {
		a.read(&p, s)
	}
	if s.Transport == TransportOpenAPI {
		switch {
		case (s.SpecURL == "") == (s.SpecPath == ""):
			p.fail(attrSpecURL, "an openapi server needs exactly one of spec_url and spec_path")
		case s.SpecURL != "":
			if err := validateURL(s.SpecURL); err != nil {
				p.fail(attrSpecURL, err.Error())
			}
		case len(s.SpecPath) > maxURLLen || strings.ContainsRune(s.SpecPath, 0):
			p.fail(attrSpecPath, "is not a usable file path")
		}
	} else {
		if _, ok := item[attrURL]; !ok {
			p.fail(attrURL, "missing (type S)")
		} else if s.URL == "" {
			p.fail(attrURL, "must not be empty")
		}
		for _, a := range []string{attrSpecURL, attrSpecPath} {
			if _, ok := item[a]; ok {
				p.fail(a, "only an openapi server has one (set transport to \"openapi\")")
			}
		}
	}
	switch {
	case s.Adaptive && s.MaxConcurrent <= 0:
		p.fail("adaptive", "needs max_concurrent_requests, the most the limit may reach")
	case s.AdaptiveMin > 0 && !s.Adaptive:
		p.fail("adaptive_min", "is only for an adaptive server (adaptive: true)")
	case s.AdaptiveMin > s.MaxConcurrent && s.MaxConcurrent > 0:
		p.fail("adaptive_min", fmt.Sprintf("%d is more than max_concurrent_requests (%d)", s.AdaptiveMin, s.MaxConcurrent))
	}
	if s.Adaptive && s.AdaptiveMin == 0 {
		s.AdaptiveMin = 1
	}
	var unknown []string
	for name := range item {
		if !isKnown(name) && !strings.HasPrefix(name, "x_") {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		p.fail(clip.String(name, clip.Short), "unknown attribute (known: "+strings.Join(KnownAttributes(), ", ")+"; prefix your own with x_)")
	}
	if len(p.errs) > 0 {
		return nil, nil, errors.Join(p.errs...)
	}
	return s, p.warnings, nil
}

func isKnown(name string) bool {
	return slices.ContainsFunc(attributes, func(a Attribute) bool { return a.Name == name })
}

// validateURL checks an upstream URL (url, spec_url, an OAuth token_url)
// for the gateway, the CLI and hand-written items alike, and says what is
// wrong in words a person can act on. It never repeats the URL, whose
// query may hold a token.
func validateURL(raw string) error {
	if len(raw) > maxURLLen {
		return fmt.Errorf("longer than %d bytes", maxURLLen)
	}
	if err := urlSpaces(raw); err != nil {
		return err
	}
	if !strings.Contains(raw, "://") {
		// "127.0.0.1:9100/mcp" does not parse, and "localhost:9100"
		// parses as scheme "localhost": both lack the scheme.
		return errors.New(`has no scheme: start it with http:// or https:// (as in "http://127.0.0.1:9100/mcp")`)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("not a valid URL: %s", clip.String(err.Error(), 120))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme must be http or https, not %q", clip.String(u.Scheme, 20))
	}
	if u.Host == "" {
		return errors.New("has no host")
	}
	if u.User != nil {
		return errors.New("must not carry credentials")
	}
	return nil
}

// urlSpaces refuses whitespace and control characters in a URL, naming
// where: a space an editor or a copy left at either end is stored as is,
// and every request then goes to a path ending in %20.
func urlSpaces(raw string) error {
	bad := func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }
	i := strings.IndexFunc(raw, bad)
	if i < 0 {
		return nil
	}
	r, _ := utf8.DecodeRuneInString(raw[i:])
	what := "a control character"
	switch {
	case r == ' ':
		what = "a space"
	case r == '\t':
		what = "a tab"
	case r == '\n' || r == '\r':
		what = "a line break"
	case unicode.IsSpace(r):
		what = "a space character"
	}
	switch {
	case strings.TrimFunc(raw, bad) == "":
		return errors.New("is only whitespace")
	case i == 0:
		return fmt.Errorf("starts with %s: remove it", what)
	case i >= len(strings.TrimRightFunc(raw, bad)):
		return fmt.Errorf("ends with %s: remove it", what)
	case r == ' ':
		return fmt.Errorf("contains a space (character %d of %d): remove it, or write it as %%20 where it belongs in the path or query",
			utf8.RuneCountInString(raw[:i])+1, utf8.RuneCountInString(raw))
	default:
		return fmt.Errorf("contains %s (character %d of %d): remove it", what, utf8.RuneCountInString(raw[:i])+1, utf8.RuneCountInString(raw))
	}
}

type parser struct {
	item     map[string]types.AttributeValue
	errs     []error
	warnings []string
	prefix   string // "tools.fetch_quote." inside nested maps
}

func (p *parser) fail(field, reason string) {
	p.errs = append(p.errs, &FieldError{Field: strings.TrimSuffix(p.prefix+field, "."), Reason: reason})
}

func typeName(v types.AttributeValue) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return "S (string)"
	case *types.AttributeValueMemberN:
		return "N (number)"
	case *types.AttributeValueMemberBOOL:
		return "BOOL"
	case *types.AttributeValueMemberM:
		return "M (map)"
	case *types.AttributeValueMemberL:
		return "L (list)"
	case *types.AttributeValueMemberSS:
		return "SS (string set)"
	case *types.AttributeValueMemberNS:
		return "NS (number set)"
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberB:
		return "B (binary)"
	default:
		return "another type"
	}
}

func (p *parser) str(name string, required bool) string {
	v, ok := p.item[name]
	if !ok {
		if required {
			p.fail(name, "missing (type S)")
		}
		return ""
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		p.fail(name, "must be of type S (string), got "+typeName(v))
		return ""
	}
	if required && s.Value == "" {
		p.fail(name, "must not be empty")
	}
	return s.Value
}

func (p *parser) number(name string) (float64, bool) {
	v, ok := p.item[name]
	if !ok {
		return 0, false
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		p.fail(name, "must be of type N (number), got "+typeName(v))
		return 0, false
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		p.fail(name, fmt.Sprintf("%q is not a number", clip.String(n.Value, 40)))
		return 0, false
	}
	return f, true
}

// boolean reads an optional BOOL attribute; absent means false.
func (p *parser) boolean(name string) bool {
	v, ok := p.item[name]
	if !ok {
		return false
	}
	b, ok := v.(*types.AttributeValueMemberBOOL)
	if !ok {
		p.fail(name, "must be of type BOOL (true or false), got "+typeName(v))
		return false
	}
	return b.Value
}

// cap reads max_concurrent_requests: absent or <= 0 means unlimited (0).
func (p *parser) cap(name string) int {
	f, ok := p.number(name)
	if ok && f <= 0 {
		p.warnings = append(p.warnings, fmt.Sprintf("%s is %v: 0 or less means no cap (unlimited), so it does not stop or limit calls",
			strings.TrimSuffix(p.prefix+name, "."), f))
	}
	if !ok || f <= 0 {
		return 0
	}
	if f != math.Trunc(f) {
		p.fail(name, fmt.Sprintf("must be a whole number, got %v", f))
		return 0
	}
	if f > MaxConcurrentLimit {
		p.fail(name, fmt.Sprintf("must be at most %d, got %v", MaxConcurrentLimit, f))
		return 0
	}
	return int(f)
}

// whole reads an optional whole number from lo to hi; absent means 0.
func (p *parser) whole(name string, lo, hi int) int {
	f, ok := p.number(name)
	if !ok {
		return 0
	}
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		p.fail(name, fmt.Sprintf("must be a whole number from %d to %d, got %v", lo, hi, f))
		return 0
	}
	return int(f)
}

// seconds reads a positive duration in (possibly fractional) seconds.
func (p *parser) seconds(name string, def, max time.Duration) time.Duration {
	f, ok := p.number(name)
	if !ok {
		return def
	}
	if f <= 0 {
		p.fail(name, fmt.Sprintf("must be a positive number of seconds, got %v", f))
		return def
	}
	d := time.Duration(f * float64(time.Second))
	if d > max {
		p.fail(name, fmt.Sprintf("must be at most %v seconds, got %v", max.Seconds(), f))
		return def
	}
	if d < time.Millisecond {
		p.fail(name, fmt.Sprintf("must be at least 0.001 seconds, got %v", f))
		return def
	}
	return d
}

// sub returns a parser for a nested map attribute, naming its fields
// "parent.field" in errors.
func (p *parser) sub(name string) (*parser, bool) {
	v, ok := p.item[name]
	if !ok {
		return nil, false
	}
	m, ok := v.(*types.AttributeValueMemberM)
	if !ok {
		p.fail(name, "must be of type M (map), got "+typeName(v))
		return nil, false
	}
	return &parser{item: m.Value, prefix: p.prefix + name + "."}, true
}

// merge takes a nested parser's errors.
func (p *parser) merge(sub *parser) {
	p.errs = append(p.errs, sub.errs...)
	p.warnings = append(p.warnings, sub.warnings...)
}

// unknown rejects fields of a nested map other than known.
func (p *parser) unknown(known ...string) {
	var names []string
	for name := range p.item {
		if !slices.Contains(known, name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		p.fail(clip.String(name, clip.Short), "unknown attribute (known: "+strings.Join(known, ", ")+")")
	}
}

// tools reads tools: {"<tool>": {"max_concurrent": N, "timeout": S}}.
func (p *parser) tools(name string) map[string]ToolLimits {
	tp, ok := p.sub(name)
	if !ok {
		return nil
	}
	defer p.merge(tp)
	if len(tp.item) > maxToolEntries {
		tp.fail("", fmt.Sprintf("more than %d tools", maxToolEntries))
		return nil
	}
	out := make(map[string]ToolLimits, len(tp.item))
	names := make([]string, 0, len(tp.item))
	for tool := range tp.item {
		names = append(names, tool)
	}
	sort.Strings(names)
	for _, tool := range names {
		if tool == "" || len(tool) > maxToolName || strings.ContainsFunc(tool, clip.IsEscaped) {
			tp.fail(clip.String(tool, clip.Short), fmt.Sprintf("is not a tool name (1 to %d characters, none a control or bidirectional one)", maxToolName))
			continue
		}
		one, ok := tp.sub(tool)
		if !ok {
			continue
		}
		one.unknown(fieldNames(toolFields)...)
		tl := ToolLimits{
			MaxConcurrent: one.cap("max_concurrent"),
			Timeout:       one.seconds("timeout", 0, MaxTimeout),
			RPMLimit:      one.whole("rpm_limit", 1, MaxRPMLimit),
			TaskSupport:   one.taskSupport("task_support"),
		}
		tp.merge(one)
		out[tool] = tl
	}
	return out
}

// taskSupport reads a tool's task_support: absent is "", any value but
// the three the extension names is refused (an empty one too: a typo must
// not silently mean "the upstream's").
func (p *parser) taskSupport(name string) string {
	if _, ok := p.item[name]; !ok {
		return ""
	}
	v := p.str(name, false)
	switch v {
	case TaskForbidden, TaskOptional, TaskRequired:
		return v
	}
	if _, isString := p.item[name].(*types.AttributeValueMemberS); isString {
		p.fail(name, fmt.Sprintf(`%q is not a task support: use "forbidden", "optional" or "required" (or leave it out for the upstream's own)`, clip.String(v, 40)))
	}
	return ""
}

// taskTTL reads task_ttl: whole seconds from 1 to MaxTaskTTL; absent means
// DefaultTaskTTL.
func (p *parser) taskTTL(name string) time.Duration {
	n := p.whole(name, 1, int(MaxTaskTTL/time.Second))
	if n == 0 {
		return DefaultTaskTTL
	}
	return time.Duration(n) * time.Second
}

// breaker reads breaker: {"failure_threshold": N, "recovery_timeout": S,
// "excluded_tools": [...]}.
func (p *parser) breaker(name string) *Breaker {
	bp, ok := p.sub(name)
	if !ok {
		return nil
	}
	defer p.merge(bp)
	bp.unknown(fieldNames(breakerFields)...)
	b := &Breaker{RecoveryTimeout: bp.seconds("recovery_timeout", 30*time.Second, MaxRecovery)}
	f, ok := bp.number("failure_threshold")
	switch {
	case !ok:
		if _, present := bp.item["failure_threshold"]; !present {
			bp.fail("failure_threshold", "missing (type N)")
		}
	case f < 1 || f != math.Trunc(f) || f > maxFailureLimit:
		bp.fail("failure_threshold", fmt.Sprintf("must be a whole number from 1 to %d, got %v", maxFailureLimit, f))
	default:
		b.FailureThreshold = int(f)
	}
	switch v := bp.item["excluded_tools"].(type) {
	case nil:
	case *types.AttributeValueMemberSS:
		b.ExcludedTools = slices.Clone(v.Value)
	case *types.AttributeValueMemberL:
		for _, e := range v.Value {
			s, ok := e.(*types.AttributeValueMemberS)
			if !ok {
				bp.fail("excluded_tools", "must list strings")
				break
			}
			b.ExcludedTools = append(b.ExcludedTools, s.Value)
		}
	default:
		bp.fail("excluded_tools", "must be of type L or SS (a list of tool names), got "+typeName(v))
	}
	sort.Strings(b.ExcludedTools)
	return b
}
