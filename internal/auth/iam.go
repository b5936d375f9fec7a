package auth

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// maxARNLen bounds the IAM caller ARN a principal carries into logs.
const maxARNLen = 256

// IAMGrant grants servers to the AWS_IAM callers whose ARN matches Pattern.
type IAMGrant struct {
	// Pattern is an ARN, or a path.Match pattern of ARNs: "*" matches
	// within one '/'-separated part, so ".../assumed-role/agents/*" matches
	// every session of the role agents.
	Pattern string
	// Servers are the server ids granted; "*" means all.
	Servers []string
}

// ParseIAMGrants reads grants written as "<arn-pattern>=<server_id>[,...]",
// separated by ';' or new lines ("*" as the server list grants all).
// Role session names may contain '=' and ',', so an entry splits at its
// last '='.
func ParseIAMGrants(s string) ([]IAMGrant, error) {
	var out []IAMGrant
	for entry := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ';' || r == '\n' }) {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		i := strings.LastIndexByte(entry, '=')
		if i < 0 {
			return nil, fmt.Errorf("IAM grant %q: want <arn-pattern>=<server_id>[,<server_id>...]", entry)
		}
		g := IAMGrant{Pattern: strings.TrimSpace(entry[:i])}
		if !strings.HasPrefix(g.Pattern, "arn:") {
			return nil, fmt.Errorf("IAM grant %q: the pattern must be an ARN (arn:...)", entry)
		}
		if _, err := path.Match(g.Pattern, ""); err != nil {
			return nil, fmt.Errorf("IAM grant %q: bad pattern: %w", entry, err)
		}
		for id := range strings.SplitSeq(entry[i+1:], ",") {
			id = strings.TrimSpace(id)
			if id != AllServers && registry.ValidateID(id) != nil {
				return nil, fmt.Errorf("IAM grant %q: %q is not a server id", entry, id)
			}
			g.Servers = append(g.Servers, id)
		}
		out = append(out, g)
	}
	return out, nil
}

// iamPrincipal is the principal of an IAM caller granted servers by
// grants, or nil if no grant matches arn.
func iamPrincipal(grants []IAMGrant, arn string) *Principal {
	var servers []string
	for _, g := range grants {
		if ok, _ := path.Match(g.Pattern, arn); ok {
			servers = append(servers, g.Servers...)
		}
	}
	if len(servers) == 0 {
		return nil
	}
	slices.Sort(servers)
	return &Principal{
		Kind:     KindIAM,
		ID:       principalID(KindIAM, arn),
		StateKey: stateKey(KindIAM, arn),
		Subject:  clean(arn, maxARNLen),
		Servers:  slices.Compact(servers),
	}
}
