package render

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/filesys"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/gitops/gitopstest"
	"onprem.dev/onprem/internal/fsutil"
)

// BenchmarkRenderPlatform renders the whole platform for the default
// configuration in-process: every chart with the Helm SDK, then the
// kustomize post-render.
func BenchmarkRenderPlatform(b *testing.B) {
	in, rel := load(b, "minimal")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(ctx, Options{Installation: in, Release: rel}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderRuntimeUpstream renders a GitOps runtime from the real
// published chart (the newest shipped release's), with the platform's CA:
// Helm's engine with onprem's faster deepCopy (charts.templateFuncs; the
// chart copies its whole context in many templates), then the post-render.
func BenchmarkRenderRuntimeUpstream(b *testing.B) {
	rts := shippedRuntimes(b)
	rel := rts[len(rts)-1].release
	mode := upstreamModeNamed(b, "self-signed-ca")
	in, _ := load(b, "minimal")
	in.Spec.Version = rel.Version
	in.Spec.RuntimeConfig.Repository = config.GitRepository{URL: "https://git.example.com/platform/gitops.git", Branch: "main"}
	in.Spec.RuntimeConfig.AccountID = "64f0c1d2e3a4b5c6d7e8f901"
	rt, err := RuntimeDefaults(config.Runtime{Name: "edge"})
	if err != nil {
		b.Fatal(err)
	}
	o := RuntimeOptions{Installation: in, Release: rel, Runtime: rt, Chart: gitopstest.Upstream(b, rel.Runtime.ChartVersion)}
	mode.set(in, &o)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RenderRuntime(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderPlatformCLI does the same work the way a script would:
// `helm template` per component with the same values, then `kustomize
// build` over the same kustomize tree, as separate processes. The tools are
// built from the Go module proxy into $ONPREM_CACHE/bin when missing.
func BenchmarkRenderPlatformCLI(b *testing.B) {
	helm := tool(b, "helm", "helm.sh/helm/v4/cmd/helm@v4.3.1")
	kustomize := tool(b, "kustomize", "sigs.k8s.io/kustomize/kustomize/v5@v5.8.2")
	in, rel := load(b, "minimal")
	st, err := renderCharts(context.Background(), Options{Installation: in, Release: rel})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	// The charts, the values of every component, and the kustomize tree.
	if err := os.CopyFS(filepath.Join(dir, "charts"), st.opts.Charts); err != nil {
		b.Fatal(err)
	}
	// The library chart (file://../common) into the charts/ of each chart
	// that declares it, as `helm dependency build` would put it there.
	if err := vendorLibraries(st.opts.Charts, filepath.Join(dir, "charts")); err != nil {
		b.Fatal(err)
	}
	mem, err := st.post.tree(st.objects)
	if err != nil {
		b.Fatal(err)
	}
	if err := exportTree(mem, filepath.Join(dir, "tree")); err != nil {
		b.Fatal(err)
	}
	for _, p := range st.planned {
		data, err := json.Marshal(st.values[p.Name])
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.Name+".values.json"), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	root := filepath.Join(dir, "tree", kustomizeRoot)
	b.ResetTimer()
	for b.Loop() {
		var stream bytes.Buffer
		for _, p := range st.planned {
			cmd := exec.Command(helm, "template", p.Name, filepath.Join(dir, "charts", p.Chart),
				"--namespace", in.Spec.Namespace, "-f", filepath.Join(dir, p.Name+".values.json"))
			cmd.Stdout = &stream
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				b.Fatalf("helm template %s: %v\n%s", p.Name, err, stderr.String())
			}
			stream.WriteString("\n---\n")
		}
		if err := os.WriteFile(filepath.Join(root, "resources.yaml"), stream.Bytes(), 0o644); err != nil {
			b.Fatal(err)
		}
		out, err := exec.Command(kustomize, "build", root).CombinedOutput()
		if err != nil {
			b.Fatalf("kustomize build: %v\n%s", err, out)
		}
	}
}

// vendorLibraries copies into dir/CHART/charts/ the library charts that
// charts.LoadFrom attaches to each chart of fsys (the sibling folders its
// Chart.yaml names with file://../), so that the helm command finds them.
func vendorLibraries(fsys fs.FS, dir string) error {
	names, err := charts.NamesIn(fsys)
	if err != nil {
		return err
	}
	for _, n := range names {
		ch, err := charts.LoadFrom(fsys, n)
		if err != nil {
			return err
		}
		for _, d := range ch.Metadata.Dependencies {
			folder, ok := strings.CutPrefix(d.Repository, "file://../")
			if !ok {
				continue
			}
			sub, err := fs.Sub(fsys, folder)
			if err != nil {
				return err
			}
			if err := os.CopyFS(filepath.Join(dir, n, "charts", d.Name), sub); err != nil {
				return err
			}
		}
	}
	return nil
}

// exportTree writes an in-memory kustomize tree to disk under dir.
func exportTree(mem filesys.FileSystem, dir string) error {
	return mem.Walk("/", func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, p)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := mem.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// tool returns the path of a command-line tool in $ONPREM_CACHE/bin,
// building it with `go install pkg@version` first when it is missing.
func tool(b *testing.B, name, pkg string) string {
	b.Helper()
	bin := filepath.Join(fsutil.CacheRoot(), "bin")
	path := filepath.Join(bin, name)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	b.Logf("building %s into %s (once; cached afterwards)", pkg, bin)
	cmd := exec.Command("go", "install", pkg)
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	return path
}
