package render

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/quote"
)

// OverlayError is a patch of an operator's overlay (spec.overlays) that
// does not apply: it names the folder and file, the patch's index, the
// object it was applied to, and a hint. It is a configuration error.
type OverlayError struct {
	// Index is the overlay's index in spec.overlays, Dir its folder and
	// File its kustomization's name.
	Index int // -1: not known which one
	Dir   string
	File  string
	// Patch is the patch's index in the kustomization's patches (-1: not
	// known), Target the object (Kind/name) it was applied to.
	Patch  int
	Target string
	Err    error
	Hint   string
}

func (e *OverlayError) Error() string {
	where := fmt.Sprintf("spec.overlays[%d] (%s)", e.Index, filepath.Join(e.Dir, e.File))
	if e.Index < 0 {
		where = "spec.overlays" // not known which one
	}
	if e.Patch >= 0 {
		where += fmt.Sprintf(" patches[%d]", e.Patch)
	}
	if e.Target != "" {
		where += " on " + e.Target
	}
	msg := where + ": " + e.Err.Error()
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func (e *OverlayError) Unwrap() error { return e.Err }

// IsInputError says whether a Render error is the operator's to fix in
// what they gave (--set, an overlay, a chart package, a value a chart
// requires, values that spec.availability refuses): a command exits 2
// for it.
func IsInputError(err error) bool {
	var se *SetError
	var oe *OverlayError
	var ve *ValuesError
	var ae *AvailabilityError
	var ce *CheckError
	var re *RuntimeInputError
	var me *charts.MissingDependencyError
	if errors.As(err, &ve) && ve.Origin == "values" {
		return false // onprem's own values: a bug, not the operator's
	}
	return errors.As(err, &se) || errors.As(err, &oe) || errors.As(err, &ve) || errors.As(err, &ae) ||
		errors.As(err, &ce) || errors.As(err, &re) || errors.As(err, &me)
}

// OverlayErrors is every problem found in the operator's overlays, in
// the order of spec.overlays and of each one's patches.
type OverlayErrors []*OverlayError

func (es OverlayErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap gives errors.As each problem.
func (es OverlayErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// orNil is es as an error, nil when empty.
func (es OverlayErrors) orNil() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// overlayPatch is one patch of an operator's overlay.
type overlayPatch struct {
	index int
	text  string
	// target selects the objects, as kustomize reads it; nil for a
	// strategic-merge patch without one (it names its object itself).
	target *types.Selector
}

// targetString names a target in a message: Kind/name, or the selector.
func targetString(t *types.Selector) string {
	var parts []string
	kind := t.Kind
	if kind == "" {
		kind = "any kind"
	}
	if t.Name != "" {
		kind += "/" + t.Name
	}
	parts = append(parts, kind)
	if t.Group != "" || t.Version != "" {
		parts = append(parts, "group/version "+t.Group+"/"+t.Version)
	}
	if t.Namespace != "" {
		parts = append(parts, "namespace "+t.Namespace)
	}
	if t.LabelSelector != "" {
		parts = append(parts, "labelSelector "+strconv.Quote(t.LabelSelector))
	}
	if t.AnnotationSelector != "" {
		parts = append(parts, "annotationSelector "+strconv.Quote(t.AnnotationSelector))
	}
	return quote.Text(strings.Join(parts, ", "))
}

// overlayPatches reads the patches of the overlay in dir (patches,
// patchesJson6902, patchesStrategicMerge, in that order of index).
func overlayPatches(dir string) (file string, out []overlayPatch, err error) {
	for _, n := range kustomizationFiles {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			file = n
			break
		}
	}
	if file == "" {
		return "", nil, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return file, nil, err
	}
	type entry struct {
		Path   string          `json:"path"`
		Patch  string          `json:"patch"`
		Target *types.Selector `json:"target"`
	}
	var k struct {
		Patches               []entry  `json:"patches"`
		PatchesJSON6902       []entry  `json:"patchesJson6902"`
		PatchesStrategicMerge []string `json:"patchesStrategicMerge"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return file, nil, err
	}
	read := func(path, inline string) (string, error) {
		if path == "" {
			return inline, nil
		}
		b, err := os.ReadFile(filepath.Join(dir, path))
		return string(b), err
	}
	for _, p := range append(k.Patches, k.PatchesJSON6902...) {
		text, err := read(p.Path, p.Patch)
		if err != nil {
			return file, nil, err
		}
		out = append(out, overlayPatch{index: len(out), text: text, target: p.Target})
	}
	for _, p := range k.PatchesStrategicMerge {
		text := p
		if !strings.Contains(p, "\n") {
			if text, err = read(p, ""); err != nil {
				return file, nil, err
			}
		}
		out = append(out, overlayPatch{index: len(out), text: text})
	}
	return file, out, nil
}

// selector is what the patch applies to: its target, else (a
// strategic-merge patch) the kind and name of the object it holds; nil
// when the patch says neither.
func (p overlayPatch) selector() *types.Selector {
	if p.target != nil {
		return p.target
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(p.text), &m); err != nil || m.Kind == "" {
		return nil
	}
	sel := &types.Selector{}
	sel.Kind, sel.Name, sel.Namespace = m.Kind, m.Metadata.Name, m.Metadata.Namespace
	return sel
}

// isJSONPatch says whether a patch is a list of RFC 6902 operations.
func isJSONPatch(text string) bool {
	var ops []map[string]any
	return yaml.Unmarshal([]byte(text), &ops) == nil && len(ops) > 0 && ops[0]["op"] != nil
}

// selectIn is what kustomize's own selection picks in each of sets, all
// together (a target's regular expressions, label and annotation
// selectors, group, version, kind, name and namespace).
func selectIn(sel types.Selector, sets ...resmap.ResMap) ([]*resource.Resource, error) {
	var out []*resource.Resource
	for _, m := range sets {
		if m == nil {
			continue
		}
		got, err := m.Select(sel)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// checkOverlayTargets reports every patch of the operator's overlays
// whose target selects no object: kustomize applies such a patch to
// nothing, silently, whether it selects by name, kind, labels,
// annotations or namespace. seen are the objects as the overlays receive
// them (in no namespace yet: the namespace is set after them), patched
// the same after the overlays (which holds what they add).
func checkOverlayTargets(overlays []string, seen, patched resmap.ResMap) OverlayErrors {
	var errs OverlayErrors
	for i, dir := range overlays {
		errs = append(errs, checkTargets(i, dir, seen, patched)...)
	}
	return errs
}

// checkTargets checks the patches of the overlay spec.overlays[i].
func checkTargets(i int, dir string, seen, patched resmap.ResMap) OverlayErrors {
	file, patches, err := overlayPatches(dir)
	if err != nil {
		return OverlayErrors{{Index: i, Dir: dir, File: file, Patch: -1, Err: err}}
	}
	var errs OverlayErrors
	for _, p := range patches {
		sel := p.selector()
		// Jobs are the upgrade's tasks (migrations, backups), rendered
		// only with the step that runs them: not checked here.
		if sel == nil || sel.Kind == "Job" {
			continue
		}
		matched, err := selectIn(*sel, seen, patched)
		if err != nil {
			errs = append(errs, &OverlayError{Index: i, Dir: dir, File: file, Patch: p.index, Target: targetString(sel), Err: err,
				Hint: "a target's name and namespace are regular expressions, its labelSelector and annotationSelector Kubernetes label selectors"})
			continue
		}
		if len(matched) > 0 {
			continue
		}
		e := &OverlayError{Index: i, Dir: dir, File: file, Patch: p.index, Target: targetString(sel), Err: errors.New("matches no object of the platform")}
		switch {
		case sel.Namespace != "":
			e.Hint = "the overlays run before onprem puts the objects in their namespace, so a target's namespace matches none of them: leave namespace out of the target"
		case sel.LabelSelector != "" || sel.AnnotationSelector != "":
			e.Hint = "'onprem render' shows every object's labels and annotations; every object has onprem.dev/component=<component>"
		default:
			e.Hint = "'onprem render' lists every object by kind and name; a target's name is the object's own (e.g. Deployment gitops-api)"
		}
		errs = append(errs, e)
	}
	return errs
}

// userOverlayPath finds the in-memory folder of an operator's overlay in
// a kustomize error.
var userOverlayPath = regexp.MustCompile(`/user/(\d+)`)

// overlayFailure turns kustomize's error about the operator's overlays into
// OverlayErrors: the JSON patches of every overlay are applied one by one to
// the objects they select in seen (the objects as the overlays receive
// them) to find each one that fails, and every target that selects
// nothing is named too; when none of that explains the error, kustomize's
// own message is given with the folder instead of its in-memory paths.
func overlayFailure(kerr error, overlays []string, seen resmap.ResMap) error {
	var errs OverlayErrors
	for i, dir := range overlays {
		errs = append(errs, failingPatches(i, dir, seen)...)
		errs = append(errs, checkTargets(i, dir, seen, nil)...)
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *OverlayError) int {
			return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Patch, b.Patch))
		})
		return errs
	}
	m := userOverlayPath.FindStringSubmatch(kerr.Error())
	if m == nil {
		return fmt.Errorf("post-render (kustomize): %w", kerr)
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= len(overlays) {
		return fmt.Errorf("post-render (kustomize): %w", kerr)
	}
	dir := overlays[i]
	file, _, _ := overlayPatches(dir)
	// Kustomize's message, with the folder for its in-memory path and
	// without its accumulation wrappers.
	msg := kerr.Error()
	if k := strings.LastIndex(msg, "'/user/"+m[1]+"': "); k >= 0 {
		msg = msg[k+len("'/user/"+m[1]+"': "):]
	}
	msg = strings.TrimSuffix(strings.ReplaceAll(msg, "/user/"+m[1], dir), `"`)
	return OverlayErrors{{Index: i, Dir: dir, File: file, Patch: -1, Err: errors.New(strings.ReplaceAll(msg, `\"`, `"`)),
		Hint: "'onprem render --component NAME' shows the objects the patches apply to"}}
}

// failingPatches applies each JSON patch of the overlay spec.overlays[i]
// to each object it selects in seen, and reports those that do not apply.
func failingPatches(i int, dir string, seen resmap.ResMap) OverlayErrors {
	file, patches, err := overlayPatches(dir)
	if err != nil {
		return OverlayErrors{{Index: i, Dir: dir, File: file, Patch: -1, Err: err}}
	}
	var errs OverlayErrors
	for _, p := range patches {
		if !isJSONPatch(p.text) {
			continue
		}
		ops, err := yaml.YAMLToJSON([]byte(p.text))
		if err != nil {
			continue
		}
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			errs = append(errs, &OverlayError{Index: i, Dir: dir, File: file, Patch: p.index, Err: fmt.Errorf("not a JSON patch: %w", err)})
			continue
		}
		sel := p.selector()
		if sel == nil {
			continue
		}
		matched, _ := selectIn(*sel, seen)
		for _, o := range matched {
			doc, err := o.MarshalJSON()
			if err != nil {
				continue
			}
			if _, err := patch.Apply(doc); err != nil {
				errs = append(errs, &OverlayError{Index: i, Dir: dir, File: file, Patch: p.index, Target: o.GetKind() + "/" + o.GetName(), Err: err,
					Hint: "an 'add' needs its parent to exist: add the parent as a map first (path: .../annotations, value: {key: value}), or use a strategic-merge patch; 'onprem render --component NAME' shows the object as it is"})
				break
			}
		}
	}
	return errs
}

// AsConfigErrors turns the overlay problems of a Render error into
// configuration errors at spec.overlays[i] and its line in the file (src),
// so that they read like every other problem of onprem.yaml. ok is false
// when err holds no overlay problem.
func AsConfigErrors(err error, src *config.Source) (errs config.Errors, ok bool) {
	var oes OverlayErrors
	var one *OverlayError
	switch {
	case errors.As(err, &oes):
	case errors.As(err, &one):
		oes = OverlayErrors{one}
	default:
		return nil, false
	}
	for _, e := range oes {
		path := "spec.overlays"
		if e.Index >= 0 {
			path = fmt.Sprintf("spec.overlays[%d]", e.Index)
		}
		msg := strings.TrimPrefix(strings.TrimPrefix(e.Error(), path), " ")
		errs = append(errs, config.FieldError{File: src.Filename(), Line: src.Line(path), Path: path, Message: msg})
	}
	return errs, true
}
