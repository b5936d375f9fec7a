package openapi

import (
	"context"
	"errors"
	"fmt"
	"github.com/mcpgate/mcpgate/internal/clip"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// Defaults for Options.
const (
	DefaultMaxSpecBytes     = 5 << 20
	DefaultMaxResponseBytes = 8 << 20
	// maxTools bounds how many tools one document may define.
	maxTools = 2000
	// maxRedirects bounds the redirects the default client follows.
	maxRedirects = 10
)

// Options configures Load and the API it returns. The zero value means
// defaults.
type Options struct {
	// HTTPClient fetches a spec given by URL and sends every API call. Nil
	// means a client with pooled keep-alive connections that follows
	// redirects only within the same scheme and host (CheckSameHost). A
	// client of your own should refuse cross-host redirects the same way,
	// or Header values may follow a redirect elsewhere. Call contexts bound
	// the requests; the client needs no Timeout.
	HTTPClient *http.Client
	// MaxSpecBytes bounds the document's size. Zero means
	// DefaultMaxSpecBytes.
	MaxSpecBytes int64
	// MaxResponseBytes bounds how much of each API response body is read;
	// the rest is dropped and the result says it was truncated. Zero means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// BaseURL, if set, is where every call is sent: it replaces the
	// document's servers (top-level, path and operation ones). It must be
	// an absolute http or https URL without credentials, query or fragment.
	// It is required when the document has no usable server: none at all
	// or only relative ones, with the spec read from a file.
	BaseURL string
	// Origin, if set, is the origin (scheme://host[:port]) an earlier
	// load of the document pinned its calls to: a document whose calls
	// would now go elsewhere fails with ErrOriginChanged. Empty pins the
	// origin found (see API.Origin).
	Origin string
	// Header is sent with every API call (not with the spec fetch), for
	// instance the API's credentials. It wins over a header parameter of
	// the same name. Its values never appear in errors.
	Header http.Header
}

// Source says where the OpenAPI document is: exactly one of URL and Path.
type Source struct {
	// URL is an http or https URL to GET the document from.
	URL string
	// Path is a file to read the document from.
	Path string
}

// Skipped is an operation that Load did not turn into a tool.
type Skipped struct {
	// Op is the operation's method and path, as "GET /pets/{petId}".
	Op string
	// Reason says why, for the document's author.
	Reason string
}

// API is an OpenAPI document turned into MCP tools. It is safe for
// concurrent use.
type API struct {
	title   string
	origin  *url.URL // scheme and host every call goes to
	tools   []*mcp.Tool
	ops     map[string]*operation
	skipped []Skipped

	client  *http.Client
	header  http.Header
	maxResp int64
}

// Load reads, parses and validates the OpenAPI 3.x document src names, and
// maps its operations to tools (see the package documentation for the
// rules). Operations that cannot be mapped are listed by Skipped; a
// document that is unreadable, not OpenAPI 3.x, invalid, has no base URL or
// maps two operations to one tool name is an error. External $refs (to
// other files or URLs) are refused.
func Load(ctx context.Context, src Source, opts Options) (*API, error) {
	client := opts.HTTPClient
	if client == nil {
		client = NewHTTPClient()
	}
	maxSpec := opts.MaxSpecBytes
	if maxSpec <= 0 {
		maxSpec = DefaultMaxSpecBytes
	}
	maxResp := opts.MaxResponseBytes
	if maxResp <= 0 {
		maxResp = DefaultMaxResponseBytes
	}
	var (
		data    []byte
		specURL *url.URL
		err     error
	)
	switch {
	case src.URL != "" && src.Path != "":
		return nil, errors.New("openapi: source has both a URL and a path")
	case src.URL != "":
		specURL, err = parseHTTPURL(src.URL)
		if err != nil {
			return nil, fmt.Errorf("openapi: spec URL: %w", err)
		}
		data, err = fetch(ctx, client, specURL, maxSpec)
	case src.Path != "":
		data, err = readFile(src.Path, maxSpec)
	default:
		return nil, errors.New("openapi: source has neither a URL nor a path")
	}
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	doc, err := parse(ctx, data)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	var base *url.URL
	if opts.BaseURL != "" {
		base, err = parseBaseURL(opts.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("openapi: base URL: %w", err)
		}
	}
	a := &API{
		client:  client,
		header:  opts.Header.Clone(),
		maxResp: maxResp,
		ops:     map[string]*operation{},
	}
	if doc.Info != nil {
		a.title = doc.Info.Title
	}
	var pinned *url.URL
	if opts.Origin != "" {
		if pinned, err = parseHTTPURL(opts.Origin); err != nil {
			return nil, fmt.Errorf("openapi: origin: %w", err)
		}
	}
	if err := a.build(doc, specURL, base, pinned); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	return a, nil
}

// Title is the document's info.title.
func (a *API) Title() string { return a.title }

// Origin is the origin every call goes to, scheme://host[:port]: the
// BaseURL's, else that of the document's first top-level server.
// Operations whose own servers are on another origin are skipped.
func (a *API) Origin() string { return originOf(a.origin) }

func originOf(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// Tools returns the API's tools, ordered by path and then method. The
// slice and the tools are shared: do not modify them.
func (a *API) Tools() []*mcp.Tool { return a.tools }

// Skipped lists the operations that are not tools, and why, in document
// order (by path, then method).
func (a *API) Skipped() []Skipped { return a.skipped }

func parseHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme must be http or https, not %q", clip.String(u.Scheme, 20))
	}
	if u.Host == "" {
		return nil, errors.New("has no host")
	}
	return u, nil
}

// parseBaseURL checks a URL calls are sent to.
func parseBaseURL(raw string) (*url.URL, error) {
	u, err := parseHTTPURL(raw)
	if err != nil {
		return nil, err
	}
	if u.User != nil {
		return nil, errors.New("must not carry credentials")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("must not have a query or fragment")
	}
	return u, nil
}

func fetch(ctx context.Context, client *http.Client, u *url.URL, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch spec: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.8")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch spec from %s: %w", safeurl.Redact(u.String()), safeurl.Cause(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch spec from %s: HTTP %d", safeurl.Redact(u.String()), resp.StatusCode)
	}
	data, err := readBounded(resp.Body, limit)
	if err != nil {
		return nil, fmt.Errorf("fetch spec from %s: %w", safeurl.Redact(u.String()), err)
	}
	return data, nil
}

func readFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	defer f.Close()
	data, err := readBounded(f, limit)
	if err != nil {
		return nil, fmt.Errorf("read spec %s: %w", path, err)
	}
	return data, nil
}

// readBounded reads r to its end, failing past limit bytes.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("document is larger than %d bytes", limit)
	}
	return data, nil
}

// versionProbe reads the version fields before kin-openapi parses the
// document, to tell Swagger 2.0 and other documents apart from a broken
// OpenAPI 3 one.
type versionProbe struct {
	Swagger any `yaml:"swagger"`
	OpenAPI any `yaml:"openapi"`
}

// parse parses and validates an OpenAPI 3.x document, JSON or YAML.
func parse(ctx context.Context, data []byte) (*openapi3.T, error) {
	var probe versionProbe
	if err := yaml.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("document is not valid JSON or YAML: %w", err)
	}
	if probe.Swagger != nil {
		return nil, fmt.Errorf("%w: the document is Swagger %v; convert it to OpenAPI 3", ErrUnsupportedVersion, probe.Swagger)
	}
	version, ok := probe.OpenAPI.(string)
	if !ok {
		if probe.OpenAPI == nil {
			return nil, errors.New("document has no openapi version field: not an OpenAPI document")
		}
		return nil, fmt.Errorf("%w: openapi version must be a string like \"3.0.3\"", ErrUnsupportedVersion)
	}
	if (&openapi3.T{OpenAPI: version}).OpenAPIMajorMinor() == "" {
		return nil, fmt.Errorf("%w: openapi %q (supported: 3.0, 3.1, 3.2)", ErrUnsupportedVersion, clip.String(version, 20))
	}
	loader := openapi3.NewLoader()
	loader.Context = ctx
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("parse document: %w", err)
	}
	// Examples do not change how calls are made; real documents often get
	// them wrong.
	if err := doc.Validate(ctx, openapi3.DisableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("invalid document: %w", err)
	}
	return doc, nil
}

// NewHTTPClient returns the default client: keep-alive connections pooled
// per host, redirects followed only within the same scheme and host
// (CheckSameHost), no overall timeout (each call's context bounds it).
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 90 * time.Second
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Transport: t, CheckRedirect: CheckSameHost}
}

// CheckSameHost is an http.Client CheckRedirect function that follows up
// to 10 redirects, each to the scheme and host of the first request only.
func CheckSameHost(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	first := via[0].URL
	if !strings.EqualFold(req.URL.Scheme, first.Scheme) || !strings.EqualFold(req.URL.Host, first.Host) {
		return fmt.Errorf("refused redirect from %s://%s to another origin %s://%s",
			first.Scheme, first.Host, req.URL.Scheme, req.URL.Host)
	}
	return nil
}
