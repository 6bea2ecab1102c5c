package chartfetch_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/chartfetch"
	"onprem.dev/onprem/installer/release"
)

const chartName = "gitops-runtime"

// checkArchive checks that a is the archive want, loaded as chartName at
// version.
func checkArchive(t *testing.T, a *chartfetch.Archive, want []byte, version string) {
	t.Helper()
	if !bytes.Equal(a.Data, want) {
		t.Errorf("archive differs from the one served (%d bytes, want %d)", len(a.Data), len(want))
	}
	if a.Digest != digestOf(want) {
		t.Errorf("digest %s, want %s", a.Digest, digestOf(want))
	}
	if a.Chart == nil || a.Chart.Metadata.Name != chartName || a.Chart.Metadata.Version != version {
		t.Fatalf("chart %+v", a.Chart)
	}
	if len(a.Chart.Templates) != 3 {
		t.Errorf("chart has %d templates, want 3", len(a.Chart.Templates))
	}
}

func TestFetchOCI(t *testing.T) {
	v1, v2 := packageChart(t, chartName, "0.25.0"), packageChart(t, chartName, "0.26.0")
	srv, repo := ociRegistry(t, "", "", v1, v2)
	src := chartfetch.Source{Repository: repo, Chart: chartName, Version: "0.26.0", Digest: digestOf(v2)}
	a, err := chartfetch.Fetch(context.Background(), src, chartfetch.Options{PlainHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	checkArchive(t, a, v2, "0.26.0")
	if srv.Requests() == 0 {
		t.Error("no request reached the registry")
	}

	// Without plain HTTP, the registry's answer is explained.
	_, err = chartfetch.Fetch(context.Background(), src, chartfetch.Options{Timeout: 20 * time.Second})
	if !errors.Is(err, chartfetch.ErrUnreachable) || !strings.Contains(err.Error(), "plain HTTP") {
		t.Errorf("TLS to a plain-HTTP registry: %v", err)
	}
}

func TestFetchHTTP(t *testing.T) {
	v1, v2 := packageChart(t, chartName, "0.25.0"), packageChart(t, chartName, "0.26.0")
	r := httpRepo(t, "", "", v1, v2)
	a, err := chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: r.URL, Chart: chartName, Version: "0.25.0"}, chartfetch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkArchive(t, a, v1, "0.25.0")
	// A trailing slash on the repository is the same repository.
	a, err = chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: r.URL + "/", Chart: chartName, Version: "0.26.0", Digest: digestOf(v2)}, chartfetch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkArchive(t, a, v2, "0.26.0")

	// The files of the archive make a chart tree that loads.
	files, err := a.Files()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	dir := t.TempDir()
	for _, f := range files {
		names = append(names, f.Name)
		p := filepath.Join(dir, chartName, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"Chart.yaml", "files/config/settings.txt", "templates/NOTES.txt", "templates/_helpers.tpl", "templates/configmap.yaml", "values.yaml"}
	if !slices.Equal(names, want) {
		t.Errorf("files %v, want %v", names, want)
	}
	ch, err := charts.LoadFrom(os.DirFS(dir), chartName)
	if err != nil || ch.Metadata.Version != "0.26.0" || len(ch.Files) != 1 {
		t.Errorf("the unpacked chart: %v %+v", err, ch)
	}
}

func TestFetchHTTPOverTLSWithCAFile(t *testing.T) {
	v1 := packageChart(t, chartName, "0.25.0")
	r := helmRepository(t, "", "", true, v1)
	src := chartfetch.Source{Repository: r.URL, Chart: chartName, Version: "0.25.0"}

	_, err := chartfetch.Fetch(context.Background(), src, chartfetch.Options{})
	if !errors.Is(err, chartfetch.ErrUnreachable) || !strings.Contains(err.Error(), "CA certificate") || !strings.Contains(err.Error(), r.URL+"/index.yaml") {
		t.Errorf("unknown CA: %v", err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.cert.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := chartfetch.Fetch(context.Background(), src, chartfetch.Options{CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	checkArchive(t, a, v1, "0.25.0")
	if _, err := chartfetch.Fetch(context.Background(), src, chartfetch.Options{InsecureSkipTLSVerify: true}); err != nil {
		t.Errorf("without TLS verification: %v", err)
	}
	if _, err := chartfetch.Fetch(context.Background(), src, chartfetch.Options{CAFile: filepath.Join(t.TempDir(), "missing.pem")}); !errors.Is(err, chartfetch.ErrInvalidSource) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing CA file: %v", err)
	}
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Error(err)
	}
	return buf.Bytes()
}

func TestFetchAuth(t *testing.T) {
	v1 := packageChart(t, chartName, "0.25.0")
	_, ociRepo := ociRegistry(t, "robot", "s3cret", v1)
	web := httpRepo(t, "robot", "s3cret", v1)
	for _, tc := range []struct {
		kind string
		repo string
		opts chartfetch.Options
	}{
		{"oci", ociRepo, chartfetch.Options{PlainHTTP: true}},
		{"http", web.URL, chartfetch.Options{}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			src := chartfetch.Source{Repository: tc.repo, Chart: chartName, Version: "0.25.0"}
			for name, creds := range map[string][2]string{"none": {}, "wrong password": {"robot", "guess"}} {
				o := tc.opts
				o.Username, o.Password = creds[0], creds[1]
				_, err := chartfetch.Fetch(context.Background(), src, o)
				var fe *chartfetch.Error
				if !errors.Is(err, chartfetch.ErrAuth) || !errors.As(err, &fe) || fe.Repository != tc.repo {
					t.Fatalf("%s: err = %v, want ErrAuth", name, err)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.repo) || !strings.Contains(msg, "check the credentials") || strings.Contains(msg, "guess") {
					t.Errorf("%s: message %q", name, msg)
				}
			}
			o := tc.opts
			o.Username, o.Password = "robot", "s3cret"
			a, err := chartfetch.Fetch(context.Background(), src, o)
			if err != nil {
				t.Fatal(err)
			}
			checkArchive(t, a, v1, "0.25.0")
		})
	}

	// Credentials from a docker config.json (OCI).
	cfg := filepath.Join(t.TempDir(), "config.json")
	host := strings.TrimSuffix(strings.TrimPrefix(ociRepo, "oci://"), "/charts")
	if err := os.WriteFile(cfg, []byte(`{"auths":{"`+host+`":{"auth":"cm9ib3Q6czNjcmV0"}}}`), 0o600); err != nil { // robot:s3cret
		t.Fatal(err)
	}
	a, err := chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: ociRepo, Chart: chartName, Version: "0.25.0"}, chartfetch.Options{PlainHTTP: true, RegistryConfig: cfg})
	if err != nil {
		t.Fatalf("with a registry config: %v", err)
	}
	checkArchive(t, a, v1, "0.25.0")
}

func TestFetchUnknownVersionListsAvailable(t *testing.T) {
	v1, v2 := packageChart(t, chartName, "0.25.0"), packageChart(t, chartName, "0.26.0")
	web := httpRepo(t, "", "", v1, v2)
	_, ociRepo := ociRegistry(t, "", "", v1, v2)
	for _, tc := range []struct {
		repo string
		opts chartfetch.Options
	}{{web.URL, chartfetch.Options{}}, {ociRepo, chartfetch.Options{PlainHTTP: true}}} {
		_, err := chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: tc.repo, Chart: chartName, Version: "0.27.0"}, tc.opts)
		var fe *chartfetch.Error
		if !errors.Is(err, chartfetch.ErrNotFound) || !errors.As(err, &fe) {
			t.Fatalf("%s: err = %v, want ErrNotFound", tc.repo, err)
		}
		if !slices.Equal(fe.Available, []string{"0.26.0", "0.25.0"}) || !strings.Contains(err.Error(), "0.27.0") || !strings.Contains(err.Error(), "versions 0.26.0, 0.25.0") || !strings.Contains(err.Error(), tc.repo) {
			t.Errorf("%s: %v (available %v)", tc.repo, err, fe.Available)
		}
	}

	// A chart the index does not have at all.
	_, err := chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: web.URL, Chart: "argo-cd", Version: "1.0.0"}, chartfetch.Options{})
	if !errors.Is(err, chartfetch.ErrNotFound) || !strings.Contains(err.Error(), "no chart named argo-cd") {
		t.Errorf("unknown chart: %v", err)
	}
	// A URL that is not a Helm repository.
	_, err = chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: web.URL + "/nothing", Chart: chartName, Version: "0.25.0"}, chartfetch.Options{})
	if !errors.Is(err, chartfetch.ErrNotFound) || !strings.Contains(err.Error(), "no index.yaml") {
		t.Errorf("not a repository: %v", err)
	}
}

func TestFetchDigestMismatchIsRefused(t *testing.T) {
	v1, other := packageChart(t, chartName, "0.25.0"), packageChart(t, "other", "0.25.0")
	web := httpRepo(t, "", "", v1)
	_, ociRepo := ociRegistry(t, "", "", v1)
	cache := t.TempDir()
	pinned := digestOf(other)
	for _, tc := range []struct {
		repo string
		opts chartfetch.Options
	}{{web.URL, chartfetch.Options{CacheDir: cache}}, {ociRepo, chartfetch.Options{PlainHTTP: true, CacheDir: cache}}} {
		_, err := chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: tc.repo, Chart: chartName, Version: "0.25.0", Digest: pinned}, tc.opts)
		var fe *chartfetch.Error
		if !errors.Is(err, chartfetch.ErrDigestMismatch) || !errors.As(err, &fe) || fe.Want != pinned || fe.Got != digestOf(v1) {
			t.Fatalf("%s: err = %v, want ErrDigestMismatch", tc.repo, err)
		}
		if msg := err.Error(); !strings.Contains(msg, pinned) || !strings.Contains(msg, digestOf(v1)) || !strings.Contains(msg, "refused") {
			t.Errorf("message %q", msg)
		}
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("a refused archive was cached: %v", entries)
	}

	// Unpinned, an HTTP repository's index digest is checked.
	tampered := append(slices.Clip(v1), 0) // one byte more: another digest
	web.set("packages/"+chartName+"-0.25.0.tgz", tampered)
	_, err := chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: web.URL, Chart: chartName, Version: "0.25.0"}, chartfetch.Options{})
	if !errors.Is(err, chartfetch.ErrDigestMismatch) || !strings.Contains(err.Error(), "index.yaml") {
		t.Errorf("index digest: %v", err)
	}
}

func TestFetchInvalidOrWrongChart(t *testing.T) {
	v1, v2 := packageChart(t, chartName, "0.25.0"), packageChart(t, chartName, "0.26.0")
	web := httpRepo(t, "", "", v1, v2)
	// Served with digests that match, so that only the content is wrong.
	web.set("index.yaml", bytes.ReplaceAll(readFile(t, web, "index.yaml"), []byte(strings.TrimPrefix(digestOf(v1), "sha256:")), []byte(strings.TrimPrefix(digestOf(v2), "sha256:"))))
	web.set("packages/"+chartName+"-0.25.0.tgz", v2)
	_, err := chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: web.URL, Chart: chartName, Version: "0.25.0"}, chartfetch.Options{})
	var fe *chartfetch.Error
	if !errors.Is(err, chartfetch.ErrWrongChart) || !errors.As(err, &fe) || fe.Got != chartName+" 0.26.0" || !strings.Contains(err.Error(), "asked for "+chartName+" 0.25.0") {
		t.Errorf("wrong version: %v", err)
	}

	garbage := []byte("<html>not a chart</html>")
	web.set("packages/"+chartName+"-0.26.0.tgz", garbage)
	_, err = chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: web.URL, Chart: chartName, Version: "0.26.0", Digest: digestOf(garbage)}, chartfetch.Options{})
	if !errors.Is(err, chartfetch.ErrInvalidChart) || !strings.Contains(err.Error(), "not a valid chart") {
		t.Errorf("garbage archive: %v", err)
	}

	web.set("index.yaml", []byte("entries: [this is not an index"))
	_, err = chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: web.URL, Chart: chartName, Version: "0.26.0"}, chartfetch.Options{})
	if !errors.Is(err, chartfetch.ErrInvalidChart) || !strings.Contains(err.Error(), "index.yaml is not a valid repository index") {
		t.Errorf("bad index: %v", err)
	}
}

func readFile(t *testing.T, r *helmRepo, name string) []byte {
	t.Helper()
	resp, err := http.Get(r.URL + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return readAll(t, resp)
}

func TestFetchUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, repo := range []string{"http://" + addr + "/charts", "oci://" + addr + "/charts"} {
		_, err := chartfetch.Fetch(context.Background(), chartfetch.Source{Repository: repo, Chart: chartName, Version: "0.25.0"}, chartfetch.Options{PlainHTTP: true})
		var fe *chartfetch.Error
		if !errors.Is(err, chartfetch.ErrUnreachable) || !errors.As(err, &fe) || !strings.Contains(err.Error(), repo) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%s: %v", repo, err)
		}
	}
}

// hanging answers nothing until the client goes away; started receives
// one value per request.
func hanging(t *testing.T) (string, chan struct{}) {
	started := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), started
}

func TestFetchCancelledAndTimeout(t *testing.T) {
	for _, scheme := range []string{"http", "oci"} {
		t.Run(scheme, func(t *testing.T) {
			host, started := hanging(t)
			src := chartfetch.Source{Repository: scheme + "://" + host + "/charts", Chart: chartName, Version: "0.25.0"}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := chartfetch.Fetch(ctx, src, chartfetch.Options{PlainHTTP: true})
				done <- err
			}()
			<-started
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) || errors.Is(err, chartfetch.ErrUnreachable) {
					t.Errorf("cancelled: err = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Fetch did not return after the context was cancelled")
			}

			start := time.Now()
			_, err := chartfetch.Fetch(context.Background(), src, chartfetch.Options{PlainHTTP: true, Timeout: 300 * time.Millisecond})
			if !errors.Is(err, chartfetch.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 300ms") {
				t.Errorf("timeout: err = %v", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("timeout took %s", d)
			}
		})
	}
}

func TestFetchCacheReuse(t *testing.T) {
	v1 := packageChart(t, chartName, "0.25.0")
	web := httpRepo(t, "", "", v1)
	oci, ociRepo := ociRegistry(t, "", "", v1)
	for _, tc := range []struct {
		srv  interface{ Requests() int64 }
		repo string
	}{{web, web.URL}, {oci, ociRepo}} {
		cache := filepath.Join(t.TempDir(), "charts")
		o := chartfetch.Options{CacheDir: cache, PlainHTTP: true}
		src := chartfetch.Source{Repository: tc.repo, Chart: chartName, Version: "0.25.0", Digest: digestOf(v1)}
		if _, err := chartfetch.Fetch(context.Background(), src, o); err != nil {
			t.Fatal(err)
		}
		first := tc.srv.Requests()
		if first == 0 {
			t.Fatal("the first fetch made no request")
		}
		entries, err := os.ReadDir(cache)
		if err != nil || len(entries) != 1 || !strings.HasSuffix(entries[0].Name(), ".tgz") || strings.HasPrefix(entries[0].Name(), ".") {
			t.Fatalf("cache holds %v (%v), want one archive and no temporary file", entries, err)
		}
		a, err := chartfetch.Fetch(context.Background(), src, o)
		if err != nil {
			t.Fatal(err)
		}
		if n := tc.srv.Requests(); n != first {
			t.Errorf("%s: the second fetch made %d requests, want none", tc.repo, n-first)
		}
		checkArchive(t, a, v1, "0.25.0")

		// A damaged cache entry is fetched again (and repaired).
		file := filepath.Join(cache, entries[0].Name())
		if err := os.WriteFile(file, []byte("damaged"), 0o644); err != nil {
			t.Fatal(err)
		}
		if a, err = chartfetch.Fetch(context.Background(), src, o); err != nil {
			t.Fatal(err)
		}
		checkArchive(t, a, v1, "0.25.0")
		if tc.srv.Requests() == first {
			t.Errorf("%s: a damaged cache entry was used", tc.repo)
		}
		if data, _ := os.ReadFile(file); !bytes.Equal(data, v1) {
			t.Errorf("%s: the cache entry was not repaired", tc.repo)
		}

		// Another pin: the cached archive is not used, the repository's is
		// refused.
		src.Digest = digestOf([]byte("other"))
		before := tc.srv.Requests()
		if _, err := chartfetch.Fetch(context.Background(), src, o); !errors.Is(err, chartfetch.ErrDigestMismatch) {
			t.Errorf("%s: another pin: %v", tc.repo, err)
		}
		if tc.srv.Requests() == before {
			t.Errorf("%s: a cached archive that does not match the pin was used", tc.repo)
		}
	}
}

func TestResolvePrefersTheLocalTree(t *testing.T) {
	v1, v2 := packageChart(t, chartName, "0.25.0"), packageChart(t, chartName, "0.26.0")
	oci, repo := ociRegistry(t, "", "", v1, v2)
	local := t.TempDir()
	writeChart(t, local, chartName, "0.25.0")
	writeChart(t, local, "unrelated", "1.0.0")
	ctx := context.Background()
	o := chartfetch.Options{PlainHTTP: true}

	ch, err := chartfetch.Resolve(ctx, chartfetch.Source{Repository: repo, Chart: chartName, Version: "0.25.0", Digest: digestOf(v1)}, os.DirFS(local), o)
	if err != nil || ch.Metadata.Version != "0.25.0" {
		t.Fatalf("local: %v %+v", err, ch)
	}
	if n := oci.Requests(); n != 0 {
		t.Errorf("the local chart was fetched anyway (%d requests)", n)
	}
	// Another version: fetched.
	ch, err = chartfetch.Resolve(ctx, chartfetch.Source{Repository: repo, Chart: chartName, Version: "0.26.0"}, os.DirFS(local), o)
	if err != nil || ch.Metadata.Version != "0.26.0" || oci.Requests() == 0 {
		t.Fatalf("other version: %v %+v (%d requests)", err, ch, oci.Requests())
	}
	// No local tree: fetched.
	ch, err = chartfetch.Resolve(ctx, chartfetch.Source{Repository: repo, Chart: chartName, Version: "0.25.0"}, nil, o)
	if err != nil || ch.Metadata.Version != "0.25.0" {
		t.Fatalf("no local tree: %v %+v", err, ch)
	}
	// A broken local copy is an error, not a reason to fetch.
	if err := os.WriteFile(filepath.Join(local, chartName, "Chart.yaml"), []byte("name: [broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := oci.Requests()
	if _, err := chartfetch.Resolve(ctx, chartfetch.Source{Repository: repo, Chart: chartName, Version: "0.25.0"}, os.DirFS(local), o); !errors.Is(err, chartfetch.ErrInvalidChart) {
		t.Errorf("broken local copy: %v", err)
	}
	if oci.Requests() != before {
		t.Error("a broken local copy sent Resolve to the network")
	}
}

func TestSourceChecks(t *testing.T) {
	good := chartfetch.Source{Repository: "oci://registry.example.com/charts", Chart: chartName, Version: "0.25.0"}
	for name, mutate := range map[string]func(*chartfetch.Source){
		"no chart":        func(s *chartfetch.Source) { s.Chart = "" },
		"path in name":    func(s *chartfetch.Source) { s.Chart = "../x" },
		"no version":      func(s *chartfetch.Source) { s.Version = "" },
		"bad version":     func(s *chartfetch.Source) { s.Version = "1.0/../x" },
		"bad digest":      func(s *chartfetch.Source) { s.Digest = "sha256:abc" },
		"no repository":   func(s *chartfetch.Source) { s.Repository = "" },
		"git repository":  func(s *chartfetch.Source) { s.Repository = "git://example.com/charts" },
		"no host":         func(s *chartfetch.Source) { s.Repository = "oci:///charts" },
		"oci with a tag":  func(s *chartfetch.Source) { s.Repository = "oci://registry.example.com/charts:1.0" },
		"bare repository": func(s *chartfetch.Source) { s.Repository = "registry.example.com/charts" },
	} {
		src := good
		mutate(&src)
		if _, err := chartfetch.Fetch(context.Background(), src, chartfetch.Options{}); !errors.Is(err, chartfetch.ErrInvalidSource) {
			t.Errorf("%s: err = %v, want ErrInvalidSource", name, err)
		}
		if _, err := chartfetch.Resolve(context.Background(), src, os.DirFS(t.TempDir()), chartfetch.Options{}); !errors.Is(err, chartfetch.ErrInvalidSource) {
			t.Errorf("%s: Resolve: err = %v, want ErrInvalidSource", name, err)
		}
	}
	if s := chartfetch.FromRelease(nil); s != (chartfetch.Source{}) {
		t.Errorf("FromRelease(nil) = %+v", s)
	}
	rc := &release.RemoteChart{Chart: chartName, ChartVersion: "0.25.0", Repository: "oci://r.example.com/c", Digest: "sha256:" + strings.Repeat("a", 64)}
	if s := chartfetch.FromRelease(rc); s != (chartfetch.Source{Repository: rc.Repository, Chart: rc.Chart, Version: rc.ChartVersion, Digest: rc.Digest}) {
		t.Errorf("FromRelease = %+v", s)
	}
}
