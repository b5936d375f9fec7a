package lease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Invariants 7 and 14: a task's join while the only other task's claim
// has less than Margin left (its worker gone, the lease not yet lapsed)
// is either let in or refused as the queue full, in one write; it does
// not send the same failing join again and again and give up with an
// error that is no FullError.
func TestAJoinBesideAClaimInItsLastMarginIsAnsweredAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := newMemStore()
		var st starts
		req := func(who string) Request {
			r := taskReq(who)
			r.MaxQueued = 1
			return r
		}
		l := New(db, "leases", Options{InstanceID: "a", OnTaskStart: st.hook})
		id := enqueue(t, l, req("q"), "task-q")
		w := New(db, "leases", Options{InstanceID: "w"})
		if _, err := w.Claim(context.Background(), req("q"), id, st.list()[0].Mark); err != nil {
			t.Fatal(err) // its worker ends here: never released
		}
		// The claim lapses Hold + Margin after it was taken: 1 s is left.
		time.Sleep(10*time.Second + DefaultMargin - time.Second)
		wc := &writeCounter{API: db}
		r := New(wc, "leases", Options{InstanceID: "r"})
		_, err := r.Enqueue(context.Background(), req("r"), "", "task-r", time.Now().Add(time.Hour))
		var fe *FullError
		if err != nil && !(errors.As(err, &fe) && fe.Reason == QueueFull) {
			t.Errorf("a join beside a claim with 1 s of its lease left, MaxQueued 1: %v after %d writes; want it let in or the queue full", err, wc.writes())
		}
		if n := wc.writes(); n > 1 {
			t.Errorf("a join beside a claim with 1 s of its lease left sent %d writes, none landing, without a pause; want 1", n)
		}
	})
}

func (w *writeCounter) writes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sent)
}
