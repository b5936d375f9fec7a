package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// memStore is an in-memory table of lease items that evaluates the subset
// of DynamoDB's update and condition expressions the limiter writes: SET
// (with +, -, if_not_exists), REMOVE, ADD (numbers and string sets),
// DELETE (string sets); conditions with AND, OR, NOT, parentheses,
// comparisons, attribute_exists, attribute_not_exists, attribute_type, contains and size. It lets the
// fault simulation run thousands of schedules in fake time; TestMemStoreMatchesDynalite
// replays what the simulation sent against dynalite and requires the same
// answers, so it stands in for the real store only where it was shown to
// behave as the real store does.
type memStore struct {
	mu    sync.Mutex
	items map[string]map[string]types.AttributeValue
}

func newMemStore() *memStore { return &memStore{items: map[string]map[string]types.AttributeValue{}} }

var _ API = (*memStore)(nil)

func memKey(key map[string]types.AttributeValue) string {
	if s, ok := key[store.LimiterKeyAttr].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// errValidation marks a request DynamoDB would refuse as invalid; it is
// the API error the SDK returns for one.
type errValidation struct{ msg string }

func (e *errValidation) Error() string                 { return "ValidationException: " + e.msg }
func (e *errValidation) ErrorCode() string             { return "ValidationException" }
func (e *errValidation) ErrorMessage() string          { return e.msg }
func (e *errValidation) ErrorFault() smithy.ErrorFault { return smithy.FaultClient }

func (m *memStore) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.items[memKey(in.Key)]
	if it == nil {
		return &dynamodb.GetItemOutput{}, nil
	}
	return &dynamodb.GetItemOutput{Item: cloneItem(it)}, nil
}

// unusedPlaceholders refuses, as DynamoDB does, a name or value
// placeholder that neither expression uses.
func unusedPlaceholders(in *dynamodb.UpdateItemInput) error {
	used := map[string]bool{}
	for _, t := range tokenize(aws.ToString(in.UpdateExpression) + " " + aws.ToString(in.ConditionExpression)) {
		for part := range strings.SplitSeq(t, ".") {
			used[part] = true
		}
	}
	for p := range in.ExpressionAttributeNames {
		if !used[p] {
			return &errValidation{"Value provided in ExpressionAttributeNames unused in expressions: keys: {" + p + "}"}
		}
	}
	for p := range in.ExpressionAttributeValues {
		if !used[p] {
			return &errValidation{"Value provided in ExpressionAttributeValues unused in expressions: keys: {" + p + "}"}
		}
	}
	return nil
}

func (m *memStore) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := memKey(in.Key)
	old := m.items[k]
	ev := &evaluator{names: in.ExpressionAttributeNames, values: in.ExpressionAttributeValues}
	if err := unusedPlaceholders(in); err != nil {
		return nil, err
	}
	// DynamoDB refuses an expression string of more than 4 KB.
	for _, e := range []*string{in.UpdateExpression, in.ConditionExpression} {
		if n := len(aws.ToString(e)); n > 4096 {
			return nil, &errValidation{fmt.Sprintf("Invalid expression: expression size has exceeded the maximum allowed size (%d bytes)", n)}
		}
	}
	if c := aws.ToString(in.ConditionExpression); c != "" {
		ok, err := ev.condition(c, old)
		if err != nil {
			return nil, err
		}
		if !ok {
			ccf := &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
			if old != nil && in.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld {
				ccf.Item = cloneItem(old)
			}
			return nil, ccf
		}
	}
	next := cloneItem(old)
	if next == nil {
		next = map[string]types.AttributeValue{}
		maps.Copy(next, in.Key)
	}
	if err := ev.update(aws.ToString(in.UpdateExpression), old, next); err != nil {
		return nil, err
	}
	m.items[k] = next
	out := &dynamodb.UpdateItemOutput{}
	if in.ReturnValues == types.ReturnValueAllNew {
		out.Attributes = cloneItem(next)
	}
	return out, nil
}

func cloneItem(it map[string]types.AttributeValue) map[string]types.AttributeValue {
	if it == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(it))
	for k, v := range it {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v types.AttributeValue) types.AttributeValue {
	switch x := v.(type) {
	case *types.AttributeValueMemberM:
		return &types.AttributeValueMemberM{Value: cloneItem(x.Value)}
	case *types.AttributeValueMemberSS:
		return &types.AttributeValueMemberSS{Value: slices.Clone(x.Value)}
	case *types.AttributeValueMemberN:
		return &types.AttributeValueMemberN{Value: x.Value}
	case *types.AttributeValueMemberS:
		return &types.AttributeValueMemberS{Value: x.Value}
	case *types.AttributeValueMemberBOOL:
		return &types.AttributeValueMemberBOOL{Value: x.Value}
	}
	return v
}

// evaluator evaluates one request's expressions.
type evaluator struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

// tokens splits an expression into names, placeholders, numbers,
// punctuation and operators.
func tokenize(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		c := rune(s[i])
		switch {
		case unicode.IsSpace(c):
			i++
		case strings.ContainsRune("(),.+-[]", c):
			out = append(out, string(c))
			i++
		case c == '<' || c == '>' || c == '=':
			if i+1 < len(s) && (s[i+1] == '=' || (c == '<' && s[i+1] == '>')) {
				out = append(out, s[i:i+2])
				i += 2
			} else {
				out = append(out, string(c))
				i++
			}
		default:
			j := i
			for j < len(s) && !unicode.IsSpace(rune(s[j])) && !strings.ContainsRune("(),.+-[]<>=", rune(s[j])) {
				j++
			}
			out = append(out, s[i:j])
			i = j
		}
	}
	return out
}

type parser struct {
	toks []string
	pos  int
	ev   *evaluator
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *parser) next() string {
	t := p.peek()
	p.pos++
	return t
}

func (p *parser) expect(t string) error {
	if got := p.next(); !strings.EqualFold(got, t) {
		return &errValidation{fmt.Sprintf("syntax: want %q, got %q", t, got)}
	}
	return nil
}

// path parses a document path into attribute names.
func (p *parser) path() ([]string, error) {
	var parts []string
	for {
		t := p.next()
		name := t
		if strings.HasPrefix(t, "#") {
			n, ok := p.ev.names[t]
			if !ok {
				return nil, &errValidation{"unknown name placeholder " + t}
			}
			name = n
		}
		if name == "" {
			return nil, &errValidation{"empty path element"}
		}
		parts = append(parts, name)
		if p.peek() != "." {
			return parts, nil
		}
		p.next()
	}
}

func lookup(item map[string]types.AttributeValue, path []string) types.AttributeValue {
	var cur types.AttributeValue = &types.AttributeValueMemberM{Value: item}
	for _, part := range path {
		m, ok := cur.(*types.AttributeValueMemberM)
		if !ok || m.Value == nil {
			return nil
		}
		cur, ok = m.Value[part]
		if !ok {
			return nil
		}
	}
	return cur
}

// operand is a value, or nil for an attribute that does not exist.
func (p *parser) operand(item map[string]types.AttributeValue) (types.AttributeValue, error) {
	t := p.peek()
	switch {
	case strings.HasPrefix(t, ":"):
		p.next()
		v, ok := p.ev.values[t]
		if !ok {
			return nil, &errValidation{"unknown value placeholder " + t}
		}
		return v, nil
	case t == "size":
		p.next()
		if err := p.expect("("); err != nil {
			return nil, err
		}
		path, err := p.path()
		if err != nil {
			return nil, err
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		switch v := lookup(item, path).(type) {
		case *types.AttributeValueMemberM:
			return num(int64(len(v.Value))), nil
		case *types.AttributeValueMemberSS:
			return num(int64(len(v.Value))), nil
		case *types.AttributeValueMemberS:
			return num(int64(len(v.Value))), nil
		}
		return nil, nil
	case t == "if_not_exists":
		p.next()
		if err := p.expect("("); err != nil {
			return nil, err
		}
		path, err := p.path()
		if err != nil {
			return nil, err
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
		def, err := p.operand(item)
		if err != nil {
			return nil, err
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		if v := lookup(item, path); v != nil {
			return v, nil
		}
		return def, nil
	}
	path, err := p.path()
	if err != nil {
		return nil, err
	}
	return lookup(item, path), nil
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: fmt.Sprint(n)}
}

func rat(v types.AttributeValue) (*big.Rat, bool) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(n.Value)
	return r, ok
}

func ratValue(r *big.Rat) types.AttributeValue {
	if r.IsInt() {
		return &types.AttributeValueMemberN{Value: r.Num().String()}
	}
	return &types.AttributeValueMemberN{Value: r.FloatString(20)}
}

// compare returns the order of a and b, and false when they cannot be
// compared (either missing, or of different types).
func compare(a, b types.AttributeValue) (int, bool) {
	if a == nil || b == nil {
		return 0, false
	}
	if ra, ok := rat(a); ok {
		rb, ok := rat(b)
		if !ok {
			return 0, false
		}
		return ra.Cmp(rb), true
	}
	if sa, ok := a.(*types.AttributeValueMemberS); ok {
		sb, ok := b.(*types.AttributeValueMemberS)
		if !ok {
			return 0, false
		}
		return strings.Compare(sa.Value, sb.Value), true
	}
	return 0, false
}

func equal(a, b types.AttributeValue) bool {
	if c, ok := compare(a, b); ok {
		return c == 0
	}
	switch x := a.(type) {
	case *types.AttributeValueMemberBOOL:
		y, ok := b.(*types.AttributeValueMemberBOOL)
		return ok && x.Value == y.Value
	case *types.AttributeValueMemberSS:
		y, ok := b.(*types.AttributeValueMemberSS)
		if !ok || len(x.Value) != len(y.Value) {
			return false
		}
		for _, s := range x.Value {
			if !slices.Contains(y.Value, s) {
				return false
			}
		}
		return true
	case *types.AttributeValueMemberM:
		y, ok := b.(*types.AttributeValueMemberM)
		if !ok || len(x.Value) != len(y.Value) {
			return false
		}
		for k, v := range x.Value {
			if !equal(v, y.Value[k]) {
				return false
			}
		}
		return true
	}
	return false
}

func (e *evaluator) condition(expr string, item map[string]types.AttributeValue) (bool, error) {
	p := &parser{toks: tokenize(expr), ev: e}
	ok, err := p.or(item)
	if err == nil && p.pos != len(p.toks) {
		err = &errValidation{"syntax: trailing " + p.peek()}
	}
	return ok, err
}

func (p *parser) or(item map[string]types.AttributeValue) (bool, error) {
	v, err := p.and(item)
	for err == nil && strings.EqualFold(p.peek(), "OR") {
		p.next()
		var w bool
		w, err = p.and(item)
		v = v || w
	}
	return v, err
}

func (p *parser) and(item map[string]types.AttributeValue) (bool, error) {
	v, err := p.not(item)
	for err == nil && strings.EqualFold(p.peek(), "AND") {
		p.next()
		var w bool
		w, err = p.not(item)
		v = v && w
	}
	return v, err
}

func (p *parser) not(item map[string]types.AttributeValue) (bool, error) {
	if strings.EqualFold(p.peek(), "NOT") {
		p.next()
		v, err := p.not(item)
		return !v, err
	}
	return p.atom(item)
}

// pathAndOperand parses the arguments of a function f(path, operand),
// f itself next.
func (p *parser) pathAndOperand(item map[string]types.AttributeValue) ([]string, types.AttributeValue, error) {
	p.next()
	if err := p.expect("("); err != nil {
		return nil, nil, err
	}
	path, err := p.path()
	if err != nil {
		return nil, nil, err
	}
	if err := p.expect(","); err != nil {
		return nil, nil, err
	}
	want, err := p.operand(item)
	if err != nil {
		return nil, nil, err
	}
	return path, want, p.expect(")")
}

func (p *parser) atom(item map[string]types.AttributeValue) (bool, error) {
	switch t := p.peek(); t {
	case "(":
		p.next()
		v, err := p.or(item)
		if err != nil {
			return false, err
		}
		return v, p.expect(")")
	case "contains":
		path, want, err := p.pathAndOperand(item)
		if err != nil {
			return false, err
		}
		w, _ := want.(*types.AttributeValueMemberS)
		switch v := lookup(item, path).(type) {
		case *types.AttributeValueMemberSS:
			return w != nil && slices.Contains(v.Value, w.Value), nil
		case *types.AttributeValueMemberS:
			return w != nil && strings.Contains(v.Value, w.Value), nil
		}
		return false, nil
	case "attribute_exists", "attribute_not_exists":
		p.next()
		if err := p.expect("("); err != nil {
			return false, err
		}
		path, err := p.path()
		if err != nil {
			return false, err
		}
		if err := p.expect(")"); err != nil {
			return false, err
		}
		exists := lookup(item, path) != nil
		return exists == (t == "attribute_exists"), nil
	case "attribute_type":
		path, want, err := p.pathAndOperand(item)
		if err != nil {
			return false, err
		}
		w, ok := want.(*types.AttributeValueMemberS)
		if !ok {
			return false, &errValidation{"attribute_type: the type must be a string"}
		}
		v := lookup(item, path)
		if v == nil {
			return false, nil
		}
		// Each type's name is its member's: AttributeValueMemberBOOL is BOOL.
		got := strings.TrimPrefix(fmt.Sprintf("%T", v), "*types.AttributeValueMember")
		return got == w.Value, nil
	}
	a, err := p.operand(item)
	if err != nil {
		return false, err
	}
	op := p.next()
	b, err := p.operand(item)
	if err != nil {
		return false, err
	}
	if op == "=" {
		return a != nil && b != nil && equal(a, b), nil
	}
	if op == "<>" {
		return a != nil && b != nil && !equal(a, b), nil
	}
	c, ok := compare(a, b)
	if !ok {
		return false, nil
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, &errValidation{"syntax: unknown operator " + op}
}

// update applies expr, evaluating every operand against old, to next.
func (e *evaluator) update(expr string, old, next map[string]types.AttributeValue) error {
	p := &parser{toks: tokenize(expr), ev: e}
	var targets [][]string
	overlap := func(path []string) error {
		for _, t := range targets {
			n := min(len(t), len(path))
			if slices.Equal(t[:n], path[:n]) {
				return &errValidation{"Two document paths overlap with each other"}
			}
		}
		targets = append(targets, path)
		return nil
	}
	type op struct {
		kind string
		path []string
		val  types.AttributeValue
	}
	var ops []op
	for p.pos < len(p.toks) {
		kind := strings.ToUpper(p.next())
		switch kind {
		case "SET", "REMOVE", "ADD", "DELETE":
		default:
			return &errValidation{"syntax: unknown clause " + kind}
		}
		for {
			path, err := p.path()
			if err != nil {
				return err
			}
			if err := overlap(path); err != nil {
				return err
			}
			o := op{kind: kind, path: path}
			switch kind {
			case "SET":
				if err := p.expect("="); err != nil {
					return err
				}
				v, err := p.operand(old)
				if err != nil {
					return err
				}
				if t := p.peek(); t == "+" || t == "-" {
					p.next()
					w, err := p.operand(old)
					if err != nil {
						return err
					}
					a, ok1 := rat(v)
					b, ok2 := rat(w)
					if !ok1 || !ok2 {
						return &errValidation{"An operand in the update expression has an incorrect data type"}
					}
					if t == "+" {
						v = ratValue(new(big.Rat).Add(a, b))
					} else {
						v = ratValue(new(big.Rat).Sub(a, b))
					}
				}
				if v == nil {
					return &errValidation{"The provided expression refers to an attribute that does not exist in the item"}
				}
				o.val = v
			case "ADD", "DELETE":
				v, err := p.operand(old)
				if err != nil {
					return err
				}
				o.val = v
			}
			ops = append(ops, o)
			if p.peek() != "," {
				break
			}
			p.next()
		}
	}
	for _, o := range ops {
		parent := next
		if len(o.path) > 1 {
			pm, ok := lookup(next, o.path[:len(o.path)-1]).(*types.AttributeValueMemberM)
			if !ok {
				if o.kind == "REMOVE" {
					continue
				}
				return &errValidation{"The document path provided in the update expression is invalid for update"}
			}
			parent = pm.Value
		}
		last := o.path[len(o.path)-1]
		cur := parent[last]
		switch o.kind {
		case "SET":
			parent[last] = cloneValue(o.val)
		case "REMOVE":
			delete(parent, last)
		case "ADD":
			switch v := o.val.(type) {
			case *types.AttributeValueMemberN:
				if cur == nil {
					parent[last] = cloneValue(v)
					break
				}
				a, ok := rat(cur)
				if !ok {
					return &errValidation{"An operand in the update expression has an incorrect data type"}
				}
				b, _ := rat(v)
				parent[last] = ratValue(new(big.Rat).Add(a, b))
			case *types.AttributeValueMemberSS:
				set, ok := cur.(*types.AttributeValueMemberSS)
				if cur != nil && !ok {
					return &errValidation{"An operand in the update expression has an incorrect data type"}
				}
				var have []string
				if set != nil {
					have = slices.Clone(set.Value)
				}
				for _, s := range v.Value {
					if !slices.Contains(have, s) {
						have = append(have, s)
					}
				}
				parent[last] = &types.AttributeValueMemberSS{Value: have}
			default:
				return &errValidation{"ADD takes a number or a set"}
			}
		case "DELETE":
			v, ok := o.val.(*types.AttributeValueMemberSS)
			if !ok {
				return &errValidation{"DELETE takes a set"}
			}
			if cur == nil {
				continue
			}
			set, ok := cur.(*types.AttributeValueMemberSS)
			if !ok {
				return &errValidation{"An operand in the update expression has an incorrect data type"}
			}
			left := slices.DeleteFunc(slices.Clone(set.Value), func(s string) bool { return slices.Contains(v.Value, s) })
			if len(left) == 0 {
				delete(parent, last)
			} else {
				parent[last] = &types.AttributeValueMemberSS{Value: left}
			}
		}
	}
	return nil
}

// isValidation reports whether err is a request the store refused as
// invalid (ValidationException), from memStore or from the real store.
func isValidation(err error) bool {
	var v *errValidation
	if errors.As(err, &v) {
		return true
	}
	return err != nil && strings.Contains(err.Error(), "ValidationException")
}

// TestMemStoreMatchesDynalite replays, against dynalite, every write a few
// seeds of the fault simulation applied to memStore, in the same order,
// and requires the same answers: landed or not, refused as invalid or not,
// and the same item back. The simulation's store stands in for the real
// one only where this shows they behave alike.
func TestMemStoreMatchesDynalite(t *testing.T) {
	env := storetest.NewEnv(t)
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for seed := range uint64(seeds) {
		_, _, trace := runSim(t, 1000+seed, map[string]int{})
		key := "replay" + strconv.FormatUint(seed, 10)
		for i, w := range trace {
			in := *w.in
			in.TableName = aws.String(env.Tables.Leases)
			in.Key = itemKey(key)
			out, err := env.Client.UpdateItem(context.Background(), &in)
			var got map[string]types.AttributeValue
			if out != nil {
				got = out.Attributes
			}
			var ccf, wantCCF *types.ConditionalCheckFailedException
			switch {
			case errors.As(err, &ccf):
				got = ccf.Item
				if !errors.As(w.err, &wantCCF) {
					t.Fatalf("seed %d write %d: dynalite: condition failed; memStore: %v\n%s\nif %s", seed, i, w.err, shortExpr(w.in), shortCond(w.in))
				}
			case isValidation(err) != isValidation(w.err):
				t.Fatalf("seed %d write %d: dynalite: %v; memStore: %v\n%s", seed, i, err, w.err, shortExpr(w.in))
			case err != nil && !isValidation(err):
				t.Fatalf("seed %d write %d: %v", seed, i, err)
			case err == nil && w.err != nil:
				t.Fatalf("seed %d write %d: dynalite: landed; memStore: %v\n%s\nif %s", seed, i, w.err, shortExpr(w.in), shortCond(w.in))
			}
			if ccf != nil && !storetest.CCFItem() {
				continue // this store does not return the item of a failed write
			}
			delete(got, store.LimiterKeyAttr)
			want := cloneItem(w.item)
			delete(want, store.LimiterKeyAttr)
			if got == nil && len(want) == 0 {
				continue
			}
			if !equal(&types.AttributeValueMemberM{Value: got}, &types.AttributeValueMemberM{Value: want}) {
				t.Fatalf("seed %d write %d: items differ\n%s\ndynalite: %v\nmemStore: %v", seed, i, shortExpr(w.in), got, want)
			}
		}
		t.Logf("seed %d: %d writes alike", 1000+seed, len(trace))
	}
}
