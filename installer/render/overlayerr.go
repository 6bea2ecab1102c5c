package render

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/charts"
)

// OverlayError is a patch of an operator's overlay (spec.overlays) that
// does not apply: it names the folder and file, the patch's index, the
// object it was applied to, and a hint. It is a configuration error.
type OverlayError struct {
	// Index is the overlay's index in spec.overlays, Dir its folder and
	// File its kustomization's name.
	Index int
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
// requires): a command exits 2 for it.
func IsInputError(err error) bool {
	var se *SetError
	var oe *OverlayError
	var ce *CheckError
	var re *RuntimeInputError
	var me *charts.MissingDependencyError
	return errors.As(err, &se) || errors.As(err, &oe) || errors.As(err, &ce) || errors.As(err, &re) || errors.As(err, &me)
}

// overlayPatch is one patch of an operator's overlay.
type overlayPatch struct {
	index  int
	text   string
	target *patchTarget
}

type patchTarget struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// LabelSelector and AnnotationSelector select by labels: such a
	// target is not checked by name.
	LabelSelector      string `json:"labelSelector"`
	AnnotationSelector string `json:"annotationSelector"`
}

func (t *patchTarget) String() string {
	if t.Name == "" {
		return t.Kind
	}
	return t.Kind + "/" + t.Name
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
	var k struct {
		Patches []struct {
			Path   string       `json:"path"`
			Patch  string       `json:"patch"`
			Target *patchTarget `json:"target"`
		} `json:"patches"`
		PatchesJSON6902 []struct {
			Path   string       `json:"path"`
			Patch  string       `json:"patch"`
			Target *patchTarget `json:"target"`
		} `json:"patchesJson6902"`
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
	for _, p := range k.Patches {
		text, err := read(p.Path, p.Patch)
		if err != nil {
			return file, nil, err
		}
		out = append(out, overlayPatch{index: len(out), text: text, target: p.Target})
	}
	for _, p := range k.PatchesJSON6902 {
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

// selected returns the objects a patch applies to: by its target, else (a
// strategic-merge patch) by the kind and name of the object it holds.
func (p overlayPatch) selected(objs []*unstructured.Unstructured) (*patchTarget, []*unstructured.Unstructured, error) {
	t := p.target
	if t == nil {
		var m struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(p.text), &m); err != nil || m.Kind == "" {
			return nil, nil, nil
		}
		t = &patchTarget{Kind: m.Kind, Name: m.Metadata.Name}
	}
	if t.Name == "" || t.LabelSelector != "" || t.AnnotationSelector != "" {
		return t, nil, nil
	}
	re, err := regexp.Compile("^(?:" + t.Name + ")$")
	if err != nil {
		return t, nil, fmt.Errorf("target name %q is not a valid regular expression: %w", t.Name, err)
	}
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if (t.Kind == "" || o.GetKind() == t.Kind) && re.MatchString(o.GetName()) {
			out = append(out, o)
		}
	}
	return t, out, nil
}

// isJSONPatch says whether a patch is a list of RFC 6902 operations.
func isJSONPatch(text string) bool {
	var ops []map[string]any
	return yaml.Unmarshal([]byte(text), &ops) == nil && len(ops) > 0 && ops[0]["op"] != nil
}

// checkOverlayTargets reports the first patch of an operator's overlay
// whose target names objects the platform does not have (kustomize
// applies such a patch to nothing, silently). objs are the rendered
// objects.
func checkOverlayTargets(overlays []string, objs []*unstructured.Unstructured) error {
	for i, dir := range overlays {
		if err := checkTargets(i, dir, objs); err != nil {
			return err
		}
	}
	return nil
}

// checkTargets checks the patches of the overlay spec.overlays[i].
func checkTargets(i int, dir string, objs []*unstructured.Unstructured) error {
	file, patches, err := overlayPatches(dir)
	if err != nil {
		return &OverlayError{Index: i, Dir: dir, File: file, Patch: -1, Err: err}
	}
	for _, p := range patches {
		t, matched, err := p.selected(objs)
		if err != nil {
			return &OverlayError{Index: i, Dir: dir, File: file, Patch: p.index, Err: err}
		}
		// Jobs are the upgrade's tasks (migrations, backups), rendered
		// only with the step that runs them: not checked here.
		if t != nil && t.Name != "" && t.Kind != "Job" && t.LabelSelector == "" && t.AnnotationSelector == "" && len(matched) == 0 {
			return &OverlayError{Index: i, Dir: dir, File: file, Patch: p.index, Target: t.String(),
				Err:  errors.New("matches no object of the platform"),
				Hint: "'onprem render' lists every object by kind and name; a target's name is the object's own (e.g. Deployment gitops-api)"}
		}
	}
	return nil
}

// userOverlayPath finds the in-memory folder of an operator's overlay in
// a kustomize error.
var userOverlayPath = regexp.MustCompile(`/user/(\d+)`)

// overlayFailure turns kustomize's error about an operator's overlay into
// an OverlayError: the JSON patches of that overlay are applied one by one
// to the objects they select to find which one fails; the error names the
// folder instead of kustomize's in-memory paths either way. nil when the
// error is not about an operator's overlay.
func overlayFailure(kerr error, overlays []string, objs []*unstructured.Unstructured) error {
	m := userOverlayPath.FindStringSubmatch(kerr.Error())
	if m == nil {
		return nil
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= len(overlays) {
		return nil
	}
	dir := overlays[i]
	file, patches, err := overlayPatches(dir)
	if err == nil {
		for _, p := range patches {
			if !isJSONPatch(p.text) {
				continue
			}
			_, matched, _ := p.selected(objs)
			ops, err := yaml.YAMLToJSON([]byte(p.text))
			if err != nil {
				continue
			}
			patch, err := jsonpatch.DecodePatch(ops)
			if err != nil {
				return &OverlayError{Index: i, Dir: dir, File: file, Patch: p.index, Err: fmt.Errorf("not a JSON patch: %w", err)}
			}
			for _, o := range matched {
				doc, err := o.MarshalJSON()
				if err != nil {
					continue
				}
				if _, err := patch.Apply(doc); err != nil {
					return &OverlayError{Index: i, Dir: dir, File: file, Patch: p.index, Target: o.GetKind() + "/" + o.GetName(), Err: err,
						Hint: "an 'add' needs its parent to exist: add the parent as a map first (path: .../annotations, value: {key: value}), or use a strategic-merge patch; 'onprem render --component NAME' shows the object as it is"}
				}
			}
		}
	}
	if err := checkTargets(i, dir, objs); err != nil {
		return err
	}
	// Kustomize's message, with the folder for its in-memory path and
	// without its accumulation wrappers.
	msg := kerr.Error()
	if k := strings.LastIndex(msg, "'/user/"+m[1]+"': "); k >= 0 {
		msg = msg[k+len("'/user/"+m[1]+"': "):]
	}
	msg = strings.TrimSuffix(strings.ReplaceAll(msg, "/user/"+m[1], dir), `"`)
	return &OverlayError{Index: i, Dir: dir, File: file, Patch: -1, Err: errors.New(strings.ReplaceAll(msg, `\"`, `"`)),
		Hint: "'onprem render --component NAME' shows the objects the patches apply to"}
}
