package taskserver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// outcome is how a job ended: a CallToolResult (as a JSON object), or a
// JSON-RPC error.
type outcome struct {
	result map[string]any
	rpcErr *jsonrpc.Error
}

func text(s string, isError bool) outcome {
	r := map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}}
	if isError {
		r["isError"] = true
	}
	return outcome{result: r}
}

// askFunc asks the client for input (requests by key, each an
// {"method", "params"} input request) and returns the answers by key.
type askFunc func(ctx context.Context, requests map[string]any) (map[string]json.RawMessage, error)

// fixture is one tool: its declaration and its job.
type fixture struct {
	name, description string
	schema            map[string]any
	// tasks: the tool supports tasks; required: only as a task.
	tasks, required bool
	// before is input asked for synchronously before a task is created.
	before *inputs
	run    func(ctx context.Context, s *Server, args map[string]any, answered map[string]json.RawMessage, ask askFunc) (outcome, error)
}

func (f fixture) support() string {
	switch {
	case f.required:
		return "required"
	case f.tasks:
		return "optional"
	}
	return "forbidden"
}

// inputs are input requests by key.
type inputs map[string]any

func (in inputs) missing(answered map[string]json.RawMessage) map[string]any {
	return missingOf(in, answered)
}

// elicit is an elicitation/create input request for a form of fields (by
// name, their JSON Schema type).
func elicit(message string, fields map[string]string) map[string]any {
	props := map[string]any{}
	required := []string{}
	for name, typ := range fields {
		props[name] = map[string]any{"type": typ}
		required = append(required, name)
	}
	return map[string]any{"method": "elicitation/create", "params": map[string]any{
		"mode": "form", "message": message,
		"requestedSchema": map[string]any{"type": "object", "properties": props, "required": required},
	}}
}

// elicited reads an elicitation's answer: whether it was accepted, and its
// content.
func elicited(raw json.RawMessage) (bool, map[string]any) {
	var r struct {
		Action  string         `json:"action"`
		Content map[string]any `json:"content"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return false, nil
	}
	return r.Action == "accept", r.Content
}

func object(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var fixtures = []fixture{
	{
		name: "greet", description: "Says hello, at once.",
		schema: object(map[string]any{"name": map[string]any{"type": "string"}}, "name"),
		run: func(_ context.Context, _ *Server, args map[string]any, _ map[string]json.RawMessage, _ askFunc) (outcome, error) {
			return text(fmt.Sprintf("Hello, %v!", args["name"]), false), nil
		},
	},
	{
		name: "slow_compute", description: "Works for the given seconds, then answers.", tasks: true,
		schema: object(map[string]any{"seconds": map[string]any{"type": "number", "minimum": 0}, "label": map[string]any{"type": "string"}}),
		run: func(ctx context.Context, _ *Server, args map[string]any, _ map[string]json.RawMessage, _ askFunc) (outcome, error) {
			secs, _ := args["seconds"].(float64)
			if err := sleep(ctx, time.Duration(secs*float64(time.Second))); err != nil {
				return outcome{}, err
			}
			return text(fmt.Sprintf("computed %v after %vs", args["label"], secs), false), nil
		},
	},
	{
		name: "failing_job", description: "Fails as a tool does (isError).", tasks: true, required: true,
		schema: object(map[string]any{}),
		run: func(ctx context.Context, s *Server, _ map[string]any, _ map[string]json.RawMessage, _ askFunc) (outcome, error) {
			if err := sleep(ctx, s.opts.Step); err != nil {
				return outcome{}, err
			}
			return text("failing_job failed, as it always does", true), nil
		},
	},
	{
		name: "protocol_error_job", description: "Fails with a JSON-RPC error.", tasks: true,
		schema: object(map[string]any{}),
		run: func(ctx context.Context, s *Server, _ map[string]any, _ map[string]json.RawMessage, _ askFunc) (outcome, error) {
			if err := sleep(ctx, s.opts.Step); err != nil {
				return outcome{}, err
			}
			return outcome{rpcErr: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "protocol_error_job failed inside the server"}}, nil
		},
	},
	{
		name: "confirm_delete", description: "Asks the client to confirm, then deletes (or keeps) the file.", tasks: true,
		schema: object(map[string]any{"filename": map[string]any{"type": "string"}}, "filename"),
		run: func(ctx context.Context, _ *Server, args map[string]any, _ map[string]json.RawMessage, ask askFunc) (outcome, error) {
			name := fmt.Sprint(args["filename"])
			got, err := ask(ctx, map[string]any{"confirm": elicit("Delete "+name+"?", map[string]string{"confirm": "boolean"})})
			if err != nil {
				return outcome{}, err
			}
			if ok, content := elicited(got["confirm"]); ok && content["confirm"] == true {
				return text("deleted "+name, false), nil
			}
			return text("kept "+name, false), nil
		},
	},
	{
		name: "multi_input", description: "Asks for two inputs at once.", tasks: true,
		schema: object(map[string]any{}),
		run: func(ctx context.Context, _ *Server, _ map[string]any, _ map[string]json.RawMessage, ask askFunc) (outcome, error) {
			got, err := ask(ctx, map[string]any{
				"first":  elicit("First input", map[string]string{"name": "string"}),
				"second": elicit("Second input", map[string]string{"confirm": "boolean"}),
			})
			if err != nil {
				return outcome{}, err
			}
			_, a := elicited(got["first"])
			_, b := elicited(got["second"])
			return text(fmt.Sprintf("got %v and %v", a["name"], b["confirm"]), false), nil
		},
	},
	{
		name: "test_tool_with_task", description: "Asks for a name synchronously, then greets it in a task.", tasks: true, required: true,
		schema: object(map[string]any{}),
		before: &inputs{"user_name": elicit("Your name?", map[string]string{"name": "string"})},
		run: func(_ context.Context, _ *Server, _ map[string]any, answered map[string]json.RawMessage, _ askFunc) (outcome, error) {
			_, content := elicited(answered["user_name"])
			return text(fmt.Sprintf("Hello, %v!", content["name"]), false), nil
		},
	},
}

func fixtureNamed(name string) (fixture, bool) {
	for _, f := range fixtures {
		if f.name == name {
			return f, true
		}
	}
	return fixture{}, false
}
