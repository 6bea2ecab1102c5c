package config

import (
	"cmp"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The rules and defaults of one build runner and one GitOps runtime. They
// are written here once: Validate reports them for spec.runners[] and
// spec.runtimes[] (so 'onprem config validate' finds every one), and the
// render package, which installs runners and runtimes that come from flags
// too, applies the same defaults and refuses with the same rules by calling
// these functions.

// Names of what onprem makes for a runner or a runtime.
const (
	// ReleaseNameLimit is the longest Helm release name: Helm refuses a
	// longer one (it names the release's Secrets and labels).
	ReleaseNameLimit = 53
	// RunnerReleasePrefix and RuntimeReleasePrefix make the Helm release
	// (and component) name of a runner or a runtime from its name.
	RunnerReleasePrefix  = "runner-"
	RuntimeReleasePrefix = "runtime-"
	// RunnerEngineSuffix makes the build engine's namespace from the
	// runner's (see RunnerEngineNamespace).
	RunnerEngineSuffix = "-engine"
)

// Defaults of a runtime's access that the render applies (SetDefaults
// leaves the fields empty, as onprem.yaml documents them).
const (
	// DefaultRuntimeAccessMode is the mode of an access that sets none.
	DefaultRuntimeAccessMode = RuntimeAccessIngress
	// DefaultTunnelServerPort is the port of a tunnel server that sets
	// none.
	DefaultTunnelServerPort = 443
)

// Limits that follow from the names above.
const (
	// MaxRunnerNamespaceLength leaves room for RunnerEngineSuffix in a DNS
	// label: the engine's namespace is the runner's plus the suffix.
	MaxRunnerNamespaceLength = validation.DNS1123LabelMaxLength - len(RunnerEngineSuffix)
	// MaxRuntimeNameLength keeps the runtime's Helm release name
	// (RuntimeRelease) within ReleaseNameLimit.
	MaxRuntimeNameLength = ReleaseNameLimit - len(RuntimeReleasePrefix)
)

// RunnerRelease is the Helm release (and component) name of a runner. Not
// onprem-runner-NAME: with MaxRunnerNameLength, runner-NAME is always within
// ReleaseNameLimit.
func RunnerRelease(name string) string { return RunnerReleasePrefix + name }

// RuntimeRelease is the Helm release (and component) name of a runtime;
// MaxRuntimeNameLength keeps it within ReleaseNameLimit.
func RuntimeRelease(name string) string { return RuntimeReleasePrefix + name }

// RunnerEngineNamespace is the namespace of a runner's build engine: the one
// workload of a runner that needs more than the restricted Pod Security
// Standard (see charts/runner) lives apart from the agent and its builds.
func RunnerEngineNamespace(namespace string) string { return namespace + RunnerEngineSuffix }

// RunnerDefaults fills a runner's namespace (onprem-runner-NAME, when it
// has a name) and its concurrency (DefaultRunnerConcurrency) when unset.
func RunnerDefaults(r Runner) Runner {
	if r.Name != "" {
		setString(&r.Namespace, RunnerNamespacePrefix+r.Name)
	}
	if r.Concurrency == 0 {
		r.Concurrency = DefaultRunnerConcurrency
	}
	return r
}

// RuntimeDefaults names an unnamed runtime DefaultRuntimeName and puts it
// in the namespace named after it when none is given. (SetDefaults names
// only a single unnamed runtime of spec.runtimes: of several, none is
// guessed.)
func RuntimeDefaults(rt Runtime) Runtime {
	setString(&rt.Name, DefaultRuntimeName)
	setString(&rt.Namespace, rt.Name)
	return rt
}

// RuntimeAccessMode is the mode of a runtime's access:
// DefaultRuntimeAccessMode when unset.
func RuntimeAccessMode(a RuntimeAccess) string { return cmp.Or(a.Mode, DefaultRuntimeAccessMode) }

// TunnelServerPort is the port of a tunnel server: DefaultTunnelServerPort
// when unset.
func TunnelServerPort(t TunnelServer) int { return cmp.Or(t.Port, DefaultTunnelServerPort) }

// ValidateRunner checks a runner whose defaults are applied (see
// RunnerDefaults) with ValidateRunnerName, ValidateRunnerNamespace and
// ValidateRunnerConcurrency; path is the runner's (spec.runners[0]).
// It returns Errors, or nil.
func ValidateRunner(path string, r Runner) error {
	return collect(
		ValidateRunnerName(path+".name", r.Name),
		ValidateRunnerNamespace(path+".namespace", r.Namespace, r.Name),
		ValidateRunnerConcurrency(path+".concurrency", r.Concurrency),
	)
}

// ValidateRuntime checks a runtime whose defaults are applied (see
// RuntimeDefaults) with ValidateRuntimeName and ValidateRuntimeNamespace;
// path is the runtime's (spec.runtimes[0]). It returns Errors, or nil.
func ValidateRuntime(path string, rt Runtime) error {
	return collect(
		ValidateRuntimeName(path+".name", rt.Name),
		ValidateRuntimeNamespace(path+".namespace", rt.Namespace, rt.Name),
	)
}

// ValidateRunnerName checks a runner's name at path: required, at most
// MaxRunnerNameLength characters, a DNS label. It returns a FieldError, or
// nil.
func ValidateRunnerName(path, name string) error {
	switch {
	case name == "":
		return fieldError(path, "", "required: a unique name for the runner (a DNS label of at most "+strconv.Itoa(MaxRunnerNameLength)+" characters)")
	case len(name) > MaxRunnerNameLength:
		return fieldError(path, "", sprintf("%q is %d characters long: a runner name must be at most %d (its namespace and objects are named after it)", name, len(name), MaxRunnerNameLength))
	}
	return fieldError(path, "", checkDNSLabel(name))
}

// ValidateRunnerNamespace checks the namespace of the runner called name at
// path: a DNS label that is not one of Kubernetes' own, and at most
// MaxRunnerNamespaceLength characters so that its build engine's namespace
// (RunnerEngineNamespace) is a DNS label too. It returns a FieldError, or
// nil.
func ValidateRunnerNamespace(path, namespace, name string) error {
	if msg := checkNamespace(namespace, "the runner", RunnerNamespacePrefix+cmp.Or(name, "NAME")); msg != "" {
		return fieldError(path, "", msg)
	}
	if len(namespace) > MaxRunnerNamespaceLength {
		return fieldError(path, "give the runner a shorter namespace",
			sprintf("%q is %d characters long: a runner's namespace must be at most %d, so that its build engine's namespace (%s) is a DNS label too",
				namespace, len(namespace), MaxRunnerNamespaceLength, RunnerEngineNamespace(namespace)))
	}
	return nil
}

// ValidateRunnerConcurrency checks a runner's concurrency at path: 1 to
// MaxRunnerConcurrency, or 0 for DefaultRunnerConcurrency. It returns a
// FieldError, or nil.
func ValidateRunnerConcurrency(path string, n int) error {
	if n < 0 || n > MaxRunnerConcurrency {
		return fieldError(path, "", sprintf("%d is out of range (valid: 1 to %d; 0 or unset means %d)", n, MaxRunnerConcurrency, DefaultRunnerConcurrency))
	}
	return nil
}

// ValidateRuntimeName checks a runtime's name at path: required (only a
// single runtime of spec.runtimes may leave it out, see SetDefaults), a DNS
// label, and at most MaxRuntimeNameLength characters so that its Helm
// release (RuntimeRelease) is within ReleaseNameLimit. It returns a
// FieldError, or nil.
func ValidateRuntimeName(path, name string) error {
	if name == "" {
		return fieldError(path, "", "required: a unique name for the runtime (a DNS label); only a single runtime may leave it out, and is then named "+DefaultRuntimeName)
	}
	if msg := checkDNSLabel(name); msg != "" {
		return fieldError(path, "", msg)
	}
	if len(name) > MaxRuntimeNameLength {
		return fieldError(path, "give the runtime a shorter name",
			sprintf("%q is %d characters long: a runtime name must be at most %d, so that its Helm release (%s) is within Helm's limit of %d characters",
				name, len(name), MaxRuntimeNameLength, RuntimeRelease(name), ReleaseNameLimit))
	}
	return nil
}

// ValidateRuntimeNamespace checks the namespace of the runtime called name
// at path: a DNS label that is not one of Kubernetes' own. It returns a
// FieldError, or nil.
func ValidateRuntimeNamespace(path, namespace, name string) error {
	example := name
	if example == "" || IsSystemNamespace(example) {
		example = DefaultRuntimeName
	}
	return fieldError(path, "", checkNamespace(namespace, "the runtime", example))
}

// ValidateTunnelServer checks the tunnel server of a runtime in access mode
// tunnel at path (spec.runtimes[0].access.tunnelServer). It is required:
// the chart's default is the vendor's hosted server, which onprem never
// uses (a cluster with no internet cannot reach it, and a platform behind
// a firewall must not be served through it). It returns Errors, or nil.
func ValidateTunnelServer(path string, t TunnelServer) error {
	const what = "mode tunnel needs a tunnel server of yours (an frp server): %s; onprem does not use the vendor's hosted one"
	var host, subdomain, port error
	if t.Host == "" {
		host = fieldError(path+".host", "", "required: "+fmt.Sprintf(what, "the host the runtime's tunnel client registers with, reachable from the runtime's cluster, e.g. tunnels-register.example.com"))
	} else {
		host = fieldError(path+".host", "", checkDNSSubdomain(t.Host))
	}
	if t.SubdomainHost == "" {
		subdomain = fieldError(path+".subdomainHost", "", "required: "+fmt.Sprintf(what, "the domain under which it serves each runtime as ACCOUNT-NAME.SUBDOMAINHOST, reachable from the platform, e.g. tunnels.example.com"))
	} else {
		subdomain = fieldError(path+".subdomainHost", "", checkDNSSubdomain(t.SubdomainHost))
	}
	if t.Port != 0 && len(validation.IsValidPortNum(t.Port)) > 0 {
		port = fieldError(path+".port", "", sprintf("%d is not a port (valid: 1 to 65535; default %d)", t.Port, DefaultTunnelServerPort))
	}
	return collect(host, subdomain, port)
}

// fieldError is the problem msg (with hint) at path, or nil when msg is
// empty.
func fieldError(path, hint, msg string) error {
	if msg == "" {
		return nil
	}
	return FieldError{Path: path, Message: msg, Hint: hint}
}

// collect gathers the problems of several rules as Errors, or nil.
func collect(errs ...error) error {
	var out Errors
	for _, err := range errs {
		if fe, ok := err.(FieldError); ok {
			out = append(out, fe)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
