package sbom

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// A layer's scan read back from the cache makes the same inventory as the
// scan itself: packages, Go modules with their versions, whiteouts.
func TestLayerCacheRoundTrip(t *testing.T) {
	bin, _ := goProgram(t)
	base := layerTar(t,
		entry{name: "etc/os-release", data: []byte(osReleaseText)},
		entry{name: "var/lib/dpkg/status", data: []byte(status)},
		entry{name: "usr/local/bin/tool", data: bin, mode: 0o755},
		entry{name: "usr/local/bin/old", data: bin, mode: 0o755},
	)
	top := layerTar(t,
		entry{name: "usr/local/bin/.wh.old"},
		entry{name: "usr/local/bin/script", data: []byte("#!/bin/sh\n"), mode: 0o755},
	)
	c := LayerCache{Dir: t.TempDir()}
	var scanned, cached []*Layer
	for i, raw := range [][]byte{base, top} {
		l, err := ScanLayer(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		d, _, _ := v1.SHA256(bytes.NewReader(raw))
		if _, ok := c.Get(d); ok {
			t.Fatalf("layer %d: a hit before it was stored", i)
		}
		if err := c.Put(d, l); err != nil {
			t.Fatal(err)
		}
		back, ok := c.Get(d)
		if !ok {
			t.Fatalf("layer %d: not found after Put", i)
		}
		scanned, cached = append(scanned, l), append(cached, back)
	}
	want := Merge("tool", "r/tool:1", "sha256:abc", scanned)
	got := Merge("tool", "r/tool:1", "sha256:abc", cached)
	if !reflect.DeepEqual(want, got) {
		t.Errorf("inventory from the cache differs:\n got %+v\nwant %+v", got, want)
	}
	if want.Count()[TypeGolang] == 0 || want.Count()[TypeDeb] != 2 {
		t.Errorf("the inventory compared is not the whole one: %v", want.Count())
	}

	// A damaged entry is a miss, and the zero cache holds nothing.
	d, _, _ := v1.SHA256(bytes.NewReader(base))
	if err := os.WriteFile(c.path(d), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(d); ok {
		t.Error("a damaged entry was a hit")
	}
	if err := (LayerCache{}).Put(d, scanned[0]); err != nil {
		t.Error(err)
	}
	if _, ok := (LayerCache{}).Get(d); ok {
		t.Error("the zero cache had a hit")
	}
	if !strings.Contains(c.path(d), scannerVersion) {
		t.Errorf("cache path %s does not carry the scanner's version", c.path(d))
	}
}
