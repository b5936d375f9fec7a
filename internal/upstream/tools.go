package upstream

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// Tool list bounds.
const (
	// maxTools bounds how many tools one upstream may list.
	maxTools = 2000
	// toolsRefreshFloor is the least time between two tool-list refreshes
	// caused by calls naming unknown tools.
	toolsRefreshFloor = time.Second
)

type toolList struct {
	mu    sync.Mutex
	tools map[string]*mcp.Tool
	// headers are the header properties of tools called, by name, each
	// for the definition it was worked out from.
	headers map[string]toolHeaders
	ordered []*mcp.Tool
	fetched time.Time
	// failed is when the last refresh failed, with err: a failing
	// upstream is asked again at most every toolsRefreshFloor.
	failed time.Time
	err    error
	// version is the catalog version held; scope the upstream's
	// cacheScope; expires when the list must be listed again; reuse until
	// when this instance uses it without looking at the catalog.
	version string
	scope   string
	expires time.Time
	reuse   time.Time
	// private: a list every caller would share turned out private
	// (cacheScope); until expires, each caller lists on its own session.
	private bool
	// gen is the upstream's list generation the list was renewed in: an
	// invalidation since makes it stale.
	gen int64
}

// Listing is an upstream's tool list and how long it may be reused.
type Listing struct {
	Tools []*mcp.Tool
	// Scope is the upstream's cacheScope, "public" or "private".
	Scope string
	// Expires is when the gateway lists the upstream again.
	Expires time.Time
}

// Tools returns srv's tools as c sees them (see ToolListing).
func (p *Pool) Tools(ctx context.Context, srv *registry.Server, c Caller) ([]*mcp.Tool, error) {
	ls, err := p.ToolListing(ctx, srv, c)
	if err != nil {
		return nil, err
	}
	return ls.Tools, nil
}

// MaxTTL is the longest the gateway reuses an upstream's list.
func (p *Pool) MaxTTL() time.Duration { return p.toolsTTL }

// listingPrincipal is the principal of the gateway's own sessions, on
// which the tool lists shared by every caller are fetched: no agent's call
// ever runs on them, so such a list reflects no agent's session state. An
// agent's principal ("key:…", "oauth:…", "iam:…") never takes this form.
const listingPrincipal = "mcpgate:lists"

// ToolListing returns srv's tools as c sees them, and how long they may be
// reused. A list the upstream gives every caller alike (cacheScope public,
// or none) is fetched on a session of the gateway's own, never an agent's,
// and kept for every caller: this instance's copy while it is fresh, else
// the fleet's catalog (for limited servers), else the upstream. A list the
// upstream marks private, and the list of a server that forwards callers'
// headers, is fetched on c's own session and kept for c alone, never in the
// catalog (which learns only that the list is private). A failing upstream
// is asked again at most every toolsRefreshFloor.
func (p *Pool) ToolListing(ctx context.Context, srv *registry.Server, c Caller) (*Listing, error) {
	if srv.Transport == registry.TransportOpenAPI {
		api, err := p.openAPI(ctx, srv)
		if err != nil {
			return nil, err
		}
		return &Listing{Tools: api.Tools(), Scope: "public", Expires: time.Now().Add(p.toolsTTL)}, nil
	}
	tl, err := p.listFor(ctx, srv, c, "")
	if err != nil {
		return nil, err
	}
	defer tl.mu.Unlock()
	return &Listing{Tools: tl.ordered, Scope: tl.scope, Expires: tl.expires}, nil
}

// toolHeaders is what headerSchema found in tool's input schema.
type toolHeaders struct {
	tool   *mcp.Tool
	schema *schemaProp
}

// ErrUnknownTool means the upstream does not list a tool of that name.
var ErrUnknownTool = errors.New("unknown tool")

// Tool returns srv's tool named name, as c sees the list (see
// ToolListing). A name missing from a list older than a second triggers one
// refresh, so a tool added upstream is found without waiting for the list
// to expire; with a catalog, that refresh reads the catalog and leaves the
// upstream alone, so that callers naming unknown tools cannot make the
// fleet list the upstream.
func (p *Pool) Tool(ctx context.Context, srv *registry.Server, c Caller, name string) (*mcp.Tool, error) {
	if srv.Transport == registry.TransportOpenAPI {
		return p.openAPITool(ctx, srv, name)
	}
	tl, err := p.listFor(ctx, srv, c, name)
	if err != nil {
		return nil, err
	}
	defer tl.mu.Unlock()
	if t, ok := tl.tools[name]; ok {
		return t, nil
	}
	return nil, ErrUnknownTool
}

// cachedHeaders returns the header properties (see headerSchema) of srv's
// tool named name in the list this instance holds for c, if it holds one:
// nil when it holds none, or the tool's schema names no header. They are
// worked out once per tool definition, not per call.
func (p *Pool) cachedHeaders(srv *registry.Server, c Caller, name string) *schemaProp {
	for _, key := range []string{identityKey(srv), sessionKey(srv, c)} {
		p.mu.Lock()
		tl := p.tools[key]
		p.mu.Unlock()
		if tl == nil {
			continue
		}
		tl.mu.Lock()
		t := tl.tools[name]
		var hs *schemaProp
		if t != nil {
			h, ok := tl.headers[name]
			if !ok || h.tool != t {
				h = toolHeaders{tool: t, schema: headerSchema(t)}
				if tl.headers == nil {
					tl.headers = map[string]toolHeaders{}
				}
				if !ok && len(tl.headers) >= len(tl.tools) {
					// Tools the list no longer has go: however an upstream
					// renames its tools, this never outgrows the list.
					for n := range tl.headers {
						if _, in := tl.tools[n]; !in {
							delete(tl.headers, n)
						}
					}
				}
				tl.headers[name] = h
			}
			hs = h.schema
		}
		tl.mu.Unlock()
		if t != nil {
			return hs
		}
	}
	return nil
}

// listFor returns, locked, the list c sees of srv, renewed if it is stale,
// or if it lacks name (when not empty) and is older than toolsRefreshFloor.
// The list every caller shares is looked at first; once it turns out
// private, c's own is used instead.
func (p *Pool) listFor(ctx context.Context, srv *registry.Server, c Caller, name string) (*toolList, error) {
	if len(srv.ForwardHeaders) == 0 {
		shared := p.toolList(identityKey(srv))
		shared.mu.Lock()
		if err := p.renew(ctx, srv, Caller{Principal: listingPrincipal}, shared, name, true); err != nil {
			shared.mu.Unlock()
			return nil, err
		}
		if !shared.private {
			return shared, nil
		}
		shared.mu.Unlock()
	}
	own := p.toolList(sessionKey(srv, c))
	own.mu.Lock()
	if err := p.renew(ctx, srv, c, own, name, false); err != nil {
		own.mu.Unlock()
		return nil, err
	}
	return own, nil
}

func (p *Pool) toolList(key string) *toolList { return held(p, p.tools, key) }

// renew brings tl up to date (see listFor), from the catalog (shared lists
// only) or from the upstream, asked on who's session; tl.mu is held. A
// failure of the upstream is kept in tl, so it is asked again at most every
// toolsRefreshFloor.
func (p *Pool) renew(ctx context.Context, srv *registry.Server, who Caller, tl *toolList, name string, shared bool) error {
	gen := p.listsOf(srv).gen.Load()
	if (tl.ordered != nil || tl.private) && time.Now().Before(tl.reuse) && tl.gen == gen {
		if name == "" || tl.private || tl.tools[name] != nil || time.Since(tl.fetched) < toolsRefreshFloor {
			return nil
		}
		tl.reuse = time.Time{}
	}
	if tl.err != nil && time.Since(tl.failed) < toolsRefreshFloor {
		return tl.err
	}
	err := p.renewTools(ctx, srv, who, tl, shared)
	if err == nil {
		// The generation read before renewing: an invalidation that came
		// meanwhile leaves the list stale.
		tl.gen = gen
	}
	if err != nil && ctx.Err() == nil {
		tl.failed, tl.err = time.Now(), err
	} else if err == nil {
		tl.err = nil
	}
	return err
}

// set records a renewed list and how long it lasts. A shared list the
// upstream marked private is not kept: tl only says it is private, and
// each caller lists on its own session.
func (tl *toolList) set(list []*mcp.Tool, scope string, expires, reuse time.Time, version string, shared bool) {
	if scope != catalog.ScopePrivate {
		scope = "public"
	}
	tl.private = shared && scope == catalog.ScopePrivate
	if tl.private || list == nil {
		list = []*mcp.Tool{}
	}
	tl.ordered, tl.tools = list, index(list)
	if tl.private {
		tl.ordered, tl.tools = nil, nil
	}
	tl.scope, tl.expires, tl.reuse, tl.version, tl.fetched = scope, expires, reuse, version, time.Now()
}

func index(list []*mcp.Tool) map[string]*mcp.Tool {
	m := make(map[string]*mcp.Tool, len(list))
	for _, t := range list {
		m[t.Name] = t
	}
	return m
}

// fetched is one tools/list of an upstream.
type fetched struct {
	list  []*mcp.Tool
	scope string
	ttl   time.Duration
}

// fetchTools lists the upstream's tools, every page, with c's session,
// within the pool's bounds on pages, bytes and tools, and how long it says
// the list may be reused (capped by ToolsTTL; none or 0 means ToolsTTL). On
// the wire, the pages' bytes count against the bound as they come
// (streamable HTTP); the tools' size counts too, for the HTTP+SSE
// transport, whose answers come on the session's own stream.
func (p *Pool) fetchTools(ctx context.Context, srv *registry.Server, c Caller) (fetched, error) {
	var f fetched
	err := p.Do(withBudget(ctx, p.maxList), srv, c, nil, func(ctx context.Context, cs *mcp.ClientSession) error {
		f = fetched{ttl: p.toolsTTL, scope: "public"}
		size := int64(0)
		params := &mcp.ListToolsParams{}
		// An upstream that declares tasks lists its tools' task support,
		// which the SDK does not read: the pages are read here too.
		var pages *capture
		if DeclaresTasks(cs.InitializeResult()) {
			ctx, pages = withCapture(ctx, "tools/list", int(p.maxList))
		}
		for page := 0; ; page++ {
			if page == p.maxPages {
				return &LimitError{What: "tool list pages", Limit: int64(p.maxPages)}
			}
			res, err := p.listPage(ctx, srv, cs, params)
			if err != nil {
				return err
			}
			if pages != nil {
				listedTaskSupport(res, pages)
			}
			if res.TTLMs > 0 {
				f.ttl = min(f.ttl, time.Duration(res.TTLMs)*time.Millisecond)
			}
			if res.CacheScope == "private" {
				f.scope = "private"
			}
			for _, t := range res.Tools {
				if t == nil {
					continue
				}
				if size += int64(toolSize(t)); size > p.maxList {
					return &LimitError{What: "tool list", Limit: p.maxList}
				}
				if len(f.list) == maxTools {
					return &LimitError{What: "tools", Limit: maxTools}
				}
				f.list = append(f.list, t)
			}
			if res.NextCursor == "" {
				return nil
			}
			params = &mcp.ListToolsParams{Cursor: res.NextCursor}
		}
	})
	if f.list == nil {
		f.list = []*mcp.Tool{}
	}
	return f, err
}

// listPage sends one tools/list, in a CLIENT span of its own when traced,
// its trace context in params._meta as in the request's headers.
func (p *Pool) listPage(ctx context.Context, srv *registry.Server, cs *mcp.ClientSession, params *mcp.ListToolsParams) (*mcp.ListToolsResult, error) {
	if p.trace == nil {
		return cs.ListTools(ctx, params)
	}
	params.Meta = mcp.Meta{}
	ctx, end := p.trace.Send(ctx, "tools/list", srv, params.Meta)
	res, err := cs.ListTools(ctx, params)
	end(err)
	return res, err
}
