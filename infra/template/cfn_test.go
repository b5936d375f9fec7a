package template

// A small evaluator of CloudFormation intrinsic functions, so template
// tests can see a template as CloudFormation would deploy it for given
// parameter values: conditions decided, resources whose condition is false
// left out, Ref/Sub/If/Select/Split resolved. A Ref to a resource renders
// as "ref:Name" and a GetAtt without a known value as "getatt:Name.Attr",
// so tests can check what points where.

import (
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
)

// cfnStack is a template being evaluated.
type cfnStack struct {
	params    map[string]any
	condExprs map[string]any
	conds     map[string]bool
	resources map[string]bool
	// attrs are the values of GetAtt "Name.Attr" known to the test; they
	// may name resources SAM generates (GatewayFunctionUrl).
	attrs map[string]any
}

// noValue is what AWS::NoValue evaluates to: the property is left out.
type noValueT struct{}

var noValue = noValueT{}

// cfnEvaluate returns tpl (a template as decoded from JSON) as CloudFormation
// would deploy it with the given parameter values (defaults for the
// others). With keepAll, resources and outputs whose condition is false are
// evaluated too instead of being left out.
func cfnEvaluate(tpl map[string]any, params map[string]string, attrs map[string]any, keepAll bool) (map[string]any, error) {
	st := &cfnStack{params: map[string]any{}, conds: map[string]bool{}, resources: map[string]bool{}, attrs: attrs}
	decls, _ := tpl["Parameters"].(map[string]any)
	for name, d := range decls {
		decl, _ := d.(map[string]any)
		v, given := params[name]
		switch {
		case given && decl["Type"] == "Number":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("parameter %s=%q is not a number", name, v)
			}
			st.params[name] = f
		case given:
			st.params[name] = v
		default:
			def, ok := decl["Default"]
			if !ok {
				return nil, fmt.Errorf("parameter %s has no default and no value", name)
			}
			st.params[name] = def
		}
	}
	for name := range params {
		if _, ok := decls[name]; !ok {
			return nil, fmt.Errorf("no parameter %s", name)
		}
	}
	st.condExprs, _ = tpl["Conditions"].(map[string]any)
	resources, _ := tpl["Resources"].(map[string]any)
	for name, r := range resources {
		st.resources[name] = true
		// SAM makes a function's role, named <function>Role, when the
		// function names none; the template may refer to it.
		res, _ := r.(map[string]any)
		props, _ := res["Properties"].(map[string]any)
		if _, hasRole := props["Role"]; res["Type"] == "AWS::Serverless::Function" && !hasRole {
			st.resources[name+"Role"] = true
		}
	}

	out := maps.Clone(tpl)
	conds := map[string]any{}
	for name := range st.condExprs {
		v, err := st.condition(name)
		if err != nil {
			return nil, err
		}
		conds[name] = v
	}
	out["Conditions"] = conds
	for _, section := range []string{"Resources", "Outputs"} {
		in, _ := tpl[section].(map[string]any)
		evaluated := map[string]any{}
		for name, r := range in {
			res, _ := r.(map[string]any)
			if c, ok := res["Condition"].(string); ok && !keepAll {
				on, err := st.condition(c)
				if err != nil {
					return nil, err
				}
				if !on {
					continue
				}
			}
			v, err := st.eval(res)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", section, name, err)
			}
			evaluated[name] = v
		}
		out[section] = evaluated
	}
	return out, nil
}

func (st *cfnStack) condition(name string) (bool, error) {
	if v, ok := st.conds[name]; ok {
		return v, nil
	}
	expr, ok := st.condExprs[name]
	if !ok {
		return false, fmt.Errorf("no condition %s", name)
	}
	v, err := st.eval(expr)
	if err != nil {
		return false, fmt.Errorf("condition %s: %w", name, err)
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("condition %s is %v, not a boolean", name, v)
	}
	st.conds[name] = b
	return b, nil
}

func (st *cfnStack) eval(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 1 {
			for k, arg := range v {
				if k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::") {
					return st.intrinsic(k, arg)
				}
			}
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			r, err := st.eval(e)
			if err != nil {
				return nil, err
			}
			if r != noValue {
				out[k] = r
			}
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(v))
		for _, e := range v {
			r, err := st.eval(e)
			if err != nil {
				return nil, err
			}
			if r != noValue {
				out = append(out, r)
			}
		}
		return out, nil
	}
	return v, nil
}

// args evaluates the list argument of an intrinsic with n elements.
func (st *cfnStack) args(fn string, arg any, n int) ([]any, error) {
	list, ok := arg.([]any)
	if !ok || (n > 0 && len(list) != n) {
		return nil, fmt.Errorf("%s wants a list of %d, got %v", fn, n, arg)
	}
	out := make([]any, len(list))
	for i, e := range list {
		r, err := st.eval(e)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

func (st *cfnStack) ref(name string) (any, error) {
	switch name {
	case "AWS::NoValue":
		return noValue, nil
	case "AWS::Region":
		return "us-east-1", nil
	case "AWS::StackName":
		return "mcpgate", nil
	case "AWS::AccountId":
		return "123456789012", nil
	case "AWS::Partition":
		return "aws", nil
	case "AWS::URLSuffix":
		return "amazonaws.com", nil
	}
	if v, ok := st.params[name]; ok {
		return v, nil
	}
	if st.resources[name] {
		return "ref:" + name, nil
	}
	return nil, fmt.Errorf("Ref to unknown %s", name)
}

func (st *cfnStack) getAtt(name, attr string) (any, error) {
	if v, ok := st.attrs[name+"."+attr]; ok {
		return v, nil
	}
	if !st.resources[name] {
		return nil, fmt.Errorf("GetAtt of unknown resource %s", name)
	}
	return "getatt:" + name + "." + attr, nil
}

var subVar = regexp.MustCompile(`\$\{(!?)([^}]+)\}`)

func (st *cfnStack) intrinsic(fn string, arg any) (any, error) {
	switch fn {
	case "Ref":
		name, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("Ref wants a name, got %v", arg)
		}
		return st.ref(name)
	case "Condition":
		name, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("Condition wants a name, got %v", arg)
		}
		return st.condition(name)
	case "Fn::GetAtt":
		var parts []string
		switch a := arg.(type) {
		case string:
			parts = strings.SplitN(a, ".", 2)
		case []any:
			for _, p := range a {
				s, _ := p.(string)
				parts = append(parts, s)
			}
		}
		if len(parts) != 2 {
			return nil, fmt.Errorf("GetAtt wants Name.Attr, got %v", arg)
		}
		return st.getAtt(parts[0], parts[1])
	case "Fn::If":
		list, ok := arg.([]any)
		if !ok || len(list) != 3 {
			return nil, fmt.Errorf("Fn::If wants [condition, then, else], got %v", arg)
		}
		name, _ := list[0].(string)
		on, err := st.condition(name)
		if err != nil {
			return nil, err
		}
		if on {
			return st.eval(list[1])
		}
		return st.eval(list[2])
	case "Fn::Equals":
		a, err := st.args(fn, arg, 2)
		if err != nil {
			return nil, err
		}
		return fmt.Sprint(a[0]) == fmt.Sprint(a[1]), nil
	case "Fn::Not", "Fn::And", "Fn::Or":
		a, err := st.args(fn, arg, 0)
		if err != nil {
			return nil, err
		}
		bs := make([]bool, len(a))
		for i, e := range a {
			b, ok := e.(bool)
			if !ok {
				return nil, fmt.Errorf("%s of a non-boolean %v", fn, e)
			}
			bs[i] = b
		}
		switch {
		case fn == "Fn::Not" && len(bs) == 1:
			return !bs[0], nil
		case fn == "Fn::And":
			for _, b := range bs {
				if !b {
					return false, nil
				}
			}
			return true, nil
		case fn == "Fn::Or":
			for _, b := range bs {
				if b {
					return true, nil
				}
			}
			return false, nil
		}
		return nil, fmt.Errorf("%s of %v", fn, a)
	case "Fn::Sub":
		src, vars := "", map[string]any{}
		switch a := arg.(type) {
		case string:
			src = a
		case []any:
			if len(a) != 2 {
				return nil, fmt.Errorf("Fn::Sub wants [string, variables], got %v", arg)
			}
			src, _ = a[0].(string)
			m, _ := a[1].(map[string]any)
			for k, e := range m {
				r, err := st.eval(e)
				if err != nil {
					return nil, err
				}
				vars[k] = r
			}
		}
		var subErr error
		out := subVar.ReplaceAllStringFunc(src, func(m string) string {
			g := subVar.FindStringSubmatch(m)
			if g[1] == "!" {
				return "${" + g[2] + "}"
			}
			var v any
			var err error
			if x, ok := vars[g[2]]; ok {
				v = x
			} else if name, attr, ok := strings.Cut(g[2], "."); ok {
				v, err = st.getAtt(name, attr)
			} else {
				v, err = st.ref(g[2])
			}
			if err != nil && subErr == nil {
				subErr = err
			}
			return fmt.Sprint(v)
		})
		return out, subErr
	case "Fn::Select":
		a, err := st.args(fn, arg, 2)
		if err != nil {
			return nil, err
		}
		i, err := strconv.Atoi(fmt.Sprint(a[0]))
		list, ok := a[1].([]any)
		if err != nil || !ok || i < 0 || i >= len(list) {
			return nil, fmt.Errorf("Fn::Select %v of %v", a[0], a[1])
		}
		return list[i], nil
	case "Fn::Split":
		a, err := st.args(fn, arg, 2)
		if err != nil {
			return nil, err
		}
		sep, ok1 := a[0].(string)
		s, ok2 := a[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("Fn::Split of %v", a)
		}
		var out []any
		for _, p := range strings.Split(s, sep) {
			out = append(out, p)
		}
		return out, nil
	case "Fn::Join":
		a, err := st.args(fn, arg, 2)
		if err != nil {
			return nil, err
		}
		sep, _ := a[0].(string)
		list, _ := a[1].([]any)
		parts := make([]string, len(list))
		for i, p := range list {
			parts[i] = fmt.Sprint(p)
		}
		return strings.Join(parts, sep), nil
	}
	return nil, fmt.Errorf("unsupported intrinsic %s", fn)
}
