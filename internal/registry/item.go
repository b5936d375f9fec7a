package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ItemFromJSON converts a JSON object, as an admin would write a server
// definition, into a servers-table item, and validates it with Parse.
func ItemFromJSON(doc []byte) (map[string]types.AttributeValue, *Server, error) {
	item, err := JSONToItem(doc)
	if err != nil {
		return nil, nil, err
	}
	s, err := Parse(item)
	if err != nil {
		return nil, nil, err
	}
	return item, s, nil
}

// JSONToItem converts a JSON object into a DynamoDB item without validating
// it: JSON strings become S, numbers N, booleans BOOL, null NULL, objects M,
// arrays L.
func JSONToItem(doc []byte) (map[string]types.AttributeValue, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if obj == nil {
		return nil, errors.New("not a JSON object: null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	item := make(map[string]types.AttributeValue, len(obj))
	for k, v := range obj {
		av, err := toAttributeValue(v)
		if err != nil {
			return nil, &FieldError{Field: k, Reason: err.Error()}
		}
		item[k] = av
	}
	return item, nil
}

func toAttributeValue(v any) (types.AttributeValue, error) {
	switch v := v.(type) {
	case nil:
		return &types.AttributeValueMemberNULL{Value: true}, nil
	case string:
		return &types.AttributeValueMemberS{Value: v}, nil
	case json.Number:
		return &types.AttributeValueMemberN{Value: v.String()}, nil
	case bool:
		return &types.AttributeValueMemberBOOL{Value: v}, nil
	case map[string]any:
		m := make(map[string]types.AttributeValue, len(v))
		for k, e := range v {
			av, err := toAttributeValue(e)
			if err != nil {
				return nil, err
			}
			m[k] = av
		}
		return &types.AttributeValueMemberM{Value: m}, nil
	case []any:
		l := make([]types.AttributeValue, 0, len(v))
		for _, e := range v {
			av, err := toAttributeValue(e)
			if err != nil {
				return nil, err
			}
			l = append(l, av)
		}
		return &types.AttributeValueMemberL{Value: l}, nil
	default:
		return nil, fmt.Errorf("unsupported JSON value %T", v)
	}
}

// ItemToJSON renders an item as a JSON-friendly map, the inverse of
// ItemFromJSON, for display.
func ItemToJSON(item map[string]types.AttributeValue) map[string]any {
	out := make(map[string]any, len(item))
	for k, v := range item {
		out[k] = fromAttributeValue(v)
	}
	return out
}

func fromAttributeValue(v types.AttributeValue) any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return json.Number(v.Value)
	case *types.AttributeValueMemberBOOL:
		return v.Value
	case *types.AttributeValueMemberNULL:
		return nil
	case *types.AttributeValueMemberM:
		return ItemToJSON(v.Value)
	case *types.AttributeValueMemberL:
		l := make([]any, 0, len(v.Value))
		for _, e := range v.Value {
			l = append(l, fromAttributeValue(e))
		}
		return l
	case *types.AttributeValueMemberSS:
		s := append([]string(nil), v.Value...)
		sort.Strings(s)
		return s
	case *types.AttributeValueMemberNS:
		l := make([]any, 0, len(v.Value))
		for _, n := range v.Value {
			l = append(l, json.Number(n))
		}
		return l
	default:
		return fmt.Sprintf("<%s>", typeName(v))
	}
}
