package render

import (
	"context"
	"errors"
	"strings"
	"testing"

	"onprem.dev/onprem/installer/config"
)

// Render refuses a runner or a runtime only with config's rules: each
// refusal wraps the FieldError that config's rule returns for the value,
// and says it the way the commands always did.
func TestRefusalsAreConfigRules(t *testing.T) {
	in, rel := load(t, "minimal")
	ch := fixtureChart(t, rel.Runtime.ChartVersion)
	long := strings.Repeat("n", 57)
	withAccount := *in
	withAccount.Spec.RuntimeConfig.AccountID = "acc"
	for _, c := range []struct {
		name string
		run  func() error
		rule error
		want string
	}{
		{"runner name", func() error {
			_, err := RenderRunner(context.Background(), RunnerOptions{Installation: in, Release: rel, Runner: config.Runner{Name: "Bad_Name"}})
			return err
		}, config.ValidateRunnerName(RunnerPath+".name", "Bad_Name"), `runner name "Bad_Name" is not a valid DNS label`},
		{"runner engine namespace", func() error {
			_, err := RunnerDefaults(config.Runner{Name: "gpu", Namespace: long})
			return err
		}, config.ValidateRunnerNamespace(RunnerPath+".namespace", long, "gpu"), `runner gpu: namespace "` + long + `" is 57 characters long: a runner's namespace must be at most 56`},
		{"runner concurrency", func() error {
			_, err := RunnerDefaults(config.Runner{Name: "gpu", Concurrency: 1000})
			return err
		}, config.ValidateRunnerConcurrency(RunnerPath+".concurrency", 1000), `runner gpu: concurrency 1000 is out of range (valid: 1 to 256; 0 or unset means 4)`},
		{"runner system namespace", func() error {
			_, err := RunnerDefaults(config.Runner{Name: "gpu", Namespace: "kube-system"})
			return err
		}, config.ValidateRunnerNamespace(RunnerPath+".namespace", "kube-system", "gpu"), `runner gpu: namespace "kube-system" is a namespace of Kubernetes itself`},
		{"runtime release name", func() error {
			_, err := RenderRuntime(context.Background(), RuntimeOptions{Installation: in, Release: rel, Runtime: config.Runtime{Name: strings.Repeat("a", 46)}, Chart: ch})
			return err
		}, config.ValidateRuntimeName(RuntimePath+".name", strings.Repeat("a", 46)), `runtime name "` + strings.Repeat("a", 46) + `" is 46 characters long: a runtime name must be at most 45, so that its Helm release`},
		{"runtime namespace", func() error {
			_, err := RuntimeDefaults(config.Runtime{Name: "edge", Namespace: "NS"})
			return err
		}, config.ValidateRuntimeNamespace(RuntimePath+".namespace", "NS", "edge"), `runtime edge: namespace "NS" is not a valid DNS label`},
		{"runtime tunnel server", func() error {
			_, err := RuntimeContractValues(&withAccount, config.Runtime{Name: "edge", Access: config.RuntimeAccess{Mode: config.RuntimeAccessTunnel}}, rel.Runtime, true, false)
			return err
		}, config.FieldError{Path: RuntimePath + ".access.tunnelServer.host", Message: "required: mode tunnel needs a tunnel server of yours (an frp server): the host the runtime's tunnel client registers with, reachable from the runtime's cluster, e.g. tunnels-register.example.com; onprem does not use the vendor's hosted one"},
			`access mode tunnel needs a tunnel server of yours: set spec.runtimes[].access.tunnelServer.host and .subdomainHost`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.rule == nil {
				t.Fatal("config's rule accepts the value")
			}
			err := c.run()
			var fe config.FieldError
			if !errors.As(err, &fe) || fe != c.rule {
				t.Errorf("err = %v, want one wrapping config's %#v", err, c.rule)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
			var ce config.Errors
			if errors.As(err, &ce) {
				t.Error("a refusal is not a problem of the configuration file (config.Errors)")
			}
		})
	}
}
