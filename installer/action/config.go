package action

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

// ConfigInit writes a commented starter onprem.yaml.
type ConfigInit struct {
	// Path of the file to write.
	Path string
	// Version of the platform (default: the newest known release).
	Version string
	// Force overwrites an existing file.
	Force bool
}

// Run writes the file, atomically: a crash leaves the old file or the new
// one, never half of one.
func (c *ConfigInit) Run() error {
	if c.Path == "" {
		return errors.New("a path to write is required")
	}
	set, err := release.Embedded()
	if err != nil {
		return err
	}
	v := c.Version
	if v == "" {
		v = set.Latest().Version
	} else if _, err := set.Get(v); err != nil {
		return err
	}
	if !c.Force {
		if _, err := os.Stat(c.Path); err == nil {
			return fmt.Errorf("%s already exists; use --force to overwrite it", c.Path)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("checking %s: %w", c.Path, err)
		}
	}
	return WriteFileAtomic(c.Path, config.Starter(v), 0o644)
}

// ConfigValidate reads and validates a configuration.
type ConfigValidate struct {
	Source
}

// Run validates and returns the defaulted installation. The operator's
// overlays are checked by rendering the platform with them: a patch that
// does not apply, a target that selects nothing, a pod they make that the
// platform's namespace refuses are configuration errors like the file's.
func (c *ConfigValidate) Run(ctx context.Context) (*Loaded, error) {
	l, err := c.Source.Load(ctx)
	if err != nil || len(l.Installation.Spec.Overlays) == 0 {
		return l, err
	}
	if _, err := render.Render(ctx, l.RenderOptions(nil)); err != nil {
		l.Close()
		return nil, renderError(err, l.Source)
	}
	return l, nil
}

// renderError classifies an error of render.Render: the operator's
// overlays' problems as configuration errors at their line, other input
// errors (--set, values) as InputError, the rest as they are.
func renderError(err error, src *config.Source) error {
	if ce, ok := render.AsConfigErrors(err, src); ok {
		return ce
	}
	if render.IsInputError(err) {
		return inputErr(err)
	}
	return err
}

// WriteFileAtomic writes data to path through a temporary file in the same
// folder and a rename.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
