//go:build linux

package images

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// mainModule is this repository's module path.
const mainModule = "onprem.dev/onprem"

// goEnv is the environment of every go command here: static linux/amd64
// binaries, the machine's module and build caches, this Go toolchain.
var goEnv = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOTOOLCHAIN=local", "GOWORK=off"}

// moduleRoot is the folder of this repository's go.mod: found from this
// source file (tests and tools run from a checkout), else from the
// working folder.
func (b *builder) moduleRoot(ctx context.Context) (string, error) {
	b.modOnce.Do(func() {
		if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
			root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
			if data, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil && bytes.Contains(data, []byte("module "+mainModule+"\n")) {
				b.modRoot = root
				return
			}
		}
		out, err := output(ctx, "", nil, "go", "env", "GOMOD")
		if err != nil {
			b.modErr = fmt.Errorf("finding the %s module (the go command is needed): %w", mainModule, err)
			return
		}
		gomod := strings.TrimSpace(string(out))
		if gomod == "" || gomod == os.DevNull {
			b.modErr = fmt.Errorf("the Go programs of the images are built from the %s module: run from inside its checkout", mainModule)
			return
		}
		b.modRoot = filepath.Dir(gomod)
	})
	return b.modRoot, b.modErr
}

// goStamp is a hash of everything a build of pkgs depends on: the
// toolchain, the content of every file of this module's packages among the
// dependencies, and the version of every other module. It costs one
// `go list` (well under a second when Go's caches are warm), far less than
// a build.
func (b *builder) goStamp(ctx context.Context, pkgs ...string) (string, error) {
	root, err := b.moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	args := append([]string{"list", "-deps", "-json=ImportPath,Dir,GoFiles,EmbedFiles,Standard,Module,Error,DepsErrors"}, pkgs...)
	out, err := output(ctx, root, goEnv, "go", args...)
	if err != nil {
		return "", fmt.Errorf("listing the sources of %s: %w", strings.Join(pkgs, " "), err)
	}
	type module struct {
		Path, Version string
		Replace       *struct{ Path, Version string }
	}
	var parts []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath, Dir     string
			GoFiles, EmbedFiles []string
			Standard            bool
			Module              *module
			Error               *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("reading go list's output: %w", err)
		}
		if p.Error != nil {
			return "", fmt.Errorf("package %s: %s", p.ImportPath, p.Error.Err)
		}
		switch {
		case p.Standard:
			continue // covered by the toolchain version
		case p.Module != nil && p.Module.Path == mainModule:
			files := append(append([]string(nil), p.GoFiles...), p.EmbedFiles...)
			sort.Strings(files)
			for _, f := range files {
				h, err := fileHash(filepath.Join(p.Dir, f))
				if err != nil {
					return "", fmt.Errorf("hashing the sources of %s: %w", p.ImportPath, err)
				}
				parts = append(parts, p.ImportPath+"/"+f+"="+h)
			}
		case p.Module != nil:
			v := p.Module.Path + "@" + p.Module.Version
			if r := p.Module.Replace; r != nil {
				v += "=>" + r.Path + "@" + r.Version
			}
			parts = append(parts, p.ImportPath+" "+v)
		default:
			parts = append(parts, p.ImportPath)
		}
	}
	return hashOf(append([]string{runtime.Version(), strings.Join(goEnv, " ")}, parts...)...), nil
}

// goBuild builds the main package pkg of this module, static, into out.
// Without -trimpath, and with the environment the Makefile gives the tests
// (CGO_ENABLED=0), the packages compiled for the tests serve this build
// too: onprem's image is a link, not a compile of Kubernetes' and Helm's
// packages (17 minutes on 2 cores).
func (b *builder) goBuild(ctx context.Context, step, pkg, out string) error {
	root, err := b.moduleRoot(ctx)
	if err != nil {
		return err
	}
	return b.run(ctx, step, cmdOpts{dir: root, env: goEnv, nice: true},
		"go", "build", "-ldflags", "-s -w", "-o", out, pkg)
}

// goFlagsWithoutMod is GOFLAGS as the go command sees it, without any
// -mod flag (the wrapper modules need -mod=mod to write their go.sum).
func goFlagsWithoutMod(ctx context.Context) (string, error) {
	out, err := output(ctx, "", nil, "go", "env", "GOFLAGS")
	if err != nil {
		return "", fmt.Errorf("go env GOFLAGS (the go command is needed): %w", err)
	}
	var keep []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Split(bufio.ScanWords)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "-mod=") {
			keep = append(keep, sc.Text())
		}
	}
	return strings.Join(keep, " "), nil
}
