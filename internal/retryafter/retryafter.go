// Package retryafter reads an HTTP Retry-After header (RFC 9110, 10.2.3):
// a number of seconds, or an HTTP date.
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Max bounds what one header can ask for: an upstream cannot stop a
// server's calls for longer than this with one answer.
const Max = 5 * time.Minute

// Parse is how long h asks the client to wait, as of now, at most Max; 0
// when it is absent, malformed or already past.
func Parse(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" || len(h) > 64 {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(h, 10, 32); err == nil {
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(h); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), Max)
}

// From is the wait a response asks for when its status is 429 or 503; 0
// for any other status.
func From(resp *http.Response, now time.Time) time.Duration {
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0
	}
	return Parse(resp.Header.Get("Retry-After"), now)
}
