package main

import (
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

const liteLLMConfig = "testdata/litellm_config.yaml"

// report is import's output for one LiteLLM server.
type report struct {
	status   string   // the text after "name: "
	unmapped []string // the settings listed as not imported
	notes    []string // the "note: " lines
	warnings []string // the "warning: " lines
}

// parseReport splits import's output into one report per server; the
// last line, the summary, is left out.
func parseReport(t *testing.T, out string) map[string]*report {
	t.Helper()
	reports := map[string]*report{}
	var cur *report
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, line := range lines[:len(lines)-1] {
		if rest, ok := strings.CutPrefix(line, "  note: "); ok {
			if cur == nil {
				t.Fatalf("note before any server: %q", line)
			}
			cur.notes = append(cur.notes, rest)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "  not imported (values not shown): "); ok {
			if cur == nil {
				t.Fatalf("settings listed before any server: %q", line)
			}
			cur.unmapped = strings.Split(rest, ", ")
			continue
		}
		if rest, ok := strings.CutPrefix(line, "  note: "); ok && cur != nil {
			cur.notes = append(cur.notes, rest)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "  warning: "); ok && cur != nil {
			cur.warnings = append(cur.warnings, rest)
			continue
		}
		name, status, ok := strings.Cut(line, ": ")
		if !ok || strings.HasPrefix(line, " ") {
			t.Fatalf("unexpected import output line %q", line)
		}
		cur = &report{status: status}
		reports[name] = cur
	}
	return reports
}

// wantUnmapped is every setting of testdata/litellm_config.yaml that does
// not carry over, per server.
var wantUnmapped = map[string][]string{
	"zapier_mcp": {"mcp_info.logo_url", "mcp_info.server_name"},
	"deepwiki":   {"access_groups"},
	"github": {"static_headers.X-Api-Key (a credential or protocol header; a credential goes in auth as a secret reference)",
		"extra_headers Authorization (never forwarded: an agent's credential must not reach an upstream)"},
	"internal_search": {"headers"},
	"filesystem":      {"args", "command", "env"},
	"brave-search":    {"headers"},
	"petstore":        nil,
	"billing":         nil,
}

func checkReport(t *testing.T, r result) map[string]*report {
	t.Helper()
	for _, out := range []string{r.stdout, r.stderr} {
		if strings.Contains(out, "FAKESECRET") {
			t.Errorf("import printed a secret's value:\n%s", out)
		}
	}
	reports := parseReport(t, r.stdout)
	for name, want := range wantUnmapped {
		rep := reports[name]
		if rep == nil {
			t.Errorf("no report for %s:\n%s", name, r.stdout)
			continue
		}
		if !reflect.DeepEqual(rep.unmapped, want) {
			t.Errorf("%s: not imported %q, want %q", name, rep.unmapped, want)
		}
	}
	for name, want := range map[string]string{
		"filesystem":   "SKIPPED: transport stdio runs a local command",
		"brave-search": `SKIPPED: server_id "brave-search" is invalid`,
	} {
		if rep := reports[name]; rep == nil || !strings.HasPrefix(rep.status, want) {
			t.Errorf("%s: reported %+v, want %q", name, rep, want)
		}
	}
	if rep := reports["brave-search"]; rep != nil && !strings.Contains(rep.status, `suggested id "brave_search" (rerun with --rename`) {
		t.Errorf("brave-search: no suggested id in %q", rep.status)
	}
	return reports
}

func TestImportLiteLLMDryRun(t *testing.T) {
	env := storetest.NewEnv(t)
	r := mcpgate(t, env, "import", "litellm", liteLLMConfig, "--dry-run")
	r.fails(t, 1, "import incomplete: 2 of 8 servers skipped, 10 settings not imported")
	reports := checkReport(t, r)
	for name, want := range map[string]string{
		"zapier_mcp":      `would write {"description":"Zapier actions","disallowed_tools":["delete_*"],"server_id":"zapier_mcp","transport":"sse","url":"https://mcp.zapier.example/api/mcp/sse"}`,
		"deepwiki":        `would write {"allowed_tools":["read_wiki_structure","ask_question"],"description":"Read GitHub repositories' wikis","max_concurrent_requests":4,"server_id":"docs","timeout":45,"transport":"http","url":"https://mcp.deepwiki.com/mcp"}`,
		"github":          `would write {"auth":{"secret":"env:GITHUB_PAT","type":"bearer"},"forward_headers":["X-GitHub-Api-Version"],"server_id":"github","static_headers":{"X-Team":"platform"},"transport":"http","url":"https://api.githubcopilot.com/mcp/"}`,
		"internal_search": `would write {"auth":{"secret":"secretsmanager:mcpgate/internal_search","type":"api_key"},"server_id":"internal_search","url":"http://search.internal.example:8080/mcp"}`,
		"petstore":        `would write {"server_id":"petstore","spec_path":"./openapi/petstore.json","transport":"openapi","url":"https://petstore3.swagger.io/api/v3"}`,
		"billing":         `would write {"auth":{"client_id":"mcpgate","scope":"billing.read","secret":"env:BILLING_CLIENT_SECRET","token_url":"https://idp.example/oauth2/token","type":"oauth2_client_credentials"},"max_concurrent_requests":3,"server_id":"billing","url":"https://billing.internal.example/mcp"}`,
	} {
		if rep := reports[name]; rep == nil || rep.status != want {
			t.Errorf("%s: reported %+v\nwant %s", name, rep, want)
		}
	}
	// A literal token is never written: the item refers to a secret the
	// admin creates with the printed command.
	if rep := reports["internal_search"]; rep == nil || len(rep.notes) != 1 || !strings.Contains(rep.notes[0],
		"auth.secret is secretsmanager:mcpgate/internal_search; the config's literal value is not imported: create the secret with aws secretsmanager create-secret --name mcpgate/internal_search --secret-string '<the key>'") {
		t.Errorf("internal_search notes: %+v", rep)
	}
	if rep := reports["github"]; rep == nil || len(rep.notes) != 1 || !strings.Contains(rep.notes[0], "auth.secret is env:GITHUB_PAT, read from the gateway's environment: for local development only") ||
		!strings.Contains(rep.notes[0], "aws secretsmanager create-secret --name mcpgate/github --secret-string '<the token>'") {
		t.Errorf("github notes: %+v", rep)
	}
	if !strings.Contains(r.stdout, "dry run, nothing written: would import 6 of 8 servers; 2 skipped; 10 settings not imported") {
		t.Errorf("no dry-run summary:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "keys: LiteLLM's keys are in its database, not in this file; to give mcpgate's keys the limits and team it gives new ones: mcpgate keys create --servers ID,... --rpm-limit 120 --max-parallel 4 --team core-infra") {
		t.Errorf("no note of the key limits:\n%s", r.stdout)
	}
	if items := scanAll(t, env, env.Tables.Servers); len(items) != 0 {
		t.Errorf("--dry-run wrote %d items", len(items))
	}
	// A dry run needs no AWS access at all.
	if r := runWith(t, nil, "", "import", "litellm", "--dry-run", liteLLMConfig); !strings.Contains(r.stdout, "would import 6 of 8") {
		t.Errorf("dry run without an environment:\n%s\n%s", r.stdout, r.stderr)
	}
}

func TestImportLiteLLM(t *testing.T) {
	env := storetest.NewEnv(t)
	r := mcpgate(t, env, "import", "litellm", liteLLMConfig)
	r.fails(t, 1, "import incomplete: 2 of 8 servers skipped, 10 settings not imported (listed above)")
	reports := checkReport(t, r)
	if rep := reports["github"]; rep == nil || rep.status != `imported as server "github"` {
		t.Errorf("github reported %+v", rep)
	}
	// The note's command to move the env: secret to Secrets Manager runs
	// as pasted in a shell, and changes only the reference.
	if rep := reports["github"]; rep != nil && len(rep.notes) == 1 {
		_, paste, ok := strings.Cut(rep.notes[0], "then: mcpgate ")
		args, err := exec.Command("bash", "-c", `eval "printf '%s\0' $1"`, "bash", paste).Output()
		if !ok || err != nil {
			t.Fatalf("no command to paste in %q (%v)", rep.notes[0], err)
		}
		want := registry.ItemToJSON(serverItem(t, env, "github"))
		auth, _ := want["auth"].(map[string]any)
		auth["secret"] = "secretsmanager:mcpgate/github"
		mcpgate(t, env, strings.Split(strings.TrimSuffix(string(args), "\x00"), "\x00")...).ok(t)
		if got := registry.ItemToJSON(serverItem(t, env, "github")); !reflect.DeepEqual(got, want) {
			t.Errorf("the pasted command made github %v, want %v", got, want)
		}
	}

	var ids []string
	for _, item := range scanAll(t, env, env.Tables.Servers) {
		if _, err := registry.Parse(item); err != nil {
			t.Errorf("import wrote an invalid item %v: %v", registry.ItemToJSON(item), err)
		}
		ids = append(ids, rawAttr(item, store.ServerIDAttr))
	}
	slices.Sort(ids)
	// deepwiki's first alias in mcp_aliases, docs, is its id: LiteLLM
	// names its tools docs-<tool>.
	if want := []string{"billing", "docs", "github", "internal_search", "petstore", "zapier_mcp"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("imported %q, want %q", ids, want)
	}
	deepwiki, err := registry.Parse(serverItem(t, env, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	if deepwiki.MaxConcurrent != 4 || deepwiki.Timeout.Seconds() != 45 || deepwiki.Transport != registry.TransportHTTP || deepwiki.Description != "Read GitHub repositories' wikis" {
		t.Errorf("deepwiki imported as %+v", deepwiki)
	}
	zapier, err := registry.Parse(serverItem(t, env, "zapier_mcp"))
	if err != nil {
		t.Fatal(err)
	}
	if zapier.Transport != registry.TransportSSE || zapier.Description != "Zapier actions" {
		t.Errorf("zapier_mcp imported as %+v", zapier)
	}

	// Again: what exists is not replaced unless asked; --rename imports
	// the server whose name is not a valid id.
	r = mcpgate(t, env, "import", "litellm", liteLLMConfig, "--rename")
	reports = parseReport(t, r.stdout)
	if rep := reports["deepwiki"]; rep == nil || !strings.Contains(rep.status, `SKIPPED: server "docs" exists already; not replaced (rerun with --overwrite`) {
		t.Errorf("second import reported deepwiki as %+v", rep)
	}
	if rep := reports["brave-search"]; rep == nil || rep.status != `imported as server "brave_search"` {
		t.Errorf("--rename reported brave-search as %+v", rep)
	}
	testkit.UpdateServer(t, env, "docs", "max_concurrent_requests", &types.AttributeValueMemberN{Value: "1"})
	r = mcpgate(t, env, "import", "litellm", liteLLMConfig, "--rename", "--overwrite")
	r.fails(t, 1, "1 of 8 servers skipped")
	if rep := parseReport(t, r.stdout)["deepwiki"]; rep == nil || rep.status != `imported as server "docs"` {
		t.Errorf("--overwrite reported deepwiki as %+v", rep)
	}
	if got := rawAttr(serverItem(t, env, "docs"), "max_concurrent_requests"); got != "4" {
		t.Errorf("after --overwrite, deepwiki's cap is %s, want 4", got)
	}
}

func TestImportLiteLLMClean(t *testing.T) {
	env := storetest.NewEnv(t)
	cfg := writeFile(t, "config.yaml", "mcp_servers:\n  docs:\n    url: https://docs.example/mcp\n    timeout: 2.5\n")
	r := mcpgate(t, env, "import", "litellm", cfg).ok(t)
	if want := "docs: imported as server \"docs\"\nimported 1 of 1 servers; 0 skipped; 0 settings not imported\n"; r.stdout != want {
		t.Errorf("import said:\n%s\nwant:\n%s", r.stdout, want)
	}
	if s, err := registry.Parse(serverItem(t, env, "docs")); err != nil || s.Timeout.Seconds() != 2.5 {
		t.Errorf("docs imported as %+v, %v", s, err)
	}

	for _, tc := range []struct{ doc, want string }{
		{"model_list: []\n", "no mcp_servers section"},
		{"mcp_servers: [a, b]\n", "mcp_servers must map server names to their settings"},
		{"mcp_servers: {a: [\n", "not a valid YAML config"},
	} {
		mcpgate(t, env, "import", "litellm", writeFile(t, "bad.yaml", tc.doc)).fails(t, 1, tc.want)
	}
	// A mapped setting of the wrong type fails the gateway's check, named.
	// An environment reference in a mapped setting is not resolved.
	r = mcpgate(t, env, "import", "litellm", writeFile(t, "typed.yaml",
		"mcp_servers:\n  slow:\n    url: https://slow.example/mcp\n    timeout: soon\n  hidden:\n    url: os.environ/HIDDEN_URL\n"))
	r.fails(t, 1, "2 of 2 servers skipped, 1 settings not imported")
	reports := parseReport(t, r.stdout)
	if rep := reports["slow"]; rep == nil || rep.status != `SKIPPED: timeout: "soon" is not a number` {
		t.Errorf("slow reported as %+v", rep)
	}
	if rep := reports["hidden"]; rep == nil || !strings.Contains(rep.status, "url: missing") ||
		!reflect.DeepEqual(rep.unmapped, []string{"url (an os.environ/ reference; not resolved)"}) {
		t.Errorf("hidden reported as %+v", rep)
	}
}

// TestImportLiteLLMKeyTeam: default_key_generate_params.team_id becomes
// the --team of the keys create command printed, quoted for the shell; a
// team_id the gateway would refuse is reported, not carried over.
func TestImportLiteLLMKeyTeam(t *testing.T) {
	servers := "mcp_servers:\n  docs:\n    url: https://docs.example/mcp\n"
	r := runWith(t, nil, "", "import", "litellm", "--dry-run", writeFile(t, "team.yaml",
		"litellm_settings:\n  default_key_generate_params:\n    team_id: Data Science\n"+servers)).ok(t)
	if !strings.Contains(r.stdout, "mcpgate keys create --servers ID,... --team 'Data Science'\n") {
		t.Errorf("no keys create with the team:\n%s", r.stdout)
	}
	r = runWith(t, nil, "", "import", "litellm", "--dry-run", writeFile(t, "badteam.yaml",
		"litellm_settings:\n  default_key_generate_params:\n    team_id: \" padded\"\n"+servers)).ok(t)
	if !strings.Contains(r.stdout, `team_id " padded" is not a team name mcpgate takes`) || strings.Contains(r.stdout, "--team") {
		t.Errorf("a team_id mcpgate refuses:\n%s", r.stdout)
	}
}

// TestImportLiteLLMMigration covers what a LiteLLM user moving over meets:
// numbers written as strings, mcp_aliases (the first alias of a server is
// its id, later ones and aliases of unknown servers are reported), a name
// that must be renamed (the report gives the tool names agents will see),
// and a local absolute spec_path (imported, with a warning).
func TestImportLiteLLMMigration(t *testing.T) {
	env := storetest.NewEnv(t)
	cfg := writeFile(t, "config.yaml", `
litellm_settings:
  mcp_aliases:
    gh: github_mcp_server
    github_alt: github_mcp_server
    ghost: no_such_server
mcp_servers:
  github_mcp_server:
    url: https://github.example/mcp
    max_concurrent_requests: "3"
    timeout: "2.5"
  zapier-mcp:
    url: https://zapier.example/mcp
  own_alias:
    url: https://own.example/mcp
    alias: mine
  counted:
    url: https://counted.example/mcp
    max_concurrent_requests: three
  local_spec:
    url: https://api.example
    spec_path: /home/me/specs/petstore.json
  packaged_spec:
    url: https://api.example
    spec_path: openapi/petstore.json
`)
	r := mcpgate(t, env, "import", "litellm", cfg, "--rename")
	r.fails(t, 1, "1 of 6 servers skipped, 0 settings not imported")
	reports := parseReport(t, r.stdout)
	expect := func(name, status string, notes ...string) *report {
		t.Helper()
		rep := reports[name]
		if rep == nil || rep.status != status {
			t.Errorf("%s reported %+v, want %q", name, rep, status)
			return &report{}
		}
		for _, n := range notes {
			if !slices.ContainsFunc(rep.notes, func(got string) bool { return strings.Contains(got, n) }) {
				t.Errorf("%s: no note saying %q in %q", name, n, rep.notes)
			}
		}
		return rep
	}
	expect("github_mcp_server", `imported as server "gh"`,
		`imported under its alias "gh" (from mcp_aliases): its tools keep the names agents know, gh-<tool>`,
		`mcp_aliases entry "github_alt" not used`)
	expect("zapier-mcp", `imported as server "zapier_mcp"`,
		"renamed: agents then see its tools on /mcp as zapier_mcp-<tool> instead of zapier-mcp-<tool>")
	expect("own_alias", `imported as server "mine"`, `imported under its alias "mine" (from its alias setting)`)
	expect("counted", `SKIPPED: max_concurrent_requests: "three" is not a number`)
	if rep := expect("local_spec", `imported as server "local_spec"`); len(rep.warnings) != 1 ||
		!strings.Contains(rep.warnings[0], `spec_path "/home/me/specs/petstore.json" is a file on this machine: under Lambda the gateway reads only its deployment package`) {
		t.Errorf("local_spec warnings %q", rep.warnings)
	}
	if rep := expect("packaged_spec", `imported as server "packaged_spec"`); len(rep.warnings) != 0 {
		t.Errorf("a relative spec_path warned: %q", rep.warnings)
	}
	if !strings.Contains(r.stdout, `mcp_aliases: alias "ghost" names "no_such_server", which is not in mcp_servers; ignored`) {
		t.Errorf("the alias of an unknown server is not reported:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "imported 5 of 6 servers; 1 skipped; 0 settings not imported; 1 warnings") {
		t.Errorf("summary:\n%s", r.stdout)
	}
	gh, err := registry.Parse(serverItem(t, env, "gh"))
	if err != nil {
		t.Fatal(err)
	}
	if gh.MaxConcurrent != 3 || gh.Timeout.Seconds() != 2.5 {
		t.Errorf("numbers written as strings imported as cap %d, timeout %v", gh.MaxConcurrent, gh.Timeout)
	}

	// Without --rename the invalid name is skipped, and the report says
	// what --rename would do to the tool names.
	r = mcpgate(t, env, "import", "litellm", cfg, "--dry-run")
	if rep := parseReport(t, r.stdout)["zapier-mcp"]; rep == nil || !strings.Contains(rep.status,
		`suggested id "zapier_mcp" (rerun with --rename to import it under that id; agents then see its tools on /mcp as zapier_mcp-<tool> instead of zapier-mcp-<tool>)`) {
		t.Errorf("zapier-mcp without --rename: %+v", rep)
	}
}
