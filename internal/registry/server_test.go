package registry

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
func m(v map[string]types.AttributeValue) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: v}
}

func base() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"server_id": s("demo"),
		"url":       s("http://127.0.0.1:9000/mcp"),
	}
}

func with(kv ...any) map[string]types.AttributeValue {
	item := base()
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(item, kv[i].(string))
			continue
		}
		item[kv[i].(string)] = kv[i+1].(types.AttributeValue)
	}
	return item
}

func TestParseDefaults(t *testing.T) {
	srv, err := Parse(base())
	if err != nil {
		t.Fatal(err)
	}
	want := Server{ID: "demo", URL: "http://127.0.0.1:9000/mcp", Transport: TransportHTTP, Timeout: DefaultTimeout,
		OnLimit: PolicyQueue, QueueTimeout: DefaultQueueTimeout, OnStoreError: StoreReject, CancelGrace: DefaultCancelGrace, MaxPause: DefaultMaxPause, TaskTTL: DefaultTaskTTL}
	if !reflect.DeepEqual(*srv, want) {
		t.Errorf("got %+v, want %+v", *srv, want)
	}
	if srv.Capped() {
		t.Error("server without max_concurrent_requests is capped")
	}
}

func TestParseValues(t *testing.T) {
	srv, err := Parse(with("transport", s("sse"), "max_concurrent_requests", n("2"), "timeout", n("1.5"),
		"on_limit", s("shed"), "queue_timeout", n("3"), "x_owner", s("team-a"),
		"cancel_grace", n("2.5"), "stops_on_close", &types.AttributeValueMemberBOOL{Value: true}, "max_pause", n("300")))
	if err != nil {
		t.Fatal(err)
	}
	if srv.Transport != TransportSSE || srv.MaxConcurrent != 2 || srv.Timeout != 1500*time.Millisecond ||
		srv.OnLimit != PolicyShed || srv.QueueTimeout != 3*time.Second ||
		srv.CancelGrace != 2500*time.Millisecond || !srv.StopsOnClose || srv.MaxPause != 5*time.Minute {
		t.Errorf("got %+v", *srv)
	}
}

func TestParseUnlimited(t *testing.T) {
	for _, v := range []string{"0", "-1", "-0.5"} {
		srv, err := Parse(with("max_concurrent_requests", n(v)))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if srv.Capped() {
			t.Errorf("max_concurrent_requests=%s: capped, want unlimited", v)
		}
	}
}

// TestURLMessagesSayWhatIsWrong: a URL the gateway cannot use is refused
// with a message that says what to change, for url, spec_url and an OAuth
// token_url alike (one check, used by the gateway and the CLI), and never
// repeats the URL, whose query may hold a token.
func TestURLMessagesSayWhatIsWrong(t *testing.T) {
	tests := []struct {
		url, want string
	}{
		{"127.0.0.1:9201/mcp", "has no scheme: start it with http:// or https://"},
		{"localhost:9201", "has no scheme: start it with http:// or https://"},
		{"localhost:9201/mcp?token=s3cret", "has no scheme"},
		{"http://127.0.0.1:9201/mcp ", "ends with a space: remove it"},
		{"http://127.0.0.1:9201/mcp   ", "ends with a space: remove it"},
		{"http://127.0.0.1:9201/mcp\n", "ends with a line break: remove it"},
		{" http://127.0.0.1:9201/mcp", "starts with a space: remove it"},
		{"\thttp://127.0.0.1:9201/mcp", "starts with a tab: remove it"},
		{"http://127.0.0.1:9201/my mcp", "contains a space (character 25 of 28): remove it, or write it as %20"},
		{"http://127.0.0.1:9201/m\x00cp", "contains a control character (character 24 of 26)"},
		{"   ", "is only whitespace"},
		{"ftp://127.0.0.1/mcp", `scheme must be http or https, not "ftp"`},
		{"http:///mcp", "has no host"},
		{"http://[::1/mcp", "not a valid URL: missing ']' in host"},
	}
	for _, tt := range tests {
		for _, field := range []string{"url", "spec_url", "auth.token_url"} {
			var item map[string]types.AttributeValue
			switch field {
			case "url":
				item = with("url", s(tt.url))
			case "spec_url":
				item = with("url", nil, "transport", s("openapi"), "spec_url", s(tt.url))
			case "auth.token_url":
				item = with("auth", m(map[string]types.AttributeValue{"type": s("oauth2_client_credentials"),
					"token_url": s(tt.url), "client_id": s("c"), "secret": s("env:X")}))
			}
			_, err := Parse(item)
			if err == nil || !strings.Contains(err.Error(), field+": "+tt.want) {
				t.Errorf("%s %q: got %v, want %q", field, tt.url, err, field+": "+tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%s %q: the error repeats the URL's query: %v", field, tt.url, err)
			}
		}
	}
	for _, ok := range []string{"http://127.0.0.1:9201/mcp", "https://mcp.example.com/mcp?x=%20y", "http://[::1]:9201/mcp"} {
		if _, err := Parse(with("url", s(ok))); err != nil {
			t.Errorf("url %q: %v, want valid", ok, err)
		}
	}
}

// TestCapOfZeroWarns: a cap of 0 or less is valid and means no cap; the
// warning says so, naming the attribute, for every cap a server item has.
func TestCapOfZeroWarns(t *testing.T) {
	tools := func(v string) types.AttributeValue {
		return m(map[string]types.AttributeValue{"slow": m(map[string]types.AttributeValue{"max_concurrent": n(v)})})
	}
	for _, tt := range []struct {
		item  map[string]types.AttributeValue
		field string
	}{
		{with("max_concurrent_requests", n("0")), "max_concurrent_requests is 0"},
		{with("max_concurrent_requests", n("-1")), "max_concurrent_requests is -1"},
		{with("max_concurrent_per_principal", n("0")), "max_concurrent_per_principal is 0"},
		{with("tools", tools("0")), "tools.slow.max_concurrent is 0"},
	} {
		srv, warnings, err := ParseWithWarnings(tt.item)
		if err != nil || srv == nil {
			t.Fatalf("%s: %v, want valid", tt.field, err)
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0], tt.field+": 0 or less means no cap (unlimited)") {
			t.Errorf("%s: warnings %q", tt.field, warnings)
		}
	}
	for _, item := range []map[string]types.AttributeValue{base(), with("max_concurrent_requests", n("2")), with("tools", tools("1"))} {
		if _, warnings, err := ParseWithWarnings(item); err != nil || len(warnings) != 0 {
			t.Errorf("%v: warnings %q, error %v; want none", item, warnings, err)
		}
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name  string
		item  map[string]types.AttributeValue
		field string
	}{
		{"missing url", with("url", nil), "url"},
		{"missing id", with("server_id", nil), "server_id"},
		{"url not a string", with("url", n("3")), "url"},
		{"url scheme", with("url", s("ftp://x/y")), "url"},
		{"url no host", with("url", s("http:///mcp")), "url"},
		{"url with credentials", with("url", s("http://u:p@h/mcp")), "url"},
		{"bad transport", with("transport", s("websocket")), "transport"},
		{"cap as string", with("max_concurrent_requests", s("2")), "max_concurrent_requests"},
		{"cap fractional", with("max_concurrent_requests", n("2.5")), "max_concurrent_requests"},
		{"cap too large", with("max_concurrent_requests", n("100000")), "max_concurrent_requests"},
		{"negative timeout", with("timeout", n("-1")), "timeout"},
		{"zero timeout", with("timeout", n("0")), "timeout"},
		{"huge timeout", with("timeout", n("100000")), "timeout"},
		{"timeout as bool", with("timeout", &types.AttributeValueMemberBOOL{Value: true}), "timeout"},
		{"bad policy", with("on_limit", s("drop")), "on_limit"},
		{"typo", with("max_concurent_requests", n("2")), "max_concurent_requests"},
		{"id with dash", with("server_id", s("my-server")), "server_id"},
		{"tools not a map", with("tools", s("x")), "tools"},
		{"tool not a map", with("tools", m(map[string]types.AttributeValue{"t": n("2")})), "tools.t"},
		{"tool unknown field", with("tools", m(map[string]types.AttributeValue{"t": m(map[string]types.AttributeValue{"max": n("2")})})), "tools.t.max"},
		{"tool cap string", with("tools", m(map[string]types.AttributeValue{"t": m(map[string]types.AttributeValue{"max_concurrent": s("2")})})), "tools.t.max_concurrent"},
		{"tool negative timeout", with("tools", m(map[string]types.AttributeValue{"t": m(map[string]types.AttributeValue{"timeout": n("-1")})})), "tools.t.timeout"},
		{"breaker no threshold", with("breaker", m(map[string]types.AttributeValue{"recovery_timeout": n("5")})), "breaker.failure_threshold"},
		{"breaker zero threshold", with("breaker", m(map[string]types.AttributeValue{"failure_threshold": n("0")})), "breaker.failure_threshold"},
		{"breaker unknown field", with("breaker", m(map[string]types.AttributeValue{"failure_threshold": n("2"), "half_open": n("1")})), "breaker.half_open"},
		{"breaker excluded not list", with("breaker", m(map[string]types.AttributeValue{"failure_threshold": n("2"), "excluded_tools": s("a")})), "breaker.excluded_tools"},
		{"bad store policy", with("on_store_error", s("ignore")), "on_store_error"},
		{"openapi without spec", with("transport", s("openapi")), "spec_url"},
		{"openapi with both specs", with("transport", s("openapi"), "spec_url", s("http://h/o.json"), "spec_path", s("o.json")), "spec_url"},
		{"openapi bad spec url", with("transport", s("openapi"), "spec_url", s("file:///etc/passwd")), "spec_url"},
		{"spec on an mcp server", with("spec_path", s("o.json")), "spec_path"},
		{"zero cancel grace", with("cancel_grace", n("0")), "cancel_grace"},
		{"zero max pause", with("max_pause", n("0")), "max_pause"},
		{"max pause over five minutes", with("max_pause", n("301")), "max_pause"},
		{"max pause as string", with("max_pause", s("60")), "max_pause"},
		{"huge cancel grace", with("cancel_grace", n("100000")), "cancel_grace"},
		{"stops_on_close as string", with("stops_on_close", s("true")), "stops_on_close"},
		{"adaptive without a ceiling", with("adaptive", &types.AttributeValueMemberBOOL{Value: true}), "adaptive"},
		{"adaptive_min without adaptive", with("max_concurrent_requests", n("4"), "adaptive_min", n("2")), "adaptive_min"},
		{"adaptive_min over the ceiling", with("max_concurrent_requests", n("4"), "adaptive", &types.AttributeValueMemberBOOL{Value: true}, "adaptive_min", n("5")), "adaptive_min"},
		{"task_support unknown", with("tools", m(map[string]types.AttributeValue{"t": m(map[string]types.AttributeValue{"task_support": s("always")})})), "tools.t.task_support"},
		{"task_support empty", with("tools", m(map[string]types.AttributeValue{"t": m(map[string]types.AttributeValue{"task_support": s("")})})), "tools.t.task_support"},
		{"task_support upper case", with("tools", m(map[string]types.AttributeValue{"t": m(map[string]types.AttributeValue{"task_support": s("Optional")})})), "tools.t.task_support"},
		{"task_support as bool", with("tools", m(map[string]types.AttributeValue{"t": m(map[string]types.AttributeValue{"task_support": &types.AttributeValueMemberBOOL{Value: true}})})), "tools.t.task_support"},
		{"task_ttl zero", with("task_ttl", n("0")), "task_ttl"},
		{"task_ttl over a day", with("task_ttl", n("86401")), "task_ttl"},
		{"task_ttl fractional", with("task_ttl", n("1.5")), "task_ttl"},
		{"task_ttl as string", with("task_ttl", s("3600")), "task_ttl"},
		{"adaptive_min zero", with("max_concurrent_requests", n("4"), "adaptive", &types.AttributeValueMemberBOOL{Value: true}, "adaptive_min", n("0")), "adaptive_min"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.item)
			if err == nil {
				t.Fatal("got nil error")
			}
			if !strings.Contains(err.Error(), tt.field+":") {
				t.Errorf("error %q does not name field %q", err, tt.field)
			}
		})
	}
}

func TestItemFromJSON(t *testing.T) {
	item, srv, err := ItemFromJSON([]byte(`{"server_id":"demo","url":"http://127.0.0.1:1/mcp","max_concurrent_requests":2,"x_tags":["a",1,true,null,{"k":"v"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if srv.MaxConcurrent != 2 {
		t.Errorf("cap = %d, want 2", srv.MaxConcurrent)
	}
	if _, ok := item["max_concurrent_requests"].(*types.AttributeValueMemberN); !ok {
		t.Errorf("cap stored as %T, want N", item["max_concurrent_requests"])
	}
	if _, _, err := ItemFromJSON([]byte(`{"server_id":"demo","url":"http://h/mcp","max_concurrent_requests":"two"}`)); err == nil ||
		!strings.Contains(err.Error(), "max_concurrent_requests") {
		t.Errorf("string cap: err = %v, want one naming max_concurrent_requests", err)
	}
	if _, _, err := ItemFromJSON([]byte(`[1]`)); err == nil {
		t.Error("array accepted as a server definition")
	}
}

func TestParseToolsAndBreaker(t *testing.T) {
	_, srv, err := ItemFromJSON([]byte(`{"server_id":"q","url":"http://h/mcp","timeout":10,"on_store_error":"allow",
		"tools":{"fetch_quote":{"max_concurrent":2,"timeout":1},"other":{"timeout":3}},
		"breaker":{"failure_threshold":3,"recovery_timeout":20,"excluded_tools":["health"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if srv.ToolCap("fetch_quote") != 2 || srv.ToolCap("other") != 0 || srv.ToolCap("absent") != 0 {
		t.Errorf("tool caps = %+v", srv.Tools)
	}
	if srv.TimeoutFor("fetch_quote") != time.Second || srv.TimeoutFor("other") != 3*time.Second || srv.TimeoutFor("absent") != 10*time.Second {
		t.Errorf("tool timeouts = %+v", srv.Tools)
	}
	b := srv.Breaker
	if b == nil || b.FailureThreshold != 3 || b.RecoveryTimeout != 20*time.Second || !b.Covers("fetch_quote") || b.Covers("health") {
		t.Errorf("breaker = %+v", b)
	}
	if srv.OnStoreError != StoreAllow {
		t.Errorf("on_store_error = %q", srv.OnStoreError)
	}
	var none *Breaker
	if none.Covers("x") {
		t.Error("a nil breaker covers a tool")
	}
}

// TestParseTasks: task_support per tool ("" when unset, so that the
// upstream's own execution.taskSupport decides) and task_ttl (an hour
// unless set, a day at most).
func TestParseTasks(t *testing.T) {
	_, srv, err := ItemFromJSON([]byte(`{"server_id":"q","url":"http://h/mcp","task_ttl":86400,
		"tools":{"a":{"task_support":"required"},"b":{"task_support":"optional","timeout":2},"c":{"task_support":"forbidden"},"d":{"timeout":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for tool, want := range map[string]string{"a": TaskRequired, "b": TaskOptional, "c": TaskForbidden, "d": "", "absent": ""} {
		if got := srv.TaskSupport(tool); got != want {
			t.Errorf("TaskSupport(%q) = %q, want %q", tool, got, want)
		}
	}
	if srv.TaskTTL != 24*time.Hour {
		t.Errorf("task_ttl 86400: TaskTTL = %v", srv.TaskTTL)
	}
	if srv.TimeoutFor("b") != 2*time.Second || srv.Limited() {
		t.Errorf("task_support changed the tool's limits: %+v, limited %v", srv.Tools["b"], srv.Limited())
	}
	plain, err := Parse(base())
	if err != nil {
		t.Fatal(err)
	}
	if plain.TaskTTL != DefaultTaskTTL || DefaultTaskTTL != time.Hour {
		t.Errorf("no task_ttl: TaskTTL = %v, want an hour", plain.TaskTTL)
	}
	if one, err := Parse(with("task_ttl", n("1"))); err != nil || one.TaskTTL != time.Second {
		t.Errorf("task_ttl 1: %v, %v", one, err)
	}
}

func TestParseOpenAPIServer(t *testing.T) {
	srv, err := Parse(map[string]types.AttributeValue{
		"server_id": s("api"), "transport": s("openapi"), "spec_url": s("https://api.example.com/openapi.json"),
		"max_concurrent_requests": n("2"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if srv.Transport != TransportOpenAPI || srv.SpecURL == "" || srv.URL != "" || srv.MaxConcurrent != 2 {
		t.Errorf("got %+v", *srv)
	}
}
