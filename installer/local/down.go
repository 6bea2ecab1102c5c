package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
)

// Down deletes a local cluster made by Up, and the files Up wrote for it.
// It is idempotent: a cluster that is gone is not an error.
type Down struct {
	// Name is the kind cluster's name (DefaultName when empty).
	Name string
	// Dir is where Up wrote its files (DefaultDir() when empty).
	Dir string
	// Log receives progress (slog.Default() when nil).
	Log *slog.Logger

	connect connectFunc
}

// DownResult is what Down removed.
type DownResult struct {
	Cluster string `json:"cluster"`
	// Deleted is false when there was no such cluster (already gone).
	Deleted bool `json:"deleted"`
	// Removed are the files removed (kubeconfig, written onprem.yaml).
	Removed []string `json:"removedFiles,omitempty"`
}

// Run deletes the cluster and the files.
func (d *Down) Run(ctx context.Context) (*DownResult, error) {
	if d.Name == "" {
		d.Name = DefaultName
	}
	if !validName.MatchString(d.Name) {
		return nil, inputErr(fmt.Errorf("--name %q: not a cluster 'onprem local up' can have made (lower-case letters, digits and '-')", d.Name))
	}
	if d.Dir == "" {
		dir, err := DefaultDir()
		if err != nil {
			return nil, err
		}
		d.Dir = dir
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.connect == nil {
		d.connect = connectKind
	}
	prov, _, err := d.connect(ctx, d.Log)
	if err != nil {
		return nil, err
	}
	clusters, err := prov.List()
	if err != nil {
		return nil, fmt.Errorf("listing kind clusters: %w", err)
	}
	kubeconfig, generated := Paths(d.Dir, d.Name)
	res := &DownResult{Cluster: d.Name}
	if slices.Contains(clusters, d.Name) {
		d.Log.Info("local: deleting the kind cluster", "name", d.Name)
		// kind removes its entries from this kubeconfig only: the
		// operator's own is never touched.
		if err := prov.Delete(d.Name, kubeconfig); err != nil {
			return nil, fmt.Errorf("deleting the kind cluster %s: %w", d.Name, err)
		}
		res.Deleted = true
	}
	files := []string{kubeconfig, kubeconfig + ".lock"}
	// NAME.yaml only if Up wrote it (an operator's own file is left).
	if data, err := os.ReadFile(generated); err == nil && bytes.HasPrefix(data, []byte(generatedHeader)) {
		files = append(files, generated)
	}
	for _, f := range files {
		err := os.Remove(f)
		switch {
		case err == nil:
			if !strings.HasSuffix(f, ".lock") {
				res.Removed = append(res.Removed, f)
			}
		case !errors.Is(err, os.ErrNotExist):
			return res, fmt.Errorf("removing %s: %w", f, err)
		}
	}
	return res, nil
}
