package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/store"
)

// update is one UpdateItem being put together. Every name and value goes
// through a placeholder, so no caller-supplied text (lease id, tool name,
// holder) is ever spliced into an expression.
type update struct {
	names                      map[string]string
	byName                     map[string]string
	values                     map[string]types.AttributeValue
	sets, removes, adds, conds []string
}

func newUpdate() *update {
	return &update{names: map[string]string{}, byName: map[string]string{}, values: map[string]types.AttributeValue{}}
}

// path is the placeholder path of nested attribute names: "#n0.#n1".
func (u *update) path(parts ...string) string {
	out := make([]string, len(parts))
	for i, n := range parts {
		p, ok := u.byName[n]
		if !ok {
			p = "#n" + strconv.Itoa(len(u.names))
			u.names[p], u.byName[n] = n, p
		}
		out[i] = p
	}
	return strings.Join(out, ".")
}

// value returns a new placeholder for v.
func (u *update) value(v types.AttributeValue) string {
	p := ":v" + strconv.Itoa(len(u.values))
	u.values[p] = v
	return p
}

func (u *update) num(n int64) string { return u.value(number(n)) }

func number(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// purge removes up to maxPurge of the entries snap shows stale at now,
// other than those of id (which the same write handles), each only if it
// still holds the value seen, so a lease or ticket renewed meanwhile stays.
// It returns how many it removes per map.
func (u *update) purge(snap *snapshot, now int64, id string) map[string]int {
	purged := map[string]int{}
	if snap == nil {
		return purged
	}
	n := 0
	for _, st := range snap.stale(now) {
		if n == maxPurge {
			break
		}
		if st.id == id {
			continue
		}
		n++
		p := u.path(st.attr, st.id)
		u.removes = append(u.removes, p)
		if st.attr == TicketsAttr {
			p = u.path(st.attr, st.id, ticketExpiry)
		}
		if st.seen == nil {
			u.conds = append(u.conds, "attribute_not_exists("+p+")")
		} else {
			u.conds = append(u.conds, p+" = "+u.value(st.seen))
		}
		purged[st.attr]++
	}
	return purged
}

// take adds lease id, expiring at exp, to every slot, each only while it
// has room: fewer than Cap + extra[attr] entries before the write, extra
// being what the same write removes from it.
func (u *update) take(id string, exp int64, slots []Slot, extra map[string]int) {
	e := u.num(exp)
	for _, s := range slots {
		u.sets = append(u.sets, u.path(s.Attr, id)+" = "+e)
		u.conds = append(u.conds, "size("+u.path(s.Attr)+") < "+u.num(int64(s.Cap+extra[s.Attr])))
	}
}

// released names lease id as the one whose release this write is, so a
// retry of the write whose first attempt landed finds its own name there
// and knows. It returns the attribute's path.
func (u *update) released(id string) string {
	p := u.path(ReleasedAttr)
	u.sets = append(u.sets, p+" = "+u.value(&types.AttributeValueMemberS{Value: id}))
	return p
}

// closed conditions the write on breaker name being closed.
func (u *update) closed(name string) {
	bo := u.path((&Breaker{Name: name}).attrs().openUntil)
	u.conds = append(u.conds, "(attribute_not_exists("+bo+") OR "+bo+" = "+u.num(0)+")")
}

// ttl lets DynamoDB delete the item once nobody has used it for a day
// after exp.
func (u *update) ttl(exp int64) {
	u.sets = append(u.sets, u.path(store.TTLAttr)+" = "+u.num(exp/1000+int64(abandonedAfter.Seconds())))
}

// errCondition means a write's condition failed; the write returns the item
// as it is with it.
var errCondition = errors.New("lease: condition failed")

// write sends u to the item of key and returns the item as it is after the
// write or, with errCondition, as it was when the condition failed: from
// the failure itself where the store returns it, or else from one
// consistent read. Every item seen goes on the key's board.
func (l *Limiter) write(ctx context.Context, key string, u *update) (*snapshot, error) {
	expr := ""
	for _, part := range []struct {
		kw   string
		list []string
	}{{"SET", u.sets}, {"REMOVE", u.removes}, {"ADD", u.adds}} {
		if len(part.list) > 0 {
			expr += " " + part.kw + " " + strings.Join(part.list, ", ")
		}
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                           aws.String(l.table),
		Key:                                 itemKey(key),
		UpdateExpression:                    aws.String(strings.TrimSpace(expr)),
		ExpressionAttributeNames:            u.names,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if len(u.values) > 0 {
		in.ExpressionAttributeValues = u.values
	}
	if len(u.conds) > 0 {
		in.ConditionExpression = aws.String(strings.Join(u.conds, " AND "))
	}
	l.stats.writes.Add(1)
	sent := time.Now()
	out, err := l.db.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return l.board(key).see(parseItem(out.Attributes), sent), nil
	case !errors.As(err, &ccf):
		return nil, fmt.Errorf("lease: write %s: %w", key, err)
	}
	l.stats.failedWrites.Add(1)
	if len(ccf.Item) == 0 {
		// Not returned (a store that does not, or no item yet): read it.
		snap, err := l.read(ctx, key)
		return snap, cmp.Or(err, errCondition)
	}
	return l.board(key).see(parseItem(ccf.Item), sent), errCondition
}

// read fetches the item of key with a strongly consistent read.
func (l *Limiter) read(ctx context.Context, key string) (*snapshot, error) {
	l.stats.reads.Add(1)
	sent := time.Now()
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(l.table),
		Key:            itemKey(key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("lease: read %s: %w", key, err)
	}
	return l.board(key).see(parseItem(out.Item), sent), nil
}

// create makes the item of key and the maps it lacks among attrs, leaving
// existing ones alone.
func (l *Limiter) create(ctx context.Context, key string, attrs []string) error {
	u := newUpdate()
	empty := u.value(&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}})
	for _, attr := range attrs {
		n := u.path(attr)
		u.sets = append(u.sets, n+" = if_not_exists("+n+", "+empty+")")
	}
	_, err := l.write(ctx, key, u)
	return err
}

func itemKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{store.LimiterKeyAttr: &types.AttributeValueMemberS{Value: key}}
}
