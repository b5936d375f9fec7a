// Package clip bounds and checks text that came from outside — names,
// messages, values read from requests, items and upstreams — before the
// gateway logs it, shows it or sends it on.
package clip

import (
	"strings"
	"unicode/utf8"
)

// Widths for String, by what the text is.
const (
	// Short is for identifiers and values quoted in a message: ids,
	// labels, header values.
	Short = 64
	// Name is for tool and server names.
	Name = 128
	// Message is for an error's detail passed on or logged.
	Message = 200
)

// String returns s cut to at most n bytes, at a rune boundary, with "…"
// after it when it was cut.
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// IsControl reports whether r is an ASCII control character: C0 or DEL.
func IsControl(r rune) bool { return r < ' ' || r == 0x7f }

// IsHeaderControl reports whether r may not stand in an HTTP header value:
// a control character other than horizontal tab.
func IsHeaderControl(r rune) bool { return IsControl(r) && r != '\t' }

// HeaderValue reports whether s may be sent as an HTTP header value: it
// holds no control character other than horizontal tab.
func HeaderValue(s string) bool { return !strings.ContainsFunc(s, IsHeaderControl) }

// HasControl reports whether s holds a control character.
func HasControl(s string) bool { return strings.ContainsFunc(s, IsControl) }
