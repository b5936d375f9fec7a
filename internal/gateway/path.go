package gateway

import (
	"net/http"
	"net/url"
	"strings"
)

// collapseSlashes serves a path with repeated slashes as the same path with
// single ones: "//mcp" is what a base URL ending in "/" joined with "/mcp"
// gives, and the mux would answer it with a bodiless redirect that clients
// of a POST rarely follow. Routing and authentication both see the
// collapsed path. Only literal slashes collapse (an escaped "%2F" stays
// what it is), and other unclean paths ("/a/../mcp") still get the mux's
// redirect.
func collapseSlashes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		esc := r.URL.EscapedPath()
		if !strings.Contains(esc, "//") {
			h.ServeHTTP(w, r)
			return
		}
		sq := squeezeSlashes(esc)
		p, err := url.PathUnescape(sq)
		if err != nil {
			h.ServeHTTP(w, r)
			return
		}
		u := *r.URL
		u.Path, u.RawPath = p, sq
		r2 := r.WithContext(r.Context())
		r2.URL = &u
		h.ServeHTTP(w, r2)
	})
}

// squeezeSlashes replaces every run of "/" in p with one.
func squeezeSlashes(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}
