package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/retryafter"
	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// Bounds on what one upstream may make the gateway read and hold: a
// hostile or broken upstream costs at most these, and its failure is its
// own (the gateway answers the other upstreams' calls meanwhile).
const (
	// DefaultMaxResponseBytes bounds one upstream HTTP response body.
	DefaultMaxResponseBytes = 8 << 20
	// DefaultMaxListBytes bounds one upstream's tool list, all pages
	// together, as the size of its names, descriptions and schemas.
	DefaultMaxListBytes = 4 << 20
	// DefaultMaxListPages bounds the pages of one upstream's tool list.
	DefaultMaxListPages = 100
)

// LimitError means an upstream's answer went past one of the pool's
// bounds; the answer was dropped.
type LimitError struct {
	// What was too large: "answer" (one HTTP response), "tool list" (its
	// bytes) or "tool list pages".
	What string
	// Limit is the bound, in bytes (pages for "tool list pages").
	Limit int64
}

func (e *LimitError) Error() string {
	switch e.What {
	case "tool list pages":
		return fmt.Sprintf("its tool list has more than %d pages", e.Limit)
	case "tool list":
		return fmt.Sprintf("its tool list is larger than %d bytes", e.Limit)
	case "tools":
		return fmt.Sprintf("it lists more than %d tools", e.Limit)
	}
	return fmt.Sprintf("its %s is larger than %d bytes", e.What, e.Limit)
}

// traffic is what the HTTP transport saw of one call's requests, for
// classifying the call's failure: the status of the last answer to a POST,
// and whether an answer went past the size limit. (The SDK keeps neither
// in the errors it returns.)
type traffic struct {
	status atomic.Int32
	// retryAfter is the wait (ns) a 429 or 503 answer asked for.
	retryAfter atomic.Int64
	tooLarge   atomic.Bool
	// budget, if positive, bounds the bytes of every answer together (a
	// tool list's pages); overBudget says it ran out.
	budget     int64
	left       atomic.Int64
	overBudget atomic.Bool

	// An HTTP+SSE session's event stream carries the answers of every
	// request the session serves, and whatever the upstream sends
	// between them: stream marks the session's record, whose stream is
	// bounded per request rather than once for its life. call is the
	// record of the request in flight on the session, which the stream's
	// bytes count against (its answer and everything sent meanwhile, as
	// for a streamable-HTTP answer), up to callLeft; while none is,
	// idleLeft bounds them.
	stream   bool
	call     atomic.Pointer[traffic]
	callLeft atomic.Int64
	idleLeft atomic.Int64
}

// attach makes the bytes of the session stream of ex count against c, the
// request now in flight on the session, up to limit (nil c: the session
// is idle again), and gives the idle stream a new allowance of limit.
func (ex *traffic) attach(c *traffic, limit int64) {
	if c != nil {
		c.callLeft.Store(limit)
	}
	ex.idleLeft.Store(limit)
	ex.call.Store(c)
}

// spendStream counts n bytes of a session stream, reporting false when the
// request in flight, or the idle session, went past its bound.
func (ex *traffic) spendStream(n int) bool {
	if c := ex.call.Load(); c != nil {
		if c.callLeft.Add(-int64(n)) < 0 {
			c.tooLarge.Store(true)
			return false
		}
		return c.spend(n)
	}
	if ex.idleLeft.Add(-int64(n)) < 0 {
		ex.tooLarge.Store(true)
		return false
	}
	return true
}

type trafficKey struct{}

type budgetKey struct{}

// withBudget bounds the bytes of all the answers to the requests of the
// calls made with ctx, together.
func withBudget(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, budgetKey{}, n)
}

// withTraffic makes the HTTP requests sent with ctx report to a new
// traffic record.
func withTraffic(ctx context.Context) (context.Context, *traffic) {
	ex := &traffic{}
	if n, ok := ctx.Value(budgetKey{}).(int64); ok && n > 0 {
		ex.budget = n
		ex.left.Store(n)
	}
	return context.WithValue(ctx, trafficKey{}, ex), ex
}

// spend takes n bytes from the budget, reporting false when it ran out.
func (ex *traffic) spend(n int) bool {
	if ex == nil || ex.budget == 0 {
		return true
	}
	if ex.left.Add(-int64(n)) < 0 {
		ex.overBudget.Store(true)
		return false
	}
	return true
}

func trafficFrom(ctx context.Context) *traffic {
	ex, _ := ctx.Value(trafficKey{}).(*traffic)
	return ex
}

// seen notes a response to req.
func (ex *traffic) seen(req *http.Request, resp *http.Response) {
	if ex != nil && req.Method == http.MethodPost {
		ex.status.Store(int32(resp.StatusCode))
		ex.retryAfter.Store(int64(retryafter.From(resp, time.Now())))
	}
}

// rejected reports whether the upstream refused the request itself: an
// HTTP 4xx other than 408 (timeout) and 429 (overload), which say the
// upstream is unwell rather than that the request is wrong.
func rejected(status int) bool {
	return status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// errOtherOrigin refuses a request an upstream's session would send to
// another origin than the upstream's.
var errOtherOrigin = errors.New("refused: a request to another origin than the upstream's")

// originGuard sends only requests to one origin (scheme, host and port):
// an upstream cannot send the gateway elsewhere with a redirect or with
// the HTTP+SSE transport's endpoint event, and its URL (whose query may
// hold a token) never reaches another host in a Referer.
type originGuard struct {
	base   http.RoundTripper
	origin *url.URL
	// trace, if not nil, makes the request's CLIENT span.
	trace HTTPTracer
	// refusal is the first request refused: a transport that fails on it
	// may report only its own closing, so its cause is kept here.
	refusal atomic.Pointer[error]
}

func (g *originGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if !safeurl.SameOrigin(req.URL, g.origin) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		err := fmt.Errorf("%w: %s://%s, not %s://%s", errOtherOrigin, req.URL.Scheme, req.URL.Host, g.origin.Scheme, g.origin.Host)
		g.refusal.CompareAndSwap(nil, &err)
		return nil, err
	}
	if g.trace == nil {
		return g.base.RoundTrip(req)
	}
	req, end := g.trace.Start(req)
	g.trace.Inject(req.Context(), req.Header)
	resp, err := g.base.RoundTrip(req)
	end(resp, err)
	return resp, err
}

// originRefusal returns the first request hc refused for its origin, if any.
func originRefusal(hc *http.Client) error {
	if g, ok := hc.Transport.(*originGuard); ok {
		if err := g.refusal.Load(); err != nil {
			return *err
		}
	}
	return nil
}

// jsonSize estimates the JSON size of v, a value decoded from JSON (maps,
// slices, strings, numbers, raw messages), without encoding it.
func jsonSize(v any) int {
	switch v := v.(type) {
	case nil:
		return 4
	case string:
		return len(v) + 2
	case json.RawMessage:
		return len(v)
	case map[string]any:
		n := 2
		for k, x := range v {
			n += len(k) + 4 + jsonSize(x)
		}
		return n
	case []any:
		n := 2
		for _, x := range v {
			n += 1 + jsonSize(x)
		}
		return n
	case mcp.Meta:
		return jsonSize(map[string]any(v))
	default:
		return 8
	}
}

// toolSize estimates the bytes a tool takes in a tool list.
func toolSize(t *mcp.Tool) int {
	n := 64 + len(t.Name) + len(t.Title) + len(t.Description) + jsonSize(t.Meta)
	n += jsonSize(t.InputSchema) + jsonSize(t.OutputSchema)
	for _, ic := range t.Icons {
		n += 32 + len(ic.Source) + len(ic.MIMEType)
		for _, s := range ic.Sizes {
			n += len(s) + 3
		}
	}
	return n
}
