package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// env is a getenv over a map.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// baseVars is a valid local configuration.
func baseVars(more map[string]string) map[string]string {
	vars := map[string]string{"SERVERS_TABLE": "s", "LEASES_TABLE": "l", "KEYS_TABLE": "k", "GATEWAY_ADDR": "127.0.0.1:0"}
	for k, v := range more {
		vars[k] = v
	}
	return vars
}

func TestConfigLimits(t *testing.T) {
	c, err := config.Load(env(baseVars(nil)))
	if err != nil {
		t.Fatal(err)
	}
	want := config.LocalLimits{ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxConns: 1024}
	if c.Local != want {
		t.Errorf("default local limits %+v, want %+v", c.Local, want)
	}
	if c.MemoryLimit != 0 || c.MaxRequest() != 0 || c.MaxProcs != 0 || c.GCPercent != 0 {
		t.Errorf("memory limit %d, request timeout %v, max procs %d, GC percent %d; want none outside Lambda", c.MemoryLimit, c.MaxRequest(), c.MaxProcs, c.GCPercent)
	}

	c, err = config.Load(env(baseVars(map[string]string{"GATEWAY_READ_TIMEOUT": "5s", "GATEWAY_IDLE_TIMEOUT": "1m",
		"GATEWAY_MAX_CONNS": "16", "REQUEST_TIMEOUT": "40s", "FUNCTION_TIMEOUT": "900s"})))
	if err != nil {
		t.Fatal(err)
	}
	if c.Local != (config.LocalLimits{ReadTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxConns: 16}) {
		t.Errorf("local limits %+v", c.Local)
	}
	// Outside Lambda a request runs at most REQUEST_TIMEOUT.
	if c.MaxRequest() != 40*time.Second {
		t.Errorf("request timeout %v, want REQUEST_TIMEOUT", c.MaxRequest())
	}

	for _, bad := range [][2]string{
		{"GATEWAY_READ_TIMEOUT", "0s"},
		{"GATEWAY_IDLE_TIMEOUT", "-1s"},
		{"GATEWAY_MAX_CONNS", "0"},
		{"GATEWAY_MAX_CONNS", "many"},
		{"FUNCTION_TIMEOUT", "-5s"},
		{"FUNCTION_TIMEOUT", "120"},
		{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256MB"},
	} {
		_, err := config.Load(env(baseVars(map[string]string{bad[0]: bad[1]})))
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: error %v, want one naming %s", bad[0], bad[1], err, bad[0])
		}
	}
}

func TestConfigUnderLambda(t *testing.T) {
	lambda := map[string]string{"SERVERS_TABLE": "s", "LEASES_TABLE": "l", "KEYS_TABLE": "k",
		"AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001", "FUNCTION_TIMEOUT": "120s", "REQUEST_TIMEOUT": "5s",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256"}
	c, err := config.Load(env(lambda))
	if err != nil {
		t.Fatal(err)
	}
	// The function's timeout bounds a request; REQUEST_TIMEOUT is for the
	// local server only.
	if c.MaxRequest() != 120*time.Second {
		t.Errorf("request timeout %v, want FUNCTION_TIMEOUT", c.MaxRequest())
	}
	if want := int64(256 << 20 * 9 / 10); c.MemoryLimit != want {
		t.Errorf("memory limit %d, want 90%% of 256 MiB = %d", c.MemoryLimit, want)
	}
	// One thread runs Go code: 256 MB buys under one vCPU's worth of time.
	if c.MaxProcs != 1 {
		t.Errorf("max procs %d for 256 MB, want 1", c.MaxProcs)
	}
	for mib, want := range map[string]int{"1769": 1, "1770": 2, "3008": 2, "10240": 6} {
		lambda["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = mib
		if c, err := config.Load(env(lambda)); err != nil || c.MaxProcs != want {
			t.Errorf("max procs %d, %v for %s MB; want %d", c.MaxProcs, err, mib, want)
		}
	}
	lambda["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = "256"
	// The collector runs less often, the memory limit bounding the heap;
	// GOGC wins, and so does GOMEMLIMIT (the gateway sets no limit of its
	// own to bound the heap by).
	if c.GCPercent != 400 {
		t.Errorf("GC percent %d for 256 MB, want 400", c.GCPercent)
	}
	for name, v := range map[string]string{"GOGC": "100", "GOMEMLIMIT": "100MiB"} {
		lambda[name] = v
		if c, err := config.Load(env(lambda)); err != nil || c.GCPercent != 0 {
			t.Errorf("with %s: GC percent %d, %v; want 0 (the runtime's)", name, c.GCPercent, err)
		}
		delete(lambda, name)
	}
	// GOMAXPROCS wins: the runtime has applied it.
	lambda["GOMAXPROCS"] = "2"
	if c, err := config.Load(env(lambda)); err != nil || c.MaxProcs != 0 {
		t.Errorf("with GOMAXPROCS: max procs %d, %v; want 0 (the runtime's)", c.MaxProcs, err)
	}
	delete(lambda, "GOMAXPROCS")
	// GOMEMLIMIT wins: the runtime has applied it, the gateway leaves it.
	lambda["GOMEMLIMIT"] = "100MiB"
	if c, err := config.Load(env(lambda)); err != nil || c.MemoryLimit != 0 {
		t.Errorf("with GOMEMLIMIT: memory limit %d, %v; want 0 (the runtime's)", c.MemoryLimit, err)
	}
	if got := config.MemoryLimitText(c.MemoryLimit); got != "230 MiB" {
		t.Errorf("memoryLimitText = %q", got)
	}
}

// withBase is a getenv over a valid local configuration and kv.
func withBase(kv map[string]string) func(string) string { return env(baseVars(kv)) }

func TestConfigOAuth(t *testing.T) {
	c, err := config.Load(withBase(map[string]string{
		"OAUTH_ISSUER":       "https://login.example.com/tenant/v2.0",
		"OAUTH_AUDIENCE":     "api://gateway, 0f1e2d3c",
		"OAUTH_RESOURCE_URL": "https://gw.example.com/",
		"OAUTH_SCOPE_PREFIX": "mcp.",
		"OAUTH_TEAM_CLAIM":   "custom:team",
		"IAM_GRANTS":         "arn:aws:iam::123456789012:role/agents=demo",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.OAuth.Issuer != "https://login.example.com/tenant/v2.0" || !slices.Equal(c.OAuth.Audiences, []string{"api://gateway", "0f1e2d3c"}) ||
		c.OAuth.ScopePrefix != "mcp." || c.OAuth.TeamClaim != "custom:team" || c.ResourceURL != "https://gw.example.com" || len(c.IAMGrants) != 1 {
		t.Errorf("config %+v", c)
	}

	for name, kv := range map[string]map[string]string{
		"audience without issuer":   {"OAUTH_AUDIENCE": "x"},
		"JWKS URL without issuer":   {"OAUTH_JWKS_URL": "https://idp/jwks"},
		"resource without issuer":   {"OAUTH_RESOURCE_URL": "https://gw"},
		"plain http issuer":         {"OAUTH_ISSUER": "http://idp.example.com"},
		"resource URL with a path":  {"OAUTH_ISSUER": "https://idp", "OAUTH_RESOURCE_URL": "https://gw.example.com/prod"},
		"resource URL not absolute": {"OAUTH_ISSUER": "https://idp", "OAUTH_RESOURCE_URL": "gw.example.com"},
		"scope prefix with a quote": {"OAUTH_ISSUER": "https://idp", "OAUTH_SCOPE_PREFIX": `mcp"`},
		"team claim without issuer": {"OAUTH_TEAM_CLAIM": "team"},
		"team claim with a space":   {"OAUTH_ISSUER": "https://idp", "OAUTH_TEAM_CLAIM": "my team"},
		"bad IAM grant":             {"IAM_GRANTS": "role/agents=demo"},
	} {
		if _, err := config.Load(withBase(kv)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Off by default, with the template's empty values.
	c, err = config.Load(withBase(map[string]string{"OAUTH_ISSUER": "", "OAUTH_SCOPE_PREFIX": "mcp:", "OAUTH_TEAM_CLAIM": "", "IAM_GRANTS": ""}))
	if err != nil || c.OAuth.Issuer != "" || len(c.IAMGrants) != 0 {
		t.Errorf("defaults: %+v, %v", c.OAuth, err)
	}
}

func TestPublicURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	req := func(ctx context.Context) *http.Request {
		r, _ := http.NewRequestWithContext(ctx, "GET", "http://attacker.example.com/mcp", nil)
		r.Host = "attacker.example.com"
		return r
	}
	// Outside Lambda: the listen address, never the Host header.
	f, err := publicURL(config.Config{OAuth: oauthOn}, ln)
	if err != nil {
		t.Fatal(err)
	}
	if got := f(req(context.Background())); got != "http://"+ln.Addr().String() {
		t.Errorf("local: %q", got)
	}
	// Configured: as configured.
	f, _ = publicURL(config.Config{OAuth: oauthOn, ResourceURL: "https://gw.example.com"}, ln)
	if got := f(req(context.Background())); got != "https://gw.example.com" {
		t.Errorf("configured: %q", got)
	}
	// Under Lambda: the Function URL's domain from the request context.
	f, _ = publicURL(config.Config{OAuth: oauthOn, Lambda: true}, nil)
	ev := &events.LambdaFunctionURLRequest{RequestContext: events.LambdaFunctionURLRequestContext{DomainName: "abc.lambda-url.us-east-1.on.aws"}}
	if got := f(req(lambdaurlContext(ev))); got != "https://abc.lambda-url.us-east-1.on.aws" {
		t.Errorf("lambda: %q", got)
	}
	// Listening on every interface, tokens need the URL said.
	all, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if _, err := publicURL(config.Config{OAuth: oauthOn, Addr: "0.0.0.0:0"}, all); err == nil || !strings.Contains(err.Error(), "OAUTH_RESOURCE_URL") {
		t.Errorf("0.0.0.0 with OAuth: err = %v", err)
	}
}

// lambdaurlContext is a context as lambdaurl gives the handler.
func lambdaurlContext(ev *events.LambdaFunctionURLRequest) context.Context {
	got := make(chan context.Context, 1)
	h := lambdaurl.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Context() }))
	resp, err := h(context.Background(), ev)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return <-got
}

var oauthOn = auth.OAuthOptions{Issuer: "https://idp.example.com"}

func TestIAMCallerFromContext(t *testing.T) {
	ev := &events.LambdaFunctionURLRequest{RequestContext: events.LambdaFunctionURLRequestContext{
		Authorizer: &events.LambdaFunctionURLRequestContextAuthorizerDescription{
			IAM: &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{UserARN: "arn:aws:iam::111122223333:user/example-user"},
		},
	}}
	r, _ := http.NewRequestWithContext(lambdaurlContext(ev), "GET", "/", nil)
	if got := iamCaller(r); got != "arn:aws:iam::111122223333:user/example-user" {
		t.Errorf("iamCaller = %q", got)
	}
	r, _ = http.NewRequest("GET", "/", nil)
	r.Header.Set("X-Amz-User-Arn", "arn:aws:iam::1:user/forged")
	if got := iamCaller(r); got != "" {
		t.Errorf("outside Lambda iamCaller = %q, want none", got)
	}
}

// TestStartupLog: the starting record gives the settings in effect: the
// default lease margin when LEASE_MARGIN is unset (not 0s), "none" for no
// request deadline, and the values set otherwise.
func TestStartupLog(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{})
	for _, tc := range []struct {
		extra []string
		want  []string
	}{
		{nil, []string{`"lease_margin":"2s"`, `"request_timeout":"none"`}},
		{[]string{"LEASE_MARGIN=500ms", "REQUEST_TIMEOUT=20s"}, []string{`"lease_margin":"500ms"`, `"request_timeout":"20s"`}},
	} {
		g := rig.StartGateway(tc.extra...)
		var starting string
		for line := range strings.Lines(g.Logs()) {
			if strings.Contains(line, `"msg":"starting"`) {
				starting = line
			}
		}
		for _, w := range tc.want {
			if !strings.Contains(starting, w) {
				t.Errorf("with %v the starting record does not say %s: %s", tc.extra, w, starting)
			}
		}
		g.Stop()
	}
}

// ALLOW_LOCAL_UPSTREAMS is off unless set, and refused under Lambda, where
// 127.0.0.1 is the runtime API (an item's allow_local is the way there).
func TestConfigAllowLocalUpstreams(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want bool
		err  string
	}{
		{baseVars(nil), false, ""},
		{baseVars(map[string]string{"ALLOW_LOCAL_UPSTREAMS": "on"}), true, ""},
		{baseVars(map[string]string{"ALLOW_LOCAL_UPSTREAMS": "off"}), false, ""},
		{baseVars(map[string]string{"ALLOW_LOCAL_UPSTREAMS": "maybe"}), false, "use on or off"},
		{baseVars(map[string]string{"ALLOW_LOCAL_UPSTREAMS": "on", "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001"}), true, "refused under Lambda"},
	} {
		c, err := config.Load(env(tc.vars))
		switch {
		case tc.err == "" && (err != nil || c.AllowLocal != tc.want):
			t.Errorf("%v: %v, allow %v; want %v", tc.vars, err, c.AllowLocal, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: %v; want an error saying %q", tc.vars, err, tc.err)
		}
	}
}
