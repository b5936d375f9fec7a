package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/mcpgate/mcpgate/internal/safeurl"
)

// minRSABits is the smallest RSA key accepted for RS256.
const minRSABits = 2048

// keySet is the issuer's signing keys, cached per instance. Keys are
// fetched when the first token arrives, when a token names a key id not in
// the set, and when the set is older than maxAge; never more often than
// once per interval (once per 5 s while no key is known), so a flood of
// tokens with made-up key ids costs the issuer one request a minute. One
// fetch runs at a time; the others wait for its result.
type keySet struct {
	issuer   string
	jwksURL  string // configured; "" means discovered
	client   *http.Client
	interval time.Duration
	maxAge   time.Duration
	now      func() time.Time
	fetches  atomic.Int64

	fetchMu sync.Mutex // one fetch at a time

	mu         sync.Mutex
	keys       []jose.JSONWebKey // nil until a fetch succeeds
	fetchedAt  time.Time
	tried      time.Time // last fetch attempt
	err        error     // last fetch failure, if it failed
	discovered string    // jwks_uri from the issuer's metadata
}

// get returns the keys that may have signed a token with key id kid and
// algorithm alg (all keys for alg when kid is empty). It returns none, and
// no error, when the issuer has no such key; an *UnavailableError when
// keys cannot be fetched and none known can be tried.
func (s *keySet) get(ctx context.Context, kid string, alg jose.SignatureAlgorithm) ([]jose.JSONWebKey, error) {
	now := s.now()
	if m, fresh := s.match(kid, alg, now); len(m) > 0 && fresh {
		return m, nil
	}
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	// A fetch may have landed while this caller waited for it.
	m, fresh := s.match(kid, alg, now)
	if len(m) > 0 && fresh {
		return m, nil
	}
	s.mu.Lock()
	known := s.keys != nil
	wait := s.interval
	if !known {
		wait = failedFetchRetry
	}
	mayFetch := s.tried.IsZero() || now.Sub(s.tried) >= wait
	retryAfter := wait - now.Sub(s.tried)
	lastErr := s.err
	s.mu.Unlock()
	if !mayFetch {
		if len(m) > 0 || known {
			return m, nil
		}
		return nil, &UnavailableError{RetryAfter: retryAfter, Err: lastErr}
	}
	// The fetch serves every waiting caller: the one that started it
	// going away must not cut it short.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
	defer cancel()
	keys, err := s.fetch(fctx)
	s.mu.Lock()
	s.tried = now
	s.err = err
	if err == nil {
		s.keys, s.fetchedAt = keys, now
	}
	s.mu.Unlock()
	m, _ = s.match(kid, alg, now)
	if len(m) == 0 && err != nil {
		return nil, &UnavailableError{RetryAfter: wait, Err: err}
	}
	return m, nil
}

// match returns the known keys usable for kid and alg, and whether the set
// is younger than maxAge.
func (s *keySet) match(kid string, alg jose.SignatureAlgorithm, now time.Time) ([]jose.JSONWebKey, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []jose.JSONWebKey
	for _, k := range s.keys {
		if (kid == "" || k.KeyID == kid) && (k.Algorithm == "" || k.Algorithm == string(alg)) && keyFits(k, alg) {
			out = append(out, k)
		}
	}
	return out, s.keys != nil && now.Sub(s.fetchedAt) < s.maxAge
}

// keyFits reports whether k is a public key of the type and size alg needs.
func keyFits(k jose.JSONWebKey, alg jose.SignatureAlgorithm) bool {
	switch pub := k.Key.(type) {
	case *rsa.PublicKey:
		return alg == jose.RS256 && pub.N.BitLen() >= minRSABits
	case *ecdsa.PublicKey:
		return alg == jose.ES256 && pub.Curve == elliptic.P256()
	}
	return false
}

// fetch reads the signing keys: from the configured JWKS URL, or from the
// one the issuer's metadata names (found again if it fails).
func (s *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	u := s.jwksURL
	if u == "" {
		s.mu.Lock()
		u = s.discovered
		s.mu.Unlock()
		if u == "" {
			var err error
			if u, err = s.discover(ctx); err != nil {
				return nil, err
			}
		}
	}
	// Keys are read one by one: a key of a type this gateway does not use
	// (say, for encryption) must not make the others unusable.
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := s.getJSON(ctx, u, &set); err != nil {
		s.mu.Lock()
		s.discovered = ""
		s.mu.Unlock()
		return nil, fmt.Errorf("fetch signing keys: %w", err)
	}
	keys := []jose.JSONWebKey{}
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if k.UnmarshalJSON(raw) != nil {
			continue
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if !k.IsPublic() {
			// A private key published by mistake: use only its public half.
			k = k.Public()
		}
		if keyFits(k, jose.RS256) || keyFits(k, jose.ES256) {
			keys = append(keys, k)
		}
		if len(keys) == maxSigningKeys {
			break
		}
	}
	return keys, nil
}

// discover finds the issuer's jwks_uri in its OpenID Connect metadata, or
// else in its RFC 8414 authorization server metadata. The metadata must
// name the same issuer.
func (s *keySet) discover(ctx context.Context) (string, error) {
	var errs []error
	for _, u := range metadataURLs(s.issuer) {
		var md struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := s.getJSON(ctx, u, &md); err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case md.Issuer != s.issuer:
			errs = append(errs, fmt.Errorf("%s names issuer %q, not %q", safeurl.Redact(u), safeurl.Redact(md.Issuer), safeurl.Redact(s.issuer)))
			continue
		case md.JWKSURI == "":
			errs = append(errs, fmt.Errorf("%s has no jwks_uri", safeurl.Redact(u)))
			continue
		}
		if err := checkFetchURL(md.JWKSURI); err != nil {
			return "", fmt.Errorf("%s: jwks_uri: %w", safeurl.Redact(u), err)
		}
		s.mu.Lock()
		s.discovered = md.JWKSURI
		s.mu.Unlock()
		return md.JWKSURI, nil
	}
	return "", fmt.Errorf("discover the issuer's keys: %w", errors.Join(errs...))
}

// metadataURLs are where an issuer's metadata may be: OpenID Connect
// Discovery appends its well-known path to the issuer; RFC 8414 inserts
// its own between the host and the issuer's path.
func metadataURLs(issuer string) []string {
	oidc := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	u, err := url.Parse(issuer)
	if err != nil {
		return []string{oidc}
	}
	u.Path = "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return []string{oidc, u.String()}
}

// getJSON GETs u and decodes its JSON body, bounded in size.
func (s *keySet) getJSON(ctx context.Context, u string, v any) error {
	s.fetches.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", safeurl.Redact(u), safeurl.Cause(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxFetchBytes))
		return fmt.Errorf("GET %s: HTTP %d", safeurl.Redact(u), resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFetchBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", safeurl.Redact(u), err)
	}
	if len(body) > maxFetchBytes {
		return fmt.Errorf("GET %s: larger than %d bytes", u, maxFetchBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", safeurl.Redact(u), err)
	}
	return nil
}
