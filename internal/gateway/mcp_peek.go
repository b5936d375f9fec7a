package gateway

import (
	"bytes"
	"encoding/json"
	"io"
)

// knownMethods are the methods the SDK's server dispatches; it answers any
// other with a bare HTTP 400, so the gateway answers those itself. The
// go-sdk (v1.8.0) keeps its own list (serverMethodInfos) and its method
// names unexported, so they are listed again here.
var knownMethods = map[string]bool{
	"initialize": true, "ping": true, "server/discover": true,
	"tools/list": true, "tools/call": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"resources/subscribe": true, "resources/unsubscribe": true, "subscriptions/listen": true,
	"prompts/list": true, "prompts/get": true,
	"completion/complete": true, "logging/setLevel": true,
	"notifications/initialized": true, "notifications/cancelled": true,
	"notifications/progress": true, "notifications/roots/list_changed": true,
}

// peeked is what the gateway reads of an MCP request before the SDK does.
type peeked struct {
	method string
	id     json.RawMessage
	name   string
	// taskID is params.taskId as it came (a tasks/ request's).
	taskID   json.RawMessage
	progress bool
	batch    bool
	// trace is the agent's trace context from params._meta.
	trace TraceMeta
	// repeated is a member that the message, its params or params._meta
	// names twice, "" if none.
	repeated string
}

// peek reads a message as the SDK will: its members by their exact names
// (the SDK's decoder matches names exactly, where Go's matches them
// ignoring case), but for the trace context of params._meta, whose keys
// are read ignoring case (traceKey). It finds a member named twice in the
// message, its params or params._meta, names compared ignoring case
// (foldKey): a decoder may keep either value, so the gateway and the SDK
// could read two different messages in one (the log saying ping while a
// tool runs), and the caller refuses the message before either acts on
// it. A body that is not a JSON object is left to the SDK to refuse.
func peek(body []byte) peeked {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return peeked{batch: true}
	}
	var p peeked
	top, ok := members(body)
	if !ok {
		return p
	}
	var params, meta []member
	for _, m := range top {
		switch m.key {
		case "id":
			p.id = m.value
		case "method":
			_ = json.Unmarshal(m.value, &p.method)
		case "params":
			params, _ = members(m.value)
		}
	}
	for _, m := range params {
		switch m.key {
		case "name":
			_ = json.Unmarshal(m.value, &p.name)
		case "taskId":
			p.taskID = m.value
		case "_meta":
			meta, _ = members(m.value)
		}
	}
	for _, m := range meta {
		switch {
		case m.key == "progressToken":
			p.progress = string(m.value) != "null"
		case traceKey(m.key, "traceparent"):
			_ = json.Unmarshal(m.value, &p.trace.Traceparent)
		case traceKey(m.key, "tracestate"):
			_ = json.Unmarshal(m.value, &p.trace.Tracestate)
		}
	}
	for _, ms := range [][]member{top, params, meta} {
		if k, ok := repeated(ms); ok {
			p.repeated = k
			if foldKey(k) == foldKey("id") {
				p.id = nil // which one the SDK reads is unknown
			}
			break
		}
	}
	return p
}

// member is one member of a JSON object.
type member struct {
	key   string
	value json.RawMessage
}

// members returns the members of the JSON object data in order, repeated
// names included; false when data is not one object.
func members(data []byte) ([]member, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var out []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	return out, true
}

// repeated returns a name that ms holds twice, compared ignoring case as
// duplicateKey compares arguments' keys.
func repeated(ms []member) (string, bool) {
	seen := make(map[string]bool, len(ms))
	for _, m := range ms {
		k := foldKey(m.key)
		if seen[k] {
			return m.key, true
		}
		seen[k] = true
	}
	return "", false
}

// messageDepth is how deep a tools/call message nests its arguments
// (message, params, arguments).
const messageDepth = 3

// maxUnauthenticatedPeek bounds what is read of an unauthenticated
// request's body to find its id.
const maxUnauthenticatedPeek = 8 << 10

// peekID finds the id of the JSON-RPC request in r, reading its top-level
// members in turn and skipping every other member's value: nil when r
// holds no object, no id, or not one within what it yields.
func peekID(r io.Reader) json.RawMessage {
	dec := json.NewDecoder(r)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if key == "id" {
			return validID(v)
		}
	}
	return nil
}

// validID returns id if it is one a JSON-RPC request may carry (a string
// or a number), else nil.
func validID(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return nil
	}
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return id
	}
	return nil
}
