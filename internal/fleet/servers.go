package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/mcpgate/mcpgate/internal/registry"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Change is one attribute of a server item set to Value, or removed when
// Value is nil (mcpgate servers set's name=value).
type Change struct {
	Name  string
	Value types.AttributeValue
}

// ErrNotNameValue means an argument of servers set has no "=".
var ErrNotNameValue = errors.New("not name=value")

// ParseChange reads one name=value, typing the value by attribute: numbers
// for the N attributes, true or false for the BOOL ones, JSON for a value
// starting with '{' or '[', strings otherwise; an empty value removes the
// attribute.
func ParseChange(arg string) (Change, error) {
	name, value, ok := strings.Cut(arg, "=")
	if !ok || name == "" {
		return Change{}, fmt.Errorf("%q is %w", arg, ErrNotNameValue)
	}
	switch {
	case name == store.ServerIDAttr:
		return Change{}, errors.New("server_id: cannot be changed (put the definition under the new id, then delete this one)")
	case value == "":
		return Change{Name: name}, nil
	case value[0] == '{' || value[0] == '[':
		if !json.Valid([]byte(value)) {
			return Change{}, fmt.Errorf("%s: value starts with %q but is not valid JSON", name, value[:1])
		}
		item, err := registry.JSONToItem([]byte(`{"v":` + value + `}`))
		if err != nil {
			return Change{}, fmt.Errorf("%s: %w", name, err)
		}
		return Change{name, item["v"]}, nil
	case registry.AttributeType(name) == "N":
		// Normalised when it is a number; otherwise kept as given, so the
		// check of the whole item rejects it naming the attribute.
		if f, err := strconv.ParseFloat(value, 64); err == nil {
			value = strconv.FormatFloat(f, 'f', -1, 64)
		}
		return Change{name, &types.AttributeValueMemberN{Value: value}}, nil
	case registry.AttributeType(name) == "BOOL":
		b, err := strconv.ParseBool(value)
		if err != nil {
			return Change{}, fmt.Errorf("%s: %q is not true or false", name, value)
		}
		return Change{name, &types.AttributeValueMemberBOOL{Value: b}}, nil
	default:
		return Change{name, &types.AttributeValueMemberS{Value: value}}, nil
	}
}

// ParseChanges reads name=value arguments; a name given twice is an error.
func ParseChanges(args []string) ([]Change, error) {
	var out []Change
	for _, arg := range args {
		ch, err := ParseChange(arg)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(out, func(o Change) bool { return o.Name == ch.Name }) {
			return nil, fmt.Errorf("%s: given twice", ch.Name)
		}
		out = append(out, ch)
	}
	return out, nil
}

// Apply returns item with changes made, and the server the gateway would
// read from it; an error (naming the attribute) when it would refuse it.
func Apply(item Item, changes []Change) (Item, *registry.Server, error) {
	next := maps.Clone(item)
	for _, ch := range changes {
		if ch.Value == nil {
			delete(next, ch.Name)
		} else {
			next[ch.Name] = ch.Value
		}
	}
	s, err := registry.Parse(next)
	if err != nil {
		return nil, nil, err
	}
	return next, s, nil
}

// Errors of UpdateServer.
var (
	// ErrServerGone: the server was deleted since it was read.
	ErrServerGone = errors.New("the server was deleted meanwhile")
	// ErrServerChanged: another write changed the item since it was read.
	ErrServerChanged = errors.New("the server was changed meanwhile")
)

// UpdateServer makes changes to server id's item, read as read, after
// checking the result as the gateway would (Apply). The write is
// conditioned on the item being as read — every attribute it had with the
// value read, every other attribute of a server item absent — so an edit
// judged from one version never lands on another (no lost update).
func (s *Store) UpdateServer(ctx context.Context, id string, read Item, changes []Change) (*registry.Server, error) {
	if len(changes) == 0 {
		return nil, errors.New("no change")
	}
	_, srv, err := Apply(read, changes)
	if err != nil {
		return nil, err
	}
	in := updateInput(read, changes, true)
	in.TableName = aws.String(s.Tables.Servers)
	in.Key = ServerKey(id)
	_, err = s.DB.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		now, rerr := s.Server(ctx, id)
		switch {
		case rerr != nil:
			return nil, fmt.Errorf("%w (%w)", ErrServerChanged, rerr)
		case now == nil:
			return nil, ErrServerGone
		}
		return nil, ErrServerChanged
	}
	if err != nil {
		return nil, err
	}
	return srv, nil
}

// updateInput is the SET/REMOVE of changes, conditioned on the item being
// as read: whole, or (an item too large to compare whole in one
// expression) the attributes it changes.
func updateInput(read Item, changes []Change, whole bool) *dynamodb.UpdateItemInput {
	names := map[string]string{"#id": store.ServerIDAttr}
	values := map[string]types.AttributeValue{}
	var sets, removes []string
	for i, ch := range changes {
		n := fmt.Sprintf("#a%d", i)
		names[n] = ch.Name
		if ch.Value == nil {
			removes = append(removes, n)
			continue
		}
		v := fmt.Sprintf(":v%d", i)
		values[v] = ch.Value
		sets = append(sets, n+" = "+v)
	}
	var expr []string
	if len(sets) > 0 {
		expr = append(expr, "SET "+strings.Join(sets, ", "))
	}
	if len(removes) > 0 {
		expr = append(expr, "REMOVE "+strings.Join(removes, ", "))
	}
	ex := &exprNames{names: names, values: values}
	conds := []string{"attribute_exists(#id)"}
	var asRead []string
	for _, name := range slices.Sorted(maps.Keys(read)) {
		if name != store.ServerIDAttr {
			asRead = append(asRead, ex.equal(ex.name(name), read[name])...)
		}
	}
	absent := func(name string) {
		if _, ok := read[name]; !ok && name != store.ServerIDAttr {
			asRead = append(asRead, "attribute_not_exists("+ex.name(name)+")")
		}
	}
	if whole {
		for _, a := range registry.Attributes() {
			absent(a.Name)
		}
	}
	for _, ch := range changes {
		if !whole || registry.AttributeType(ch.Name) == "" {
			absent(ch.Name) // an x_ note is not among the attributes above
		}
	}
	if whole && len(strings.Join(asRead, " AND ")) > maxCondition {
		narrow := Item{}
		for _, ch := range changes {
			if v, ok := read[ch.Name]; ok {
				narrow[ch.Name] = v
			}
		}
		return updateInput(narrow, changes, false)
	}
	conds = append(conds, asRead...)
	in := &dynamodb.UpdateItemInput{
		UpdateExpression:         aws.String(strings.Join(expr, " ")),
		ConditionExpression:      aws.String(strings.Join(conds, " AND ")),
		ExpressionAttributeNames: names,
	}
	if len(values) > 0 {
		in.ExpressionAttributeValues = values
	}
	return in
}

// maxCondition bounds the condition that an item is as read: DynamoDB
// takes expressions of up to 4 KB.
const maxCondition = 3500

// exprNames hands out placeholders of one expression.
type exprNames struct {
	names  map[string]string
	values map[string]types.AttributeValue
	n      int
}

func (e *exprNames) name(n string) string {
	p := fmt.Sprintf("#r%d", e.n)
	e.n++
	e.names[p] = n
	return p
}

func (e *exprNames) value(v types.AttributeValue) string {
	p := fmt.Sprintf(":r%d", e.n)
	e.n++
	e.values[p] = v
	return p
}

// equal is the conditions that the attribute at path holds v: a scalar
// compared with =, a set by its size and members, a map or list by its
// size and each member (compared so on any DynamoDB-compatible store,
// some of which compare documents with = only by identity).
func (e *exprNames) equal(path string, v types.AttributeValue) []string {
	switch x := v.(type) {
	case *types.AttributeValueMemberM:
		out := []string{"size(" + path + ") = " + e.value(&types.AttributeValueMemberN{Value: strconv.Itoa(len(x.Value))})}
		for _, k := range slices.Sorted(maps.Keys(x.Value)) {
			out = append(out, e.equal(path+"."+e.name(k), x.Value[k])...)
		}
		return out
	case *types.AttributeValueMemberL:
		out := []string{"size(" + path + ") = " + e.value(&types.AttributeValueMemberN{Value: strconv.Itoa(len(x.Value))})}
		for i, m := range x.Value {
			out = append(out, e.equal(path+"["+strconv.Itoa(i)+"]", m)...)
		}
		return out
	case *types.AttributeValueMemberSS:
		return e.setEqual(path, len(x.Value), func(i int) types.AttributeValue { return &types.AttributeValueMemberS{Value: x.Value[i]} })
	case *types.AttributeValueMemberNS:
		return e.setEqual(path, len(x.Value), func(i int) types.AttributeValue { return &types.AttributeValueMemberN{Value: x.Value[i]} })
	case *types.AttributeValueMemberBS:
		return e.setEqual(path, len(x.Value), func(i int) types.AttributeValue { return &types.AttributeValueMemberB{Value: x.Value[i]} })
	case *types.AttributeValueMemberNULL:
		return []string{"attribute_type(" + path + ", " + e.value(&types.AttributeValueMemberS{Value: "NULL"}) + ")"}
	}
	return []string{path + " = " + e.value(v)}
}

func (e *exprNames) setEqual(path string, n int, member func(int) types.AttributeValue) []string {
	out := []string{"size(" + path + ") = " + e.value(&types.AttributeValueMemberN{Value: strconv.Itoa(n)})}
	for i := range n {
		out = append(out, "contains("+path+", "+e.value(member(i))+")")
	}
	return out
}
