package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestServersPutGetListDelete(t *testing.T) {
	env := storetest.NewEnv(t)
	file := writeFile(t, "github.json", `{"server_id":"github","url":"https://example.com/mcp?a=1&b=2","max_concurrent_requests":5,"timeout":12.5,"description":"GitHub tools"}`)
	r := mcpgate(t, env, "servers", "put", file).ok(t)
	if want := `server "github" written: url https://example.com/mcp?a=REDACTED&b=REDACTED, transport http, cap 5, timeout 12.5s, on_limit queue`; strings.TrimSpace(r.stdout) != want {
		t.Errorf("put said %q, want %q", r.stdout, want)
	}
	item := serverItem(t, env, "github")
	if n, ok := item["max_concurrent_requests"].(*types.AttributeValueMemberN); !ok || n.Value != "5" {
		t.Errorf("max_concurrent_requests stored as %#v, want N 5", item["max_concurrent_requests"])
	}

	// From standard input; flags may follow the file.
	r = runWith(t, vars(env), `{"server_id":"search","url":"https://search.example/sse","transport":"sse"}`, "servers", "put", "-", "--if-absent").ok(t)
	if !strings.Contains(r.stdout, `server "search" written`) {
		t.Errorf("put - said %q", r.stdout)
	}

	r = mcpgate(t, env, "servers", "get", "github").ok(t)
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("get did not print JSON: %v\n%s", err, r.stdout)
	}
	want := map[string]any{"server_id": "github", "url": "https://example.com/mcp?a=REDACTED&b=REDACTED", "max_concurrent_requests": 5.0, "timeout": 12.5, "description": "GitHub tools"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("get printed %v, want %v", got, want)
	}
	if !strings.Contains(r.stderr, `server "github" is valid: url https://example.com/mcp?a=REDACTED&b=REDACTED, transport http, cap 5`) {
		t.Errorf("get does not say the item is valid: %q", r.stderr)
	}
	// --reveal prints the item as stored, unescaped, for editing.
	r = mcpgate(t, env, "servers", "get", "github", "--reveal").ok(t)
	if !strings.Contains(r.stdout, `"url": "https://example.com/mcp?a=1&b=2"`) {
		t.Errorf("get --reveal printed:\n%s", r.stdout)
	}

	r = mcpgate(t, env, "servers", "list").ok(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("list printed %d lines, want header, 2 servers and a total:\n%s", len(lines), r.stdout)
	}
	for i, want := range [][]string{
		{"ID", "URL", "TRANSPORT", "CAP", "TIMEOUT", "ON_LIMIT", "STATUS"},
		{"github", "https://example.com/mcp?a=REDACTED&b=REDACTED", "http", "5", "12.5s", "queue", "ok"},
		{"search", "https://search.example/sse", "sse", "unlimited", "30s", "queue", "ok"},
	} {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("list line %d: got %q, want %q", i, got, want)
		}
	}

	mcpgate(t, env, "servers", "put", "--if-absent", file).fails(t, 1, `server "github" already exists; not replaced`)

	r = mcpgate(t, env, "servers", "delete", "github").ok(t)
	if !strings.Contains(r.stdout, `server "github" deleted`) {
		t.Errorf("delete said %q", r.stdout)
	}
	if serverItem(t, env, "github") != nil {
		t.Error("github is still in the table after delete")
	}
	mcpgate(t, env, "servers", "delete", "github").fails(t, 1, `server "github" not found`)
	mcpgate(t, env, "servers", "get", "github").fails(t, 1, `server "github" not found`)
	mcpgate(t, env, "servers", "put", "/no/such/file.json").fails(t, 1, "no such file")
}

// TestServersPutRejects checks bad definitions are refused, naming the
// field, and that nothing is written.
func TestServersPutRejects(t *testing.T) {
	env := storetest.NewEnv(t)
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"unknown field", `{"server_id":"a","url":"https://x.example/mcp","max_concurent_requests":5}`, []string{"max_concurent_requests: unknown attribute"}},
		{"negative timeout", `{"server_id":"a","url":"https://x.example/mcp","timeout":-5}`, []string{"timeout: must be a positive number of seconds, got -5"}},
		{"non-numeric cap", `{"server_id":"a","url":"https://x.example/mcp","max_concurrent_requests":"five"}`, []string{"max_concurrent_requests: must be of type N"}},
		{"fractional cap", `{"server_id":"a","url":"https://x.example/mcp","max_concurrent_requests":2.5}`, []string{"max_concurrent_requests: must be a whole number"}},
		{"bad transport", `{"server_id":"a","url":"https://x.example/mcp","transport":"stdio"}`, []string{"transport: \"stdio\" is not a transport"}},
		{"missing url and bad id", `{"server_id":"a-b"}`, []string{"url: missing", "server_id: \"a-b\" is invalid"}},
		{"not an object", `[1,2]`, []string{"not a JSON object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runWith(t, vars(env), tc.doc, "servers", "put", "-")
			r.fails(t, 1, tc.want...)
			if n := strings.Count(r.stderr, "\n"); n != 1 {
				t.Errorf("got %d lines on stderr, want one:\n%s", n, r.stderr)
			}
		})
	}
	if items := scanAll(t, env, env.Tables.Servers); len(items) != 0 {
		t.Errorf("rejected definitions wrote %d items", len(items))
	}
}

func TestServersInvalidItems(t *testing.T) {
	env := storetest.NewEnv(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "good", "url": "https://good.example/mcp", "max_concurrent_requests": 0, "on_limit": "shed"})
	testkit.PutServer(t, env, map[string]any{"server_id": "bad", "url": "https://bad.example/mcp", "timeout": -1})
	testkit.PutServer(t, env, map[string]any{"server_id": "creds", "url": "https://admin:hunter2@creds.example/mcp?token=s3cr3t"})

	r := mcpgate(t, env, "servers", "get", "bad")
	r.fails(t, 1, `server "bad" is invalid`, "timeout: must be a positive number")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got["timeout"] != -1.0 {
		t.Errorf("get of an invalid item printed %q (%v), want its JSON", r.stdout, err)
	}

	r = mcpgate(t, env, "servers", "list").ok(t)
	var badLine, goodLine, credsLine string
	for _, line := range strings.Split(r.stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "bad "):
			badLine = line
		case strings.HasPrefix(line, "good "):
			goodLine = line
		case strings.HasPrefix(line, "creds "):
			credsLine = line
		}
	}
	// An item refused for carrying credentials is listed without them.
	if !strings.Contains(credsLine, "https://REDACTED@creds.example/mcp?token=REDACTED") || !strings.Contains(credsLine, "INVALID: url: must not carry credentials") {
		t.Errorf("list shows the item with credentials as %q", credsLine)
	}
	for _, out := range []string{r.stdout, mcpgate(t, env, "servers", "get", "creds").stdout} {
		for _, secret := range []string{"hunter2", "s3cr3t", "admin"} {
			if strings.Contains(out, secret) {
				t.Errorf("the CLI printed %q:\n%s", secret, out)
			}
		}
	}
	if !strings.Contains(badLine, "INVALID: timeout: must be a positive number") || !strings.Contains(badLine, "https://bad.example/mcp") {
		t.Errorf("list shows the invalid item as %q", badLine)
	}
	if got, want := strings.Fields(goodLine), []string{"good", "https://good.example/mcp", "http", "unlimited", "30s", "shed", "ok"}; !reflect.DeepEqual(got, want) {
		t.Errorf("list shows good as %q, want %q", got, want)
	}
	if !strings.Contains(r.stdout, "3 servers, 2 invalid") {
		t.Errorf("list total:\n%s", r.stdout)
	}
}

func TestServersSet(t *testing.T) {
	env := storetest.NewEnv(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "github", "url": "https://example.com/mcp", "description": "old"})

	mcpgate(t, env, "servers", "set", "github", "max_concurrent_requests=10", "timeout=60.5", "on_limit=shed", "description=",
		"cancel_grace=20", "stops_on_close=true").ok(t)
	item := serverItem(t, env, "github")
	for name, want := range map[string]types.AttributeValue{
		"max_concurrent_requests": &types.AttributeValueMemberN{Value: "10"},
		"timeout":                 &types.AttributeValueMemberN{Value: "60.5"},
		"cancel_grace":            &types.AttributeValueMemberN{Value: "20"},
		"stops_on_close":          &types.AttributeValueMemberBOOL{Value: true},
		"on_limit":                &types.AttributeValueMemberS{Value: "shed"},
		"url":                     &types.AttributeValueMemberS{Value: "https://example.com/mcp"},
	} {
		if !reflect.DeepEqual(item[name], want) {
			t.Errorf("%s: stored %#v, want %#v", name, item[name], want)
		}
	}
	if _, ok := item["description"]; ok {
		t.Error("description= did not remove the attribute")
	}
	if _, err := registry.Parse(item); err != nil {
		t.Errorf("set wrote an invalid item: %v", err)
	}

	// JSON values become maps and lists (here under x_, which the gateway
	// accepts; later map-valued attributes use the same path).
	mcpgate(t, env, "servers", "set", "github", `x_meta={"owner":"platform","tier":2}`, `x_tags=["a","b"]`).ok(t)
	item = serverItem(t, env, "github")
	wantMeta := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"owner": &types.AttributeValueMemberS{Value: "platform"},
		"tier":  &types.AttributeValueMemberN{Value: "2"},
	}}
	if !reflect.DeepEqual(item["x_meta"], wantMeta) {
		t.Errorf("x_meta stored as %#v", item["x_meta"])
	}
	if l, ok := item["x_tags"].(*types.AttributeValueMemberL); !ok || len(l.Value) != 2 {
		t.Errorf("x_tags stored as %#v, want a list of 2", item["x_tags"])
	}

	before := serverItem(t, env, "github")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"max_concurent_requests=3"}, "max_concurent_requests: unknown attribute"},
		{[]string{"timeout=-5"}, "timeout: must be a positive number of seconds, got -5"},
		{[]string{"max_concurrent_requests=abc"}, `max_concurrent_requests: "abc" is not a number`},
		{[]string{"queue_timeout=1e9"}, "queue_timeout: must be at most"},
		{[]string{"transport=stdio"}, `transport: "stdio" is not a transport`},
		{[]string{"url="}, "url: missing"},
		{[]string{"url=ftp://example.com"}, "url: scheme must be http or https"},
		{[]string{"url=127.0.0.1:9201/mcp"}, "url: has no scheme: start it with http:// or https://"},
		{[]string{"url=localhost:9201"}, "url: has no scheme: start it with http:// or https://"},
		{[]string{"url=http://127.0.0.1:9201/mcp "}, "url: ends with a space: remove it"},
		{[]string{"server_id=other"}, "server_id: cannot be changed"},
		{[]string{"x_meta={oops"}, "x_meta: value starts with \"{\" but is not valid JSON"},
		{[]string{"timeout=5", "timeout=6"}, "timeout: given twice"},
		{[]string{"stops_on_close=maybe"}, `stops_on_close: "maybe" is not true or false`},
		{[]string{"cancel_grace=0"}, "cancel_grace: must be a positive number of seconds"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			mcpgate(t, env, append([]string{"servers", "set", "github"}, tc.args...)...).fails(t, 1, tc.want)
			if after := serverItem(t, env, "github"); !reflect.DeepEqual(after, before) {
				t.Errorf("a refused set changed the item:\nbefore %v\nafter  %v", registry.ItemToJSON(before), registry.ItemToJSON(after))
			}
		})
	}
	mcpgate(t, env, "servers", "set", "nope", "timeout=5").fails(t, 1, `server "nope" not found`)
}

// TestCapOfZeroWarns: setting a cap to 0 or less is written (it is the
// documented way to say "no cap"), with a warning that it means no cap at
// all, from servers set and servers put alike; a positive cap, or another
// attribute of a server whose cap is 0, brings no warning.
func TestCapOfZeroWarns(t *testing.T) {
	env := storetest.NewEnv(t)
	testkit.PutServer(t, env, map[string]any{"server_id": "batch", "url": "https://example.com/mcp", "max_concurrent_requests": 4})
	const want = "warning: max_concurrent_requests is 0: 0 or less means no cap (unlimited), so it does not stop or limit calls"

	r := mcpgate(t, env, "servers", "set", "batch", "max_concurrent_requests=0").ok(t)
	if !strings.Contains(r.stderr, want) || !strings.Contains(r.stdout, `server "batch" updated`) {
		t.Errorf("set max_concurrent_requests=0:\nstdout: %s\nstderr: %s\nwant the update and %q", r.stdout, r.stderr, want)
	}
	if got := serverItem(t, env, "batch")["max_concurrent_requests"]; !reflect.DeepEqual(got, &types.AttributeValueMemberN{Value: "0"}) {
		t.Errorf("stored %#v, want 0", got)
	}
	r = mcpgate(t, env, "servers", "set", "batch", "max_concurrent_requests=-1").ok(t)
	if !strings.Contains(r.stderr, "warning: max_concurrent_requests is -1: 0 or less means no cap") {
		t.Errorf("set max_concurrent_requests=-1: stderr %q", r.stderr)
	}
	if r := mcpgate(t, env, "servers", "set", "batch", "timeout=5").ok(t); r.stderr != "" {
		t.Errorf("set timeout on a server whose cap is -1 warned: %q", r.stderr)
	}
	if r := mcpgate(t, env, "servers", "set", "batch", "max_concurrent_requests=3").ok(t); r.stderr != "" {
		t.Errorf("set max_concurrent_requests=3 warned: %q", r.stderr)
	}
	r = mcpgate(t, env, "servers", "set", "batch", `tools={"slow":{"max_concurrent":0}}`).ok(t)
	if !strings.Contains(r.stderr, "warning: tools.slow.max_concurrent is 0: 0 or less means no cap") {
		t.Errorf("set a tool's cap to 0: stderr %q", r.stderr)
	}

	r = runWith(t, vars(env), `{"server_id": "batch2", "url": "https://example.com/mcp", "max_concurrent_requests": 0}`, "servers", "put", "-").ok(t)
	if !strings.Contains(r.stderr, want) || serverItem(t, env, "batch2") == nil {
		t.Errorf("put with max_concurrent_requests 0: stderr %q, stored %v", r.stderr, serverItem(t, env, "batch2"))
	}
	r = runWith(t, vars(env), `{"server_id": "batch3", "url": "127.0.0.1:9201/mcp"}`, "servers", "put", "-")
	r.fails(t, 1, "url: has no scheme: start it with http:// or https://")
	if serverItem(t, env, "batch3") != nil {
		t.Error("put wrote a server whose url has no scheme")
	}
}

// TestHelpListsEveryAttribute: `mcpgate help servers put` lists every
// attribute the gateway accepts in a server item, with its type and doc,
// nested ones included, from the table Parse reads items with; and so does
// the servers table of the configuration reference (docs/configuration.md).
func TestHelpListsEveryAttribute(t *testing.T) {
	help := runWith(t, nil, "", "help", "servers", "put").ok(t).stdout
	root, err := storetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	reference, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	line := func(name string) string {
		for l := range strings.SplitSeq(help, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				return l
			}
		}
		return ""
	}
	for _, a := range registry.Attributes() {
		l := line(a.Name)
		if l == "" || !strings.Contains(l, " "+a.Type+" ") || !strings.Contains(l, a.Doc) {
			t.Errorf("help servers put: %s is not listed with its type %s and doc; line %q", a.Name, a.Type, l)
		}
		if !strings.Contains(string(reference), "| `"+a.Name+"`") && !strings.Contains(string(reference), "`, `"+a.Name+"`") {
			t.Errorf("docs/configuration.md's servers table does not list %s", a.Name)
		}
		for _, f := range a.Fields {
			if !strings.Contains(help, "."+f.Name+" ") {
				t.Errorf("help servers put: %s field %s is not listed", a.Name, f.Name)
			}
		}
	}
}
