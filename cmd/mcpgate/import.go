package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.yaml.in/yaml/v3"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
)

var importLiteLLMCmd = &command{
	name:    "import litellm",
	args:    "FILE [--dry-run] [--rename] [--overwrite]",
	summary: "import the mcp_servers of a LiteLLM config.yaml",
	help: `
Reads a LiteLLM proxy config.yaml and turns each entry of its mcp_servers
mapping (server name: settings) into a server item. The server name becomes
the server_id, unless the server has an alias (its own alias setting, or
the first one litellm_settings.mcp_aliases gives it): LiteLLM names the
server's tools after the alias, so the alias becomes the server_id and
agents keep the tool names they know ("<alias>-<tool>" on /mcp).

These settings carry over: url, transport ("http" or "sse"), timeout
(seconds), max_concurrent_requests (numbers may be written as strings, as
"3") and description (also taken from mcp_info.description). A server with
a spec_path (tools made from an OpenAPI document) becomes an openapi
server: spec_path, or spec_url when it is an http(s) URL, with url as the
API's base URL; a spec_path that is a local absolute path is imported with
a warning, since under Lambda the gateway reads only its deployment
package.

Upstream identity carries over too: auth_type (bearer_token, api_key, basic,
authorization, token, oauth2 with client_id/client_secret/token_url/scopes,
aws_sigv4 with aws_service_name/aws_region_name; none is nothing to map)
becomes auth, static_headers stay static_headers, extra_headers become
forward_headers, allowed_tools and disallowed_tools stay. A credential's
value is never written to DynamoDB: authentication_token (or auth_value,
client_secret) given as os.environ/X becomes env:X, for local development,
with a note to move it to Secrets Manager; a literal becomes a reference to
the secret mcpgate/<server_id>, and a ready aws secretsmanager create-secret
command is printed with a placeholder for the value. Credential headers
(Authorization, Cookie, X-Api-Key, ...) are never static or forwarded.

Every other setting (headers, command, args, env, access_groups, ...) is
listed by name for each server, never with its value, and is not imported.

LiteLLM keeps its keys in its database, not in this file: the limits and
team_id that litellm_settings.default_key_generate_params gives new keys are
printed as the mcpgate keys create flags that give mcpgate's keys the same
(--rpm-limit, --max-parallel, --team; a key's team_id is its team).

Servers are skipped, with the reason, when: their transport is stdio (a
local process a serverless gateway cannot run); their name (or alias) is
not a valid server_id (a valid one is suggested: rerun with --rename to use
it; the report then says how the tool names agents see change); their
result fails the gateway's checks; or a server with that id exists already
(rerun with --overwrite to replace it). The exit status is 1 when anything
was skipped or not imported.

Flags:
  --dry-run     print the items that would be written; write nothing (needs no AWS access)
  --rename      import servers whose name is not a valid server_id under the suggested id
  --overwrite   replace servers that exist already
`,
	run: runImportLiteLLM,
}

// liteLLMMapped are the LiteLLM server settings that mean the same as the
// server item attribute of that name.
var liteLLMMapped = []string{"url", "transport", "timeout", "max_concurrent_requests", "description"}

// lambdaTaskRoot is where Lambda unpacks the function's package, the only
// files the gateway can read there.
const lambdaTaskRoot = "/var/task/"

// planned is what import makes of one LiteLLM server.
type planned struct {
	name string                          // the LiteLLM server name
	id   string                          // the server_id to write
	item map[string]types.AttributeValue // nil when skipped
	// skipped says why the server is not imported.
	skipped string
	// unmapped lists the settings not carried over, by name.
	unmapped []string
	// notes say what the import changed, such as tool names, and what an
	// admin must do before the server works, e.g. create the secret its
	// auth refers to; warnings what will likely not work as imported.
	// Neither ever holds a value.
	notes, warnings []string
}

func runImportLiteLLM(c *cli, args []string) error {
	fs := c.newFlags()
	dryRun := fs.Bool("dry-run", false, "")
	rename := fs.Bool("rename", false, "")
	overwrite := fs.Bool("overwrite", false, "")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one FILE (a LiteLLM config.yaml, or - for standard input), got %d arguments", len(pos))
	}
	doc, err := c.readFile(pos[0])
	if err != nil {
		return err
	}
	plans, cfgNotes, err := planLiteLLM(doc, *rename)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	if !*dryRun {
		if err := c.open(); err != nil {
			return err
		}
	}
	imported, unmapped, warnings := 0, 0, 0
	for _, p := range plans {
		if p.item != nil && !*dryRun {
			if err := c.putImported(p, *overwrite); err != nil {
				return err
			}
		}
		switch {
		case p.item == nil:
			fmt.Fprintf(c.stdout, "%s: SKIPPED: %s\n", p.name, p.skipped)
		case *dryRun:
			imported++
			fmt.Fprintf(c.stdout, "%s: would write %s\n", p.name, compactJSON(registry.ItemToJSON(p.item)))
		default:
			imported++
			fmt.Fprintf(c.stdout, "%s: imported as server %q\n", p.name, p.id)
		}
		if len(p.unmapped) > 0 {
			unmapped += len(p.unmapped)
			fmt.Fprintf(c.stdout, "  not imported (values not shown): %s\n", strings.Join(p.unmapped, ", "))
		}
		for _, n := range p.notes {
			fmt.Fprintf(c.stdout, "  note: %s\n", n)
		}
		for _, w := range p.warnings {
			warnings++
			fmt.Fprintf(c.stdout, "  warning: %s\n", w)
		}
	}
	for _, n := range cfgNotes {
		fmt.Fprintln(c.stdout, n)
	}
	verb := "imported"
	if *dryRun {
		verb = "dry run, nothing written: would import"
	}
	summary := fmt.Sprintf("%s %d of %d servers; %d skipped; %d settings not imported", verb, imported, len(plans), len(plans)-imported, unmapped)
	if warnings > 0 {
		summary += fmt.Sprintf("; %d warnings", warnings)
	}
	fmt.Fprintln(c.stdout, summary)
	if imported < len(plans) || unmapped > 0 {
		return fmt.Errorf("import incomplete: %d of %d servers skipped, %d settings not imported (listed above)", len(plans)-imported, len(plans), unmapped)
	}
	return nil
}

// putImported writes p's item; unless overwrite, only if the id is free.
// An id that is taken marks p skipped.
func (c *cli) putImported(p *planned, overwrite bool) error {
	in := &dynamodb.PutItemInput{TableName: aws.String(c.tables.Servers), Item: p.item}
	if !overwrite {
		in.ConditionExpression = aws.String("attribute_not_exists(" + store.ServerIDAttr + ")")
	}
	_, err := c.db.PutItem(c.ctx, in)
	if conditionFailed(err) {
		p.item = nil
		p.skipped = fmt.Sprintf("server %q exists already; not replaced (rerun with --overwrite to replace it)", p.id)
		return nil
	}
	if err != nil {
		return dbErr("put server "+p.id, err)
	}
	if overwrite {
		// A replaced server's tool list may have changed with it.
		return c.invalidateTools(p.id)
	}
	return nil
}

// planLiteLLM maps the mcp_servers of a LiteLLM config, in file order. The
// notes are about litellm_settings.mcp_aliases entries that name no server.
func planLiteLLM(doc []byte, rename bool) ([]*planned, []string, error) {
	var cfg struct {
		MCPServers yaml.Node `yaml:"mcp_servers"`
		Settings   struct {
			Aliases yaml.Node `yaml:"mcp_aliases"`
			// The limits LiteLLM gives the keys it generates.
			KeyDefaults struct {
				RPMLimit    int    `yaml:"rpm_limit"`
				MaxParallel int    `yaml:"max_parallel_requests"`
				TeamID      string `yaml:"team_id"`
			} `yaml:"default_key_generate_params"`
		} `yaml:"litellm_settings"`
		General struct {
			MaxParallel int `yaml:"max_parallel_requests"`
		} `yaml:"general_settings"`
	}
	if err := yaml.Unmarshal(doc, &cfg); err != nil {
		return nil, nil, fmt.Errorf("not a valid YAML config: %w", err)
	}
	n := &cfg.MCPServers
	switch {
	case n.Kind == 0:
		return nil, nil, errors.New("no mcp_servers section")
	case n.Kind != yaml.MappingNode:
		return nil, nil, fmt.Errorf("line %d: mcp_servers must map server names to their settings", n.Line)
	case len(n.Content) == 0:
		return nil, nil, errors.New("mcp_servers is empty")
	}
	aliases, notes, err := liteLLMAliases(&cfg.Settings.Aliases)
	if err != nil {
		return nil, nil, err
	}
	var plans []*planned
	taken := map[string]string{} // server_id → LiteLLM name
	names := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name := n.Content[i].Value
		names[name] = true
		var settings map[string]any
		if err := n.Content[i+1].Decode(&settings); err != nil || settings == nil {
			plans = append(plans, &planned{name: name, skipped: fmt.Sprintf("line %d: settings are not a mapping", n.Content[i+1].Line)})
			continue
		}
		p := planServer(name, settings, aliases[name], rename)
		if other, ok := taken[p.id]; ok && p.item != nil {
			p.item = nil
			p.skipped = fmt.Sprintf("server_id %q is already used by %q in this file", p.id, other)
		}
		if p.item != nil {
			taken[p.id] = name
		}
		plans = append(plans, p)
	}
	for _, a := range aliases.unknown(names) {
		notes = append(notes, fmt.Sprintf("alias %q names %q, which is not in mcp_servers; ignored", a.alias, a.server))
	}
	for i, n := range notes {
		notes[i] = "mcp_aliases: " + n
	}
	// LiteLLM keeps its keys in its database, not in this file; the limits
	// and the team it gives new keys carry over to the keys mcpgate
	// creates.
	kd := cfg.Settings.KeyDefaults
	parallel := max(kd.MaxParallel, cfg.General.MaxParallel)
	team := kd.TeamID
	if team != "" && auth.ValidateTeam(team) != nil {
		notes = append(notes, fmt.Sprintf("keys: default_key_generate_params.team_id %q is not a team name mcpgate takes (%v); not carried over", clip.String(team, clip.Short), auth.ValidateTeam(team)))
		team = ""
	}
	if kd.RPMLimit > 0 || parallel > 0 || team != "" {
		flags := ""
		if kd.RPMLimit > 0 {
			flags += fmt.Sprintf(" --rpm-limit %d", kd.RPMLimit)
		}
		if parallel > 0 {
			flags += fmt.Sprintf(" --max-parallel %d", parallel)
		}
		if team != "" {
			flags += " --team " + shellQuote(team)
		}
		notes = append(notes, "keys: LiteLLM's keys are in its database, not in this file; to give mcpgate's keys the limits and team it gives new ones: mcpgate keys create --servers ID,..."+flags)
	}
	return plans, notes, nil
}

// alias is one litellm_settings.mcp_aliases entry: alias → server name.
type alias struct{ alias, server string }

// aliasMap holds, per server name, its aliases in file order.
type aliasMap map[string][]string

// unknown returns the aliases of servers not in names.
func (m aliasMap) unknown(names map[string]bool) []alias {
	var out []alias
	for _, server := range slices.Sorted(maps.Keys(m)) {
		if !names[server] {
			for _, a := range m[server] {
				out = append(out, alias{a, server})
			}
		}
	}
	return out
}

// liteLLMAliases reads litellm_settings.mcp_aliases (alias: server name).
func liteLLMAliases(n *yaml.Node) (aliasMap, []string, error) {
	m := aliasMap{}
	if n.Kind == 0 {
		return m, nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("line %d: litellm_settings.mcp_aliases must map aliases to server names", n.Line)
	}
	var notes []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		a, server := n.Content[i].Value, n.Content[i+1]
		if server.Kind != yaml.ScalarNode {
			notes = append(notes, fmt.Sprintf("alias %q (line %d) does not name a server; ignored", a, server.Line))
			continue
		}
		m[server.Value] = append(m[server.Value], a)
	}
	return m, notes, nil
}

// planServer maps one LiteLLM server's settings onto a server item and
// checks the item as the gateway does. aliases are the server's entries in
// litellm_settings.mcp_aliases.
func planServer(name string, settings map[string]any, aliases []string, rename bool) *planned {
	p := &planned{name: name, id: name}
	// LiteLLM names a server's tools "<prefix>-<tool>", the prefix being
	// its alias (its own, else its first in mcp_aliases) or its name.
	prefix, from := name, ""
	if a, ok := settings["alias"].(string); ok && a != "" && !isEnvRef(a) {
		prefix, from = a, "its alias setting"
		for _, other := range aliases {
			p.notes = append(p.notes, fmt.Sprintf("mcp_aliases entry %q not used: the server's own alias setting wins, as in LiteLLM", other))
		}
	} else if len(aliases) > 0 {
		prefix, from = aliases[0], "mcp_aliases"
		for _, other := range aliases[1:] {
			p.notes = append(p.notes, fmt.Sprintf("mcp_aliases entry %q not used: only a server's first alias is, as in LiteLLM", other))
		}
	}
	p.id = prefix
	if err := registry.ValidateID(prefix); err != nil {
		suggested := sanitizeID(prefix)
		change := fmt.Sprintf("agents then see its tools on /mcp as %s-<tool> instead of %s-<tool>", suggested, prefix)
		if rename {
			p.id = suggested
			p.notes = append(p.notes, "renamed: "+change+"; update agents that call them by name")
		} else {
			p.skipped = fmt.Sprintf("%v; suggested id %q (rerun with --rename to import it under that id; %s)", err, suggested, change)
		}
	} else if from != "" {
		p.notes = append(p.notes, fmt.Sprintf("imported under its alias %q (from %s): its tools keep the names agents know, %s-<tool>", prefix, from, prefix))
	}
	doc := map[string]any{store.ServerIDAttr: p.id}
	for _, key := range slices.Sorted(maps.Keys(settings)) {
		v := settings[key]
		switch {
		case slices.Contains(liteLLMIdentity, key):
			// mapIdentity, below.
		case key == "mcp_info":
			p.mapInfo(v, doc, settings)
		case key == "alias" && from == "its alias setting":
		case key == "spec_path" && isEnvRef(v):
			p.unmapped = append(p.unmapped, key+" (an os.environ/ reference; not resolved)")
		case key == "spec_path":
			// LiteLLM makes this server's tools from an OpenAPI document;
			// its url is the API's base URL.
			doc["transport"] = string(registry.TransportOpenAPI)
			path, _ := v.(string)
			switch {
			case strings.HasPrefix(path, "http://") || strings.HasPrefix(path, "https://"):
				doc["spec_url"] = path
			case (filepath.IsAbs(path) && !strings.HasPrefix(path, lambdaTaskRoot)) || strings.HasPrefix(path, "~"):
				doc["spec_path"] = v
				p.warnings = append(p.warnings, fmt.Sprintf("spec_path %q is a file on this machine: under Lambda the gateway reads only its deployment package (%s); add the document to the package and give its relative path, or serve it and set spec_url", clip.String(path, clip.Message), lambdaTaskRoot))
			default:
				doc["spec_path"] = v
			}
		case !slices.Contains(liteLLMMapped, key):
			p.unmapped = append(p.unmapped, key)
		case isEnvRef(v):
			p.unmapped = append(p.unmapped, key+" (an os.environ/ reference; not resolved)")
		case key == "transport" && v == "stdio":
			if p.skipped == "" {
				p.skipped = "transport stdio runs a local command, which a serverless gateway cannot serve; run it behind an HTTP MCP server and import that url"
			}
		case key == "transport" && settings["spec_path"] != nil:
			// spec_path decides: an openapi server.
		case registry.AttributeType(key) == "N":
			// YAML often quotes numbers ("3"): take them as numbers.
			num, err := liteLLMNumber(v)
			if err != nil {
				if p.skipped == "" {
					p.skipped = fmt.Sprintf("%s: %v", key, err)
				}
				continue
			}
			doc[key] = num
		default:
			doc[key] = v
		}
	}
	p.mapIdentity(settings, doc)
	if p.skipped != "" {
		return p
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		p.skipped = "settings cannot be converted: " + err.Error()
		return p
	}
	item, _, err := registry.ItemFromJSON(raw)
	if err != nil {
		p.skipped = "invalid as a server: " + oneLine(err.Error())
		return p
	}
	p.item = item
	return p
}

// liteLLMNumber reads a number setting, written as a number or a string.
func liteLLMNumber(v any) (json.Number, error) {
	switch v := v.(type) {
	case int, int64, uint64, float64:
		return json.Number(fmt.Sprint(v)), nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return "", fmt.Errorf("%q is not a number", clip.String(v, 40))
		}
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64)), nil
	default:
		return "", fmt.Errorf("must be a number, not %T", v)
	}
}

// mapInfo takes description from LiteLLM's mcp_info when the server has
// none of its own, and lists the rest of mcp_info as not imported.
func (p *planned) mapInfo(v any, doc, settings map[string]any) {
	info, ok := v.(map[string]any)
	if !ok {
		p.unmapped = append(p.unmapped, "mcp_info")
		return
	}
	for _, k := range slices.Sorted(maps.Keys(info)) {
		_, own := settings["description"]
		if k == "description" && !own && !isEnvRef(info[k]) {
			doc["description"] = info[k]
			continue
		}
		p.unmapped = append(p.unmapped, "mcp_info."+k)
	}
}

// isEnvRef reports whether v is a LiteLLM environment reference, which
// LiteLLM resolves at start-up from its own environment.
func isEnvRef(v any) bool {
	s, ok := v.(string)
	return ok && strings.HasPrefix(s, "os.environ/")
}

// sanitizeID turns a name into a valid server_id: every character other
// than an ASCII letter, digit, '_' or '.' becomes '_'.
func sanitizeID(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	id := b.String()
	if id == "" || id[0] == '.' {
		id = "_" + id
	}
	return id[:min(len(id), 64)]
}
