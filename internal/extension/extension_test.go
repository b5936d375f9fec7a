package extension

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The extension's own bookkeeping; its use of the Extensions API is tested
// against the Lambda Runtime Interface Emulator in functions/gateway.

func newTracker() *Extension { return &Extension{returned: map[string]chan struct{}{}} }

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestInvocationReturnedBeforeOrAfterItsEvent(t *testing.T) {
	e := newTracker()
	block := make(chan struct{})
	h := e.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Id") == "slow" {
			<-block
		}
	}), func(r *http.Request) string { return r.Header.Get("X-Id") })
	serve := func(id string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Id", id)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}

	// The handler returns before the extension hears of the invocation.
	serve("fast")
	if !closed(e.invocation("fast")) {
		t.Error("an invocation whose handler returned is not marked so")
	}
	e.forget("fast")

	// The extension hears of it first.
	ch := e.invocation("slow")
	done := make(chan struct{})
	go func() { serve("slow"); close(done) }()
	if closed(ch) {
		t.Fatal("an invocation is marked returned while its handler runs")
	}
	close(block)
	<-done
	if !closed(ch) {
		t.Error("the handler returned, and the invocation is not marked so")
	}
	e.forget("slow")
	if n := len(e.returned); n != 0 {
		t.Errorf("%d invocations remembered after they were forgotten", n)
	}
}

func TestTrackingIsBounded(t *testing.T) {
	e := newTracker()
	// Invocations whose events never come are forgotten once returned.
	for i := range 10 * maxTracked {
		e.handlerReturned(fmt.Sprint(i))
	}
	if n := len(e.returned); n > maxTracked {
		t.Errorf("%d invocations remembered, want at most %d", n, maxTracked)
	}
}
