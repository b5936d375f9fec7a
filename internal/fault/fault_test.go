package fault

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCodesHaveStatus(t *testing.T) {
	want := map[Code]int{
		AtCapacity:       429,
		QueueTimeout:     429,
		CircuitOpen:      503,
		UpstreamTimeout:  504,
		UpstreamError:    502,
		Unauthorized:     401,
		Forbidden:        403,
		NotFound:         404,
		BadRequest:       400,
		StoreUnavailable: 503,
		AuthUnavailable:  503,
	}
	for code, status := range want {
		if got := code.Status(); got != status {
			t.Errorf("%s.Status() = %d, want %d", code, got, status)
		}
	}
	for _, c := range []Code{AtCapacity, QueueTimeout, CircuitOpen, UpstreamTimeout, UpstreamError, StoreUnavailable, AuthUnavailable} {
		if !c.Retryable() {
			t.Errorf("%s should be retryable", c)
		}
	}
	for _, c := range []Code{Unauthorized, Forbidden, NotFound, BadRequest, Internal} {
		if c.Retryable() {
			t.Errorf("%s should not be retryable", c)
		}
	}
}

func TestWriteHTTP(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteHTTP(rec, New(AtCapacity, "server %q is at capacity", "demo").WithRetryAfter(1500*time.Millisecond))
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2 (rounded up)", got)
	}
	var body Body
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	want := Detail{Code: AtCapacity, Message: `server "demo" is at capacity`, Retryable: true, RetryAfterMS: 1500}
	if body.Error != want {
		t.Errorf("body = %+v, want %+v", body.Error, want)
	}
	if got := rec.Header().Get("WWW-Authenticate"); got != "" {
		t.Errorf("WWW-Authenticate = %q without a challenge", got)
	}

	rec = httptest.NewRecorder()
	WriteHTTP(rec, New(Unauthorized, "no key").WithChallenge(`Bearer resource_metadata="https://gw/.well-known/oauth-protected-resource"`))
	if got := rec.Header().Get("WWW-Authenticate"); rec.Code != 401 || got != `Bearer resource_metadata="https://gw/.well-known/oauth-protected-resource"` {
		t.Errorf("status %d, WWW-Authenticate = %q", rec.Code, got)
	}
}

func TestAsHidesInternalText(t *testing.T) {
	e := As(errors.New("dial tcp 10.0.0.1:443: secret detail"))
	if e.Code != Internal {
		t.Fatalf("code = %s, want INTERNAL", e.Code)
	}
	rec := httptest.NewRecorder()
	WriteHTTP(rec, e)
	if strings.Contains(rec.Body.String(), "secret") {
		t.Errorf("internal error text leaked: %s", rec.Body.String())
	}
	wrapped := Wrap(errors.New("boom"), StoreUnavailable, "store unavailable")
	if got := As(wrapped); got != wrapped {
		t.Errorf("As did not return the wrapped *Error")
	}
	if !errors.Is(wrapped, wrapped.Cause) {
		t.Errorf("Unwrap does not expose the cause")
	}
}

// TestMessagesRedactURLs: a URL in a message (an upstream's error text may
// quote one) is answered with its query values and userinfo redacted.
func TestMessagesRedactURLs(t *testing.T) {
	for _, e := range []*Error{
		New(UpstreamError, "server %q answered: %s", "s", "GET https://u:pw@api.test/x?token=s3cr3t failed"),
		Wrap(errors.New("cause"), BadRequest, "rejected: see https://api.test/doc?token=s3cr3t"),
	} {
		if strings.Contains(e.Message, "s3cr3t") || strings.Contains(e.Message, "pw@") || !strings.Contains(e.Message, "token=REDACTED") {
			t.Errorf("message %q, want the URL redacted", e.Message)
		}
	}
}
