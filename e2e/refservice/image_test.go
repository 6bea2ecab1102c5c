package refservice

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// The image holds a working static binary as its entrypoint, run as the
// service chart's user.
func TestImageRunsTheProgram(t *testing.T) {
	img, err := Image(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Entrypoint[0] != "/refservice" || cf.Config.User != "10001:10001" || cf.OS != "linux" {
		t.Errorf("config = %+v", cf.Config)
	}
	dir := t.TempDir()
	tr := tar.NewReader(mutate.Extract(img))
	found := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "refservice" {
			found = true
			f, err := os.OpenFile(filepath.Join(dir, "refservice"), os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	if !found {
		t.Fatal("no /refservice in the image")
	}
	// With no environment it says what is missing and exits 2.
	cmd := exec.Command(filepath.Join(dir, "refservice"))
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "ONPREM_SERVICE") {
		t.Errorf("run: %v\n%s", err, out)
	}
}
