package template

// These tests run the real SAM translator (python3 aws-sam-translator, what
// CloudFormation runs for `sam deploy`) and cfn-lint over template.yaml,
// then check what CloudFormation would create from the result, conditions
// decided for the parameter values given.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/testkit/missing"
)

// python returns python3 once it has the modules, skipping the test when it
// or they are absent locally (never in CI), and under -short.
func python(t *testing.T, modules ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping under -short: runs python3")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		missing.Skip(t, "python3 is not installed")
	}
	for _, m := range modules {
		if _, err := exec.Command(py, "-c", "import "+m).CombinedOutput(); err != nil {
			missing.Skip(t, fmt.Sprintf("python3 has no module %s (pip install aws-sam-translator cfn-lint)", m))
		}
	}
	return py
}

// validateScript is the one script that checks the template offline, as
// `sam validate --lint` would: make validate runs it, and these tests run
// it to transform the template and to lint it.
const validateScript = "validate.py"

// transformTemplate returns template.yaml transformed by the SAM translator
// (what CloudFormation does with the template's AWS::Serverless
// transform) with the given parameter values.
func transformTemplate(t *testing.T, py string, params map[string]string) map[string]any {
	t.Helper()
	if params == nil {
		params = map[string]string{}
	}
	values, _ := json.Marshal(params)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, validateScript, "--transform", templatePath, string(values))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("SAM translator with %v: %v\n%s", params, err, stderr.Bytes())
	}
	var out map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("translator output: %v\n%s", err, stdout.Bytes())
	}
	return out
}

func TestTemplateSAMTransform(t *testing.T) {
	py := python(t, "samtranslator")
	tests := []struct {
		name   string
		params map[string]string
		// public: the Function URL answers anyone (the gateway checks keys).
		public   bool
		authType string
		timeout  string
		reserved string // "" = no reservation
		days     string
	}{
		{name: "defaults", public: true, authType: "NONE", timeout: "120", reserved: "20", days: "30"},
		{
			name: "AWS_IAM, no reservation",
			params: map[string]string{"FunctionUrlAuthType": "AWS_IAM", "ReservedConcurrency": "",
				"FunctionTimeout": "300", "LogRetentionDays": "7"},
			authType: "AWS_IAM", timeout: "300", days: "7",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := cfnEvaluate(transformTemplate(t, py, tt.params), tt.params,
				map[string]any{"GatewayFunctionUrl.FunctionUrl": functionURL}, false)
			if err != nil {
				t.Fatal(err)
			}
			resources := ev["Resources"].(map[string]any)
			props := func(id, typ string) map[string]any {
				t.Helper()
				res, ok := resources[id].(map[string]any)
				if !ok || res["Type"] != typ {
					t.Fatalf("no %s %s in the transformed template", typ, id)
				}
				return res["Properties"].(map[string]any)
			}

			url := props("GatewayFunctionUrl", "AWS::Lambda::Url")
			if url["AuthType"] != tt.authType || url["TargetFunctionArn"] != "ref:GatewayFunction" {
				t.Errorf("Function URL %v, want AuthType %s on GatewayFunction", url, tt.authType)
			}
			// Every permission the stack grants, by what it allows.
			var urlInvoke, urlOnlyInvoke, sweep, other []string
			for id, r := range resources {
				res := r.(map[string]any)
				if res["Type"] != "AWS::Lambda::Permission" {
					continue
				}
				p := res["Properties"].(map[string]any)
				switch {
				case p["FunctionName"] == "ref:GatewayFunction" && p["Principal"] == "events.amazonaws.com" &&
					p["Action"] == "lambda:InvokeFunction" && p["SourceArn"] == "getatt:GatewayFunctionSweep.Arn":
					// The sweep's schedule, and only it.
					sweep = append(sweep, id)
				case p["FunctionName"] != "ref:GatewayFunction" || p["Principal"] != "*":
					other = append(other, id)
				case p["Action"] == "lambda:InvokeFunctionUrl" && p["FunctionUrlAuthType"] == "NONE":
					urlInvoke = append(urlInvoke, id)
				case p["Action"] == "lambda:InvokeFunction" && p["InvokedViaFunctionUrl"] == true:
					urlOnlyInvoke = append(urlOnlyInvoke, id)
				default:
					// A public permission not limited to the URL would let
					// anyone invoke the function directly.
					t.Errorf("permission %s is public beyond the Function URL: %v", id, p)
				}
			}
			if len(other) > 0 {
				t.Errorf("unexpected permissions %v", other)
			}
			want := 0
			if tt.public {
				want = 1
			}
			if len(urlInvoke) != want || len(urlOnlyInvoke) != want {
				t.Errorf("public URL permissions: InvokeFunctionUrl %v, InvokeFunction via URL %v; want %d of each", urlInvoke, urlOnlyInvoke, want)
			}
			if len(sweep) != 1 {
				t.Errorf("schedule permissions %v, want one", sweep)
			}
			// The schedule sends the sweep to the function once a minute.
			rule := props("GatewayFunctionSweep", "AWS::Events::Rule")
			targets, _ := rule["Targets"].([]any)
			if rule["ScheduleExpression"] != "rate(1 minute)" || len(targets) != 1 ||
				targets[0].(map[string]any)["Arn"] != "getatt:GatewayFunction.Arn" || targets[0].(map[string]any)["Input"] != `{"mcpgate":"sweep"}` {
				t.Errorf("sweep rule %v", rule)
			}
			// Lambda retries no asynchronous invocation of it.
			eic := props("GatewayFunctionEventInvokeConfig", "AWS::Lambda::EventInvokeConfig")
			if eic["FunctionName"] != "ref:GatewayFunction" || fmt.Sprint(eic["MaximumRetryAttempts"]) != "0" || eic["Qualifier"] != "$LATEST" {
				t.Errorf("event invoke config %v, want no retries of $LATEST's", eic)
			}
			// It may invoke itself: a policy on the role SAM made for it
			// (the role the function runs as), naming its ARN; the role's
			// own policies grant no Lambda action.
			role := props("GatewayFunctionRole", "AWS::IAM::Role")
			if fn := props("GatewayFunction", "AWS::Lambda::Function"); fn["Role"] != "getatt:GatewayFunctionRole.Arn" {
				t.Errorf("the function runs as %v, not GatewayFunctionRole", fn["Role"])
			}
			if b, _ := json.Marshal(role["Policies"]); strings.Contains(string(b), "lambda:") {
				t.Errorf("the role's own policies grant Lambda actions: %s", b)
			}
			self := props("GatewaySelfInvokePolicy", "AWS::IAM::Policy")
			if b, _ := json.Marshal(self); !strings.Contains(string(b), `"Roles":["ref:GatewayFunctionRole"]`) ||
				!strings.Contains(string(b), `"Action":["lambda:InvokeFunction"],"Effect":"Allow","Resource":"getatt:GatewayFunction.Arn"`) {
				t.Errorf("self-invoke policy %s", b)
			}

			fn := props("GatewayFunction", "AWS::Lambda::Function")
			if got := fmt.Sprint(fn["Timeout"]); got != tt.timeout {
				t.Errorf("Timeout = %s, want %s", got, tt.timeout)
			}
			// The gateway learns the same timeout from its environment.
			vars := fn["Environment"].(map[string]any)["Variables"].(map[string]any)
			cfg, err := config.Load(func(name string) string {
				if name == "AWS_LAMBDA_RUNTIME_API" {
					return "127.0.0.1:9001"
				}
				v, _ := vars[name].(string)
				return v
			})
			if err != nil {
				t.Errorf("the gateway refuses the template's environment: %v", err)
			}
			if got := fmt.Sprint(cfg.MaxRequest().Seconds()); got != tt.timeout {
				t.Errorf("FUNCTION_TIMEOUT=%v gives the gateway %ss, want %ss", vars["FUNCTION_TIMEOUT"], got, tt.timeout)
			}
			if got, ok := fn["ReservedConcurrentExecutions"]; tt.reserved == "" && ok || tt.reserved != "" && fmt.Sprint(got) != tt.reserved {
				t.Errorf("ReservedConcurrentExecutions = %v (set: %v), want %q", got, ok, tt.reserved)
			}
			logging, _ := fn["LoggingConfig"].(map[string]any)
			if logging["LogGroup"] != "ref:GatewayLogGroup" {
				t.Errorf("LoggingConfig = %v, want the stack's log group", fn["LoggingConfig"])
			}
			if got := fmt.Sprint(props("GatewayLogGroup", "AWS::Logs::LogGroup")["RetentionInDays"]); got != tt.days {
				t.Errorf("log retention = %s days, want %s", got, tt.days)
			}

			outputs := ev["Outputs"].(map[string]any)
			base := strings.TrimSuffix(functionURL, "/")
			for name, want := range map[string]string{"GatewayUrl": base, "McpUrl": base + "/mcp"} {
				out, _ := outputs[name].(map[string]any)
				if out["Value"] != want {
					t.Errorf("output %s = %v, want %s", name, out["Value"], want)
				}
			}
		})
	}
}

// TestTemplateLint runs what make validate runs: the SAM translator with
// the parameters' defaults, then cfn-lint, which must report nothing.
func TestTemplateLint(t *testing.T) {
	py := python(t, "samtranslator", "cfnlint")
	if out, err := validate(t, py, templatePath); err != nil {
		t.Fatalf("%s %s: %v\n%s", validateScript, templatePath, err, out)
	}
}

// TestValidateRefuses: the script fails, saying what is wrong, for a
// template the translator refuses and for one cfn-lint finds fault with.
func TestValidateRefuses(t *testing.T) {
	py := python(t, "samtranslator", "cfnlint")
	good, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	// The function's first property, its runtime, and its events (the
	// task sweep's schedule).
	const fn = "      Description: MCP gateway with a fleet-wide"
	if !bytes.Contains(good, []byte(fn)) || !bytes.Contains(good, []byte("Runtime: provided.al2023")) || !bytes.Contains(good, []byte("      Events:\n")) {
		t.Fatalf("%s has no %q, no provided.al2023 runtime or no function events to break", templatePath, fn)
	}
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"an event the translator does not know", "      Events:\n", "      Events:\n        Bad:\n          Type: NotAnEventType\n",
			"the SAM translator refuses it:\n  Resource with id [GatewayFunction] is invalid. Event with id [Bad] is invalid"},
		{"a runtime cfn-lint does not know", "Runtime: provided.al2023", "Runtime: provided.al9999", "'provided.al9999' is not one of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The broken copy sits beside the template: cfn-lint and the
			// translator read nothing else, but the path is reported.
			bad := filepath.Join(t.TempDir(), "template.yaml")
			if err := os.WriteFile(bad, bytes.Replace(good, []byte(tc.old), []byte(tc.new), 1), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := validate(t, py, bad)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, tc.want) {
				t.Errorf("%s on a template with %s: %v, want exit status 1 and %q\n%s", validateScript, tc.name, err, tc.want, out)
			}
		})
	}
}

// validate runs the validation script on path and returns its output.
func validate(t *testing.T, py, path string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, validateScript, path).CombinedOutput()
	return string(out), err
}

// samConfig reads samconfig.toml's flat tables: "[table]" → key → raw value.
func samConfig(t *testing.T) map[string]map[string]string {
	t.Helper()
	data, err := os.ReadFile("../../samconfig.toml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{"": {}}
	table := ""
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			table = strings.Trim(line, "[]")
			out[table] = map[string]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("samconfig.toml: cannot read %q", line)
			}
			out[table][strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// TestSAMBuildInput checks what `sam build` reads. The function's CodeUri
// is the repository root (the Makefile builds ./functions/gateway with
// internal/), which also holds infra/node_modules; SAM copies a makefile
// function's CodeUri before building unless it builds in source.
func TestSAMBuildInput(t *testing.T) {
	cfg := samConfig(t)
	for _, table := range []string{"default.build.parameters", "default.sync.parameters"} {
		if cfg[table]["build_in_source"] != "true" {
			t.Errorf("samconfig.toml [%s] does not set build_in_source = true", table)
		}
	}
	// SAM's cache hashes all of CodeUri, node_modules included, on every build.
	if cfg["default.build.parameters"]["cached"] == "true" {
		t.Error("samconfig.toml turns SAM's build cache on")
	}
	for table, keys := range cfg {
		if _, ok := keys["region"]; ok {
			t.Errorf("samconfig.toml [%s] hard-codes a region", table)
		}
	}
	fn := gatewayFunction(t, loadTemplate(t))
	if fn.CodeUri == nil || fn.CodeUri.String == nil || *fn.CodeUri.String != "." {
		t.Fatalf("CodeUri = %v, want . (the Makefile builds from the repository root)", fn.CodeUri)
	}

	// What the build reads from the repository: the Makefile, the module
	// files and the Go files of this module's packages the bootstrap needs.
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-tags", "lambda.norpc",
		"-f", `{{if and .Module .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}`,
		"./functions/gateway")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	files := []string{filepath.Join(root, "Makefile"), filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum")}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		dir, names, _ := strings.Cut(line, " ")
		rel, err := filepath.Rel(root, dir)
		if err != nil || !(strings.HasPrefix(rel, "internal"+string(filepath.Separator)) || rel == filepath.Join("functions", "gateway")) {
			t.Errorf("the bootstrap needs %s, outside internal/ and functions/gateway/", dir)
		}
		for name := range strings.FieldsSeq(names) {
			files = append(files, filepath.Join(dir, name))
		}
	}
	var read int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		read += st.Size()
	}
	copied, n := copySize(t, root)
	t.Logf("sam build reads %d files, %d KiB, in place; without build_in_source it would first copy %d files, %.1f MiB",
		len(files), read>>10, n, float64(copied)/(1<<20))
	if read > 4<<20 {
		t.Errorf("the build reads %d bytes of the repository; expected a few hundred KiB of Go source", read)
	}
}

// copySize is what SAM's makefile builder would copy from root when not
// building in source: every file, symbolic links followed, but .git and
// .aws-sam.
func copySize(t *testing.T, root string) (bytes int64, files int) {
	t.Helper()
	var walk func(dir string)
	walk = func(dir string) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			if dir == root && (e.Name() == ".git" || e.Name() == ".aws-sam") {
				continue
			}
			st, err := os.Stat(path) // follows links
			if err != nil {
				continue // a dangling link
			}
			if st.IsDir() {
				walk(path)
				continue
			}
			bytes += st.Size()
			files++
		}
	}
	walk(root)
	return bytes, files
}
