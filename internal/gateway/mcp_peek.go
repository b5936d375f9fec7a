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
	method   string
	id       json.RawMessage
	name     string
	progress bool
	batch    bool
}

func peek(body []byte) peeked {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return peeked{batch: true}
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
			Meta struct {
				ProgressToken any `json:"progressToken"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return peeked{}
	}
	return peeked{method: msg.Method, id: msg.ID, name: msg.Params.Name, progress: msg.Params.Meta.ProgressToken != nil}
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
