//go:build linux

package testservers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"onprem.dev/onprem/internal/fsutil"
)

// DistributionVersion is the release of the CNCF distribution registry
// (the registry:3 image's) that Distribution runs.
const DistributionVersion = "v3.0.0"

const distributionModule = "github.com/distribution/distribution/v3"

// DistributionServer is a running distribution registry.
type DistributionServer struct {
	// Host is "127.0.0.1:PORT" (plain HTTP).
	Host string
	// Dir holds the registry's storage (filesystem driver), its
	// configuration and its log.
	Dir string
	p   *process
}

// Stop stops the registry and removes its storage. It is also done in
// t.Cleanup; calling it earlier frees the disk space (benchmarks start
// many registries).
func (s *DistributionServer) Stop() {
	s.p.stop()
	_ = os.RemoveAll(s.Dir)
}

// Distribution starts the CNCF distribution registry (what the registry:3
// image runs, DistributionVersion) on a free loopback port, plain HTTP,
// without authentication, storing blobs on the filesystem in a temporary
// folder, configured as the image's stock config.yml (in-memory blob
// descriptor cache). It returns the host ("127.0.0.1:PORT") once /v2/
// answers, and stops it in t.Cleanup.
//
// Unlike go-containerregistry's in-memory registry (Registry), it stores
// blobs per repository (a blob of another repository must be mounted or
// uploaded again), writes them to disk and handles uploads in parallel:
// what a real private registry does.
//
// The binary is built from the Go module proxy the first time (about 45 s
// on 2 cores) into $ONPREM_CACHE/bin/registry-v3.0.0 (ONPREM_CACHE
// defaults to /var/cache/onprem), from a wrapper module in
// $ONPREM_CACHE/bin-src/distribution.
func Distribution(t testing.TB) string {
	t.Helper()
	return StartDistribution(t).Host
}

// StartDistribution is Distribution, returning the server so that it can
// be stopped before the test ends.
func StartDistribution(t testing.TB) *DistributionServer {
	t.Helper()
	return StartDistributionAt(t, "127.0.0.1")
}

// StartDistributionAt is StartDistribution listening on ip instead of
// loopback: the address of a docker network's gateway, for example, so
// that containers (kind nodes) can pull from it. Host is then "IP:PORT".
func StartDistributionAt(t testing.TB, ip string) *DistributionServer {
	t.Helper()
	bin, err := DistributionBinary(context.Background(), t.Logf)
	if err != nil {
		t.Fatalf("testservers: %v", err)
	}
	dir := t.TempDir()
	storage := filepath.Join(dir, "storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		t.Fatalf("testservers: distribution: %v", err)
	}
	host := net.JoinHostPort(ip, strconv.Itoa(FreePort(t)))
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: %s
  maintenance:
    uploadpurging:
      enabled: false
  tag:
    concurrencylimit: 8
http:
  addr: %s
  secret: %s
  headers:
    X-Content-Type-Options: [nosniff]
`, storage, host, hex.EncodeToString(secret))
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatalf("testservers: distribution: %v", err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Dir = dir
	// No OpenTelemetry exporter: it would try to reach a collector.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none", "OTEL_SDK_DISABLED=true")
	t0 := time.Now()
	p := start(t, "distribution", filepath.Join(dir, "registry.log"), cmd)
	client := &http.Client{Timeout: 2 * time.Second}
	waitReady(t, p, 30*time.Second, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		return nil
	})
	t.Logf("testservers: distribution %s at %s (started in %s)", DistributionVersion, host, time.Since(t0).Round(10*time.Millisecond))
	return &DistributionServer{Host: host, Dir: dir, p: p}
}

var distribution = &cachedBinary{what: "distribution", file: "registry-" + DistributionVersion, src: "distribution", version: DistributionVersion, build: buildDistribution}

func cacheRoot() string { return fsutil.CacheRoot() }

// DistributionBinary returns the path of the registry binary,
// $ONPREM_CACHE/bin/registry-<DistributionVersion>, building it first when
// it is missing. log (may be nil) receives progress.
func DistributionBinary(ctx context.Context, log func(string, ...any)) (string, error) {
	return distribution.get(ctx, log)
}

// distributionMain is the wrapper module's main: the registry command of
// distribution's cmd/registry with only the filesystem and in-memory
// storage drivers (the cloud drivers would triple the build), which is
// all the tests use.
const distributionMain = `// Command registry is the CNCF distribution registry, built from the Go
// module proxy by onprem.dev/onprem/e2e/testservers.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	// RootCmd exits with a non-zero code itself when serve fails.
	_ = registry.RootCmd.Execute()
}
`

// buildDistribution writes the wrapper module in src, resolves it through
// the module proxy and builds it to tmp.
func buildDistribution(ctx context.Context, src, tmp string) error {
	logPath := filepath.Join(src, "build.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	flagsOut, err := exec.CommandContext(ctx, "go", "env", "GOFLAGS").Output()
	if err != nil {
		return fmt.Errorf("go env GOFLAGS (the go command is needed): %w", err)
	}
	// The wrapper module is generated, never vendored: whatever -mod the
	// machine sets, it builds with -mod=mod.
	var flags []string
	for _, f := range strings.Fields(string(flagsOut)) {
		if !strings.HasPrefix(f, "-mod=") {
			flags = append(flags, f)
		}
	}
	env := append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off", "CGO_ENABLED=0",
		"GOFLAGS="+strings.TrimSpace(strings.Join(flags, " ")+" -mod=mod"))
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = src
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 10 * time.Second
		cmd.Stdout = logf
		cmd.Stderr = logf
		fmt.Fprintf(logf, "$ go %s\n", strings.Join(args, " "))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), src, err, tail(logPath, 30))
		}
		return nil
	}
	gomod := fmt.Sprintf("// Generated by onprem.dev/onprem/e2e/testservers: builds the distribution registry from the module proxy.\n"+
		"module onprem.dev/testservers/distribution\n\ngo 1.26.0\n\nrequire %s %s\n", distributionModule, DistributionVersion)
	_ = os.Remove(filepath.Join(src, "go.sum"))
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(distributionMain), 0o644); err != nil {
		return err
	}
	if err := run("mod", "tidy"); err != nil {
		return err
	}
	return run("build", "-trimpath", "-ldflags", "-s -w", "-o", tmp, ".")
}
