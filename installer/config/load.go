package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sethvargo/go-envconfig"
)

// DefaultPath is the configuration file read when LoadOptions.Path is empty.
const DefaultPath = "onprem.yaml"

// LoadOptions says where the configuration comes from.
type LoadOptions struct {
	// Path of onprem.yaml; DefaultPath when empty.
	Path string
	// Lookup finds ONPREM_* environment variables; the process environment
	// when nil.
	Lookup envconfig.Lookuper
	// Overrides are the values given as flags.
	Overrides Overrides
	// Validate is passed to Validate.
	Validate ValidateOptions
}

// Load reads onprem.yaml strictly, applies the ONPREM_* environment
// variables, then the flags, resolves relative overlay folders against the
// file's folder, applies defaults and validates: flags win over the
// environment, which wins over the file, which wins over defaults.
//
// Problems with the configuration come back as Errors. The Source names the
// line of every field in the file and records which fields the environment or
// flags set.
func Load(ctx context.Context, opts LoadOptions) (*Installation, *Source, error) {
	path := opts.Path
	if path == "" {
		path = DefaultPath
	}
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}

	in, src, decodeErrs := decodeLenient(path, data)
	if in == nil {
		return nil, nil, decodeErrs
	}

	lookup := opts.Lookup
	if lookup == nil {
		lookup = envconfig.OsLookuper()
	}
	// A variable that cannot be parsed is reported with the file's other
	// problems, never instead of them.
	envErrs, err := applyEnvLenient(ctx, in, lookup)
	if err != nil {
		return nil, nil, err
	}
	decodeErrs = append(decodeErrs, envErrs...)
	for p, origin := range envOrigins(lookup) {
		src.setOrigin(p, origin)
	}

	opts.Overrides.Apply(in)
	for p, origin := range opts.Overrides.origins() {
		src.setOrigin(p, origin)
	}

	resolveOverlays(in, filepath.Dir(path))
	SetDefaults(in)
	vopts := opts.Validate
	vopts.OverlayFolders = true
	err = Validate(in, src, vopts)
	if len(decodeErrs) == 0 {
		if err != nil {
			return nil, nil, err
		}
		return in, src, nil
	}
	return nil, nil, mergeErrors(decodeErrs, err)
}

// readFile reads the configuration file. A path that is missing stays an
// fs.ErrNotExist; a folder, a file onprem may not read or one larger than
// MaxFileSize is a configuration error (Errors), read no further.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("configuration file %s does not exist: write a starter file with 'onprem config init', or give the path of yours: %w", path, err)
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, Errors{{File: path, Message: "cannot be read (permission denied): give onprem read access to it, or the path of a copy it can read"}}
	}
	if err != nil {
		// The path itself is wrong (too long, through a file, a loop of
		// links): the operator's to fix, like a missing file.
		reason := err
		var pe *fs.PathError
		if errors.As(err, &pe) {
			reason = pe.Err
		}
		return nil, Errors{{File: path, Message: fmt.Sprintf("cannot be opened (%v): give the path of the configuration file", reason)}}
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.IsDir() {
		return nil, Errors{{File: path, Message: "is a folder: give the path of the configuration file itself, e.g. " + filepath.Join(path, DefaultPath)}}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading configuration file %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, Errors{tooLarge(path)}
	}
	return data, nil
}

// mergeErrors adds validation problems to the decoding ones, leaving out
// those about a field that could not be decoded (it reads as missing to
// validation, which would only repeat the problem less clearly).
func mergeErrors(decodeErrs Errors, validateErr error) Errors {
	out := slices.Clone(decodeErrs)
	var verrs Errors
	if !errors.As(validateErr, &verrs) {
		return out
	}
	for _, v := range verrs {
		covered := false
		for _, d := range decodeErrs {
			if d.Path != "" && (v.Path == d.Path || strings.HasPrefix(v.Path, d.Path+".") || strings.HasPrefix(v.Path, d.Path+"[")) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, v)
		}
	}
	sortErrors(out)
	return out
}

// resolveOverlays makes relative overlay folders relative to dir (the folder
// of onprem.yaml) instead of the working directory.
func resolveOverlays(in *Installation, dir string) {
	for i, o := range in.Spec.Overlays {
		switch {
		case o == "":
			// Left for Validate to report.
		case filepath.IsAbs(o):
			in.Spec.Overlays[i] = filepath.Clean(o)
		default:
			in.Spec.Overlays[i] = filepath.Join(dir, o)
		}
	}
}
