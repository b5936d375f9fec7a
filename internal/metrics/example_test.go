package metrics_test

import (
	"os"
	"time"

	"github.com/mcpgate/mcpgate/internal/metrics"
)

func Example() {
	e := metrics.New(os.Stdout, metrics.Options{
		Clock: func() time.Time { return time.UnixMilli(1767225600000) },
	})
	_ = e.Call(metrics.Call{
		ServerID:             "github",
		Tool:                 "search_issues",
		Outcome:              "ok",
		Latency:              182350 * time.Microsecond,
		QueueWait:            12 * time.Millisecond,
		InFlightAfterAcquire: 3,
		InFlightKnown:        true,
		RequestID:            "c0ffee0123456789",
		LeaseID:              "i-7f3a.42",
	})
	// Output:
	// {"_aws":{"Timestamp":1767225600000,"CloudWatchMetrics":[{"Namespace":"mcpgate","Dimensions":[["ServerID"],["ServerID","Tool"]],"Metrics":[{"Name":"Latency","Unit":"Milliseconds"},{"Name":"QueueWait","Unit":"Milliseconds"},{"Name":"InFlight","Unit":"Count"}]}]},"ServerID":"github","Tool":"search_issues","Latency":182.35,"QueueWait":12,"InFlight":3,"Outcome":"ok","RequestID":"c0ffee0123456789","LeaseID":"i-7f3a.42"}
}

func ExampleEmitter_Call_shed() {
	e := metrics.New(os.Stdout, metrics.Options{
		Clock: func() time.Time { return time.UnixMilli(1767225600000) },
	})
	_ = e.Call(metrics.Call{
		ServerID: "github", Tool: "search_issues", Outcome: "AT_CAPACITY",
		Latency: 9 * time.Millisecond, RequestID: "c0ffee0123456790",
	})
	// Output:
	// {"_aws":{"Timestamp":1767225600000,"CloudWatchMetrics":[{"Namespace":"mcpgate","Dimensions":[["ServerID"],["ServerID","Tool"]],"Metrics":[{"Name":"Latency","Unit":"Milliseconds"},{"Name":"QueueWait","Unit":"Milliseconds"},{"Name":"Shed","Unit":"Count"}]}]},"ServerID":"github","Tool":"search_issues","Latency":9,"QueueWait":0,"Shed":1,"Outcome":"AT_CAPACITY","RequestID":"c0ffee0123456790"}
}
