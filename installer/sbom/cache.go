package sbom

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/internal/fsutil"
)

// scannerVersion names what ScanLayer finds; a change to it gets a
// folder of its own in a LayerCache, so that an older scan is not reused.
const scannerVersion = "v1"

// LayerCache keeps what ScanLayer found in a layer, by the layer's
// digest: a layer's content never changes, so a layer that several images
// or releases share is scanned once per machine.
type LayerCache struct {
	// Dir is the cache folder (created when needed).
	Dir string
}

// DefaultLayerCache is the cache in the user's cache folder
// (~/.cache/onprem/sbom-layers); the zero LayerCache when there is none.
func DefaultLayerCache() LayerCache {
	d, err := os.UserCacheDir()
	if err != nil {
		return LayerCache{}
	}
	return LayerCache{Dir: filepath.Join(d, "onprem", "sbom-layers")}
}

// cachedLayer is a Layer as stored: build info as its text form
// (runtime/debug's String, which ParseBuildInfo reads back).
type cachedLayer struct {
	Files   map[string]cachedFile `json:"files"`
	Deleted []string              `json:"deleted,omitempty"`
	Opaque  []string              `json:"opaque,omitempty"`
	Notes   []string              `json:"notes,omitempty"`
}

type cachedFile struct {
	Data []byte `json:"data,omitempty"`
	Go   string `json:"go,omitempty"`
	// GoVersion is kept apart: ParseBuildInfo does not read it back.
	GoVersion  string `json:"goVersion,omitempty"`
	Executable bool   `json:"executable,omitempty"`
}

func (c LayerCache) path(d v1.Hash) string {
	return filepath.Join(c.Dir, scannerVersion, d.Algorithm+"-"+d.Hex+".json")
}

// Get returns the scan of layer d, if the cache has it. A damaged entry is
// a miss (it is scanned again and replaced).
func (c LayerCache) Get(d v1.Hash) (*Layer, bool) {
	if c.Dir == "" {
		return nil, false
	}
	data, err := os.ReadFile(c.path(d))
	if err != nil {
		return nil, false
	}
	var cl cachedLayer
	if err := json.Unmarshal(data, &cl); err != nil {
		return nil, false
	}
	l := &Layer{Files: map[string]*File{}, Deleted: cl.Deleted, Opaque: cl.Opaque, Notes: cl.Notes}
	for p, f := range cl.Files {
		lf := &File{Data: f.Data, Executable: f.Executable}
		if f.Go != "" {
			bi, err := debug.ParseBuildInfo(f.Go)
			if err != nil {
				return nil, false
			}
			bi.GoVersion = f.GoVersion
			lf.Go = bi
		}
		l.Files[p] = lf
	}
	return l, true
}

// Put stores the scan of layer d (no-op without a Dir).
func (c LayerCache) Put(d v1.Hash, l *Layer) error {
	if c.Dir == "" || l == nil {
		return nil
	}
	cl := cachedLayer{Files: map[string]cachedFile{}, Deleted: l.Deleted, Opaque: l.Opaque, Notes: l.Notes}
	for p, f := range l.Files {
		cf := cachedFile{Data: f.Data, Executable: f.Executable}
		if f.Go != nil {
			cf.Go, cf.GoVersion = f.Go.String(), f.Go.GoVersion
		}
		cl.Files[p] = cf
	}
	data, err := json.Marshal(cl)
	if err != nil {
		return fmt.Errorf("sbom layer cache: %w", err)
	}
	p := c.path(d)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("sbom layer cache: %w", err)
	}
	if err := fsutil.WriteFileAtomic(p, data, 0o644); err != nil {
		return fmt.Errorf("sbom layer cache: %w", err)
	}
	return nil
}
