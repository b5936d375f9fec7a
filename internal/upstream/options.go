package upstream

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// Defaults for Options.
const (
	DefaultMaxIdle     = 8
	DefaultIdleTimeout = 5 * time.Minute
	DefaultToolsTTL    = 30 * time.Second
)

// Options configures a Pool. The zero value means defaults.
type Options struct {
	// HTTPClient sends the requests to upstreams. Nil means a client with
	// pooled keep-alive connections and MaxResponseBytes enforced, which
	// refuses to connect to loopback and link-local addresses (see
	// AllowLocal); a client of your own decides where it connects.
	HTTPClient *http.Client
	// AllowLocal lets every server's requests reach loopback and
	// link-local addresses (safeurl.LocalAddr): for local development and
	// tests, whose upstreams run on this host. Otherwise only a server
	// whose item sets allow_local may, and never a server an OpenAPI
	// document names.
	AllowLocal bool
	// Reserved are secrets the gateway keeps for itself (the request-state
	// key): a server whose credential refers to one, or whose credential's
	// value is one, is misconfigured, and nothing is sent.
	Reserved []Reserved
	// MaxResponseBytes bounds each upstream HTTP response body (one
	// streamable-HTTP POST, or one SSE stream) and each server-sent event.
	// An answer past it fails with a *LimitError. Zero means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// MaxListBytes bounds one upstream's tool list, all pages together.
	// Zero means DefaultMaxListBytes.
	MaxListBytes int64
	// MaxListPages bounds the pages of one upstream's tool list. Zero
	// means DefaultMaxListPages.
	MaxListPages int
	// MaxIdle is how many idle sessions are kept per upstream.
	MaxIdle int
	// IdleTimeout closes sessions unused for that long.
	IdleTimeout time.Duration
	// ToolsTTL is the longest an upstream's tool list is reused (by the
	// whole fleet, with a Catalog). An upstream's own smaller ttlMs
	// shortens it; a ttlMs of 0 or none at all means ToolsTTL.
	ToolsTTL time.Duration
	// Catalog, if not nil, shares the tool lists of limited servers (see
	// registry.Server.Limited) across the fleet: a list is read from it,
	// and only the instance it elects lists the upstream.
	Catalog Catalog
	// CatalogCheck is how often an instance holding a fresh list re-reads
	// the catalog's head, so that an invalidation reaches it. Zero means
	// DefaultCatalogCheck.
	CatalogCheck time.Duration
	// Trace, if not nil, makes the CLIENT spans of upstream HTTP requests
	// and puts their trace context in the requests' headers.
	Trace HTTPTracer
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Version is reported as the gateway's client version.
	Version string
	// Secrets resolves the secret references of servers' credentials; nil
	// means a server whose auth needs a secret cannot be called.
	Secrets Secrets
	// AWSCredentials sign requests to aws_sigv4 servers: the gateway's own
	// AWS identity (the function's role). Nil means such servers cannot be
	// called.
	AWSCredentials aws.CredentialsProvider
	// AWSRegion is the region aws_sigv4 signs for when a server names none.
	AWSRegion string
}

// DefaultCatalogCheck is the default for Options.CatalogCheck.
const DefaultCatalogCheck = 5 * time.Second

// HTTPTracer traces the HTTP requests sent to upstreams.
type HTTPTracer interface {
	// Start starts the CLIENT span of one upstream HTTP request, unless
	// its context is already in one (a tool call's exchange): it returns
	// the request to send, its context carrying the span, and a func to
	// call with the outcome.
	Start(req *http.Request) (*http.Request, func(*http.Response, error))
	// Inject sets the traceparent (and tracestate) of ctx's span in h,
	// replacing any there; it sets nothing when ctx has no span.
	Inject(ctx context.Context, h http.Header)
	// Send starts the CLIENT span of one MCP request sent to srv outside
	// a tool call (tools/list, a relayed resources/, prompts/ or
	// completion/ request) and sets the span's traceparent (and
	// tracestate) in meta, which the request sends as its params._meta.
	// The request's HTTP requests, sent with the context returned, carry
	// the same span as headers and make no span of their own; end is
	// called once with the request's outcome.
	Send(ctx context.Context, method string, srv *registry.Server, meta mcp.Meta) (_ context.Context, end func(error))
}
