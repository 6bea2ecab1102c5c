package config

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/sethvargo/go-envconfig"
)

// EnvPrefix starts the name of every environment variable that overrides
// onprem.yaml.
const EnvPrefix = "ONPREM_"

// ApplyEnv overrides the installation with the ONPREM_* environment variables
// that lookup finds (the process environment when lookup is nil), read with
// go-envconfig from the env struct tags. An unset or empty variable leaves the
// file's value alone. Variables that cannot be parsed (for example
// ONPREM_REGISTRY_INSECURE=maybe) are all reported as Errors naming each
// variable and the field it sets, and then nothing is applied.
func ApplyEnv(ctx context.Context, in *Installation, lookup envconfig.Lookuper) error {
	if in == nil {
		return errors.New("applying environment variables: no installation")
	}
	if lookup == nil {
		lookup = envconfig.OsLookuper()
	}
	if _, bad := checkEnv(lookup); bad != nil {
		return bad
	}
	return applyEnv(ctx, in, lookup)
}

// applyEnvLenient applies the variables that can be parsed and reports the
// others as Errors (their fields keep the file's value), so that Load can
// report them with every other problem of the configuration.
func applyEnvLenient(ctx context.Context, in *Installation, lookup envconfig.Lookuper) (bad Errors, err error) {
	good, badErr := checkEnv(lookup)
	if err := applyEnv(ctx, in, good); err != nil {
		return nil, err
	}
	if badErr != nil {
		bad = badErr.(Errors)
	}
	return bad, nil
}

func applyEnv(ctx context.Context, in *Installation, lookup envconfig.Lookuper) error {
	rec := &recordingLookuper{l: lookup}
	err := envconfig.ProcessWith(ctx, &envconfig.Config{
		Target:   in,
		Lookuper: envconfig.PrefixLookuper(EnvPrefix, rec),
	})
	if err != nil {
		if rec.last != "" {
			return fmt.Errorf("applying environment variable %s: %w", rec.last, err)
		}
		return fmt.Errorf("applying %s* environment variables: %w", EnvPrefix, err)
	}
	return nil
}

// EnvVars lists every environment variable that overrides a field of
// onprem.yaml, in the order of the fields.
func EnvVars() []string {
	vars := envVarList()
	names := make([]string, len(vars))
	for i, v := range vars {
		names[i] = v.name
	}
	return names
}

// BoolSpellings are the values a boolean environment variable accepts
// (strconv.ParseBool's, which go-envconfig uses).
const BoolSpellings = "1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"

// checkEnv parses what go-envconfig would parse, so that every bad value is
// reported at once with the variable's name (go-envconfig stops at the first
// and names only the Go field). good is lookup without the bad variables.
func checkEnv(lookup envconfig.Lookuper) (good envconfig.Lookuper, bad error) {
	c := newCollector(nil)
	skip := map[string]bool{}
	for _, v := range envVarList() {
		val, ok := lookup.Lookup(v.name)
		if !ok || val == "" {
			continue
		}
		switch v.typ.Kind() {
		case reflect.Bool:
			if _, err := strconv.ParseBool(val); err != nil {
				c.add(v.path, "", "environment variable %s=%q is not a boolean (valid: %s)", v.name, val, BoolSpellings)
				skip[v.name] = true
			}
		case reflect.Int, reflect.Int64:
			if _, err := strconv.ParseInt(val, 0, 64); err != nil {
				c.add(v.path, "", "environment variable %s=%q is not a whole number", v.name, val)
				skip[v.name] = true
			}
		}
	}
	return skipLookuper{lookup, skip}, c.err()
}

// skipLookuper hides some variables of another Lookuper.
type skipLookuper struct {
	l    envconfig.Lookuper
	skip map[string]bool
}

func (s skipLookuper) Lookup(key string) (string, bool) {
	if s.skip[key] {
		return "", false
	}
	return s.l.Lookup(key)
}

// envOrigins maps the field path of every variable that is set (and not
// empty, and could be parsed) to its origin, for Source.
func envOrigins(lookup envconfig.Lookuper) map[string]string {
	lookup, _ = checkEnv(lookup)
	out := map[string]string{}
	for _, v := range envVarList() {
		if val, ok := lookup.Lookup(v.name); ok && val != "" {
			out[v.path] = "environment variable " + v.name
		}
	}
	return out
}

// envVar is one supported variable: its full name, the field path it sets
// and the field's type (pointers removed).
type envVar struct {
	name string
	path string
	typ  reflect.Type
}

var envVarList = sync.OnceValue(func() []envVar {
	var out []envVar
	collectEnvVars(installationType, EnvPrefix, "", &out)
	return out
})

// collectEnvVars follows go-envconfig's rules: it descends into every struct
// field, adding the field's prefix= option to the names below it, and a
// non-struct field with a key in its env tag is a variable.
func collectEnvVars(t reflect.Type, prefix, path string, out *[]envVar) {
	for _, f := range structFields(t) {
		sf := t.Field(f.index)
		key, opts, _ := strings.Cut(sf.Tag.Get("env"), ",")
		key = strings.TrimSpace(key)
		ft := sf.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		fpath := fieldPath(path, f.name)
		if ft.Kind() == reflect.Struct {
			sub := prefix
			for o := range strings.SplitSeq(opts, ",") {
				if p, ok := strings.CutPrefix(strings.TrimSpace(o), "prefix="); ok {
					sub += p
				}
			}
			collectEnvVars(ft, sub, fpath, out)
			continue
		}
		if key != "" {
			*out = append(*out, envVar{name: prefix + key, path: fpath, typ: ft})
		}
	}
}

// recordingLookuper remembers the last variable that was found, so that an
// error from go-envconfig can name it.
type recordingLookuper struct {
	l    envconfig.Lookuper
	last string
}

func (r *recordingLookuper) Lookup(key string) (string, bool) {
	v, ok := r.l.Lookup(key)
	if ok {
		r.last = key
	}
	return v, ok
}
