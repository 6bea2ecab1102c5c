package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"onprem.dev/onprem/installer/signing"
)

// ValidateOptions carries what validation cannot know by itself.
type ValidateOptions struct {
	// KnownVersions are the platform versions this installer can install;
	// when non-empty, spec.version must be one of them.
	KnownVersions []string
	// KnownComponents are the component names of the release; when
	// non-empty, every key of spec.components must be one of them.
	KnownComponents []string
	// OverlayFolders checks that each spec.overlays folder exists and
	// holds a valid kustomization (Load sets it: the paths are resolved
	// against the file's folder).
	OverlayFolders bool
	// CheckValues, when set, checks the components' Helm values
	// (spec.components.NAME.values) of the defaulted installation, e.g.
	// against their charts' schemas (render.CheckValues); each problem is
	// reported at its value's line.
	CheckValues func(in *Installation) []ValuesProblem
}

// ValuesProblem is a problem with a value of spec.components.NAME.values.
type ValuesProblem struct {
	Component string
	// Path is the value's place inside the component's values: keys, and
	// the indexes of lists as decimal numbers ("0").
	Path    []string
	Message string
	Hint    string
}

// Validate checks a defaulted installation (see SetDefaults) and returns
// every problem at once as Errors, or nil. Each problem names the field path,
// its line in the file when src knows it (else its origin, an environment
// variable or a flag), and what would be valid.
func Validate(in *Installation, src *Source, opts ValidateOptions) error {
	if in == nil {
		return Errors{{File: src.Filename(), Message: "no configuration to validate"}}
	}
	v := &validator{c: newCollector(src), opts: opts}
	v.lengths(reflect.ValueOf(in).Elem(), "")
	v.identity(in)
	v.enums(reflect.ValueOf(in).Elem(), "")
	s := &in.Spec
	v.core(s)
	v.tls(s)
	v.rotation(s)
	v.ingress(s)
	v.images(s)
	v.registry(s)
	v.storage(s)
	v.databases(s)
	v.modules(s)
	v.components(s)
	v.componentValues(in)
	v.overlays(s)
	v.placement(s)
	v.proxy(s)
	v.trust(s)
	v.runners(s)
	v.runtimes(s)
	v.runtimeConfig(s)
	v.backup(s)
	return v.c.err()
}

// validator collects the problems of one Validate call.
type validator struct {
	c    *collector
	opts ValidateOptions
}

// check records msg (with hint) at path unless msg is empty.
func (v *validator) check(path, msg, hint string) {
	if msg != "" {
		v.c.add(path, hint, "%s", msg)
	}
}

func (v *validator) required(path, what string) {
	v.c.add(path, "", "required: %s", what)
}

func (v *validator) identity(in *Installation) {
	switch in.APIVersion {
	case APIVersion:
	case "":
		v.required("apiVersion", "set apiVersion: "+APIVersion)
	default:
		v.c.add("apiVersion", "", "%q is not valid (valid: %s)", in.APIVersion, APIVersion)
	}
	switch in.Kind {
	case Kind:
	case "":
		v.required("kind", "set kind: "+Kind)
	default:
		v.c.add("kind", "", "%q is not valid (valid: %s)", in.Kind, Kind)
	}
	if in.Metadata.Name != "" {
		v.check("metadata.name", checkDNSLabel(in.Metadata.Name), "")
	}
}

// MaxValueLength is the longest value a field of onprem.yaml takes (Helm
// values aside): a path of the file system may be this long, and no name,
// URL or key comes near it.
const MaxValueLength = 4096

// lengths reports every value longer than MaxValueLength, wherever it is,
// and keeps every other check quiet about it: one short line says what is
// wrong, however large the value.
func (v *validator) lengths(rv reflect.Value, path string) {
	switch rv.Kind() {
	case reflect.String:
		if n := rv.Len(); n > MaxValueLength {
			v.c.add(path, "", "%q is too long: %d bytes, and no value of this field is longer than %d", rv.String(), n, MaxValueLength)
			v.c.quiet[path] = true
		}
	case reflect.Struct:
		for _, f := range structFields(rv.Type()) {
			v.lengths(rv.Field(f.index), fieldPath(path, f.name))
		}
	case reflect.Slice:
		for i := range rv.Len() {
			v.lengths(rv.Index(i), indexPath(path, i))
		}
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return
		}
		for _, k := range rv.MapKeys() {
			kpath := keyPath(path, k.String())
			if n := k.Len(); n > MaxValueLength {
				v.c.add(kpath, "", "the key %q is too long: %d bytes, and no key of this field is longer than %d", k.String(), n, MaxValueLength)
				v.c.quiet[kpath] = true
				continue
			}
			v.lengths(rv.MapIndex(k), kpath)
		}
	case reflect.Pointer:
		if !rv.IsNil() {
			v.lengths(rv.Elem(), path)
		}
	}
}

// enums checks every field that has an enum tag, wherever it is.
func (v *validator) enums(rv reflect.Value, path string) {
	switch rv.Kind() {
	case reflect.Struct:
		for _, f := range structFields(rv.Type()) {
			fv := rv.Field(f.index)
			fpath := fieldPath(path, f.name)
			if len(f.enum) > 0 && fv.Kind() == reflect.String {
				if s := fv.String(); s != "" && !slices.Contains(f.enum, s) {
					v.c.add(fpath, didYouMean(s, f.enum), "%q is not valid (valid: %s)", s, quoteList(f.enum))
				}
				continue
			}
			v.enums(fv, fpath)
		}
	case reflect.Slice:
		for i := range rv.Len() {
			v.enums(rv.Index(i), indexPath(path, i))
		}
	case reflect.Pointer:
		if !rv.IsNil() {
			v.enums(rv.Elem(), path)
		}
	}
}

func (v *validator) core(s *Spec) {
	switch {
	case s.Version == "" && len(v.opts.KnownVersions) > 0:
		v.required("spec.version", "the platform version to install (valid: "+quoteList(v.opts.KnownVersions)+")")
	case s.Version == "":
		v.required("spec.version", "the platform version to install ('onprem versions' lists them)")
	case len(v.opts.KnownVersions) > 0 && !slices.Contains(v.opts.KnownVersions, s.Version):
		v.c.add("spec.version", didYouMean(s.Version, v.opts.KnownVersions),
			"%q is not a version this installer knows (valid: %s)", s.Version, quoteList(v.opts.KnownVersions))
	}

	if s.Domain == "" {
		v.required("spec.domain", "the DNS name the platform is served under, e.g. ci.example.com")
	} else {
		msg, hint := checkDomain(s.Domain)
		v.check("spec.domain", msg, hint)
	}

	if s.Namespace != "" {
		v.check("spec.namespace", checkNamespace(s.Namespace, "the platform", DefaultNamespace), "")
	}
}

func (v *validator) modules(s *Spec) {
	pipelines := s.Modules.Pipelines.IsEnabled(true)
	gitops := s.Modules.GitOps.IsEnabled(true)
	if !pipelines && !gitops {
		v.c.add("spec.modules", "", "no module is enabled: enable at least one of pipelines, gitops")
	}
	if !pipelines && len(s.Runners) > 0 {
		v.c.add("spec.runners", "", "runners need the pipelines module: enable spec.modules.pipelines or remove the runners")
	}
	if !gitops && len(s.Runtimes) > 0 {
		v.c.add("spec.runtimes", "", "GitOps runtimes need the gitops module: enable spec.modules.gitops or remove the runtimes")
	}
}

func (v *validator) components(s *Spec) {
	names := make([]string, 0, len(s.Components))
	for name := range s.Components {
		names = append(names, name)
	}
	sort.Strings(names)
	known := v.opts.KnownComponents
	for _, name := range names {
		path := keyPath("spec.components", name)
		switch {
		case name == "":
			v.c.add(path, "", "a component name must not be empty ('onprem render' lists the components)")
		case len(known) > 0 && !slices.Contains(known, name):
			if hint := didYouMean(name, known); hint != "" {
				v.c.add(path, hint, "unknown component")
			} else {
				v.c.add(path, "", "unknown component (valid: %s)", quoteList(known))
			}
		}
	}
}

// componentValues reports what ValidateOptions.CheckValues finds, each at
// the line of its value.
func (v *validator) componentValues(in *Installation) {
	if v.opts.CheckValues == nil {
		return
	}
	for _, p := range v.opts.CheckValues(in) {
		path := keyPath("spec.components", p.Component) + ".values"
		var at any = in.Spec.Components[p.Component].Values
		for _, tok := range p.Path {
			if l, ok := at.([]any); ok {
				i, _ := strconv.Atoi(tok)
				path = indexPath(path, i)
				if i >= 0 && i < len(l) {
					at = l[i]
				}
				continue
			}
			path = keyPath(path, tok)
			m, _ := at.(map[string]any)
			at = m[tok]
		}
		v.c.add(path, p.Hint, "%s", p.Message)
	}
}

func (v *validator) overlays(s *Spec) {
	seen := map[string]int{}
	for i, o := range s.Overlays {
		path := indexPath("spec.overlays", i)
		if o == "" {
			v.c.add(path, "", "must not be empty: the path of a folder holding a kustomization.yaml of kind Component")
			continue
		}
		clean := filepath.Clean(o)
		if first, dup := seen[clean]; dup {
			v.c.add(path, "", "%q is listed twice (also spec.overlays[%d]): keep only one", o, first)
			continue
		}
		seen[clean] = i
		if !v.opts.OverlayFolders {
			continue
		}
		if msg := OverlayProblem(clean); msg != "" {
			v.c.add(path, "", "%s", msg)
		}
	}
}

func (v *validator) placement(s *Spec) {
	keys := make([]string, 0, len(s.Placement.NodeSelector))
	for k := range s.Placement.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		path := keyPath("spec.placement.nodeSelector", k)
		v.check(path, checkLabelKey(k), "")
		v.check(path, checkLabelValue(s.Placement.NodeSelector[k]), "")
	}

	for i, t := range s.Placement.Tolerations {
		path := indexPath("spec.placement.tolerations", i)
		switch t.Operator {
		case TolerationOpExists:
			if t.Value != "" {
				v.c.add(path+".value", "", "must be empty with operator Exists (Exists matches any value); use operator Equal to match %q", t.Value)
			}
		case TolerationOpEqual, "":
			if t.Key == "" {
				v.required(path+".key", "the taint key to tolerate (only operator Exists may leave it empty, to tolerate every taint)")
			}
		}
		if t.Key != "" {
			v.check(path+".key", checkLabelKey(t.Key), "")
		}
		if t.Value != "" {
			v.check(path+".value", checkLabelValue(t.Value), "")
		}
		if t.TolerationSeconds != nil && t.Effect != "NoExecute" {
			effect := "not set"
			if t.Effect != "" {
				effect = t.Effect
			}
			v.c.add(path+".tolerationSeconds", "", "only with effect NoExecute (effect is %s): set effect: NoExecute or remove it", effect)
		}
	}
}

func (v *validator) trust(s *Spec) {
	seen := map[string]int{}
	for i, k := range s.Trust {
		p := "spec.trust[" + strconv.Itoa(i) + "]"
		if strings.TrimSpace(k.Name) == "" {
			v.required(p+".name", "say whose key it is (e.g. platform team)")
		}
		if strings.TrimSpace(k.PublicKey) == "" {
			v.required(p+".publicKey", "the PEM text of bundle.pub ('onprem bundle keygen')")
			continue
		}
		pk, err := signing.ParsePublicKey([]byte(k.PublicKey))
		if err != nil {
			v.c.add(p+".publicKey", "give the PEM text of bundle.pub ('onprem bundle keygen') or of cosign.pub ('cosign generate-key-pair', ECDSA P-256), the line between its BEGIN and END lines, or the base64 of an ed25519 key's 32 bytes", "%v", err)
			continue
		}
		id := signing.KeyID(pk)
		if j, dup := seen[id]; dup {
			v.c.add(p+".publicKey", "remove one of them", "the same key as spec.trust[%d] (%s)", j, id)
		}
		seen[id] = i
	}
}

func (v *validator) proxy(s *Spec) {
	if p := s.Proxy.HTTPProxy; p != "" {
		msg, hint := checkHTTPURL(p, "http", "http://proxy.internal:3128")
		v.check("spec.proxy.httpProxy", msg, hint)
	}
	if p := s.Proxy.HTTPSProxy; p != "" {
		msg, hint := checkHTTPURL(p, "http", "http://proxy.internal:3128")
		v.check("spec.proxy.httpsProxy", msg, hint)
	}
}

// TrustedKeys reads spec.trust into a keyring (Validate reports a key
// that does not parse; here it is an error naming the entry).
func (s *Spec) TrustedKeys() (signing.Keyring, error) {
	var ring signing.Keyring
	for i, k := range s.Trust {
		key, err := signing.ParseKey(k.Name, fmt.Sprintf("spec.trust[%d]", i), k.PublicKey)
		if err != nil {
			return nil, err
		}
		ring = ring.With(key)
	}
	return ring, nil
}
