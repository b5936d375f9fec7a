// Package upstream calls upstream MCP servers with the official MCP Go SDK,
// over streamable HTTP or SSE, and keeps their client sessions for reuse
// across calls (and across warm Lambda invocations).
//
// A session serves one call at a time: a failure of one call's transport
// breaks only that session, and notifications the upstream sends during a
// call reach that call alone. Idle sessions are kept per upstream identity
// (URL, credential, headers) and per principal (the agent a call is made
// for): a stateful upstream's state for one agent never reaches another. A
// broken session is closed and replaced by the next call, never fatal.
//
// Each server's credential is added by a transport layer of its own (see
// credential.go): the agent's credentials never go upstream. Servers of
// transport openapi are plain HTTP APIs called through package openapi.
//
// Tool lists are reused for Options.ToolsTTL, or the upstream's smaller
// ttlMs. A list the upstream gives every caller alike is fetched on a
// session of the gateway's own, on which no agent calls tools, and, for
// limited servers, shared by the fleet through a Catalog; a list it marks
// private is fetched and kept per principal. What one upstream can make the
// gateway read is bounded (see limits.go).
//
// A tool call is an Exchange: its caller may stop waiting for it, tell the
// upstream to stop (Stop) in every way the upstream's protocol allows
// without losing the late answer, and learn when the upstream is known to
// have stopped working on the call (Stopped).
//
// The pool's parts are files of their own: its options (options.go), the
// HTTP client and its size-limit transport (httpclient.go), the credential
// cache (credcache.go), the session pool (sessions.go), the tool-list cache
// (tools.go), the fleet's catalog and list invalidations (catalog.go) and
// the servers' Info (info.go); this file holds the Pool and the keys its
// caches share. Credentials are credential.go and one auth_<type>.go per
// auth type.
package upstream

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
)

// Pool holds client sessions to upstream servers.
type Pool struct {
	client *mcp.Client
	// trace makes the spans of upstream HTTP requests; nil: none.
	trace HTTPTracer
	// http sends requests for servers that may not reach local
	// addresses, local for those that may (allow_local, or AllowLocal).
	http, local *http.Client
	maxIdle     int
	idleTTL     time.Duration
	toolsTTL    time.Duration
	catalog     Catalog
	check       time.Duration
	log         *slog.Logger
	maxResp     int64
	maxList     int64
	maxPages    int

	secrets    Secrets
	reserved   []Reserved
	allowLocal bool
	awsCreds   aws.CredentialsProvider
	awsRegion  string

	mu    sync.Mutex
	idle  map[string][]*session // by session key, newest last
	tools map[string]*toolList  // by session key
	info  map[string]infoEntry  // by session key: the upstream's last initialize result
	apis  map[string]*apiEntry  // by identity key: OpenAPI-backed servers' documents
	gens  map[string]*lists     // by identity key: tool lists' invalidations
	// coalesce is the least time between two invalidations of one
	// upstream's lists (listChangedEvery).
	coalesce time.Duration
	creds    map[string]*credential // by identity key
	swept    time.Time
	// listeners routes notifications received on a session to its call.
	listeners sync.Map // *mcp.ClientSession → *Listener
	closed    bool
	connects  atomic.Int64
}

// Listener receives the notifications an upstream sends while a call runs.
type Listener struct {
	// Progress receives notifications/progress.
	Progress func(context.Context, *mcp.ProgressNotificationParams)
	// Log receives notifications/message.
	Log func(context.Context, *mcp.LoggingMessageParams)
}

// New returns a Pool.
func New(opts Options) *Pool {
	p := &Pool{
		http:      opts.HTTPClient,
		maxIdle:   opts.MaxIdle,
		idleTTL:   opts.IdleTimeout,
		toolsTTL:  opts.ToolsTTL,
		log:       opts.Logger,
		maxResp:   opts.MaxResponseBytes,
		maxList:   opts.MaxListBytes,
		maxPages:  opts.MaxListPages,
		idle:      map[string][]*session{},
		tools:     map[string]*toolList{},
		info:      map[string]infoEntry{},
		apis:      map[string]*apiEntry{},
		gens:      map[string]*lists{},
		coalesce:  listChangedEvery,
		creds:     map[string]*credential{},
		secrets:   opts.Secrets,
		awsCreds:  opts.AWSCredentials,
		awsRegion: opts.AWSRegion,
		catalog:   opts.Catalog,
		check:     opts.CatalogCheck,
		trace:     opts.Trace,
	}
	if p.maxResp <= 0 {
		p.maxResp = DefaultMaxResponseBytes
	}
	if p.maxList <= 0 {
		p.maxList = DefaultMaxListBytes
	}
	if p.maxPages <= 0 {
		p.maxPages = DefaultMaxListPages
	}
	p.local = p.http
	if p.http == nil {
		p.http, p.local = NewHTTPClient(p.maxResp, opts.AllowLocal), NewHTTPClient(p.maxResp, true)
		if opts.AllowLocal {
			p.local = p.http
		}
	}
	p.reserved, p.allowLocal = opts.Reserved, opts.AllowLocal
	if p.maxIdle <= 0 {
		p.maxIdle = DefaultMaxIdle
	}
	if p.idleTTL <= 0 {
		p.idleTTL = DefaultIdleTimeout
	}
	if p.toolsTTL <= 0 {
		p.toolsTTL = DefaultToolsTTL
	}
	if p.check <= 0 {
		p.check = DefaultCatalogCheck
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	p.client = mcp.NewClient(&mcp.Implementation{Name: "mcpgate", Version: version}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		// The gateway relays results as they are; it cannot answer an
		// upstream's requests for input on an agent's behalf.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			if l := p.listener(req.Session); l != nil && l.Progress != nil {
				l.Progress(ctx, req.Params)
			}
		},
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			if l := p.listener(req.Session); l != nil && l.Log != nil {
				l.Log(ctx, req.Params)
			}
		},
	})
	registerTaskMethods(p.client)
	return p
}

func (p *Pool) listener(cs *mcp.ClientSession) *Listener {
	if v, ok := p.listeners.Load(cs); ok {
		return v.(*Listener)
	}
	return nil
}

// Connects is how many sessions the pool has opened.
func (p *Pool) Connects() int64 { return p.connects.Load() }

// identityKey names how the gateway appears to srv's upstream (URL,
// transport, credential, headers), without any secret value.
func identityKey(srv *registry.Server) string { return srv.IdentityHash() }

// sessionKey names the sessions, tool list and info of srv as seen by
// one principal.
func sessionKey(srv *registry.Server, c Caller) string {
	return identityKey(srv) + " " + c.Principal
}

// held returns m[key], made if absent; p.mu guards m.
func held[T any](p *Pool, m map[string]*T, key string) *T {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := m[key]
	if !ok {
		v = new(T)
		m[key] = v
	}
	return v
}
