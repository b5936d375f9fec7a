package lease

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// Breaker (doc.go, Gates): a principal's entry closing closes everyone's
// while another principal's is closed, judged from the gate as seen and
// pinned; DynamoDB allows expressions of 4 KB. 90 principals each fail
// one call of a breaker of threshold 2 within IdleGate, leaving 90
// entries; then one principal's second failure closes its entry. Pinning
// each entry whole (four clauses) made that write's condition 11.8 KB,
// refused by DynamoDB every time: the release failed and its
// principal's entry never closed. The gate is pinned by each entry's
// closing time, an open one's by its failures: 2.4 KB (150 entries fit,
// 160 do not).
func TestABreakerOfManyPrincipalsStaysWithinDynamoDBsExpressionLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &exprMeter{API: newMemStore()}
		ctx := context.Background()
		br := &Breaker{Name: "t", Threshold: 2, Recovery: time.Second}
		l := New(db, rgTable, Options{InstanceID: "g"})
		fail := func(who string) Transition {
			t.Helper()
			ls, err := l.Acquire(ctx, rgBreakerCall(br, who))
			if err != nil {
				t.Fatalf("%s's call: %v", who, err)
			}
			tr, err := ls.Finish(ctx, Failure)
			if err != nil {
				t.Fatalf("%s's failure: %v", who, err)
			}
			return tr
		}
		const principals = 90
		for i := range principals {
			fail(fmt.Sprintf("P%03d", i))
		}
		db.update.Store(0)
		db.cond.Store(0)
		tr := fail("P000")
		t.Logf("P000's second failure beside %d principals' entries: %v; longest update expression %d bytes, condition %d", principals, tr, db.update.Load(), db.cond.Load())
		if tr != OpenedForPrincipal {
			t.Errorf("P000's second failure (threshold 2): transition %v, want its own entry closed", tr)
		}
		if u, c := db.update.Load(), db.cond.Load(); u > 4096 || c > 4096 {
			t.Errorf("longest update expression %d bytes, condition %d; DynamoDB allows 4096", u, c)
		}
	})
}
