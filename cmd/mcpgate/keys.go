package main

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
)

var keysCreateCmd = &command{
	name:    "keys create",
	args:    "--servers ID[,ID...|*] [--tools ID/GLOB,...] [--name LABEL] [--max-parallel N] [--rpm-limit N]",
	summary: "create an API key and print it once",
	help: `
Creates a random API key allowed to call the listed servers ("*" for all)
and prints it on standard output, alone on its line, so a script can capture
it. Only the key's SHA-256 is stored: the key cannot be shown again. Agents
send it as "Authorization: Bearer KEY" or "X-Api-Key: KEY" (LiteLLM clients:
"x-litellm-api-key: Bearer KEY").

Flags:
  --servers ID,ID,...   server ids the key may call, or * for every server (required)
  --tools ID/GLOB,...   if given, the only tools the key may see and call, as
                        <server_id>/<tool-glob> (* as server_id: any server;
                        * and ? in the glob), within each server's own
                        allowed_tools and disallowed_tools; default: every tool
  --name LABEL          a label for people, shown by keys list
  --max-parallel N      the key's calls in flight at once, across every server
                        and the whole fleet (max_parallel_requests); past it a
                        call is refused with AT_CAPACITY; default: no limit
  --rpm-limit N         the key's tool calls a minute, across every server and
                        the whole fleet (rpm_limit): a burst of N, then N/60 a
                        second; past it RATE_LIMITED; default: no limit

Example:
  KEY=$(mcpgate keys create --servers github,search --name ci-agent)
`,
	run: runKeysCreate,
}

var keysListCmd = &command{
	name:    "keys list",
	summary: "list API keys (hash prefix, name, servers, tools; never a key)",
	help: `
Lists every key: the first 12 characters of its hash (what keys revoke
takes), its name, the servers it may call, the tools it is limited to ("*"
for every tool), its max_parallel_requests and when it was created; then
every key whose item the gateway refuses (an unknown attribute, a limit
out of range), with why. Keys themselves are never stored, so they cannot
be listed.
`,
	run: runKeysList,
}

var keysRevokeCmd = &command{
	name:    "keys revoke",
	args:    "HASH_OR_PREFIX",
	summary: "delete an API key",
	help: `
Deletes the key whose hash is, or starts with, HASH_OR_PREFIX (at least 8 hex
characters, as keys list shows). A prefix matching several keys is refused.
Gateway instances stop accepting the key within their key cache time
(5 seconds by default).
`,
	run: runKeysRevoke,
}

const (
	shownHashLen = 12
	minPrefixLen = 8
	fullHashLen  = 64
)

func runKeysCreate(c *cli, args []string) error {
	fs := c.newFlags()
	serversFlag := fs.String("servers", "", "")
	toolsFlag := fs.String("tools", "", "")
	name := fs.String("name", "", "")
	maxParallel := fs.Int("max-parallel", 0, "")
	rpmLimit := fs.Int("rpm-limit", 0, "")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	servers, err := parseServerList(*serversFlag)
	if err != nil {
		return err
	}
	tools, err := parseToolList(*toolsFlag, servers)
	if err != nil {
		return err
	}
	if *maxParallel < 0 || *maxParallel > auth.MaxParallelLimit {
		return usagef("--max-parallel %d: use 1 to %d (or leave it out for no limit)", *maxParallel, auth.MaxParallelLimit)
	}
	if *rpmLimit < 0 || *rpmLimit > auth.MaxRPMLimit {
		return usagef("--rpm-limit %d: use 1 to %d (or leave it out for no limit)", *rpmLimit, auth.MaxRPMLimit)
	}
	if err := c.open(); err != nil {
		return err
	}
	key := auth.NewKey()
	hash := auth.HashKey(key)
	item := auth.KeyItem(&auth.Key{Hash: hash, Name: *name, Servers: servers, Tools: tools, MaxParallel: *maxParallel, RPMLimit: *rpmLimit}, time.Now())
	_, err = c.db.PutItem(c.ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(c.tables.Keys),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(" + store.KeyHashAttr + ")"),
	})
	if err != nil {
		return dbErr("store key", err)
	}
	for _, id := range servers {
		if id == auth.AllServers {
			continue
		}
		if it, err := c.serverItem(id); err == nil && it == nil {
			fmt.Fprintf(c.stderr, "warning: server %q is not in the servers table (yet)\n", id)
		}
	}
	fmt.Fprintf(c.stderr, "created key %s %s for servers: %s\n", hash[:shownHashLen], keyLabel(*name), strings.Join(servers, ", "))
	if len(tools) > 0 {
		fmt.Fprintf(c.stderr, "only tools: %s\n", strings.Join(tools, ", "))
	}
	fmt.Fprintln(c.stdout, key)
	fmt.Fprintln(c.stderr, "This is the only time the key is shown: store it now. It cannot be shown again (only its SHA-256 is kept).")
	return nil
}

// parseServerList reads --servers: comma-separated server ids or "*".
func parseServerList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, usagef("--servers is required: the server ids the key may call, comma-separated, or * for all")
	}
	var ids []string
	for _, id := range strings.Split(s, ",") {
		id = strings.TrimSpace(id)
		if id != auth.AllServers {
			if err := registry.ValidateID(id); err != nil {
				return nil, usagef("--servers: %v", err)
			}
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// parseToolList reads --tools: comma-separated "<server_id>/<glob>", each
// naming a server of servers (or "*").
func parseToolList(s string, servers []string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for _, g := range strings.Split(s, ",") {
		g = strings.TrimSpace(g)
		if err := auth.ValidToolGrant(g); err != nil {
			return nil, usagef("--tools: %v", err)
		}
		if id, _, _ := strings.Cut(g, "/"); id != auth.AllServers {
			if !slices.Contains(servers, id) && !slices.Contains(servers, auth.AllServers) {
				return nil, usagef("--tools: %q names server %q, which --servers does not grant", g, id)
			}
		}
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out, nil
}

func runKeysList(c *cli, args []string) error {
	if err := c.noArgs(args); err != nil {
		return err
	}
	if err := c.open(); err != nil {
		return err
	}
	items, err := c.scan(c.tables.Keys)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		fmt.Fprintln(c.stdout, "no keys (create one with: mcpgate keys create --servers ID)")
		return nil
	}
	slices.SortFunc(items, func(a, b map[string]types.AttributeValue) int {
		return cmp.Or(strings.Compare(rawAttr(a, auth.AttrCreated), rawAttr(b, auth.AttrCreated)),
			strings.Compare(rawAttr(a, store.KeyHashAttr), rawAttr(b, store.KeyHashAttr)))
	})
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HASH\tNAME\tSERVERS\tTOOLS\tMAX PARALLEL\tRPM\tCREATED")
	var invalid []string
	for _, item := range items {
		k, err := auth.ParseItem(item)
		if err != nil {
			invalid = append(invalid, shortHash(k.Hash)+": "+oneLine(strings.TrimPrefix(err.Error(), "auth: ")))
		}
		servers := strings.Join(k.Servers, ",")
		if servers == "" {
			servers = "(none)"
		}
		tools := strings.Join(k.Tools, ",")
		switch {
		case k.Tools == nil:
			tools = "*"
		case len(k.Tools) == 0:
			tools = "(none)"
		}
		parallel, rpm := "-", "-"
		if k.MaxParallel > 0 {
			parallel = strconv.Itoa(k.MaxParallel)
		}
		if k.RPMLimit > 0 {
			rpm = strconv.Itoa(k.RPMLimit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortHash(k.Hash), orDash(k.Name), orDash(servers), orDash(tools), parallel, rpm, orDash(rawAttr(item, auth.AttrCreated)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range invalid {
		fmt.Fprintf(c.stdout, "refused until fixed: %s\n", line)
	}
	return nil
}

func runKeysRevoke(c *cli, args []string) error {
	arg, err := c.oneArg(args, "HASH_OR_PREFIX")
	if err != nil {
		return err
	}
	prefix := strings.ToLower(arg)
	if len(prefix) < minPrefixLen || len(prefix) > fullHashLen || strings.Trim(prefix, "0123456789abcdef") != "" {
		return usagef("%q is not a key hash: give at least %d hex characters of it, as keys list shows", arg, minPrefixLen)
	}
	if err := c.open(); err != nil {
		return err
	}
	items, err := c.scan(c.tables.Keys)
	if err != nil {
		return err
	}
	var matches []*auth.Key
	for _, item := range items {
		if k, _ := auth.ParseItem(item); strings.HasPrefix(k.Hash, prefix) {
			matches = append(matches, k)
		}
	}
	switch len(matches) {
	case 0:
		return fmt.Errorf("no key hash starts with %s", prefix)
	case 1:
	default:
		var shown []string
		for _, k := range matches {
			shown = append(shown, shortHash(k.Hash))
		}
		return fmt.Errorf("prefix %s is ambiguous: it matches %d keys (%s); give more characters", prefix, len(matches), strings.Join(shown, ", "))
	}
	k := matches[0]
	_, err = c.db.DeleteItem(c.ctx, &dynamodb.DeleteItemInput{
		TableName:           aws.String(c.tables.Keys),
		Key:                 map[string]types.AttributeValue{store.KeyHashAttr: &types.AttributeValueMemberS{Value: k.Hash}},
		ConditionExpression: aws.String("attribute_exists(" + store.KeyHashAttr + ")"),
	})
	if conditionFailed(err) {
		return fmt.Errorf("key %s was revoked meanwhile", shortHash(k.Hash))
	}
	if err != nil {
		return dbErr("revoke key "+shortHash(k.Hash), err)
	}
	fmt.Fprintf(c.stdout, "revoked key %s %s; gateways stop accepting it within their key cache time (default %v)\n",
		shortHash(k.Hash), keyLabel(k.Name), auth.DefaultCacheTTL)
	return nil
}

// shortHash is the start of a key's hash as the CLI shows it, escaped
// (clip.Escape) should an item hold something else.
func shortHash(h string) string { return clip.Escape(h[:min(len(h), shownHashLen)]) }

// keyLabel shows a key's name for people.
func keyLabel(s string) string {
	if s == "" {
		return "(no name)"
	}
	return fmt.Sprintf("%q", s)
}
