package extension

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// apiVersion prefixes the Extensions API's paths.
const apiVersion = "2020-01-01"

// maxInvocation bounds an invocation whose event has no deadline: Lambda's
// longest function timeout.
const maxInvocation = 15 * time.Minute

// Extension is a registered internal extension.
type Extension struct {
	base   string // http://host:port/2020-01-01/extension/
	id     string
	client *http.Client

	mu       sync.Mutex
	returned map[string]chan struct{} // request id → closed once its handler returned
}

// maxTracked bounds the invocations remembered at once. Lambda runs one
// invocation at a time per environment, and each is forgotten once its
// event was handled; the bound only matters if events went missing.
const maxTracked = 64

// Register registers an internal extension named name with the Extensions
// API at api (host:port, from AWS_LAMBDA_RUNTIME_API) for INVOKE events. It
// must be called before the runtime asks for its first event.
func Register(ctx context.Context, api, name string) (*Extension, error) {
	e := &Extension{
		base: "http://" + api + "/" + apiVersion + "/extension/",
		// No timeout: the API holds a request for the next event until
		// there is one.
		client:   &http.Client{},
		returned: map[string]chan struct{}{},
	}
	body, _ := json.Marshal(map[string][]string{"events": {"INVOKE"}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"register", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("register extension: %w", err)
	}
	req.Header.Set("Lambda-Extension-Name", name)
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("register extension: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("register extension: %s", resp.Status)
	}
	e.id = resp.Header.Get("Lambda-Extension-Identifier")
	if e.id == "" {
		return nil, errors.New("register extension: no identifier in the answer")
	}
	return e, nil
}

// Wrap returns h, noting when the handler of each invocation returns;
// requestID names a request's invocation (the Lambda request id).
func (e *Extension) Wrap(h http.Handler, requestID func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := requestID(r)
		defer e.handlerReturned(id)
		h.ServeHTTP(w, r)
	})
}

// invocation returns the channel closed once the handler of invocation id
// has returned.
func (e *Extension) invocation(id string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.returned[id]
	if !ok {
		if len(e.returned) >= maxTracked {
			for k, c := range e.returned {
				select {
				case <-c:
					delete(e.returned, k)
				default:
				}
			}
		}
		ch = make(chan struct{})
		e.returned[id] = ch
	}
	return ch
}

// Returned notes that the handler of invocation id has returned, for an
// invocation served other than through Wrap (an event that is no HTTP
// request).
func (e *Extension) Returned(id string) { e.handlerReturned(id) }

func (e *Extension) handlerReturned(id string) {
	if id == "" {
		return
	}
	ch := e.invocation(id)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (e *Extension) forget(id string) {
	e.mu.Lock()
	delete(e.returned, id)
	e.mu.Unlock()
}

// Event is an event of the Extensions API.
type Event struct {
	// Type is INVOKE (or SHUTDOWN, for external extensions).
	Type string `json:"eventType"`
	// RequestID is the invocation's request id.
	RequestID string `json:"requestId"`
	// DeadlineMS is the invocation's deadline, in Unix milliseconds.
	DeadlineMS int64 `json:"deadlineMs"`
}

// next asks for the next event, and waits for it.
func (e *Extension) next(ctx context.Context) (Event, error) {
	var ev Event
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"event/next", nil)
	if err != nil {
		return ev, err
	}
	req.Header.Set("Lambda-Extension-Identifier", e.id)
	resp, err := e.client.Do(req)
	if err != nil {
		return ev, fmt.Errorf("next extension event: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ev, fmt.Errorf("next extension event: %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&ev); err != nil {
		return ev, fmt.Errorf("next extension event: %w", err)
	}
	return ev, nil
}

// Run asks for events until ctx ends or the API fails. For each INVOKE
// event it waits until that invocation's handler has returned, then calls
// after with a context that ends at the invocation's deadline, and only
// then asks for the next event: the invocation lasts until after returns.
func (e *Extension) Run(ctx context.Context, after func(context.Context)) error {
	for {
		ev, err := e.next(ctx)
		if err != nil {
			return err
		}
		if ev.Type != "INVOKE" {
			continue
		}
		deadline := time.UnixMilli(ev.DeadlineMS)
		if ev.DeadlineMS <= 0 {
			deadline = time.Now().Add(maxInvocation)
		}
		ictx, cancel := context.WithDeadline(ctx, deadline)
		select {
		case <-e.invocation(ev.RequestID):
			after(ictx)
		case <-ictx.Done():
		}
		cancel()
		e.forget(ev.RequestID)
	}
}
