package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/openapi"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// OpenAPI-backed servers (transport "openapi") have no MCP session: their
// tools come from the document, loaded once per instance and refreshed
// every ToolsTTL, and a call is one HTTP request. The gateway treats them
// like any upstream: same slots, timeouts and breaker.

// SpecError means an OpenAPI server's document could not be loaded or
// mapped; the server is misconfigured.
type SpecError struct {
	ServerID string
	Err      error
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("openapi server %s: %v", e.ServerID, e.Err)
}

func (e *SpecError) Unwrap() error { return e.Err }

type apiEntry struct {
	mu      sync.Mutex
	api     *openapi.API
	err     error
	fetched time.Time
	// origin is where the first good load sent the API's calls: a later
	// document that sends them elsewhere makes the server misconfigured.
	origin string
}

// loadFailureTTL is how long a failed load is remembered before trying
// again.
const loadFailureTTL = 5 * time.Second

func (p *Pool) openAPI(ctx context.Context, srv *registry.Server) (*openapi.API, error) {
	key := identityKey(srv)
	p.mu.Lock()
	e, ok := p.apis[key]
	if !ok {
		e = &apiEntry{}
		p.apis[key] = e
	}
	p.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	age := time.Since(e.fetched)
	if e.api != nil && age < p.toolsTTL {
		return e.api, nil
	}
	if e.api == nil && e.err != nil && age < loadFailureTTL {
		return nil, e.err
	}
	hc, routes := p.apiClient(srv)
	api, err := openapi.Load(ctx, openapi.Source{URL: srv.SpecURL, Path: srv.SpecPath}, openapi.Options{
		BaseURL: srv.URL, Origin: e.origin, MaxResponseBytes: p.maxResp, HTTPClient: hc,
	})
	e.fetched = time.Now()
	if err == nil {
		err = p.route(srv, api, routes)
	}
	if err != nil {
		if e.api != nil && !errors.Is(err, openapi.ErrOriginChanged) {
			// Keep serving the last good document.
			p.log.Warn("reloading an OpenAPI document failed; keeping the last one", "server_id", srv.ID, "error", err.Error())
			return e.api, nil
		}
		if errors.Is(err, openapi.ErrOriginChanged) {
			p.log.Error("an OpenAPI document moved its API to another origin; the server is misconfigured until the document or the item is fixed (set url to choose the API's origin)",
				"server_id", srv.ID, "error", err.Error())
		}
		e.api, e.err = nil, &SpecError{ServerID: srv.ID, Err: err}
		return nil, e.err
	}
	for _, s := range api.Skipped() {
		p.log.Info("OpenAPI operation left out", "server_id", srv.ID, "operation", s.Op, "reason", s.Reason)
	}
	if e.origin == "" {
		e.origin = api.Origin()
	}
	e.api, e.err = api, nil
	return api, nil
}

// errLocalAPI refuses an API origin taken from a document that names a
// loopback or link-local host.
var errLocalAPI = errors.New("the document sends calls to a loopback or link-local address, which a document may never name")

// route sets where api's calls go: only to its origin, with srv's
// credential and headers. An origin the document chose (no url, and not
// the spec_url's own) is never a local address, whatever allow_local says:
// refused here when the document names one, and when dialed when a name
// resolves to one.
func (p *Pool) route(srv *registry.Server, api *openapi.API, r *apiRoutes) error {
	origin, err := url.Parse(api.Origin())
	if err != nil {
		return fmt.Errorf("API origin: %w", err)
	}
	fromDoc := srv.URL == ""
	if spec, err := url.Parse(srv.SpecURL); err == nil && srv.SpecURL != "" && safeurl.SameOrigin(spec, origin) {
		fromDoc = false
	}
	var base http.RoundTripper = r.fetch
	if fromDoc {
		if safeurl.LocalHost(origin.Hostname()) {
			return errLocalAPI
		}
		base = newTransport(false)
	}
	if cred := p.credential(srv); !cred.empty() {
		base = &credTransport{base: base, cred: cred, origin: origin}
	}
	r.call = &originGuard{base: base, origin: origin, trace: p.trace}
	return nil
}

func (p *Pool) openAPITool(ctx context.Context, srv *registry.Server, name string) (*mcp.Tool, error) {
	api, err := p.openAPI(ctx, srv)
	if err != nil {
		return nil, err
	}
	for _, t := range api.Tools() {
		if t.Name == name {
			return t, nil
		}
	}
	return nil, ErrUnknownTool
}

// apiClient is the HTTP client of an OpenAPI server: openapi's own, whose
// document fetch goes out as the item allows, without the credential, and
// whose API calls take the route that route sets once the document is
// loaded.
func (p *Pool) apiClient(srv *registry.Server) (*http.Client, *apiRoutes) {
	hc := openapi.NewHTTPClient()
	r := &apiRoutes{fetch: newTransport(p.allowLocal || srv.AllowLocal)}
	hc.Transport = r
	return hc, r
}

// apiRoutes sends an OpenAPI server's requests: its API calls (requests
// marked by withCredential) through call, set before the API is used; the
// document's fetch through fetch.
type apiRoutes struct {
	fetch *http.Transport
	call  http.RoundTripper
}

func (r *apiRoutes) RoundTrip(req *http.Request) (*http.Response, error) {
	if marked, _ := req.Context().Value(credentialKey{}).(bool); marked {
		if r.call == nil {
			return nil, errors.New("openapi: the API is not routed yet")
		}
		return r.call.RoundTrip(req)
	}
	return r.fetch.RoundTrip(req)
}

// callOpenAPI makes the HTTP request of an OpenAPI tool call for c; x, if
// not nil, is the call's exchange, told before the request goes out.
func (p *Pool) callOpenAPI(ctx context.Context, srv *registry.Server, c Caller, params *mcp.CallToolParams, x *Exchange) (*mcp.CallToolResult, error) {
	api, err := p.openAPI(ctx, srv)
	if err != nil {
		return nil, err
	}
	ctx = withForward(withCredential(ctx), c.Header)
	var raw json.RawMessage
	switch a := params.Arguments.(type) {
	case json.RawMessage:
		raw = a
	case nil:
		raw = json.RawMessage("{}")
	default:
		if raw, err = json.Marshal(a); err != nil {
			return nil, fmt.Errorf("encode arguments: %w", err)
		}
	}
	if x != nil {
		if err := x.sending(&sentCall{}); err != nil {
			return nil, &Error{Kind: KindCanceled, ServerID: srv.ID, Err: err}
		}
	}
	res, err := api.Call(ctx, params.Name, raw)
	if err == nil {
		return res, nil
	}
	e := &Error{ServerID: srv.ID, Err: err}
	var argsErr *openapi.ArgsError
	var te *openapi.TransportError
	var credErr *CredentialError
	switch {
	case errors.Is(err, openapi.ErrUnknownTool):
		return nil, ErrUnknownTool
	case errors.As(err, &credErr) && ctx.Err() == nil:
		e.Kind = KindCredential
	case errors.As(err, &argsErr):
		e.Kind, e.RPC = KindRPC, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: argsErr.Error()}
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(err, &te) && errors.Is(te.Err, context.DeadlineExceeded):
		e.Kind = KindTimeout
	case ctx.Err() != nil:
		e.Kind = KindCanceled
	default:
		// A 5xx answer or a failed request: the API is unwell.
		e.Kind = KindUnavailable
		var se *openapi.StatusError
		if errors.As(err, &se) {
			e.Status, e.RetryAfter = se.StatusCode, se.RetryAfter
		}
	}
	return nil, e
}

func openAPIInfo(api *openapi.API, srv *registry.Server) *mcp.InitializeResult {
	name := api.Title()
	if name == "" {
		name = srv.ID
	}
	return &mcp.InitializeResult{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		ServerInfo:   &mcp.Implementation{Name: name, Version: "openapi"},
	}
}

// errNotMCP answers requests an OpenAPI server has no notion of.
var errNotMCP = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "an OpenAPI-backed server has only tools"}
