package tasks

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Errors of the Store. Wrapped errors say more; test with errors.Is.
var (
	// ErrNotFound means no such task: never created, expired, or deleted.
	ErrNotFound = errors.New("tasks: no such task")
	// ErrConflict means another write came first: the caller reads the
	// record again and judges again.
	ErrConflict = errors.New("tasks: the task changed since it was read")
	// ErrTooLarge means a field or the whole record is over its bound
	// (a *SizeError says which); nothing was written.
	ErrTooLarge = errors.New("tasks: too large")
	// ErrFinished means an update would change the status, result or error
	// of a task that has ended.
	ErrFinished = errors.New("tasks: the task has ended")
)

// API is the part of the DynamoDB client the Store uses.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Store reads and writes task records in the tasks table. Its zero value
// but for DB and Table is ready; it is safe for concurrent use.
type Store struct {
	DB    API
	Table string
	// MaxResultBytes bounds each of a record's Result, Error and
	// InputRequests (MAX_TASK_RESULT_BYTES); 0 means
	// DefaultMaxResultBytes, and it is never more than
	// MaxResultBytesLimit.
	MaxResultBytes int
	// Now is the wall clock (time.Now if nil).
	Now func() time.Time
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Store) maxResult() int {
	switch {
	case s.MaxResultBytes <= 0:
		return DefaultMaxResultBytes
	case s.MaxResultBytes > MaxResultBytesLimit:
		return MaxResultBytesLimit
	}
	return s.MaxResultBytes
}

// Handles are idPrefix and idBytes random bytes in unpadded base64url.
const (
	idPrefix = "tsk_"
	idBytes  = 18 // 144 bits
)

var idLen = len(idPrefix) + base64.RawURLEncoding.EncodedLen(idBytes)

// NewID returns a new task handle: "tsk_" and 144 random bits from
// crypto/rand, URL-safe (unpadded base64url).
func NewID() (string, error) {
	b := make([]byte, idBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("tasks: new id: %w", err)
	}
	return idPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// ValidID reports whether id has the shape of a handle NewID makes. Get
// answers any other id ErrNotFound without asking the store.
func ValidID(id string) bool {
	rest, ok := strings.CutPrefix(id, idPrefix)
	if !ok || len(id) != idLen {
		return false
	}
	for _, c := range []byte(rest) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrID: &types.AttributeValueMemberS{Value: id}}
}

// ms is t to the millisecond, as the item keeps it, in UTC.
func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

// Create stores a new record. Once it is stored, r is as stored: Version
// 1, CreatedAt now when it was zero, UpdatedAt CreatedAt, times and
// durations to the millisecond. It never overwrites: a handle taken
// already is ErrConflict. A record that breaks a bound is refused
// (ErrTooLarge, ErrInvalid); then nothing is written and r is left as it
// was.
func (s *Store) Create(ctx context.Context, r *Record) error {
	if r == nil {
		return fmt.Errorf("%w: nil", ErrInvalid)
	}
	c := r.Clone()
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	c.CreatedAt = ms(c.CreatedAt)
	c.UpdatedAt = c.CreatedAt
	c.TTL = c.TTL.Truncate(time.Millisecond)
	c.PollInterval = c.PollInterval.Truncate(time.Millisecond)
	c.Version = 1
	item, err := s.encode(c)
	if err != nil {
		return err
	}
	if err := s.put(ctx, item, 0); err != nil {
		if errors.Is(err, ErrConflict) {
			return fmt.Errorf("%w: the handle is taken", ErrConflict)
		}
		return err
	}
	*r = *c
	return nil
}

// Get reads a record with one consistent GetItem. A task that was never
// created, has expired (CreatedAt+TTL is past, whether or not DynamoDB has
// deleted its item yet), or whose id is not a handle is ErrNotFound. An
// item that cannot be read as a task is an *ItemError.
func (s *Store) Get(ctx context.Context, id string) (*Record, error) {
	if !ValidID(id) {
		return nil, ErrNotFound
	}
	item, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	if item == nil {
		return nil, ErrNotFound
	}
	r, err := Parse(item)
	if err != nil {
		return nil, err
	}
	if r.Expired(s.now()) {
		return nil, ErrNotFound
	}
	return r, nil
}

// Update applies change to a copy of r and writes it, conditioned on
// r.Version; the record written has r.Version+1 and UpdatedAt now, and is
// returned. r itself is left as it was. An error from change is returned as
// it is, and nothing is written.
//
// ErrConflict: another write came first (the caller reads the record again
// and judges again). ErrNotFound: the task has expired or is gone.
// ErrTooLarge (a *SizeError): a field over its bound, such as a Result over
// MaxResultBytes, or a record over DynamoDB's item limit; the caller fails
// the task with a clear error instead (a record carries one outcome at a
// time: clear InputRequests when a round ends). ErrFinished: the task had
// ended and change altered its status, result or error. ErrInvalid: change
// broke a bound or altered the handle's binding (ID, Kind, ServerID, Tool,
// Owner, OwnerID, CreatedAt, TTL).
func (s *Store) Update(ctx context.Context, r *Record, change func(*Record) error) (*Record, error) {
	if r == nil || r.Version < 1 {
		return nil, fmt.Errorf("%w: update of a record that was not read", ErrInvalid)
	}
	now := s.now()
	if r.Expired(now) {
		return nil, ErrNotFound
	}
	next := r.Clone()
	if err := change(next); err != nil {
		return nil, err
	}
	if err := next.immutableChange(r); err != nil {
		return nil, err
	}
	if Terminal(r.Status) && (next.Status != r.Status || string(next.Result) != string(r.Result) || string(next.Error) != string(r.Error)) {
		return nil, fmt.Errorf("%w: it is %s", ErrFinished, r.Status)
	}
	next.Version = r.Version + 1
	next.UpdatedAt = ms(now)
	next.PollInterval = next.PollInterval.Truncate(time.Millisecond)
	item, err := s.encode(next)
	if err != nil {
		return nil, err
	}
	if err := s.put(ctx, item, r.Version); err != nil {
		return nil, err
	}
	return next, nil
}

// encode validates r and returns its item, refusing one over DynamoDB's
// item limit.
func (s *Store) encode(r *Record) (map[string]types.AttributeValue, error) {
	if err := r.validate(s.maxResult()); err != nil {
		return nil, err
	}
	item := Item(r)
	if n := itemSize(item); n > MaxItemBytes {
		return nil, &SizeError{Field: "item", Size: n, Limit: MaxItemBytes}
	}
	return item, nil
}

// itemSize is at least the item's size as DynamoDB counts it against its
// item limit: store.ItemSize, plus a byte for each number, which DynamoDB
// may take to align a number's digits in pairs (store.ItemSize counts the
// smaller, usual size, for capacity units).
func itemSize(item map[string]types.AttributeValue) int {
	n := store.ItemSize(item)
	for _, v := range item {
		if _, ok := v.(*types.AttributeValueMemberN); ok {
			n++
		}
	}
	return n
}

// put writes item: when over is 0, only if there is no item with its
// handle; otherwise only over the item of version over. A failed condition
// is ErrConflict, unless the item as it is now is the one being written:
// then an earlier attempt of this very write landed (the SDK retried after
// losing its answer), and it succeeded. An update whose item is gone is
// ErrNotFound.
func (s *Store) put(ctx context.Context, item map[string]types.AttributeValue, over int64) error {
	in := &dynamodb.PutItemInput{
		TableName:                           aws.String(s.Table),
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames:            map[string]string{"#id": AttrID},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if over > 0 {
		in.ConditionExpression = aws.String("#v = :v")
		in.ExpressionAttributeNames = map[string]string{"#v": attrVersion}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": number(over)}
	}
	_, err := s.DB.PutItem(ctx, in)
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() == "ValidationException" && strings.Contains(api.ErrorMessage(), "Item size") {
			return &SizeError{Field: "item", Size: itemSize(item), Limit: MaxItemBytes}
		}
		return fmt.Errorf("tasks: write: %w", err)
	}
	current := ccf.Item
	if len(current) == 0 {
		// DynamoDB returns no item when there is none; the local server
		// returns none ever: look.
		id := item[AttrID].(*types.AttributeValueMemberS).Value
		if current, err = s.read(ctx, id); err != nil {
			return err
		}
	}
	switch {
	case current != nil && sameItem(current, item):
		return nil
	case current == nil && over > 0:
		return ErrNotFound
	}
	return ErrConflict
}

// read is one consistent GetItem; nil when there is no item.
func (s *Store) read(ctx context.Context, id string) (map[string]types.AttributeValue, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.Table),
		Key:            key(id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("tasks: read: %w", err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}
