package testkit

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestRig: a rig's gateways get its environment and then their start's
// own, are picked by index modulo their number, and a replaced one is
// killed and started again as it was.
func TestRig(t *testing.T) {
	r := NewRig(t, RigOptions{Env: []string{"REQUEST_TIMEOUT=2m", "LEASE_MARGIN=3s"}, Demo: true, Key: true})
	r.PutServer(map[string]any{"server_id": "demo", "url": r.Demo.URL})
	gws := r.Start(2, "LEASE_MARGIN=500ms")
	if r.Gateway(3) != gws[1] || len(r.Gateways()) != 2 {
		t.Fatalf("Gateway(3) is not the second of 2 gateways")
	}
	old := gws[1]
	g := r.Replace(1)
	select {
	case <-old.done:
	default:
		t.Error("the replaced process still runs")
	}
	if g == old || r.Gateway(1) != g || r.Gateway(0) != gws[0] {
		t.Error("the new process is not in the replaced one's place")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, g := range r.Gateways() {
		if _, ok := Record(g.Logs(), Match{"msg": "starting", "request_timeout": "2m0s", "lease_margin": "500ms"}); !ok {
			t.Errorf("gateway %d did not start with the rig's REQUEST_TIMEOUT and its start's LEASE_MARGIN:\n%s", i, g.Logs())
		}
		if resp, err := g.CallTool(ctx, r.Key, "demo", "echo", map[string]any{"text": "x"}); err != nil || resp.Status != http.StatusOK {
			t.Errorf("call via gateway %d: %v %d %s", i, err, resp.Status, resp.Body)
		}
	}
}
