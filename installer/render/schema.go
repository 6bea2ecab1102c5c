package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/quote"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sizing"
)

// valueProblem is one place where a component's values do not match its
// chart's values.schema.json.
type valueProblem struct {
	// path is the value's place in the values: keys, and indexes of lists
	// as decimal strings.
	path    []string
	message string
	hint    string
}

// checkSchema validates values, layered over the chart's own defaults as
// Helm coalesces them, against the chart's values.schema.json (none: no
// problem), and returns every problem at the place of the value it is
// about.
func checkSchema(ch *chartv2.Chart, values map[string]any) ([]valueProblem, error) {
	if len(ch.Schema) == 0 {
		return nil, nil
	}
	cs, err := compileSchema(ch.Schema)
	if err != nil {
		return nil, fmt.Errorf("chart %s: values.schema.json: %w", ch.Name(), err)
	}
	raw, schema := cs.raw, cs.schema
	merged, err := chartutil.CoalesceValues(ch, values)
	if err != nil {
		return nil, fmt.Errorf("chart %s: values: %w", ch.Name(), err)
	}
	// Through JSON, as Helm's validation sees the values.
	doc, err := json.Marshal(merged.AsMap())
	if err != nil {
		return nil, fmt.Errorf("chart %s: values: %w", ch.Name(), err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("chart %s: values: %w", ch.Name(), err)
	}
	verr := schema.Validate(inst)
	if verr == nil {
		return nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return nil, fmt.Errorf("chart %s: values: %w", ch.Name(), verr)
	}
	var out []valueProblem
	for _, leaf := range leaves(ve) {
		out = append(out, describeProblem(leaf, raw, inst)...)
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Join(out[i].path, "\x00") < strings.Join(out[j].path, "\x00") })
	return out, nil
}

// compiled is a chart's values.schema.json, decoded and compiled.
type compiled struct {
	raw    any
	schema *jsonschema.Schema
}

// schemas caches compiled schemas by their text: every render validates
// every component, and the charts are few.
var schemas sync.Map

func compileSchema(text []byte) (*compiled, error) {
	if c, ok := schemas.Load(string(text)); ok {
		return c.(*compiled), nil
	}
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(text))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("file:///values.schema.json", raw); err != nil {
		return nil, err
	}
	schema, err := c.Compile("file:///values.schema.json")
	if err != nil {
		return nil, err
	}
	out := &compiled{raw: raw, schema: schema}
	schemas.Store(string(text), out)
	return out, nil
}

// leaves are the errors without causes: each one thing that is wrong.
func leaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// describeProblem says what is wrong in the operator's terms: the value's
// place, what it is and what would be valid, with the field's description
// from the schema as the hint.
func describeProblem(e *jsonschema.ValidationError, schema, inst any) []valueProblem {
	at := e.InstanceLocation
	got, _ := valueAt(inst, at)
	hint := descriptionAt(schema, at)
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		var out []valueProblem
		names := propertiesAt(schema, at)
		for _, p := range k.Properties {
			h := config.DidYouMean(p, names)
			if h == "" {
				h = "valid: " + strings.Join(names, ", ")
			}
			out = append(out, valueProblem{path: append(slices.Clone(at), p), message: "unknown value: the chart has no such key", hint: h})
		}
		return out
	case *kind.Type:
		return []valueProblem{{path: at, message: fmt.Sprintf("expected %s, got %s", typeWords(k.Want), describeValue(got)), hint: hint}}
	case *kind.Enum:
		var want []string
		for _, w := range k.Want {
			want = append(want, fmt.Sprint(w))
		}
		return []valueProblem{{path: at, message: fmt.Sprintf("%s is not valid (valid: %s)", describeValue(got), strings.Join(want, ", ")), hint: hint}}
	case *kind.Minimum:
		return []valueProblem{{path: at, message: fmt.Sprintf("%s is too small (at least %s)", describeValue(got), ratString(k.Want)), hint: hint}}
	case *kind.Maximum:
		return []valueProblem{{path: at, message: fmt.Sprintf("%s is too large (at most %s)", describeValue(got), ratString(k.Want)), hint: hint}}
	}
	msg := "does not match the chart's values.schema.json"
	if u := e.BasicOutput(); u != nil && u.Error != nil {
		msg = quote.Message(u.Error.String())
	}
	return []valueProblem{{path: at, message: msg, hint: hint}}
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	return r.FloatString(3)
}

// typeWords names JSON Schema types as an operator reads them.
func typeWords(types []string) string {
	words := map[string]string{"integer": "a whole number", "number": "a number", "string": "a string", "boolean": "true or false",
		"object": "a mapping", "array": "a list", "null": "null"}
	var out []string
	for _, t := range types {
		if w, ok := words[t]; ok {
			out = append(out, w)
		} else {
			out = append(out, t)
		}
	}
	return strings.Join(out, " or ")
}

// describeValue names a value for a message: the string "three", the
// number 3.5, a mapping.
func describeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "the string " + quote.Value(x)
	case bool:
		return "the boolean " + strconv.FormatBool(x)
	case json.Number:
		return "the number " + quote.Text(x.String())
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return quote.Text(fmt.Sprint(v))
}

// valueAt is the value at path in a decoded document: keys of mappings,
// indexes of lists; ok is false when there is none.
func valueAt(doc any, path []string) (v any, ok bool) {
	for _, p := range path {
		switch d := doc.(type) {
		case map[string]any:
			if doc, ok = d[p]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(d) {
				return nil, false
			}
			doc = d[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// schemaAt follows path through a schema's properties, additionalProperties
// and items (nil: the schema does not describe the place).
func schemaAt(schema any, path []string) map[string]any {
	s, _ := schema.(map[string]any)
	for _, p := range path {
		if s == nil {
			return nil
		}
		props, _ := s["properties"].(map[string]any)
		switch {
		case props != nil && props[p] != nil:
			s, _ = props[p].(map[string]any)
		case s["items"] != nil:
			s, _ = s["items"].(map[string]any)
		default:
			s, _ = s["additionalProperties"].(map[string]any)
		}
	}
	return s
}

func descriptionAt(schema any, path []string) string {
	d, _ := schemaAt(schema, path)["description"].(string)
	return d
}

// propertiesAt lists the keys the schema knows at path, sorted.
func propertiesAt(schema any, path []string) []string {
	props, _ := schemaAt(schema, path)["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// within says whether path lies inside what values sets (the operator's
// values of a component, or --set's): each key present, each index
// inside its list.
func within(values map[string]any, path []string) bool {
	if len(values) == 0 {
		return false
	}
	_, ok := valueAt(values, path)
	return ok
}

// CheckValues checks the values the configuration gives each component
// (spec.components.NAME.values) against the component's chart's
// values.schema.json, layered as Render layers them (the release, the
// sizing profile and the rest of the configuration beneath). It returns
// the problems whose value the operator's values set, each at its place
// in those values; config.Load reports them with the file's line
// (config.ValidateOptions.CheckValues). Components the release does not
// have, and charts without a schema, are left alone. chartsFS nil: the
// embedded charts.
func CheckValues(in *config.Installation, rel *release.Release, chartsFS fs.FS) []config.ValuesProblem {
	if in == nil || rel == nil {
		return nil
	}
	if chartsFS == nil {
		chartsFS = charts.FS
	}
	prof, err := sizing.Get(in.Spec.Profile)
	if err != nil {
		// The profile is reported by itself; check with the default's.
		if prof, err = sizing.Get(config.DefaultProfile); err != nil {
			return nil
		}
	}
	global := globalValues(in)
	loaded := map[string]*chartv2.Chart{}
	var out []config.ValuesProblem
	for _, name := range sortedKeys(in.Spec.Components) {
		o := in.Spec.Components[name]
		c, ok := rel.Component(name)
		if !ok || len(o.Values) == 0 {
			continue
		}
		ch, ok := loaded[c.Chart]
		if !ok {
			if ch, err = charts.LoadFrom(chartsFS, c.Chart); err != nil {
				continue
			}
			loaded[c.Chart] = ch
		}
		values, err := componentValues(in, rel, prof, c, global, nil)
		if err != nil {
			continue
		}
		problems, err := checkSchema(ch, values)
		if err != nil {
			out = append(out, config.ValuesProblem{Component: name, Message: err.Error()})
			continue
		}
		for _, p := range problems {
			if within(o.Values, p.path) {
				out = append(out, config.ValuesProblem{Component: name, Path: p.path, Message: p.message, Hint: p.hint})
			}
		}
	}
	return out
}

// ValuesError is a component's values, given in onprem.yaml or with
// --set, that its chart's values.schema.json refuses: a configuration
// error (exit 2).
type ValuesError struct {
	Component string
	// Origin is "spec.components.NAME.values", "--set", "" (an
	// overlay's replicas) or "values" (onprem's own values: not the
	// operator's error).
	Origin   string
	Problems []valueProblem
}

func (e *ValuesError) Error() string {
	lines := make([]string, 0, len(e.Problems))
	for _, p := range e.Problems {
		where := e.Origin
		if e.Origin == "--set" {
			where = "--set " + e.Component
		}
		if len(p.path) > 0 {
			if where != "" {
				where += "."
			}
			where += strings.Join(p.path, ".")
		}
		l := where + ": " + p.message
		if p.hint != "" {
			l += "; " + p.hint
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// layers are the values of one component that someone other than onprem
// gave: its --set values, its values in onprem.yaml, the replicas an
// operator's overlay gives its workload.
type layers struct {
	set, config, overlaid map[string]any
}

// checkComponentValues validates a component's final values (values)
// against its chart's schema before Helm does, so that a value someone
// gave is named as theirs (--set, spec.components, spec.overlays). A
// problem with a value none of them gave is onprem's own (a release or
// profile), a plain error.
func checkComponentValues(ch *chartv2.Chart, name string, values map[string]any, given layers) error {
	problems, err := checkSchema(ch, values)
	if err != nil || len(problems) == 0 {
		return err
	}
	var bySet, byCfg, byOverlay, other []valueProblem
	for _, p := range problems {
		switch {
		case within(given.overlaid, p.path):
			byOverlay = append(byOverlay, p)
		case within(given.set, p.path):
			bySet = append(bySet, p)
		case within(given.config, p.path):
			byCfg = append(byCfg, p)
		default:
			other = append(other, p)
		}
	}
	switch {
	case len(byOverlay) > 0:
		return OverlayErrors{{Index: -1, Patch: -1, Target: "component " + name,
			Err:  &ValuesError{Component: name, Problems: byOverlay},
			Hint: "an overlay changed the replicas of its workload, and they are rendered as its values would be: change the overlay"}}
	case len(bySet) > 0:
		return &SetError{&ValuesError{Component: name, Origin: "--set", Problems: bySet}}
	case len(byCfg) > 0:
		return &ValuesError{Component: name, Origin: "spec.components." + name + ".values", Problems: byCfg}
	}
	return fmt.Errorf("component %s: values do not match chart %s's values.schema.json: %w", name, ch.Name(), &ValuesError{Component: name, Origin: "values", Problems: other})
}
