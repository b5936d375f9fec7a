package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/retryafter"
	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// maxErrorBody bounds StatusError.Body.
const maxErrorBody = 1 << 10

// MaxStructuredBytes bounds a body that is also given as a result's
// structured content: a larger one is text only, so that the answer does
// not carry it twice.
const MaxStructuredBytes = 1 << 20

// Call calls the tool named name with args, a JSON object (empty or null
// means no arguments), as one HTTP request, and maps the response:
//
//   - 2xx: a result with the body as text, and the decoded body as
//     structured content if it is a JSON object;
//   - 4xx: a result with IsError set, the status and the body as text (the
//     API's answer to a bad call, for the caller to read and fix);
//   - any other status: a *StatusError;
//   - no response: a *TransportError (it wraps the context's error if ctx
//     ended).
//
// Arguments that do not fit the tool are an *ArgsError, and an unknown
// tool is ErrUnknownTool; in both cases nothing is sent.
func (a *API) Call(ctx context.Context, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	op, ok := a.ops[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownTool, clip.String(name, 140))
	}
	req, err := op.request(ctx, args, a.header)
	if err != nil {
		return nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, op.transportError(safeurl.Cause(err))
	}
	defer resp.Body.Close()
	data, truncated, err := readLimited(resp.Body, a.maxResp)
	if err != nil {
		return nil, op.transportError(fmt.Errorf("read response: %w", safeurl.Cause(err)))
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return success(resp, data, truncated, a.maxResp), nil
	case code >= 400 && code < 500 && code != http.StatusTooManyRequests:
		return failure(resp, data, truncated, a.maxResp), nil
	default:
		return nil, &StatusError{
			Tool: op.tool, Method: op.method, Path: op.path,
			StatusCode: code, Body: bytes.Clone(data[:min(len(data), maxErrorBody)]),
			RetryAfter: retryafter.From(resp, time.Now()),
		}
	}
}

func (op *operation) transportError(err error) error {
	return &TransportError{Tool: op.tool, Method: op.method, Path: op.path, Err: err}
}

// readLimited reads up to limit bytes of r and reports whether there was
// more.
func readLimited(r io.Reader, limit int64) ([]byte, bool, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > limit {
		return data[:limit], true, nil
	}
	return data, false, nil
}

// request builds the HTTP request for a call, or an *ArgsError.
func (op *operation) request(ctx context.Context, raw json.RawMessage, header http.Header) (*http.Request, error) {
	argErr := &ArgsError{Tool: op.tool}
	problem := func(arg, format string, a ...any) {
		argErr.Problems = append(argErr.Problems, ArgProblem{Arg: arg, Reason: fmt.Sprintf(format, a...)})
	}
	args := map[string]json.RawMessage{}
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if trimmed[0] != '{' || json.Unmarshal(trimmed, &args) != nil {
			problem("", "arguments must be a JSON object")
			return nil, argErr
		}
	}
	var unknown []string
	for name := range args {
		if _, ok := op.args[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		if len(op.argNames) == 0 {
			problem(clip.String(name, clip.Short), "unknown argument (the tool takes none)")
		} else {
			problem(clip.String(name, clip.Short), "unknown argument (known: %s)", strings.Join(op.argNames, ", "))
		}
	}

	pathValues := map[string]string{}
	query := url.Values{}
	headers := http.Header{}
	for _, p := range op.params {
		v, ok := args[p.name]
		if !ok || isNull(v) {
			if p.required {
				problem(p.name, "required %s parameter is missing", p.in)
			}
			continue
		}
		if err := p.serialize(v, pathValues, query, headers); err != nil {
			problem(p.name, "%s", err)
		}
	}
	var bodyReader io.Reader
	if op.body != nil {
		if v, ok := args[BodyArg]; ok && !isNull(v) {
			bodyReader = bytes.NewReader(v)
		} else if op.body.required {
			problem(BodyArg, "required request body is missing")
		}
	}
	if len(argErr.Problems) > 0 {
		return nil, argErr
	}

	var u strings.Builder
	u.WriteString(op.base)
	for _, part := range op.parts {
		if part.param != "" {
			u.WriteString(url.PathEscape(pathValues[part.param]))
		} else {
			u.WriteString(part.lit)
		}
	}
	if len(query) > 0 {
		u.WriteByte('?')
		u.WriteString(query.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, op.method, u.String(), bodyReader)
	if err != nil {
		return nil, op.transportError(fmt.Errorf("build request: %w", safeurl.Cause(err)))
	}
	for k, vs := range headers {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json, */*;q=0.5")
	if bodyReader != nil {
		req.Header.Set("Content-Type", op.body.mediaType)
	}
	for k, vs := range header {
		req.Header.Del(k)
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return req, nil
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// serialize places a parameter's value, following its style.
func (p *param) serialize(raw json.RawMessage, pathValues map[string]string, query url.Values, headers http.Header) error {
	var value any
	if p.json {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return errors.New("is not valid JSON")
		}
		value = buf.String()
	} else {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&value); err != nil {
			return errors.New("is not valid JSON")
		}
	}
	switch p.in {
	case openapi3.ParameterInPath:
		s, err := simple(value, p.explode)
		if err != nil {
			return err
		}
		switch s {
		case "":
			return errors.New("path parameter must not be empty")
		case ".", "..":
			// A dot segment would change the path (RFC 3986 removes it,
			// and so do servers that decode %2E first).
			return errors.New(`path parameter must not be "." or ".."`)
		}
		pathValues[p.name] = s
	case openapi3.ParameterInHeader:
		s, err := simple(value, p.explode)
		if err != nil {
			return err
		}
		if !clip.HeaderValue(s) {
			return errors.New("header value must not contain control characters")
		}
		headers.Set(p.name, s)
	case openapi3.ParameterInQuery:
		return p.addQuery(value, query)
	}
	return nil
}

// simple is the "simple" style of path and header parameters.
func simple(value any, explode bool) (string, error) {
	switch v := value.(type) {
	case []any:
		items, err := scalars(v)
		if err != nil {
			return "", err
		}
		return strings.Join(items, ","), nil
	case map[string]any:
		pairs, err := objectPairs(v)
		if err != nil {
			return "", err
		}
		var parts []string
		for _, kv := range pairs {
			if explode {
				parts = append(parts, kv[0]+"="+kv[1])
			} else {
				parts = append(parts, kv[0], kv[1])
			}
		}
		return strings.Join(parts, ","), nil
	default:
		s, ok := scalar(value)
		if !ok {
			return "", errNotScalar
		}
		return s, nil
	}
}

// addQuery is the form, spaceDelimited, pipeDelimited and deepObject
// styles of query parameters.
func (p *param) addQuery(value any, query url.Values) error {
	if p.style == openapi3.SerializationDeepObject {
		obj, ok := value.(map[string]any)
		if !ok {
			return errors.New("must be an object (deepObject style)")
		}
		pairs, err := objectPairs(obj)
		if err != nil {
			return err
		}
		for _, kv := range pairs {
			query.Add(p.name+"["+kv[0]+"]", kv[1])
		}
		return nil
	}
	sep := ","
	switch p.style {
	case openapi3.SerializationSpaceDelimited:
		sep = " "
	case openapi3.SerializationPipeDelimited:
		sep = "|"
	}
	switch v := value.(type) {
	case []any:
		items, err := scalars(v)
		if err != nil {
			return err
		}
		if p.explode {
			for _, s := range items {
				query.Add(p.name, s)
			}
		} else {
			query.Add(p.name, strings.Join(items, sep))
		}
	case map[string]any:
		pairs, err := objectPairs(v)
		if err != nil {
			return err
		}
		if p.explode {
			// Each member becomes a query parameter of its own: only the
			// declared ones, or a caller could add any parameter.
			for _, kv := range pairs {
				if !slices.Contains(p.keys, kv[0]) {
					if len(p.keys) == 0 {
						return fmt.Errorf("unknown key %q (the parameter declares no properties)", clip.String(kv[0], clip.Short))
					}
					return fmt.Errorf("unknown key %q (known: %s)", clip.String(kv[0], clip.Short), strings.Join(p.keys, ", "))
				}
			}
			for _, kv := range pairs {
				query.Add(kv[0], kv[1])
			}
		} else {
			var parts []string
			for _, kv := range pairs {
				parts = append(parts, kv[0], kv[1])
			}
			query.Add(p.name, strings.Join(parts, sep))
		}
	default:
		s, ok := scalar(value)
		if !ok {
			return errNotScalar
		}
		query.Add(p.name, s)
	}
	return nil
}

var (
	errNotScalar    = errors.New("must be a string, number, boolean, or an array or object of them")
	errNestedValues = errors.New("array items and object values must be strings, numbers or booleans")
)

func scalar(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	case bool:
		if v {
			return "true", true
		}
		return "false", true
	}
	return "", false
}

func scalars(list []any) ([]string, error) {
	out := make([]string, len(list))
	for i, item := range list {
		s, ok := scalar(item)
		if !ok {
			return nil, errNestedValues
		}
		out[i] = s
	}
	return out, nil
}

// objectPairs returns an object's members as key, value pairs, by key.
func objectPairs(obj map[string]any) ([][2]string, error) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([][2]string, len(keys))
	for i, k := range keys {
		s, ok := scalar(obj[k])
		if !ok {
			return nil, errNestedValues
		}
		pairs[i] = [2]string{k, s}
	}
	return pairs, nil
}

// success maps a 2xx response.
func success(resp *http.Response, data []byte, truncated bool, limit int64) *mcp.CallToolResult {
	mt := mediaType(resp)
	res := &mcp.CallToolResult{}
	if strings.HasPrefix(mt, "image/") && !truncated && len(data) > 0 {
		res.Content = []mcp.Content{&mcp.ImageContent{Data: data, MIMEType: mt}}
		return res
	}
	text := bodyText(data, truncated, mt)
	if text == "" {
		text = fmt.Sprintf("HTTP %d %s (empty body)", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	res.Content = []mcp.Content{&mcp.TextContent{Text: text + truncationNote(truncated, limit)}}
	if !truncated && isJSONType(mt) && len(data) <= MaxStructuredBytes {
		if obj, ok := decodeObject(data); ok {
			res.StructuredContent = obj
		}
	}
	return res
}

// failure maps a 4xx response.
func failure(resp *http.Response, data []byte, truncated bool, limit int64) *mcp.CallToolResult {
	text := fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	if b := bodyText(data, truncated, mediaType(resp)); b != "" {
		text += "\n\n" + b
	}
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: text + truncationNote(truncated, limit)}},
	}
}

func mediaType(resp *http.Response) string {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

// bodyText returns the body as text, or says what it is if it is not
// UTF-8 text.
func bodyText(data []byte, truncated bool, mt string) string {
	if truncated {
		// The cut may have split a character.
		for i := 0; i < utf8.UTFMax && len(data) > 0 && !utf8.Valid(data); i++ {
			data = data[:len(data)-1]
		}
	}
	if !utf8.Valid(data) {
		if mt == "" {
			mt = "unknown type"
		}
		return fmt.Sprintf("(binary response of %d bytes, %s, not shown)", len(data), mt)
	}
	return string(data)
}

func truncationNote(truncated bool, limit int64) string {
	if !truncated {
		return ""
	}
	return fmt.Sprintf("\n\n[response truncated: only its first %d bytes are shown]", limit)
}

// decodeObject decodes data if it is exactly one JSON object.
func decodeObject(data []byte) (map[string]any, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return obj, true
}
