package auth

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
)

// The headers a credential may come in.
const (
	HeaderAuthorization = "Authorization"
	HeaderAPIKey        = "X-Api-Key"
	HeaderLiteLLMKey    = "X-Litellm-Api-Key"
)

// maxCredentialLen bounds a credential: keys are at most 512 bytes, but
// access tokens of some identity providers run to several kilobytes.
const maxCredentialLen = 16 << 10

// credential returns the one credential h carries: the token of an
// "Authorization: Bearer" header, or the value of X-Api-Key or
// x-litellm-api-key (each with an optional "Bearer " prefix). It returns ""
// when there is none. Under an AWS_IAM Function URL (sigV4), Authorization
// may carry the request's SigV4 signature, which is not a credential of
// ours and is skipped. Several headers may carry the same credential; two
// different ones are refused, never chosen between.
func credential(h http.Header, sigV4 bool) (string, error) {
	var found string
	take := func(v string) error {
		v = strings.TrimSpace(v)
		if v == "" {
			return nil
		}
		if len(v) > maxCredentialLen {
			return rejected("the credential is longer than %d bytes", maxCredentialLen)
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= ' ' || c > '~' {
				return rejected("the credential contains invalid characters")
			}
		}
		if found != "" && found != v {
			return rejected("the request carries different credentials in %s, %s and %s; send one", HeaderAuthorization, HeaderAPIKey, HeaderLiteLLMKey)
		}
		found = v
		return nil
	}
	for _, v := range h.Values(HeaderAuthorization) {
		scheme, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
		switch {
		case strings.EqualFold(scheme, "Bearer"):
			if strings.TrimSpace(rest) == "" {
				return "", rejected("the Authorization header has no bearer token")
			}
			if err := take(rest); err != nil {
				return "", err
			}
		case sigV4:
			// The SigV4 signature Lambda has already checked.
		default:
			return "", rejected("the Authorization header must use the Bearer scheme")
		}
	}
	for _, name := range []string{HeaderAPIKey, HeaderLiteLLMKey} {
		for _, v := range h.Values(name) {
			v = strings.TrimSpace(v)
			if scheme, rest, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
				v = rest
			}
			if err := take(v); err != nil {
				return "", err
			}
		}
	}
	return found, nil
}

// looksLikeJWT reports whether s is a JWS in compact form: three base64url
// parts, the first a JSON object (the header). Anything else is a key.
func looksLikeJWT(s string) bool {
	head, rest, ok := strings.Cut(s, ".")
	if !ok || strings.Count(rest, ".") != 1 || len(head) > 4096 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return false
	}
	var hdr map[string]json.RawMessage
	return json.Unmarshal(b, &hdr) == nil && hdr["alg"] != nil
}
