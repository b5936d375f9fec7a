package catalog

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
)

// KeyPrefix starts the key of every catalog item in the leases table.
const KeyPrefix = "catalog/"

// IsKey reports whether a leases-table key is a catalog item's.
func IsKey(k string) bool { return strings.HasPrefix(k, KeyPrefix) }

// Limits and defaults.
const (
	// ChunkBytes is the most compressed data one chunk item holds.
	ChunkBytes = 300 << 10
	// MaxChunks bounds the chunks of one list.
	MaxChunks = 32
	// DefaultPoll is the first wait between head reads while another
	// instance refreshes; it doubles up to maxPoll.
	DefaultPoll = 50 * time.Millisecond
	maxPoll     = 400 * time.Millisecond
	// DefaultClaim is how long a refresh claim lasts when the context has
	// no deadline sooner.
	DefaultClaim = 30 * time.Second
	// keep is how long DynamoDB TTL keeps an item past its expiry.
	keep = 24 * time.Hour
)

// ScopePrivate is the cacheScope (SEP-2549) of a list that must never be
// shared across authorization contexts: the catalog never holds such a
// list, only the fact that the upstream's list is private.
const ScopePrivate = "private"

// ErrTooLarge means a list is too large to share; each instance then keeps
// its own.
var ErrTooLarge = errors.New("tool list too large for the catalog")

// API is the part of the DynamoDB client the catalog uses.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Options configures a Catalog. The zero value means defaults.
type Options struct {
	// Owner names this instance in refresh claims; "" means a random id.
	Owner string
	// Poll is the first wait between head reads while another instance
	// refreshes; zero means DefaultPoll.
	Poll time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Catalog reads and refreshes the fleet's tool lists.
type Catalog struct {
	db    API
	table string
	owner string
	poll  time.Duration
	now   func() time.Time
}

// New returns a Catalog keeping its items in table (the leases table).
func New(db API, table string, opts Options) *Catalog {
	c := &Catalog{db: db, table: table, owner: opts.Owner, poll: opts.Poll, now: opts.Now}
	if c.owner == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		c.owner = hex.EncodeToString(b)
	}
	if c.poll <= 0 {
		c.poll = DefaultPoll
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// Entry is one server's shared list.
type Entry struct {
	// Version identifies the list's content.
	Version string
	// Data is the list as fetched (JSON); nil when Load was told the
	// caller already holds Version, and when Scope is ScopePrivate.
	Data []byte
	// Scope is the upstream's cacheScope.
	Scope string
	// Expires is when the list must be fetched again.
	Expires time.Time
	// Stale: another instance is refreshing it; use it briefly.
	Stale bool
}

// Fetched is what a refresh got from the upstream. With Scope
// ScopePrivate, Data is never written: only that the list is private.
type Fetched struct {
	Data  []byte
	Scope string
	TTL   time.Duration
}

// head is what the head item says.
type head struct {
	endpoint, version, scope, claim string
	chunks                          int
	expires, claimUntil             int64
	gen, dataGen                    int64
}

func (h head) fresh(endpoint string, now time.Time) bool {
	return h.version != "" && h.endpoint == endpoint && h.dataGen == h.gen && now.UnixMilli() < h.expires
}

// Load returns the list of server id at endpoint: the shared one when
// fresh, else fetched by this instance if it wins the refresh, else the
// stale one while another instance refreshes, else (none for this
// endpoint) the new one once written. have is the version the caller
// holds: when it is current, Data is left nil.
func (c *Catalog) Load(ctx context.Context, id, endpoint, have string, fetch func(context.Context) (Fetched, error)) (Entry, error) {
	wait := c.poll
	// broken is a version whose chunks were found missing twice: it is
	// refreshed as if stale rather than read again.
	var broken, gone string
	for {
		h, err := c.readHead(ctx, id)
		if err != nil {
			return Entry{}, err
		}
		now := c.now()
		readable := h.version != "" && h.version != broken
		if readable && h.fresh(endpoint, now) {
			e, err := c.entry(ctx, id, h, have)
			if errors.Is(err, errGone) {
				// Rewritten since the head was read, or lost.
				if gone == h.version {
					broken = h.version
				}
				gone = h.version
				continue
			}
			return e, err
		}
		if h.claim != "" && now.UnixMilli() < h.claimUntil {
			if readable && h.endpoint == endpoint {
				e, err := c.entry(ctx, id, h, have)
				if err == nil {
					e.Stale = true
					return e, nil
				}
				if !errors.Is(err, errGone) {
					return Entry{}, err
				}
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return Entry{}, fmt.Errorf("wait for the catalog of %s: %w", id, ctx.Err())
			case <-t.C:
			}
			wait = min(2*wait, maxPoll)
			continue
		}
		gen, won, err := c.claim(ctx, id, h, now)
		if err != nil {
			return Entry{}, err
		}
		if !won {
			continue
		}
		return c.refresh(ctx, id, endpoint, gen, fetch)
	}
}

// refresh lists the upstream as the elected instance and shares the list.
func (c *Catalog) refresh(ctx context.Context, id, endpoint string, gen int64, fetch func(context.Context) (Fetched, error)) (Entry, error) {
	f, err := fetch(ctx)
	if err != nil {
		c.unclaim(id)
		return Entry{}, err
	}
	now := c.now()
	e := Entry{Version: newVersion(), Data: f.Data, Scope: f.Scope, Expires: now.Add(f.TTL)}
	if e.Scope == ScopePrivate {
		e.Data = nil
	}
	if err := c.write(ctx, id, endpoint, gen, e); err != nil {
		// The list is good; only sharing it failed.
		c.unclaim(id)
		return e, fmt.Errorf("share the tool list of %s: %w", id, err)
	}
	return e, nil
}

// Invalidate makes every copy of server id's list stale. A server with no
// list in the catalog is left alone.
func (c *Catalog) Invalidate(ctx context.Context, id string) error {
	_, err := c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.table),
		Key:                       key(headKey(id)),
		UpdateExpression:          aws.String("ADD gen :one"),
		ConditionExpression:       aws.String("attribute_exists(" + store.LimiterKeyAttr + ")"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1)},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("invalidate the catalog of %s: %w", id, err)
	}
	return nil
}

var errGone = errors.New("catalog version gone")

func headKey(id string) string { return KeyPrefix + id }

func chunkKey(id, version string, n int) string {
	return KeyPrefix + id + "/" + version + "/" + strconv.Itoa(n)
}

func key(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: k}}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func newVersion() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *Catalog) readHead(ctx context.Context, id string) (head, error) {
	out, err := c.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(c.table), Key: key(headKey(id)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return head{}, fmt.Errorf("read the catalog of %s: %w", id, err)
	}
	return parseHead(out.Item), nil
}

func parseHead(item map[string]types.AttributeValue) head {
	s := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	n := func(name string) int64 {
		if v, ok := item[name].(*types.AttributeValueMemberN); ok {
			i, _ := strconv.ParseInt(v.Value, 10, 64)
			return i
		}
		return 0
	}
	return head{
		endpoint: s("list_endpoint"), version: s("list_version"), scope: s("list_scope"), claim: s("claim_by"),
		chunks: int(n("list_chunks")), expires: n("list_expires"), claimUntil: n("claim_until"),
		gen: n("gen"), dataGen: n("list_gen"),
	}
}

// entry reads h's chunks unless the caller holds h's version.
func (c *Catalog) entry(ctx context.Context, id string, h head, have string) (Entry, error) {
	e := Entry{Version: h.version, Scope: h.scope, Expires: time.UnixMilli(h.expires)}
	if h.version == have || h.scope == ScopePrivate {
		// A private list's chunks are never read, even if an older
		// gateway wrote some.
		return e, nil
	}
	if h.chunks < 1 || h.chunks > MaxChunks {
		return Entry{}, fmt.Errorf("catalog of %s: %d chunks", id, h.chunks)
	}
	var packed []byte
	for n := range h.chunks {
		out, err := c.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(c.table), Key: key(chunkKey(id, h.version, n))})
		if err != nil {
			return Entry{}, fmt.Errorf("read the catalog of %s: %w", id, err)
		}
		b, ok := out.Item["list_data"].(*types.AttributeValueMemberB)
		if !ok {
			return Entry{}, errGone
		}
		packed = append(packed, b.Value...)
	}
	data, err := unpack(packed)
	if err != nil {
		return Entry{}, fmt.Errorf("catalog of %s: %w", id, err)
	}
	e.Data = data
	return e, nil
}

// claim elects this instance to refresh, if no claim is live and no list
// was written since h was read. It returns gen as of the claim.
func (c *Catalog) claim(ctx context.Context, id string, h head, now time.Time) (int64, bool, error) {
	until := now.Add(DefaultClaim)
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		until = dl
	}
	cond := "(attribute_not_exists(claim_until) OR claim_until < :now) AND "
	vals := map[string]types.AttributeValue{
		":me": str(c.owner), ":until": num(until.UnixMilli()), ":now": num(now.UnixMilli()),
		":ttl": num(now.Add(keep).Unix()),
	}
	if h.version == "" {
		cond += "attribute_not_exists(list_version)"
	} else {
		cond += "list_version = :seen"
		vals[":seen"] = str(h.version)
	}
	out, err := c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.table),
		Key:                       key(headKey(id)),
		UpdateExpression:          aws.String("SET claim_by = :me, claim_until = :until, #ttl = :ttl"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#ttl": store.TTLAttr},
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueAllNew,
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("claim the catalog refresh of %s: %w", id, err)
	}
	return parseHead(out.Attributes).gen, true, nil
}

// unclaim gives a claim up, so that another instance need not wait for it
// to lapse.
func (c *Catalog) unclaim(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.table),
		Key:                       key(headKey(id)),
		UpdateExpression:          aws.String("REMOVE claim_by, claim_until"),
		ConditionExpression:       aws.String("claim_by = :me"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": str(c.owner)},
	})
}

// write stores e's chunks, then the head that points at them. A private
// list has no chunks: its head says only that it is private.
func (c *Catalog) write(ctx context.Context, id, endpoint string, gen int64, e Entry) error {
	chunks := 0
	var packed []byte
	if e.Scope != ScopePrivate {
		var err error
		if packed, err = pack(e.Data); err != nil {
			return err
		}
		chunks = (len(packed) + ChunkBytes - 1) / ChunkBytes
		if chunks > MaxChunks {
			return fmt.Errorf("%w: %d bytes compressed", ErrTooLarge, len(packed))
		}
		chunks = max(chunks, 1)
	}
	ttl := num(e.Expires.Add(keep).Unix())
	for n := range chunks {
		part := packed[n*ChunkBytes : min((n+1)*ChunkBytes, len(packed))]
		_, err := c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(c.table),
			Key:                       key(chunkKey(id, e.Version, n)),
			UpdateExpression:          aws.String("SET list_data = :d, #ttl = :ttl"),
			ExpressionAttributeNames:  map[string]string{"#ttl": store.TTLAttr},
			ExpressionAttributeValues: map[string]types.AttributeValue{":d": &types.AttributeValueMemberB{Value: part}, ":ttl": ttl},
		})
		if err != nil {
			return err
		}
	}
	_, err := c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(c.table),
		Key:       key(headKey(id)),
		UpdateExpression: aws.String("SET list_endpoint = :ep, list_version = :v, list_chunks = :n, list_scope = :s, " +
			"list_expires = :e, list_gen = :g, #ttl = :ttl REMOVE claim_by, claim_until"),
		ConditionExpression:      aws.String("claim_by = :me"),
		ExpressionAttributeNames: map[string]string{"#ttl": store.TTLAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":ep": str(endpoint), ":v": str(e.Version), ":n": num(int64(chunks)), ":s": str(e.Scope),
			":e": num(e.Expires.UnixMilli()), ":g": num(gen), ":ttl": ttl, ":me": str(c.owner),
		},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		// The claim lapsed and another instance took over: its list wins.
		return nil
	}
	return err
}

func pack(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// maxUnpacked bounds a list read back from the table.
const maxUnpacked = 64 << 20

func unpack(packed []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(packed))
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxUnpacked+1))
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	if len(data) > maxUnpacked {
		return nil, errors.New("decompress: list too large")
	}
	return data, nil
}
