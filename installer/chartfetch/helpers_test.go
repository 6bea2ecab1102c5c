package chartfetch_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"
)

// writeChart writes a small chart (Chart.yaml, values.yaml, a template)
// into dir/name and returns that folder.
func writeChart(t testing.TB, dir, name, version string) string {
	t.Helper()
	root := filepath.Join(dir, name)
	files := map[string]string{
		"Chart.yaml":                "apiVersion: v2\nname: " + name + "\nversion: " + version + "\ntype: application\ndescription: chartfetch test chart\n",
		"values.yaml":               "greeting: hello\n",
		"templates/configmap.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  version: " + version + "\n",
		"templates/NOTES.txt":       "installed " + name + " " + version + "\n",
		"templates/_helpers.tpl":    "{{- define \"x.name\" -}}" + name + "{{- end -}}\n",
		"files/config/settings.txt": "some = setting\n",
	}
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// packageChart builds the test chart at version and packages it with the
// Helm SDK; it returns the .tgz.
func packageChart(t testing.TB, name, version string) []byte {
	t.Helper()
	ch, err := loader.LoadDir(writeChart(t, t.TempDir(), name, version))
	if err != nil {
		t.Fatal(err)
	}
	p, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// server counts requests and, with a user, requires basic authentication.
type server struct {
	URL      string
	requests atomic.Int64
	// cert is the TLS server's certificate (nil: plain HTTP).
	cert *x509.Certificate
}

func (s *server) Requests() int64 { return s.requests.Load() }

func serve(t testing.TB, h http.Handler, user, password string, withTLS bool) *server {
	t.Helper()
	s := &server{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="chartfetch-test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	if withTLS {
		srv.StartTLS()
		s.cert = srv.Certificate()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// ociRegistry starts go-containerregistry's in-memory registry on loopback
// (plain HTTP), pushes each archive with the Helm registry client under
// charts/, and returns the server and the repository to fetch from
// (oci://127.0.0.1:PORT/charts).
func ociRegistry(t testing.TB, user, password string, archives ...[]byte) (*server, string) {
	t.Helper()
	s := serve(t, ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))), user, password, false)
	host := strings.TrimPrefix(s.URL, "http://")
	opts := []registry.ClientOption{registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard)}
	if user != "" {
		opts = append(opts, registry.ClientOptBasicAuth(user, password))
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range archives {
		ch, err := loader.LoadArchive(bytes.NewReader(a))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Push(a, host+"/charts/"+ch.Metadata.Name+":"+ch.Metadata.Version); err != nil {
			t.Fatalf("pushing %s %s: %v", ch.Metadata.Name, ch.Metadata.Version, err)
		}
	}
	s.requests.Store(0)
	return s, "oci://" + host + "/charts"
}

// helmRepo is a classic Helm repository: index.yaml and archives.
type helmRepo struct {
	*server
	mu    sync.Mutex
	files map[string][]byte
}

// set replaces (or adds) a file the repository serves.
func (r *helmRepo) set(name string, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.files[name] = data
}

// httpRepo serves the archives from a Helm repository on loopback under
// /charts, with an index.yaml made by the Helm SDK (archives under
// packages/, so that URLs are resolved against the repository).
func httpRepo(t testing.TB, user, password string, archives ...[]byte) *helmRepo {
	t.Helper()
	return helmRepository(t, user, password, false, archives...)
}

// helmRepository is httpRepo, over TLS with withTLS.
func helmRepository(t testing.TB, user, password string, withTLS bool, archives ...[]byte) *helmRepo {
	t.Helper()
	r := &helmRepo{files: map[string][]byte{}}
	r.server = serve(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		data, ok := r.files[strings.TrimPrefix(req.URL.Path, "/charts/")]
		r.mu.Unlock()
		if !ok {
			http.NotFound(w, req)
			return
		}
		_, _ = w.Write(data)
	}), user, password, withTLS)
	index := repo.NewIndexFile()
	for _, a := range archives {
		ch, err := loader.LoadArchive(bytes.NewReader(a))
		if err != nil {
			t.Fatal(err)
		}
		file := "packages/" + ch.Metadata.Name + "-" + ch.Metadata.Version + ".tgz"
		if err := index.MustAdd(ch.Metadata, file, "", strings.TrimPrefix(digestOf(a), "sha256:")); err != nil {
			t.Fatal(err)
		}
		r.files[file] = a
	}
	index.SortEntries()
	data, err := yaml.Marshal(index)
	if err != nil {
		t.Fatal(err)
	}
	r.files["index.yaml"] = data
	r.URL += "/charts"
	return r
}
