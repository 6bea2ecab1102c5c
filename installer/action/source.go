// Package action is onprem's library API: one struct per verb, options as
// fields, and a Run method. The command layer (cmd/onprem) only fills these
// from flags; everything here is usable and tested without the CLI.
package action

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/sethvargo/go-envconfig"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
)

// Source says where an installation's configuration comes from.
type Source struct {
	// ConfigPath is onprem.yaml.
	ConfigPath string
	// Overrides are the flags that override the file and the environment.
	Overrides config.Overrides
	// Lookup reads ONPREM_* variables (default: the process environment).
	Lookup envconfig.Lookuper
	// Releases are the known releases (default: the embedded ones).
	Releases *release.Set
}

// Loaded is a read, defaulted and validated configuration with its release.
type Loaded struct {
	Installation *config.Installation
	Source       *config.Source
	Release      *release.Release
	Releases     *release.Set
}

// Load reads the configuration (file < env < flags, then defaults),
// validates it against the known releases, and picks its release.
func (s Source) Load(ctx context.Context) (*Loaded, error) {
	set := s.Releases
	if set == nil {
		var err error
		if set, err = release.Embedded(); err != nil {
			return nil, err
		}
	}
	lookup := s.Lookup
	if lookup == nil {
		lookup = envconfig.OsLookuper()
	}
	var components []string
	for _, r := range set.All() {
		for _, n := range r.ComponentNames() {
			if !slices.Contains(components, n) {
				components = append(components, n)
			}
		}
	}
	in, src, err := config.Load(ctx, config.LoadOptions{
		Path:      s.ConfigPath,
		Lookup:    lookup,
		Overrides: s.Overrides,
		Validate:  config.ValidateOptions{KnownVersions: set.Versions(), KnownComponents: components},
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, inputErr(err)
	}
	if err != nil {
		return nil, err
	}
	rel, err := set.Get(in.Spec.Version)
	if err != nil {
		return nil, fmt.Errorf("spec.version: %w", err)
	}
	return &Loaded{Installation: in, Source: src, Release: rel, Releases: set}, nil
}
