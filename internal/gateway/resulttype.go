package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// From 2026-07-28 every result carries resultType ("complete" or
// "input_required"). The SDK sets it on the results it builds itself (lists,
// server/discover) and on a tool, prompt or resource result only when its
// own handlers made it; the gateway answers tools/call, prompts/get and
// resources/read in a middleware, and relays upstreams that may speak an
// earlier version (whose results have none). So every result the gateway
// answers a 2026-07-28 request with is given resultType "complete" unless
// it has one: an upstream's "input_required" passes as it came.

// resultTypeComplete is the resultType of a final result.
const resultTypeComplete = "complete"

// withResultType returns res as it is answered to a 2026-07-28 request:
// with its resultType, "complete" where it has none.
func withResultType(res mcp.Result) mcp.Result {
	switch r := res.(type) {
	case nil:
		return nil
	case *encodedResult:
		r.typed = true
		return r
	case *mcp.CallToolResult:
		if e, err := newEncodedResult(r); err == nil {
			e.typed = true
			return e
		}
	case *mcp.ListToolsResult, *mcp.ListResourcesResult, *mcp.ListResourceTemplatesResult, *mcp.ListPromptsResult,
		*mcp.CompleteResult, *mcp.DiscoverResult, *mcp.SubscriptionsListenResult:
		// The SDK sets these itself.
		return res
	}
	if fmt.Sprintf("%T", res) == "*mcp.emptyResult" {
		// ping, logging/setLevel and the like: the SDK's empty result
		// cannot carry a field (or _meta) of its own.
		return &typedEmpty{ResultType: resultTypeComplete}
	}
	return &typedResult{Result: res}
}

// typedEmpty is an empty result with its resultType.
type typedEmpty struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// typedResult is a result marshalled with resultType "complete" when its own
// encoding has none.
type typedResult struct{ mcp.Result }

func (r *typedResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(r.Result)
	if err != nil {
		return nil, err
	}
	return addResultType(b)
}

// addResultType adds "resultType":"complete" to the encoded object b unless
// it has a top-level resultType member.
func addResultType(b []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("result is not an object: %w", err)
	}
	if _, ok := fields["resultType"]; ok {
		return b, nil
	}
	b = bytes.TrimRight(b, " \t\r\n")
	out := make([]byte, 0, len(b)+32)
	out = append(out, b[:len(b)-1]...)
	if len(fields) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"resultType":"`+resultTypeComplete+`"}`...)
	return out, nil
}
