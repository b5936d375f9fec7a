package main

// Back-pressure across the fleet, with several gateway OS processes sharing
// one store: an upstream's Retry-After pauses the server on every process
// and never counts against its breaker, and an adaptive server's limit
// finds a batch upstream's knee, unknown to the gateway, and follows it.

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/fault"
	"github.com/mcpgate/mcpgate/internal/lease"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
	"github.com/mcpgate/mcpgate/internal/testkit"
)

// TestRetryAfterPausesTheFleet: a 429 with Retry-After: 2 from the
// upstream stops every process's calls to the server until it passes —
// callers that do not wait are refused with the time left, a caller that
// waits enters after it — and neither it nor a 429 without Retry-After
// counts against a breaker that one failure would open.
func TestRetryAfterPausesTheFleet(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv})
	up := testkit.StartBatch(t, 10, 20*time.Millisecond)
	key := r.PutKey("*")
	gws := r.Start(3)
	breaker := map[string]any{"failure_threshold": 1, "recovery_timeout": 60}
	r.PutServer(map[string]any{"server_id": "paced", "url": up.URL, "max_concurrent_requests": 4, "on_limit": "shed", "breaker": breaker})
	r.PutServer(map[string]any{"server_id": "waits", "url": up.URL, "max_concurrent_requests": 4, "on_limit": "queue", "queue_timeout": 10, "breaker": breaker})
	for _, g := range gws {
		for _, s := range []string{"paced", "waits"} {
			if c := callVia(g.URL, key, s, "work", nil); c.Status != http.StatusOK {
				t.Fatalf("warm-up on %s: %+v", s, c)
			}
		}
	}

	// A 429 without Retry-After: back-pressure, not a failure.
	up.RefuseNext(http.StatusTooManyRequests, 0)
	if c := callVia(gws[0].URL, key, "paced", "work", nil); c.Status != http.StatusBadGateway || c.Fault.Code != fault.UpstreamError {
		t.Fatalf("a call the upstream answered 429: %+v", c)
	}
	if c := callVia(gws[1].URL, key, "paced", "work", nil); c.Status != http.StatusOK {
		t.Fatalf("after a 429 without Retry-After the next call got %+v; the breaker must not count it", c)
	}

	for _, server := range []string{"paced", "waits"} {
		up.Reset()
		up.RefuseNext(http.StatusTooManyRequests, 2*time.Second)
		first := callVia(gws[0].URL, key, server, "work", nil)
		if first.Fault.Code != fault.UpstreamError || first.RetryAfter() < time.Second || first.RetryAfter() > 2*time.Second {
			t.Fatalf("%s: the call answered 429 with Retry-After 2: %+v; want UPSTREAM_ERROR retrying after 2s", server, first)
		}
		refusedAt := up.Stats().Arrivals[0]
		var mu sync.Mutex
		var during []agentCall
		var wg sync.WaitGroup
		for _, g := range gws {
			wg.Go(func() {
				c := callVia(g.URL, key, server, "work", nil)
				mu.Lock()
				during = append(during, c)
				mu.Unlock()
			})
		}
		wg.Wait()
		for _, c := range during {
			switch server {
			case "paced":
				if c.Fault.Code != fault.AtCapacity || c.Fault.Reason != lease.Paused || c.RetryAfter() <= 0 || c.RetryAfter() > 2*time.Second {
					t.Errorf("paced: a call during the pause: %+v; want AT_CAPACITY, paused, with the time left", c)
				}
			case "waits":
				if c.Status != http.StatusOK {
					t.Errorf("waits: a queued call during the pause: %+v; want it served once the pause is over", c)
				}
			}
		}
		for _, at := range up.Stats().Arrivals[1:] {
			if at.Before(refusedAt.Add(2 * time.Second)) {
				t.Errorf("%s: a call reached the upstream %v after its 429, before its Retry-After of 2s passed", server, at.Sub(refusedAt))
			}
		}
		time.Sleep(time.Until(refusedAt.Add(2100 * time.Millisecond)))
		if c := callVia(gws[2].URL, key, server, "work", nil); c.Status != http.StatusOK {
			t.Errorf("%s: a call after the pause got %+v; the breaker must not have counted the 429", server, c)
		}
	}
}

// limitOf reads server's adaptive limit from its lease item (0: none yet).
func limitOf(t *testing.T, env *storetest.Env, server string) int {
	t.Helper()
	out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(env.Tables.Leases),
		Key:            map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: server}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := out.Item[lease.LimitAttr].(*types.AttributeValueMemberN); ok {
		v, _ := strconv.Atoi(n.Value)
		return v
	}
	return 0
}

// TestAdaptiveLimitFollowsTheKnee: 16 agents through 4 gateway processes
// call a batch upstream whose knee moves 3 → 6 → 2, through an adaptive
// server whose ceiling is 12. The fleet's one limit follows the knee, few
// calls are refused by the upstream, and none exceeds the ceiling.
//
// "Follows" is what the latency signal can see: n calls at once past the
// knee k take (n/k)² longer, and a call is slow evidence only past
// lease.Tolerance × its baseline, so every n up to k·√Tolerance looks as
// quick as the knee itself (7 of knee 6 take 1.36×). The limit's median
// over the second half of each phase must lie within one below the knee
// and one above the last such n (knee 3: 2–4, knee 6: 5–8, knee 2: 1–3).
func TestAdaptiveLimitFollowsTheKnee(t *testing.T) {
	r := testkit.NewRig(t, testkit.RigOptions{Env: isolationEnv})
	up := testkit.StartBatch(t, 3, 200*time.Millisecond)
	key := r.PutKey("*")
	gws := r.Start(4)
	r.PutServer(map[string]any{"server_id": "batch", "url": up.URL, "max_concurrent_requests": 12, "adaptive": true,
		"on_limit": "queue", "queue_timeout": 30, "timeout": 10})
	phase := 12 * time.Second
	var medians []int
	var served, failed int
	codes := map[string]int{}
	var mu sync.Mutex
	for _, knee := range []int{3, 6, 2} {
		up.SetKnee(knee)
		end := time.Now().Add(phase)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				for time.Now().Before(end) {
					c := callVia(gws[i%len(gws)].URL, key, "batch", "work", nil)
					mu.Lock()
					if c.Status == http.StatusOK {
						served++
					} else {
						failed++
						codes[strconv.Itoa(c.Status)+" "+string(c.Fault.Code)+" "+c.Fault.Reason]++
					}
					mu.Unlock()
					if c.Status != http.StatusOK {
						time.Sleep(max(c.RetryAfter(), 100*time.Millisecond))
					}
				}
			})
		}
		var seen []int
		wg.Go(func() {
			time.Sleep(phase / 2)
			for time.Now().Before(end) {
				seen = append(seen, max(limitOf(t, r.Env, "batch"), 1))
				time.Sleep(200 * time.Millisecond)
			}
		})
		wg.Wait()
		slices.Sort(seen)
		medians = append(medians, seen[len(seen)/2])
	}
	st := up.Stats()
	t.Logf("knees 3, 6, 2: median limits %v; %d calls served (%.1f/s), %d failed %v, upstream refused %d, peak %d",
		medians, served, float64(served)/(3*phase.Seconds()), failed, codes, st.Refused, st.Peak)
	for i, knee := range []int{3, 6, 2} {
		unseen := int(float64(knee) * math.Sqrt(lease.Tolerance)) // the most calls that look as quick as the knee
		if m := medians[i]; m < knee-1 || m > unseen+1 {
			t.Errorf("over the second half of the phase with knee %d the limit was %d (median); want %d to %d", knee, m, knee-1, unseen+1)
		}
	}
	if float64(failed) > 0.05*float64(served+failed) {
		t.Errorf("%d of %d calls failed; want at most 5%%", failed, served+failed)
	}
	if st.Peak > 12 {
		t.Errorf("the upstream saw %d calls at once; ceiling 12", st.Peak)
	}
}
