package lease

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// isChargeOf tells a charge of the server's bucket: a write naming it that
// takes no lease and gives no token back.
func isChargeOf(in *dynamodb.UpdateItemInput, _ string) bool {
	names := slices.Collect(maps.Values(in.ExpressionAttributeNames))
	return slices.Contains(names, RateAttr("server")) && !slices.Contains(names, LeasesAttr) && !strings.Contains(aws.ToString(in.UpdateExpression), " - ")
}

// A charge is conditioned on freed as seen while a waiter needs a token
// of its buckets (W, of another
// principal, waits for tool heavy; the server's bucket is everyone's).
// Others' releases move freed every 20 ms (50 a second, as on a server of
// cap 50 with one-second calls), the store 5 ms away, and its first
// eagerRetries+1 tries are refused as in TestAChargeOthersKeepWritingOverPauses.
// Each later try is judged from a new read after its back-off, as a
// waiter's take and a task's claim are (TestAWaiterUnderSteadyReleasesLands,
// TestAClaimUnderSteadyReleasesLandsBeforeASecondStart): sent from the
// answer before its back-off, freed would have moved since every time,
// and the charge would fail after maxEager tries ("kept changing": the
// gateway's STORE_UNAVAILABLE) with the bucket holding hundreds of tokens.
func TestAChargeUnderSteadyReleasesLands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b := &steadyChurn{memStore: newMemStore(), left: eagerRetries + 1, match: isChargeOf}
		rate := []Rate{{Name: "server", PerMinute: 6000}}
		heavy := Request{Key: "srv", Tool: "heavy", ToolCap: 1, MaxQueued: 4, Wait: 5 * time.Minute, Hold: 10 * time.Minute, Holder: "A", Rates: rate}
		h := acquire(t, New(b, rgTable, Options{InstanceID: "h"}), heavy)
		gotW := make(chan error, 1)
		go func() {
			ls, err := New(b, rgTable, Options{InstanceID: "w"}).Acquire(ctx, heavy)
			if err == nil {
				_, _ = ls.Finish(context.Background(), Unused)
			}
			gotW <- err
		}()
		for len(parseItem(rgItem(t, b.memStore, rgTable, "srv")).queue) == 0 {
			time.Sleep(time.Millisecond) // W's join on its way to the store
		}
		synctest.Wait() // W waits for heavy
		const churnFor = time.Minute
		var wg sync.WaitGroup
		wg.Go(func() { // others' releases
			for end := time.Now().Add(churnFor); time.Now().Before(end); {
				time.Sleep(20 * time.Millisecond)
				if err := b.move(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
		lb := New(b, rgTable, Options{InstanceID: "b"})
		begin := time.Now()
		ls, err := lb.Acquire(ctx, Request{Key: "srv", Tool: "light", Hold: time.Second, Holder: "B", Rates: rate})
		took := time.Since(begin)
		s := lb.Stats()
		b.mu.Lock()
		tries := len(b.takes)
		b.mu.Unlock()
		tokens := rate[0].Tokens(parseItem(rgItem(t, b.memStore, rgTable, "srv")).rates[RateAttr("server")], time.Now().UnixMilli())
		t.Logf("the charge: %v after %v; %d tries, %d writes, %d reads; the bucket holds %d tokens", err, took, tries, s.Writes, s.Reads, tokens)
		if err != nil {
			t.Errorf("a charge under others' releases every 20 ms, the bucket holding %d of %d tokens, failed after %d tries in %v: %v",
				tokens, rate[0].PerMinute, tries, took, err)
		} else {
			_, _ = ls.Finish(ctx, Success)
		}
		wg.Wait()
		_, _ = h.Finish(ctx, Success)
		if err := <-gotW; err != nil {
			t.Logf("W: %v", err)
		}
	})
}
