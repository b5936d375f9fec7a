package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/fleet"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
	"github.com/mcpgate/mcpgate/internal/store"
)

var serversPutCmd = &command{
	name:    "servers put",
	args:    "FILE [--if-absent]",
	summary: "create or replace a server from a JSON definition",
	help: `
Reads a server definition, a JSON object, from FILE ("-" for standard
input), checks it exactly as the gateway does when it reads the item, and
writes it to the servers table, replacing any server with the same id.

` + attributeHelp() + `
Flags:
  --if-absent   refuse to replace an existing server with this id

Examples:
  echo '{"server_id":"github","url":"https://example.com/mcp","max_concurrent_requests":5}' |
    mcpgate servers put -
  echo '{"server_id":"github","url":"https://api.githubcopilot.com/mcp/",
         "auth":{"type":"bearer","secret":"secretsmanager:mcpgate/github"}}' | mcpgate servers put -
`,
	run: runServersPut,
}

// attributeHelp lists every attribute of a server item, from the table the
// gateway validates items with.
func attributeHelp() string {
	var b strings.Builder
	b.WriteString("Attributes (any other name is refused, so a misspelling cannot go unnoticed):\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tTYPE\tDEFAULT\tMEANING")
	for _, a := range registry.Attributes() {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", a.Name, a.Type, a.Default, a.Doc)
		prefix := a.Name + "."
		if a.Name == "tools" {
			prefix = "tools.<tool>."
		}
		for _, f := range a.Fields {
			fmt.Fprintf(tw, "    %s%s\t%s\t%s\t%s\n", prefix, f.Name, f.Type, f.Default, f.Doc)
		}
	}
	fmt.Fprintln(tw, "  x_*\tany\t\tyour own notes, ignored by the gateway")
	tw.Flush()
	return b.String()
}

var serversGetCmd = &command{
	name:    "servers get",
	args:    "ID [--reveal]",
	summary: "print a server's item as JSON, and whether it is valid",
	help: `
Prints the server's item as indented JSON on standard output, and on
standard error whether the gateway takes it: "valid", with the settings it
reads (cap, timeout, ...), or, when the item is invalid (the gateway
refuses calls to it), why, exiting with status 1.

URLs may carry credentials: the values of their query and their user and
password are printed as REDACTED, as everywhere the CLI and the gateway
print a URL.

Flags:
  --reveal   print url and spec_url as stored, secrets included
`,
	run: runServersGet,
}

var serversListCmd = &command{
	name:    "servers list",
	summary: "list every server, invalid ones included",
	help: `
Lists every server: id, url, transport, cap, timeout and on_limit. Items the
gateway would refuse are listed too, with what is wrong with them.
`,
	run: runServersList,
}

var serversDeleteCmd = &command{
	name:    "servers delete",
	args:    "ID",
	summary: "delete a server",
	help: `
Deletes the server's item. It is an error if there was no such server.
Gateway instances stop serving it within their registry cache time (a few
seconds). Keys that list the id keep it.
`,
	run: runServersDelete,
}

var serversSetCmd = &command{
	name:    "servers set",
	args:    "ID name=value [name=value...]",
	summary: "change attributes of a server, checked before writing",
	help: `
Changes attributes of an existing server. The result is checked as the
gateway checks it before anything is written; the write fails if the server
was deleted meanwhile.

Values are typed by attribute: ` + strings.Join(attributesOfType("N"), ", ") + `
are numbers; ` + strings.Join(attributesOfType("BOOL"), ", ") + ` true or false;
every other attribute is a string. A value starting with '{' or '[' is
JSON, for map- and list-valued attributes (tools, breaker). "name=" with an
empty value removes the attribute. 'mcpgate help servers put' lists every
attribute.

Examples:
  mcpgate servers set github max_concurrent_requests=10 timeout=60
  mcpgate servers set github on_limit=shed description=
  mcpgate servers set github 'auth={"type":"bearer","secret":"ssm:/mcpgate/github"}'
  mcpgate servers set github 'disallowed_tools=["delete_*"]'
`,
	run: runServersSet,
}

// urlAttrs are the server attributes holding URLs, redacted when printed.
var urlAttrs = []string{"url", "spec_url"}

// attributesOfType are the server attributes of DynamoDB type typ.
func attributesOfType(typ string) []string {
	var names []string
	for _, a := range registry.Attributes() {
		if a.Type == typ {
			names = append(names, a.Name)
		}
	}
	return names
}

func runServersPut(c *cli, args []string) error {
	fs := c.newFlags()
	ifAbsent := fs.Bool("if-absent", false, "")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one FILE (or - for standard input), got %d arguments", len(pos))
	}
	doc, err := c.readFile(pos[0])
	if err != nil {
		return err
	}
	item, err := registry.JSONToItem(doc)
	if err != nil {
		return fmt.Errorf("%s: invalid server definition: %w", pos[0], err)
	}
	s, warnings, err := registry.ParseWithWarnings(item)
	if err != nil {
		return fmt.Errorf("%s: invalid server definition: %w", pos[0], err)
	}
	if err := c.open(); err != nil {
		return err
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(c.tables.Servers), Item: item}
	if *ifAbsent {
		in.ConditionExpression = aws.String("attribute_not_exists(" + store.ServerIDAttr + ")")
	}
	if _, err := c.db.PutItem(c.ctx, in); err != nil {
		if conditionFailed(err) {
			return fmt.Errorf("server %q already exists; not replaced (drop --if-absent to replace it)", s.ID)
		}
		return dbErr("put server "+s.ID, err)
	}
	fmt.Fprintf(c.stdout, "server %q written: %s\n", s.ID, describe(s))
	c.warn(warnings)
	return c.invalidateTools(s.ID)
}

// invalidateTools makes the fleet's shared tool list of server id stale,
// so that every instance lists it again under its new definition.
func (c *cli) invalidateTools(id string) error {
	if err := catalog.New(c.db, c.tables.Leases, catalog.Options{}).Invalidate(c.ctx, id); err != nil {
		return fmt.Errorf("server %q written, but its tool list was not refreshed (instances list it again within CATALOG_TTL): %w", id, err)
	}
	return nil
}

func runServersGet(c *cli, args []string) error {
	fs := c.newFlags()
	reveal := fs.Bool("reveal", false, "")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one ID, got %d arguments", len(pos))
	}
	id := pos[0]
	item, err := c.existingServer(id)
	if err != nil {
		return err
	}
	doc := registry.ItemToJSON(item)
	if !*reveal {
		for _, name := range urlAttrs {
			if u, ok := doc[name].(string); ok {
				doc[name] = safeurl.Redact(u)
			}
		}
	}
	if err := printJSON(c.stdout, doc); err != nil {
		return err
	}
	s, err := registry.Parse(item)
	if err != nil {
		return fmt.Errorf("server %q is invalid, the gateway refuses calls to it: %w", id, err)
	}
	fmt.Fprintf(c.stderr, "server %q is valid: %s\n", id, describe(s))
	return nil
}

func runServersList(c *cli, args []string) error {
	if err := c.noArgs(args); err != nil {
		return err
	}
	if err := c.open(); err != nil {
		return err
	}
	items, err := c.scan(c.tables.Servers)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		fmt.Fprintln(c.stdout, "no servers (add one with: mcpgate servers put FILE)")
		return nil
	}
	slices.SortFunc(items, func(a, b map[string]types.AttributeValue) int {
		return strings.Compare(rawAttr(a, store.ServerIDAttr), rawAttr(b, store.ServerIDAttr))
	})
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tURL\tTRANSPORT\tCAP\tTIMEOUT\tON_LIMIT\tSTATUS")
	invalid := 0
	for _, item := range items {
		s, err := registry.Parse(item)
		if err != nil {
			invalid++
			raw := func(name string) string {
				if name == "url" {
					return orDash(safeurl.Redact(rawAttr(item, name)))
				}
				return orDash(rawAttr(item, name))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\tINVALID: %s\n", raw(store.ServerIDAttr), raw("url"), raw("transport"),
				raw("max_concurrent_requests"), raw("timeout"), raw("on_limit"), oneLine(err.Error()))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\tok\n", s.ID, orDash(safeurl.Redact(s.URL)), s.Transport, capText(s.MaxConcurrent), s.Timeout, s.OnLimit)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%d servers, %d invalid\n", len(items), invalid)
	return nil
}

func runServersDelete(c *cli, args []string) error {
	id, err := c.oneArg(args, "ID")
	if err != nil {
		return err
	}
	if err := c.open(); err != nil {
		return err
	}
	_, err = c.db.DeleteItem(c.ctx, &dynamodb.DeleteItemInput{
		TableName:           aws.String(c.tables.Servers),
		Key:                 serverKey(id),
		ConditionExpression: aws.String("attribute_exists(" + store.ServerIDAttr + ")"),
	})
	if conditionFailed(err) {
		return fmt.Errorf("server %q not found", id)
	}
	if err != nil {
		return dbErr("delete server "+id, err)
	}
	fmt.Fprintf(c.stdout, "server %q deleted\n", id)
	return nil
}

func runServersSet(c *cli, args []string) error {
	pos, err := c.parse(c.newFlags(), args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef("want ID and at least one name=value")
	}
	id := pos[0]
	changes, err := fleet.ParseChanges(pos[1:])
	if errors.Is(err, fleet.ErrNotNameValue) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	item, err := c.existingServer(id)
	if err != nil {
		return err
	}
	next, _, err := fleet.Apply(item, changes)
	if err != nil {
		return fmt.Errorf("server %q not changed: %w", id, err)
	}
	// Only what this command sets is worth a word: an attribute left as
	// it was had its warning when it was written.
	_, warnings, _ := registry.ParseWithWarnings(next)
	warnings = slices.DeleteFunc(warnings, func(w string) bool {
		return !slices.ContainsFunc(changes, func(ch fleet.Change) bool {
			return strings.HasPrefix(w, ch.Name+" ") || strings.HasPrefix(w, ch.Name+".")
		})
	})
	if _, err := c.fleet().UpdateServer(c.ctx, id, item, changes); err != nil {
		switch {
		case errors.Is(err, fleet.ErrServerGone):
			return fmt.Errorf("server %q was deleted meanwhile; nothing written", id)
		case errors.Is(err, fleet.ErrServerChanged):
			return fmt.Errorf("server %q was changed meanwhile; nothing written (run the command again)", id)
		}
		return dbErr("update server "+id, err)
	}
	fmt.Fprintf(c.stdout, "server %q updated: %s\n", id, strings.Join(pos[1:], " "))
	c.warn(warnings)
	return c.invalidateTools(id)
}

// warn prints each warning about what was written on standard error.
func (c *cli) warn(warnings []string) {
	for _, w := range warnings {
		fmt.Fprintf(c.stderr, "warning: %s\n", w)
	}
}

// describe summarises a valid server in one line, escaped for a text view
// (clip.Escape).
func describe(s *registry.Server) string {
	return clip.Escape(fmt.Sprintf("url %s, transport %s, cap %s, timeout %v, on_limit %s", safeurl.Redact(s.URL), s.Transport, capText(s.MaxConcurrent), s.Timeout, s.OnLimit))
}

func capText(n int) string {
	if n <= 0 {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

// rawAttr renders a string or number attribute as stored, "-" otherwise.
func rawAttr(item map[string]types.AttributeValue, name string) string {
	return fleet.RawAttr(item, name)
}

func serverKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{store.ServerIDAttr: &types.AttributeValueMemberS{Value: id}}
}

// existingServer opens the store and reads id's item; a server that does
// not exist is an error.
func (c *cli) existingServer(id string) (map[string]types.AttributeValue, error) {
	if err := c.open(); err != nil {
		return nil, err
	}
	item, err := c.serverItem(id)
	if err != nil {
		return nil, err
	}
	if item == nil {
		return nil, fmt.Errorf("server %q not found", id)
	}
	return item, nil
}

// serverItem reads a server's item (consistently); nil when there is none.
func (c *cli) serverItem(id string) (map[string]types.AttributeValue, error) {
	item, err := c.fleet().Server(c.ctx, id)
	if err != nil {
		return nil, dbErr("read server "+id, err)
	}
	return item, nil
}

// scan reads every item of table.
func (c *cli) scan(table string) ([]map[string]types.AttributeValue, error) {
	items, err := c.fleet().Scan(c.ctx, table)
	if err != nil {
		return nil, dbErr("scan "+table, err)
	}
	return items, nil
}

// fleet is the store the command opened, for the fleet package.
func (c *cli) fleet() *fleet.Store { return &fleet.Store{DB: c.db, Tables: c.tables} }

// readFile reads name, or standard input for "-".
func (c *cli) readFile(name string) ([]byte, error) {
	if name == "-" {
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return nil, fmt.Errorf("read standard input: %w", err)
		}
		return b, nil
	}
	return os.ReadFile(name) // its error names the file
}

// oneArg parses a command that takes one positional argument and no flags.
func (c *cli) oneArg(args []string, what string) (string, error) {
	pos, err := c.parse(c.newFlags(), args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 || pos[0] == "" {
		return "", usagef("want one %s, got %d arguments", what, len(pos))
	}
	return pos[0], nil
}

// noArgs parses a command that takes no arguments and no flags.
func (c *cli) noArgs(args []string) error {
	pos, err := c.parse(c.newFlags(), args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	return nil
}

func conditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// printJSON writes v as indented JSON, without escaping &, < and > (URLs
// stay readable), and with every character clip.Escape replaces written as
// a \u escape: the values read back exact, and none reaches the terminal.
func printJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	for line := range strings.Lines(b.String()) {
		// JSON escapes C0 itself, so only DEL, C1 and bidirectional
		// controls remain, all inside strings, where \uXXXX means them.
		if _, err := io.WriteString(w, clip.Escape(strings.TrimSuffix(line, "\n"))+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// compactJSON renders v as one line of JSON as printJSON writes it, but
// unindented.
func compactJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return clip.Escape(strings.TrimSuffix(b.String(), "\n"))
}
