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

// A charge is not conditioned on freed while the bucket holds a token for
// every waiter that needs one of its buckets and one more (Buckets in the
// package doc): whoever's turn a release makes, their tokens stay. W, of
// another principal, waits for tool heavy; the server's bucket is
// everyone's and holds 6000 tokens. Others' releases move freed every
// 20 ms (50 a second, as on a server of cap 50 with one-second calls),
// the store 5 ms away, and the charge's first eagerRetries+1 tries are
// refused as in TestAChargeOthersKeepWritingOverPauses. Conditioned on
// freed as seen, each later try, judged from a new read after its
// back-off, would still fail whenever a release landed between its read
// and its write (about half of them), and the charge would fail after
// maxEager tries ("kept changing": the gateway's STORE_UNAVAILABLE) now
// and then with the bucket holding thousands of tokens.
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
