package config

import (
	"reflect"
	"regexp"
	"testing"
)

func digestOf(t *testing.T, yaml string) string {
	t.Helper()
	in, _, err := Decode("x.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	d, err := in.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDigest(t *testing.T) {
	base := digestOf(t, `apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: "2.9.0"
  domain: ci.example.com
  components:
    a: {values: {x: 1, y: [1, 2], z: {p: q, r: s}}}
    b: {enabled: false}
`)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(base) {
		t.Fatalf("digest %q is not sha256 hex", base)
	}

	same := map[string]string{
		"keys reordered, comments, flow style": `# a comment
kind: Installation
spec:
  components:
    b:
      enabled: false
    a:
      values:
        z: {r: s, p: q}
        y:
          - 1
          - 2
        x: 1
  domain: ci.example.com   # trailing comment
  version: '2.9.0'
apiVersion: onprem.dev/v1alpha1
`,
		"defaults spelt out": `apiVersion: onprem.dev/v1alpha1
kind: Installation
metadata: {name: onprem}
spec:
  version: "2.9.0"
  domain: ci.example.com
  namespace: onprem
  profile: small
  tls: {mode: selfSigned}
  ingress: {mode: install, className: onprem, serviceType: LoadBalancer}
  modules: {pipelines: {enabled: true}, gitops: {enabled: true}}
  databases: {mongodb: {mode: internal}}
  components:
    a: {values: {x: 1, y: [1, 2], z: {p: q, r: s}}}
    b: {enabled: false}
`,
	}
	for name, yaml := range same {
		if got := digestOf(t, yaml); got != base {
			t.Errorf("%s: digest %s, want %s", name, got, base)
		}
	}

	different := map[string]string{
		"another value": `apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: "2.9.0"
  domain: ci.example.com
  components:
    a: {values: {x: 2, y: [1, 2], z: {p: q, r: s}}}
    b: {enabled: false}
`,
		"list order": `apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: "2.9.0"
  domain: ci.example.com
  components:
    a: {values: {x: 1, y: [2, 1], z: {p: q, r: s}}}
    b: {enabled: false}
`,
	}
	for name, yaml := range different {
		if got := digestOf(t, yaml); got == base {
			t.Errorf("%s: digest did not change", name)
		}
	}
}

func TestDigestLeavesTheInstallationAlone(t *testing.T) {
	in, _, err := decodeFile(t, "minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	before := clone(t, in)
	if _, err := in.Digest(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, in) {
		t.Fatal("Digest modified its receiver")
	}
	var nilIn *Installation
	if _, err := nilIn.Digest(); err == nil {
		t.Fatal("Digest of nil must fail")
	}
}
