package lease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Invariant 4 (doc.go): a task withdrawn over an item whose freed was
// written by hand as another type is withdrawn. The withdrawal ADDs 1 to
// freed; over a string the store refuses it as invalid, no item comes
// back, and the ticket stayed until its deadline.
func TestAWithdrawalOverAFreedWrittenByHandTakesTheTicket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		l := New(db, "leases", Options{InstanceID: "i", OnTaskStart: st.hook})
		held := acquire(t, l, taskReq("p"))
		id := enqueue(t, l, taskReq("q"), "task-1")
		handEditIn(t, db, "leases", &types.AttributeValueMemberS{Value: "3"}, FreedAttr)
		if err := l.Withdraw(context.Background(), "srv", id, "task-1"); err != nil {
			t.Errorf("a withdrawal over freed written as a string: %v", err)
		}
		if s := Describe(rawItem(t, db, "srv"), time.Now(), 1, 0, nil); len(s.Queue) != 0 {
			t.Errorf("after the withdrawal: %d tickets; want none", len(s.Queue))
		}
		release(t, held)
	})
}
