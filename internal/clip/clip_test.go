package clip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/safeurl"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc…"},
		{"aé", 2, "a…"},  // é is 2 bytes: never cut inside it
		{"日本語", 4, "日…"}, // 3-byte runes
		{"日本語", 6, "日本…"},
		{"", 0, ""},
	} {
		if got := String(tc.in, tc.n); got != tc.want {
			t.Errorf("String(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestControl(t *testing.T) {
	for _, tc := range []struct {
		r              rune
		control, inHdr bool
	}{
		{'a', false, false}, {' ', false, false}, {'\t', true, false}, {'\n', true, true},
		{0, true, true}, {0x7f, true, true}, {'é', false, false},
	} {
		if got := IsControl(tc.r); got != tc.control {
			t.Errorf("IsControl(%q) = %v, want %v", tc.r, got, tc.control)
		}
		if got := IsHeaderControl(tc.r); got != tc.inHdr {
			t.Errorf("IsHeaderControl(%q) = %v, want %v", tc.r, got, tc.inHdr)
		}
	}
	if !HasControl("a\x00b") || HasControl("plain") {
		t.Error("HasControl")
	}
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"demo-echo", "demo-echo"},
		{"naïve 日本語 ok", "naïve 日本語 ok"},
		{`back\slash`, `back\slash`},
		{"\x1b]0;pwn\x07\x1b[2J", `\u001b]0;pwn\u0007\u001b[2J`},
		{"a\tb\nc\r", `a\u0009b\u000ac\u000d`},
		{"del\x7f", `del\u007f`},
		{"c1\u0085\u009b31m", `c1\u0085\u009b31m`},
		{"\u202eKO\u202c \u2066x\u2069 \u200e\u200f\u061c", `\u202eKO\u202c \u2066x\u2069 \u200e\u200f\u061c`},
		{"bad\xffutf8\xc3", "bad\uFFFDutf8\uFFFD"},
		// Neighbours of the escaped ranges stay.
		{"\u00a0\u202f\u2065\u200d", "\u00a0\u202f\u2065\u200d"},
	} {
		got := Escape(tc.in)
		if got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.ContainsFunc(got, IsEscaped) || !utf8.ValidString(got) {
			t.Errorf("Escape(%q) = %q still holds what it escapes", tc.in, got)
		}
		if again := Escape(got); again != got {
			t.Errorf("Escape is not idempotent on %q: %q", got, again)
		}
		// Inside a JSON string, the escaped text reads back as the
		// original (valid UTF-8) runes.
		if utf8.ValidString(tc.in) && !strings.Contains(tc.in, `\`) {
			var back string
			if err := json.Unmarshal([]byte(`"`+got+`"`), &back); err != nil || back != tc.in {
				t.Errorf("%q as a JSON string reads back as %q (%v), want %q", got, back, err, tc.in)
			}
		}
	}
	for r := rune(0); r <= 0x2100; r++ {
		want := r < 0x20 || r >= 0x7f && r <= 0x9f || r == 0x61c || r == 0x200e || r == 0x200f ||
			r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
		if IsEscaped(r) != want {
			t.Errorf("IsEscaped(%U) = %v, want %v", r, !want, want)
		}
	}
}

func TestEscapeDoesNotCopyPlainText(t *testing.T) {
	s := strings.Repeat("plain text, é and 日本 ", 10)
	if n := testing.AllocsPerRun(100, func() { _ = Escape(s) }); n != 0 {
		t.Errorf("Escape of plain text allocates %v times", n)
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil), safeurl.RedactText)).With("upstream", "https://u:p@x.test/mcp", "who", "a\u202eb")
	err := fmt.Errorf("connect: %w", &url.Error{Op: "Post", URL: "https://x.test/mcp?api_key=s3cr3t", Err: errors.New("refused\x1b[2J")})
	log.Info("call to https://x.test/mcp?token=s3cr3t failed\x07", "error", err, "url", "https://x.test/?token=s3cr3t",
		slog.Group("g", "u", "http://x.test/?k=s3cr3t", "t", "\x1b]0;pwn\x07"), "n", 3, "s", stringer("\u009b31m"))
	out := buf.String()
	for _, leak := range []string{"s3cr3t", "u:p@"} {
		if strings.Contains(out, leak) {
			t.Errorf("log line leaks %q: %s", leak, out)
		}
	}
	if !strings.Contains(out, `"n":3`) || !strings.Contains(out, "api_key=REDACTED") {
		t.Errorf("log line lost its content: %s", out)
	}
	var rec map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &rec); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if strings.ContainsFunc(v, IsEscaped) {
				t.Errorf("a logged value holds a control character: %q", v)
			}
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(rec)
	if rec["who"] != `a\u202eb` || rec["s"] != `\u009b31m` {
		t.Errorf("who = %q, s = %q: want them escaped", rec["who"], rec["s"])
	}
}

type stringer string

func (s stringer) String() string { return string(s) }
