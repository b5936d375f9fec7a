package main

// sam validate cannot run here, so this test loads template.yaml with
// goformation and checks it against what the code actually uses: the
// runtime and build settings, the tables' key schemas, every Ref and GetAtt
// target, the environment the gateway reads, and IAM actions derived from
// the DynamoDB interfaces each package declares.

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"
	"github.com/awslabs/goformation/v7/cloudformation/serverless"
	"github.com/awslabs/goformation/v7/intrinsics"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
)

const templatePath = "../../template.yaml"

// loadTemplate parses the template, rendering Ref and GetAtt as markers
// ("ref:Name", "getatt:Name.Attr") so references can be checked.
func loadTemplate(t *testing.T) *cloudformation.Template {
	t.Helper()
	tpl, err := goformation.OpenWithOptions(templatePath, &intrinsics.ProcessorOptions{
		IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{
			"Ref": func(_ string, input, _ any) any { return "ref:" + input.(string) },
			"Fn::GetAtt": func(_ string, input, _ any) any {
				switch v := input.(type) {
				case []any:
					parts := make([]string, len(v))
					for i, p := range v {
						parts[i] = p.(string)
					}
					return "getatt:" + strings.Join(parts, ".")
				case string:
					return "getatt:" + v
				}
				return nil
			},
		},
	})
	if err != nil {
		t.Fatalf("parse %s: %v", templatePath, err)
	}
	return tpl
}

func gatewayFunction(t *testing.T, tpl *cloudformation.Template) *serverless.Function {
	t.Helper()
	fn, err := tpl.GetServerlessFunctionWithName("GatewayFunction")
	if err != nil {
		t.Fatal(err)
	}
	return fn
}

func TestTemplateFunction(t *testing.T) {
	tpl := loadTemplate(t)
	fn := gatewayFunction(t, tpl)
	check := func(name string, got *string, want string) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s = %v, want %q", name, got, want)
		}
	}
	check("Runtime", fn.Runtime, "provided.al2023")
	check("Handler", fn.Handler, "bootstrap")
	if !slices.Equal(fn.Architectures, []string{"arm64"}) {
		t.Errorf("Architectures = %v, want [arm64]", fn.Architectures)
	}
	if fn.AWSCloudFormationMetadata["BuildMethod"] != "makefile" {
		t.Errorf("Metadata.BuildMethod = %v, want makefile", fn.AWSCloudFormationMetadata["BuildMethod"])
	}
	if fn.FunctionUrlConfig == nil {
		t.Fatal("no FunctionUrlConfig")
	}
	check("FunctionUrlConfig.InvokeMode", fn.FunctionUrlConfig.InvokeMode, "RESPONSE_STREAM")
	if fn.Timeout == nil || *fn.Timeout < 10 || *fn.Timeout > 900 {
		t.Errorf("Timeout = %v, want 10..900 s", fn.Timeout)
	}

	// SAM's makefile builder runs build-<LogicalId> with ARTIFACTS_DIR.
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	target := regexp.MustCompile(`(?m)^build-GatewayFunction:`)
	if !target.Match(mk) {
		t.Error("Makefile has no build-GatewayFunction target")
	}
	for _, want := range []string{"$(ARTIFACTS_DIR)/bootstrap", "GOARCH=arm64", "-tags lambda.norpc"} {
		if !strings.Contains(string(mk), want) {
			t.Errorf("Makefile build does not use %s", want)
		}
	}
}

// tableLogicalIDs maps the environment variable of each table to its
// resource in the template.
var tableLogicalIDs = map[string]string{
	store.EnvServersTable: "ServersTable",
	store.EnvLeasesTable:  "LeasesTable",
	store.EnvKeysTable:    "KeysTable",
}

func TestTemplateTables(t *testing.T) {
	tpl := loadTemplate(t)
	defs := store.Tables{Servers: "ServersTable", Leases: "LeasesTable", Keys: "KeysTable"}.Definitions()
	for _, def := range defs {
		id := *def.TableName
		tbl, err := tpl.GetDynamoDBTableWithName(id)
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		if tbl.BillingMode == nil || *tbl.BillingMode != "PAY_PER_REQUEST" {
			t.Errorf("%s: BillingMode = %v, want PAY_PER_REQUEST", id, tbl.BillingMode)
		}
		if len(tbl.KeySchema) != 1 || tbl.KeySchema[0].AttributeName != *def.KeySchema[0].AttributeName || tbl.KeySchema[0].KeyType != "HASH" {
			t.Errorf("%s: key schema %+v, want HASH %s", id, tbl.KeySchema, *def.KeySchema[0].AttributeName)
		}
		if len(tbl.AttributeDefinitions) != 1 || tbl.AttributeDefinitions[0].AttributeType != "S" {
			t.Errorf("%s: attribute definitions %+v", id, tbl.AttributeDefinitions)
		}
	}
	leases, _ := tpl.GetDynamoDBTableWithName("LeasesTable")
	if ttl := leases.TimeToLiveSpecification; ttl == nil || !ttl.Enabled || ttl.AttributeName == nil || *ttl.AttributeName != store.TTLAttr {
		t.Errorf("LeasesTable TTL = %+v, want enabled on %q", ttl, store.TTLAttr)
	}
}

func TestTemplateEnvironment(t *testing.T) {
	tpl := loadTemplate(t)
	fn := gatewayFunction(t, tpl)
	vars := fn.Environment.Variables

	// Every variable the template sets must be one the gateway reads.
	read := map[string]bool{}
	_, _ = loadConfig(func(name string) string { read[name] = true; return "" })
	for name := range vars {
		if !read[name] {
			t.Errorf("template sets %s, which the gateway never reads", name)
		}
	}
	if want := "secretsmanager:ref:RequestStateSecret"; vars["REQUEST_STATE_KEY"] != want {
		t.Errorf("REQUEST_STATE_KEY = %q, want %q (the secret the template creates)", vars["REQUEST_STATE_KEY"], want)
	}
	for env, id := range tableLogicalIDs {
		if vars[env] != "ref:"+id {
			t.Errorf("%s = %q, want !Ref %s", env, vars[env], id)
		}
	}
	// Every Ref names a parameter or resource.
	for name, v := range vars {
		if ref, ok := strings.CutPrefix(v, "ref:"); ok {
			if _, isParam := tpl.Parameters[ref]; !isParam {
				if _, isRes := tpl.Resources[ref]; !isRes {
					t.Errorf("%s refers to unknown %s", name, ref)
				}
			}
		}
	}
}

// methods lists the DynamoDB operations an interface declares, as IAM
// actions.
func methods(iface any) []string {
	typ := reflect.TypeOf(iface).Elem()
	var out []string
	for i := range typ.NumMethod() {
		out = append(out, "dynamodb:"+typ.Method(i).Name)
	}
	sort.Strings(out)
	return out
}

func TestTemplateIAM(t *testing.T) {
	tpl := loadTemplate(t)
	fn := gatewayFunction(t, tpl)
	if fn.Policies == nil || fn.Policies.IAMPolicyDocumentArray == nil {
		t.Fatal("GatewayFunction has no inline policy documents")
	}
	// What each table's code may call, from the interfaces it declares
	// (the leases table also holds the tool catalog); and the secret.
	leases := slices.Compact(slices.Sorted(slices.Values(append(methods((*lease.API)(nil)), methods((*catalog.API)(nil))...))))
	want := map[string][]string{
		"getatt:ServersTable.Arn": methods((*registry.API)(nil)),
		"getatt:KeysTable.Arn":    methods((*auth.API)(nil)),
		"getatt:LeasesTable.Arn":  leases,
		"ref:RequestStateSecret":  {"secretsmanager:" + reflect.TypeOf((*secretsAPI)(nil)).Elem().Method(0).Name},
	}
	got := map[string][]string{}
	for _, doc := range *fn.Policies.IAMPolicyDocumentArray {
		for _, st := range doc.Statement {
			m := st.(map[string]any)
			if m["Effect"] != "Allow" {
				t.Errorf("statement %v is not Allow", m)
			}
			res, ok := m["Resource"].(string)
			if !ok {
				t.Errorf("statement %v: Resource must be one table ARN", m)
				continue
			}
			for _, a := range m["Action"].([]any) {
				action := a.(string)
				if strings.Contains(action, "*") {
					t.Errorf("wildcard action %s", action)
				}
				got[res] = append(got[res], action)
			}
		}
	}
	for res := range got {
		sort.Strings(got[res])
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("IAM actions per resource:\n got  %v\n want %v", got, want)
	}
	// Every GetAtt names a resource of the template.
	for res := range got {
		id := strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(res, "getatt:"), ".Arn"), "ref:")
		if _, ok := tpl.Resources[id]; !ok {
			t.Errorf("policy refers to unknown resource %s", id)
		}
	}
}

func TestTemplateOutputs(t *testing.T) {
	tpl := loadTemplate(t)
	out, ok := tpl.Outputs["GatewayUrl"]
	if !ok {
		t.Fatal("no GatewayUrl output")
	}
	// SAM names the Function URL resource <FunctionLogicalId>Url.
	if v := out.Value; v != "getatt:GatewayFunctionUrl.FunctionUrl" {
		t.Errorf("GatewayUrl = %v, want !GetAtt GatewayFunctionUrl.FunctionUrl", v)
	}
}

// TestTemplateMetrics checks the dashboard and alarms name the namespace,
// dimension and metrics the gateway's EMF records carry.
func TestTemplateMetrics(t *testing.T) {
	tpl := loadTemplate(t)
	known := map[string]bool{}
	for _, m := range []string{metrics.MetricLatency, metrics.MetricQueueWait, metrics.MetricInFlight, metrics.MetricShed,
		metrics.MetricQueueTimeout, metrics.MetricCircuitOpen, metrics.MetricStoreError, metrics.MetricUpstreamTimeout,
		metrics.MetricUpstreamError} {
		known[m] = true
	}
	query := regexp.MustCompile(`^SELECT SUM\((\w+)\) FROM SCHEMA\("([^"]+)", (\w+)\)$`)
	alarms := 0
	for name, res := range tpl.Resources {
		if res.AWSCloudFormationType() != "AWS::CloudWatch::Alarm" {
			continue
		}
		alarms++
		a, err := tpl.GetCloudWatchAlarmWithName(name)
		if err != nil {
			t.Fatal(err)
		}
		if a.AWSCloudFormationCondition != "WantAlarms" {
			t.Errorf("%s: condition %q, want WantAlarms", name, a.AWSCloudFormationCondition)
		}
		for _, m := range a.Metrics {
			got := query.FindStringSubmatch(*m.Expression)
			if got == nil || !known[got[1]] || got[2] != metrics.DefaultNamespace || got[3] != metrics.DimServerID {
				t.Errorf("%s: expression %q does not query a metric the gateway emits", name, *m.Expression)
			}
		}
	}
	if alarms == 0 {
		t.Error("no alarms")
	}
	dash, err := tpl.GetCloudWatchDashboardWithName("Dashboard")
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`\$\{AWS::\w+\}`).ReplaceAllString(dash.DashboardBody, "x")
	if !json.Valid([]byte(body)) {
		t.Errorf("dashboard body is not JSON:\n%s", dash.DashboardBody)
	}
	graphed := regexp.MustCompile(`MetricName=\\"(\w+)\\"`).FindAllStringSubmatch(dash.DashboardBody, -1)
	if len(graphed) == 0 {
		t.Error("the dashboard graphs no metric")
	}
	for _, m := range graphed {
		if !known[m[1]] {
			t.Errorf("dashboard graphs %s, which the gateway does not emit", m[1])
		}
	}
	if !strings.Contains(dash.DashboardBody, "{"+metrics.DefaultNamespace+","+metrics.DimServerID+"}") {
		t.Error("dashboard does not search the gateway's namespace and dimension")
	}
}
