package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

var (
	// ErrNoCredentials means the request carried no key or token (and, under
	// AWS_IAM, its IAM caller has no grant).
	ErrNoCredentials = errors.New("auth: no credentials")
	// ErrBadKey means the key is malformed or unknown. A *RejectedError for
	// such a key matches it with errors.Is.
	ErrBadKey = errors.New("auth: unknown or malformed key")
)

// RejectedError means the request's credentials were refused.
type RejectedError struct {
	// Reason says why, in words safe to send to the client: it never
	// quotes the credential.
	Reason string
	// Token is set when the credential presented was an access token, so
	// the answer says error="invalid_token".
	Token bool
	// Err is the underlying failure, for logs; may be nil.
	Err error
}

func (e *RejectedError) Error() string {
	if e.Err != nil {
		return "auth: " + e.Reason + ": " + e.Err.Error()
	}
	return "auth: " + e.Reason
}

func (e *RejectedError) Unwrap() error { return e.Err }

func rejected(format string, args ...any) *RejectedError {
	return &RejectedError{Reason: fmt.Sprintf(format, args...)}
}

// UnavailableError means an access token could not be checked: the
// issuer's signing keys cannot be fetched and no cached key verifies it.
type UnavailableError struct {
	// RetryAfter is when the keys will next be fetched.
	RetryAfter time.Duration
	// Err is the fetch's failure.
	Err error
}

func (e *UnavailableError) Error() string {
	return "auth: the token issuer's keys are unavailable: " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Options configures an Authenticator. The zero value means defaults: keys
// only.
type Options struct {
	// CacheTTL is how long a key lookup is reused; zero means
	// DefaultCacheTTL, negative disables the cache. A revoked key stops
	// working within it.
	CacheTTL time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// OAuth, when set, accepts access tokens from its issuer beside keys.
	OAuth *OAuth
	// IAM grants servers to the callers of an AWS_IAM Function URL that
	// present no key or token. Empty means such callers must present one.
	IAM []IAMGrant
}

// Authenticator finds the principal of a request.
type Authenticator struct {
	keys  *keyStore
	oauth *OAuth
	iam   []IAMGrant
}

// New returns an Authenticator reading keys from table through db.
func New(db API, table string, opts Options) *Authenticator {
	ttl := opts.CacheTTL
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	return &Authenticator{keys: newKeyStore(db, table, ttl, opts.Now), oauth: opts.OAuth, iam: opts.IAM}
}

// OAuth returns the token settings, or nil when only keys are accepted.
func (a *Authenticator) OAuth() *OAuth { return a.oauth }

// Request is what authentication reads of an HTTP request.
type Request struct {
	// Header holds the credential headers.
	Header http.Header
	// IAMCaller is the caller's ARN when the Function URL's auth type is
	// AWS_IAM (Lambda has checked the SigV4 signature); "" otherwise. It
	// must come from Lambda's request context, never from a header.
	IAMCaller string
	// Audiences are the token audiences accepted for this request when the
	// OAuth settings name none: the gateway's resource URLs.
	Audiences []string
}

// KeyPrincipal returns the principal of the key whose StateKey is
// stateKey as the keys table has it now (through the keys cache): ErrBadKey
// when the key was revoked or its item can no longer be used. It serves a
// call made later on a key's behalf (an MCP task), so that the key's
// revocation and its narrowed grants and limits apply to it as to a
// request.
func (a *Authenticator) KeyPrincipal(ctx context.Context, stateKey string) (*Principal, error) {
	hash, ok := strings.CutPrefix(stateKey, string(KindKey)+":")
	if !ok || len(hash) != 64 {
		return nil, ErrBadKey
	}
	k, err := a.keys.keys.Get(ctx, hash)
	if err != nil {
		return nil, err
	}
	if k == nil || k.Invalid != nil {
		return nil, ErrBadKey
	}
	return k.Principal(), nil
}

// Authenticate returns the request's principal. A bearer that is a JWT is
// checked as an access token when OAuth is on; any other credential is
// looked up as a key. Without a credential, an AWS_IAM caller with a grant
// is its own principal. It returns ErrNoCredentials, a *RejectedError, an
// *UnavailableError, or a wrapped store error.
func (a *Authenticator) Authenticate(ctx context.Context, req Request) (*Principal, error) {
	raw, err := credential(req.Header, req.IAMCaller != "")
	if err != nil {
		return nil, err
	}
	var p *Principal
	switch {
	case raw == "" && req.IAMCaller != "":
		if p = iamPrincipal(a.iam, req.IAMCaller); p == nil {
			return nil, &RejectedError{Reason: "no key or token, and this IAM caller has no grant here", Err: ErrNoCredentials}
		}
	case raw == "":
		return nil, ErrNoCredentials
	case a.oauth != nil && looksLikeJWT(raw):
		if p, err = a.oauth.Verify(ctx, raw, req.Audiences); err != nil {
			return nil, err
		}
	default:
		k, err := a.keys.lookup(ctx, raw)
		var invalid *KeyItemError
		switch {
		case errors.Is(err, ErrBadKey):
			return nil, &RejectedError{Reason: "unknown or malformed key", Err: ErrBadKey}
		case errors.As(err, &invalid):
			return nil, &RejectedError{Reason: "this key's item is invalid; ask an admin to check it", Err: err}
		}
		if err != nil {
			return nil, err
		}
		p = k.Principal()
	}
	p.IAMCaller = clean(req.IAMCaller, maxARNLen)
	return p, nil
}
