// Command otelcol is a minimal OpenTelemetry Collector for tests: the
// Collector's own OTLP receiver (HTTP on -addr), writing each span it
// receives as one JSON line to -out. It is a module of its own, so that
// the gateway's go.mod carries no Collector dependency.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// Span is one received span, flattened.
type Span struct {
	Service      string         `json:"service"`
	Scope        string         `json:"scope"`
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id"`
	Name         string         `json:"name"`
	Kind         string         `json:"kind"`
	Status       string         `json:"status"`
	StartNs      uint64         `json:"start_ns"`
	EndNs        uint64         `json:"end_ns"`
	Attributes   map[string]any `json:"attributes"`
	Links        []Link         `json:"links,omitempty"`
	Events       []string       `json:"events,omitempty"`
}

// Link is a span's link.
type Link struct {
	TraceID string `json:"trace_id"`
	SpanID  string `json:"span_id"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:4318", "OTLP/HTTP listen address")
	out := flag.String("out", "spans.jsonl", "file the spans are appended to")
	flag.Parse()
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	enc := json.NewEncoder(f)
	next, err := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range td.ResourceSpans().All() {
			svc, _ := rs.Resource().Attributes().Get("service.name")
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					sp := Span{Service: svc.AsString(), Scope: ss.Scope().Name(),
						TraceID: s.TraceID().String(), SpanID: s.SpanID().String(),
						Name: s.Name(), Kind: s.Kind().String(), Status: s.Status().Code().String(),
						StartNs: uint64(s.StartTimestamp()), EndNs: uint64(s.EndTimestamp()),
						Attributes: s.Attributes().AsRaw()}
					if !s.ParentSpanID().IsEmpty() {
						sp.ParentSpanID = s.ParentSpanID().String()
					}
					for _, l := range s.Links().All() {
						sp.Links = append(sp.Links, Link{TraceID: l.TraceID().String(), SpanID: l.SpanID().String()})
					}
					for _, e := range s.Events().All() {
						sp.Events = append(sp.Events, e.Name())
					}
					if err := enc.Encode(sp); err != nil {
						return err
					}
				}
			}
		}
		return f.Sync()
	})
	if err != nil {
		log.Fatal(err)
	}
	factory := otlpreceiver.NewFactory()
	cfg := factory.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = *addr
	rcv, err := factory.CreateTraces(context.Background(), receivertest.NewNopSettings(factory.Type()), cfg, next)
	if err != nil {
		log.Fatal(err)
	}
	if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		log.Fatal(err)
	}
	log.Printf("otelcol: OTLP/HTTP on %s, spans to %s", *addr, *out)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	_ = rcv.Shutdown(context.Background())
	_ = f.Close()
}
