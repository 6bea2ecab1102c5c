package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// KustomizationFiles are the names kustomize accepts for its file.
var KustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// OverlayProblem says what is wrong with an overlay folder (spec.overlays),
// "" when nothing is: it must exist, hold a kustomization of kind
// Component (or a Kustomization without resources, read as one) that
// parses, and every file its patches and resources name.
func OverlayProblem(dir string) string {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("folder %s does not exist (a relative path is relative to onprem.yaml's folder)", dir)
	case err != nil:
		return fmt.Sprintf("%s: %v", dir, err)
	case !info.IsDir():
		return fmt.Sprintf("%s is not a folder; an overlay is a folder holding a kustomization.yaml of kind Component", dir)
	}
	var kfile string
	for _, n := range KustomizationFiles {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			kfile = filepath.Join(dir, n)
			break
		}
	}
	if kfile == "" {
		return fmt.Sprintf("%s has no kustomization.yaml; write one of kind Component (apiVersion kustomize.config.k8s.io/v1alpha1)", dir)
	}
	data, err := os.ReadFile(kfile)
	if err != nil {
		return fmt.Sprintf("%s: %v", kfile, err)
	}
	var doc map[string]any
	blank := len(bytes.TrimSpace(data)) == 0
	if err := yaml.Unmarshal(data, &doc); err != nil && !blank {
		return fmt.Sprintf("%s: not a kustomization: %v", kfile, err)
	}
	if doc == nil {
		return fmt.Sprintf("%s is empty: write kind: Component (apiVersion kustomize.config.k8s.io/v1alpha1) and what the overlay changes (patches, labels, images, ...), or remove the folder from spec.overlays", kfile)
	}
	var k struct {
		Kind                  string   `json:"kind"`
		Resources             []string `json:"resources"`
		PatchesStrategicMerge []string `json:"patchesStrategicMerge"`
		Patches               []struct {
			Path string `json:"path"`
		} `json:"patches"`
		PatchesJSON6902 []struct {
			Path string `json:"path"`
		} `json:"patchesJson6902"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return fmt.Sprintf("%s: not a kustomization: %v", kfile, err)
	}
	switch k.Kind {
	case "Component":
	case "", "Kustomization":
		if len(k.Resources) > 0 {
			return fmt.Sprintf("%s is a Kustomization with resources; an overlay changes the platform's objects, so write it as kind: Component (apiVersion kustomize.config.k8s.io/v1alpha1) and keep any new objects under its resources", kfile)
		}
	default:
		return fmt.Sprintf("%s: kind %s is not a kustomize Component", kfile, k.Kind)
	}
	var files []string
	files = append(files, k.Resources...)
	files = append(files, k.PatchesStrategicMerge...)
	for _, p := range k.Patches {
		if p.Path != "" {
			files = append(files, p.Path)
		}
	}
	for _, p := range k.PatchesJSON6902 {
		if p.Path != "" {
			files = append(files, p.Path)
		}
	}
	for _, f := range files {
		if f == "" || filepath.IsAbs(f) || containsScheme(f) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return fmt.Sprintf("%s names %s, which is not in %s", kfile, f, dir)
		}
	}
	return ""
}

// containsScheme says whether a kustomization entry is a URL.
func containsScheme(s string) bool {
	for i := 0; i < len(s) && i < 10; i++ {
		if s[i] == ':' {
			return true
		}
	}
	return false
}
