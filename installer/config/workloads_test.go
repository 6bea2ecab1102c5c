package config

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The rules of one runner and one runtime (workloads.go), which render
// applies too: each good value passes, each bad one is a FieldError naming
// the field path it was given, saying what is valid.
func TestWorkloadRules(t *testing.T) {
	const dns = `is not a valid DNS label: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character`
	cases := []struct {
		name string
		err  error
		want string // "" for valid
	}{
		{"runner name", ValidateRunnerName("p", "gpu"), ""},
		{"runner name of the longest", ValidateRunnerName("p", strings.Repeat("a", MaxRunnerNameLength)), ""},
		{"runner name missing", ValidateRunnerName("spec.runners[0].name", ""),
			`spec.runners[0].name: required: a unique name for the runner (a DNS label of at most 40 characters)`},
		{"runner name too long", ValidateRunnerName("spec.runners[0].name", strings.Repeat("a", 41)),
			`spec.runners[0].name: "` + strings.Repeat("a", 41) + `" is 41 characters long: a runner name must be at most 40 (its namespace and objects are named after it)`},
		{"runner name not a label", ValidateRunnerName("spec.runners[0].name", "Bad_Name"), `spec.runners[0].name: "Bad_Name" ` + dns},

		{"runner namespace", ValidateRunnerNamespace("p", "ci", "gpu"), ""},
		{"runner namespace of the longest", ValidateRunnerNamespace("p", strings.Repeat("n", 56), "gpu"), ""},
		{"runner namespace leaves no room for the engine's", ValidateRunnerNamespace("spec.runners[1].namespace", strings.Repeat("n", 57), "gpu"),
			`spec.runners[1].namespace: "` + strings.Repeat("n", 57) + `" is 57 characters long: a runner's namespace must be at most 56, so that its build engine's namespace (` + strings.Repeat("n", 57) + `-engine) is a DNS label too; give the runner a shorter namespace`},
		{"runner namespace not a label", ValidateRunnerNamespace("spec.runners[1].namespace", "NS", "gpu"), `spec.runners[1].namespace: "NS" ` + dns},
		{"runner namespace of Kubernetes", ValidateRunnerNamespace("spec.runners[1].namespace", "kube-system", "gpu"),
			`spec.runners[1].namespace: "kube-system" is a namespace of Kubernetes itself`},

		{"runner concurrency", ValidateRunnerConcurrency("p", 1), ""},
		{"runner concurrency of the most", ValidateRunnerConcurrency("p", MaxRunnerConcurrency), ""},
		{"runner concurrency unset", ValidateRunnerConcurrency("p", 0), ""},
		{"runner concurrency too high", ValidateRunnerConcurrency("spec.runners[2].concurrency", 257),
			`spec.runners[2].concurrency: 257 is out of range (valid: 1 to 256; 0 or unset means 4)`},
		{"runner concurrency negative", ValidateRunnerConcurrency("spec.runners[2].concurrency", -1),
			`spec.runners[2].concurrency: -1 is out of range (valid: 1 to 256; 0 or unset means 4)`},

		{"runtime name", ValidateRuntimeName("p", "edge"), ""},
		{"runtime name of the longest", ValidateRuntimeName("p", strings.Repeat("a", MaxRuntimeNameLength)), ""},
		{"runtime name missing", ValidateRuntimeName("spec.runtimes[0].name", ""),
			`spec.runtimes[0].name: required: a unique name for the runtime (a DNS label); only a single runtime may leave it out, and is then named codefresh`},
		{"runtime name not a label", ValidateRuntimeName("spec.runtimes[0].name", "Edge_1"), `spec.runtimes[0].name: "Edge_1" ` + dns},
		{"runtime name makes too long a release", ValidateRuntimeName("spec.runtimes[0].name", strings.Repeat("a", 46)),
			`spec.runtimes[0].name: "` + strings.Repeat("a", 46) + `" is 46 characters long: a runtime name must be at most 45, so that its Helm release (runtime-` + strings.Repeat("a", 46) + `) is within Helm's limit of 53 characters; give the runtime a shorter name`},

		{"runtime namespace", ValidateRuntimeNamespace("p", "edge", "edge"), ""},
		{"runtime namespace not a label", ValidateRuntimeNamespace("spec.runtimes[0].namespace", "NS", "edge"), `spec.runtimes[0].namespace: "NS" ` + dns},
		{"runtime namespace of Kubernetes", ValidateRuntimeNamespace("spec.runtimes[0].namespace", "default", "default"),
			`spec.runtimes[0].namespace: "default" is a namespace of Kubernetes itself (default, kube-node-lease, kube-public, kube-system, and every name starting with kube-): onprem labels the runtime's namespace for the restricted Pod Security Standard and puts default-deny NetworkPolicies in it, which would break what already runs there; give the runtime a namespace of its own, e.g. codefresh`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want == "" {
				if c.err != nil {
					t.Fatalf("unexpected: %v", c.err)
				}
				return
			}
			var fe FieldError
			if !errors.As(c.err, &fe) {
				t.Fatalf("err = %#v, want a FieldError", c.err)
			}
			if got := c.err.Error(); !strings.HasPrefix(got, c.want) {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// The limits are what the names onprem makes need: Helm's release names,
// the engine's DNS-label namespace.
func TestWorkloadNames(t *testing.T) {
	if n := len(RunnerRelease(strings.Repeat("a", MaxRunnerNameLength))); n > ReleaseNameLimit {
		t.Errorf("the release of the longest runner name is %d characters long", n)
	}
	if n := len(RuntimeRelease(strings.Repeat("a", MaxRuntimeNameLength))); n != ReleaseNameLimit {
		t.Errorf("the release of the longest runtime name is %d characters long, want %d", n, ReleaseNameLimit)
	}
	if ns := RunnerEngineNamespace(strings.Repeat("n", MaxRunnerNamespaceLength)); len(validation.IsDNS1123Label(ns)) > 0 {
		t.Errorf("the engine's namespace of the longest runner namespace is not a DNS label: %s", ns)
	}
	if RunnerRelease("gpu") != "runner-gpu" || RuntimeRelease("edge") != "runtime-edge" || RunnerEngineNamespace("ci") != "ci-engine" {
		t.Error("names changed")
	}
}

func TestWorkloadDefaults(t *testing.T) {
	if r := RunnerDefaults(Runner{Name: "gpu"}); r.Namespace != "onprem-runner-gpu" || r.Concurrency != 4 {
		t.Errorf("runner defaults: %+v", r)
	}
	if r := RunnerDefaults(Runner{Name: "gpu", Namespace: "ci", Concurrency: 9}); r.Namespace != "ci" || r.Concurrency != 9 {
		t.Errorf("a runner's own values: %+v", r)
	}
	if r := RunnerDefaults(Runner{}); r.Namespace != "" {
		t.Errorf("an unnamed runner got namespace %q", r.Namespace)
	}
	if rt := RuntimeDefaults(Runtime{}); rt.Name != "codefresh" || rt.Namespace != "codefresh" {
		t.Errorf("runtime defaults: %+v", rt)
	}
	if rt := RuntimeDefaults(Runtime{Name: "edge"}); rt.Namespace != "edge" {
		t.Errorf("runtime namespace: %+v", rt)
	}
	if rt := RuntimeDefaults(Runtime{Name: "edge", Namespace: "gitops"}); rt.Namespace != "gitops" {
		t.Errorf("a runtime's own namespace: %+v", rt)
	}
}

// ValidateRunner and ValidateRuntime gather every rule of one, each at
// its field.
func TestValidateOneWorkload(t *testing.T) {
	if err := ValidateRunner("spec.runners[0]", RunnerDefaults(Runner{Name: "gpu"})); err != nil {
		t.Error(err)
	}
	if err := ValidateRuntime("spec.runtimes[0]", RuntimeDefaults(Runtime{})); err != nil {
		t.Error(err)
	}
	assertErrorPrefixes(t, ValidateRunner("r", Runner{Name: "Bad_Name", Namespace: "kube-x", Concurrency: 1000}),
		`r.name: "Bad_Name" is not a valid DNS label`,
		`r.namespace: "kube-x" is a namespace of Kubernetes itself`,
		`r.concurrency: 1000 is out of range`)
	assertErrorPrefixes(t, ValidateRuntime("rt", Runtime{Name: strings.Repeat("a", 50), Namespace: "NS"}),
		`rt.name: "`+strings.Repeat("a", 50)+`" is 50 characters long`,
		`rt.namespace: "NS" is not a valid DNS label`)
}

// 'config validate' reports what only render used to refuse: a runtime
// name too long for its Helm release, a runner namespace too long for its
// engine's, each at its line with the fix.
func TestValidateReleaseNameAndEngineNamespace(t *testing.T) {
	_, _, err := loadTestdata(t, "bad-release-names.yaml")
	assertErrors(t, err,
		`testdata/bad-release-names.yaml:8: spec.runners[0].namespace: "a-namespace-of-fifty-seven-characters-for-a-build-runners" is 57 characters long: a runner's namespace must be at most 56, so that its build engine's namespace (a-namespace-of-fifty-seven-characters-for-a-build-runners-engine) is a DNS label too; give the runner a shorter namespace`,
		`testdata/bad-release-names.yaml:10: spec.runtimes[0].name: "a-runtime-name-of-forty-six-characters-so-long" is 46 characters long: a runtime name must be at most 45, so that its Helm release (runtime-a-runtime-name-of-forty-six-characters-so-long) is within Helm's limit of 53 characters; give the runtime a shorter name`)
}

// assertErrorPrefixes checks that err is Errors whose lines start with
// want, one each.
func assertErrorPrefixes(t *testing.T, err error, want ...string) {
	t.Helper()
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error %T (%v) is not Errors", err, err)
	}
	if len(es) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(es), len(want), err)
	}
	for i, e := range es {
		if !strings.HasPrefix(e.Error(), want[i]) {
			t.Errorf("got  %s\nwant %s...", e.Error(), want[i])
		}
	}
}

func TestTunnelServerRule(t *testing.T) {
	if err := ValidateTunnelServer("p", TunnelServer{Host: "tunnels-register.example.com", SubdomainHost: "tunnels.example.com", Port: 7000}); err != nil {
		t.Error(err)
	}
	assertErrorPrefixes(t, ValidateTunnelServer("spec.runtimes[0].access.tunnelServer", TunnelServer{}),
		`spec.runtimes[0].access.tunnelServer.host: required: mode tunnel needs a tunnel server of yours (an frp server): the host`,
		`spec.runtimes[0].access.tunnelServer.subdomainHost: required: mode tunnel needs a tunnel server of yours (an frp server): the domain`)
	assertErrorPrefixes(t, ValidateTunnelServer("ts", TunnelServer{Host: "Bad_Host", SubdomainHost: "t.example.com", Port: 70000}),
		`ts.host: "Bad_Host" is not a valid DNS subdomain`,
		`ts.port: 70000 is not a port (valid: 1 to 65535; default 443)`)
}

func TestRuntimeAccessDefaults(t *testing.T) {
	if m := RuntimeAccessMode(RuntimeAccess{}); m != RuntimeAccessIngress {
		t.Errorf("default mode %q", m)
	}
	if m := RuntimeAccessMode(RuntimeAccess{Mode: RuntimeAccessURL}); m != RuntimeAccessURL {
		t.Errorf("mode %q", m)
	}
	if p := TunnelServerPort(TunnelServer{}); p != 443 {
		t.Errorf("default port %d", p)
	}
	if p := TunnelServerPort(TunnelServer{Port: 7000}); p != 7000 {
		t.Errorf("port %d", p)
	}
}
