package upstream

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/registry"
)

type infoEntry struct {
	res     *mcp.InitializeResult
	fetched time.Time
}

// Info returns what srv said of itself when a session of c's last
// connected to it (capabilities, server info, instructions), connecting if
// none has within ToolsTTL.
func (p *Pool) Info(ctx context.Context, srv *registry.Server, c Caller) (*mcp.InitializeResult, error) {
	if srv.Transport == registry.TransportOpenAPI {
		api, err := p.openAPI(ctx, srv)
		if err != nil {
			return nil, err
		}
		return openAPIInfo(api, srv), nil
	}
	key := sessionKey(srv, c)
	p.mu.Lock()
	e, ok := p.info[key]
	p.mu.Unlock()
	if ok && time.Since(e.fetched) < p.toolsTTL {
		return e.res, nil
	}
	var res *mcp.InitializeResult
	err := p.Do(ctx, srv, c, nil, func(ctx context.Context, cs *mcp.ClientSession) error {
		res = cs.InitializeResult()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, &Error{Kind: KindUnavailable, ServerID: srv.ID, Err: errors.New("session has no initialize result")}
	}
	p.mu.Lock()
	p.info[key] = infoEntry{res: res, fetched: time.Now()}
	p.mu.Unlock()
	return res, nil
}
