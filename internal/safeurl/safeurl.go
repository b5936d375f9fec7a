package safeurl

import (
	"errors"
	"net/url"
	"strings"
)

// Mask replaces every redacted part.
const Mask = "REDACTED"

// Redact returns raw with its userinfo and the values of its query and
// fragment replaced by Mask; the scheme, host, path and query keys stay
// readable. Text that does not parse as a URL is cut before its first '?'
// or '#', and before its last '@' if that comes first.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return redactUnparsed(raw)
	}
	if u.User != nil {
		u.User = url.User(Mask)
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery = redactQuery(u.RawQuery)
		u.ForceQuery = false
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = Mask, ""
	}
	return u.String()
}

// Cause returns err without the *url.Error that net/http wraps a failed
// request's error in, whose text repeats the request's whole URL; err
// itself when there is none. An error about a request names its URL
// through Redact, beside Cause's text.
func Cause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redactQuery keeps the keys of q, in order, and masks every value.
func redactQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		if k, _, ok := strings.Cut(p, "="); ok {
			parts[i] = k + "=" + Mask
		}
	}
	return strings.Join(parts, "&")
}

func redactUnparsed(raw string) string {
	cut := len(raw)
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		cut = i
	}
	head := raw[:cut]
	if i := strings.LastIndexByte(head, '@'); i >= 0 {
		scheme, _, ok := strings.Cut(head, "://")
		if ok {
			return scheme + "://" + Mask + "@" + head[i+1:] + maskedTail(raw, cut)
		}
		return Mask + "@" + head[i+1:] + maskedTail(raw, cut)
	}
	return head + maskedTail(raw, cut)
}

func maskedTail(raw string, cut int) string {
	if cut == len(raw) {
		return ""
	}
	return raw[cut:cut+1] + Mask
}

// RedactText returns s with every URL in it passed through Redact. A URL
// is a scheme, "://" and what follows: after a double quote (a URL quoted
// with %q, as net/http's errors quote the URL they failed on), up to the
// closing quote, whatever the URL holds; otherwise up to a space, a quote
// or one of <>`, less trailing punctuation.
// Text without "://" is returned as is, without copying.
func RedactText(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			b.WriteString(rest)
			return b.String()
		}
		start := i
		for start > 0 && schemeChar(rest[start-1]) {
			start--
		}
		for start < i && !letter(rest[start]) {
			start++ // a scheme starts with a letter
		}
		end := i + 3
		if start > 0 && rest[start-1] == '"' {
			// Quoted: a quote, space or < in its query is escaped or
			// kept, and ends nothing but the quote.
			for end < len(rest) && rest[end] != '"' {
				if rest[end] == '\\' && end+1 < len(rest) {
					end++ // an escape: \" or \\
				}
				end++
			}
		} else {
			for end < len(rest) && !stopChar(rest[end]) {
				end++
			}
			for end > i+3 && strings.IndexByte(".,;:)]}", rest[end-1]) >= 0 {
				end-- // punctuation after the URL, not in it
			}
		}
		b.WriteString(rest[:start])
		if start == i {
			// "://" with no scheme before it: not a URL.
			b.WriteString(rest[i:end])
		} else {
			b.WriteString(Redact(rest[start:end]))
		}
		rest = rest[end:]
	}
}

// schemeChar reports whether c may be part of a URL scheme.
func schemeChar(c byte) bool {
	return letter(c) || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

func letter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func stopChar(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', '"', '\'', '<', '>', '`':
		return true
	}
	return false
}

// SameOrigin reports whether a and b have the same scheme, host and port
// (a missing port is the scheme's default), compared case-insensitively.
func SameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) &&
		strings.EqualFold(a.Hostname(), b.Hostname()) &&
		port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}
