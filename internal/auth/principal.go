package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"log/slog"
	"slices"
	"strings"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// Kind is the kind of credential a principal presented.
type Kind string

// The kinds of principal.
const (
	// KindKey: an API key from the keys table.
	KindKey Kind = "key"
	// KindOAuth: an OAuth access token from the configured issuer.
	KindOAuth Kind = "oauth"
	// KindIAM: the IAM caller of an AWS_IAM Function URL, without a key.
	KindIAM Kind = "iam"
)

// MaxIDLen bounds Principal.ID, so that it fits a lease's holder label.
const MaxIDLen = 32

// idHashLen is how many hex characters of a hash a principal's ID keeps.
const idHashLen = 12

// Principal is the caller of one request: who it is, for logs, metrics and
// leases, and what it may call.
type Principal struct {
	// Kind is the credential it presented.
	Kind Kind
	// ID is short (at most MaxIDLen bytes), stable and safe to log: "key:"
	// and the first 12 hex characters of the key's hash; "oauth:" and 12 of
	// the SHA-256 of the token's issuer and subject; "iam:" and 12 of the
	// SHA-256 of the caller's ARN.
	ID string
	// StateKey tells this principal apart from every other at full
	// strength (the whole hash, where ID keeps 12 characters): what keeps
	// state made for it, such as upstream sessions or a sealed request
	// state, its own. Never logged.
	StateKey string
	// Subject is the token's subject (oauth, at most 64 bytes), or the
	// caller's ARN (iam, at most 256 bytes). Empty for keys.
	Subject string
	// ClientID is the OAuth client the token was issued to (client_id or
	// azp), if the token says.
	ClientID string
	// IAMCaller is the ARN Lambda verified when the Function URL uses
	// AWS_IAM, whatever credential the request also carried.
	IAMCaller string
	// Servers are the server ids it may call, sorted; "*" means all.
	Servers []string
	// MaxParallel caps its calls in flight across every server,
	// fleet-wide (a key's max_parallel_requests); 0 = none. RPMLimit is
	// its tool calls a minute across every server (a key's rpm_limit).
	MaxParallel, RPMLimit int
	// Tools, when not nil, are the only tools it may call: entries
	// "<server_id>/<glob>" ("*" as server id for any server; glob as
	// registry.MatchGlob: * and ?); empty but not nil means none. Nil means every tool of
	// the servers it may call.
	Tools []string
}

// Allows reports whether p may call serverID.
func (p *Principal) Allows(serverID string) bool {
	return p.AllowsAll() || slices.Contains(p.Servers, serverID)
}

// AllowsAll reports whether p may call every server.
func (p *Principal) AllowsAll() bool { return slices.Contains(p.Servers, AllServers) }

// AllowsTool reports whether p may call tool on serverID: the server must
// be allowed and, when p has tool grants, one of them must match.
func (p *Principal) AllowsTool(serverID, tool string) bool {
	if !p.Allows(serverID) {
		return false
	}
	if p.Tools == nil {
		return true
	}
	for _, g := range p.Tools {
		srv, glob, ok := strings.Cut(g, "/")
		if !ok || (srv != AllServers && srv != serverID) {
			continue
		}
		if registry.MatchGlob(glob, tool) {
			return true
		}
	}
	return false
}

// AllowsAllTools reports whether p may call every tool of serverID: the
// server is allowed and p has no tool grants, or one that covers the whole
// server ("<serverID>/*" or "*/*"). Only such a principal is relayed what
// tool grants cannot narrow: a server's resources, prompts and
// completions.
func (p *Principal) AllowsAllTools(serverID string) bool {
	if !p.Allows(serverID) {
		return false
	}
	if p.Tools == nil {
		return true
	}
	return slices.Contains(p.Tools, serverID+"/*") || slices.Contains(p.Tools, AllServers+"/*")
}

// LogAttrs are what a log record says of p: its ID as "principal" and,
// where known, the token's "sub" and "client_id" and the "iam_caller".
// Never a key or a token.
func (p *Principal) LogAttrs() []any {
	if p == nil {
		return nil
	}
	attrs := []any{slog.String("principal", p.ID)}
	if p.Kind == KindOAuth {
		attrs = append(attrs, slog.String("sub", p.Subject))
		if p.ClientID != "" {
			attrs = append(attrs, slog.String("client_id", p.ClientID))
		}
	}
	if p.IAMCaller != "" {
		attrs = append(attrs, slog.String("iam_caller", p.IAMCaller))
	}
	return attrs
}

// principalID is kind, ':' and a short hash of parts.
func principalID(kind Kind, parts ...string) string {
	return stateKey(kind, parts...)[:len(kind)+1+idHashLen]
}

// stateKey is the full-length form of principalID: kind, ":" and the
// whole hex SHA-256 of parts.
func stateKey(kind Kind, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return string(kind) + ":" + hex.EncodeToString(h.Sum(nil))
}

// clean makes s safe and short for a log or a label: escaped
// (clip.Escape), at most n bytes.
func clean(s string, n int) string {
	return clip.String(clip.Escape(s), n)
}

// ValidToolGrant checks one "<server_id>/<tool-glob>" grant, as an admin
// writes it into a key's tools.
func ValidToolGrant(g string) error {
	id, pattern, ok := strings.Cut(g, "/")
	if !ok {
		return fmt.Errorf("tool grant %q is not <server_id>/<tool-glob>", clean(g, 80))
	}
	if id != AllServers {
		if err := registry.ValidateID(id); err != nil {
			return fmt.Errorf("tool grant %q: %w", clean(g, 80), err)
		}
	}
	if err := registry.ValidPattern(pattern); err != nil {
		return fmt.Errorf("tool grant %q: the part after / %w", clean(g, 80), err)
	}
	return nil
}
