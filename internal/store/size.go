package store

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ItemSize is an item's size in bytes as DynamoDB counts it for capacity
// units: the UTF-8 length of every attribute name plus each value's size (a
// string or binary its length; a number one byte per two significant digits
// plus one; a boolean or null one byte; a map or list 3 bytes, plus one byte
// and the size of each element, names included).
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

// WriteUnits is what one write of an item of that size costs in standard
// write capacity units: one per started kilobyte.
func WriteUnits(size int) int { return max(1, (size+1023)/1024) }

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + valueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += valueSize(e) + 1
		}
		return n
	}
	return 0
}

// numberSize counts significant digits: leading and trailing zeros are not
// stored.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "+-")
	if mant, _, ok := strings.Cut(strings.ToLower(s), "e"); ok {
		s = mant
	}
	digits := strings.Trim(strings.Replace(s, ".", "", 1), "0")
	return (len(digits)+1)/2 + 1
}
