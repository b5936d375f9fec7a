package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
)

// qcMeter counts what a table of lease items would be billed: a consistent
// read ceil(size / 4 KB) read units, a write ceil(size / 1 KB) write units
// for the item as the store returned it (the new item, or the old one when
// the condition failed), and the largest item it saw.
type qcMeter struct {
	API
	reads, readUnits, writes, writeUnits, largest atomic.Int64
}

func (m *qcMeter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := m.API.UpdateItem(ctx, in, opts...)
	var item map[string]types.AttributeValue
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		item = out.Attributes
	case errors.As(err, &ccf):
		item = ccf.Item
	}
	m.writes.Add(1)
	m.writeUnits.Add(m.units(item, 1024))
	return out, err
}

func (m *qcMeter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := m.API.GetItem(ctx, in, opts...)
	m.reads.Add(1)
	if err == nil {
		m.readUnits.Add(m.units(out.Item, 4096))
	}
	return out, err
}

func (m *qcMeter) units(item map[string]types.AttributeValue, per int) int64 {
	size := int64(store.ItemSize(item))
	for {
		old := m.largest.Load()
		if size <= old || m.largest.CompareAndSwap(old, size) {
			break
		}
	}
	return max((size+int64(per)-1)/int64(per), 1)
}

// qcFigures is what a queue of a given length cost per waiter-second.
type qcFigures struct {
	waiters                              int
	reads, readUnits, writes, writeUnits float64 // per waiter-second
	calls                                float64 // per second
	itemKB, largestKB                    float64
}

// queueCost runs n callers in closed loops on one item (cap 2, calls of
// 500 ms) in fake time, each caller its own principal and its own process,
// as on Lambda, where an instance serves one request at a time: each caller
// takes its place, holds it 500 ms, gives it back and queues again, so
// n − 2 wait at every moment. After a minute for the waiters' look periods to settle, it
// meters a minute.
func queueCost(t *testing.T, n int) qcFigures {
	var f qcFigures
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		m := &qcMeter{API: db}
		ctx, cancel := context.WithCancel(context.Background())
		const (
			capacity  = 2
			call      = 500 * time.Millisecond
			warmUp    = time.Minute
			window    = time.Minute
			maxQueued = 1000
		)
		var calls atomic.Int64
		var wg sync.WaitGroup
		for i := range n {
			// 64-bit principal labels, as the gateway writes them.
			r := Request{Key: "srv", Cap: capacity, MaxQueued: maxQueued, Hold: time.Minute, Wait: 10 * time.Minute,
				Holder: fmt.Sprintf("%016x", uint64(i+1)*0x9e3779b97f4a7c15)}
			l := New(m, rgTable, Options{InstanceID: fmt.Sprintf("proc%d", i)})
			wg.Go(func() {
				for ctx.Err() == nil {
					ls, err := l.Acquire(ctx, r)
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("caller %d: %v", i, err)
						}
						return
					}
					calls.Add(1)
					time.Sleep(call)
					if _, err := ls.Finish(context.Background(), Success); err != nil {
						t.Errorf("caller %d: finish: %v", i, err)
						return
					}
				}
			})
		}
		time.Sleep(warmUp)
		r0, ru0, w0, wu0, c0 := m.reads.Load(), m.readUnits.Load(), m.writes.Load(), m.writeUnits.Load(), calls.Load()
		m.largest.Store(0)
		time.Sleep(window)
		ws := float64(n) * window.Seconds()
		f = qcFigures{
			waiters:    n,
			reads:      float64(m.reads.Load()-r0) / ws,
			readUnits:  float64(m.readUnits.Load()-ru0) / ws,
			writes:     float64(m.writes.Load()-w0) / ws,
			writeUnits: float64(m.writeUnits.Load()-wu0) / ws,
			calls:      float64(calls.Load()-c0) / window.Seconds(),
			itemKB:     float64(store.ItemSize(rgItem(t, db, rgTable, "srv"))) / 1024,
			largestKB:  float64(m.largest.Load()) / 1024,
		}
		cancel()
		wg.Wait()
	})
	return f
}

// Invariant 14 (doc.go) and "A long queue" (docs/performance.md): what
// waiting costs grows with the queue's length, not faster. The item's size
// per waiter stays the same, reads per waiter-second fall with the queue's
// length (far waiters look once per period of their rank, up to
// MaxLookFar), and the cap stays busy (2 calls of 500 ms: 4 a second). It
// logs, per waiter-second, the reads, read units, writes and write units
// an item of that queue would be billed. The 1,000-caller queue (an item
// of about 90 KB) runs under MCPGATE_BENCH only (`make bench`); `make test`
// meters 10 and 100.
func TestQueueCostGrowsLinearly(t *testing.T) {
	lengths := []int{10, 100}
	if os.Getenv("MCPGATE_BENCH") != "" {
		if only := os.Getenv("BENCH_ONLY"); strings.TrimSpace(only) != "" && !slices.ContainsFunc(strings.Split(only, ","), func(s string) bool { return strings.TrimSpace(s) == "queuecost" }) {
			t.Skip("BENCH_ONLY names other scenarios")
		}
		lengths = append(lengths, 1000)
	}
	var got []qcFigures
	for _, n := range lengths {
		f := queueCost(t, n)
		t.Logf("%5d waiters: per waiter-second %.3f reads, %.3f read units, %.3f writes, %.3f write units; %.2f calls/s; item %.1f KB (largest %.1f KB)",
			n, f.reads, f.readUnits, f.writes, f.writeUnits, f.calls, f.itemKB, f.largestKB)
		got = append(got, f)
	}
	for _, f := range got {
		// Two places, calls of 500 ms: 4 calls a second when every hand-over
		// is prompt; a place idle for a look period at each hand-over would
		// show as a fraction of that.
		if f.calls < 3 {
			t.Errorf("%d waiters: %.2f calls a second on cap 2 with 500 ms calls; want about 4: places left idle", f.waiters, f.calls)
		}
	}
	for _, f := range got[1:] {
		short := got[1]
		if f.waiters == short.waiters {
			short = got[0]
		}
		perWaiter := func(g qcFigures) float64 { return g.largestKB / float64(g.waiters) }
		if perWaiter(f) > 1.25*perWaiter(short) {
			t.Errorf("item size per waiter: %.3f KB at %d waiters against %.3f KB at %d; want it linear",
				perWaiter(f), f.waiters, perWaiter(short), short.waiters)
		}
		// Far waiters look once per period of their rank, up to MaxLookFar,
		// and the front's look when their places should free: a queue ten
		// times longer reads at most five times as often (every waiter
		// looking each second, or every 2 s, would read ten times as often).
		if f.waiters >= 10*short.waiters && f.reads > short.reads/2 {
			t.Errorf("reads per waiter-second: %.3f at %d waiters against %.3f at %d; want at most half: far waiters look by their rank",
				f.reads, f.waiters, short.reads, short.waiters)
		}
	}
}
