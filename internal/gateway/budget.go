package gateway

import (
	"fmt"
	"time"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/registry"
)

// budgetFault refuses a call that cannot run its whole course within one
// request: its timeout, plus the time it may wait for a slot, plus the
// reserve kept to release the slot and answer. Such a call would be cut
// off by the request deadline, after holding a slot, sooner than its
// server's item promises. It returns nil when the call fits or the request
// time is unknown.
func (g *Gateway) budgetFault(srv *registry.Server, tool string, timeout time.Duration, req lease.Request, capped bool) *fault.Error {
	if g.maxReq <= 0 {
		return nil
	}
	wait := slotWait(req, capped)
	need := timeout + wait + g.reserve
	if need <= g.maxReq {
		return nil
	}
	cause := fmt.Errorf("tool %q of server %q: timeout %v + queue_timeout %v + answer reserve %v = %v exceeds the request timeout %v",
		tool, srv.ID, timeout, wait, g.reserve, need, g.maxReq)
	return fault.Wrap(cause, fault.Misconfigured,
		"server %q is misconfigured: a call may take %v (timeout %v, queue_timeout %v), more than the gateway's %v request time; ask an admin to lower them or raise the function's timeout",
		srv.ID, need.Round(time.Millisecond), timeout, wait, g.maxReq)
}

// slotWait is how long a call with req may wait for a slot: only a call
// that takes a place can find none free, or one with buckets, which waits
// its turn for a token beside waiters that need one.
func slotWait(req lease.Request, capped bool) time.Duration {
	if !capped || !req.TakesPlace() && len(req.Rates) == 0 {
		return 0
	}
	return req.Wait
}
