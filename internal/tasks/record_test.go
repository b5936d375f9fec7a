package tasks

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// sample is a valid record with every field set but Error (a record has a
// result or an error), as Create leaves it.
func sample(t testing.TB) *Record {
	t.Helper()
	id, err := NewID()
	if err != nil {
		t.Fatal(err)
	}
	created := time.UnixMilli(1767312000123).UTC()
	return &Record{
		ID: id, Kind: KindGateway, ServerID: "quotes", Tool: "slow_tool",
		Owner: "key:" + strings.Repeat("ab", 32), OwnerID: "key:abababababab",
		Principal: json.RawMessage(`{"id":"key:abababababab","servers":["quotes"]}`),
		Status:    StatusInputRequired, StatusMessage: "waiting for your answer",
		CreatedAt: created, UpdatedAt: created.Add(1500 * time.Millisecond),
		TTL: time.Hour, PollInterval: 2 * time.Second,
		Params:          json.RawMessage(`{"name":"slow_tool","arguments":{"ms":500}}`),
		Protocol:        "2026-07-28",
		Traceparent:     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		Tracestate:      "vendor=opaque,other=7",
		Result:          json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`),
		InputRequests:   json.RawMessage(`{"confirm":{"method":"elicitation/create","params":{"message":"sure?"}}}`),
		RequestState:    "opaque-state",
		InputResponses:  json.RawMessage(`{"confirm":{"action":"accept"}}`),
		LeaseID:         "abcdefgh.1",
		CancelRequested: true,
		Attempt:         2,
		RunUntil:        time.UnixMilli(1_700_000_900_000).UTC(),
		UpstreamID:      "upstream-task-7",
		Version:         3,
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id, err := NewID()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("NewID repeated %s", id)
		}
		seen[id] = true
		if !ValidID(id) {
			t.Fatalf("ValidID(%q) = false", id)
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(id, "tsk_"))
		if err != nil || len(raw)*8 < 128 {
			t.Fatalf("%s: %d random bits (%v), want at least 128", id, len(raw)*8, err)
		}
	}
	id, _ := NewID()
	for _, bad := range []string{"", "tsk_", id[:len(id)-1], id + "A", "TSK_" + id[4:], id[:10] + "/" + id[11:], id[:10] + "=" + id[11:],
		id[:10] + "é" + id[12:], "../../etc/passwd", strings.Repeat("a", len(id))} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

func TestItemRoundTrip(t *testing.T) {
	r := sample(t)
	item := Item(r)
	if got := len(item); got != len(fields)-1 { // all but error
		t.Errorf("item has %d attributes, want %d", got, len(fields)-1)
	}
	back, err := Parse(item)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("round trip:\n got  %+v\n want %+v", back, r)
	}
	// The zero values of optional fields are left out of the item.
	min := &Record{ID: r.ID, Kind: KindRelay, ServerID: "s", Tool: "t", Owner: "o", OwnerID: "i", Status: StatusWorking,
		CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt, TTL: time.Minute, Version: 1}
	item = Item(min)
	var names []string
	for n := range item {
		names = append(names, n)
	}
	want := []string{"created_at", "kind", "owner", "owner_id", "server_id", "status", "task_id", "tool", "ttl", "ttl_ms", "updated_at", "version"}
	if len(names) != len(want) {
		t.Errorf("minimal item has %v, want %v", names, want)
	}
	if back, err := Parse(item); err != nil || !reflect.DeepEqual(back, min) {
		t.Errorf("minimal round trip: %+v, %v", back, err)
	}
	// ttl is an hour after the task expires, in whole seconds rounded up.
	if got, want := item["ttl"].(*types.AttributeValueMemberN).Value, "1767315661"; got != want {
		t.Errorf("ttl = %s, want %s (ceil of created + 1 min + 1 h)", got, want)
	}
}

// TestParseStrict: an item this package did not write is refused, naming
// every attribute that is wrong.
func TestParseStrict(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(map[string]types.AttributeValue)
		want   []string
	}{
		{"unknown attribute", func(m map[string]types.AttributeValue) { m["x_note"] = &types.AttributeValueMemberS{Value: "hi"} }, []string{"x_note: unknown attribute"}},
		{"unknown attribute with control characters", func(m map[string]types.AttributeValue) {
			m["a\x1b[2Jb"] = &types.AttributeValueMemberS{Value: "x"}
		}, []string{`a\u001b[2Jb: unknown attribute`}},
		{"string as number", func(m map[string]types.AttributeValue) { m["status"] = &types.AttributeValueMemberN{Value: "1"} }, []string{"status: must be S, is N"}},
		{"number as string", func(m map[string]types.AttributeValue) { m["version"] = &types.AttributeValueMemberS{Value: "1"} }, []string{"version: must be N, is S"}},
		{"map", func(m map[string]types.AttributeValue) { m["params"] = &types.AttributeValueMemberM{} }, []string{"params: must be S, is M"}},
		{"bool as string", func(m map[string]types.AttributeValue) {
			m["cancel_requested"] = &types.AttributeValueMemberS{Value: "true"}
		}, []string{"cancel_requested: must be BOOL, is S"}},
		{"fraction", func(m map[string]types.AttributeValue) { m["attempt"] = &types.AttributeValueMemberN{Value: "1.5"} }, []string{"attempt: must be a whole number"}},
		{"negative time", func(m map[string]types.AttributeValue) { m["created_at"] = &types.AttributeValueMemberN{Value: "-5"} }, []string{"created_at: must not be negative"}},
		{"unknown status", func(m map[string]types.AttributeValue) { m["status"] = &types.AttributeValueMemberS{Value: "done"} }, []string{`status: "done" is not a task status`}},
		{"unknown kind", func(m map[string]types.AttributeValue) { m["kind"] = &types.AttributeValueMemberS{Value: "batch"} }, []string{`kind: "batch" is not gateway or relay`}},
		{"version 0", func(m map[string]types.AttributeValue) { m["version"] = &types.AttributeValueMemberN{Value: "0"} }, []string{"version: must be 1 or more"}},
		{"missing", func(m map[string]types.AttributeValue) { delete(m, "owner"); delete(m, "ttl") }, []string{"owner: missing", "ttl: missing"}},
		{"several", func(m map[string]types.AttributeValue) {
			m["zz"] = &types.AttributeValueMemberBOOL{}
			m["tool"] = &types.AttributeValueMemberL{}
		}, []string{"zz: unknown attribute", "tool: must be S, is L"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			item := Item(sample(t))
			tc.change(item)
			r, err := Parse(item)
			var ie *ItemError
			if !errors.As(err, &ie) || r != nil {
				t.Fatalf("Parse = %v, %v; want an *ItemError", r, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.ContainsRune(err.Error(), 0x1b) {
				t.Errorf("error %q carries a control character", err)
			}
		})
	}
}

// TestValidate: every field has a bound, refused at one past it.
func TestValidate(t *testing.T) {
	const maxResult = 1000
	ok := func(r *Record) {
		t.Helper()
		if err := r.validate(maxResult); err != nil {
			t.Errorf("valid record refused: %v", err)
		}
	}
	ok(sample(t))
	jsonOf := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("a", n-2) + `"`) }
	for _, tc := range []struct {
		field string
		max   int
		set   func(*Record, int)
		size  bool // over the bound is ErrTooLarge, else ErrInvalid
	}{
		{"params", MaxParamsBytes, func(r *Record, n int) { r.Params = jsonOf(n) }, true},
		{"input_responses", MaxInputResponsesBytes, func(r *Record, n int) { r.InputResponses = jsonOf(n) }, true},
		{"principal", MaxPrincipalBytes, func(r *Record, n int) { r.Principal = jsonOf(n) }, true},
		{"result", maxResult, func(r *Record, n int) { r.Result = jsonOf(n) }, true},
		{"error", maxResult, func(r *Record, n int) { r.Result, r.Error = nil, jsonOf(n) }, true},
		{"input_requests", maxResult, func(r *Record, n int) { r.InputRequests = jsonOf(n) }, true},
		{"status_message", MaxStatusMessageBytes, func(r *Record, n int) { r.StatusMessage = strings.Repeat("m", n) }, true},
		{"request_state", MaxRequestStateBytes, func(r *Record, n int) { r.RequestState = strings.Repeat("s", n) }, true},
		{"tool", MaxToolBytes, func(r *Record, n int) { r.Tool = strings.Repeat("t", n) }, false},
		{"server_id", MaxServerIDBytes, func(r *Record, n int) { r.ServerID = strings.Repeat("s", n) }, false},
		{"owner", MaxOwnerBytes, func(r *Record, n int) { r.Owner = strings.Repeat("o", n) }, false},
		{"owner_id", MaxOwnerIDBytes, func(r *Record, n int) { r.OwnerID = strings.Repeat("o", n) }, false},
		{"protocol", MaxProtocolBytes, func(r *Record, n int) { r.Protocol = strings.Repeat("p", n) }, false},
		{"traceparent", MaxTraceparentBytes, func(r *Record, n int) { r.Traceparent = strings.Repeat("0", n) }, false},
		{"tracestate", MaxTracestateBytes, func(r *Record, n int) { r.Tracestate = strings.Repeat("v", n) }, false},
		{"lease_id", MaxLeaseIDBytes, func(r *Record, n int) { r.LeaseID = strings.Repeat("l", n) }, false},
		{"upstream_id", MaxUpstreamIDBytes, func(r *Record, n int) { r.UpstreamID = strings.Repeat("u", n) }, false},
	} {
		r := sample(t)
		tc.set(r, tc.max)
		ok(r)
		tc.set(r, tc.max+1)
		err := r.validate(maxResult)
		var se *SizeError
		switch {
		case tc.size && (!errors.As(err, &se) || !errors.Is(err, ErrTooLarge) || se.Field != tc.field || se.Size != tc.max+1 || se.Limit != tc.max):
			t.Errorf("%s over its bound: %v, want a SizeError (%d over %d)", tc.field, err, tc.max+1, tc.max)
		case !tc.size && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field+":")):
			t.Errorf("%s over its bound: %v, want ErrInvalid naming it", tc.field, err)
		}
	}
	for name, change := range map[string]func(*Record){
		"id":               func(r *Record) { r.ID = "task-1" },
		"kind":             func(r *Record) { r.Kind = "" },
		"status":           func(r *Record) { r.Status = "done" },
		"server_id":        func(r *Record) { r.ServerID = "" },
		"tool":             func(r *Record) { r.Tool = "bad\xff" },
		"owner":            func(r *Record) { r.Owner = "" },
		"params":           func(r *Record) { r.Params = json.RawMessage(`{"name":`) },
		"result":           func(r *Record) { r.Result = json.RawMessage("\"\xff\"") },
		"error":            func(r *Record) { r.Error = json.RawMessage(`{"code":1}`) }, // beside a result
		"status_message":   func(r *Record) { r.StatusMessage = "\xff" },
		"created_at":       func(r *Record) { r.CreatedAt = time.Time{} },
		"ttl_ms":           func(r *Record) { r.TTL = MaxTTL + time.Millisecond },
		"poll_interval_ms": func(r *Record) { r.PollInterval = -time.Second },
		"attempt":          func(r *Record) { r.Attempt = -1 },
	} {
		r := sample(t)
		change(r)
		if err := r.validate(maxResult); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), name+":") {
			t.Errorf("bad %s: %v, want ErrInvalid naming it", name, err)
		}
	}
	for _, d := range []time.Duration{MinTTL - time.Millisecond, 0} {
		r := sample(t)
		r.TTL, r.PollInterval = d, 0
		if err := r.validate(maxResult); !errors.Is(err, ErrInvalid) {
			t.Errorf("TTL %v: %v, want ErrInvalid", d, err)
		}
	}
}

func TestSizeErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  *SizeError
		want string
	}{
		{&SizeError{Field: "result", Size: 300000, Limit: 262144}, "tasks: result is 300000 bytes, over the gateway's limit of 262144 (MAX_TASK_RESULT_BYTES)"},
		{&SizeError{Field: "item", Size: 409601, Limit: 409600}, "tasks: the task's record would be 409601 bytes, over DynamoDB's item limit of 409600"},
		{&SizeError{Field: "params", Size: 65537, Limit: 65536}, "tasks: params is 65537 bytes, over the limit of 65536"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
		if !errors.Is(tc.err, ErrTooLarge) || errors.Is(tc.err, ErrInvalid) {
			t.Errorf("%v is not ErrTooLarge alone", tc.err)
		}
	}
}

func TestTerminal(t *testing.T) {
	for s, want := range map[Status]bool{StatusWorking: false, StatusInputRequired: false, StatusCompleted: true, StatusFailed: true, StatusCancelled: true, "": false, "done": false} {
		if Terminal(s) != want {
			t.Errorf("Terminal(%q) = %v", s, !want)
		}
	}
}
