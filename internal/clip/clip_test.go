package clip

import "testing"

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
