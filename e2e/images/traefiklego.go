//go:build linux

package images

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Traefik links lego's DNS providers (over 150 of them, each with its
// cloud's SDK) for the ACME DNS challenge: a third of the packages its
// command compiles. The ring's clusters are offline and never ask an ACME
// server, so the image is built against a copy of the locked lego module
// whose providers/dns package is ours and names none: 27 % less CPU for a
// cold build on the project's machine (598 to 435 CPU-seconds) and a
// binary of 140 MB instead of 178. Everything else in lego (the ACME
// client, the HTTP and TLS challenges) is upstream's.
const legoModule = "github.com/go-acme/lego/v4"

// legoDir is where the wrapper module keeps its copy of lego.
const legoDir = "lego"

// legoNoDNSProviders replaces lego's providers/dns in the copy: the one
// function Traefik calls, answering that the provider is not built in.
const legoNoDNSProviders = `// Written by onprem.dev/onprem/e2e/images in place of lego's DNS provider
// registry: this Traefik is built without DNS providers.
package dns

import (
	"fmt"

	"github.com/go-acme/lego/v4/challenge"
)

// NewDNSChallengeProviderByName always fails: no DNS provider is built in.
func NewDNSChallengeProviderByName(name string) (challenge.Provider, error) {
	return nil, fmt.Errorf("DNS challenge provider %q: this Traefik (onprem's offline test image) is built without lego's DNS providers", name)
}
`

// legoVersion is the lego version the locked go.mod requires.
func legoVersion(gomod string) (string, error) {
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == legoModule {
			return f[1], nil
		}
		if len(f) >= 3 && f[0] == "require" && f[1] == legoModule {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("traefik: the locked go.mod requires no %s", legoModule)
}

// trimLego copies the locked lego module from the module cache (downloading
// it through the proxy when missing) into src/lego, puts our providers/dns
// in it, and points the wrapper module's go.mod at the copy.
func (b *builder) trimLego(ctx context.Context, src string, env []string) error {
	version, err := legoVersion(traefikLockGoMod)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := b.run(ctx, "traefik", cmdOpts{dir: src, env: env, stdout: &out}, "go", "mod", "download", "-json", legoModule+"@"+version); err != nil {
		return fmt.Errorf("traefik: downloading %s@%s: %w", legoModule, version, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out.Bytes(), &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("traefik: go mod download of %s@%s named no folder (%v): %s %s", legoModule, version, err, mod.Error, strings.TrimSpace(out.String()))
	}
	dst := filepath.Join(src, legoDir)
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("traefik: %w", err)
	}
	if err := os.CopyFS(dst, os.DirFS(mod.Dir)); err != nil {
		return fmt.Errorf("traefik: copying %s into the wrapper module: %w", legoModule, err)
	}
	dns := filepath.Join(dst, "providers", "dns")
	old, err := filepath.Glob(filepath.Join(dns, "*.go"))
	if err != nil || len(old) == 0 {
		return fmt.Errorf("traefik: %s@%s has no providers/dns package to replace (%v)", legoModule, version, err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("traefik: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dns, "none.go"), []byte(legoNoDNSProviders), 0o644); err != nil {
		return fmt.Errorf("traefik: %w", err)
	}
	gomod := filepath.Join(src, "go.mod")
	f, err := os.OpenFile(gomod, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("traefik: %w", err)
	}
	if _, err := fmt.Fprintf(f, "\n// lego without its DNS providers (e2e/images/traefiklego.go).\nreplace %s => ./%s\n", legoModule, legoDir); err != nil {
		f.Close()
		return fmt.Errorf("traefik: %w", err)
	}
	return f.Close()
}
