package tasks

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/store"
)

// The item's attribute names (see the package documentation).
const (
	// AttrID is the partition key.
	AttrID = store.TaskIDAttr
	// AttrTTL is DynamoDB's TTL attribute: Unix seconds.
	AttrTTL = store.TTLAttr

	attrID              = AttrID
	attrKind            = "kind"
	attrServerID        = "server_id"
	attrTool            = "tool"
	attrOwner           = "owner"
	attrOwnerID         = "owner_id"
	attrPrincipal       = "principal"
	attrStatus          = "status"
	attrStatusMessage   = "status_message"
	attrCreatedAt       = "created_at"
	attrUpdatedAt       = "updated_at"
	attrTTLMs           = "ttl_ms"
	attrPollMs          = "poll_interval_ms"
	attrParams          = "params"
	attrProtocol        = "protocol"
	attrTraceparent     = "traceparent"
	attrTracestate      = "tracestate"
	attrResult          = "result"
	attrError           = "error"
	attrInputRequests   = "input_requests"
	attrRequestState    = "request_state"
	attrInputResponses  = "input_responses"
	attrLeaseID         = "lease_id"
	attrCancelRequested = "cancel_requested"
	attrAttempt         = "attempt"
	attrRunUntil        = "run_until"
	attrUpstreamID      = "upstream_id"
	attrVersion         = "version"
)

// ttlGrace is how long after a task expires DynamoDB may delete its item:
// a task is gone at CreatedAt+TTL whatever the item says (Get checks), so
// this only keeps the item a little while for whoever looks at the table.
const ttlGrace = time.Hour

// The DynamoDB types the item uses.
const (
	typeS    = "S"
	typeN    = "N"
	typeBOOL = "BOOL"
)

// field is one attribute: its name and type, whether an item must have
// it, and how it is read from and written to a Record. put returns nil
// for a zero value, which is left out of the item.
type field struct {
	name, typ string
	required  bool
	put       func(r *Record) types.AttributeValue
	get       func(r *Record, v types.AttributeValue) error
}

func strField(name string, required bool, p func(*Record) *string) field {
	return field{name: name, typ: typeS, required: required,
		put: func(r *Record) types.AttributeValue {
			if v := *p(r); v != "" {
				return &types.AttributeValueMemberS{Value: v}
			}
			return nil
		},
		get: func(r *Record, v types.AttributeValue) error {
			*p(r) = v.(*types.AttributeValueMemberS).Value
			return nil
		}}
}

func jsonField(name string, p func(*Record) *json.RawMessage) field {
	return field{name: name, typ: typeS,
		put: func(r *Record) types.AttributeValue {
			if v := *p(r); len(v) > 0 {
				return &types.AttributeValueMemberS{Value: string(v)}
			}
			return nil
		},
		get: func(r *Record, v types.AttributeValue) error {
			*p(r) = json.RawMessage(v.(*types.AttributeValueMemberS).Value)
			return nil
		}}
}

func intField(name string, required bool, p func(*Record) *int64) field {
	return field{name: name, typ: typeN, required: required,
		put: func(r *Record) types.AttributeValue {
			if v := *p(r); v != 0 {
				return number(v)
			}
			return nil
		},
		get: func(r *Record, v types.AttributeValue) error {
			n, err := parseInt(v)
			*p(r) = n
			return err
		}}
}

// msField is a time (Unix milliseconds) or a duration (milliseconds).
func msField[T time.Time | time.Duration](name string, required bool, p func(*Record) *T) field {
	toMs := func(v T) int64 {
		switch v := any(v).(type) {
		case time.Time:
			if v.IsZero() {
				return 0
			}
			return v.UnixMilli()
		case time.Duration:
			return v.Milliseconds()
		}
		return 0
	}
	fromMs := func(ms int64) T {
		var zero T
		switch any(zero).(type) {
		case time.Time:
			return any(time.UnixMilli(ms).UTC()).(T)
		default:
			return any(time.Duration(ms) * time.Millisecond).(T)
		}
	}
	return field{name: name, typ: typeN, required: required,
		put: func(r *Record) types.AttributeValue {
			if ms := toMs(*p(r)); ms != 0 {
				return number(ms)
			}
			return nil
		},
		get: func(r *Record, v types.AttributeValue) error {
			ms, err := parseInt(v)
			if err == nil && ms < 0 {
				err = fmt.Errorf("must not be negative")
			}
			*p(r) = fromMs(ms)
			return err
		}}
}

// fields are every attribute of an item, in the package documentation's
// order: the one table encode and decode both follow.
var fields = []field{
	strField(attrID, true, func(r *Record) *string { return &r.ID }),
	strField(attrKind, true, func(r *Record) *string { return (*string)(&r.Kind) }),
	strField(attrServerID, true, func(r *Record) *string { return &r.ServerID }),
	strField(attrTool, true, func(r *Record) *string { return &r.Tool }),
	strField(attrOwner, true, func(r *Record) *string { return &r.Owner }),
	strField(attrOwnerID, true, func(r *Record) *string { return &r.OwnerID }),
	jsonField(attrPrincipal, func(r *Record) *json.RawMessage { return &r.Principal }),
	strField(attrStatus, true, func(r *Record) *string { return (*string)(&r.Status) }),
	strField(attrStatusMessage, false, func(r *Record) *string { return &r.StatusMessage }),
	msField(attrCreatedAt, true, func(r *Record) *time.Time { return &r.CreatedAt }),
	msField(attrUpdatedAt, true, func(r *Record) *time.Time { return &r.UpdatedAt }),
	msField(attrTTLMs, true, func(r *Record) *time.Duration { return &r.TTL }),
	msField(attrPollMs, false, func(r *Record) *time.Duration { return &r.PollInterval }),
	jsonField(attrParams, func(r *Record) *json.RawMessage { return &r.Params }),
	strField(attrProtocol, false, func(r *Record) *string { return &r.Protocol }),
	strField(attrTraceparent, false, func(r *Record) *string { return &r.Traceparent }),
	strField(attrTracestate, false, func(r *Record) *string { return &r.Tracestate }),
	jsonField(attrResult, func(r *Record) *json.RawMessage { return &r.Result }),
	jsonField(attrError, func(r *Record) *json.RawMessage { return &r.Error }),
	jsonField(attrInputRequests, func(r *Record) *json.RawMessage { return &r.InputRequests }),
	strField(attrRequestState, false, func(r *Record) *string { return &r.RequestState }),
	jsonField(attrInputResponses, func(r *Record) *json.RawMessage { return &r.InputResponses }),
	strField(attrLeaseID, false, func(r *Record) *string { return &r.LeaseID }),
	{name: attrCancelRequested, typ: typeBOOL,
		put: func(r *Record) types.AttributeValue {
			if r.CancelRequested {
				return &types.AttributeValueMemberBOOL{Value: true}
			}
			return nil
		},
		get: func(r *Record, v types.AttributeValue) error {
			r.CancelRequested = v.(*types.AttributeValueMemberBOOL).Value
			return nil
		}},
	{name: attrAttempt, typ: typeN,
		put: func(r *Record) types.AttributeValue {
			if r.Attempt != 0 {
				return number(int64(r.Attempt))
			}
			return nil
		},
		get: func(r *Record, v types.AttributeValue) error {
			n, err := parseInt(v)
			if err == nil && (n < 0 || n > 1<<31-1) {
				err = fmt.Errorf("must be a whole number from 0 to %d", 1<<31-1)
			}
			r.Attempt = int(n)
			return err
		}},
	msField(attrRunUntil, false, func(r *Record) *time.Time { return &r.RunUntil }),
	strField(attrUpstreamID, false, func(r *Record) *string { return &r.UpstreamID }),
	intField(attrVersion, true, func(r *Record) *int64 { return &r.Version }),
	// Written from CreatedAt+TTL; read only to check it is there.
	{name: AttrTTL, typ: typeN, required: true,
		put: func(r *Record) types.AttributeValue { return number(ttlSeconds(r)) },
		get: func(_ *Record, v types.AttributeValue) error { _, err := parseInt(v); return err }},
}

var fieldByName = func() map[string]*field {
	m := make(map[string]*field, len(fields))
	for i := range fields {
		m[fields[i].name] = &fields[i]
	}
	return m
}()

// Attributes lists the item's attribute names, in the package
// documentation's order.
func Attributes() []string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	return names
}

// ttlSeconds is the item's TTL: ttlGrace after the task expires, in whole
// seconds rounded up.
func ttlSeconds(r *Record) int64 {
	at := r.ExpiresAt().Add(ttlGrace)
	s := at.Unix()
	if at.Nanosecond() > 0 {
		s++
	}
	return s
}

func number(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func parseInt(v types.AttributeValue) (int64, error) {
	n, err := strconv.ParseInt(v.(*types.AttributeValueMemberN).Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("must be a whole number")
	}
	return n, nil
}

// Item is r as the tasks table stores it. It does not validate r (Create
// and Update do).
func Item(r *Record) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, len(fields))
	for _, f := range fields {
		if v := f.put(r); v != nil {
			item[f.name] = v
		}
	}
	return item
}

// ItemError means an item of the tasks table cannot be read as a task: it
// has an attribute this package does not write, a value of the wrong type
// or out of range, or lacks a required one. Problems name each.
type ItemError struct {
	Problems []string
}

func (e *ItemError) Error() string {
	return "tasks: the task's item is invalid: " + strings.Join(e.Problems, "; ")
}

// Parse reads an item of the tasks table, strictly (*ItemError). It does
// not look at the time: an expired task parses.
func Parse(item map[string]types.AttributeValue) (*Record, error) {
	r := &Record{}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(item)) {
		f, ok := fieldByName[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: unknown attribute", clip.Escape(clip.String(name, clip.Short))))
			continue
		}
		v := item[name]
		if got := store.TypeOf(v); got != f.typ {
			problems = append(problems, fmt.Sprintf("%s: must be %s, is %s", name, f.typ, got))
			continue
		}
		if err := f.get(r, v); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
		}
	}
	for _, f := range fields {
		if _, ok := item[f.name]; f.required && !ok {
			problems = append(problems, f.name+": missing")
		}
	}
	if _, ok := item[attrKind]; ok && !r.Kind.known() {
		problems = append(problems, fmt.Sprintf("%s: %q is not %s or %s", attrKind, clip.Escape(clip.String(string(r.Kind), clip.Short)), KindGateway, KindRelay))
	}
	if _, ok := item[attrStatus]; ok && !r.Status.known() {
		problems = append(problems, fmt.Sprintf("%s: %q is not a task status", attrStatus, clip.Escape(clip.String(string(r.Status), clip.Short))))
	}
	if _, ok := item[attrVersion]; ok && r.Version < 1 {
		problems = append(problems, attrVersion+": must be 1 or more")
	}
	if len(problems) > 0 {
		return nil, &ItemError{Problems: problems}
	}
	return r, nil
}

// sameItem reports whether two items hold the same attributes with the
// same values, for the types Item writes.
func sameItem(a, b map[string]types.AttributeValue) bool {
	if len(a) != len(b) {
		return false
	}
	for name, va := range a {
		vb, ok := b[name]
		if !ok {
			return false
		}
		switch va := va.(type) {
		case *types.AttributeValueMemberS:
			vb, ok := vb.(*types.AttributeValueMemberS)
			if !ok || va.Value != vb.Value {
				return false
			}
		case *types.AttributeValueMemberN:
			vb, ok := vb.(*types.AttributeValueMemberN)
			if !ok || va.Value != vb.Value {
				return false
			}
		case *types.AttributeValueMemberBOOL:
			vb, ok := vb.(*types.AttributeValueMemberBOOL)
			if !ok || va.Value != vb.Value {
				return false
			}
		default:
			return false
		}
	}
	return true
}
