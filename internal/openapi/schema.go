package openapi

import (
	"errors"
	"fmt"
	"slices"

	"github.com/getkin/kin-openapi/openapi3"
)

// Bounds on inlined schemas: $refs are expanded in place, so a document
// whose schemas refer to each other many times can grow large.
const (
	// maxToolSchemaNodes bounds one tool's input schema, in schema objects.
	maxToolSchemaNodes = 10000
	// maxTotalSchemaNodes bounds all tools of one document together.
	maxTotalSchemaNodes = 500000
)

var (
	errToolSchemaTooLarge  = fmt.Errorf("input schema has more than %d schema objects once $refs are expanded", maxToolSchemaNodes)
	errTotalSchemaTooLarge = fmt.Errorf("the document's input schemas have more than %d schema objects together once $refs are expanded", maxTotalSchemaNodes)
)

// converter turns OpenAPI schemas (3.0's dialect, or 3.1's JSON Schema
// 2020-12) into JSON Schema 2020-12 values with every $ref inlined, for
// tool input schemas. A schema met again inside itself (recursion) becomes
// an unconstrained schema with a $comment. Properties marked readOnly are
// left out: they are not sent in requests.
type converter struct {
	// openapi30 turns on 3.0's nullable and boolean exclusive bounds.
	openapi30 bool
	stack     map[*openapi3.Schema]bool
	nodes     int
	// total counts nodes across converters of one document.
	total *int
}

func newConverter(openapi30 bool, total *int) *converter {
	return &converter{openapi30: openapi30, stack: map[*openapi3.Schema]bool{}, total: total}
}

func (c *converter) convert(ref *openapi3.SchemaRef) (map[string]any, error) {
	if ref == nil || ref.Value == nil {
		return map[string]any{}, nil
	}
	c.nodes++
	*c.total++
	if c.nodes > maxToolSchemaNodes {
		return nil, errToolSchemaTooLarge
	}
	if *c.total > maxTotalSchemaNodes {
		return nil, errTotalSchemaTooLarge
	}
	s := ref.Value
	if s.Always != nil {
		if *s.Always {
			return map[string]any{}, nil
		}
		return map[string]any{"not": map[string]any{}}, nil
	}
	if c.stack[s] {
		return map[string]any{"$comment": "recursive schema " + ref.Ref + " not expanded"}, nil
	}
	c.stack[s] = true
	defer delete(c.stack, s)

	m := map[string]any{}
	nullable := c.openapi30 && s.Nullable
	if s.Type != nil && len(*s.Type) > 0 {
		types := slices.Clone([]string(*s.Type))
		if nullable && !slices.Contains(types, openapi3.TypeNull) {
			types = append(types, openapi3.TypeNull)
		}
		if len(types) == 1 {
			m["type"] = types[0]
		} else {
			m["type"] = types
		}
	}
	setString(m, "title", s.Title)
	setString(m, "description", s.Description)
	setString(m, "format", s.Format)
	setString(m, "pattern", s.Pattern)
	setString(m, "contentMediaType", s.ContentMediaType)
	setString(m, "contentEncoding", s.ContentEncoding)
	if len(s.Enum) > 0 {
		enum := slices.Clone(s.Enum)
		if nullable && !slices.Contains(enum, nil) {
			enum = append(enum, nil)
		}
		m["enum"] = enum
	}
	if s.Const != nil {
		m["const"] = s.Const
	}
	if s.Default != nil {
		m["default"] = s.Default
	}
	switch {
	case len(s.Examples) > 0:
		m["examples"] = s.Examples
	case s.Example != nil:
		m["examples"] = []any{s.Example}
	}
	setBool(m, "deprecated", s.Deprecated)
	setBool(m, "readOnly", s.ReadOnly)
	setBool(m, "writeOnly", s.WriteOnly)

	// Numbers.
	if s.Min != nil {
		m["minimum"] = *s.Min
	}
	if s.Max != nil {
		m["maximum"] = *s.Max
	}
	if v := s.ExclusiveMin.Value; v != nil {
		m["exclusiveMinimum"] = *v
	} else if s.ExclusiveMin.IsTrue() && s.Min != nil {
		m["exclusiveMinimum"] = *s.Min
		delete(m, "minimum")
	}
	if v := s.ExclusiveMax.Value; v != nil {
		m["exclusiveMaximum"] = *v
	} else if s.ExclusiveMax.IsTrue() && s.Max != nil {
		m["exclusiveMaximum"] = *s.Max
		delete(m, "maximum")
	}
	if s.MultipleOf != nil {
		m["multipleOf"] = *s.MultipleOf
	}

	// Strings.
	if s.MinLength > 0 {
		m["minLength"] = s.MinLength
	}
	if s.MaxLength != nil {
		m["maxLength"] = *s.MaxLength
	}

	// Arrays.
	if err := c.set(m, "items", s.Items); err != nil {
		return nil, err
	}
	if err := c.setList(m, "prefixItems", s.PrefixItems); err != nil {
		return nil, err
	}
	if err := c.set(m, "contains", s.Contains); err != nil {
		return nil, err
	}
	if s.MinContains != nil {
		m["minContains"] = *s.MinContains
	}
	if s.MaxContains != nil {
		m["maxContains"] = *s.MaxContains
	}
	setBool(m, "uniqueItems", s.UniqueItems)
	if s.MinItems > 0 {
		m["minItems"] = s.MinItems
	}
	if s.MaxItems != nil {
		m["maxItems"] = *s.MaxItems
	}
	if err := c.setBoolSchema(m, "unevaluatedItems", s.UnevaluatedItems); err != nil {
		return nil, err
	}

	// Objects.
	if len(s.Properties) > 0 {
		props := make(map[string]any, len(s.Properties))
		var dropped []string
		for name, p := range s.Properties {
			if p != nil && p.Value != nil && p.Value.ReadOnly {
				dropped = append(dropped, name)
				continue
			}
			v, err := c.convert(p)
			if err != nil {
				return nil, err
			}
			props[name] = v
		}
		m["properties"] = props
		if len(s.Required) > 0 {
			var required []string
			for _, name := range s.Required {
				if !slices.Contains(dropped, name) {
					required = append(required, name)
				}
			}
			if len(required) > 0 {
				m["required"] = required
			}
		}
	} else if len(s.Required) > 0 {
		m["required"] = slices.Clone(s.Required)
	}
	if s.MinProps > 0 {
		m["minProperties"] = s.MinProps
	}
	if s.MaxProps != nil {
		m["maxProperties"] = *s.MaxProps
	}
	if err := c.setBoolSchema(m, "additionalProperties", s.AdditionalProperties); err != nil {
		return nil, err
	}
	if err := c.setMap(m, "patternProperties", s.PatternProperties); err != nil {
		return nil, err
	}
	if err := c.setMap(m, "dependentSchemas", s.DependentSchemas); err != nil {
		return nil, err
	}
	if err := c.set(m, "propertyNames", s.PropertyNames); err != nil {
		return nil, err
	}
	if len(s.DependentRequired) > 0 {
		m["dependentRequired"] = s.DependentRequired
	}
	if err := c.setBoolSchema(m, "unevaluatedProperties", s.UnevaluatedProperties); err != nil {
		return nil, err
	}

	// Composition.
	for _, kw := range []struct {
		name string
		list openapi3.SchemaRefs
	}{{"allOf", s.AllOf}, {"anyOf", s.AnyOf}, {"oneOf", s.OneOf}} {
		if err := c.setList(m, kw.name, kw.list); err != nil {
			return nil, err
		}
	}
	for _, kw := range []struct {
		name string
		ref  *openapi3.SchemaRef
	}{{"not", s.Not}, {"if", s.If}, {"then", s.Then}, {"else", s.Else}} {
		if err := c.set(m, kw.name, kw.ref); err != nil {
			return nil, err
		}
	}

	// 3.0's "nullable: true" next to allOf and no type (a common way to
	// make a $ref nullable) allows null besides the composed schema.
	if nullable && s.Type == nil && len(m) > 0 {
		return map[string]any{"anyOf": []any{m, map[string]any{"type": openapi3.TypeNull}}}, nil
	}
	return m, nil
}

func (c *converter) set(m map[string]any, key string, ref *openapi3.SchemaRef) error {
	if ref == nil {
		return nil
	}
	v, err := c.convert(ref)
	if err != nil {
		return err
	}
	m[key] = v
	return nil
}

func (c *converter) setList(m map[string]any, key string, refs openapi3.SchemaRefs) error {
	if len(refs) == 0 {
		return nil
	}
	list := make([]any, 0, len(refs))
	for _, ref := range refs {
		v, err := c.convert(ref)
		if err != nil {
			return err
		}
		list = append(list, v)
	}
	m[key] = list
	return nil
}

func (c *converter) setMap(m map[string]any, key string, schemas openapi3.Schemas) error {
	if len(schemas) == 0 {
		return nil
	}
	out := make(map[string]any, len(schemas))
	for name, ref := range schemas {
		v, err := c.convert(ref)
		if err != nil {
			return err
		}
		out[name] = v
	}
	m[key] = out
	return nil
}

func (c *converter) setBoolSchema(m map[string]any, key string, bs openapi3.BoolSchema) error {
	switch {
	case bs.Has != nil:
		m[key] = *bs.Has
	case bs.Schema != nil:
		return c.set(m, key, bs.Schema)
	}
	return nil
}

func setString(m map[string]any, key, v string) {
	if v != "" {
		m[key] = v
	}
}

func setBool(m map[string]any, key string, v bool) {
	if v {
		m[key] = true
	}
}

// isBudgetError reports whether err is a schema size bound.
func isBudgetError(err error) bool {
	return errors.Is(err, errToolSchemaTooLarge) || errors.Is(err, errTotalSchemaTooLarge)
}
