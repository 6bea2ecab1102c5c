package runtime

import (
	"errors"
	"strings"
	"testing"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/state"
)

func platformWith(rts map[string]state.Runtime, rc *state.RuntimeConfig, spec config.RuntimeConfig) *Platform {
	in := &config.Installation{}
	in.Spec.RuntimeConfig = spec
	return &Platform{State: &state.State{Runtimes: rts, RuntimeConfig: rc}, Installation: in}
}

// The configuration runtime goes last, or after designate-config names
// another; the message gives that command.
func TestCheckUninstall(t *testing.T) {
	two := map[string]state.Runtime{"a": {}, "b": {}}
	var ce *ConflictError
	err := CheckUninstall(platformWith(two, &state.RuntimeConfig{URL: "u", ConfigRuntime: "a"}, config.RuntimeConfig{}), "a")
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "onprem runtime designate-config b") {
		t.Errorf("config runtime with others: %v", err)
	}
	if err := CheckUninstall(platformWith(two, &state.RuntimeConfig{URL: "u", ConfigRuntime: "a"}, config.RuntimeConfig{}), "b"); err != nil {
		t.Errorf("another runtime: %v", err)
	}
	if err := CheckUninstall(platformWith(map[string]state.Runtime{"a": {}}, &state.RuntimeConfig{URL: "u", ConfigRuntime: "a"}, config.RuntimeConfig{}), "a"); err != nil {
		t.Errorf("the last runtime: %v", err)
	}
	var nf *NotFoundError
	if err := CheckUninstall(platformWith(two, nil, config.RuntimeConfig{}), "zz"); !errors.As(err, &nf) || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("unknown runtime: %v", err)
	}
}

// The repository is the recorded one once runtimes share it; another in
// the configuration is refused rather than silently split.
func TestRepository(t *testing.T) {
	rec := &state.RuntimeConfig{URL: "https://git.example.com/a.git", Path: "p"}
	got, err := Repository(platformWith(map[string]state.Runtime{"a": {}}, rec, config.RuntimeConfig{}))
	if err != nil || got.URL != rec.URL || got.Path != "p" {
		t.Errorf("recorded: %+v %v", got, err)
	}
	var ce *ConflictError
	other := config.RuntimeConfig{Repository: config.GitRepository{URL: "https://git.example.com/b.git"}}
	if _, err := Repository(platformWith(map[string]state.Runtime{"a": {}}, rec, other)); !errors.As(err, &ce) || !strings.Contains(err.Error(), "cannot change while runtimes use it") {
		t.Errorf("changed repository: %v", err)
	}
	var ie *InputError
	if _, err := Repository(platformWith(nil, nil, config.RuntimeConfig{})); !errors.As(err, &ie) || !strings.Contains(err.Error(), "spec.runtimeConfig.repository.url") {
		t.Errorf("no repository: %v", err)
	}
	got, err = Repository(platformWith(nil, nil, other))
	if err != nil || got.URL != other.Repository.URL {
		t.Errorf("from the configuration: %+v %v", got, err)
	}
}

func TestCheckSource(t *testing.T) {
	ok := GitSourceOptions{Runtime: "a", Name: "apps", Repository: config.GitRepository{URL: "https://git.example.com/apps.git", Path: "prod/eu"}}
	if err := checkSource(ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mod  func(*GitSourceOptions)
		want string
	}{
		{func(o *GitSourceOptions) { o.Name = "Apps" }, `git source name "Apps"`},
		{func(o *GitSourceOptions) { o.Repository.URL = "" }, "--repo is required"},
		{func(o *GitSourceOptions) { o.Repository.Path = "../x" }, "clean relative folder"},
		{func(o *GitSourceOptions) { o.Repository.Path = "/abs" }, "clean relative folder"},
		{func(o *GitSourceOptions) { o.Destination = "NS" }, `destination namespace "NS"`},
	} {
		o := ok
		tc.mod(&o)
		if err := checkSource(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", o, err, tc.want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	if got := redactURL("https://user:tok@git.example.com/a.git"); got != "https://git.example.com/a.git" {
		t.Errorf("redact: %s", got)
	}
	if got := redactURL("https://git.example.com/a.git"); got != "https://git.example.com/a.git" {
		t.Errorf("plain: %s", got)
	}
}
