package main

// The local server (GATEWAY_ADDR) against slow and idle clients: real
// connections to the gateway process, asserting on what the server did
// (answered, closed, held a connection back), not on how fast.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/testkit"
)

// drip is a client that sends head at once, then one byte of tail every
// interval, while it waits for the server's answer.
type drip struct {
	conn net.Conn
	sent atomic.Int64 // bytes of tail sent
	tail int
}

func startDrip(t *testing.T, url, head string, tail int, interval time.Duration) *drip {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d := &drip{conn: conn, tail: tail}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range tail {
			if _, err := conn.Write([]byte("x")); err != nil {
				return // the server closed the connection
			}
			d.sent.Add(1)
			time.Sleep(interval)
		}
	}()
	return d
}

// dripEnd is how the server ended a dripping request.
type dripEnd struct {
	status int // 0: closed without an answer
	// closed: the server closed the connection (after answering, if it
	// did), and sent is how much of the tail had been sent by then.
	closed bool
	sent   int64
	err    error
}

// wait reads the server's answer, if any, and waits for it to close the
// connection; limit only keeps a broken server from hanging the test.
func (d *drip) wait(limit time.Duration) dripEnd {
	_ = d.conn.SetReadDeadline(time.Now().Add(limit))
	br := bufio.NewReader(d.conn)
	var o dripEnd
	if _, err := br.Peek(1); err == nil {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			o.err = err
			return o
		}
		o.status = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	_, err := br.ReadByte()
	o.sent = d.sent.Load()
	switch {
	case isTimeout(err):
		o.err = err
	case err != nil:
		o.closed = true
	default:
		o.err = errors.New("the server sent more than one answer")
	}
	return o
}

func (o dripEnd) String() string {
	return fmt.Sprintf("status %d, closed %v after %d bytes of the tail (error: %v)", o.status, o.closed, o.sent, o.err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestLocalServerAnswersADrippingBody: 50 clients send a request without a
// key and drip its body a byte at a time. Each gets its 401 at once and the
// connection closes, instead of the server first reading the whole body.
func TestLocalServerAnswersADrippingBody(t *testing.T) {
	g := testkit.NewRig(t, testkit.RigOptions{}).StartGateway()
	const clients, body = 50, 200
	head := "POST /mcp-rest/tools/call HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
	ends := make([]dripEnd, clients)
	var wg sync.WaitGroup
	for i := range clients {
		d := startDrip(t, g.URL, head, body, 100*time.Millisecond)
		wg.Go(func() { ends[i] = d.wait(time.Minute) })
	}
	wg.Wait()
	for i, o := range ends {
		if o.status != http.StatusUnauthorized || !o.closed || o.sent >= body {
			t.Errorf("client %d: %s, want a 401 and the connection closed before the body was sent", i, o)
		}
	}
}

// TestLocalServerBoundsSlowClients: a body or headers dripped past the
// read timeout, and a connection left idle, are closed; beyond
// GATEWAY_MAX_CONNS a connection waits until another one closes.
func TestLocalServerBoundsSlowClients(t *testing.T) {
	rig := testkit.NewRig(t, testkit.RigOptions{Demo: true, Key: true})
	rig.PutServer(map[string]any{"server_id": "demo", "url": rig.Demo.URL, "timeout": 60})
	const maxConns = 4
	g := rig.StartGateway("GATEWAY_READ_TIMEOUT=2s", "GATEWAY_IDLE_TIMEOUT=2s", "GATEWAY_MAX_CONNS=4")
	for _, want := range []string{`"read_timeout":"2s"`, `"idle_timeout":"2s"`, `"max_conns":4`} {
		if !strings.Contains(g.Logs(), want) {
			t.Errorf("the listening line does not say %s:\n%s", want, g.Logs())
		}
	}

	// A key holder dripping a body that would take 100 s (valid JSON so
	// far, so the gateway keeps reading), and a client dripping its
	// headers: both are cut off by the 2 s read timeout.
	const tail = 1000
	prefix := `{"server_id":"demo","name":"echo","arguments":{"text":"`
	body := startDrip(t, g.URL, fmt.Sprintf("POST /mcp-rest/tools/call HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", rig.Key, len(prefix)+tail, prefix), tail, 100*time.Millisecond)
	header := startDrip(t, g.URL, "POST /mcp HTTP/1.1\r\nHost: gateway\r\nX-Slow: ", tail, 100*time.Millisecond)
	// A client that makes one request and then stays idle.
	idle := startDrip(t, g.URL, "GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n", 0, 0)
	ends := map[string]*dripEnd{}
	var wg sync.WaitGroup
	for name, d := range map[string]*drip{"dripped body": body, "dripped headers": header, "idle": idle} {
		end := new(dripEnd)
		ends[name] = end
		wg.Go(func() { *end = d.wait(time.Minute) })
	}
	wg.Wait()
	for _, name := range []string{"dripped body", "dripped headers"} {
		if o := ends[name]; !o.closed || o.sent >= tail {
			t.Errorf("%s: %s, want the connection closed before the client was done", name, o)
		}
	}
	if o := ends["idle"]; o.status != http.StatusOK || !o.closed {
		t.Errorf("idle connection: %s, want a 200 and then the connection closed", o)
	}

	// Four connections busy with calls held at the upstream fill the
	// server; a fifth is held back until one of them closes.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	held := make(chan error, maxConns)
	for range maxConns {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, g.URL+"/mcp-rest/tools/call",
				strings.NewReader(`{"server_id":"demo","name":"slow_tool","arguments":{"ms":60000,"gate":"hold"}}`))
			req.Header.Set("Authorization", "Bearer "+rig.Key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = errors.New(resp.Status)
				}
			}
			held <- err
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rig.Demo.WaitInFlight(ctx, maxConns); err != nil {
		t.Fatal(err)
	}
	fifth := make(chan dripEnd, 1)
	extra := startDrip(t, g.URL, "GET /health HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n", 0, 0)
	go func() { fifth <- extra.wait(time.Minute) }()
	for !strings.Contains(g.Logs(), "connection limit reached") {
		select {
		case <-ctx.Done():
			t.Fatalf("the server never held a connection back:\n%s", g.Logs())
		case o := <-fifth:
			t.Fatalf("a fifth connection was served while %d were busy: %s", maxConns, o)
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case o := <-fifth:
		t.Fatalf("a fifth connection was served while %d were busy: %s", maxConns, o)
	default:
	}
	rig.Demo.OpenGate("hold")
	for range maxConns {
		if err := <-held; err != nil {
			t.Errorf("held call: %v", err)
		}
	}
	if o := <-fifth; o.status != http.StatusOK {
		t.Errorf("the fifth connection, once one closed: %s, want 200", o)
	}
}
