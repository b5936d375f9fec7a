package metricstest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/metrics"
)

func TestParseRejects(t *testing.T) {
	const ok = `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[["D"]],"Metrics":[{"Name":"M","Unit":"Count"}]}]},"D":"v","M":1}`
	if _, err := Parse([]byte(ok + "\n")); err != nil {
		t.Fatalf("Parse(valid line): %v", err)
	}
	names := make([]string, MaxMetrics+1)
	defs := make([]string, MaxMetrics+1)
	vals := make([]string, MaxMetrics+1)
	for i := range names {
		names[i] = fmt.Sprintf("m%d", i)
		defs[i] = fmt.Sprintf(`{"Name":%q}`, names[i])
		vals[i] = fmt.Sprintf(`%q:1`, names[i])
	}
	dims := make([]string, MaxDimensions+1)
	dimVals := make([]string, MaxDimensions+1)
	for i := range dims {
		dims[i] = fmt.Sprintf(`"d%d"`, i)
		dimVals[i] = fmt.Sprintf(`"d%d":"v"`, i)
	}
	arr := strings.TrimSuffix(strings.Repeat("1,", MaxValues+1), ",")
	for _, tc := range []struct{ name, line string }{
		{"not JSON", `{"_aws":`},
		{"not an object", `[1]`},
		{"two objects", ok + ok},
		{"two lines", ok + "\n" + ok},
		{"no _aws", `{"M":1}`},
		{"_aws not an object", `{"_aws":1}`},
		{"no Timestamp", `{"_aws":{"CloudWatchMetrics":[]}}`},
		{"Timestamp a string", `{"_aws":{"Timestamp":"1","CloudWatchMetrics":[]}}`},
		{"Timestamp fractional", `{"_aws":{"Timestamp":1.5,"CloudWatchMetrics":[]}}`},
		{"no CloudWatchMetrics", `{"_aws":{"Timestamp":1}}`},
		{"no Namespace", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Dimensions":[],"Metrics":[]}]}}`},
		{"no Dimensions", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Metrics":[]}]}}`},
		{"no Metrics", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[]}]}}`},
		{"dimension without value", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[["D"]],"Metrics":[{"Name":"M"}]}]},"M":1}`},
		{"dimension value a number", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[["D"]],"Metrics":[{"Name":"M"}]}]},"D":1,"M":1}`},
		{"31 dimensions", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[[` + strings.Join(dims, ",") + `]],"Metrics":[{"Name":"M"}]}]},` + strings.Join(dimVals, ",") + `,"M":1}`},
		{"101 metrics", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[` + strings.Join(defs, ",") + `]}]},` + strings.Join(vals, ",") + `}`},
		{"empty metric name", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":""}]}]},"":1}`},
		{"metric without Name", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Unit":"Count"}]}]}}`},
		{"metric without value", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M"}]}]}}`},
		{"metric value a string", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M"}]}]},"M":"1"}`},
		{"metric value null", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M"}]}]},"M":null}`},
		{"metric value NaN", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M"}]}]},"M":NaN}`},
		{"metric value overflows", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M"}]}]},"M":1e400}`},
		{"empty value array", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M"}]}]},"M":[]}`},
		{"101 values", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M"}]}]},"M":[` + arr + `]}`},
		{"string in value array", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M"}]}]},"M":[1,"2"]}`},
		{"unknown unit", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M","Unit":"Furlongs"}]}]},"M":1}`},
		{"bad StorageResolution", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[],"Metrics":[{"Name":"M","StorageResolution":5}]}]},"M":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := Parse([]byte(tc.line)); err == nil {
				t.Errorf("Parse(%s) = %+v, want an error", tc.line, r)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	line := `{"_aws":{"Timestamp":1700000000000,"CloudWatchMetrics":[` +
		`{"Namespace":"a","Dimensions":[["D"],[]],"Metrics":[{"Name":"M","Unit":"Milliseconds","StorageResolution":1}]},` +
		`{"Namespace":"b","Dimensions":[],"Metrics":[{"Name":"M"},{"Name":"N"}]}]},` +
		`"D":"v","M":[1,2.5,3],"N":-4,"Other":{"x":true}}`
	r := MustParse(t, line)
	def, vs, ok := r.Metric("M")
	if !ok || def.Unit != metrics.Milliseconds || def.StorageResolution != 1 || fmt.Sprint(vs) != "[1 2.5 3]" {
		t.Errorf("M = %+v %v %v, want Milliseconds, resolution 1, [1 2.5 3]", def, vs, ok)
	}
	if def, vs, ok := r.Metric("N"); !ok || def.Unit != "" || fmt.Sprint(vs) != "[-4]" {
		t.Errorf("N = %+v %v %v, want no unit, [-4]", def, vs, ok)
	}
	if _, ok := r.Members["Other"].(map[string]any); !ok {
		t.Errorf("Other = %#v, want an object property", r.Members["Other"])
	}
	if len(r.Directives) != 2 || r.Directives[1].Namespace != "b" {
		t.Errorf("directives = %+v, want a and b", r.Directives)
	}
}
