package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.yaml.in/yaml/v3"

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
the server_id. These settings carry over: url, transport ("http" or "sse"),
timeout (seconds), max_concurrent_requests and description (also taken from
mcp_info.description). A server with a spec_path (tools made from an OpenAPI
document) becomes an openapi server: spec_path, or spec_url when it is an
http(s) URL, with url as the API's base URL. Numbers may be written as
strings ("3").

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

Servers are skipped, with the reason, when: their transport is stdio (a
local process a serverless gateway cannot run); their name is not a valid
server_id (a valid one is suggested: rerun with --rename to use it); their
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

// planned is what import makes of one LiteLLM server.
type planned struct {
	name string                          // the LiteLLM server name
	id   string                          // the server_id to write
	item map[string]types.AttributeValue // nil when skipped
	// skipped says why the server is not imported.
	skipped string
	// unmapped lists the settings not carried over, by name.
	unmapped []string
	// notes say what an admin must do before the server works, e.g.
	// create the secret its auth refers to. They never hold a value.
	notes []string
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
	plans, err := planLiteLLM(doc, *rename)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	if !*dryRun {
		if err := c.open(); err != nil {
			return err
		}
	}
	imported, unmapped := 0, 0
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
		if p.item != nil {
			for _, n := range p.notes {
				fmt.Fprintf(c.stdout, "  note: %s\n", n)
			}
		}
	}
	verb := "imported"
	if *dryRun {
		verb = "dry run, nothing written: would import"
	}
	fmt.Fprintf(c.stdout, "%s %d of %d servers; %d skipped; %d settings not imported\n", verb, imported, len(plans), len(plans)-imported, unmapped)
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
	return nil
}

// planLiteLLM maps the mcp_servers of a LiteLLM config, in file order.
func planLiteLLM(doc []byte, rename bool) ([]*planned, error) {
	var cfg struct {
		MCPServers yaml.Node `yaml:"mcp_servers"`
	}
	if err := yaml.Unmarshal(doc, &cfg); err != nil {
		return nil, fmt.Errorf("not a valid YAML config: %w", err)
	}
	n := &cfg.MCPServers
	switch {
	case n.Kind == 0:
		return nil, errors.New("no mcp_servers section")
	case n.Kind != yaml.MappingNode:
		return nil, fmt.Errorf("line %d: mcp_servers must map server names to their settings", n.Line)
	case len(n.Content) == 0:
		return nil, errors.New("mcp_servers is empty")
	}
	var plans []*planned
	taken := map[string]string{} // server_id → LiteLLM name
	for i := 0; i+1 < len(n.Content); i += 2 {
		name := n.Content[i].Value
		var settings map[string]any
		if err := n.Content[i+1].Decode(&settings); err != nil || settings == nil {
			plans = append(plans, &planned{name: name, skipped: fmt.Sprintf("line %d: settings are not a mapping", n.Content[i+1].Line)})
			continue
		}
		p := planServer(name, settings, rename)
		if other, ok := taken[p.id]; ok && p.item != nil {
			p.item = nil
			p.skipped = fmt.Sprintf("server_id %q is already used by %q in this file", p.id, other)
		}
		if p.item != nil {
			taken[p.id] = name
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// planServer maps one LiteLLM server's settings onto a server item and
// checks the item as the gateway does.
func planServer(name string, settings map[string]any, rename bool) *planned {
	p := &planned{name: name, id: name}
	if err := registry.ValidateID(name); err != nil {
		suggested := sanitizeID(name)
		if rename {
			p.id = suggested
		} else {
			p.skipped = fmt.Sprintf("%v; suggested id %q (rerun with --rename to import it under that id)", err, suggested)
		}
	}
	doc := map[string]any{store.ServerIDAttr: p.id}
	for _, key := range slices.Sorted(maps.Keys(settings)) {
		v := settings[key]
		switch {
		case slices.Contains(liteLLMIdentity, key):
			// mapIdentity, below.
		case key == "mcp_info":
			p.mapInfo(v, doc, settings)
		case key == "spec_path" && isEnvRef(v):
			p.unmapped = append(p.unmapped, key+" (an os.environ/ reference; not resolved)")
		case key == "spec_path":
			// LiteLLM makes this server's tools from an OpenAPI document;
			// its url is the API's base URL.
			doc["transport"] = string(registry.TransportOpenAPI)
			if s, ok := v.(string); ok && (strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")) {
				doc["spec_url"] = s
			} else {
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
		case slices.Contains(liteLLMNumbers, key):
			doc[key] = number(v)
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
