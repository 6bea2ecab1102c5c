package charts

import (
	"reflect"
	"text/template"
)

// templateFuncs replace template functions of Helm's engine with faster
// equivalents; what a chart renders does not change.
//
// deepCopy and mustDeepCopy: the upstream GitOps runtime chart copies its
// whole context (`deepCopy .`, the chart's files included) in many of its
// templates, and sprig's copy, which walks every value by reflection one
// element at a time (a file byte by byte), took two thirds of the time of
// a render of that chart (10 to 17 s each, on the project's machine).
// copyForTemplate copies what a template can change (maps and lists, at
// every depth) and keeps the rest as it is; a slice of plain values (a
// file's bytes) is copied at once.
var templateFuncs = template.FuncMap{
	"deepCopy":     func(v any) any { return copyForTemplate(v) },
	"mustDeepCopy": func(v any) (any, error) { return copyForTemplate(v), nil },
}

// copyForTemplate returns a copy of v in which every map and slice,
// however deep, is new (of the same type), so that a template's set, unset
// or merge on the copy never reaches v. Strings, numbers, booleans,
// pointers and structs are shared: templates cannot change them.
func copyForTemplate(v any) any {
	if v == nil {
		return nil
	}
	return copyReflected(reflect.ValueOf(v)).Interface()
}

func copyReflected(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		return copyReflected(v.Elem())
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		elem := v.Type().Elem()
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), copyElem(it.Value(), elem))
		}
		return out
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		elem := v.Type().Elem()
		if plain(elem.Kind()) {
			reflect.Copy(out, v)
			return out
		}
		for i := range v.Len() {
			out.Index(i).Set(copyElem(v.Index(i), elem))
		}
		return out
	}
	return v
}

// copyElem copies an element of a map or slice whose element type is t:
// a nil interface stays the zero value of t.
func copyElem(v reflect.Value, t reflect.Type) reflect.Value {
	if v.Kind() == reflect.Interface && v.IsNil() {
		return reflect.Zero(t)
	}
	c := copyReflected(v)
	if !c.Type().AssignableTo(t) {
		return v
	}
	return c
}

// plain kinds hold no map or slice: their slices are copied at once.
func plain(k reflect.Kind) bool {
	switch k {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String:
		return true
	}
	return false
}
