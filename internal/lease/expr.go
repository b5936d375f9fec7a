package lease

import (
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// exprBuilder hands out expression placeholders, so no user-supplied name
// (lease id, tool name) is ever spliced into an expression.
type exprBuilder struct {
	names  map[string]string
	values map[string]types.AttributeValue
	byName map[string]string
}

func newExprBuilder() *exprBuilder {
	return &exprBuilder{names: map[string]string{}, byName: map[string]string{}}
}

// name returns the placeholder for attribute name n, reusing one per name.
func (b *exprBuilder) name(n string) string {
	if p, ok := b.byName[n]; ok {
		return p
	}
	p := "#n" + strconv.Itoa(len(b.names))
	b.names[p] = n
	b.byName[n] = p
	return p
}

// value returns a new placeholder for v.
func (b *exprBuilder) value(v types.AttributeValue) string {
	if b.values == nil {
		b.values = map[string]types.AttributeValue{}
	}
	p := ":v" + strconv.Itoa(len(b.values))
	b.values[p] = v
	return p
}

func number(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
