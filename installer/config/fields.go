package config

import (
	"reflect"
	"strings"
	"sync"
)

// installationType is the root of every reflective walk over the API.
var installationType = reflect.TypeFor[Installation]()

// fieldInfo is what the struct tags say about one field of the API.
type fieldInfo struct {
	name      string // json name
	index     int    // index in the Go struct
	typ       reflect.Type
	omitEmpty bool
	doc       string
	enum      []string
}

// fieldCache holds the fields of each struct type, computed once.
var fieldCache sync.Map // reflect.Type → []fieldInfo

// structFields lists the serialised fields of a struct type, in declaration
// order.
func structFields(t reflect.Type) []fieldInfo {
	if v, ok := fieldCache.Load(t); ok {
		return v.([]fieldInfo)
	}
	var fields []fieldInfo
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		f := fieldInfo{
			name:      name,
			index:     i,
			typ:       sf.Type,
			omitEmpty: hasOption(opts, "omitempty"),
			doc:       sf.Tag.Get("doc"),
		}
		if e := sf.Tag.Get("enum"); e != "" {
			f.enum = strings.Split(e, ",")
		}
		fields = append(fields, f)
	}
	fieldCache.Store(t, fields)
	return fields
}

// fieldNames lists the json names of a struct type's fields.
func fieldNames(t reflect.Type) []string {
	fs := structFields(t)
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return names
}

// findField returns the field of t with the given json name.
func findField(t reflect.Type, name string) (fieldInfo, bool) {
	for _, f := range structFields(t) {
		if f.name == name {
			return f, true
		}
	}
	return fieldInfo{}, false
}

func hasOption(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if strings.TrimSpace(o) == want {
			return true
		}
	}
	return false
}
