package testkit

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/mcpgate/mcpgate/internal/auth"
	"github.com/mcpgate/mcpgate/internal/demoupstream"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// Rig is what the tests that run the gateway binary as OS processes run
// on: one store, gateway processes sharing it, the upstreams they call and
// a key. Its gateways are started at once, each with the rig's environment
// and then its start's own; a test picks them by index, and may replace
// one, as a crash and a restart would.
type Rig struct {
	// T is the test the rig belongs to: its helpers fail T, and the
	// processes it starts stop when T ends.
	T testing.TB
	// Env is the store.
	Env *storetest.Env
	// Demo and Hostile are the upstreams the options asked for, else nil.
	Demo    *Demo
	Hostile *Hostile
	// Key is a key for every server, when the options asked for one.
	Key string

	env   []string
	mu    sync.Mutex
	slots []slot
}

// RigOptions say what a rig holds besides its store.
type RigOptions struct {
	// Env is given to every gateway process the rig starts, before the
	// variables of its own start (of two values for a name, the later
	// wins).
	Env []string
	// Demo starts a demo upstream serving MCP as DemoWith says.
	Demo     bool
	DemoWith demoupstream.HandlerOptions
	// Hostile starts the hostile upstream.
	Hostile bool
	// Key stores a key with access to every server ("*").
	Key bool
}

// slot is one of the rig's gateways and how it was started, so that
// Replace starts it again the same way.
type slot struct {
	g     *Gateway
	path  string
	extra []string
}

// NewRig makes a store, the upstreams and the key o asks for, in that
// order. It starts no gateway: Start does.
func NewRig(t testing.TB, o RigOptions) *Rig {
	t.Helper()
	r := &Rig{T: t, Env: storetest.NewEnv(t), env: slices.Clone(o.Env)}
	if o.Hostile {
		r.Hostile = StartHostile(t)
	}
	if o.Demo {
		r.Demo = StartDemoWith(t, o.DemoWith)
	}
	if o.Key {
		r.Key = r.PutKey("*")
	}
	return r
}

// Start starts n gateway processes at once, with the rig's environment
// and extra, adds them to the rig's gateways and returns them.
func (r *Rig) Start(n int, extra ...string) []*Gateway {
	r.T.Helper()
	path := GatewayBinary(r.T)
	gws := r.launch(r.T, path, n, extra)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range gws {
		r.slots = append(r.slots, slot{g: g, path: path, extra: slices.Clone(extra)})
	}
	return gws
}

// StartGateway starts one gateway process as Start does, and returns it.
func (r *Rig) StartGateway(extra ...string) *Gateway {
	r.T.Helper()
	return r.Start(1, extra...)[0]
}

// Launch starts n more gateway processes at once, with the rig's
// environment and extra, that belong to t (a subtest, or the rig's own
// test): they stop when t ends, if not before. They are not among the
// rig's gateways.
func (r *Rig) Launch(t testing.TB, n int, extra ...string) []*Gateway {
	t.Helper()
	return r.launch(t, GatewayBinary(t), n, extra)
}

// LaunchBinary is Launch of the executable at path, which must serve as
// the gateway does: listen on GATEWAY_ADDR and log a "listening" record
// with its address.
func (r *Rig) LaunchBinary(t testing.TB, path string, n int, extra ...string) []*Gateway {
	t.Helper()
	return r.launch(t, path, n, extra)
}

func (r *Rig) launch(t testing.TB, path string, n int, extra []string) []*Gateway {
	t.Helper()
	env := append(slices.Clone(r.env), extra...)
	gws := make([]*Gateway, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { gws[i], errs[i] = startServing(t, r.Env, path, env) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return gws
}

// Gateway returns gateway i, counted modulo the number started, so that
// call i of a burst goes to Gateway(i).
func (r *Rig) Gateway(i int) *Gateway {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slots[i%len(r.slots)].g
}

// Gateways returns the rig's gateways, in the order they were started.
func (r *Rig) Gateways() []*Gateway {
	r.mu.Lock()
	defer r.mu.Unlock()
	gws := make([]*Gateway, len(r.slots))
	for i, s := range r.slots {
		gws[i] = s.g
	}
	return gws
}

// Replace kills gateway i with SIGKILL, as a crash would, and starts a
// new process in its place, as the old one was started.
func (r *Rig) Replace(i int) *Gateway {
	r.mu.Lock()
	s := r.slots[i]
	r.mu.Unlock()
	s.g.Kill()
	g := r.launch(r.T, s.path, 1, s.extra)[0]
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slots[i].g = g
	return g
}

// PutServer writes a server item (see PutServer).
func (r *Rig) PutServer(doc map[string]any) {
	r.T.Helper()
	PutServer(r.T, r.Env, doc)
}

// PutKey stores a key with access to servers ("*" for all) and returns it.
func (r *Rig) PutKey(servers ...string) string {
	r.T.Helper()
	return PutKey(r.T, r.Env, servers...)
}

// PutKeyAs stores a key as k says (see PutKeyAs) and returns it.
func (r *Rig) PutKeyAs(k auth.Key) string {
	r.T.Helper()
	return PutKeyAs(r.T, r.Env, k)
}
