package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"golang.org/x/sync/singleflight"

	"github.com/mcpgate/mcpgate/internal/clip"
	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// oauth2Token sends "Authorization: Bearer <token>" (registry.AuthOAuth2),
// a token obtained with the OAuth 2.0 client credentials grant and the
// client secret the server's auth refers to. Its token is kept as long as
// the credential (one per server identity), across sessions.
type oauth2Token struct {
	secret *secretOf
	token  *tokenSource
}

func newOAuth2(p *Pool, srv *registry.Server) provider {
	a := srv.Auth
	ts := &tokenSource{
		cfg: clientcredentials.Config{
			ClientID: a.ClientID, TokenURL: a.TokenURL,
			Scopes: strings.Fields(a.Scope),
			// RFC 6749 2.3.1: servers must accept HTTP Basic; one
			// style means one request per attempt.
			AuthStyle: oauth2.AuthStyleInHeader,
		},
		secret: p.secretOf(a.Secret), serverID: srv.ID, now: time.Now,
		// A token request carries the client secret: it never
		// follows a redirect.
		client: &http.Client{
			Transport:     p.clientFor(srv).Transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	if a.Audience != "" {
		ts.cfg.EndpointParams = url.Values{"audience": {a.Audience}}
	}
	return &oauth2Token{secret: ts.secret, token: ts}
}

func (o *oauth2Token) kind() registry.AuthType { return registry.AuthOAuth2 }

func (o *oauth2Token) apply(ctx context.Context, req *http.Request) (string, error) {
	if err := o.secret.usable(); err != nil {
		return "", err
	}
	tok, err := o.token.token(ctx)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return tok, nil
}

func (o *oauth2Token) refresh(ctx context.Context, used string) (bool, error) {
	tok, err := o.token.refresh(ctx, used)
	return err == nil && tok != used, err
}

// tokenSource holds one OAuth 2.0 client-credentials token, fetched by one
// caller for all and replaced shortly before it expires.
type tokenSource struct {
	cfg      clientcredentials.Config // without the secret
	secret   *secretOf                // the client secret
	client   *http.Client
	serverID string
	now      func() time.Time
	group    singleflight.Group

	mu      sync.Mutex
	tok     string
	expiry  time.Time // zero: unknown, kept until refused
	fetched time.Time
}

// Token endpoint bounds.
const (
	tokenTimeout  = 10 * time.Second
	tokenFloor    = time.Second
	maxEarly      = 30 * time.Second
	maxTokenBytes = 16 << 10
)

// token returns a token that is not about to expire.
func (ts *tokenSource) token(ctx context.Context) (string, error) {
	ts.mu.Lock()
	tok, ok := ts.tok, ts.usable()
	ts.mu.Unlock()
	if ok {
		return tok, nil
	}
	return ts.fetch(ctx, func() bool { return ts.usable() })
}

// usable reports whether the held token may still be sent; ts.mu is held.
func (ts *tokenSource) usable() bool {
	if ts.tok == "" {
		return false
	}
	if ts.expiry.IsZero() {
		return true
	}
	early := min(maxEarly, ts.expiry.Sub(ts.fetched)/5)
	return ts.now().Before(ts.expiry.Add(-early))
}

// refresh replaces a token the upstream refused, unless another caller
// already has, or one was fetched within tokenFloor.
func (ts *tokenSource) refresh(ctx context.Context, used string) (string, error) {
	good := func() bool {
		return ts.tok != "" && (ts.tok != used || ts.now().Sub(ts.fetched) < tokenFloor)
	}
	ts.mu.Lock()
	tok, ok := ts.tok, good()
	ts.mu.Unlock()
	if ok {
		return tok, nil
	}
	return ts.fetch(ctx, good)
}

// fetch gets a new token once for every concurrent caller, unless good
// says the held one will do (checked with ts.mu held).
func (ts *tokenSource) fetch(ctx context.Context, good func() bool) (string, error) {
	ch := ts.group.DoChan("token", func() (any, error) {
		ts.mu.Lock()
		if good() {
			tok := ts.tok
			ts.mu.Unlock()
			return tok, nil
		}
		ts.mu.Unlock()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenTimeout)
		defer cancel()
		tok, err := ts.request(fctx)
		if err != nil {
			return nil, err
		}
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.tok, ts.fetched, ts.expiry = tok.AccessToken, ts.now(), time.Time{}
		switch {
		case tok.ExpiresIn > 0:
			ts.expiry = ts.fetched.Add(time.Duration(tok.ExpiresIn) * time.Second)
		case !tok.Expiry.IsZero():
			ts.expiry = ts.fetched.Add(time.Until(tok.Expiry))
		}
		return ts.tok, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", r.Err
		}
		return r.Val.(string), nil
	case <-ctx.Done():
		return "", fmt.Errorf("wait for an OAuth token: %w", ctx.Err())
	}
}

// request asks the token endpoint for a token. A client secret it refuses
// is read once more (rotation) and, if changed, tried again.
func (ts *tokenSource) request(ctx context.Context) (*oauth2.Token, error) {
	sec, err := ts.secret.read(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := ts.exchange(ctx, sec)
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode == http.StatusUnauthorized {
		if fresh, ferr := ts.secret.reread(ctx, sec); ferr == nil && fresh != sec {
			tok, err = ts.exchange(ctx, fresh)
		}
	}
	if err != nil {
		return nil, tokenError(err)
	}
	if tok.AccessToken == "" || len(tok.AccessToken) > maxTokenBytes ||
		strings.ContainsFunc(tok.AccessToken, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, errors.New("the token endpoint returned no usable access token")
	}
	return tok, nil
}

func (ts *tokenSource) exchange(ctx context.Context, clientSecret string) (*oauth2.Token, error) {
	cfg := ts.cfg
	cfg.ClientSecret = strings.TrimSpace(clientSecret)
	return cfg.Token(context.WithValue(ctx, oauth2.HTTPClient, ts.client))
}

// tokenError describes a failed token request without the endpoint's
// answer body, which could echo what was sent.
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		if re.ErrorCode != "" {
			return fmt.Errorf("token endpoint answered HTTP %d, error %q", status, clip.String(re.ErrorCode, clip.Short))
		}
		return fmt.Errorf("token endpoint answered HTTP %d", status)
	}
	return fmt.Errorf("token endpoint: %w", safeurl.Cause(err))
}
