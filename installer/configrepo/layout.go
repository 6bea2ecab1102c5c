package configrepo

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/util"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The layout, relative to Remote.Path.
const (
	// ResourcesDir is the folder onprem manages.
	ResourcesDir = "resources"
	// ReadmeFile says what ResourcesDir is.
	ReadmeFile = ResourcesDir + "/README.md"
	// DesignationFile names the configuration runtime.
	DesignationFile = ResourcesDir + "/configuration/runtime.yaml"
)

// The designation's type.
const (
	APIVersion      = "onprem.dev/v1alpha1"
	DesignationKind = "ConfigurationRuntime"
)

const readme = `# resources

This folder is the configuration of the platform's GitOps runtimes. onprem
manages it: ` + "`onprem runtime install`" + ` creates it, and
` + "`onprem runtime designate-config NAME`" + ` changes which runtime is the
configuration runtime (configuration/runtime.yaml). Change it with onprem
rather than by hand.
`

// designation is the content of DesignationFile.
type designation struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Runtime    string `yaml:"runtime"`
}

func encodeDesignation(runtime string) []byte {
	return []byte("apiVersion: " + APIVersion + "\nkind: " + DesignationKind + "\nruntime: " + runtime + "\n")
}

// decodeDesignation reads a designation; file names it in errors.
func decodeDesignation(file string, data []byte) (string, error) {
	var d designation
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&d); err != nil {
		return "", fmt.Errorf("%s is not a valid designation: %w: fix it, or overwrite it with 'onprem runtime designate-config NAME'", file, err)
	}
	if d.APIVersion != APIVersion || d.Kind != DesignationKind {
		return "", fmt.Errorf("%s is not a designation (apiVersion %q, kind %q; want %s, %s): fix it, or overwrite it with 'onprem runtime designate-config NAME'", file, d.APIVersion, d.Kind, APIVersion, DesignationKind)
	}
	if err := checkRuntime(d.Runtime); err != nil {
		return "", fmt.Errorf("%s: %w: fix it, or overwrite it with 'onprem runtime designate-config NAME'", file, err)
	}
	return d.Runtime, nil
}

// checkRuntime checks a runtime's name (a DNS label, as runtimes are
// named).
func checkRuntime(name string) error {
	if name == "" {
		return errors.New("no runtime named: give the runtime's name")
	}
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return fmt.Errorf("runtime name %q: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}

// layout is the layout inside a worktree.
type layout struct {
	fs  billy.Filesystem
	dir string // Remote.Path, cleaned
}

func (l layout) path(rel string) string { return path.Join(l.dir, rel) }

// ensure creates what is missing of the layout and returns the paths it
// wrote. An existing README is kept as the operator left it.
func (l layout) ensure() ([]string, error) {
	for _, d := range []string{l.dir, l.path(ResourcesDir)} {
		if d == "" {
			continue
		}
		if fi, err := l.fs.Stat(d); err == nil && !fi.IsDir() {
			return nil, fmt.Errorf("%s is a file, where onprem keeps a folder: move it away, or choose another path", d)
		}
	}
	p := l.path(ReadmeFile)
	if _, err := l.fs.Lstat(p); err == nil {
		return nil, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if err := util.WriteFile(l.fs, p, []byte(readme), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", p, err)
	}
	return []string{p}, nil
}

// designated is the runtime the layout names, "" when none.
func (l layout) designated() (string, error) {
	p := l.path(DesignationFile)
	data, err := util.ReadFile(l.fs, p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	return decodeDesignation(p, data)
}

// designate writes the designation of runtime and returns the path.
func (l layout) designate(runtime string) (string, error) {
	p := l.path(DesignationFile)
	if fi, err := l.fs.Lstat(p); err == nil && fi.IsDir() {
		return "", fmt.Errorf("%s is a folder, where onprem keeps the designation file: move it away", p)
	}
	if err := util.WriteFile(l.fs, p, encodeDesignation(runtime), 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	return p, nil
}
