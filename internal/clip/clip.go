// Package clip bounds, checks and escapes text that came from outside —
// names, messages, values read from requests, items and upstreams — before
// the gateway logs it, shows it or sends it on.
//
// The rule for such text, wherever it is written for a person to read (a
// log line, a span, a CLI's output, the console): ids and names the gateway
// validated are written as they are; anything else goes through Escape,
// which replaces every control character (C0, DEL, C1) and every Unicode
// bidirectional control, so that no value can move a terminal's cursor,
// set its title, clear its screen, forge a line or reorder what is shown.
// NewLogHandler applies Escape to every string of every log record.
package clip

import (
	"strings"
	"unicode"
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

// IsEscaped reports whether Escape replaces r: a C0 control character
// (U+0000–U+001F, tab and newline included), DEL (U+007F), a C1 control
// character (U+0080–U+009F), or a Unicode bidirectional control (U+061C,
// U+200E, U+200F, U+202A–U+202E, U+2066–U+2069).
func IsEscaped(r rune) bool {
	return r < ' ' || r >= 0x7f && r <= 0x9f || unicode.Is(unicode.Bidi_Control, r)
}

// Escape returns s as it may be shown to a person: every rune IsEscaped
// reports is written as \u followed by its four hex digits (ESC is
// \u001b, RIGHT-TO-LEFT OVERRIDE \u202e) and every byte of invalid UTF-8
// becomes U+FFFD. Everything else is kept, backslashes included, so the
// result is for reading, not for decoding; inside a JSON string it reads
// back as the original runes. s is returned as it is, without copying,
// when it holds nothing to escape; Escape(Escape(s)) == Escape(s).
//
// Use it for every value from a request, an item or an upstream that is
// written to a log, a span, a terminal or a web page and was not
// validated to hold none of these: ids, tool names, methods, error texts.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune(utf8.RuneError)
		case IsEscaped(r):
			b.WriteString(`\u`)
			for shift := 12; shift >= 0; shift -= 4 {
				b.WriteByte(hex[r>>shift&0xf])
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// needsEscape reports whether Escape would change s.
func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < ' ' || c == 0x7f {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || IsEscaped(r) {
			return true
		}
		i += n
	}
	return false
}
