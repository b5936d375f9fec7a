package safeurl

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://api.example.com/mcp", "https://api.example.com/mcp"},
		{"https://api.example.com/mcp?api_key=s3cr3t", "https://api.example.com/mcp?api_key=REDACTED"},
		{"https://api.example.com/mcp?a=1&b&c=", "https://api.example.com/mcp?a=REDACTED&b&c=REDACTED"},
		{"https://user:pass@api.example.com/mcp", "https://REDACTED@api.example.com/mcp"},
		{"https://tok3n@api.example.com/", "https://REDACTED@api.example.com/"},
		{"https://api.example.com/cb#access_token=x", "https://api.example.com/cb#REDACTED"},
		{"http://[::1]:8080/mcp?k=v", "http://[::1]:8080/mcp?k=REDACTED"},
		// Not parsable (bad escape, bad port): cut anyway.
		{"https://u:p@h:bad/%zz?k=v", "https://REDACTED@h:bad/%zz?REDACTED"},
		{"not a url?token=x", "not a url?REDACTED"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(Redact(tc.in), "s3cr3t") || strings.Contains(Redact(tc.in), "pass") {
			t.Errorf("Redact(%q) leaks a secret", tc.in)
		}
	}
}

func TestRedactText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"no urls here", "no urls here"},
		{`Post "http://127.0.0.1:9/mcp?api_key=s3cr3t": dial tcp: refused`,
			`Post "http://127.0.0.1:9/mcp?api_key=REDACTED": dial tcp: refused`},
		{"two: https://a:b@x.test/p and (http://y.test/?q=1)", "two: https://REDACTED@x.test/p and (http://y.test/?q=REDACTED)"},
		{"://nothing?x=1", "://nothing?x=1"},
		{"1https://x.test/?k=v", "1https://x.test/?k=REDACTED"},
		// Quoted with %q, as net/http's errors quote it: whatever the
		// query holds, up to the closing quote.
		{`Post "http://h.test/mcp?token=ab\"cd'ef gh<ij&team=blue": dial tcp: refused`,
			`Post "http://h.test/mcp?token=REDACTED&team=REDACTED": dial tcp: refused`},
		{`Get "http://h.test/?a=1\\": x "https://h.test/?b=2"`, `Get "http://h.test/?a=REDACTED": x "https://h.test/?b=REDACTED"`},
	} {
		if got := RedactText(tc.in); got != tc.want {
			t.Errorf("RedactText(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"http://h.test/mcp", "http://h.test/other?x=1", true},
		{"http://h.test/mcp", "http://H.TEST:80/", true},
		{"https://h.test/mcp", "https://h.test:443/", true},
		{"http://h.test/mcp", "https://h.test/mcp", false},
		{"http://h.test/mcp", "http://h.test:8080/mcp", false},
		{"http://127.0.0.1:1/mcp", "http://127.0.0.1:2/mcp", false},
		{"http://h.test/", "http://evil.test/", false},
	} {
		a, _ := url.Parse(tc.a)
		b, _ := url.Parse(tc.b)
		if got := SameOrigin(a, b); got != tc.want {
			t.Errorf("SameOrigin(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestLocalAddresses(t *testing.T) {
	for _, tc := range []struct {
		host  string
		local bool
	}{
		{"127.0.0.1", true}, {"127.9.9.9", true}, {"[::1]", true}, {"::ffff:127.0.0.1", true},
		{"0.0.0.0", true}, {"[::]", true}, {"169.254.169.254", true}, {"169.254.170.2", true},
		{"[fe80::1]", true}, {"[fd00:ec2::254]", true}, {"localhost", true}, {"LocalHost.", true},
		{"api.localhost", true},
		{"10.0.0.5", false}, {"192.168.1.1", false}, {"[fd00::1]", false}, {"8.8.8.8", false},
		{"api.example.com", false}, {"localhost.example.com", false},
	} {
		if got := LocalHost(tc.host); got != tc.local {
			t.Errorf("LocalHost(%q) = %v, want %v", tc.host, got, tc.local)
		}
	}
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:9001", false}, {"[::1]:80", false}, {"169.254.169.254:80", false},
		{"[::ffff:169.254.169.254]:80", false}, {"10.1.2.3:443", true}, {"[2001:db8::1]:443", true},
	} {
		err := RefuseLocal("tcp", tc.addr, nil)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrLocal)) {
			t.Errorf("RefuseLocal(%s) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
}
