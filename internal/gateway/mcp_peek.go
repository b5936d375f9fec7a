package gateway

import (
	"bytes"
	"encoding/json"
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
