package images

import (
	"testing"

	"onprem.dev/onprem/installer/release"
)

func TestReference(t *testing.T) {
	d := "sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	cases := []struct {
		img  release.Image
		want string
	}{
		{release.Image{Repository: "docker.io/library/redis", Tag: "7.2.5"}, "docker.io/library/redis:7.2.5"},
		{release.Image{Repository: "docker.io/library/redis", Tag: "7.2.5", Digest: d}, "docker.io/library/redis:7.2.5@" + d},
		{release.Image{Repository: "pipelines-api", Tag: "2.7.0", Platform: true}, "quay.io/codefresh/pipelines-api:2.7.0"},
	}
	for _, c := range cases {
		if got := Reference(c.img, "quay.io/codefresh/"); got != c.want {
			t.Errorf("Reference(%+v) = %s, want %s", c.img, got, c.want)
		}
	}
}

func TestRelocate(t *testing.T) {
	cases := []struct{ repo, host, prefix, want string }{
		{"docker.io/library/redis", "registry.internal:5000", "onprem", "registry.internal:5000/onprem/library/redis"},
		{"quay.io/codefresh/pipelines-api", "registry.internal", "", "registry.internal/codefresh/pipelines-api"},
		{"docker.io/hashicorp/consul", "10.0.0.5:5000", "/a/b/", "10.0.0.5:5000/a/b/hashicorp/consul"},
		{"redis", "reg.local", "x", "reg.local/x/library/redis"},
	}
	for _, c := range cases {
		got, err := Relocate(c.repo, c.host, c.prefix)
		if err != nil {
			t.Errorf("Relocate(%s): %v", c.repo, err)
			continue
		}
		if got != c.want {
			t.Errorf("Relocate(%s, %s, %s) = %s, want %s", c.repo, c.host, c.prefix, got, c.want)
		}
	}
	if _, err := Relocate("Not A Repo", "reg.local", ""); err == nil {
		t.Error("bad repository accepted")
	}
	if _, err := Relocate("docker.io/library/redis", "reg.local", "UPPER"); err == nil {
		t.Error("bad prefix accepted")
	}
}
