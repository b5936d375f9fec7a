package template

// sam validate cannot run here, so this test loads template.yaml with
// goformation and checks it against what the code actually uses: the
// runtime and build settings, the tables' key schemas, every Ref and GetAtt
// target, the environment the gateway reads, and IAM actions derived from
// the DynamoDB interfaces each package declares.

import (
	"encoding/json"
	"fmt"
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
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/secret"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/tasks"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

const templatePath = "../../template.yaml"

// functionURL is the Function URL the tests give the GatewayFunctionUrl
// that SAM generates: Lambda's form, with its trailing slash.
const functionURL = "https://abcdefghij.lambda-url.us-east-1.on.aws/"

// readTemplate returns the template as JSON-decoded data, intrinsics in
// their long form and unevaluated.
func readTemplate(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := intrinsics.ProcessYAML(data, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		t.Fatalf("parse %s: %v", templatePath, err)
	}
	var tpl map[string]any
	if err := json.Unmarshal(raw, &tpl); err != nil {
		t.Fatal(err)
	}
	return tpl
}

// evaluateTemplate returns tpl as CloudFormation would deploy it with the
// given parameter values (defaults for the others). Resource Refs render
// as "ref:Name" and GetAtts as "getatt:Name.Attr", so references can be
// checked.
func evaluateTemplate(t *testing.T, tpl map[string]any, params map[string]string, keepAll bool) map[string]any {
	t.Helper()
	ev, err := cfnEvaluate(tpl, params, map[string]any{"GatewayFunctionUrl.FunctionUrl": functionURL}, keepAll)
	if err != nil {
		t.Fatalf("evaluate %s with %v: %v", templatePath, params, err)
	}
	return ev
}

// newerProperties are properties goformation's types do not know yet
// (resource → property); loadTemplate drops them, and TestTemplateDeploy
// checks them on the evaluated template.
var newerProperties = map[string][]string{
	"GatewayFunction":               {"LoggingConfig", "ReservedConcurrentExecutions"},
	"GatewayPublicInvokePermission": {"InvokedViaFunctionUrl"},
}

// loadTemplate parses the template into goformation's types, evaluated
// with the default parameters but keeping every conditional resource.
func loadTemplate(t *testing.T) *cloudformation.Template {
	t.Helper()
	ev := evaluateTemplate(t, readTemplate(t), nil, true)
	resources := ev["Resources"].(map[string]any)
	for id, props := range newerProperties {
		res, ok := resources[id].(map[string]any)
		if !ok {
			t.Fatalf("no resource %s", id)
		}
		for _, p := range props {
			delete(res["Properties"].(map[string]any), p)
		}
	}
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := goformation.ParseJSONWithOptions(data, &intrinsics.ProcessorOptions{NoProcess: true})
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
	store.EnvTasksTable:   "TasksTable",
}

func TestTemplateTables(t *testing.T) {
	tpl := loadTemplate(t)
	defs := store.Tables{Servers: "ServersTable", Leases: "LeasesTable", Keys: "KeysTable", Tasks: "TasksTable"}.Definitions()
	if len(defs) != 4 {
		t.Fatalf("%d table definitions, want 4", len(defs))
	}
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
	for _, id := range []string{"LeasesTable", "TasksTable"} {
		tbl, _ := tpl.GetDynamoDBTableWithName(id)
		if ttl := tbl.TimeToLiveSpecification; ttl == nil || !ttl.Enabled || ttl.AttributeName == nil || *ttl.AttributeName != store.TTLAttr {
			t.Errorf("%s TTL = %+v, want enabled on %q", id, ttl, store.TTLAttr)
		}
	}
	// The table the tasks package writes: its partition key and TTL
	// attribute are the store's.
	if tasks.AttrID != store.TaskIDAttr || tasks.AttrTTL != store.TTLAttr {
		t.Errorf("tasks writes %s and %s, the table has %s and %s", tasks.AttrID, tasks.AttrTTL, store.TaskIDAttr, store.TTLAttr)
	}
}

func TestTemplateEnvironment(t *testing.T) {
	tpl := loadTemplate(t)
	fn := gatewayFunction(t, tpl)
	vars := fn.Environment.Variables

	// Every variable the template sets must be one the gateway reads.
	read := map[string]bool{}
	_, _ = config.Load(func(name string) string { read[name] = true; return "" })
	for _, name := range tracing.EnvVars {
		read[name] = true
	}
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
	// Every Ref names a parameter or resource, and every If a condition.
	checkRef := func(name, v string) {
		if ref, ok := strings.CutPrefix(v, "ref:"); ok {
			if _, isParam := tpl.Parameters[ref]; !isParam {
				if _, isRes := tpl.Resources[ref]; !isRes {
					t.Errorf("%s refers to unknown %s", name, ref)
				}
			}
		}
	}
	for name, v := range vars {
		checkRef(name, v)
		if cond, then, els, ok := ifParts(v); ok {
			if _, known := tpl.Conditions[cond]; !known {
				t.Errorf("%s depends on unknown condition %s", name, cond)
			}
			checkRef(name, then)
			checkRef(name, els)
		}
	}
}

// ifParts splits an If marker into its condition and branches.
func ifParts(v string) (cond, then, els string, ok bool) {
	raw, found := strings.CutPrefix(v, "if:")
	if !found {
		return "", "", "", false
	}
	var parts []string
	if json.Unmarshal([]byte(raw), &parts) != nil || len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// TestTemplateIdentity: the OAuth settings are parameters passed to the
// gateway, off by default; the optional Cognito quick start wires its
// issuer, app client and scopes so that the gateway grants what Cognito
// issues.
func TestTemplateIdentity(t *testing.T) {
	tpl := loadTemplate(t)
	param := func(name string) string {
		p, ok := tpl.Parameters[name]
		if !ok {
			t.Fatalf("no parameter %s", name)
		}
		d, _ := p.Default.(string)
		return d
	}
	defaults := map[string]string{
		"OAUTH_ISSUER": param("OAuthIssuer"), "OAUTH_AUDIENCE": param("OAuthAudience"),
		"OAUTH_RESOURCE_URL": param("OAuthResourceUrl"), "OAUTH_JWKS_URL": param("OAuthJwksUrl"),
		"OAUTH_SCOPE_PREFIX": param("OAuthScopePrefix"), "OAUTH_TEAM_CLAIM": param("OAuthTeamClaim"), "IAM_GRANTS": param("IamGrants"),
	}
	if defaults["OAUTH_ISSUER"] != "" || param("CognitoQuickStart") != "false" || defaults["IAM_GRANTS"] != "" || defaults["OAUTH_TEAM_CLAIM"] != "" {
		t.Error("OAuth, the Cognito quick start or IAM grants are on by default")
	}
	if defaults["OAUTH_SCOPE_PREFIX"] != auth.DefaultScopePrefix {
		t.Errorf("OAuthScopePrefix defaults to %q, want %q", defaults["OAUTH_SCOPE_PREFIX"], auth.DefaultScopePrefix)
	}
	const cognito = "WantCognito"
	// The environment as CloudFormation would deploy it with params.
	envWith := func(params map[string]string) map[string]any {
		ev := evaluateTemplate(t, readTemplate(t), params, false)
		fn := ev["Resources"].(map[string]any)["GatewayFunction"].(map[string]any)["Properties"].(map[string]any)
		return fn["Environment"].(map[string]any)["Variables"].(map[string]any)
	}
	given := map[string]string{
		"OAuthIssuer": "https://idp.example.com", "OAuthAudience": "api://gw", "OAuthResourceUrl": "https://gw.example.com",
		"OAuthJwksUrl": "https://idp.example.com/jwks", "OAuthScopePrefix": "gw:", "OAuthTeamClaim": "custom:team", "IamGrants": "arn:aws:iam::123456789012:role/a=demo",
	}
	env := envWith(given)
	for name, p := range map[string]string{"OAUTH_ISSUER": "OAuthIssuer", "OAUTH_AUDIENCE": "OAuthAudience", "OAUTH_RESOURCE_URL": "OAuthResourceUrl",
		"OAUTH_JWKS_URL": "OAuthJwksUrl", "OAUTH_SCOPE_PREFIX": "OAuthScopePrefix", "OAUTH_TEAM_CLAIM": "OAuthTeamClaim", "IAM_GRANTS": "IamGrants"} {
		if env[name] != given[p] {
			t.Errorf("%s = %v with %s=%q, want the parameter", name, env[name], p, given[p])
		}
	}
	// The quick start's issuer, audience and scope prefix win over the
	// parameters. Cognito's issuer is
	// https://cognito-idp.<region>.amazonaws.com/<pool id>.
	given["CognitoQuickStart"] = "true"
	on := envWith(given)
	if on["OAUTH_ISSUER"] != "https://cognito-idp.us-east-1.amazonaws.com/ref:CognitoUserPool" {
		t.Errorf("quick start issuer %v", on["OAUTH_ISSUER"])
	}
	if on["OAUTH_AUDIENCE"] != "ref:CognitoAgentClient" {
		t.Errorf("quick start audience %v, want the app client's id", on["OAUTH_AUDIENCE"])
	}

	for _, id := range []string{"CognitoUserPool", "CognitoDomain", "CognitoResourceServer", "CognitoAgentClient"} {
		res, ok := tpl.Resources[id]
		if !ok {
			t.Fatalf("no %s", id)
		}
		if c := reflect.ValueOf(res).Elem().FieldByName("AWSCloudFormationCondition").String(); c != cognito {
			t.Errorf("%s: condition %q, want %s", id, c, cognito)
		}
	}
	rs, err := tpl.GetCognitoUserPoolResourceServerWithName("CognitoResourceServer")
	if err != nil {
		t.Fatal(err)
	}
	// Cognito writes scopes as <identifier>/<name>: the prefix the gateway
	// is given must be <identifier>/, and the client's scopes must grant.
	if on["OAUTH_SCOPE_PREFIX"] != any(rs.Identifier+"/") {
		t.Errorf("quick start scope prefix %q, want %q", on["OAUTH_SCOPE_PREFIX"], rs.Identifier+"/")
	}
	names := map[string]bool{}
	for _, s := range rs.Scopes {
		names[rs.Identifier+"/"+s.ScopeName] = true
	}
	if !names[rs.Identifier+"/"+auth.AllServers] {
		t.Errorf("resource server scopes %v lack %s/*", names, rs.Identifier)
	}
	client, err := tpl.GetCognitoUserPoolClientWithName("CognitoAgentClient")
	if err != nil {
		t.Fatal(err)
	}
	if len(client.AllowedOAuthScopes) == 0 || !slices.Equal(client.AllowedOAuthFlows, []string{"client_credentials"}) ||
		client.GenerateSecret == nil || !*client.GenerateSecret {
		t.Errorf("app client: flows %v, scopes %v, secret %v", client.AllowedOAuthFlows, client.AllowedOAuthScopes, client.GenerateSecret)
	}
	for _, s := range client.AllowedOAuthScopes {
		if !names[s] {
			t.Errorf("app client scope %q is not one of the resource server's", s)
		}
	}
	for _, out := range []string{"CognitoIssuer", "CognitoTokenUrl", "CognitoAgentClientId"} {
		if o, ok := tpl.Outputs[out]; !ok || o.Condition == nil || *o.Condition != cognito {
			t.Errorf("output %s missing or not under %s", out, cognito)
		}
	}

	// The gateway starts with either set of values.
	for mode, values := range map[string]map[string]string{
		"defaults": defaults,
		"quick start": {
			"OAUTH_ISSUER":       "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example",
			"OAUTH_AUDIENCE":     "4example0client0id",
			"OAUTH_SCOPE_PREFIX": fmt.Sprint(on["OAUTH_SCOPE_PREFIX"]),
		},
	} {
		get := func(name string) string {
			if v, ok := values[name]; ok {
				return v
			}
			return map[string]string{"SERVERS_TABLE": "s", "LEASES_TABLE": "l", "KEYS_TABLE": "k", "GATEWAY_ADDR": "127.0.0.1:0"}[name]
		}
		if _, err := config.Load(get); err != nil {
			t.Errorf("%s: %v", mode, err)
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
		"getatt:TasksTable.Arn":   methods((*tasks.API)(nil)),
		"ref:RequestStateSecret":  {"secretsmanager:" + reflect.TypeOf((*secret.SecretsManagerAPI)(nil)).Elem().Method(0).Name},
	}
	got := map[string][]string{}
	for _, doc := range *fn.Policies.IAMPolicyDocumentArray {
		for _, st := range doc.Statement {
			m := st.(map[string]any)
			if actions, _ := m["Action"].([]any); len(actions) == 0 || !strings.HasPrefix(actions[0].(string), "dynamodb:") && m["Resource"] != "ref:RequestStateSecret" {
				continue // TestTemplateSecretsAccess
			}
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
	// SAM names the Function URL resource <FunctionLogicalId>Url; its URL
	// ends in "/", the outputs do not, so "${GatewayUrl}/mcp" works.
	base := strings.TrimSuffix(functionURL, "/")
	for name, want := range map[string]any{
		"GatewayUrl":       base,
		"McpUrl":           base + "/mcp",
		"LogGroupName":     "ref:GatewayLogGroup",
		"ServersTableName": "ref:ServersTable",
		"LeasesTableName":  "ref:LeasesTable",
		"KeysTableName":    "ref:KeysTable",
		"TasksTableName":   "ref:TasksTable",
	} {
		out, ok := tpl.Outputs[name]
		if !ok {
			t.Errorf("no %s output", name)
			continue
		}
		if out.Value != want {
			t.Errorf("%s = %v, want %v", name, out.Value, want)
		}
	}
}

// TestTemplateMetrics checks the alarms are behind CreateAlarms (and
// notify only with AlarmEmail) and the dashboard's body is JSON that
// searches the gateway's namespace; TestTemplateNamesOnlyEmittedMetrics
// checks every metric they name against what the gateway writes.
func TestTemplateMetrics(t *testing.T) {
	tpl := loadTemplate(t)
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
	if !strings.Contains(dash.DashboardBody, "{"+metrics.DefaultNamespace+","+metrics.DimServerID+"}") {
		t.Error("dashboard does not search the gateway's namespace and dimension")
	}
	for _, tc := range []struct {
		params      map[string]string
		alarms, sns bool
	}{
		{nil, true, false},
		{map[string]string{"AlarmEmail": "ops@example.com"}, true, true},
		{map[string]string{"CreateAlarms": "false", "AlarmEmail": "ops@example.com"}, false, false},
	} {
		ev := evaluateTemplate(t, readTemplate(t), tc.params, false)
		res := ev["Resources"].(map[string]any)
		_, shed := res["ShedAlarm"]
		_, topic := res["AlarmTopic"]
		if shed != tc.alarms || topic != tc.sns {
			t.Errorf("with %v: alarms %v, SNS topic %v; want %v, %v", tc.params, shed, topic, tc.alarms, tc.sns)
		}
		if shed {
			props := res["ShedAlarm"].(map[string]any)["Properties"].(map[string]any)
			if _, acts := props["AlarmActions"]; acts != tc.sns {
				t.Errorf("with %v: the alarms notify: %v; want %v", tc.params, acts, tc.sns)
			}
		}
	}
}

// TestTemplateTracesAccess: the function may send spans to the X-Ray OTLP
// endpoint, which authorizes them as xray:PutTraceSegments, and nothing
// more of X-Ray.
func TestTemplateTracesAccess(t *testing.T) {
	fn := gatewayFunction(t, loadTemplate(t))
	want := map[string]any{"Effect": "Allow", "Action": []any{"xray:PutTraceSegments"}, "Resource": "*"}
	var got []map[string]any
	for _, doc := range *fn.Policies.IAMPolicyDocumentArray {
		for _, st := range doc.Statement {
			m := st.(map[string]any)
			actions, _ := m["Action"].([]any)
			if slices.ContainsFunc(actions, func(a any) bool { s, _ := a.(string); return strings.HasPrefix(s, "xray:") }) {
				got = append(got, m)
			}
		}
	}
	if len(got) != 1 || got[0]["Sid"] != "WriteTraces" {
		t.Fatalf("X-Ray statements %v, want one, WriteTraces", got)
	}
	delete(got[0], "Sid")
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("WriteTraces:\n got  %v\n want %v", got[0], want)
	}
}

// actions lists the operations an AWS client interface declares, as IAM
// actions of service.
func actions(service string, iface any) []any {
	typ := reflect.TypeOf(iface).Elem()
	var out []any
	for i := range typ.NumMethod() {
		out = append(out, service+":"+typ.Method(i).Name)
	}
	return out
}

// TestTemplateSecretsAccess: the function may read exactly the secrets and
// parameters under the name prefixes, with exactly the operations the
// resolver declares, and decrypt them only through those services.
func TestTemplateSecretsAccess(t *testing.T) {
	tpl := loadTemplate(t)
	fn := gatewayFunction(t, tpl)
	const (
		secrets = "arn:aws:secretsmanager:us-east-1:123456789012:secret:mcpgate/*"
		params  = "arn:aws:ssm:us-east-1:123456789012:parameter/mcpgate/*"
	)
	want := map[string]map[string]any{
		"ReadUpstreamSecrets":    {"Effect": "Allow", "Action": actions("secretsmanager", (*secret.SecretsManagerAPI)(nil)), "Resource": secrets},
		"ReadUpstreamParameters": {"Effect": "Allow", "Action": actions("ssm", (*secret.SSMAPI)(nil)), "Resource": params},
		"DecryptUpstreamSecrets": {"Effect": "Allow", "Action": []any{"kms:Decrypt"}, "Resource": "*", "Condition": map[string]any{
			"StringEquals": map[string]any{"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"},
			"StringLike":   map[string]any{"kms:EncryptionContext:SecretARN": secrets},
		}},
		"DecryptUpstreamParameters": {"Effect": "Allow", "Action": []any{"kms:Decrypt"}, "Resource": "*", "Condition": map[string]any{
			"StringEquals": map[string]any{"kms:ViaService": "ssm.us-east-1.amazonaws.com"},
			"StringLike":   map[string]any{"kms:EncryptionContext:PARAMETER_ARN": params},
		}},
	}
	got := map[string]map[string]any{}
	for _, doc := range *fn.Policies.IAMPolicyDocumentArray {
		for _, st := range doc.Statement {
			m := st.(map[string]any)
			if sid, _ := m["Sid"].(string); want[sid] != nil {
				delete(m, "Sid")
				got[sid] = m
			}
		}
	}
	for sid, w := range want {
		if !reflect.DeepEqual(got[sid], w) {
			t.Errorf("statement %s:\n got  %v\n want %v", sid, got[sid], w)
		}
	}
	// The prefixes cannot be empty or lack the final slash (mcpgate would
	// also grant mcpgate-prod/...).
	for name, cases := range map[string]map[string]bool{
		"SecretsPrefix":    {"mcpgate/": true, "teams/a/mcpgate/": true, "": false, "mcpgate": false, "/mcpgate/": false, "*/": false},
		"ParametersPrefix": {"/mcpgate/": true, "mcpgate/": true, "/a/b/": true, "": false, "/": false, "/mcpgate": false, "/*/": false},
	} {
		p := tpl.Parameters[name]
		re := regexp.MustCompile(*p.AllowedPattern)
		for v, ok := range cases {
			if re.MatchString(v) != ok {
				t.Errorf("%s %q accepted = %v, want %v", name, v, !ok, ok)
			}
		}
	}
}

// TestTemplateTasks: the tasks table's settings reach the gateway within
// the bounds it accepts; the function may invoke itself, exactly, from a
// policy of its own on the role SAM makes (not from its Policies, which
// would be a circular reference); a schedule sends it the sweep once a
// minute; and Lambda retries no asynchronous invocation.
func TestTemplateTasks(t *testing.T) {
	tpl := loadTemplate(t)
	fn := gatewayFunction(t, tpl)
	vars := fn.Environment.Variables
	// A Number parameter's value, as the string an environment takes.
	for _, n := range []string{"", "300000"} {
		var params map[string]string
		want := fmt.Sprint(tasks.DefaultMaxResultBytes)
		if n != "" {
			params, want = map[string]string{"MaxTaskResultBytes": n}, n
		}
		ev := evaluateTemplate(t, readTemplate(t), params, false)
		env := ev["Resources"].(map[string]any)["GatewayFunction"].(map[string]any)["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
		if env["MAX_TASK_RESULT_BYTES"] != want {
			t.Errorf("MaxTaskResultBytes=%q: MAX_TASK_RESULT_BYTES = %v, want %s", n, env["MAX_TASK_RESULT_BYTES"], want)
		}
	}
	if _, set := vars["TASK_WORKER_FUNCTION"]; set {
		t.Error("the template sets TASK_WORKER_FUNCTION: the function cannot name itself in its own environment (a circular reference); the gateway defaults it to AWS_LAMBDA_FUNCTION_NAME")
	}
	p := tpl.Parameters["MaxTaskResultBytes"]
	if p.Type != "Number" || fmt.Sprint(p.Default) != fmt.Sprint(tasks.DefaultMaxResultBytes) ||
		p.MinValue == nil || *p.MinValue != config.MinTaskResultBytes || p.MaxValue == nil || *p.MaxValue != tasks.MaxResultBytesLimit {
		t.Errorf("MaxTaskResultBytes: %s, default %v, range %v..%v; want Number, %d, %d..%d", p.Type, p.Default,
			deref(p.MinValue), deref(p.MaxValue), tasks.DefaultMaxResultBytes, config.MinTaskResultBytes, tasks.MaxResultBytesLimit)
	}
	// The range is what the gateway accepts, no more and no less.
	for n, ok := range map[int]bool{config.MinTaskResultBytes: true, config.MinTaskResultBytes - 1: false, tasks.MaxResultBytesLimit: true, tasks.MaxResultBytesLimit + 1: false} {
		_, err := config.Load(func(name string) string {
			return map[string]string{"SERVERS_TABLE": "s", "LEASES_TABLE": "l", "KEYS_TABLE": "k", "TASKS_TABLE": "t",
				"GATEWAY_ADDR": "127.0.0.1:0", "MAX_TASK_RESULT_BYTES": fmt.Sprint(n)}[name]
		})
		if (err == nil) != ok {
			t.Errorf("MAX_TASK_RESULT_BYTES=%d: gateway error %v, want accepted %v", n, err, ok)
		}
	}

	// Invoking itself, and nothing more.
	pol, err := tpl.GetIAMPolicyWithName("GatewaySelfInvokePolicy")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pol.Roles, []string{"ref:GatewayFunctionRole"}) {
		t.Errorf("self-invoke policy attached to %v, want the function's role", pol.Roles)
	}
	doc, _ := json.Marshal(pol.PolicyDocument)
	want := `{"Statement":[{"Action":["lambda:InvokeFunction"],"Effect":"Allow","Resource":"getatt:GatewayFunction.Arn","Sid":"StartTaskWorkers"}],"Version":"2012-10-17"}`
	if string(doc) != want {
		t.Errorf("self-invoke policy:\n got  %s\n want %s", doc, want)
	}
	for _, d := range *fn.Policies.IAMPolicyDocumentArray {
		if b, _ := json.Marshal(d); strings.Contains(string(b), "lambda:") {
			t.Errorf("the function's own Policies grant Lambda actions: %s", b)
		}
	}

	// The sweep, once a minute, with the payload the gateway knows.
	ev, ok := fn.Events["Sweep"]
	if !ok || ev.Type != "Schedule" || ev.Properties == nil || ev.Properties.ScheduleEvent == nil {
		t.Fatalf("no Schedule event Sweep: %+v", fn.Events)
	}
	sched := ev.Properties.ScheduleEvent
	if sched.Schedule != "rate(1 minute)" || sched.Input == nil || *sched.Input != `{"mcpgate":"sweep"}` {
		t.Errorf("Sweep: schedule %q, input %v; want rate(1 minute) and {\"mcpgate\":\"sweep\"}", sched.Schedule, deref(sched.Input))
	}
	if len(fn.Events) != 1 {
		t.Errorf("events %v, want the sweep alone", fn.Events)
	}
	if fn.EventInvokeConfig == nil || fn.EventInvokeConfig.MaximumRetryAttempts == nil || *fn.EventInvokeConfig.MaximumRetryAttempts != 0 {
		t.Errorf("EventInvokeConfig %+v, want MaximumRetryAttempts 0", fn.EventInvokeConfig)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
