//go:build linux

package kindcluster

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCoreDNSCoversKubeadmsCorefile reads the Corefile that kubeadm of
// KubeVersion deploys (its template, from the module the harness builds
// kubeadm from) and checks that the cluster's CoreDNS links a plugin for
// every directive in it: a directive without its plugin would leave CoreDNS
// crash-looping in every kind cluster.
func TestCoreDNSCoversKubeadmsCorefile(t *testing.T) {
	b := &builder{dir: t.TempDir(), logf: t.Logf}
	info, err := b.download(context.Background(), kubeModule+"@"+KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(info.Dir, "cmd", "kubeadm", "app", "phases", "addons", "dns", "manifests.go"))
	if err != nil {
		t.Fatal(err)
	}
	directives := corefileDirectives(t, string(src))
	// kubeadm's own Corefile has these at least; fewer means the parse
	// went wrong, not that kubeadm changed.
	for _, d := range []string{"errors", "kubernetes", "forward", "cache"} {
		if !strings.Contains(" "+strings.Join(directives, " ")+" ", " "+d+" ") {
			t.Fatalf("read directives %v from kubeadm's Corefile: %s is missing, the template moved", directives, d)
		}
	}
	for _, d := range directives {
		if _, ok := corednsPlugins[d]; !ok {
			t.Errorf("kubeadm %s's Corefile uses %q, which the cluster's CoreDNS does not link: add it to corednsPlugins", KubeVersion, d)
		}
	}
	main := corednsMain()
	for d, pkg := range corednsPlugins {
		if !strings.Contains(main, `"`+corednsModule+"/plugin/"+pkg+`"`) {
			t.Errorf("the generated main does not import the %s plugin (directive %s)", pkg, d)
		}
	}
}

// corefileDirectives returns the directives of the server block of the
// Corefile in kubeadm's manifests.go, template actions removed.
func corefileDirectives(t *testing.T, src string) []string {
	t.Helper()
	i := strings.Index(src, "Corefile: |")
	if i < 0 {
		t.Fatal("kubeadm's manifests.go has no Corefile")
	}
	body := src[i+len("Corefile: |"):]
	if j := strings.Index(body, "`"); j >= 0 {
		body = body[:j]
	}
	action := regexp.MustCompile(`\{\{[^}]*\}\}`)
	var out []string
	depth := 0
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(action.ReplaceAllString(line, ""))
		if f := strings.Fields(line); depth == 1 && len(f) > 0 && f[0] != "{" && f[0] != "}" {
			out = append(out, f[0])
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
	}
	if len(out) == 0 {
		t.Fatalf("no directive found in kubeadm's Corefile:\n%s", body)
	}
	return out
}
