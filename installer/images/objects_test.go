package images

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const rendered = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: controller}
spec:
  template:
    spec:
      initContainers: [{name: init, image: "quay.io/codefresh/cap-app-proxy-init:28608a6"}]
      containers:
        - name: controller
          image: quay.io/codefresh/workflow-controller:v3.5.9
          args: [--configmap, cm, --executor-image, "quay.io/codefresh/argoexec:v3.5.9", "--sidecar-image=docker.io/library/busybox:1.36"]
          env:
            - {name: RUNNER_IMAGE, value: "ghcr.io/acme/runner:2"}
            - {name: IMAGE_PULL_POLICY, value: Always}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: job, image: "alpine/kubectl:1.34.1"}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: config}
data:
  enrichmentGitEnrichmentImage: quay.io/codefreshplugins/git-info:1.1.17-main
  argoCdUrl: http://argo-cd-server:80
  controller-config.yaml: |
    eventBus:
      nats:
        versions:
        - version: 0.22.1
          natsStreamingImage: nats-streaming:0.25.6
          # a comment
    executor:
      image:
        registry: quay.io
        repository: codefresh/argoexec
        tag: v3.5.9
    exporter:
      image: ghcr.io/oliver006/redis_exporter
      tag: v1.69.0
    app:
      image:
        repository: quay.io/codefresh/cap-app-proxy
        tag: 28608a6
    git:
      repository: https://github.com/acme/apps
  script: |
    echo image: quay.io/not/an-image:1
---
apiVersion: v1
kind: Secret
metadata: {name: s}
stringData: {image: "quay.io/secret/ignored:1"}
`

func objects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// The images of rendered objects: containers and init containers of every
// pod template, and what the chart writes into configuration (arguments,
// environment, ConfigMap keys and the YAML held in ConfigMaps, whole or as
// parts); not the other strings of a ConfigMap, nor Secrets.
func TestImagesInObjects(t *testing.T) {
	found, err := InObjects(objects(t))
	if err != nil {
		t.Fatal(err)
	}
	var pods, config []string
	for _, f := range found {
		if f.Pod {
			pods = append(pods, f.Ref)
		} else {
			config = append(config, f.Ref)
		}
	}
	if want := []string{"quay.io/codefresh/cap-app-proxy-init:28608a6", "quay.io/codefresh/workflow-controller:v3.5.9", "alpine/kubectl:1.34.1"}; !slices.Equal(pods, want) {
		t.Errorf("pod images %v, want %v", pods, want)
	}
	slices.Sort(config)
	want := []string{
		"docker.io/library/busybox:1.36",
		"ghcr.io/acme/runner:2",
		"ghcr.io/oliver006/redis_exporter",
		"nats-streaming:0.25.6",
		"quay.io/codefresh/argoexec:v3.5.9", "quay.io/codefresh/argoexec:v3.5.9",
		"quay.io/codefresh/cap-app-proxy:28608a6",
		"quay.io/codefreshplugins/git-info:1.1.17-main",
	}
	if !slices.Equal(config, want) {
		t.Errorf("configuration images\n%v\nwant\n%v", config, want)
	}
	refs, err := References(objects(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 9 || slices.Contains(refs, "ghcr.io/oliver006/redis_exporter") {
		t.Errorf("pullable references %v: want the 9 with a tag (the exporter's tag is apart)", refs)
	}
}

// Relocation moves every one of them, tag kept, and nothing else: the
// Git repository, the script and the Secret stay as they were.
func TestRelocateObjects(t *testing.T) {
	objs := objects(t)
	if err := RelocateObjects(objs, "registry.local:5000", "mirror"); err != nil {
		t.Fatal(err)
	}
	found, err := InObjects(objs)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if !strings.HasPrefix(f.Ref, "registry.local:5000/mirror/") {
			t.Errorf("%s %s: %s not relocated", f.Object, f.Field, f.Ref)
		}
	}
	dep, cm := objs[0], objs[2]
	args, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := args[0].(map[string]any)
	if got := c["args"].([]any); got[3] != "registry.local:5000/mirror/codefresh/argoexec:v3.5.9" || got[4] != "--sidecar-image=registry.local:5000/mirror/library/busybox:1.36" || got[1] != "cm" {
		t.Errorf("args %v", got)
	}
	if got := c["env"].([]any)[1].(map[string]any)["value"]; got != "Always" {
		t.Errorf("IMAGE_PULL_POLICY changed to %v", got)
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(data["controller-config.yaml"]), &doc); err != nil {
		t.Fatal(err)
	}
	exec := doc["executor"].(map[string]any)["image"].(map[string]any)
	if exec["registry"] != "registry.local:5000" || exec["repository"] != "mirror/codefresh/argoexec" || exec["tag"] != "v3.5.9" {
		t.Errorf("executor image parts %v", exec)
	}
	if doc["git"].(map[string]any)["repository"] != "https://github.com/acme/apps" {
		t.Errorf("a Git repository was taken for an image: %v", doc["git"])
	}
	if strings.TrimSpace(data["script"]) != "echo image: quay.io/not/an-image:1" || data["argoCdUrl"] != "http://argo-cd-server:80" {
		t.Errorf("other data changed: %q %q", data["script"], data["argoCdUrl"])
	}
	if objs[3].Object["stringData"].(map[string]any)["image"] != "quay.io/secret/ignored:1" {
		t.Error("a Secret was changed")
	}
}
