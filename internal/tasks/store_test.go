package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// clock is a wall clock the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

// start is the clock's first reading: a whole second, so times survive
// the item's milliseconds.
var start = time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)

// newStore is a Store on a fresh tasks table, with its clock at start.
func newStore(t *testing.T) (*Store, *clock, *storetest.Env) {
	t.Helper()
	env := storetest.NewEnv(t)
	c := &clock{now: start}
	return &Store{DB: env.Client, Table: env.Tables.Tasks, Now: c.Now}, c, env
}

// fresh is a new record as the engine would create it.
func fresh(t testing.TB) *Record {
	r := sample(t)
	r.Status, r.Version = StatusWorking, 0
	r.CreatedAt, r.UpdatedAt = time.Time{}, time.Time{}
	r.Result, r.InputRequests, r.RequestState, r.InputResponses = nil, nil, "", nil
	r.LeaseID, r.CancelRequested, r.Attempt, r.UpstreamID = "", false, 0, ""
	return r
}

func rawItem(t *testing.T, env *storetest.Env, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := env.Client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(env.Tables.Tasks), Key: key(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func TestStoreRoundTrip(t *testing.T) {
	s, _, env := newStore(t)
	ctx := context.Background()
	r := fresh(t)
	r.TTL = time.Hour + 1500*time.Microsecond // kept to the millisecond
	if err := s.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if r.Version != 1 || !r.CreatedAt.Equal(start) || !r.UpdatedAt.Equal(start) || r.TTL != time.Hour+time.Millisecond {
		t.Errorf("after Create: version %d, created %v, updated %v, ttl %v", r.Version, r.CreatedAt, r.UpdatedAt, r.TTL)
	}
	got, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("Get after Create:\n got  %+v\n want %+v", got, r)
	}

	// Every field, through an update.
	full := sample(t)
	next, err := s.Update(ctx, got, func(n *Record) error {
		id, created, ttl := n.ID, n.CreatedAt, n.TTL
		*n = *full.Clone()
		n.ID, n.CreatedAt, n.TTL = id, created, ttl
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if next.Version != 2 || !next.UpdatedAt.Equal(start) {
		t.Errorf("after Update: version %d, updated %v", next.Version, next.UpdatedAt)
	}
	got, err = s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, next) {
		t.Errorf("Get after Update:\n got  %+v\n want %+v", got, next)
	}
	item := rawItem(t, env, r.ID)
	if got, want := item[AttrTTL].(*types.AttributeValueMemberN).Value, fmt.Sprint(start.Add(2*time.Hour).Unix()+1); got != want {
		t.Errorf("ttl = %s, want %s (an hour after the task expires, rounded up)", got, want)
	}

	// Create never overwrites, even a record of the same handle.
	again := fresh(t)
	again.ID, again.Tool = r.ID, "other_tool"
	if err := s.Create(ctx, again); !errors.Is(err, ErrConflict) {
		t.Errorf("Create over an existing handle: %v, want ErrConflict", err)
	}
	if got, _ := s.Get(ctx, r.ID); got == nil || got.Tool != "slow_tool" || got.Version != 2 {
		t.Errorf("the existing record was touched: %+v", got)
	}
	// Unknown handles, and ids that cannot be handles.
	other, _ := NewID()
	for _, id := range []string{other, "", "tsk_x", strings.Repeat("x", 3000)} {
		if _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%.20q): %v, want ErrNotFound", id, err)
		}
	}
}

// countingAPI passes every call to the store, counting them.
type countingAPI struct {
	API
	gets, puts atomic.Int64
}

func (c *countingAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	return c.API.GetItem(ctx, in, o...)
}

func (c *countingAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.puts.Add(1)
	return c.API.PutItem(ctx, in, o...)
}

// TestStoreGetCost: a poll is one consistent read; an id that cannot be a
// handle costs none.
func TestStoreGetCost(t *testing.T) {
	s, _, _ := newStore(t)
	api := &countingAPI{API: s.DB}
	s.DB = api
	ctx := context.Background()
	r := fresh(t)
	if err := s.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if api.gets.Load() != 1 || api.puts.Load() != 1 {
		t.Errorf("Create + Get: %d reads, %d writes; want 1 and 1", api.gets.Load(), api.puts.Load())
	}
	for _, id := range []string{"", "tsk_short", r.ID + "x", strings.Repeat("a", 1<<20), "../" + r.ID[3:]} {
		if _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%.20q): %v", id, err)
		}
	}
	if api.gets.Load() != 1 {
		t.Errorf("malformed ids cost %d reads, want none", api.gets.Load()-1)
	}
}

func TestStoreUpdate(t *testing.T) {
	s, c, e := newStore(t)
	ctx := context.Background()
	r := fresh(t)
	if err := s.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	v1, _ := s.Get(ctx, r.ID)
	c.Set(start.Add(time.Second))
	v2, err := s.Update(ctx, v1, func(n *Record) error {
		n.Status, n.LeaseID, n.Attempt = StatusWorking, "lease.1", 1
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v1.Version != 1 || v1.LeaseID != "" {
		t.Errorf("Update changed the record it was given: %+v", v1)
	}
	if v2.Version != 2 || !v2.UpdatedAt.Equal(start.Add(time.Second)) {
		t.Errorf("updated: version %d, at %v", v2.Version, v2.UpdatedAt)
	}

	// A write from a stale read is refused, and changes nothing.
	if _, err := s.Update(ctx, v1, func(n *Record) error { n.Attempt = 9; return nil }); !errors.Is(err, ErrConflict) {
		t.Errorf("update of version 1 over version 2: %v, want ErrConflict", err)
	}
	if got, _ := s.Get(ctx, r.ID); !reflect.DeepEqual(got, v2) {
		t.Errorf("after a conflict the record is %+v, want %+v", got, v2)
	}

	// change's own error comes back as it is, and nothing is written.
	stop := errors.New("not now")
	if _, err := s.Update(ctx, v2, func(n *Record) error { n.Attempt = 5; return stop }); err != stop {
		t.Errorf("change's error: %v", err)
	}
	// The handle's binding cannot change.
	for field, change := range map[string]func(*Record){
		"task_id": func(n *Record) { n.ID, _ = NewID() }, "kind": func(n *Record) { n.Kind = KindRelay },
		"server_id": func(n *Record) { n.ServerID = "other" }, "tool": func(n *Record) { n.Tool = "other" },
		"owner": func(n *Record) { n.Owner = "key:other" }, "owner_id": func(n *Record) { n.OwnerID = "key:other" },
		"created_at": func(n *Record) { n.CreatedAt = n.CreatedAt.Add(time.Hour) }, "ttl_ms": func(n *Record) { n.TTL *= 2 },
	} {
		if _, err := s.Update(ctx, v2, func(n *Record) error { change(n); return nil }); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), field+": cannot change") {
			t.Errorf("changing %s: %v, want ErrInvalid naming it", field, err)
		}
	}
	if got, _ := s.Get(ctx, r.ID); !reflect.DeepEqual(got, v2) {
		t.Errorf("refused changes were written: %+v", got)
	}

	// An ended task keeps its status, result and error; the rest may change.
	done, err := s.Update(ctx, v2, func(n *Record) error {
		n.Status, n.Result = StatusCompleted, json.RawMessage(`{"content":[]}`)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*Record){
		"status": func(n *Record) { n.Status = StatusCancelled },
		"result": func(n *Record) { n.Result = json.RawMessage(`{"content":[{"type":"text","text":"late"}]}`) },
		"error":  func(n *Record) { n.Result, n.Error = nil, json.RawMessage(`{"code":-32603,"message":"x"}`) },
	} {
		if _, err := s.Update(ctx, done, func(n *Record) error { change(n); return nil }); !errors.Is(err, ErrFinished) {
			t.Errorf("changing an ended task's %s: %v, want ErrFinished", name, err)
		}
	}
	if _, err := s.Update(ctx, done, func(n *Record) error { n.LeaseID = ""; return nil }); err != nil {
		t.Errorf("clearing an ended task's lease: %v", err)
	}

	// An update of a task whose item is gone is ErrNotFound.
	if _, err := e.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: key(r.ID)}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(ctx, r.ID)
	if got != nil {
		t.Fatalf("deleted task still read: %+v", got)
	}
	if _, err := s.Update(ctx, done, func(n *Record) error { n.LeaseID = "x"; return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of a deleted task: %v, want ErrNotFound", err)
	}
}

// TestStoreExpiry: a task is gone at CreatedAt+TTL, though its item stays
// until DynamoDB's TTL deletes it.
func TestStoreExpiry(t *testing.T) {
	s, c, e := newStore(t)
	ctx := context.Background()
	r := fresh(t)
	r.TTL, r.PollInterval = time.Minute, time.Second
	if err := s.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	c.Set(start.Add(time.Minute - time.Millisecond))
	got, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatalf("a millisecond before expiry: %v", err)
	}
	c.Set(start.Add(time.Minute))
	if _, err := s.Get(ctx, r.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("at expiry: %v, want ErrNotFound", err)
	}
	if _, err := s.Update(ctx, got, func(n *Record) error { n.Attempt++; return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("update at expiry: %v, want ErrNotFound", err)
	}
	item := rawItem(t, e, r.ID)
	if item == nil {
		t.Fatal("the item is gone: expiry must not depend on DynamoDB's TTL")
	}
	if v := item[attrVersion].(*types.AttributeValueMemberN).Value; v != "1" {
		t.Errorf("an expired task was written: version %s", v)
	}
	if got, want := item[AttrTTL].(*types.AttributeValueMemberN).Value, fmt.Sprint(start.Add(time.Minute+ttlGrace).Unix()); got != want {
		t.Errorf("ttl = %s, want %s", got, want)
	}
}

// jsonString is valid JSON of exactly n bytes.
func jsonString(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("a", n-2) + `"`) }

// TestStoreSizeBounds: every outcome is bounded by MaxResultBytes, at the
// limit it is stored whole, one byte over it is refused with nothing
// written; a record over DynamoDB's item limit is refused before DynamoDB
// refuses it, and DynamoDB's own refusal is ErrTooLarge too.
func TestStoreSizeBounds(t *testing.T) {
	s, _, e := newStore(t)
	ctx := context.Background()
	for _, max := range []int{0, 4096} {
		s.MaxResultBytes = max
		limit := max
		if max == 0 {
			limit = DefaultMaxResultBytes
		}
		for _, f := range []struct {
			name string
			set  func(*Record, json.RawMessage)
		}{
			{"result", func(n *Record, v json.RawMessage) { n.Status, n.Result = StatusCompleted, v }},
			{"error", func(n *Record, v json.RawMessage) { n.Status, n.Error = StatusFailed, v }},
			{"input_requests", func(n *Record, v json.RawMessage) { n.Status, n.InputRequests = StatusInputRequired, v }},
		} {
			r := fresh(t)
			if err := s.Create(ctx, r); err != nil {
				t.Fatal(err)
			}
			_, err := s.Update(ctx, r, func(n *Record) error { f.set(n, jsonString(limit+1)); return nil })
			var se *SizeError
			if !errors.As(err, &se) || !errors.Is(err, ErrTooLarge) || se.Field != f.name || se.Size != limit+1 || se.Limit != limit ||
				!strings.Contains(err.Error(), "MAX_TASK_RESULT_BYTES") {
				t.Errorf("max %d: %s of %d bytes: %v, want a SizeError", max, f.name, limit+1, err)
			}
			if got, _ := s.Get(ctx, r.ID); got == nil || got.Version != 1 {
				t.Errorf("a refused %s was written: %+v", f.name, got)
			}
			next, err := s.Update(ctx, r, func(n *Record) error { f.set(n, jsonString(limit)); return nil })
			if err != nil {
				t.Fatalf("max %d: %s of exactly %d bytes: %v", max, f.name, limit, err)
			}
			if got, _ := s.Get(ctx, r.ID); !reflect.DeepEqual(got, next) {
				t.Errorf("%s at the limit did not come back whole", f.name)
			}
		}
	}

	// The network's fields, at Create.
	for _, f := range []struct {
		name string
		max  int
		set  func(*Record, int)
	}{
		{"params", MaxParamsBytes, func(r *Record, n int) { r.Params = jsonString(n) }},
		{"input_responses", MaxInputResponsesBytes, func(r *Record, n int) { r.InputResponses = jsonString(n) }},
		{"status_message", MaxStatusMessageBytes, func(r *Record, n int) { r.StatusMessage = strings.Repeat("m", n) }},
	} {
		over := fresh(t)
		f.set(over, f.max+1)
		if err := s.Create(ctx, over); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), f.name) {
			t.Errorf("%s of %d bytes: %v, want ErrTooLarge naming it", f.name, f.max+1, err)
		}
		if over.Version != 0 || !over.CreatedAt.IsZero() {
			t.Errorf("a refused Create changed the record: version %d, created %v", over.Version, over.CreatedAt)
		}
		if rawItem(t, e, over.ID) != nil {
			t.Errorf("a record with %s over its bound was written", f.name)
		}
		at := fresh(t)
		f.set(at, f.max)
		if err := s.Create(ctx, at); err != nil {
			t.Errorf("%s of exactly %d bytes: %v", f.name, f.max, err)
		}
	}

	// The whole item: at the largest MaxResultBytes, a result and params
	// filling the item to exactly DynamoDB's limit are stored (so itemSize
	// counts no less than the store does), one byte more is refused.
	s.MaxResultBytes = MaxResultBytesLimit
	r := fresh(t)
	r.Params = nil
	if err := s.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	fill := func(n *Record, extra int) {
		n.Status, n.Result, n.Params = StatusCompleted, jsonString(MaxResultBytesLimit), nil
		base := itemSize(Item(n))
		n.Params = jsonString(MaxItemBytes - base - len(attrParams) + extra)
	}
	_, err := s.Update(ctx, r, func(n *Record) error { fill(n, 1); return nil })
	var se *SizeError
	if !errors.As(err, &se) || se.Field != "item" || se.Size != MaxItemBytes+1 || se.Limit != MaxItemBytes {
		t.Errorf("an item one byte over DynamoDB's limit: %v, want a SizeError for the item", err)
	}
	next, err := s.Update(ctx, r, func(n *Record) error { fill(n, 0); return nil })
	if err != nil {
		t.Fatalf("an item of exactly DynamoDB's limit: %v", err)
	}
	if n := itemSize(Item(next)); n != MaxItemBytes {
		t.Fatalf("the item is %d bytes, want %d", n, MaxItemBytes)
	}
	if got, err := s.Get(ctx, r.ID); err != nil || !reflect.DeepEqual(got, next) {
		t.Errorf("the largest item did not come back whole: %v", err)
	}
	// DynamoDB's own refusal of an item over its limit is ErrTooLarge.
	item := Item(next)
	item[attrParams] = &types.AttributeValueMemberS{Value: string(jsonString(MaxParamsBytes))}
	if err := s.put(ctx, item, next.Version); !errors.Is(err, ErrTooLarge) {
		t.Errorf("an item the store refuses as too large: %v, want ErrTooLarge", err)
	}
}

// TestStoreStrictDecode: an item of the table that this package did not
// write is an *ItemError naming what is wrong, not a task.
func TestStoreStrictDecode(t *testing.T) {
	s, _, e := newStore(t)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		change func(map[string]types.AttributeValue)
		want   string
	}{
		"unknown attribute": {func(m map[string]types.AttributeValue) { m["x_note"] = &types.AttributeValueMemberS{Value: "hi"} }, "x_note: unknown attribute"},
		"wrong type":        {func(m map[string]types.AttributeValue) { m["attempt"] = &types.AttributeValueMemberS{Value: "2"} }, "attempt: must be N, is S"},
		"missing":           {func(m map[string]types.AttributeValue) { delete(m, "status") }, "status: missing"},
	} {
		r := fresh(t)
		r.CreatedAt, r.UpdatedAt, r.Version = start, start, 1
		item := Item(r)
		tc.change(item)
		if _, err := e.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: item}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, r.ID)
		var ie *ItemError
		if !errors.As(err, &ie) || got != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, %v; want an *ItemError saying %q", name, got, err, tc.want)
		}
	}
}

// TestStoreConcurrentUpdates: two writers updating one task at once never
// lose each other's change: every increment lands exactly once.
func TestStoreConcurrentUpdates(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	r := fresh(t)
	if err := s.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	const each = 25
	var conflicts atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; {
				cur, err := s.Get(ctx, r.ID)
				if err != nil {
					errs <- err
					return
				}
				_, err = s.Update(ctx, cur, func(n *Record) error {
					n.Attempt++
					n.LeaseID = fmt.Sprintf("w%d.%d", w, i)
					return nil
				})
				switch {
				case errors.Is(err, ErrConflict):
					conflicts.Add(1)
				case err != nil:
					errs <- err
					return
				default:
					i++
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempt != 2*each || got.Version != 2*each+1 {
		t.Errorf("after %d updates each: attempt %d, version %d; want %d and %d", each, got.Attempt, got.Version, 2*each, 2*each+1)
	}
	t.Logf("%d conflicts retried", conflicts.Load())
}

// twiceAPI sends every PutItem twice and answers the second's outcome, as
// an SDK retry does when the first attempt landed but its answer was lost.
type twiceAPI struct{ API }

func (d twiceAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, err := d.API.PutItem(ctx, in, o...); err != nil {
		return nil, err
	}
	return d.API.PutItem(ctx, in, o...)
}

// TestStoreRetriedWriteLanded: a write whose first attempt landed is a
// success, not a conflict, on a store that returns the item with a failed
// condition (DynamoDB) and on one that does not (dynalite alone, where the
// store reads it); a real conflict is still one.
func TestStoreRetriedWriteLanded(t *testing.T) {
	for _, ccf := range []bool{true, false} {
		t.Run(fmt.Sprintf("ccfItem=%v", ccf), func(t *testing.T) {
			if testing.Short() {
				t.Skip("skipping under -short: needs dynalite")
			}
			srv, err := storetest.StartWith(ccf)
			if errors.Is(err, storetest.ErrNotInstalled) {
				storetest.Shared(t) // skips, or fails in CI, as the package does
			}
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			db := storetest.Client(t, srv.Endpoint)
			ctx := context.Background()
			tables := store.Tables{Servers: "srv", Leases: "lse", Keys: "key", Tasks: "tsk"}
			if _, err := tables.CreateTables(ctx, db); err != nil {
				t.Fatal(err)
			}
			c := &clock{now: start}
			api := &countingAPI{API: twiceAPI{db}}
			s := &Store{DB: api, Table: tables.Tasks, Now: c.Now}

			r := fresh(t)
			if err := s.Create(ctx, r); err != nil {
				t.Fatalf("Create whose retry found its own write: %v", err)
			}
			next, err := s.Update(ctx, r, func(n *Record) error { n.Attempt = 1; return nil })
			if err != nil {
				t.Fatalf("Update whose retry found its own write: %v", err)
			}
			wantGets := int64(0)
			if !ccf {
				wantGets = 2 // one read per failed condition, to see the item
			}
			if api.gets.Load() != wantGets {
				t.Errorf("%d reads, want %d", api.gets.Load(), wantGets)
			}
			plain := &Store{DB: db, Table: tables.Tasks, Now: c.Now}
			if got, _ := plain.Get(ctx, r.ID); !reflect.DeepEqual(got, next) {
				t.Errorf("stored %+v, want %+v", got, next)
			}
			// Another writer's version is a conflict, retried or not.
			if _, err := plain.Update(ctx, next, func(n *Record) error { n.Attempt = 2; return nil }); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Update(ctx, next, func(n *Record) error { n.Attempt = 3; return nil }); !errors.Is(err, ErrConflict) {
				t.Errorf("stale update: %v, want ErrConflict", err)
			}
			if _, err := plain.Update(ctx, next, func(n *Record) error { n.Attempt = 3; return nil }); !errors.Is(err, ErrConflict) {
				t.Errorf("stale update: %v, want ErrConflict", err)
			}
			again := fresh(t)
			again.ID = r.ID
			if err := plain.Create(ctx, again); !errors.Is(err, ErrConflict) {
				t.Errorf("Create over a taken handle: %v, want ErrConflict", err)
			}
		})
	}
}
